"""Format languages built directly as expressions, against the format regexes they stand for."""

from __future__ import annotations

import gc
import json
import random

import pytest
import regex

from grammask.grammars.fsm.automaton import INFINITE, START, LazyDfa
from grammask.errors import CompileLimitError
from grammask.grammars.fsm.expr import BuildBudget, Expr, any_char, diff, is_plain, matches, star
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask.grammars.fsm.json_text import format_expr, plain_complement
from grammask.grammars.fsm.regex import pattern_to_expr
from grammask.grammars.spec import JsonSchema
from grammask.schemas.formats import FORMAT_REGEXES, leap_second_times
from tests.grammars.fsm.helpers import automaton_of


def test_leap_seconds_match_the_time_regex_on_every_local_minute():
    time_regex = regex.compile(FORMAT_REGEXES["time"][0])
    expr = format_expr("time")
    rng = random.Random(3)
    for local, offsets in leap_second_times():
        for offset in offsets:
            for fraction in ("", ".25"):
                assert matches(expr, f"{local}:60{fraction}{offset}"), (local, offset)
        for _ in range(12):  # mostly wrong offsets, checked against the regex
            text = f"{local}:60{rng.choice('+-')}{rng.randrange(24):02d}:{rng.randrange(60):02d}"
            assert matches(expr, text) == bool(time_regex.fullmatch(text)), text
    for text in ("23:59:60Z", "23:59:60.5z", "22:59:60Z", "23:59:60+00:00", "00:00:60+00:01", "23:59:61Z"):
        assert matches(expr, text) == bool(time_regex.fullmatch(text)), text


def test_times_are_plain_so_their_states_need_no_search():
    assert is_plain(format_expr("time")) and is_plain(format_expr("date-time"))


def test_date_time_joins_date_and_time():
    expr = format_expr("date-time")
    assert matches(expr, "1998-12-31T23:59:60Z") and matches(expr, "1998-12-31t15:59:60.1-08:00")
    assert not matches(expr, "1998-12-31T15:59:60+08:00") and not matches(expr, "1998-02-30T10:00:00Z")


@pytest.mark.parametrize("pattern", ["^[a-zA-Z0-9_]*$", "^x-", "foo", "[é€]+", "a|b", "^$", "", "^a.c$", "[^a]"])
def test_plain_complement_is_every_character_string_the_pattern_does_not_find(pattern):
    import itertools

    others = plain_complement(pattern_to_expr(pattern))
    assert is_plain(others)
    oracle = regex.compile(pattern, regex.ASCII)
    for length in range(4):
        for chars in itertools.product("ax-_é€ 9c", repeat=length):
            text = "".join(chars)
            assert matches(others, text) == (oracle.search(text) is None), text
    assert not matches(others, b"\xff")  # never a byte string that is not text


def test_plain_complement_gives_up_past_its_state_cap():
    assert plain_complement(pattern_to_expr("^(?:\\S+\\s+){0,20}\\S+$")) is None


def test_plain_complement_leaves_the_compile_budget_to_the_compile():
    chars = pattern_to_expr("^q{3}[0-7]z$")  # a pattern of its own: its derivatives are new nodes
    with pytest.raises(CompileLimitError, match="expression_bytes"), BuildBudget(max_bytes=0):
        plain_complement(chars)
    assert plain_complement(chars) is not None  # not remembered as "too large"


def test_string_not_in_is_every_string_but_the_given_ones():
    import itertools
    import json

    from grammask.grammars.fsm import expr as E
    from grammask.grammars.fsm import json_text as T

    names = ["ab", "a", "é\n", 'q"', ""]
    plain = T.string_not_in(names)
    reference = E.diff(E.cat(T.QUOTE, T.CharEncoder()(T.ANY_CHARS), T.QUOTE), E.alt(*(T.string_literal(n) for n in names)))
    assert E.is_plain(plain)
    for length in range(4):
        for chars in itertools.product(["a", "b", "é", "\n", '"', "q"], repeat=length):
            text = json.dumps("".join(chars), ensure_ascii=False)
            assert E.matches(plain, text) == E.matches(reference, text) == ("".join(chars) not in names), text
    assert not E.matches(plain, '"a\\u0062"')  # not canonical


