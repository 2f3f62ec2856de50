"""FsmMatcher semantics on the tiny tokenizer (every byte is a token, plus a few words)."""

from __future__ import annotations

import pytest

from grammask.errors import CompileLimitError, InvalidParameterError
from grammask.grammars.fsm.regex import regex_to_expr
from grammask.grammars.registry import backend_class
from grammask.grammars.spec import Ebnf, Regex

from .helpers import allowed_ids, compile_regex


def ids_of(info, *pieces: bytes) -> list[int]:
    out = []
    for piece in pieces:
        token = info._ids_by_text.get(piece)
        assert token is not None, piece
        out.append(token)
    return out


def brute_force_allowed(info, pattern: str, prefix: bytes) -> set[int]:
    """Every ordinary token t such that prefix + t can still be completed (via expression derivatives)."""
    from grammask.grammars.fsm.automaton import LazyDfa

    dfa = LazyDfa(regex_to_expr(pattern))
    state = dfa.step(1, prefix)
    out = set()
    for token, data in enumerate(info.token_bytes):
        if info.is_special(token) or not data:
            continue
        if dfa.is_live(dfa.step(state, data)):
            out.add(token)
    if state and dfa.accepting[state]:
        out.update(info.eos_ids)
    return out


@pytest.mark.parametrize("pattern", ["(true|false|null)", "ab(c|d)*", "[0-9]{2,3}", '\\{"a":(12|true)\\}', "é+x?"])
def test_mask_matches_brute_force_at_every_step(tiny_info, pattern: str) -> None:
    grammar = compile_regex(tiny_info, pattern)
    walk = {"(true|false|null)": b"false", "ab(c|d)*": b"abcdc", "[0-9]{2,3}": b"123"}.get(
        pattern, b'{"a":12}' if "{" in pattern else "éé".encode()
    )
    matcher = grammar.matcher()
    for index in range(len(walk) + 1):
        expected = brute_force_allowed(tiny_info, pattern, walk[:index])
        assert set(allowed_ids(matcher, tiny_info).tolist()) == expected, walk[:index]
        if index < len(walk):
            assert matcher.accept_token(walk[index])  # byte tokens have id == byte


def test_accept_agrees_with_mask_for_every_token(tiny_info) -> None:
    grammar = compile_regex(tiny_info, "(ab|abc)+|12")
    matcher = grammar.matcher()
    for prefix in (b"", b"ab", b"abab", b"1"):
        matcher.reset()
        assert matcher.accept_tokens(list(prefix)) == len(prefix)
        allowed = set(allowed_ids(matcher, tiny_info).tolist())
        for token in range(tiny_info.vocab_size):
            fork = matcher.fork()
            assert fork.accept_token(token) == (token in allowed), (prefix, token)


def test_rejected_token_leaves_state_unchanged(tiny_info) -> None:
    matcher = compile_regex(tiny_info, "abc").matcher()
    assert matcher.accept_token(ord("a"))
    before = allowed_ids(matcher, tiny_info)
    assert not matcher.accept_token(ord("x"))
    assert matcher.num_accepted == 1
    assert (allowed_ids(matcher, tiny_info) == before).all()


def test_special_tokens_never_and_eos_only_when_accepting(tiny_info) -> None:
    eos = tiny_info.eos_ids[0]
    pad = eos + 1
    matcher = compile_regex(tiny_info, "a*").matcher()
    assert eos in allowed_ids(matcher, tiny_info)
    assert pad not in allowed_ids(matcher, tiny_info)
    assert not matcher.accept_token(pad)
    assert not matcher.accept_token(tiny_info.vocab_size - 1)  # padding column past the real vocab
    strict = compile_regex(tiny_info, "ab").matcher()
    assert eos not in allowed_ids(strict, tiny_info) and not strict.accept_token(eos)
    assert strict.accept_token(ids_of(tiny_info, b"ab")[0])
    assert strict.accept_token(eos)
    assert strict.is_terminated()
    assert len(allowed_ids(strict, tiny_info)) == 0
    assert not strict.accept_token(ord("a"))
    strict.rollback(1)
    assert not strict.is_terminated()
    assert strict.accept_token(eos)


def test_rollback_any_depth_validate_and_fork(tiny_info) -> None:
    matcher = compile_regex(tiny_info, "(ab|12)*c").matcher()
    tokens = ids_of(tiny_info, b"ab", b"12", b"12", b"ab")
    assert matcher.accept_tokens(tokens) == 4
    fork = matcher.fork()
    matcher.rollback(3)
    assert matcher.num_accepted == 1
    assert fork.num_accepted == 4  # independent
    assert matcher.validate_tokens(tokens[1:] + [ord("c"), ord("x")]) == 4
    assert matcher.num_accepted == 1  # validate does not advance
    with pytest.raises(InvalidParameterError, match="num_tokens"):
        matcher.rollback(2)
    matcher.reset()
    assert matcher.num_accepted == 0


