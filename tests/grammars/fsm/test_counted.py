"""Strings of bounded length: ``expr.counted`` and the rows of states inside such a string.

The language of ``counted`` is checked against ``repeat`` (the nested construction it replaces for
strings). The masks are checked over the whole Llama-3.2 vocabulary against a hand-written reader
of canonical JSON string text (Python's UTF-8 decoder and the list of canonical escapes), which
shares nothing with the automaton.
"""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
import regex

import grammask as gm
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import json_text as T

from .helpers import allowed_ids

BOUNDS = [(0, 0), (0, 1), (1, 1), (0, 3), (2, 5), (3, 3), (0, None), (2, None)]


@pytest.mark.parametrize("lo, hi", BOUNDS)
def test_counted_matches_what_repeat_matches(lo, hi):
    part = E.alt(E.literal("a"), E.literal("bc"), E.literal("é"))
    counted, repeated = E.counted(part, lo, hi), E.repeat(part, lo, hi)
    pieces = [b"a", b"bc", "é".encode(), b"b", b"\xc3", b"x"]
    for length in range(7):
        for combo in itertools.product(pieces, repeat=length):
            data = b"".join(combo)
            assert E.matches(counted, data) == E.matches(repeated, data), (lo, hi, data)


def test_counted_keeps_its_count_in_one_node_per_count():
    body = E.counted(T.ENCODED_CHAR, 2, 60)
    after_one = E.derivative(body, ord("a"))
    assert after_one.kind == E.COUNT_KIND and after_one.bounds == (1, 59)
    assert E.derivative(E.counted(T.ENCODED_CHAR, 0, 1), ord("a")) is E.EPS
    assert E.derivative(E.counted(T.ENCODED_CHAR, 1, None), ord("a")) is E.star(T.ENCODED_CHAR)
    assert E.counted(T.ENCODED_CHAR, 3, 2) is E.EMPTY


# ------------------------------------------------------------------------ the reference reader

_ESCAPES = [b'\\"', b"\\\\", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t"] + [
    b"\\u%04x" % c for c in range(0x20) if c not in (0x08, 0x09, 0x0A, 0x0C, 0x0D)
]


def _utf8_prefix_ok(data: bytes) -> bool:
    """Whether ``data`` (an incomplete character) can be completed into a valid UTF-8 character."""
    need = {2: 1, 3: 2, 4: 3}.get(1 if data[0] < 0xC0 else 2 if data[0] < 0xE0 else 3 if data[0] < 0xF0 else 4)
    if need is None or len(data) > need:
        return False
    missing = need + 1 - len(data)
    for second in range(0x80, 0xC0):
        tail = (bytes([second]) + b"\x80" * (missing - 1)) if len(data) == 1 else b"\x80" * missing
        try:
            (data + tail).decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


def _tail_ok(rest: bytes, tail: bytes) -> bool:
    """Whether ``rest`` (from the closing quote on) can go on as ``tail`` then, when ``tail`` is a
    member's start, a canonical integer and the closing brace."""
    if tail.startswith(rest):
        return True
    return tail != b'"' and rest.startswith(tail) and regex.fullmatch(rb"(0|-?[1-9][0-9]*)\}", rest[len(tail):], partial=True) is not None


def viable(text: bytes, head: bytes, tail: bytes, lo: int, hi: int | None) -> bool:
    """Whether ``text`` is a prefix of ``head + body + tail...`` for some canonical string body of
    ``lo`` to ``hi`` characters (``head`` ends with the opening quote, ``tail`` starts with the
    closing one; see :func:`_tail_ok`)."""
    if len(text) <= len(head):
        return head.startswith(text)
    if not text.startswith(head):
        return False
    rest, count, i = text[len(head):], 0, 0
    while i < len(rest):
        byte = rest[i]
        if byte == 0x22:  # the closing quote
            return lo <= count and (hi is None or count <= hi) and _tail_ok(rest[i:], tail)
        if byte == 0x5C:
            match = next((e for e in _ESCAPES if rest[i : i + len(e)] == e), None)
            if match is None:  # an escape cut by the token's end, or none
                return any(e.startswith(rest[i:]) for e in _ESCAPES) and (hi is None or count + 1 <= hi)
            i += len(match)
        elif byte < 0x20:
            return False
        elif byte < 0x80:
            i += 1
        else:
            size = 2 if 0xC0 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4 if 0xF0 <= byte < 0xF8 else 0
            if not size:
                return False
            piece = rest[i : i + size]
            if len(piece) < size:
                return _utf8_prefix_ok(piece) and (hi is None or count + 1 <= hi)
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                return False
            i += size
        count += 1
    return hi is None or count <= hi


