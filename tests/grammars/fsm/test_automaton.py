"""The lazy DFA: distances (A*, witness probe) against a plain breadth-first search, dead states
under ``&`` / ``¬``, and masks that never lead into them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammask.errors import CompileLimitError
from grammask.grammars.fsm.automaton import DEAD, INFINITE, START, LazyDfa
from grammask.grammars.fsm.expr import (
    ALL_BYTES,
    ALT_KIND,
    AND_KIND,
    BYTES_KIND,
    CALL_KIND,
    MAX_CARRIED_SETS,
    EMPTY,
    EPS,
    INFINITE_LENGTH,
    alt,
    byte_atoms,
    byte_classes,
    byte_set,
    cat,
    completion_bound,
    counted,
    derivative,
    diff,
    first_bytes,
    group,
    inter,
    is_plain,
    literal,
    literal_then,
    matches,
    min_length,
    neg,
    pairwise_disjoint,
    star,
    without_words,
)
from grammask.grammars.fsm import expr as expr_module
from grammask.grammars.fsm.matcher import FsmMatcher
from grammask.grammars.fsm.regex import regex_to_expr
from grammask.grammars.fsm.vocab import VocabIndex

from .helpers import allowed_ids, automaton_of


def brute_force_distance(expr, limit: int = 5) -> int:
    """Fewest bytes to a string ``expr`` matches, by enumerating strings over the bytes the atoms
    mention plus one that they do not (all such bytes behave alike)."""
    alphabet = list(b"abcxz")  # 'z' stands for every byte the atoms do not mention
    for length in range(limit + 1):
        for combo in itertools.product(alphabet, repeat=length):
            if matches(expr, bytes(combo)):
                return length
    return INFINITE


ATOMS = [literal("a"), literal("b"), literal("ab"), literal("abc"), regex_to_expr("[abc]"), regex_to_expr("x*")]


@st.composite
def expressions(draw, depth: int = 3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(ATOMS))
    op = draw(st.sampled_from(["cat", "alt", "and", "not", "star", "diff"]))
    left = draw(expressions(depth - 1))
    right = draw(expressions(depth - 1))
    return {
        "cat": lambda: cat(left, right),
        "alt": lambda: alt(left, right),
        "and": lambda: inter(left, right),
        "not": lambda: neg(left),
        "star": lambda: star(left),
        "diff": lambda: diff(left, right),
    }[op]()


@settings(max_examples=80, deadline=None)
@given(expr=expressions())
def test_distance_equals_brute_force(expr) -> None:
    dfa = LazyDfa(expr)
    expected = brute_force_distance(expr)
    got = dfa.distance(START)
    if expected == INFINITE:  # beyond the enumeration bound the search may still find a longer string
        assert got == INFINITE or got > 5
    else:
        assert got == expected
    if got != INFINITE:
        assert dfa.is_live(START)
        witness = dfa.shortest_completion(START)
        assert len(witness) == got and matches(expr, witness)


@settings(max_examples=60, deadline=None)
@given(expr=expressions())
def test_distances_inside_a_concatenation_are_exact_and_consistent(expr) -> None:
    # The & / ¬ parts sit inside a concatenation, so distances come from their settled lengths
    # (a search of each part alone); each must equal brute force, and a live state's distance must
    # be one more than that of some successor (budget-aware closing relies on it).
    whole = cat(literal("c"), expr, alt(literal("a"), literal("bb")))
    dfa = LazyDfa(whole)
    frontier, seen = [START], {START}
    while frontier:
        state = frontier.pop()
        got = dfa.distance(state)
        expected = brute_force_distance(dfa.expr(state), limit=6)
        assert got == expected or (expected == INFINITE and got > 6), (state, dfa.expr(state))
        successors = {int(t) for t in dfa.row(state) if t != DEAD}
        if got not in (0, INFINITE):
            assert any(dfa.distance(t) == got - 1 for t in successors)
        for target in successors:
            if target not in seen and len(seen) < 40:
                seen.add(target)
                frontier.append(target)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=6), rest=expressions())
def test_a_literal_built_onto_its_rest_is_the_node_cat_builds(data, rest) -> None:
    """``literal_then`` skips the literal alone, not a node of the result: hash-consing gives the
    very node ``cat`` does, an empty or ε rest included."""
    for tail in (rest, EPS, EMPTY):
        assert literal_then(data, tail) is cat(literal(data), tail)


def test_group_is_the_same_language_and_stays_plain() -> None:
    part = cat(literal("ab"), star(literal("c")))
    grouped = group(part)
    assert is_plain(grouped) and min_length(grouped) == 2
    for text in (b"ab", b"abcc", b"a", b"abd", b""):
        assert matches(grouped, text) == matches(part, text)
    assert not is_plain(inter(part, regex_to_expr("a.*")))  # a real intersection is not a grouping


def test_a_part_and_its_complement_intersect_to_nothing() -> None:
    x, y = literal("ab"), star(literal("c"))
    assert inter(x, neg(x)) is EMPTY
    assert inter(y, x, neg(alt(x, literal("d")))) is EMPTY
    kept = inter(star(literal("a")), neg(x))
    assert kept is not EMPTY and matches(kept, b"aa") and not matches(kept, b"ab")


@settings(max_examples=80, deadline=None)
@given(expr=expressions())
def test_min_length_is_a_lower_bound_and_exact_when_plain(expr) -> None:
    expected = brute_force_distance(expr)
    bound = min_length(expr)
    if expected != INFINITE:
        assert bound <= expected
    if is_plain(expr) and expected != INFINITE:
        assert bound == expected
    if is_plain(expr) and expected == INFINITE:
        assert bound == INFINITE_LENGTH or bound > 5


def test_dead_states_are_never_allowed(tiny_info) -> None:
    # Two lowercase letters, but not starting with 'a': after "a" nothing can complete, though
    # [a-z] ∩ ¬[a-z]* is not ∅ as written.
    expr = diff(regex_to_expr("[a-z]{2}"), regex_to_expr("a[a-z]*"))
    automaton = automaton_of(expr, VocabIndex(tiny_info))
    matcher = FsmMatcher(automaton)
    allowed = set(allowed_ids(matcher, tiny_info).tolist())
    assert ord("a") not in allowed and ord("b") in allowed
    assert tiny_info._ids_by_text[b"ab"] not in allowed
    assert not matcher.accept_token(ord("a"))
    dfa = automaton.rules.dfas[0]
    after_a = dfa.step(START, b"a")
    assert after_a != DEAD and not dfa.is_live(after_a)  # not ∅ syntactically, yet dead


def test_empty_intersection_has_no_tokens(tiny_info) -> None:
    expr = inter(regex_to_expr("a+"), regex_to_expr("b+"))
    automaton = automaton_of(expr, VocabIndex(tiny_info))
    assert len(allowed_ids(FsmMatcher(automaton), tiny_info)) == 0


def test_complement_allows_everything_but(tiny_info) -> None:
    expr = inter(regex_to_expr("[ab]*"), neg(literal("ab")))
    automaton = automaton_of(expr, VocabIndex(tiny_info))
    matcher = FsmMatcher(automaton)
    eos = tiny_info.eos_ids[0]
    assert matcher.accept_token(tiny_info._ids_by_text[b"ab"])
    assert eos not in allowed_ids(matcher, tiny_info)  # "ab" itself is excluded
    assert matcher.accept_token(ord("a"))
    assert eos in allowed_ids(matcher, tiny_info)


def test_table_grows_and_rows_are_consistent() -> None:
    expr = regex_to_expr("[a-z]{0,200}!")
    dfa = LazyDfa(expr)
    state = START
    for _ in range(150):
        state = dfa.step(state, b"q")
    assert dfa.num_states > 64  # grew past the initial capacity
    row = dfa.row(state)
    assert row[ord("!")] != DEAD and dfa.accepting[row[ord("!")]]
    assert dfa.distance(state) == 1
    assert np.all(row[[ord(c) for c in "abz"]] == row[ord("q")])


@settings(max_examples=60, deadline=None)
@given(expr=expressions(), picks=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(b"abcxz!")), max_size=80))
def test_rows_and_single_transitions_agree_with_derivatives(expr, picks) -> None:
    """Transitions asked for one by one (few pairs, and many with repeats) and whole rows give
    each byte the state of the derivative by that byte, the same either way."""
    pairs, whole = LazyDfa(expr), LazyDfa(expr)
    states = [START]
    while len(states) < 6:  # states of both automata, added in the same order
        states.append(whole.state_of(pairs.expr(pairs.state_of(derivative(pairs.expr(states[-1]), ord("a"))))))
    chosen = [(states[i], byte) for i, byte in picks]
    for state, byte in chosen:
        pairs.transition(state, byte)
    for state, byte in chosen:
        assert pairs.expr(int(pairs.table[state, pairs.column_of_byte[byte]])) is derivative(pairs.expr(state), byte)
    for state in states:
        row = whole.row(state)
        for byte in range(256):
            assert whole.expr(int(row[byte])) is derivative(whole.expr(state), byte)
            known = int(pairs.table[state, pairs.column_of_byte[byte]])
            assert known == -1 or pairs.expr(known) is whole.expr(int(row[byte]))


def test_states_with_equal_byte_classes_share_one_partition() -> None:
    expr = regex_to_expr("[a-z]{0,200}!")
    after_one, after_two = derivative(expr, ord("q")), derivative(derivative(expr, ord("q")), ord("q"))
    assert after_one is not after_two  # two counter states ...
    letters = sum(1 << b for b in range(ord("a"), ord("z") + 1))
    expected = {letters, 1 << ord("!"), ALL_BYTES ^ letters ^ (1 << ord("!"))}
    assert set(byte_classes(after_one)) == expected
    assert byte_classes(after_two) is byte_classes(after_one)  # ... one tuple of masks


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["[a-f]+", "[c-x]*y", "(ab|cd)?e", "[0-9]{2,5}", "z|[^a-m]", "(q[r-t])*", "\\d+\\.\\d"]), min_size=2, max_size=5))
def test_byte_classes_are_exact_through_the_refinement_memo(pieces) -> None:
    # Alternations and intersections of pieces share refined partitions (memoised by identity);
    # each class must still be a set of bytes with one derivative, and the classes a partition.
    for expr in (alt(*map(regex_to_expr, pieces)), inter(*(regex_to_expr(p + ".*") for p in pieces))):
        classes = byte_classes(expr)
        assert sum(classes) == ALL_BYTES and all(a & b == 0 for a, b in itertools.combinations(classes, 2))
        for mask in classes:
            members = [b for b in range(256) if (mask >> b) & 1]
            assert len({id(derivative(expr, b)) for b in members}) == 1
        finer = set()  # the common refinement of the parts' own classes, computed afresh
        for part in expr.args if expr.kind in (ALT_KIND, AND_KIND) else (expr,):
            finer = set(byte_classes(part)) if not finer else {x & y for x in finer for y in byte_classes(part) if x & y}
        assert set(classes) == finer


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(expressions(), min_size=2, max_size=4), star_part=expressions())
def test_first_bytes_skips_only_parts_whose_derivative_is_empty(parts, star_part) -> None:
    # A union derives only the parts whose first bytes hold the byte, and an intersection is ∅ on a
    # byte outside its own first bytes: the result must be the very node every part's derivative
    # gives (nodes are interned, so a wrongly skipped part shows as another node).
    pieces = [*parts, star(star_part), counted(regex_to_expr("[a-c]"), 1, 3), cat(counted(literal("x"), 0, 2), literal("b"))]
    for expr in (alt(*pieces), inter(*parts[:2]), alt(inter(*parts[:2]), neg(parts[-1]))):
        for byte in b"abcxz\x00":
            derived = [derivative(part, byte) for part in expr.args] if expr.kind in (ALT_KIND, AND_KIND) else None
            if expr.kind == ALT_KIND:
                assert derivative(expr, byte) is alt(*derived)
            elif expr.kind == AND_KIND:
                assert derivative(expr, byte) is inter(*derived)
            for part in (expr, *pieces):
                if not (first_bytes(part) >> byte) & 1:
                    assert derivative(part, byte) is EMPTY


@st.composite
def plain_expressions(draw, depth: int = 3):
    """Expressions without ``&`` and ``¬`` (the ones :func:`completion_bound` bounds)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(ATOMS))
    op = draw(st.sampled_from(["cat", "alt", "star", "count"]))
    left, right = draw(plain_expressions(depth - 1)), draw(plain_expressions(depth - 1))
    lo = draw(st.integers(0, 3))
    counted_part = draw(st.sampled_from([regex_to_expr("[a-c]"), alt(literal("a"), literal("bcx"))]))  # characters of 1 to 3 bytes
    return {
        "cat": lambda: cat(left, right),
        "alt": lambda: alt(left, right),
        "star": lambda: star(left),
        "count": lambda: counted(counted_part, lo, lo + draw(st.integers(0, 2))),
    }[op]()


