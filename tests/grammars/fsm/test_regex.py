"""The regex front end against the ``regex`` module (ASCII mode, so ``\\d \\w`` are ECMA's sets)."""

from __future__ import annotations

import itertools

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from grammask.errors import CompileLimitError, InvalidRegexError, UnsupportedFeatureError
from grammask.grammars.fsm.automaton import INFINITE, START, LazyDfa
from grammask.grammars.fsm.expr import any_char, diff, matches, star
from grammask.grammars.fsm.regex import MAX_REPEAT, pattern_to_expr, regex_to_expr

ALPHABET = "ab01-_ .xyé€😀Z"

PATTERNS = [
    "",
    "a",
    "abc",
    "a|b|",
    "(ab)*",
    "(?:ab|a)+b?",
    "a{2}",
    "a{2,}",
    "a{1,3}b{0,2}",
    "a*?b+?",
    r"\d+",
    r"\D\w\W",
    r"[a-z0-9_]+",
    r"[^a-z]",
    r"[^\d]",
    r"[\d\-x]+",
    r"[a-c-e]",
    r"\x61\u0062😀?",
    r"\.",
    r"[é€]+",
    r"[^\x00-\x7F]",
    ".",
    ".+",
    "a{,2}",  # {0,2} as the regex module reads it
    "a{x}",  # not a quantifier: literal text
    "x{",
    "]}",
    "(a|b)(?<name>c|é)?",
    "(ab|b)*a?",
    "[\u0080-\uFFFF]+",
    r"\u00e9",
    "😀+",
]