_PLAIN = bytes(b for b in range(0x20, 0x80) if b not in (0x22, 0x5C))


def _whole_count(body: bytes) -> int | None:
    """How many characters ``body`` holds when it is whole canonical characters (``json`` judges)."""
    try:
        value = json.loads(b'"' + body + b'"')
    except ValueError:
        return None
    return len(value) if json.dumps(value, ensure_ascii=False)[1:-1].encode() == body else None


def reference_allowed(info, prefix: bytes, tail: bytes, lo: int, hi: int | None) -> set[int]:
    """The tokens ``t`` for which ``prefix + t`` is :func:`viable` (``prefix``: the body so far).
    When ``prefix`` is whole characters, a token of plain ASCII text is decided by its length."""
    count = _whole_count(prefix)
    allowed = set()
    for token, data in enumerate(info.token_bytes[: info.real_vocab_size]):
        if not data or info.is_special(token):
            continue
        if count is not None and not data.translate(None, _PLAIN):  # plain ASCII text only
            ok = hi is None or count + len(data) <= hi
        else:
            ok = viable(prefix + data, b"", tail, lo, hi)
        if ok:
            allowed.add(token)
    return allowed


@pytest.fixture(scope="module")
def compiler(llama_info):
    return gm.GrammarCompiler(llama_info, backend="fsm")


def _walk_to(matcher, info, data: bytes) -> None:
    """Accept ``data`` one single-byte token at a time (every byte is a Llama-3.2 token)."""
    ids = {bytes(t): i for i, t in enumerate(info.token_bytes) if len(t) == 1 and not info.is_special(i)}
    for byte in data:
        assert matcher.accept_token(ids[bytes([byte])]), data


# Bodies already written when the mask is taken: plain text, a multi-byte character cut in two,
# an escape cut in two, and counts at and around the bounds.
CASES = [
    (2, 5, [b"", b"a", "é".encode(), b"ab", b"abcd", b"abcde", "日本".encode()[:4], b"a\\"]),
    (0, 3, [b"", b"ab", b"abc", b"\\n\\"]),
    (1, None, [b"", b"a", b"\\u00"]),
    (3, 40, [b"", b"x" * 10, b"x" * 38, b"x" * 39]),
]


@pytest.mark.parametrize("lo, hi, bodies", CASES)
def test_masks_inside_a_member_string_equal_the_reference(compiler, llama_info, lo, hi, bodies):
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": lo, **({"maxLength": hi} if hi is not None else {})},
              "n": {"type": "integer"}}, "required": ["s", "n"], "additionalProperties": False}
    grammar = compiler.compile(gm.JsonSchema(schema))
    head, tail = b'{"s":"', b'","n":'
    for body in bodies:
        matcher = grammar.matcher()
        _walk_to(matcher, llama_info, head + body)
        expected = reference_allowed(llama_info, body, tail, lo, hi)
        got = set(allowed_ids(matcher, llama_info).tolist())
        assert got == expected, (lo, hi, body, sorted(got ^ expected)[:10])


def test_masks_of_a_root_string_equal_the_reference_along_random_text(compiler, llama_info):
    lo, hi = 4, 12
    grammar = compiler.compile(gm.JsonSchema({"type": "string", "minLength": lo, "maxLength": hi}))
    rng = random.Random(7)
    alphabet = ["a", " ", "é", "日", "😀", "\n", '"', "\\", "\x01"]
    for _ in range(2):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))
        text = gm.JsonSchema({"type": "string"}).serialize(value).encode()
        matcher = grammar.matcher()
        _walk_to(matcher, llama_info, b'"')
        for cut in range(1, len(text)):
            got = set(allowed_ids(matcher, llama_info).tolist()) - set(llama_info.eos_ids)
            if cut % 4 == 1 or cut >= len(text) - 3:  # a sample of positions keeps this quick
                assert got == reference_allowed(llama_info, text[1:cut], b'"', lo, hi), (value, cut)
            _walk_to(matcher, llama_info, text[cut : cut + 1])
        assert matcher.is_accepting()