@settings(max_examples=80, deadline=None)
@given(expr=plain_expressions())
def test_completion_bound_bounds_the_shortest_text_of_every_derivative(expr) -> None:
    # Brute force over every word of up to four bytes: each non-∅ derivative has a text of at
    # most the bound (min_length is exact on plain expressions).
    bound = completion_bound(expr)
    assert bound is not None
    for length in range(5):
        for word in itertools.product(b"abcxz", repeat=length):
            derived = expr
            for byte in word:
                derived = derivative(derived, byte)
            if derived is not EMPTY:
                assert min_length(derived) <= bound, (expr, bytes(word))


def test_completion_bound_by_hand() -> None:
    assert completion_bound(literal("abc")) == 3
    # After "a" of [a-c]{2,5}x the shortest rest is one letter and x.
    assert completion_bound(cat(counted(regex_to_expr("[a-c]"), 2, 5), literal("x"))) == 3
    assert completion_bound(star(literal("abc"))) == 3
    assert completion_bound(inter(regex_to_expr("a*"), regex_to_expr("(aa)*"))) is None
    assert completion_bound(neg(literal("a"))) is None
    # A long literal is a chain of concatenations far deeper than Python's recursion limit.
    assert completion_bound(cat(star(literal("ab")), literal("c" * 20_000))) == 2 + 20_000


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(expressions(), min_size=2, max_size=4))
def test_pairwise_disjoint_agrees_with_a_search_of_each_intersection(parts) -> None:
    # The reference: each pair's intersection searched for a shortest string by the lazy DFA.
    overlapping = any(LazyDfa(inter(a, b)).distance(START) < INFINITE for a, b in itertools.combinations(parts, 2))
    assert pairwise_disjoint(parts) is (not overlapping)


