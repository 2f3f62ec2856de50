"""Every compile limit stops a runaway compile within twice its value, in time and in memory,
with a CompileLimitError that names it (issue #12: limits were checked only after lowering), and
a compile that once ran past them in a step that never looked at a deadline now ends within them.

The figures come from a fresh process (``limit_probe``), so that memory is measured for the one
compile alone (``tracemalloc``); the limits are small enough that twice them is a wide margin on
a loaded machine, and large enough that the process's own start costs nothing against them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.regex import regex_to_expr
from tests.grammars.fsm.limit_probe import CASES

ROOT = Path(__file__).resolve().parents[3]
EXPECTED = {
    "enum_past_compile_seconds": "compile_seconds",
    "enum_past_expression_bytes": "expression_bytes",
    "nested_counts": "max_states",
    "nested_large_counts": "max_states",
    "min_items": "max_states",
    "deep_schema": "max_nesting",
    "deep_regex": "max_nesting",
    "large_count": "max_repeat",
    "backtracking_pattern_names": None,  # compiles, well within its limits
}


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    """Every case, run once in one fresh process."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.grammars.fsm.limit_probe", *EXPECTED],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = [json.loads(line) for line in run.stdout.splitlines()]
    return {r["case"]: r for r in results}


def test_every_probe_has_an_expected_limit():
    assert set(EXPECTED) == set(CASES)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_runaway_compile_stops_within_twice_its_limits(probed, case):
    result = probed[case]
    assert result["limit"] == EXPECTED[case], result
    options = result["options"]
    assert result["seconds"] <= 2 * options["compile_seconds"], result
    assert result["peak_bytes"] <= 2 * options["max_expression_bytes"], result


def test_nested_counts_build_small_expressions():
    # Blocks of √n copies, each one node: the counts no longer multiply (4.6 GB and 6.2 GB before).
    for pattern, length in [("(((a{100}){100}){100}){100}", 100**4), ("((a{9999}){9999})", 9999**2)]:
        before = len(E._INTERN)
        expr = regex_to_expr(pattern)
        assert E.min_length(expr) == length and len(E._INTERN) - before < 1000


def test_a_budget_names_the_cap_it_passes():
    with pytest.raises(CompileLimitError, match=f"'expression_bytes'.*cap is {10 * E.NODE_BYTES}\\b"):
        with E.BuildBudget(max_bytes=10 * E.NODE_BYTES):
            E.literal("a fresh literal, built byte by byte")
    with pytest.raises(CompileLimitError, match="'compile_seconds'"):
        with E.BuildBudget(seconds=0.0):
            E.literal("x" * 2 * E._CLOCK_EVERY + "another fresh one")
    assert E._ACTIVE.budget is None  # left as it was, after the error
