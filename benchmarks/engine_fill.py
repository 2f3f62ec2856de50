"""Per-step bitmask fill cost inside vLLM: grammask's backend next to vLLM's own xgrammar backend.

Both are vLLM 0.33's real backend classes, built from one real ``VllmConfig`` (a tiny Llama config with
the Llama-3.2 tokenizer) and the tokenizer vLLM loads for it. A batch of 64 requests (the bundled
example schemas and two regexes, cycled) walks each request's instance token by token; one step is
``fill_bitmask(bitmask, row)`` for every live request, as vLLM's manager does below 128 requests
(serially), then ``accept_tokens``. The first walk after compiling is "cold" (lazily built automata
compute their rows); after ``reset()``, the second is "warm". Compile time is reported beside.

    python benchmarks/engine_fill.py [--batch 64] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammask import JsonSchema, bundled  # noqa: E402
from grammask.schemas.bundled import example_schema, example_schema_names  # noqa: E402

REGEXES = [
    (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", "2026-11-22T08:30:00.125+01:00"),
    (r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}", "grace.hopper+navy@example.co.uk"),
]


def cases() -> list[tuple[str, str, str]]:
    """(kind, spec string, instance text); JSON written with one space after ':' and ',' (both backends accept it)."""
    out = []
    for name in example_schema_names():
        schema = example_schema(name)
        spec = JsonSchema(schema, whitespace="flexible")
        out.append(("json", spec.schema_json, spec.serialize(schema["examples"][0])))
    out.extend(("regex", pattern, text) for pattern, text in REGEXES)
    return out


def vllm_config(folder: str):
    from transformers import LlamaConfig
    from vllm.config import DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

    LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, eos_token_id=[128001, 128008, 128009]).save_pretrained(folder)
    bundled.llama32_hf_tokenizer().save_pretrained(folder)
    return VllmConfig(
        model_config=ModelConfig(model=folder, tokenizer=folder, dtype="float32"),
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(max_num_seqs=128, max_model_len=2048, is_encoder_decoder=False),
    )


def walk(grammars, token_lists, bitmask) -> list[float]:
    """Per-step batch fill times (ms)."""
    times = []
    step = 0
    while True:
        live = [i for i, tokens in enumerate(token_lists) if step < len(tokens)]
        if not live:
            return times
        start = time.perf_counter()
        for i in live:
            grammars[i].fill_bitmask(bitmask, i)
        times.append((time.perf_counter() - start) * 1e3)
        for i in live:
            if not grammars[i].accept_tokens(str(i), [token_lists[i][step]]):
                raise RuntimeError(f"request {i}: token {token_lists[i][step]} rejected by {type(grammars[i]).__name__}")
        step += 1


def _accepts(backend, case, tokens, stops) -> bool:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    kind = StructuredOutputOptions.JSON if case[0] == "json" else StructuredOutputOptions.REGEX
    grammar = backend.compile_grammar(kind, case[1], stop_token_ids=stops)
    accepted = len(grammar.validate_tokens(tokens)) == len(tokens)
    backend.destroy()
    return accepted


def measure(backend, requests, token_lists, stop_ids: set[int]) -> dict[str, float]:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    kinds = {"json": StructuredOutputOptions.JSON, "regex": StructuredOutputOptions.REGEX}
    start = time.perf_counter()
    grammars = [backend.compile_grammar(kinds[kind], spec, stop_token_ids=stop_ids) for kind, spec, _ in requests]
    compile_ms = (time.perf_counter() - start) * 1e3
    bitmask = backend.allocate_token_bitmask(len(requests))
    cold = walk(grammars, token_lists, bitmask)
    for grammar in grammars:
        grammar.reset()
    warm = walk(grammars, token_lists, bitmask)
    return {
        "compile_ms": compile_ms,
        "cold_median": statistics.median(cold), "cold_mean": statistics.fmean(cold),
        "warm_median": statistics.median(warm), "warm_mean": statistics.fmean(warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engine-fill-") as folder:  # the model's config and tokenizer files
        compare(vllm_config(folder), args.batch)


def compare(config, batch: int) -> None:
    """Print both backends' compile and per-step fill times over ``batch`` requests."""
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    from grammask.integrations.vllm import GrammaskBackend

    tokenizer = StructuredOutputManager(config).tokenizer
    vocab = config.model_config.get_vocab_size()
    eos = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    stops = {128001, 128008, 128009}
    backends = [("grammask", GrammaskBackend), ("vLLM xgrammar", XgrammarBackend)]
    base = []
    for case in cases():  # only instances xgrammar accepts whole, so both walk the same steps
        tokens = tokenizer.encode(case[2], add_special_tokens=False) + [eos]
        # (grammask is checked by its own walk; checking it here would warm its caches before the cold pass)
        if not _accepts(XgrammarBackend(config, tokenizer=tokenizer, vocab_size=vocab), case, tokens, stops):
            print(f"skipped {case[0]} {case[1][:40]!r}...: vLLM's xgrammar backend refuses its instance")
        else:
            base.append((case, tokens))
    requests = [base[i % len(base)][0] for i in range(batch)]
    token_lists = [base[i % len(base)][1] for i in range(batch)]
    print(f"batch {batch}: {len(base)} specs cycled, {max(map(len, token_lists))} steps; per-step fill of the whole batch (ms)")
    print(f"{'backend':<22}{'compile ms':>12}{'cold median':>13}{'cold mean':>11}{'warm median':>13}{'warm mean':>11}")
    results = {}
    for name, cls in backends:
        backend = cls(config, tokenizer=tokenizer, vocab_size=vocab)
        r = results[name] = measure(backend, requests, token_lists, stops)
        print(f"{name:<22}{r['compile_ms']:>12.1f}{r['cold_median']:>13.3f}{r['cold_mean']:>11.3f}{r['warm_median']:>13.3f}{r['warm_mean']:>11.3f}")
        backend.destroy()
    ours, peer = results["grammask"], results["vLLM xgrammar"]
    print("grammask / xgrammar: " + ", ".join(f"{k} {ours[k] / peer[k]:.2f}" for k in ("cold_median", "warm_median", "cold_mean", "warm_mean")))


if __name__ == "__main__":
    main()