def test_jump_forward(tiny_info) -> None:
    grammar = compile_regex(tiny_info, '\\{"name":"(é|x)')
    matcher = grammar.matcher()
    assert matcher.jump_forward_string() == '{"name":"'
    assert matcher.accept_tokens(list(b'{"name":"')) == 9
    assert matcher.jump_forward_string() == ""  # a choice
    assert matcher.accept_token(0xC3)
    assert matcher.jump_forward_bytes() == b"\xa9"
    assert matcher.jump_forward_string() == ""  # would end a character begun earlier: not decodable alone
    cut = compile_regex(tiny_info, "aé").matcher()
    assert cut.jump_forward_string() == "aé"
    accepting = compile_regex(tiny_info, "a?b").matcher()
    assert accepting.jump_forward_string() == ""


def test_budget_refuses_impossible_and_keeps_invariant(tiny_info) -> None:
    grammar = compile_regex(tiny_info, "(abc)+|x{5}")
    assert grammar.supports_budget and grammar.min_tokens == 2  # "abc" is one token of this vocabulary, then EOS
    with pytest.raises(InvalidParameterError, match="at least 2"):
        grammar.matcher(max_tokens=1)
    matcher = grammar.matcher(max_tokens=2)
    # With 2 tokens, only "abc" then EOS fits: "a" or "x" would need more than one token after them.
    abc = ids_of(tiny_info, b"abc")[0]
    assert set(allowed_ids(matcher, tiny_info).tolist()) == {abc}
    assert not matcher.fork().accept_token(ord("x")) and matcher.accept_token(abc)
    assert set(allowed_ids(matcher, tiny_info).tolist()) == set(tiny_info.eos_ids)


def test_limits_raise_named_errors(tiny_info) -> None:
    with pytest.raises(CompileLimitError, match="'max_states'"):
        compile_regex(tiny_info, "[ab]{30}c", max_states=8).matcher().accept_tokens(list(b"ab" * 10))
    with pytest.raises(CompileLimitError, match="'compile_seconds'"):
        compile_regex(tiny_info, "a[a-z]{200}", compile_seconds=1e-9)
    with pytest.raises(CompileLimitError, match="'max_nesting'"):
        compile_regex(tiny_info, "(" * 5000 + "a" + ")" * 5000)


def test_row_memory_is_bounded_by_eviction(tiny_info) -> None:
    # Rows are cheap to compose again: past the cap the least recently used are dropped, and the
    # masks stay right.
    grammar = compile_regex(tiny_info, "[a-c]{0,40}d", max_row_bytes=4096)
    matcher = grammar.matcher()
    for step in range(40):
        allowed = set(allowed_ids(matcher, tiny_info).tolist())
        assert ord("d") in allowed and ord("a") in allowed
        assert matcher.accept_token(ord("abc"[step % 3]))
    automaton = grammar.automaton
    caches = (automaton._rows, automaton._rule_rows, automaton._profiles)
    assert sum(cache.max_bytes for cache in caches) == 4096
    assert all(cache.bytes <= cache.max_bytes for cache in caches)  # each may keep one entry past it: not here
    assert len(automaton._rows) < automaton.num_positions  # rows were dropped
    assert set(allowed_ids(matcher, tiny_info).tolist()) == {ord("d")}


def test_backend_registry_and_support(tiny_info) -> None:
    backend = backend_class("fsm")(tiny_info)
    assert backend.supports(Regex("a"))
    refusal = backend.supports(Ebnf('root ::= "a"'))
    assert not refusal and "regular languages only" in refusal.reason
    grammar = backend.compile(Regex("a|b"))
    assert grammar.backend == "fsm" and grammar.is_exact


def test_random_walks_end_in_matching_strings(tiny_info) -> None:
    """Random walks through the mask, once terminated, decode to strings the regex module fully matches."""
    import random

    import regex

    pattern = "(ab|é|12)+(x|y)?"
    grammar = compile_regex(tiny_info, pattern)
    rng = random.Random(0)
    finished = 0
    for _ in range(30):
        matcher, tokens = grammar.matcher(), []
        while not matcher.is_terminated() and len(tokens) < 40:
            choice = int(rng.choice(allowed_ids(matcher, tiny_info)))
            assert matcher.accept_token(choice)
            tokens.append(choice)
        if matcher.is_terminated():
            finished += 1
            text = tiny_info.decode(tokens).decode("utf-8")
            assert regex.fullmatch(pattern, text), text
    assert finished > 10


class _RolledBackAfterFirstRead(list):
    """A position list that another thread rolls back by one right after this thread first reads it."""

    def __getitem__(self, index):
        value = super().__getitem__(index)
        if len(self) > 1:
            super().pop()
        return value


def test_accept_token_judges_the_position_it_read_when_another_thread_rolls_back(tiny_info) -> None:
    """A matcher shared by threads: the mask check and the step read one position, never two."""
    matcher = compile_regex(tiny_info, "ab|cd").matcher()
    assert matcher.accept_token(ord("a"))
    matcher._states = _RolledBackAfterFirstRead(matcher._states)
    assert matcher.accept_token(ord("c")) is False  # "ac" is no prefix; "c" is, at the start the other thread restored
