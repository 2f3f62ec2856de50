"""Per-token mask fill time and time to first mask: grammask's backends beside raw xgrammar and llguidance.

Every library gets the same specs, the same Llama-3.2 vocabulary (special ids and EOS ids from one
TokenizerInfo) and the same instance, walked token by token; only ``fill_next_token_bitmask`` is
timed per step. "first mask" is compile + matcher + first fill, with every grammar cache cold
(per-process set-up shared by all grammars is paid once before, on a regex and a trivial schema). Each walk is
repeated: the first pass is "cold" (a lazily built automaton computes its rows), later passes "warm".

    python benchmarks/mask_latency.py [--repeats 5] [--backends xgrammar fsm] [--peers xgrammar llguidance]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammask import GrammarCompiler, GrammaskError, JsonSchema, Regex  # noqa: E402
from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info  # noqa: E402
from grammask.conformance.peers import load_peer  # noqa: E402
from grammask.grammars.registry import available_backends  # noqa: E402
from grammask.masking.bitmask import allocate_token_bitmask  # noqa: E402
from grammask.schemas.bundled import example_schema, example_schema_names  # noqa: E402

ANY_JSON_INSTANCE = {"id": 7, "tags": ["a", "b"], "meta": {"ok": True, "score": -1.5e3, "note": None}, "s": "x\ny"}


def cases() -> list[tuple[str, object, str]]:
    """(label, spec, text) triples."""
    out = []
    for name in example_schema_names():
        schema = example_schema(name)
        spec = JsonSchema(schema)
        out.append((f"schema:{name}", spec, spec.serialize(schema["examples"][0])))
    out.append(("regex:date-time", Regex(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})"), "2026-11-22T08:30:00.125+01:00"))
    out.append(("regex:email", Regex(r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}"), "grace.hopper+navy@example.co.uk"))
    spec = JsonSchema({})
    out.append(("any-json", spec, spec.serialize(ANY_JSON_INSTANCE)))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def walk(matcher, bitmask, tokens: list[int]) -> list[float]:
    """Per-step fill times (µs) of forcing ``tokens`` through ``matcher``."""
    times = []
    for token in tokens:
        t0 = time.perf_counter_ns()
        matcher.fill_next_token_bitmask(bitmask, 0)
        times.append((time.perf_counter_ns() - t0) / 1e3)
        if not matcher.accept_token(token):
            raise RuntimeError(f"token {token} rejected: the instance does not fit the grammar")
    return times


def measure(make: Callable[[], Callable[[], object]], ids: list[int], eos: int, vocab: int, repeats: int) -> dict:
    bitmask = allocate_token_bitmask(1, vocab)
    gc.collect()
    start = time.perf_counter()
    new_matcher = make()
    matcher = new_matcher()
    matcher.fill_next_token_bitmask(bitmask, 0)
    first_ms = (time.perf_counter() - start) * 1e3
    gc.disable()  # as timeit does: no collection lands inside one library's timed step
    try:
        passes = [walk(new_matcher(), bitmask, [*ids, eos]) for _ in range(repeats)]
    finally:
        gc.enable()
    cold = passes[0]
    warm = [t for p in passes[1:] for t in p] or cold
    return {
        "first_ms": first_ms,
        "cold_median": statistics.median(cold),
        "cold_p99": percentile(cold, 0.99),
        "median": statistics.median(warm),
        "p99": percentile(warm, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", nargs="*", default=None, help="grammask backends (default: all available)")
    parser.add_argument("--peers", nargs="*", default=["xgrammar", "llguidance"])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    info = llama32_tokenizer_info()
    hf = llama32_hf_tokenizer()
    eos = info.eos_ids[0]
    backends = args.backends if args.backends is not None else available_backends()
    libraries: dict[str, Callable[[object], Callable[[], object]]] = {}
    for name in backends:
        compiler = GrammarCompiler(info, backend=name)

        def make(spec, compiler=compiler):
            compiler.clear_cache()
            return compiler.compile(spec).matcher

        libraries[f"grammask:{name}"] = make
    for name in args.peers:
        try:
            peer = load_peer(name, info)
        except ImportError as exc:
            print(f"# peer {name} skipped: {exc}")
            continue
        libraries[f"peer:{name}"] = peer.compile

    # Per-process set-up (vocabulary tables, a library's tokenizer info, imports, the meta-schema
    # validator) is paid once and shared by every grammar: pay it here, on a regex and a trivial
    # schema, so "first mask" is per grammar.
    for make in libraries.values():
        for warm_up in (Regex("x"), JsonSchema({"type": "string"})):
            make(warm_up)().fill_next_token_bitmask(allocate_token_bitmask(1, info.vocab_size), 0)

    rows = []
    for label, spec, text in cases():
        ids = hf.encode(text, add_special_tokens=False)
        for lib, make in libraries.items():
            try:
                figures = measure(lambda: make(spec), ids, eos, info.vocab_size, args.repeats)
            except (GrammaskError, RuntimeError, ValueError, NotImplementedError) as exc:
                print(f"# {lib} on {label}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            rows.append({"case": label, "library": lib, "tokens": len(ids) + 1, **figures})

    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def print_table(rows: list[dict]) -> None:
    base = {r["case"]: r for r in rows if r["library"] == "peer:xgrammar"}
    header = f"{'case':18s} {'library':20s} {'first ms':>9s} {'cold med µs':>11s} {'cold p99':>9s} {'warm med µs':>11s} {'warm p99':>9s} {'med/xgr':>8s} {'p99/xgr':>8s} {'first/xgr':>9s}"
    print(header)
    print("-" * len(header))
    for r in rows:
        ref = base.get(r["case"])
        ratio = (
            f"{r['median'] / ref['median']:8.2f} {r['p99'] / ref['p99']:8.2f} {r['first_ms'] / ref['first_ms']:9.2f}"
            if ref
            else f"{'':8s} {'':8s} {'':9s}"
        )
        print(
            f"{r['case']:18s} {r['library']:20s} {r['first_ms']:9.2f} {r['cold_median']:11.1f} {r['cold_p99']:9.1f} "
            f"{r['median']:11.1f} {r['p99']:9.1f} {ratio}"
        )
    by_lib: dict[str, list[float]] = {}
    for r in rows:
        ref = base.get(r["case"])
        if ref:
            by_lib.setdefault(r["library"], []).append(r["median"] / ref["median"])
    print()
    for lib, ratios in by_lib.items():
        print(f"{lib:20s} geometric-mean median ratio vs raw xgrammar: {statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    main()
