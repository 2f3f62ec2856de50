"""Every compile limit stops a runaway compile within twice its value, in time and in memory,
with a CompileLimitError that names it (issue #12: limits were checked only after lowering), and
a compile that once ran past them in a step that never looked at a deadline now ends within them.

The figures come from a fresh process (``limit_probe``), so that memory is measured for the one
compile alone (``tracemalloc``); the limits are small enough that twice them is a wide margin on
a loaded machine, and large enough that the process's own start costs nothing against them.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import collector
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


def test_a_first_visit_that_runs_away_stops_at_the_compile_caps(corpora, llama_info, llama_hf):
    # Github_ultra/o359: after '"activities' one fill decides whether a state of a complement
    # (an inlined oneOf of activity types) is live, searching the product: 159 s before it
    # reached max_states. A first visit now runs under the compile's caps, here 2 s.
    import time

    from grammask.grammars.fsm.backend import FsmBackend
    from grammask.grammars.spec import JsonSchema
    from grammask.masking.bitmask import allocate_token_bitmask
    from tests.conftest import read_jsonl

    schema = next(r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / "Github_ultra.dev.jsonl") if r["id"] == "Github_ultra/o359")
    matcher = FsmBackend(llama_info, compile_seconds=2.0).compile(JsonSchema(schema)).matcher()
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    text = '{"name":"MyPipeline","properties":{"description":"This is a sample pipeline.","activities":[{"name":"Copy"'
    start = time.perf_counter()
    with pytest.raises(CompileLimitError, match="'compile_seconds'"):
        for token in llama_hf.encode(text, add_special_tokens=False):
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            assert matcher.accept_token(token)
    assert time.perf_counter() - start <= 2 * 2.0


def test_each_cold_section_enters_the_budget_once_and_warm_reads_none(tiny_info):
    from grammask.grammars.fsm.automaton import DEAD, START
    from grammask.grammars.fsm.pushdown import PushdownAutomaton
    from grammask.grammars.fsm.rules import Rule, RuleSet
    from grammask.grammars.fsm.vocab import vocab_index

    entered = []

    def budget():
        entered.append(E.BuildBudget(max_bytes=1 << 30))
        return entered[-1]

    expr = regex_to_expr("(ab|ac)*d")
    automaton = PushdownAutomaton(
        RuleSet(Rule("test", expr), max_states=1000), vocab_index(tiny_info), max_positions=1000, max_row_bytes=1 << 20, build_budget=budget
    )
    automaton.row(START)  # a cold row: one budget, however many sections nest inside it
    assert len(entered) == 1
    automaton.row(START)  # warm: no section at all
    assert len(entered) == 1
    positions = automaton.num_positions
    position = automaton.walk(START, b"ab")  # two cold bytes read in one section: back at START, no position made for "a"
    assert len(entered) == 2 and position == START and automaton.num_positions == positions
    position = automaton.walk(START, b"a")  # one cold step: a section of its own, and the position
    assert len(entered) == 3 and position != DEAD and automaton.num_positions == positions + 1
    with E.BuildBudget():  # a section inside a budget already active (a compile's) adds none
        automaton.row(position)
    assert len(entered) == 3

    refusing = PushdownAutomaton(
        RuleSet(Rule("test", regex_to_expr("(ab|ae)*(f|gh)")), max_states=1000), vocab_index(tiny_info), max_positions=1000,
        max_row_bytes=1 << 20, build_budget=lambda: E.BuildBudget(max_bytes=0),
    )
    with pytest.raises(CompileLimitError, match="'expression_bytes'"):
        refusing.row(START)
    assert E.current_budget() is None


def test_a_budget_counts_the_collection_its_build_puts_off(monkeypatch):
    # A paused build's objects are collected when the pause ends, before the compile returns
    # (half a second after a 50,000-value enum): a deadline the clock has not reached is passed
    # once that collection is counted. What another build had put off before it began is not
    # its own (a thread's small compile beside another's huge one).
    monkeypatch.setattr(collector, "SECONDS_PER_PENDING_OBJECT", 0.1)
    enabled = gc.isenabled()
    gc.enable()  # the collector runs, so the pause will end in a collection
    try:
        with collector.PAUSE_GC:
            earlier = [[] for _ in range(20_000)]  # 2,000 s put off before the budget began
            with E.BuildBudget(seconds=1000.0):
                E.literal("v" * 2 * E._CLOCK_EVERY + "a literal no other test builds")  # its own nodes: far less
                during = [[] for _ in range(20_000)]
                with pytest.raises(CompileLimitError, match="'compile_seconds'.*garbage collection"):
                    E.literal("y" * 2 * E._CLOCK_EVERY + "a literal no other test builds")
    finally:
        if not enabled:
            gc.disable()
    assert len(earlier) == len(during) == 20_000


def test_a_budget_counts_no_collection_where_the_collector_is_off(monkeypatch):
    # A process that keeps the collector off never pays the collection: its allocations since
    # the last one (millions, in a long-lived server) must not stop every build.
    monkeypatch.setattr(collector, "SECONDS_PER_PENDING_OBJECT", 1.0)
    enabled = gc.isenabled()
    gc.disable()
    try:
        pending = [[] for _ in range(1000)]
        with collector.PAUSE_GC, E.BuildBudget(seconds=60.0):
            E.literal("w" * 2 * E._CLOCK_EVERY + "a literal no other test builds")
        assert collector.pending_collection_seconds() == 0.0  # and none outside a pause
    finally:
        if enabled:
            gc.enable()
    assert len(pending) == 1000


def test_lowering_reads_the_clock_even_when_it_builds_no_node():
    from grammask.grammars.fsm.json_schema import lower_json_schema
    from grammask.grammars.spec import JsonSchema

    spec = JsonSchema({"type": "object", "properties": {"a": {"type": "integer"}}})
    lower_json_schema(spec)  # its nodes exist now: lowering it again builds none
    with pytest.raises(CompileLimitError, match="'compile_seconds'.*while lowering subschemas"):
        with E.BuildBudget(seconds=0.0):
            lower_json_schema(spec)


def test_completing_a_lowering_runs_under_one_budget(tiny_info, monkeypatch):
    """Reading ``narrowed`` builds every subschema not built yet: under one budget for them all,
    so the compile caps bound the whole (each build under a budget of its own restarted the
    clock, and a lowering whose builds defer ever more ran for minutes)."""
    from grammask.grammars.fsm.backend import FsmBackend
    from grammask.grammars.spec import JsonSchema

    backend = FsmBackend(tiny_info)
    budgets = []
    made = backend._request_budget
    monkeypatch.setattr(backend, "_request_budget", lambda built: budgets.append(made(built)) or budgets[-1])
    nested = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "integer"}}}}
    grammar = backend.compile(JsonSchema({"type": "object", "properties": {f"p{i}": nested for i in range(12)}}))
    assert grammar._lowering._lowerer._deferred  # subschemas left to build
    assert budgets == []
    assert grammar.narrowed == ()
    assert len(budgets) == 1 and not grammar._lowering._lowerer._deferred


OVERLAPPING_TREE = {
    "$defs": {"node": {"oneOf": [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/node"}}},
        {"type": "object", "properties": {"b": {"$ref": "#/$defs/node"}}, "required": ["b"]},
    ]}},
    "$ref": "#/$defs/node",
}
"""Inside ``{"a":`` both branches stay alive (``b`` may still come, and then exactly one of the two
values must be a node), so every level doubles the parses: 2^depth stacks in one position."""


def _nested(depth: int) -> bytes:
    return ('{"a":' * depth + "{}" + "}" * depth).encode()


def test_parses_that_double_per_level_stop_at_max_stacks(tiny_info):
    # Twenty levels took three minutes of fills (Llama-3.2 tokens), with no limit met.
    from grammask.errors import InvalidParameterError
    from grammask.grammars.fsm.backend import FsmBackend
    from grammask.grammars.spec import JsonSchema

    matcher = FsmBackend(tiny_info, max_stacks=64).compile(JsonSchema(OVERLAPPING_TREE)).matcher()
    with pytest.raises(CompileLimitError, match="'max_stacks'") as caught:
        for byte in _nested(12):
            assert matcher.accept_token(byte)
    assert caught.value.limit == "max_stacks" and caught.value.cap == 64 and caught.value.value > 64
    with pytest.raises(InvalidParameterError, match="max_stacks"):
        FsmBackend(tiny_info, max_stacks=0)


@pytest.mark.parametrize("text", [
    _nested(4), b'{"a":{},"b":{}}', b'{"a":{"a":{}},"b":{"b":{}}}', b'{"a":{"b":{}},"b":{}}', b'{"a":{"a":{"b":{}}}}',
    b'{"a":1,"b":{}}', b'{"a":{"b":1}}', b'{"b":{"a":{},"b":{}}}',
])
def test_below_max_stacks_overlapping_parses_stay_exact(tiny_info, text):
    import jsonschema

    from grammask.grammars.fsm.backend import FsmBackend
    from grammask.grammars.spec import JsonSchema

    grammar = FsmBackend(tiny_info, max_stacks=64).compile(JsonSchema(OVERLAPPING_TREE))
    matcher = grammar.matcher()
    accepted = matcher.accept_tokens(list(text)) == len(text) and matcher.accept_token(tiny_info.eos_ids[0])
    assert accepted == jsonschema.Draft202012Validator(OVERLAPPING_TREE).is_valid(json.loads(text))


def test_auto_moves_a_request_past_max_stacks_to_its_fallback(llama_info, llama_hf):
    import jsonschema

    from grammask.grammars.compiler import GrammarCompiler
    from grammask.grammars.spec import JsonSchema

    compiler = GrammarCompiler(llama_info, backend_options={"fsm": {"max_stacks": 64}})
    matcher = compiler.compile(JsonSchema(OVERLAPPING_TREE)).matcher()
    text = _nested(12).decode()
    assert jsonschema.Draft202012Validator(OVERLAPPING_TREE).is_valid(json.loads(text))
    tokens = llama_hf.encode(text, add_special_tokens=False) + [llama_info.eos_ids[0]]
    assert matcher.accept_tokens(tokens) == len(tokens)
    assert matcher.fell_back is not None and "'max_stacks'" in matcher.fell_back