def texts(max_len: int = 4) -> list[str]:
    out = [""]
    for length in range(1, max_len + 1):
        out.extend("".join(p) for p in itertools.product("ab01-_", repeat=length) if length <= 3)
    return out + ["é", "€", "😀", "😀😀", "aé", "x{", "]}", "a{,2}", "abé", "ab€", "a\n", "\n", "é€é", " ", "Z", "ac"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_whole_match_agrees_with_regex_module(pattern: str) -> None:
    expr = regex_to_expr(pattern)
    oracle = regex.compile(pattern, regex.ASCII)
    for text in texts():
        assert matches(expr, text) == (oracle.fullmatch(text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", PATTERNS + ["^a", "a$", "^a|b$", "^$", "^(a|^b)c", "(a$|b)c?", "(^a)*b", "x(^a)?"])
def test_search_agrees_with_regex_module(pattern: str) -> None:
    expr = pattern_to_expr(pattern)
    oracle = regex.compile(pattern, regex.ASCII)
    for text in texts():
        if "\n" in text:  # Python's '$' also matches before a final newline; ECMA's does not
            continue
        assert matches(expr, text) == (oracle.search(text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", PATTERNS + [r"[^a]", r"\W+", r"[\s\S]", r"[^\uD800-\uDFFF]?"])
def test_patterns_hold_only_unicode_characters(pattern: str) -> None:
    """Every string a pattern matches is UTF-8 of scalar values: JSON Schema lowering relies on it
    to read a pattern's encoding as a string body without intersecting with all strings."""
    outside = diff(pattern_to_expr(pattern), star(any_char()))
    assert LazyDfa(outside).distance(START) == INFINITE


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=8))
def test_hypothesis_texts(text: str) -> None:
    for pattern in ["(a|b0)*[-_ ]?x+", r"\w+( \w+)*", r"[^a]{2,3}", "(é|€)+😀?"]:
        assert matches(regex_to_expr(pattern), text) == (regex.fullmatch(pattern, text, regex.ASCII) is not None)


def test_dot_as_python_reads_it_and_ecma_space() -> None:
    dot = regex_to_expr(".")
    for char in "\n\r\u2028\u2029\t😀":  # only \n is excluded, as regex / re (and so jsonschema) read it
        assert matches(dot, char) == (regex.fullmatch(".", char) is not None), repr(char)
    assert not matches(dot, "\n") and matches(dot, "\r")
    space = regex_to_expr(r"\s")
    for char in " \t\n\r\u000b\u000c\u00a0\u2003\u3000\ufeff":
        assert matches(space, char), repr(char)
    assert not matches(space, "a")


def test_surrogate_pair_escape_is_one_character() -> None:
    expr = regex_to_expr(r"\uD83D\uDE00")
    assert matches(expr, "😀")
    assert matches(regex_to_expr(r"\u{1F600}"), "😀")  # ECMA 'u'-mode spelling


def test_unicode_properties() -> None:
    letters = regex_to_expr(r"\p{L}+")
    assert matches(letters, "héllo") and matches(letters, "Ωμέγα") and not matches(letters, "h1")
    not_letter = regex_to_expr(r"\P{Letter}")
    assert matches(not_letter, "1") and not matches(not_letter, "é")
    assert matches(regex_to_expr(r"[\p{Lu}\d]+"), "AB9") and not matches(regex_to_expr(r"[\p{Lu}\d]+"), "a")


@pytest.mark.parametrize(
    ("pattern", "feature", "offset"),
    [
        ("ab(?=c)", "lookahead", 2),
        ("(?!x)y", "lookahead", 0),
        ("a(?<=b)", "lookbehind", 1),
        ("a(?<!b)", "lookbehind", 1),
        (r"(a)\1", "backreference", 3),
        (r"(?<n>a)\k<n>", "backreference", 7),
        (r"\bword", "word boundary", 0),
        (r"x\B", "word boundary", 1),
        ("(?i)abc", "inline flags or group extension", 0),
    ],
)
def test_unsupported_constructs_name_feature_and_offset(pattern: str, feature: str, offset: int) -> None:
    with pytest.raises(UnsupportedFeatureError, match=f"cannot enforce '{feature}' at '@{offset}'") as info:
        regex_to_expr(pattern)
    assert info.value.backend == "fsm"


@pytest.mark.parametrize(
    ("pattern", "reason", "position"),
    [
        ("a(b", "unterminated group", 1),
        ("ab)", "unbalanced", 2),
        ("*a", "nothing to repeat", 0),
        ("a**", "multiple repeat", 2),
        ("^*", "nothing to repeat", 0),
        ("[a-", "unterminated character set", 0),
        ("[z-a]", "out of order", 1),
        ("a{3,1}", "out of order", 1),
        (r"\xZ1", "hex digits", 0),
        (r"\p{NoSuchProperty}", "unknown Unicode property", 0),
        ("a\\", "end of pattern", 1),
        (r"\q", "bad escape", 0),
    ],
)
def test_syntax_errors_name_position(pattern: str, reason: str, position: int) -> None:
    with pytest.raises(InvalidRegexError, match=reason) as info:
        regex_to_expr(pattern)
    assert info.value.position == position
    assert info.value.pattern == pattern


def test_huge_repeat_hits_named_limit() -> None:
    with pytest.raises(CompileLimitError, match="max_repeat"):
        regex_to_expr(f"a{{{MAX_REPEAT + 1}}}")


def test_a_long_literal_builds_nodes_in_proportion_to_its_length():
    # A sequence is folded from the right: appending each atom on the right of the growing
    # right-nested chain rebuilt it whole (a 1,400-character pattern took seconds to compile).
    # New nodes are counted as a build budget charges them (hash-consing hits are free).
    from grammask.grammars.fsm import expr as E

    counts = []
    for length in (500, 1000):
        with E.BuildBudget() as budget:
            expr = regex_to_expr("^" + "ab" * length + "c?$")
        counts.append(budget.nodes)
        assert matches(expr, b"ab" * length) and matches(expr, b"ab" * length + b"c")
        assert not matches(expr, b"ab" * (length - 1)) and not matches(expr, b"ab" * length + b"a")
    assert 0 < counts[1] < 3 * counts[0], counts  # twice the length: about twice the nodes, not four times
