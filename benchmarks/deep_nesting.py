"""Cold fills through a recursive value as it nests deeper: grammask ``auto`` beside llguidance.

A ``$ref`` tree (each node a name, a size and its children) is compiled anew for each depth and
forced through one instance nesting that deep (compact JSON, Llama-3.2 tokens), in this process:
each engine is warmed up first on the cold-path benchmark's warm-up schema, imports are frozen
and the collector is off during a walk. Every figure is the cold path: the compile, the first
mask and each position's first visit. Printed per depth and engine: time to the first mask,
the cold fill p50 and p90, the cold fills in all, per token; then grammask's ratio to the peer.
A level of the tree reads the same frames at every depth, so what a level costs on its first
visit should not grow with the depth.

Run: ``python benchmarks/deep_nesting.py [--depths 4 8 16 32] [--engines auto llguidance] [--reps 3]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cold_path import WARM_UP_INSTANCE, cold_walk, make_engine  # noqa: E402
from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info  # noqa: E402
from grammask.masking.bitmask import allocate_token_bitmask  # noqa: E402

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "size": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["name", "children"],
        }
    },
    "$ref": "#/$defs/node",
}


def tree(depth: int) -> dict:
    """A chain of ``depth + 1`` nodes, each the only child of the one above."""
    return {"name": f"n{depth}", "size": depth, "children": [tree(depth - 1)] if depth else []}


def force(engine, tokens: list[int], bitmask) -> tuple[float, list[float]]:
    """``(first mask ms, [fill µs, ...])``: compile, first mask, then each token's cold fill (the
    first mask's fill first, as the cold-path benchmark counts them)."""
    if hasattr(engine, "compiler"):
        engine.compiler.clear_cache()  # grammask's grammar cache: each run compiles anew (the peers keep none)
    gc.collect()
    start = time.perf_counter_ns()
    factory, _ = engine.compile(TREE)
    matcher = factory()
    filling = time.perf_counter_ns()
    matcher.fill_next_token_bitmask(bitmask, 0)
    end = time.perf_counter_ns()
    walk = cold_walk(matcher, bitmask, tokens, (end - filling) / 1e3, lambda kind, payload: None)
    if walk["outcome"] != "ok":
        raise RuntimeError(f"{walk['outcome']}: {walk['detail']}")
    return (end - start) / 1e6, walk["fills_us"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--engines", nargs="+", default=["auto", "llguidance"])
    parser.add_argument("--reps", type=int, default=3, help="runs per depth and engine (the median of each figure is printed)")
    args = parser.parse_args()
    info, hf = llama32_tokenizer_info(), llama32_hf_tokenizer()
    encode = lambda value: hf.encode(json.dumps(value, separators=(",", ":")), add_special_tokens=False)  # noqa: E731
    eos = info.eos_ids[0]
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    engines = {}
    for name in args.engines:
        engines[name] = make_engine(name, info)
        engines[name].warm_up(encode(WARM_UP_INSTANCE) + [eos], bitmask)
    gc.collect()
    gc.freeze()
    print("cold path (compile, first mask, first visits), $ref tree forced to each depth, Llama-3.2 tokens, in process")
    print(f"{'depth':>5} {'engine':>11} {'tokens':>6} {'first ms':>9} {'fill p50 µs':>12} {'fill p90 µs':>12} {'fills ms':>9} {'µs/token':>9}")
    for depth in args.depths:
        tokens = encode(tree(depth)) + [eos]
        figures = {}
        for name, engine in engines.items():
            runs = [force(engine, tokens, bitmask) for _ in range(args.reps)]
            fills = [sorted(f) for _, f in runs]
            figures[name] = (
                statistics.median(first for first, _ in runs),
                statistics.median(f[len(f) // 2] for f in fills),
                statistics.median(f[int(len(f) * 0.9)] for f in fills),
                statistics.median(sum(f) / 1e3 for f in fills),
            )
            first, p50, p90, total = figures[name]
            print(f"{depth:>5} {name:>11} {len(tokens):>6} {first:>9.2f} {p50:>12.1f} {p90:>12.1f} {total:>9.2f} {total * 1e3 / len(tokens):>9.1f}")
        if len(figures) > 1:
            base, *peers = figures
            for peer in peers:
                ratios = " ".join(f"{label} {a / b:.2f}×" for label, a, b in zip(("first", "p50", "p90", "fills"), figures[base], figures[peer]))
                print(f"{'':>5} {base + '/' + peer:>11} {ratios}")


if __name__ == "__main__":
    main()
