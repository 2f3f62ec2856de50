"""Rule automata: productivity decided once per suffix of a concatenation, exact on what a rule
can match; the tables the walks read, kept per rule."""

from __future__ import annotations

import numpy as np
import pytest

from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import rules as R
from grammask.grammars.fsm.automaton import START


def _states_along(dfa, text: bytes) -> list[int]:
    states = [START]
    for byte in text:
        states.append(dfa.transition(states[-1], byte))
    return states


def _literal_before(rule: R.Rule, length: int) -> tuple[bytes, E.Expr]:
    text = bytes(range(97, 123)) * (length // 26 + 1)
    return text[:length], E.cat(E.literal(text[:length]), E.call(rule), E.literal("}"))


def test_the_states_of_a_long_literal_decide_productivity_in_linear_work(monkeypatch):
    # Each state inside a literal is a suffix of it; walking the whole suffix again for each made
    # a literal of n bytes cost about n * n / 2 lookups.
    calls = 0
    decide = R._productive

    def counted(expr, visiting):
        nonlocal calls
        calls += 1
        return decide(expr, visiting)

    monkeypatch.setattr(R, "_productive", counted)
    text, body = _literal_before(R.Rule("value", E.literal("1")), 600)
    dfa = R.RuleSet(R.Rule("literal", body), max_states=10_000).dfas[0]
    states = _states_along(dfa, text)
    assert all(dfa.is_live(state) for state in states)
    assert calls < 5 * len(text)


@pytest.mark.parametrize("length", [3, 300])
def test_a_literal_before_a_rule_that_only_recurses_matches_nothing(length):
    endless = R.Rule("endless")
    endless.body = E.cat(E.literal("x"), E.call(endless))
    text, body = _literal_before(endless, length)
    dfa = R.RuleSet(R.Rule("literal", body), max_states=10_000).dfas[0]
    assert not any(dfa.is_live(state) for state in _states_along(dfa, text))
    finite = R.Rule("finite", E.alt(E.literal("x"), E.cat(E.literal("x"), E.call(endless))))
    text, body = _literal_before(finite, length)
    dfa = R.RuleSet(R.Rule("literal", body), max_states=10_000).dfas[0]
    assert all(dfa.is_live(state) for state in _states_along(dfa, text))


def test_tables_follow_each_rule_that_grows_and_keep_the_others():
    value = R.Rule("value", E.literal("1"))
    rules = R.RuleSet(R.Rule("root", E.cat(E.call(value), E.literal("c" * 200))), max_states=10_000)
    first = rules.tables()
    assert len(first) == 2  # the start state calls the value rule: both are numbered
    root = rules.dfas[0]
    (callee, back), = root.calls(START)
    state = back
    for byte in b"c" * 200:  # the root's arrays grow along the literal; the callee's do not
        state = root.transition(state, byte)
    second = rules.tables()
    assert second[callee] is first[callee]
    assert second[0] is not first[0] and np.shares_memory(second[0].table, root.table)
    assert rules.tables() is second  # nothing changed since: the same tuple