def test_a_trie_node_excludes_the_closings_of_the_names_below_it():
    # A node reads every text as any string's body does, but those its closings name: checked
    # against the node's own language on texts that close at, before and past each name.
    import itertools

    from grammask.grammars.fsm import expr as E
    from grammask.grammars.fsm import json_text as T

    names = ["ab", "a", "é\n", 'q"', "abc"]
    root = T.string_rest_not_in(names)
    after_a = E.derivative(root, ord("a"))
    assert sorted(T.excluded_closings(root, 10)) == sorted(json.dumps(n, ensure_ascii=False)[1:].encode() for n in names)
    assert sorted(T.excluded_closings(after_a, 10)) == [b'"', b'b"', b'bc"']
    assert T.excluded_closings(root, 4) is None  # more names than the limit
    assert T.excluded_closings(T.BODY_AND_QUOTE, 10) is None  # no trie node
    for node, closings in ((root, T.excluded_closings(root, 10)), (after_a, T.excluded_closings(after_a, 10))):
        for length in range(4):
            for chars in itertools.product(["a", "b", "c", "é", "\n", '"', "q"], repeat=length):
                text = json.dumps("".join(chars), ensure_ascii=False)[1:].encode()
                expected = E.matches(T.BODY_AND_QUOTE, text) and text not in closings
                assert E.matches(node, text) == expected, (text, closings)



def test_a_new_encoder_knows_the_string_body_it_would_build():
    """Every schema's encoder starts from the shared encodings of ``ANY_CHAR(S)``: the very nodes
    its own walk builds, and they spell each character as ``json.dumps`` does, nothing else."""
    import json

    from grammask.grammars.fsm import expr as E
    from grammask.grammars.fsm import json_text as T

    unseeded = T.CharEncoder()
    unseeded._memo.clear()
    for chars in (T.ANY_CHAR, T.ANY_CHARS):
        assert T.CharEncoder()(chars) is unseeded(chars)
    char = T.CharEncoder()(T.ANY_CHAR)
    for c in ["a", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "é", "€", "\U0001f600", "\ud7ff"]:
        assert E.matches(char, json.dumps(c, ensure_ascii=False)[1:-1]), repr(c)
    for raw in ["\n", '"', "\\", "\\u0061", "\\/", "\\u000A"]:  # raw controls, bare quote, non-canonical escapes
        assert not E.matches(char, raw), repr(raw)


_SLOW_FORMATS = {"hostname", "idn-hostname"}  # about 7 s each


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_FORMATS else n for n in sorted({*FORMAT_REGEXES, "time", "date-time"})]
)
def test_formats_hold_only_unicode_characters(name):
    """As patterns do (JSON Schema lowering reads a format's encoding as a string body alone)."""
    assert LazyDfa(diff(format_expr(name), star(any_char()))).distance(START) == INFINITE


def _live_nodes() -> int:
    gc.collect()
    return sum(1 for node in gc.get_objects() if type(node) is Expr)


def test_string_values_of_a_lowered_schema_do_not_outlive_it():
    # Every value of a large enum, short or long: what the process keeps of them afterwards is
    # bounded (a cache of short literals), not a node per character of every value.
    before = _live_nodes()
    long_values = [f"{i:06d}-" + "v" * 120 for i in range(2000)]
    short_values = [f"s{i:05d}" for i in range(20_000)]
    for values in (long_values, short_values):
        expr, _, _ = lower_json_schema(JsonSchema({"enum": values}))
        assert matches(expr, json.dumps(values[-1]))
        del expr
    kept = _live_nodes() - before
    assert kept < 2048 * 12, kept  # the short-literal cache's bound; 80,000 nodes were kept before


def test_a_patterns_expression_does_not_outlive_its_schema():
    # Facts cached about a pattern's expression (it needs no escapes; its complement) are kept
    # only while the expression lives.
    words = "|".join(f"w{i:05d}q" + "z" * (i % 30) for i in range(3000))
    schemas = [
        {"type": "string", "pattern": f"^({words})$"},
        {"type": "object", "propertyNames": {"pattern": f"^({words})$"}, "additionalProperties": {"type": "integer"}},
    ]
    before = _live_nodes()
    for schema in schemas:
        expr, _, _ = lower_json_schema(JsonSchema(schema))
        instance = "w00007qzzzzzzz" if schema["type"] == "string" else {"w00007qzzzzzzz": 1}
        automaton = automaton_of(expr, None)  # the object's members are calls; pushdown.matches would keep it
        assert automaton.accepting[automaton.walk(START, json.dumps(instance, separators=(",", ":")).encode())]
        del expr, automaton
    kept = _live_nodes() - before
    assert kept < 1000, kept  # 12,400 nodes were kept before
