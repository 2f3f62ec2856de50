"""Token rows: the chain shortcut (:func:`follow_chain`) gives the same rows as walking every token."""

from __future__ import annotations

import numpy as np
import pytest

from grammask.grammars.fsm import token_rows
from grammask.grammars.fsm.automaton import START
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.token_rows import TokenAutomaton, follow_chain
from grammask.grammars.fsm.vocab import vocab_index
from grammask.grammars.spec import JsonSchema, Regex
from grammask.schemas.bundled import example_schema

# (spec, where the walks start, whether a chain applies): ten digits are too few bytes for one.
SPECS = [
    (Regex(r"[a-z ]{0,40}!"), b"", True),
    (Regex(r"\d{4}-\d{2}-\d{2}"), b"", False),
    (Regex(r"[a-z]{3}[a-m]{0,40}!"), b"", True),  # the chain's byte set splits after three bytes
    (Regex(r"[αβγ a-z]{3,30}\."), b"", True),
    (JsonSchema({"type": "object", "properties": {"d": {"type": "string", "minLength": 5, "maxLength": 80}}, "required": ["d"]}), b'{"d":"', True),
    (JsonSchema({"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}), b'["', True),
    (JsonSchema(example_schema("invoice")), b"", None),
]


def _walk_only(dfa, vocab, state, positions):
    return positions, positions[:0], positions[:0].astype(np.int32)


@pytest.mark.parametrize("spec, prefix, chains", SPECS, ids=[f"spec{i}" for i in range(len(SPECS))])
def test_chain_shortcut_rows_equal_walked_rows(llama_info, monkeypatch, spec, prefix, chains):
    expr = FsmBackend(llama_info)._lower(spec)[0]
    vocab = vocab_index(llama_info)
    fast = TokenAutomaton(expr, vocab)
    reference = TokenAutomaton(expr, vocab)
    rng = np.random.default_rng(7)
    chained_tokens = 0
    for _ in range(3):
        state_fast, state_ref = fast.dfa.step(START, prefix), reference.dfa.step(START, prefix)
        for _ in range(25):
            chained_tokens += len(follow_chain(fast.dfa, vocab, state_fast, np.arange(len(vocab)))[1])
            row = fast.row(state_fast)
            with monkeypatch.context() as patch:
                patch.setattr(token_rows, "follow_chain", _walk_only)
                expected = reference.row(state_ref)
            assert fast.dfa.expr(state_fast) is reference.dfa.expr(state_ref)
            assert np.array_equal(row.words, expected.words)
            assert np.array_equal(row.other_ids, expected.other_ids)
            assert [fast.dfa.expr(s) for s in row.other_next] == [reference.dfa.expr(s) for s in expected.other_next]
            assert (row.self_words is None) == (expected.self_words is None)
            if not len(row.other_ids):
                break
            token = int(rng.choice(row.other_ids))  # a token that changes state: the chain moves on
            state_fast, state_ref = row.next_state(token), expected.next_state(token)
    if chains is not None:
        assert (chained_tokens > 10_000) == chains  # the shortcut answered many tokens, or none
