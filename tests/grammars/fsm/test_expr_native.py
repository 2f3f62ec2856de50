"""The C build of expression nodes (``_expr.c``) agrees with the pure-Python ``Expr`` it replaces."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import threading
import weakref

import pytest

from grammask import JsonSchema
from grammask.errors import CompileLimitError
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask import JsonSchema
from grammask.grammars.fsm.regex import regex_to_expr

pytestmark = pytest.mark.skipif(not E.NATIVE, reason="the native extension is not built")

FACTS = ("_hash", "_nullable", "_min_length", "_plain", "_has_calls")


def nodes_below(*roots: E.Expr) -> list[E.Expr]:
    seen, stack, out = set(), list(roots), []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        if E.BYTES_KIND < node.kind != E.CALL_KIND:
            stack.extend(node.args)
    return out


def expressions() -> list[E.Expr]:
    patterns = ["[a-z]+@[a-z]+\\.(com|org)", "(ab|cd){2,5}x?", "[^\"\\\\]{3,9}", "(a|b)*c(d|e)+", "\\d{4}-\\d{2}-\\d{2}"]
    built = [regex_to_expr(p) for p in patterns]
    schema = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 3}, "tags": {"type": "array", "items": {"enum": ["x", "yz"]}}},
              "required": ["id"], "additionalProperties": False}
    built.append(lower_json_schema(JsonSchema(schema))[0])
    built.append(lower_json_schema(JsonSchema(schema), calls=False)[0])
    built.append(E.diff(E.star(E.byte_range(0x61, 0x7A)), E.literal("abc")))
    built.append(E.counted(E.byte_range(0x30, 0x39), 2, 7))
    built.append(E.cat(E.literal("k"), E.call(object()), E.star(E.call(object()))))
    return built


def assert_python_facts(node: E.Expr) -> None:
    """``node``'s facts are those the Python class computes from the same children. Its byte sets
    are either joined or (where a derivative built it first, maybe in another test) left unset."""
    with_sets = E.PythonExpr(node.kind, node.args, node.bounds, False)
    without = E.PythonExpr(node.kind, node.args, node.bounds, True)
    for name in FACTS:
        assert getattr(node, name) == getattr(with_sets, name), (name, node)
    assert (node._single_bytes, node._byte_sets) in {
        (with_sets._single_bytes, with_sets._byte_sets), (without._single_bytes, without._byte_sets)
    }, node


def test_every_node_has_the_facts_the_python_class_computes():
    nodes = nodes_below(*expressions())
    for node in nodes:
        assert_python_facts(node)
    assert len(nodes) > 150
    assert sum(node._byte_sets is not None for node in nodes) > 100


def test_nodes_a_derivative_builds_leave_their_byte_sets_as_python_does():
    base = regex_to_expr("(qx|qy)[0-9]{2,4}(z|w)*")
    derived = [E.derivative(base, ord("q")), E.derivative(E.derivative(base, ord("q")), ord("x"))]
    for node in nodes_below(*derived):
        assert_python_facts(node)
    fresh = E.byte_set(1 << 0x7E)
    E._ACTIVE.deriving = True
    try:
        node = E.cat(fresh, E.literal("unique-tail-for-this-test"))
    finally:
        del E._ACTIVE.deriving
    assert node._byte_sets is None and node._single_bytes == 0
    assert E.PythonExpr(node.kind, node.args, node.bounds, True)._byte_sets is None


def test_equal_structure_is_one_object_and_a_dropped_node_is_rebuilt():
    a = E.cat(E.literal("interned"), E.star(E.byte_range(0x30, 0x39)))
    assert a is E.cat(E.literal("interned"), E.star(E.byte_range(0x30, 0x39)))
    assert E.alt(E.literal("p"), E.literal("q")) is E.alt(E.literal("q"), E.literal("p"))
    assert E.counted(E.byte_range(0x41, 0x5A), 2, 9) is E.counted(E.byte_range(0x41, 0x5A), 2, 9)
    assert {a: 1}[E.cat(E.literal("interned"), E.star(E.byte_range(0x30, 0x39)))] == 1
    ref = weakref.ref(E.literal("short-lived-literal"))
    gc.collect()
    assert ref() is None
    again = E.literal("short-lived-literal")
    assert E.matches(again, b"short-lived-literal") and not E.matches(again, b"short-lived-literaL")


def test_derivative_cycles_are_collected():
    # A derivative caches nodes that point back at their parents: only the cycle collector frees them.
    expr = E.star(E.alt(E.literal("cyc"), E.literal("cyd")))
    ref = weakref.ref(expr)
    state = expr
    for byte in b"cyccydcy":
        state = E.derivative(state, byte)
    assert state is not E.EMPTY
    del expr, state
    gc.collect()
    assert ref() is None


def test_nodes_are_process_local_and_print_as_text():
    node = E.cat(E.literal("ab"), E.star(E.literal("c")))
    with pytest.raises(TypeError, match="process-local"):
        pickle.dumps(node)
    assert repr(node) == E.to_string(node)
    with pytest.raises(AttributeError):
        node.kind = 0
    with pytest.raises(TypeError):
        E._make(E.CAT_KIND, (node,))  # a concatenation has two parts
    with pytest.raises(TypeError):
        E._make(E.ALT_KIND, (node, "not a node"))


def test_a_budget_counts_new_nodes_only():
    with E.BuildBudget(max_bytes=E.NODE_BYTES * 1000) as budget:
        kept = E.literal("counted-once-" * 3)
        spent = budget.nodes
        assert E.literal("counted-once-" * 3) is kept  # every node interned already: free
        assert budget.nodes == spent > 0
    with pytest.raises(CompileLimitError, match="expression_bytes"):
        with E.BuildBudget(max_bytes=E.NODE_BYTES * 10):
            E.literal("a literal longer than ten nodes, all of them new")


def test_a_budget_reads_the_clock_while_large_unions_are_derived():
    # Deriving a union of 20,000 literals by their common first byte builds one node (the union of
    # their rests): node counts alone never read the clock, so the deadline must be read by parts.
    words = E.alt(*(E.literal(f"w{i:05d}-" + "x" * (i % 7)) for i in range(20_000)))
    with pytest.raises(CompileLimitError, match="compile_seconds"):
        with E.BuildBudget(seconds=0.0):
            E.derivative(words, ord("w"))
    with E.BuildBudget(seconds=60.0) as budget:  # within the deadline: the same derivative
        assert E.matches(E.derivative(words, ord("w")), "12345-xxxx")  # 12345 % 7 == 4
        assert budget.nodes < 10


def test_threads_building_the_same_expressions_get_the_same_objects():
    results: list[list[E.Expr]] = []
    barrier = threading.Barrier(8)

    def build():
        barrier.wait()
        results.append([regex_to_expr(f"(thread{i}|t{i})[a-f]{{2,{i + 3}}}") for i in range(30)])

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    for other in results[1:]:
        assert all(a is b for a, b in zip(results[0], other))


def test_the_pure_python_build_still_works():
    code = (
        "from grammask.grammars.fsm import expr as E\n"
        "from grammask.grammars.fsm.regex import regex_to_expr\n"
        "assert not E.NATIVE and E.Expr is E.PythonExpr\n"
        "e = regex_to_expr('(ab|cd){2,3}x?')\n"
        "assert e is regex_to_expr('(ab|cd){2,3}x?')\n"
        "print([E.matches(e, t) for t in (b'abcd', b'abcdabx', b'ab', b'abcdabcd')])\n"
    )
    env = dict(os.environ, GRAMMASK_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True, True, False, False]"


def test_the_c_constructors_build_the_nodes_the_python_ones_do():
    import random

    rng = random.Random(7)
    pool = nodes_below(*expressions()) + [E.EMPTY, E.EPS, E.ANY, E.byte_set(0b1010), E.byte_set(1 << 200)]
    pool.append(E.alt(E.literal("ab"), E.literal("cd"), E.byte_set(0xF0)))
    call_free = [node for node in pool if not node._has_calls]
    for _ in range(3000):
        parts = rng.sample(pool, rng.randint(0, 5))
        assert E.cat(*parts) is E.python_cat(*parts), parts
        parts = rng.sample(call_free, rng.randint(0, 6)) + rng.sample(pool, rng.randint(0, 2))
        assert E.alt(*parts) is E.python_alt(*parts), parts
        assert E.alt(*parts) is E.alt(*reversed(parts))
    with pytest.raises(TypeError, match="expected expressions"):
        E.alt(E.EPS, "a")
    with pytest.raises(TypeError, match="expected expressions"):
        E.cat(1)


def derivative_automaton(roots: list[E.Expr], limit: int = 400) -> tuple[list[E.Expr], list[E.Expr]]:
    """The states reached from ``roots`` (breadth first, at most ``limit``) and every state's
    derivative by every byte, with whatever ``E.derivative`` is now."""
    states, seen, table = list(roots), {id(root) for root in roots}, []
    for state in states:
        if len(states) >= limit:
            break
        for byte in range(256):
            following = E.derivative(state, byte)
            table.append(following)
            if id(following) not in seen:
                seen.add(id(following))
                states.append(following)
    return states, table


def forget_derivatives(nodes: list[E.Expr]) -> None:
    for node in nodes_below(*nodes):
        node._derivatives = None


def test_the_c_derivative_reaches_the_states_the_python_one_does(monkeypatch):
    # ``&``, ``¬`` and counts go through expr._derived, whose derivatives of their parts come back
    # to E.derivative: with it patched to the Python one, the whole automaton is Python's.
    roots = [*expressions(), E.inter(E.star(E.byte_range(0x61, 0x63)), E.neg(E.literal("abc"))), regex_to_expr("(é|ü)+[^a]{0,3}")]
    roots.append(E.alt(*(E.literal(f"k{i}") for i in range(E.LARGE_UNION + 5))))  # a large union: charged by part
    forget_derivatives(roots)
    with monkeypatch.context() as patch:
        patch.setattr(E, "derivative", E.python_derivative)
        python_states, python_table = derivative_automaton(roots)
    forget_derivatives(python_states)
    assert E.derivative is not E.python_derivative
    native_states, native_table = derivative_automaton(roots)
    assert len(native_states) == len(python_states) > 150
    assert all(a is b for a, b in zip(native_states, python_states))
    assert all(a is b for a, b in zip(native_table, python_table))
    assert not E._ACTIVE.deriving
    built = nodes_below(*native_states)
    for node in built:  # the unions a derivative builds get their facts in C too
        assert_python_facts(node)
    assert sum(node.kind == E.ALT_KIND and node._byte_sets is None for node in built) > 20


def test_the_c_derivative_refuses_what_is_not_an_expression_and_a_byte():
    e = E.literal("ab")
    with pytest.raises(TypeError, match="expected expressions"):
        E.derivative("ab", 97)
    for byte in (-1, 256):
        with pytest.raises(ValueError, match="a byte is 0 to 255"):
            E.derivative(e, byte)
    with pytest.raises(TypeError):
        E.derivative(e)
    assert E.derivative(e, ord("a")) is E.literal("b") and not E._ACTIVE.deriving


def test_the_c_length_bound_is_the_python_one():
    rules = [object() for _ in range(3)]
    bounds = {id(rule): length for rule, length in zip(rules, (2, 7, E.INFINITE_LENGTH))}
    spine = E.cat(*(E.cat(E.literal("k,"), E.call(rules[i % 2])) for i in range(3000)))  # deeper than C's stack should go
    roots = [
        *expressions(),
        spine,
        E.alt(E.cat(E.call(rules[0]), E.literal("abc")), E.star(E.call(rules[1])), E.literal("xy")),
        E.cat(E.literal("a"), E.call(rules[2]), E.literal("b")),  # a rule with no finite text
        E.counted(E.cat(E.call(rules[1]), E.literal(",")), 2, 5),
    ]
    seen = []

    def rule_bound(rule):
        seen.append(rule)
        return bounds.get(id(rule), 1)

    for root in roots:
        assert E.length_bound(root, rule_bound) == E.python_length_bound(root, rule_bound), root
    assert E.length_bound(spine, rule_bound) == 3000 * 2 + 1500 * 2 + 1500 * 7
    assert E.length_bound(roots[-2], rule_bound) == E.INFINITE_LENGTH and seen


def test_the_c_length_bound_refuses_what_is_not_an_expression_and_passes_errors_on():
    with pytest.raises(TypeError, match="takes an expression and a callable"):
        E.length_bound("ab", lambda rule: 1)

    def failing(rule):
        raise KeyError(rule)

    with pytest.raises(KeyError):
        E.length_bound(E.cat(E.literal("a"), E.call(object())), failing)
