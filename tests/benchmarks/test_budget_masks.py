"""``benchmarks/budget_masks.py`` keeps working: its timed walks, with and without a budget, on a
tiny schema and the tiny byte tokenizer (the model-driven sequence is the script's own part)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from grammask import GrammarCompiler, JsonSchema
from grammask.masking.bitmask import allocate_token_bitmask

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "budget_masks.py"


@pytest.fixture(scope="module")
def budget_masks():
    sys.path.insert(0, str(BENCHMARK.parent))
    spec = importlib.util.spec_from_file_location("budget_masks", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_walks_time_every_fill_and_a_refused_token_is_an_error(budget_masks, tiny_info):
    compiler = GrammarCompiler(tiny_info, backend="fsm")
    spec = JsonSchema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 5}}, "required": ["s"]})
    tokens = [*b'{"s":"abc"}', tiny_info.eos_ids[0]]
    bitmask = allocate_token_bitmask(1, tiny_info.vocab_size)
    for max_tokens in (len(tokens), None):
        runs = budget_masks.measure(compiler, spec, tokens, max_tokens, bitmask)
        assert sorted(runs) == ["cold", "warm"] and all(len(times) == len(tokens) and min(times) > 0 for times in runs.values())
    with pytest.raises(RuntimeError, match="rejected"):  # the budget leaves no room to finish after '{"s":"' plus two
        budget_masks.timed_fills(compiler.compile(spec), [*b'{"s":"abcde"}'], bitmask, 8)