def test_pairwise_disjoint_by_hand() -> None:
    keys = [regex_to_expr(p) for p in ("name:(en|nl)", "url:(en|nl)", "contacts:[0-3]:surName", "x-[a-z]*")]
    assert pairwise_disjoint(keys) is True
    assert pairwise_disjoint([*keys, regex_to_expr("[a-z]+-[a-z]+")]) is False  # "x-a"
    assert pairwise_disjoint([literal("a"), literal("a")]) is False  # one language twice
    assert pairwise_disjoint([regex_to_expr("a*b"), regex_to_expr("a*c")]) is True  # one tuple: a loops
    long_prefix = [literal("aaaaab"), literal("aaaaac")]  # a tuple per byte of the common prefix
    assert pairwise_disjoint(long_prefix, max_states=3) is None and pairwise_disjoint(long_prefix, max_states=6) is True


@settings(max_examples=80, deadline=None)
@given(expr=expressions(), words=st.lists(st.binary(max_size=4).map(lambda w: bytes(b"abcxz"[b % 5] for b in w)), max_size=4))
def test_without_words_removes_exactly_the_words(expr, words) -> None:
    # Brute force over every string of up to four bytes of the atoms' alphabet ('z': any other byte).
    rest = without_words(expr, words)
    assert is_plain(rest) or not is_plain(expr)
    for length in range(5):
        for combo in itertools.product(b"abcxz", repeat=length):
            text = bytes(combo)
            assert matches(rest, text) == (matches(expr, text) and text not in words), (expr, words, text)


