"""Rule automata: productivity decided once per suffix of a concatenation, exact on what a rule
can match; the tables the walks read, kept per rule."""

from __future__ import annotations

import itertools
import random
import threading
import time

import numpy as np
import pytest

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import pushdown as P
from grammask.grammars.fsm import rules as R
from grammask.grammars.fsm.automaton import DEAD, START


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


def _marked(expr: E.Expr, markers: dict) -> E.Expr:
    """``expr`` with each call replaced by its rule's marker byte (a plain expression)."""
    if expr.kind == E.CALL_KIND:
        return E.literal(bytes([markers[expr.args[0]]]))
    if expr.kind == E.CAT_KIND:
        return E.cat(_marked(expr.args[0], markers), _marked(expr.args[1], markers))
    if expr.kind == E.ALT_KIND:
        return E.alt(*(_marked(part, markers) for part in expr.args))
    if expr.kind == E.STAR_KIND:
        return E.star(_marked(expr.args[0], markers))
    return expr


def _random_expr(rng: random.Random, rules: list, depth: int) -> E.Expr:
    choice = rng.randrange(6 if depth else 3)
    if choice == 0:
        return E.literal(rng.choice(["a", "b", "ab", ""]))
    if choice in (1, 2):
        return E.call(rng.choice(rules))
    if choice == 3:
        return E.cat(*(_random_expr(rng, rules, depth - 1) for _ in range(rng.randrange(2, 4))))
    if choice == 4:
        return E.alt(*(_random_expr(rng, rules, depth - 1) for _ in range(rng.randrange(2, 6))))
    return E.star(_random_expr(rng, rules, depth - 1))


@pytest.mark.parametrize("seed", range(40))
def test_a_call_derivative_is_the_derivative_by_the_calls_symbol(seed):
    # Reference: each call replaced by a marker byte, the byte derivative by the rule's marker.
    rng = random.Random(seed)
    rules = [R.Rule(f"r{i}", E.literal("x")) for i in range(3)]
    markers = {rule: ord("0") + i for i, rule in enumerate(rules)}
    expr = _random_expr(rng, rules, 4)
    plain = _marked(expr, markers)
    texts = [bytes(t) for n in range(4) for t in itertools.product(b"ab012", repeat=n)]
    for rule, marker in markers.items():
        found = _marked(R.call_derivative(expr, rule), markers)
        expected = E.derivative(plain, marker)
        assert [E.matches(found, t) for t in texts] == [E.matches(expected, t) for t in texts], (rule, E.to_string(expr))


def test_the_call_derivatives_of_an_objects_members_take_linear_work(monkeypatch):
    # An object's start is an alternation of its members, each a call then the rest; each member's
    # call derivative once walked every member (n * n derivatives for n properties), and then
    # asked every member which rules it starts with (n * n questions).
    calls = asked = 0
    derive, starting = E.call_derivative, E.first_calls

    def counted(expr, rule):
        nonlocal calls
        calls += 1
        return derive(expr, rule)

    def counted_first_calls(expr):
        nonlocal asked
        asked += 1
        return starting(expr)

    monkeypatch.setattr(E, "call_derivative", counted)
    monkeypatch.setattr(R, "call_derivative", counted)
    monkeypatch.setattr(E, "first_calls", counted_first_calls)
    members = [R.Rule(f"member{i}", E.literal(f'"k{i}":1')) for i in range(300)]
    body = E.cat(E.literal("{"), E.alt(*(E.cat(E.call(member), E.literal("}")) for member in members)))
    dfa = R.RuleSet(R.Rule("object", body), max_states=10_000).dfas[0]
    opened = dfa.transition(START, ord("{"))
    assert len(dfa.calls(opened)) == len(members)
    assert calls < 5 * len(members)
    assert asked < 5 * len(members)


def test_tables_follow_each_rule_that_grows_and_keep_the_others():
    value = R.Rule("value", E.literal("1"))
    rules = R.RuleSet(R.Rule("root", E.cat(E.call(value), E.literal("c" * 200))), max_states=10_000)
    root = rules.dfas[0]
    (callee, back), = root.calls(START)
    rules.dfas[callee].is_live(START)
    first = rules.tables()
    assert len(first) == 2  # the start state calls the value rule: both are numbered
    state = back
    for byte in b"c" * 200:  # the root's arrays grow along the literal; the callee's do not
        state = root.transition(state, byte)
    second = rules.tables()
    assert second[callee] is first[callee]
    assert second[0] is not first[0] and np.shares_memory(second[0].table, root.table)
    assert rules.tables() is second  # nothing changed since: the same tuple