def test_text_rows_by_length_hold_exactly_the_short_text_tokens(llama_info):
    from grammask.grammars.fsm.pushdown import _JSON_TEXT
    from grammask.grammars.fsm.vocab import vocab_index

    vocab = vocab_index(llama_info)
    partition = vocab.partition(_JSON_TEXT, text=True)
    lengths = {}
    for token, data in enumerate(llama_info.token_bytes[: llama_info.real_vocab_size]):
        if not data or llama_info.is_special(token):
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if all(c >= " " and c not in '"\\' for c in text):
            lengths[token] = len(text)
    for limit in (0, 1, 3, 17, None):
        words = vocab.within_words_up_to(partition, limit)
        got = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")).tolist()
        assert got == sorted(t for t, n in lengths.items() if limit is None or n <= limit), limit
    for limit in range(1000):  # a long string's counts: the rows kept stop at the longest token
        vocab.within_words_up_to(partition, limit)
    assert sum(isinstance(key, int) for key in partition.by_chars) <= max(lengths.values())



def test_a_backend_builds_the_text_tables_when_it_starts(llama_info, monkeypatch):
    """The character counts of string text take milliseconds over the vocabulary: paid when the
    backend starts, not by the first mask of a schema with a length-bounded string."""
    from collections import OrderedDict

    from grammask.grammars.fsm import vocab as vocab_module
    from grammask.grammars.fsm.backend import FsmBackend
    from grammask.grammars.fsm.pushdown import _JSON_TEXT

    monkeypatch.setattr(vocab_module, "_INDEXES", OrderedDict())  # a process that never built them
    FsmBackend(llama_info)
    partition = vocab_module.vocab_index(llama_info).partition(_JSON_TEXT, text=True)
    assert {"within", "outside"} <= set(partition.by_chars)

# ------------------------------------------------------------------------ a pattern and a length bound

_SLUG = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


def slug_viable(text: bytes, tail: bytes, hi: int) -> bool:
    """Whether ``text`` (the body so far and on) is a prefix of a body of 1 to ``hi`` characters
    of ``[a-z0-9_-]`` followed by ``tail``: each byte is a character, and the pattern has no other."""
    count = 0
    for i, byte in enumerate(text):
        if byte == 0x22:
            return 1 <= count <= hi and _tail_ok(text[i:], tail)
        if byte not in _SLUG:
            return False
        count += 1
    return count <= hi


# Bodies far from the bound (one row shared by every count), near it (short tokens from the
# shared row, long ones walked) and at it.
@pytest.mark.parametrize("hi, bodies", [(300, [b"", b"a", b"ab-c_9" * 28]), (40, [b"a", b"x" * 10, b"x" * 38, b"x" * 39, b"x" * 40])])
def test_masks_inside_a_patterned_string_with_a_length_bound_equal_the_reference(compiler, llama_info, hi, bodies):
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z0-9_-]+$", "maxLength": hi},
              "n": {"type": "integer"}}, "required": ["s", "n"], "additionalProperties": False}
    grammar = compiler.compile(gm.JsonSchema(schema))
    head, tail = b'{"s":"', b'","n":'
    vocabulary = [(token, data) for token, data in enumerate(llama_info.token_bytes[: llama_info.real_vocab_size])
                  if data and not llama_info.is_special(token)]
    for body in bodies:
        matcher = grammar.matcher()
        _walk_to(matcher, llama_info, head + body)
        expected = {token for token, data in vocabulary if slug_viable(body + data, tail, hi)}
        got = set(allowed_ids(matcher, llama_info).tolist())
        assert got == expected, (hi, body, sorted(got ^ expected)[:10])


_WORDS = ["a", "b", "x", " ", "\n", '"', "é", "日"]


@pytest.mark.parametrize("pattern, hi, alphabet", [("^(?:\\S+\\s+){0,3}\\S+$", 30, _WORDS), ("^(?:\\S+\\s+){0,3}\\S+$", 200, _WORDS),
                                                   ("^[^x]*x?$", 14, _WORDS), ("^[a-c]*$", 25, ["a", "b", "c"])])
