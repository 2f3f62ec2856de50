"""Continuous batching in miniature: requests with different specs join and leave a running batch.

Each step: fill one bitmask row per live request from its matcher (``fill_next_token_bitmask``),
apply it to the logits (``apply_mask``), sample with the batched ``Sampler``, advance each matcher
(``accept_token``) and its stop checker; finished requests leave (``SamplingBatch.filter``) and
waiting ones join (``SamplingBatch.merge``). The "model" is a seeded random logits source so the
example runs anywhere in a second; swap in a real forward pass per row.

Run: ``python examples/engine_loop.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grammask import GrammarCompiler, JsonSchema, Regex, apply_mask
from grammask.bundled import llama32_tokenizer_info
from grammask.grammars.base import Matcher
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.sampler import Sampler, SamplingBatch, SamplingParams
from grammask.sampler.stop import StopChecker


@dataclass
class Request:
    name: str
    spec: object
    params: SamplingParams
    arrives_at: int
    matcher: Matcher | None = None
    stop: StopChecker | None = None
    text: str = ""
    finish_reason: str = ""
    steps: list[int] = field(default_factory=list)


def default_requests() -> list[Request]:
    return [
        Request("person", JsonSchema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"],
                "additionalProperties": False}), SamplingParams(temperature=0.8, seed=1, max_new_tokens=40), 0),
        Request("date", Regex(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"), SamplingParams(temperature=0.0, max_new_tokens=12), 0),
        Request("flags", JsonSchema({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}),
                SamplingParams(temperature=1.0, top_k=20, seed=7, max_new_tokens=20), 2),
        Request("answer", Regex(r"(yes|no), because [a-z ]{1,20}\."), SamplingParams(temperature=0.7, top_p=0.9, seed=3,
                max_new_tokens=24), 5),
    ]


def run(requests: list[Request] | None = None, *, backend: str = "xgrammar", seed: int = 0, verbose: bool = True) -> list[Request]:
    """Serve ``requests`` (each joins at step ``arrives_at``) until all are done; returns them finished."""
    info = llama32_tokenizer_info()
    compiler = GrammarCompiler(info, backend=backend)
    waiting = sorted(requests or default_requests(), key=lambda r: r.arrives_at)
    live: list[Request] = []
    batch: SamplingBatch | None = None
    bitmask = allocate_token_bitmask(len(waiting), info.vocab_size)
    sampler = Sampler(generator=torch.Generator().manual_seed(seed))
    model = torch.Generator().manual_seed(seed)  # the stand-in model's randomness
    done: list[Request] = []
    step = 0
    while waiting or live:
        joining = [r for r in waiting if r.arrives_at <= step]
        if joining:
            waiting = [r for r in waiting if r.arrives_at > step]
            for r in joining:
                max_new = r.params.max_new_tokens
                compiled = compiler.compile(r.spec)
                r.matcher = compiled.matcher(max_tokens=max_new) if compiled.supports_budget else compiled.matcher()
                r.stop = StopChecker(r.params, info)
                if verbose:
                    print(f"step {step:3d}: + {r.name} ({compiled.backend})")
            new = SamplingBatch.build([r.params for r in joining], vocab_size=info.vocab_size, tokenizer=info)
            batch = new if batch is None else batch.merge(new)
            live += joining
        if not live:
            step += 1
            continue
        logits = torch.randn((len(live), info.vocab_size), generator=model)  # a real engine: model forward
        rows = bitmask[: len(live)]
        fill_next_token_bitmask([r.matcher for r in live], rows)
        apply_mask(logits, rows)
        sampled = sampler(logits, batch).token_ids
        batch.update(sampled)
        keep = []
        for position, (r, token) in enumerate(zip(live, sampled.tolist())):
            if token >= 0 and not r.matcher.accept_token(token):
                raise RuntimeError(f"{r.name}: the matcher rejected token {token} its own mask allowed")
            r.steps.append(step)
            finish = r.stop.step(token)
            if finish is None:
                keep.append(position)
                continue
            r.text, r.finish_reason = r.stop.text, finish.reason.value
            done.append(r)
            if verbose:
                print(f"step {step:3d}: - {r.name} [{r.finish_reason}] {r.text!r}")
        if len(keep) != len(live):
            live = [live[p] for p in keep]
            batch = batch.filter(keep) if live else None
        step += 1
    return done


if __name__ == "__main__":
    run()
