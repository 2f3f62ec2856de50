"""Per-token mask latency of the fsm backend's engine on a few regexes (Llama-3.2 tokenizer).

For each regex: time to first mask (compile + first fill, on a fresh backend whose tokenizer index
is already built), then random walks through the mask (tokens drawn uniformly from the allowed set,
with a token budget so every walk ends valid). The first pass fills are "cold" (a state's row is
computed on first visit); the same walks replayed on fresh matchers are "warm" (row copies).

    python benchmarks/fsm_engine_latency.py [--walks 20] [--budget 40]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from grammask import bundled
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.vocab import vocab_index
from grammask.grammars.spec import Regex
from grammask.masking.bitmask import allocate_token_bitmask

REGEXES = {
    "date-time": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    "words": r"[a-z]+( [a-z]+)*",
    "json-string": r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
}


def allowed(words: np.ndarray, vocab_size: int) -> np.ndarray:
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)


def run(name: str, pattern: str, info, walks: int, budget: int, rng: np.random.Generator) -> None:
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    started = time.perf_counter()
    grammar = FsmBackend(info).compile(Regex(pattern))
    matcher = grammar.matcher(max_tokens=budget)
    matcher.fill_next_token_bitmask(bitmask, 0)
    first_mask = time.perf_counter() - started

    cold, paths = [], []
    for _ in range(walks):
        matcher, path = grammar.matcher(max_tokens=budget), []
        while not matcher.is_terminated():
            t0 = time.perf_counter_ns()
            matcher.fill_next_token_bitmask(bitmask, 0)
            cold.append(time.perf_counter_ns() - t0)
            token = int(rng.choice(allowed(bitmask[0].numpy(), info.vocab_size)))
            if not matcher.accept_token(token):
                raise RuntimeError("mask and accept_token disagree")
            path.append(token)
        paths.append(path)
    warm, accept = [], []
    for _ in range(3):
        for path in paths:
            matcher = grammar.matcher(max_tokens=budget)
            for token in path:
                t0 = time.perf_counter_ns()
                matcher.fill_next_token_bitmask(bitmask, 0)
                t1 = time.perf_counter_ns()
                matcher.accept_token(token)
                t2 = time.perf_counter_ns()
                warm.append(t1 - t0)
                accept.append(t2 - t1)
    fmt = lambda ns: f"{np.median(ns) / 1e3:7.2f} / {np.percentile(ns, 99) / 1e3:8.1f} µs"  # noqa: E731
    states = grammar.automaton.dfa.num_states
    print(
        f"{name:12s} first mask {first_mask * 1e3:6.2f} ms | cold fill med/p99 {fmt(cold)} | "
        f"warm fill {fmt(warm)} | accept {fmt(accept)} | {states} DFA states, {len(cold)} steps"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walks", type=int, default=20)
    parser.add_argument("--budget", type=int, default=40)
    args = parser.parse_args()
    info = bundled.llama32_tokenizer_info()
    t0 = time.perf_counter()
    vocab_index(info)
    print(f"tokenizer index (once per tokenizer): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    rng = np.random.default_rng(0)
    for name, pattern in REGEXES.items():
        run(name, pattern, info, args.walks, args.budget, rng)


if __name__ == "__main__":
    main()