def test_rows_read_through_the_length_free_twin_equal_the_product_rows(llama_info, monkeypatch, pattern, hi, alphabet):
    # The twin's rows (every count far from the bound shares them) against the rows of the
    # product states themselves, walked token by token with the twin switched off.
    from grammask.grammars.fsm.rules import RuleDfa

    schema = gm.JsonSchema({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern, "maxLength": hi}},
                            "required": ["s"], "additionalProperties": False})
    rng = random.Random(hi)
    texts = []
    while len(texts) < 3:
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(min(hi, 24) // 2, min(hi, 24))))
        if regex.fullmatch(pattern[1:-1], value):
            texts.append(schema.serialize({"s": value}).encode())
    byte_tokens = {data[0]: token for token, data in enumerate(llama_info.token_bytes) if len(data) == 1 and not llama_info.is_special(token)}

    def masks(grammar) -> list[np.ndarray]:
        found = []
        for text in texts:
            matcher = grammar.matcher()
            for byte in text:
                found.append(allowed_ids(matcher, llama_info))
                assert matcher.accept_token(byte_tokens[byte])
        return found

    with_twin = masks(gm.GrammarCompiler(llama_info, backend="fsm").compile(schema))
    monkeypatch.setattr(RuleDfa, "length_free_twin", lambda self, state: None)  # every grammar from here on
    without = masks(gm.GrammarCompiler(llama_info, backend="fsm").compile(schema))
    for step, (a, b) in enumerate(zip(with_twin, without)):
        assert np.array_equal(a, b), (pattern, hi, step, np.setxor1d(a, b)[:10])


def test_the_length_free_twin_is_found_only_for_a_bounded_string_then_a_closing_rest():
    from grammask.grammars.fsm.rules import length_free_twin

    pattern = T.CharEncoder()(E.star(E.alt(E.literal("a"), E.literal("b"))))
    quote_then = E.cat(E.literal('"'), E.literal("}"))
    body = E.inter(E.counted(T.ENCODED_CHAR, 0, 40), pattern)
    bound = E.completion_bound(pattern)
    assert length_free_twin(E.cat(body, quote_then)) == (E.cat(pattern, quote_then), 40 - bound)
    bare = length_free_twin(E.cat(E.counted(T.ENCODED_CHAR, 0, 40), quote_then))
    assert bare == (E.cat(E.star(T.ENCODED_CHAR), quote_then), 40 - E.completion_bound(T.ENCODED_CHAR))
    for head, rest in [
        (E.inter(E.counted(T.ENCODED_CHAR, 1, 40), pattern), quote_then),  # a lower bound still to reach
        (E.inter(E.counted(T.ENCODED_CHAR, 0, bound), pattern), quote_then),  # no room
        (E.inter(E.counted(T.ENCODED_CHAR, 0, 40), E.neg(pattern)), quote_then),  # no bound for ¬
        (body, E.literal('\\"')),  # the rest may start a character
        (body, E.opt(quote_then)),  # the rest may be empty
    ]:
        assert length_free_twin(E.cat(head, rest)) is None, (head, rest)


def test_a_backend_builds_the_default_any_value_rules_when_it_starts(tiny_info, monkeypatch):
    """The rule of every JSON value (an object's other members, by default) is built when the
    backend starts, for draft 4's numbers and later drafts': compiling such schemas then builds
    no other, and their other members still take any JSON value."""
    from grammask.grammars.fsm import json_schema
    from grammask.grammars.fsm.automaton import DEAD, START
    from grammask.grammars.fsm.backend import FsmBackend

    monkeypatch.setattr(json_schema, "_ANY_VALUE_RULES", {})  # a process that never built them
    backend = FsmBackend(tiny_info)
    built = dict(json_schema._ANY_VALUE_RULES)
    assert len(built) == 2
    for schema in ({"type": "object"}, {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}):
        automaton = backend.compile(gm.JsonSchema(schema)).automaton
        assert json_schema._ANY_VALUE_RULES == built
        position = automaton.walk(START, b'{"a":[1,"x",{"b":null}],"c":2.5}')
        assert position != DEAD and automaton.accepting[position]
        assert automaton.walk(START, b'{"a":[1,}') == DEAD
