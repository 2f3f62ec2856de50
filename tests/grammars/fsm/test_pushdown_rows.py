"""Composed rows of the pushdown runtime equal brute-force rows of the same language written as
one regular expression (every value inlined), walked token by token from the same text."""

from __future__ import annotations

import numpy as np
import pytest

from grammask.grammars.fsm import walk
from grammask.grammars.fsm.automaton import DEAD, START, LazyDfa
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask.grammars.fsm.vocab import vocab_index
from grammask.grammars.spec import JsonSchema
from grammask.schemas.bundled import example_schema

SCHEMAS = [
    example_schema("invoice"),
    example_schema("person"),
    example_schema("tool_call"),
    {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4},
    {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "s": {"type": "string", "maxLength": 5}}, "required": ["kind"]},
    ]},
    {"type": "object", "properties": {"v": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 2}]}, "w": {}}},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "yy", "zzz"]}}, "n": {"type": ["integer", "null"]}}},
]
INSTANCES = [
    None, None, None,
    [1.5, -20, 3e2],
    {"kind": "b", "s": "hey"},
    {"v": 2.5, "w": {"q": [1, "r", None]}},
    {"tags": ["x", "zzz"], "n": 12},
]


def reference_row(dfa: LazyDfa, state: int, vocab) -> set[int]:
    """Every ordinary token walked through the inlined language's automaton, ending live."""
    if state == DEAD:
        return set()
    states = np.full(len(vocab), state, dtype=np.int32)
    begins, ends = vocab.begins.copy(), vocab.ends
    status = np.full(len(vocab), walk.STATUS_PENDING, dtype=np.uint8)
    finals = states.copy()
    pending = np.arange(len(vocab))
    while len(pending):
        result = walk.walk_rule(dfa.table.reshape(-1), np.zeros(len(dfa.accepting), np.uint8), vocab.flat, finals[pending], begins[pending], ends[pending], 0)
        status[pending], finals[pending], begins[pending] = result.status, result.finals, result.resume
        stuck = pending[result.status == walk.STATUS_PENDING]
        if len(stuck):
            dfa.materialise_pairs(finals[stuck], vocab.flat[begins[stuck]])
        pending = stuck
    ended = np.flatnonzero(status == walk.STATUS_END)
    live = [dfa.is_live(int(s)) for s in finals[ended]]
    return set(vocab.token_ids[ended[np.array(live, dtype=bool)]].tolist()) if len(ended) else set()


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_composed_rows_equal_inlined_rows(llama_info, index):
    schema = SCHEMAS[index]
    spec = JsonSchema(schema, max_depth=3)
    instance = INSTANCES[index] if INSTANCES[index] is not None else schema["examples"][0]
    text = spec.serialize(instance).encode()
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    grammar = FsmBackend(llama_info).compile(spec)
    automaton = grammar.automaton
    vocab = vocab_index(llama_info)
    eos = set(llama_info.eos_ids)
    cuts = sorted(set(np.random.default_rng(index).integers(0, len(text) + 1, size=6).tolist()) | {0, len(text)})
    for cut in cuts:
        position = automaton.walk(START, text[:cut])
        state = dfa.step(START, text[:cut])
        assert position != DEAD and state != DEAD, text[:cut]
        bits = np.unpackbits(automaton.row(position).view(np.uint8), bitorder="little")
        got = set(np.flatnonzero(bits).tolist())
        expected = reference_row(dfa, state, vocab) | (eos if dfa.accepting[state] else set())
        assert got == expected, (text[:cut], sorted(got ^ expected)[:10])