def test_partitions_agree_with_a_direct_check(llama_info) -> None:
    # Which tokens lie wholly in a byte set, and where the others first leave it, against the
    # token bytes themselves.
    vocab = VocabIndex(llama_info)
    for chars in (b"0123456789", b"abcdefghijklmnopqrstuvwxyz ", bytes(range(0x20, 0x7F))):
        byte_set = np.zeros(256, dtype=bool)
        byte_set[list(chars)] = True
        partition = vocab.partition(byte_set)
        within = {int(i) for i in np.flatnonzero(np.unpackbits(partition.within_words.view(np.uint8), bitorder="little"))}
        expected_within = {int(i) for i, data in vocab.text.items() if set(data) <= set(chars)}
        assert within == expected_within and partition.within_count == len(within)
        for position, begin in zip(partition.outside[::97].tolist(), partition.outside_begins[::97].tolist()):
            data = vocab.text[int(vocab.token_ids[position])]
            first = next(k for k, b in enumerate(data) if b not in chars)
            assert begin == vocab.begins[position] + first
        for starts in (b"7", b"0123456789", b"-.e", bytes(range(0x20, 0x7F))):  # few bytes: slices; many: a mask
            first_bytes = np.zeros(256, dtype=bool)
            first_bytes[list(starts)] = True
            chosen = partition.outside_starting_with(first_bytes).tolist()
            assert chosen == [i for i, position in enumerate(partition.outside.tolist()) if vocab.text[int(vocab.token_ids[position])][0] in starts]


