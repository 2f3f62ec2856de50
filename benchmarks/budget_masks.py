"""Per-token mask fill with budget-aware closing (``matcher(max_tokens=N)``) beside the same fills
without a budget, on the token sequences a model really writes.

``generate_json`` fills every step through a budget: only tokens that still leave a way to finish
within the tokens left are allowed, which needs each position's tokens grouped by how many tokens
they leave to finish (:meth:`PushdownAutomaton.budget_row`). No peer closes within a budget, so
the ratio printed is against grammask's own fill without one, on the same tokens.

Each bundled schema's sequence comes from ``generate_json`` with the demo's randomly initialised
Llama (its strings run long, as an untrained or wandering model's do). That sequence is then
forced through a freshly compiled grammar (every grammar cache cold: "cold", a state's first
visit) and again through a second matcher of the same grammar ("warm"), with and without the
budget; only ``fill_next_token_bitmask`` is timed.

    python benchmarks/budget_masks.py [--max-new-tokens 64] [--seed 0] [--schemas person invoice]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammask import GrammarCompiler, JsonSchema, generate_json  # noqa: E402
from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info  # noqa: E402
from grammask.masking.bitmask import allocate_token_bitmask  # noqa: E402
from grammask.schemas.bundled import example_schema, example_schema_names  # noqa: E402
from mask_latency import percentile, walk  # noqa: E402


def timed_fills(grammar, tokens: list[int], bitmask, max_tokens: int | None) -> list[float]:
    """µs of each ``fill_next_token_bitmask`` while forcing ``tokens`` through a new matcher."""
    return walk(grammar.matcher() if max_tokens is None else grammar.matcher(max_tokens=max_tokens), bitmask, tokens)


def measure(compiler: GrammarCompiler, spec: JsonSchema, tokens: list[int], max_tokens: int | None, bitmask) -> dict[str, list[float]]:
    """Cold fills (a fresh compile) then warm fills (a second matcher of that grammar)."""
    compiler.clear_cache()
    gc.collect()
    gc.disable()
    try:
        grammar = compiler.compile(spec)
        return {"cold": timed_fills(grammar, tokens, bitmask, max_tokens), "warm": timed_fills(grammar, tokens, bitmask, max_tokens)}
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="the random model's seed")
    parser.add_argument("--schemas", nargs="*", default=example_schema_names(), choices=example_schema_names())
    args = parser.parse_args()

    from grammask.demo import random_llama

    info, tokenizer = llama32_tokenizer_info(), llama32_hf_tokenizer()
    model = random_llama(args.seed)
    compiler = GrammarCompiler(info, backend="fsm")
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    print(f"budget masks: bundled schemas, sequences from generate_json with the demo's random Llama (seed {args.seed}), "
          f"max_new_tokens {args.max_new_tokens}; µs per fill, median / p99")
    print(f"{'schema':<11} {'tokens':>6}  {'cold, budget':>16} {'cold, none':>16} {'ratio':>6}  {'warm, budget':>14} {'warm, none':>14}")
    for name in args.schemas:
        schema = example_schema(name)
        result = generate_json(schema, model, tokenizer, max_new_tokens=args.max_new_tokens, compiler=compiler)
        tokens = list(result.token_ids)
        spec = JsonSchema(schema)
        with_budget = measure(compiler, spec, tokens, args.max_new_tokens, bitmask)
        without = measure(compiler, spec, tokens, None, bitmask)
        cells = {}
        for label, runs in (("budget", with_budget), ("none", without)):
            for kind, values in runs.items():
                cells[kind, label] = f"{statistics.median(values):,.0f} / {percentile(values, 0.99):,.0f}"
        ratio = statistics.median(with_budget["cold"]) / statistics.median(without["cold"])
        print(f"{name:<11} {len(tokens):>6}  {cells['cold', 'budget']:>16} {cells['cold', 'none']:>16} {ratio:>6.1f}  "
              f"{cells['warm', 'budget']:>14} {cells['warm', 'none']:>14}")


if __name__ == "__main__":
    main()
