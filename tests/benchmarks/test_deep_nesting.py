"""``benchmarks/deep_nesting.py`` keeps working: its tree is valid under its schema at every
depth, and its forced walk reads the whole tree on ``fsm`` (the tiny byte tokenizer)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from grammask.masking.bitmask import allocate_token_bitmask

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def deep_nesting():
    sys.path.insert(0, str(BENCHMARKS))  # it imports cold_path, as when run
    try:
        spec = importlib.util.spec_from_file_location("deep_nesting", BENCHMARKS / "deep_nesting.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_the_tree_nests_as_deep_as_asked_and_is_valid(deep_nesting):
    for depth in (0, 3, 32):
        node, levels = deep_nesting.tree(depth), 0
        jsonschema.validate(node, deep_nesting.TREE)
        while node["children"]:
            node, levels = node["children"][0], levels + 1
        assert levels == depth


def test_a_forced_tree_gives_a_fill_per_token(deep_nesting, tiny_info):
    engine = deep_nesting.make_engine("fsm", tiny_info)
    tokens = list(json.dumps(deep_nesting.tree(5), separators=(",", ":")).encode()) + [tiny_info.eos_ids[0]]
    bitmask = allocate_token_bitmask(1, tiny_info.vocab_size)
    first_ms, fills = deep_nesting.force(engine, tokens, bitmask)
    assert len(fills) == len(tokens) and first_ms > 0 and min(fills) > 0
    with pytest.raises(RuntimeError, match="rejected"):
        deep_nesting.force(engine, tokens[:-2] + tokens[-1:], bitmask)  # a closing bracket short