def test_partitions_kept_are_bounded_in_bytes(llama_info, monkeypatch) -> None:
    from grammask.grammars.fsm import vocab as vocab_module

    monkeypatch.setattr(vocab_module, "_PARTITION_BYTES", 12 << 20)
    vocab = VocabIndex(llama_info)
    for byte in range(0x30, 0x3A):  # ten partitions of about 3.5 MB each
        byte_set = np.zeros(256, dtype=bool)
        byte_set[byte] = True
        latest = vocab.partition(byte_set)
        assert vocab._partition_bytes == sum(p.nbytes for p in vocab._partitions.values()) <= 12 << 20
    assert 1 < len(vocab._partitions) < 10 and vocab.partition(byte_set) is latest  # the least recently used went



def test_a_partition_built_by_two_threads_at_once_is_held_once(llama_info, monkeypatch) -> None:
    import threading

    from grammask.grammars.fsm import vocab as vocab_module

    vocab = VocabIndex(llama_info)
    both_inside = threading.Barrier(2)
    first_outside = vocab_module.walk.first_outside

    def meeting(*args):  # both threads are building before either keeps its partition
        both_inside.wait(timeout=10)
        return first_outside(*args)

    monkeypatch.setattr(vocab_module.walk, "first_outside", meeting)
    byte_set = np.zeros(256, dtype=bool)
    byte_set[list(b"0123456789")] = True
    found = [None, None]

    def build(slot: int) -> None:
        found[slot] = vocab.partition(byte_set)

    threads = [threading.Thread(target=build, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found[0] is found[1] is not None
    assert vocab._partition_bytes == found[0].nbytes

def test_rows_inside_a_literal_equal_its_derivatives() -> None:
    # A state that is one byte then the rest gets its row without derivatives: the same row.
    text = b"a\x00\xff\"b"
    dfa = LazyDfa(cat(literal(text), alt(literal("c"), literal("de"))))
    state = START
    for byte in text:
        expected = [dfa.state_of(derivative(dfa.expr(state), b)) for b in range(256)]
        assert dfa.row(state).tolist() == expected
        assert dfa.step(state, bytes([byte])) == expected[byte] != DEAD
        state = expected[byte]
    assert dfa.step(state, b"de") != DEAD and dfa.accepting[dfa.step(state, b"de")]


def test_byte_atoms_are_the_partition_of_the_expression_byte_sets() -> None:
    """Hand-checked: the sets {a, b, c}, {x} and {b} split the bytes into {a, c}, {b}, {x} and the rest,
    and the automaton's table has one column per atom."""
    atoms = byte_atoms(regex_to_expr("[a-c]x|b"))
    as_sets = {frozenset(b for b in range(256) if mask >> b & 1) for mask in atoms}
    rest = frozenset(range(256)) - set(b"abcx")
    assert as_sets == {frozenset(b"ac"), frozenset(b"b"), frozenset(b"x"), rest}
    dfa = LazyDfa(regex_to_expr("[a-c]x|b"))
    assert dfa.width == 4 and dfa.table.shape[1] == 4
    assert dfa.column_of_byte[ord("a")] == dfa.column_of_byte[ord("c")] != dfa.column_of_byte[ord("b")]


def test_a_state_partition_that_splits_an_atom_is_refused() -> None:
    """The table has one column per atom, so a state whose classes split an atom (a and c share
    one here) could not be written: the automaton says so instead of mixing their targets."""
    dfa = LazyDfa(regex_to_expr("[a-c]x|b"))
    a = 1 << ord("a")
    with pytest.raises(AssertionError, match="byte atoms"):
        dfa._partition((a, ALL_BYTES ^ a))
    b = 1 << ord("b")
    _, class_of_column, _ = dfa._partition((b, ALL_BYTES ^ b))
    assert class_of_column[dfa.column_of_byte[ord("b")]] == 0


def _atoms_by_walking(expr) -> set[frozenset[int]]:
    """Reference: every byte set in ``expr`` (a walk of its nodes, calls not entered), and the
    classes of bytes that belong to exactly the same of them."""
    masks, seen, pending = set(), set(), [expr]
    while pending:
        node = pending.pop()
        if id(node) not in seen:
            seen.add(id(node))
            if node.kind == BYTES_KIND:
                masks.add(node.args[0])
            elif node.kind > BYTES_KIND and node.kind != CALL_KIND:
                pending.extend(node.args)
    by_signature: dict[tuple, set[int]] = {}
    for byte in range(256):
        by_signature.setdefault(tuple(mask >> byte & 1 for mask in sorted(masks)), set()).add(byte)
    return {frozenset(group) for group in by_signature.values()}


@settings(max_examples=200, deadline=None)
@given(expr=expressions())
def test_byte_atoms_carried_by_the_nodes_match_a_walk(expr) -> None:
    """The atoms read off the node (single bytes and byte sets joined as it was built) are the
    partition a walk over the whole expression finds, for its derivatives too."""
    for node in (expr, *(derivative(expr, byte) for byte in (0, 97, 98, 255))):
        atoms = byte_atoms(node)
        assert {frozenset(b for b in range(256) if mask >> b & 1) for mask in atoms} == _atoms_by_walking(node)
        assert sum(atoms) == ALL_BYTES and len(set(atoms)) == len(atoms)


def test_byte_atoms_past_the_carried_sets_are_walked() -> None:
    """A concatenation of more distinct classes than a node carries (each class {i, i+1}) carries
    none at its top; the atoms are still every single byte the classes split off."""
    classes = [byte_set(3 << i) for i in range(0, 2 * (MAX_CARRIED_SETS + 10), 2)]
    spine = cat(*classes, alt(literal("z"), star(byte_set(3 << 250))))
    for node in (spine, derivative(spine, 0), derivative(derivative(spine, 1), 2)):
        atoms = byte_atoms(node)
        assert node._byte_sets is expr_module._UNCARRIED and classes[-1]._byte_sets == {3 << (2 * (MAX_CARRIED_SETS + 9))}
        assert {frozenset(b for b in range(256) if mask >> b & 1) for mask in atoms} == _atoms_by_walking(node)


def test_a_derivative_leaves_the_byte_sets_of_its_new_nodes_to_byte_atoms() -> None:
    """A node built outside a derivative joins its children's byte sets at once; one a derivative
    builds (and one built above it) carries none until byte_atoms asks, which then finds the
    partition a walk finds; a derivative stopped by a build cap leaves the thread out of that mode."""
    loop = star(cat(byte_set(1 << 201), byte_set(3 << 202)))
    assert loop._byte_sets == {3 << 202}
    derived = derivative(loop, 201)  # cat({202, 203}, loop): a new node
    above = cat(byte_set(1 << 205), derived)
    assert derived._byte_sets is None and above._byte_sets is None
    for node in (derived, above):
        atoms = byte_atoms(node)
        assert {frozenset(b for b in range(256) if mask >> b & 1) for mask in atoms} == _atoms_by_walking(node)
        assert node._byte_sets == {3 << 202}
    stopped = star(cat(byte_set(1 << 207), byte_set(3 << 208)))
    with pytest.raises(CompileLimitError, match="expression_bytes"), expr_module.BuildBudget(max_bytes=0):
        derivative(stopped, 207)
    assert cat(byte_set(1 << 206), stopped)._byte_sets == {3 << 208}


@settings(max_examples=60, deadline=None)
@given(expr=expressions())
def test_every_state_byte_classes_are_unions_of_the_atoms(expr) -> None:
    """Derivatives only recombine the start's byte sets, so every state reached splits the bytes
    along the atoms (what makes one column per atom exact)."""
    dfa = LazyDfa(expr)
    atoms = byte_atoms(expr)
    for state in range(1, 40):
        if state >= dfa.num_states:
            break
        dfa.row(state)
        for mask in byte_classes(dfa.expr(state)):
            assert all(atom & mask in (0, atom) for atom in atoms)