def test_a_called_rule_is_built_when_a_walk_first_enters_it():
    """A state that calls a rule numbers it; its body (here a deferred one) and automaton are made
    only when a walk reads into it. Until then the walks see a start state of unknown facts."""
    built = []
    later = R.Rule("later", builder=lambda: built.append("body") or E.literal("xy"))
    later.productive = True  # known without building, as for a deferred subschema with a sure instance
    rules = R.RuleSet(R.Rule("root", E.cat(E.literal("a"), E.call(later), E.literal("z"))), max_states=1_000)
    automaton = P.PushdownAutomaton(rules, None, max_positions=1_000, max_row_bytes=0)
    after_a = automaton.walk(START, b"a")
    assert after_a != DEAD and rules.rules == [rules.root, later]
    assert not built and not rules.dfas[1].built
    assert rules.tables()[1].table.tolist() == [-1, -1] and not rules.tables()[1].flags.any()
    end = automaton.walk(after_a, b"xyz")
    assert built == ["body"] and rules.dfas[1].built and bool(automaton.accepting[end])
    assert rules.tables()[1].table is not rules.tables()[0].table and rules.dfas[1].num_states > 2
    assert automaton.walk(after_a, b"xz") == DEAD


def test_threads_reading_an_unbuilt_rule_at_once_build_it_once_and_agree(monkeypatch):
    built = []
    later = R.Rule("later", builder=lambda: built.append("body") or E.cat(E.literal("x"), E.star(E.literal("yz"))))
    later.productive = True
    construct = R.RuleDfa._construct

    def slow_construct(self):  # the other threads arrive while the automaton is being made
        time.sleep(0.05)
        construct(self)

    monkeypatch.setattr(R.RuleDfa, "_construct", slow_construct)
    rules = R.RuleSet(R.Rule("root", E.cat(E.literal("a"), E.call(later))), max_states=1_000)
    rules.dfas[0].transition(START, ord("a"))  # numbers the callee, builds nothing of it
    callee, barrier = rules.dfas[1], threading.Barrier(8)
    results = []

    def read() -> None:
        barrier.wait()
        state = callee.transition(START, ord("x"))
        results.append((state, callee.transition(state, ord("y")), callee.is_live(state), callee.num_states))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["body"] and callee.built and len(results) == 8
    state, after_y, live, _ = results[0]
    assert all(r[:3] == (state, after_y, live) for r in results) and live and after_y not in (DEAD, state)


def test_a_rule_whose_build_passes_a_limit_stays_unbuilt_and_fails_alike_when_read_again():
    big = R.Rule("big", E.cat(E.literal("x"), E.star(E.literal("y"))))
    rules = R.RuleSet(R.Rule("root", E.cat(E.literal("a"), E.call(big))), max_states=5)
    rules.dfas[0].transition(START, ord("a"))  # dead, start, after "a" (calls big), ε: four states
    callee = rules.dfas[1]
    for _ in range(2):
        with pytest.raises(CompileLimitError, match="max_states"):  # its dead state is the fifth, its start the sixth
            callee.is_live(START)
        assert not callee.built and set(vars(callee)) == {"rule", "index", "_rules", "_builder"}


def test_the_length_lower_bound_counts_called_rules_along_literals():
    """Hand-checked: "xyz" then a rule of two bytes then "q" is at least 6 bytes, an alternation
    takes its shorter branch, a star none, and an unbuilt rule 1. A literal of 50,000 bytes before
    a call is bounded without recursing along it."""
    two = R.Rule("two", E.literal("ab"))
    assert R.length_lower_bound(E.cat(E.literal("xyz"), E.call(two), E.literal("q"))) == 6
    assert R.length_lower_bound(E.alt(E.cat(E.call(two), E.call(two)), E.cat(E.literal("c"), E.call(two)))) == 3
    assert R.length_lower_bound(E.cat(E.star(E.call(two)), E.literal("z"))) == 1
    assert R.length_lower_bound(E.cat(E.call(R.Rule("later", builder=lambda: E.literal("abc"))), E.literal("!"))) == 2
    text, long = _literal_before(two, 50_000)
    assert R.length_lower_bound(long) == len(text) + 2 + 1


def test_the_reference_matcher_keeps_the_automata_of_a_few_grammars_only():
    # Its table was keyed weakly by the expression while each automaton's root rule held it, so
    # every automaton stayed: the slow full-bench test grew to 9 GB on one dataset.
    import gc
    import weakref

    from grammask.grammars.fsm.json_schema import lower_json_schema
    from grammask.grammars.spec import JsonSchema

    def grammar(i: int) -> E.Expr:
        return lower_json_schema(JsonSchema({"type": "object", "properties": {"c": {"$ref": "#"}, "v": {"const": i}}}))[0]

    first = grammar(0)
    assert P.matches(first, '{"c":{"v":0}}') and not P.matches(first, '{"v":1}')
    gone = weakref.ref(first)
    del first
    for i in range(1, 10):  # more grammars than it keeps
        assert P.matches(grammar(i), '{"c":{"c":{}}}')
    gc.collect()
    assert gone() is None
