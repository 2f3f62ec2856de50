"""Composed rows of the pushdown runtime equal brute-force rows of the same language written as
one regular expression (every value inlined), walked token by token from the same text; equal rows
are stored once, and the row store's byte bound counts each once."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import pushdown as pushdown_module
from grammask.grammars.fsm import walk
from grammask.grammars.fsm.automaton import DEAD, START, LazyDfa
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask.grammars.fsm.json_text import TEXT_OPEN
from grammask.grammars.fsm.pushdown import (
    ENTRY_BYTES,
    MAX_CHAIN,
    PushdownAutomaton,
    SharedRuleRows,
    _BoundedCache,
    _calls_shared_rules_only,
    _compute_rule_row,
    _forced_run,
    _group_by_state,
    _RowStore,
    _text_target,
    _text_target_expr,
    _UTF8_SHAPES,
)
from grammask.grammars.fsm.regex import regex_to_expr
from grammask.grammars.fsm.rules import Rule, RuleSet
from grammask.grammars.fsm.vocab import vocab_index
from grammask.grammars.spec import JsonSchema, Regex
from grammask.schemas.bundled import example_schema
from grammask.tokenizer import TokenizerInfo, VocabType

from .helpers import allowed_ids

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

OPEN_OBJECT_KEYS = [
    # Names of punctuation too: Llama-3.2 has tokens like '."' and '("' that close such a key,
    # which the other names' rule must refuse and the trie's body state allows.
    ({"name": {"type": "string"}, "nickname": {"type": "string"}, "n\u00e9e": {"type": "integer"}, ".": {}, "(": {}, " ": {}},
     {"nickname": "Al", "n\u00e9e": 3, "notes": "x", "zeta": 1}),
    # Names that are prefixes of others, and names written with escapes (a quote, a backslash, a
    # control character) or a character of four bytes: their closings are found by their encoding.
    ({"a": {}, "ab": {}, "abc": {"type": "integer"}, 'q"t': {}, "b\\s": {}, "t\tb": {}, "\U0001F600": {}, "ok": {"type": "boolean"}},
     {"ab": 1, "abc": 2, 'q"t': 3, "b\\s": 4, "t\tb": 5, "\U0001F600": 6, "a\"": 7, "abcd": 8, "ok": True}),
]


def reference_row(dfa: LazyDfa, state: int, vocab) -> set[int]:
    """Every ordinary token walked through the inlined language's automaton, ending live."""
    if state == DEAD:
        return set()
    states = np.full(len(vocab), state, dtype=np.int32)

    def fill(state: int, byte: int):
        dfa.transition(state, byte)
        return dfa.table, np.zeros(len(dfa.accepting), np.uint8)

    result = walk.walk_rule(dfa.table, np.zeros(len(dfa.accepting), np.uint8), vocab.flat, states, vocab.begins, vocab.ends, 0,
                            dfa.column_of_byte, dfa.width, fill)
    status, finals = result.status, result.finals
    ended = np.flatnonzero(status == walk.STATUS_END)
    live = [dfa.is_live(int(s)) for s in finals[ended]]
    return set(vocab.token_ids[ended[np.array(live, dtype=bool)]].tolist()) if len(ended) else set()


ROW_BYTES = 4 * ((128_256 + 31) // 32)
"""One packed Llama-3.2 row."""


@pytest.mark.parametrize("max_row_bytes", [512 << 20, 6 * ROW_BYTES])
@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_composed_rows_equal_inlined_rows(llama_info, index, max_row_bytes):
    # With a few rows of room, rows are evicted and made again, shared or not, all the way.
    schema = SCHEMAS[index]
    spec = JsonSchema(schema, max_depth=3)
    instance = INSTANCES[index] if INSTANCES[index] is not None else schema["examples"][0]
    text = spec.serialize(instance).encode()
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    grammar = FsmBackend(llama_info, max_row_bytes=max_row_bytes).compile(spec)
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
    assert _recounted_bytes(automaton._rows) == automaton._rows.bytes
    assert automaton._rows.bytes <= automaton._rows.max_bytes or len(automaton._rows) == 1




READ_THROUGH = [(SCHEMAS[i], INSTANCES[i] if INSTANCES[i] is not None else SCHEMAS[i]["examples"][0]) for i in (0, 4, 6)] + [
    ({"type": "object", "properties": names}, instance) for names, instance in OPEN_OBJECT_KEYS
]


@pytest.mark.parametrize("schema, instance", READ_THROUGH)
def test_a_text_read_through_the_stacks_ends_where_its_steps_do(llama_info, schema, instance):
    # walk() reads the bytes it has no step for through the stacks, making a position only at the
    # end; step() makes one per byte. Both must reach the same position (ids are canonical).
    # Inside the keys of an open object, two stacks (the declared key and the other members'
    # trie) read a token's bytes as derivatives, with no state per byte.
    spec = JsonSchema(schema)
    text = spec.serialize(instance).encode()
    automaton = FsmBackend(llama_info).compile(spec).automaton
    cuts = range(2, len(text) + 1, 3)
    read = [automaton.walk(START, text[:cut]) for cut in cuts]
    made_by_reading = automaton.num_positions
    assert made_by_reading <= len(cuts) + 2  # DEAD, START and the ends: nothing inside
    for cut, position in zip(cuts, read):
        stepped = START
        for byte in text[:cut]:
            stepped = automaton.step(stepped, byte)
        assert stepped == position != DEAD, text[:cut]
    assert automaton.num_positions > made_by_reading

def test_rows_at_every_byte_of_literal_keys_equal_inlined_rows(llama_info):
    # Inside a key most rows are the few tokens that are prefixes of the rest of the literal; at
    # its end, tokens like '":"' read on past it. Every cut is checked against the inlined walk.
    schema = {"type": "object", "properties": {"bookmarkThumbHeight": {"type": "number"}, "dropEnabled": {"type": "boolean"}},
              "required": ["bookmarkThumbHeight", "dropEnabled"], "additionalProperties": False}
    spec = JsonSchema(schema)
    text = b'{"bookmarkThumbHeight":1.5,"dropEnabled":true}'
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    vocab = vocab_index(llama_info)
    held_ids = 0
    for cut in range(len(text)):
        position = automaton.walk(START, text[:cut])
        expected = reference_row(dfa, dfa.step(START, text[:cut]), vocab)
        bits = np.unpackbits(automaton.row(position).view(np.uint8), bitorder="little")
        assert set(np.flatnonzero(bits).tolist()) == expected, text[:cut]
        # Held as ids where they are few: the mask write clears what the target held before.
        held = automaton.held_row(position)
        held_ids += len(held) < vocab.width
        target = np.full(vocab.width, -1, dtype=np.int32)
        walk.fill_row(target, held)
        assert set(np.flatnonzero(np.unpackbits(target.view(np.uint8), bitorder="little")).tolist()) == expected, text[:cut]
    assert held_ids >= 20  # the bytes inside both keys
    # Both keys' tokens were learnt when each was entered (one search for all their positions).
    assert sum(key[0] == "run" for key in automaton._rule_rows._items) >= 2




@pytest.mark.parametrize("names, instance", OPEN_OBJECT_KEYS)
def test_rows_inside_the_keys_of_an_open_object_equal_inlined_rows(llama_info, names, instance):
    # An object that lets other names in: every position inside a key is a node of the trie of its
    # names, whose row is the trie's body state's less the tokens that close a declared name.
    # Every cut is checked against the inlined walk, and each node's row against walking every
    # token from the node itself (exits included).
    schema = {"type": "object", "properties": names}
    spec = JsonSchema(schema)
    text = spec.serialize(instance).encode()
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    vocab = vocab_index(llama_info)
    nodes = 0
    for cut in range(len(text)):
        position = automaton.walk(START, text[:cut])
        bits = np.unpackbits(automaton.row(position).view(np.uint8), bitorder="little")
        assert set(np.flatnonzero(bits).tolist()) == reference_row(dfa, dfa.step(START, text[:cut]), vocab), text[:cut]
        for stack in automaton.stacks(position):
            rule, state, _ = automaton._frames[stack]
            rule_dfa = automaton.rules.dfas[rule]
            expr = rule_dfa.expr(state)
            if (expr.args[0] if expr.kind == E.CAT_KIND else expr) not in TEXT_OPEN:
                continue
            fast, walked = automaton.rule_row(rule, state), _compute_rule_row(rule_dfa, state, vocab)
            nodes += fast.derived is not None
            assert set(fast.token_ids().tolist()) == set(walked.token_ids().tolist())
            exits = [set(zip(row.exit_positions.tolist(), row.exit_begins.tolist(), row.exit_states.tolist())) for row in (fast, walked)]
            assert exits[0] == exits[1] and (fast.calling, fast.leaving) == (walked.calling, walked.leaving)
    assert automaton.accepting[automaton.walk(START, text)]
    assert nodes >= 6  # the shortcut was taken inside declared and unlisted keys


@pytest.mark.parametrize("schema, instance", [({"type": "object", "properties": OPEN_OBJECT_KEYS[0][0]}, OPEN_OBJECT_KEYS[0][1]),
                                              (SCHEMAS[4], INSTANCES[4]), (SCHEMAS[5], INSTANCES[5])])
def test_a_position_first_reached_is_written_from_its_stacks_and_held_when_reached_again(llama_info, schema, instance):
    # Several stacks a position (the keys of an object: its trie and a declared name; the members
    # of a union): once their rows are held, the first fill ORs them straight into the mask and
    # allows() reads them, the second fill holds the row. At every cut both fills equal the
    # inlined language's row, and allows() agrees with it.
    spec = JsonSchema(schema, max_depth=3)
    text = spec.serialize(instance).encode()
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    vocab = vocab_index(llama_info)
    eos = set(llama_info.eos_ids)
    written = 0
    for cut in range(len(text) + 1):
        position, state = automaton.walk(START, text[:cut]), dfa.step(START, text[:cut])
        expected = reference_row(dfa, state, vocab) | (eos if dfa.accepting[state] else set())
        several = len(automaton.stacks(position)) > 1
        for stack in automaton.stacks(position):
            automaton.stack_row(stack)
        for visit in range(2):
            held_before = automaton._rows.get(position) is not None
            target = np.full(vocab.width, -1, dtype=np.int32)
            automaton.fill(target, position)
            got = set(np.flatnonzero(np.unpackbits(target.view(np.uint8), bitorder="little")).tolist())
            assert got == expected, (text[:cut], visit, sorted(got ^ expected)[:10])
            if not visit and not held_before and automaton._rows.get(position) is None:
                written += several
                # The token taken next is checked against the same stacks' rows, composing none.
                rng = np.random.default_rng(cut)
                outside = rng.integers(0, vocab.vocab_size, size=200)
                for token in [*sorted(expected)[:: max(1, len(expected) // 200)], *outside.tolist(), *eos]:
                    assert automaton.allows(position, int(token)) == (token in expected), (text[:cut], token)
                assert automaton._rows.get(position) is None
        assert automaton._rows.get(position) is not None, text[:cut]  # the second visit holds it
    assert written >= 3


def _recounted_bytes(store: _RowStore) -> int:
    """What ``store`` holds, counted from its entries: each distinct array once, and every key."""
    distinct = {id(row): row.nbytes for row in store._items.values()}
    return sum(distinct.values()) + ENTRY_BYTES * len(store)


def _row(*words: int) -> np.ndarray:
    return np.array(words, dtype=np.int32)


def test_equal_rows_are_one_read_only_array():
    store = _RowStore(1 << 20)
    first = store.put("a", _row(1, 2, 3, 4))
    assert store.put("b", _row(1, 2, 3, 4)) is first and store.get("a") is store.get("b") is first
    assert not first.flags.writeable
    other = store.put("c", _row(1, 2, 3, 5))
    assert other is not first and other.tolist() == [1, 2, 3, 5]
    assert store.put("d", first) is first  # a held row is taken as it is
    assert store.distinct_rows == 2 and store.bytes == 2 * 16 + 4 * ENTRY_BYTES == _recounted_bytes(store)
    store.put("b", _row(7, 7, 7, 7))  # a key given a new row lets go of its old one
    assert store.get("b").tolist() == [7, 7, 7, 7] and store.get("a") is first
    assert store.distinct_rows == 3 and store.bytes == 3 * 16 + 4 * ENTRY_BYTES == _recounted_bytes(store)



def test_a_new_row_is_taken_and_a_view_is_copied():
    store = _RowStore(1 << 20)
    built = _row(5, 6, 7, 8)
    assert store.put("a", built) is built and not built.flags.writeable  # no copy of a row just built
    rows = np.array([[1, 1, 1, 1], [2, 2, 2, 2]], dtype=np.int32)
    held = store.put("b", rows[0])
    assert held is not rows[0] and held.base is None and rows.flags.writeable
    rows[0] = 9  # the caller's array stays its own: the store kept a copy
    assert store.get("b").tolist() == [1, 1, 1, 1]

def test_eviction_frees_a_shared_row_with_its_last_key():
    store = _RowStore(2 * 16 + 3 * ENTRY_BYTES)  # room for two rows under three keys
    shared = store.put("x", _row(1, 1, 1, 1))
    store.put("y", _row(1, 1, 1, 1))
    store.put("z", _row(2, 2, 2, 2))
    assert store.bytes == store.max_bytes
    store.put("w", _row(2, 2, 2, 2))  # a fourth key: "x" goes, its row stays with "y"
    assert store.get("x") is None and store.get("y") is shared
    assert store.bytes == 2 * 16 + 3 * ENTRY_BYTES == _recounted_bytes(store)
    assert store.put("v", _row(1, 1, 1, 1)) is shared  # still the held row; "z" goes
    assert store.get("z") is None and store.distinct_rows == 2
    store.put("u", _row(3, 3, 3, 3))  # "w" goes, and with it the last hold on [2, 2, 2, 2]
    assert [store.get(key) is not None for key in "wyvu"] == [False, True, True, True]
    assert store.distinct_rows == 2 and store.bytes == 2 * 16 + 3 * ENTRY_BYTES == _recounted_bytes(store)
    assert store.put("t", _row(2, 2, 2, 2)) is not shared  # made anew after being freed


@pytest.mark.parametrize("distinct, largest", [(5, 40), (60, 200), (60, 1 << 20)])
def test_grouping_by_state_matches_a_plain_dictionary(distinct, largest):
    # Few states (masks per state), many (a sort by 16-bit keys) and states past 16 bits.
    rng = np.random.default_rng(distinct + largest)
    pool = rng.choice(largest, size=distinct, replace=False).astype(np.int32)
    if largest > 1 << 16:  # states equal in their low 16 bits must stay apart
        pool[1], pool[2] = pool[0] ^ (1 << 16), pool[0] ^ (1 << 17)
    states = rng.choice(pool, size=5000).astype(np.int32)
    items = np.arange(5000, dtype=np.int64)
    expected: dict[int, list[int]] = {}
    for state, item in zip(states.tolist(), items.tolist()):
        expected.setdefault(state, []).append(item)
    got = {state: group.tolist() for state, group in _group_by_state(states, items)}
    assert got == expected


class _Sized:
    nbytes = 100


def test_one_object_under_several_keys_counts_once_until_its_last_key_goes():
    # Rule rows of a bounded string's counts are its twin's one RuleRow object.
    cache = _BoundedCache(2 * 100 + 3 * ENTRY_BYTES)
    shared, other = _Sized(), _Sized()
    cache.put("a", shared)
    cache.put("b", shared)
    assert cache.bytes == 100 + 2 * ENTRY_BYTES
    cache.put("c", other)
    cache.put("d", other)  # over the bound: "a" goes, its object stays with "b"
    assert cache.get("a") is None and cache.get("b") is shared
    assert cache.bytes == 2 * 100 + 3 * ENTRY_BYTES
    cache.put("b", other)  # "b" let go of the last hold on the shared object
    assert cache.bytes == 100 + 3 * ENTRY_BYTES



def test_memory_bytes_keeps_a_running_count_equal_to_a_recount(llama_info):
    # memory_bytes is read for every cached grammar on each compile, so the automata's arrays and
    # the frame arrays are counted as they grow rather than summed on each read; the count must
    # equal a recount after tables grow past their first capacity and calls outgrow their array.
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}} for i in range(24)},
    }
    spec = JsonSchema(schema)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    text = spec.serialize({f"field_{i}": {"n": i, "s": "x" * i} for i in range(0, 24, 3)}).encode()
    position = START
    for byte in text:
        automaton.row(position)
        position = automaton.step(position, byte)
    rules = automaton.rules
    arrays = sum(d.table.nbytes + d.flags.nbytes + d.call_offsets.nbytes + d.call_data.nbytes for d in rules.dfas)
    assert max(len(d.accepting) for d in rules.dfas) > 16 and max(len(d.call_data) for d in rules.dfas) > 64  # both grew
    assert rules.memory_bytes == arrays + E.NODE_BYTES * rules.num_states
    assert automaton._frame_bytes == sum(a.nbytes for a in automaton._frame_arrays.values()) > 0

def test_positions_share_rows_and_memory_counts_them_once(llama_info):
    schema = example_schema("invoice")
    spec = JsonSchema(schema)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    text = spec.serialize(schema["examples"][0]).encode()
    positions = sorted({automaton.walk(START, text[:cut]) for cut in range(len(text) + 1)})
    single = [p for p in positions if len(automaton.stacks(p)) == 1 and not automaton.accepting[p] and automaton._rows.get(p) is None]
    assert len(single) > 100
    for position in single[:20]:
        stack_row = automaton.stack_row(automaton.stacks(position)[0])
        before = automaton.memory_bytes
        assert automaton.held_row(position) is stack_row  # the same array: one more key, no more row bytes
        assert automaton.memory_bytes - before == ENTRY_BYTES
    rows = [automaton.held_row(p) for p in positions]
    by_content: dict[bytes, set[int]] = {}
    for row in rows:
        by_content.setdefault(row.tobytes(), set()).add(id(row))
    assert all(len(arrays) == 1 for arrays in by_content.values())  # equal rows: one array
    assert len(by_content) < len(positions) * 3 // 4  # many positions share (146 rows for 234)
    store = automaton._rows
    assert store.bytes == _recounted_bytes(store) < sum(row.nbytes for row in store._items.values())


@pytest.mark.parametrize("length", [12, MAX_CHAIN + 40])
def test_a_forced_run_learnt_at_its_start_is_the_one_each_later_state_finds_alone(length):
    # A literal (longer than MAX_CHAIN in the second case) before a call: each state inside it
    # is asked after the first, as a decoder reaches them, and must get what a fresh automaton
    # computes from that state alone.
    text = bytes(range(97, 97 + 26)) * (length // 26 + 1)
    body = E.cat(E.literal(text[:length]), E.call(Rule("value", E.literal("1"))), E.literal("}"))

    def states_along(dfa):
        states = [START]
        for byte in text[:length]:
            states.append(dfa.transition(states[-1], byte))
        return states

    shared = RuleSet(Rule("literal", body), max_states=10_000).dfas[0]
    along = states_along(shared)
    for offset, state in enumerate(along):
        fresh = RuleSet(Rule("literal", body), max_states=10_000).dfas[0]
        alone = states_along(fresh)[offset]
        expected = _forced_run(fresh, alone)
        found = _forced_run(shared, state)
        assert (found is None) == (expected is None), offset
        if expected is not None:
            assert found[0] == expected[0] == text[offset : offset + len(expected[0])], offset
            assert shared.expr(found[1]) is fresh.expr(expected[1]), offset
    assert _forced_run(shared, along[0])[0] == text[: min(length, MAX_CHAIN)]
    assert _forced_run(shared, along[-2]) is None  # one byte to the call


@pytest.mark.parametrize("schema", [
    {"type": "number", "multipleOf": 0.01, "minimum": -1, "maximum": 1},
    {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 2},
])
def test_a_row_allows_exactly_the_tokens_that_lead_somewhere_live(tiny_info, schema):
    # After "-1" (accepting) only "." is not ∅, and "-1." can never finish (below the minimum, or
    # "-1.0" not canonical): the root rule's forced run went on through the accepting state and
    # along "." and zeros, so the row allowed "." and reading it found nothing.
    automaton = FsmBackend(tiny_info).compile(JsonSchema(schema)).automaton
    tokens = {token: tiny_info.decode([token]) for token in range(tiny_info.vocab_size) if token not in tiny_info.special_ids}
    for prefix in (b"", b"-", b"-1", b"1", b"0", b"0.", b"-0.5", b"1.5", b"0.0"):
        position = automaton.walk(START, prefix)
        if position == DEAD:
            continue
        row = automaton.row(position)
        allowed = {token for token in tokens if (int(row[token >> 5]) >> (token & 31)) & 1}
        readable = {token for token, data in tokens.items() if data and automaton.walk(position, data) != DEAD}
        assert allowed == readable, (prefix, sorted(allowed ^ readable)[:10])


def test_a_forced_run_allows_every_token_id_of_each_prefix():
    # Two ids with the same bytes (as byte-fallback tokenizers have) are both allowed inside a
    # literal; a token running past the literal is not.
    pieces = {b: bytes([b]) for b in range(256)}
    pieces.update({256: b"ab", 257: b"ab", 258: b"abc", 259: b"abcdefg", 260: b"abcdef"})
    info = TokenizerInfo.from_pieces(pieces, {261: "</s>"}, vocab_type=VocabType.RAW, vocab_size=264, eos_ids=[261])
    grammar = FsmBackend(info).compile(Regex("abcdef"))
    assert allowed_ids(grammar.matcher(), info).tolist() == [ord("a"), 256, 257, 258, 260]
    matcher = grammar.matcher()
    assert matcher.accept_token(257)
    assert allowed_ids(matcher, info).tolist() == [ord("c")]


def test_rows_with_one_fingerprint_stay_apart(monkeypatch):
    monkeypatch.setattr(walk, "fingerprint", lambda words: 7)  # every row collides
    store = _RowStore(1 << 20)
    first, second = store.put("a", _row(1, 2, 3, 4)), store.put("b", _row(4, 3, 2, 1))
    assert first.tolist() == [1, 2, 3, 4] and second.tolist() == [4, 3, 2, 1]
    assert store.put("c", _row(4, 3, 2, 1)) is second and store.distinct_rows == 2
    store.put("a", _row(9, 9, 9, 9))  # the last hold on [1, 2, 3, 4] goes: only it is freed
    assert store.put("d", _row(4, 3, 2, 1)) is second and store.distinct_rows == 2
    assert store.bytes == 2 * 16 + 4 * ENTRY_BYTES == _recounted_bytes(store)


def test_the_row_store_agrees_with_a_plain_model_under_random_puts():
    # A small pool of contents (so rows repeat), more keys than fit: after every put, what each
    # key holds, the sharing of equal contents and the byte count match a recount.
    rng = np.random.default_rng(7)
    pool = [_row(*rng.integers(0, 3, size=4).tolist()) for _ in range(6)]
    store = _RowStore(3 * 16 + 5 * ENTRY_BYTES)
    latest: dict[int, list[int]] = {}
    for _ in range(400):
        key, content = int(rng.integers(0, 9)), pool[int(rng.integers(0, len(pool)))]
        held = store.put(key, content.copy() if rng.random() < 0.5 else content)
        latest[key] = content.tolist()
        assert held.tolist() == content.tolist() and not held.flags.writeable
        kept = {k: v for k, v in store._items.items()}
        assert all(v.tolist() == latest[k] for k, v in kept.items())
        by_content = {}
        for v in kept.values():
            assert by_content.setdefault(tuple(v.tolist()), v) is v  # equal contents: one array
        assert store.distinct_rows == len(by_content)
        assert store.bytes == _recounted_bytes(store) <= store.max_bytes


def test_a_stack_row_without_exits_is_composed_once_under_every_parent(llama_info, monkeypatch):
    # One object schema under two members: its key read in each is one rule state under two
    # parent stacks. No token reads on below from there, so the row is the rule row's tokens
    # whatever the parent: a few ids inside a literal, held as the rule row's own array and never
    # composed into a packed row.
    person = {"type": "object", "properties": {"first_name": {"type": "string"}}, "required": ["first_name"], "additionalProperties": False}
    schema = {"type": "object", "properties": {"buyer": {"$ref": "#/$defs/p"}, "seller": {"$ref": "#/$defs/p"}},
              "required": ["buyer", "seller"], "additionalProperties": False, "$defs": {"p": person}}
    spec = JsonSchema(schema)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    text = spec.serialize({"buyer": {"first_name": "a"}, "seller": {"first_name": "b"}}).encode()
    prefixes = [text[: at + 4] for at in (text.index(b"first"), text.rindex(b"first"))]
    first, second = (automaton.walk(START, prefix) for prefix in prefixes)
    (one,), (other,) = automaton.stacks(first), automaton.stacks(second)
    (rule, state, parent), (rule_b, state_b, parent_b) = automaton._frames[one], automaton._frames[other]
    assert (rule, state) == (rule_b, state_b) and parent != parent_b
    assert automaton._usable_exits(automaton.rule_row(rule, state), True) is None
    composed = []
    packed_union = PushdownAutomaton._packed_union
    monkeypatch.setattr(PushdownAutomaton, "_packed_union", lambda self, rows: composed.append(rows) or packed_union(self, rows))
    held = automaton.held_row(first)
    assert held is automaton.held_row(second) and np.array_equal(held, automaton.rule_row(rule, state).ids)
    assert 0 < len(held) < automaton.vocab.width and not composed
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    got = set(np.flatnonzero(np.unpackbits(automaton.row(first).view(np.uint8), bitorder="little")).tolist())
    assert got == reference_row(dfa, dfa.step(START, prefixes[0]), vocab_index(llama_info)) == reference_row(
        dfa, dfa.step(START, prefixes[1]), vocab_index(llama_info))


def test_a_string_body_under_each_member_reuses_the_row_its_exits_read_before(llama_info, monkeypatch):
    # Six string members: inside each value the top is one rule state of the string rule, under
    # another parent. The exit walk (a quote, then a comma and the next key, or the brace) reads
    # the same tokens under the middle members, so their rows are the one held before, made
    # without a packed copy; every row is still checked against the inlined reference.
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(6)},
              "required": [f"k{i}" for i in range(6)], "additionalProperties": False}
    spec = JsonSchema(schema)
    text = spec.serialize({f"k{i}": "ab" for i in range(6)}).encode()
    pure, _, _ = lower_json_schema(spec, calls=False)
    dfa = LazyDfa(pure)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    vocab = vocab_index(llama_info)
    packed_writes = []
    set_bits = walk.set_bits
    monkeypatch.setattr(walk, "set_bits", lambda words, ids: packed_writes.append(len(words)) or set_bits(words, ids))
    rows, writes = [], []
    for i in range(6):
        cut = text.index(f'"k{i}":"a'.encode()) + len(f'"k{i}":"a')
        position = automaton.walk(START, text[:cut])
        del packed_writes[:]
        row = automaton.held_row(position)
        rows.append(row)
        writes.append(sum(width == vocab.width for width in packed_writes))
        bits = np.unpackbits(walk.packed_row(row, vocab.width).view(np.uint8), bitorder="little")
        assert set(np.flatnonzero(bits).tolist()) == reference_row(dfa, dfa.step(START, text[:cut]), vocab), i
    assert rows[1] is rows[2] is rows[3] is rows[4] and rows[4] is not rows[5]  # the last closes the object
    assert writes[0] >= 1 and writes[2:5] == [0, 0, 0]


def test_a_composition_remembered_is_never_taken_for_arrays_made_since(tiny_info):
    # Rows are remembered by the ids of the arrays composed; an array freed and a new one made in
    # its place (CPython reuses the address, so the id) must compose anew, never hit the old row.
    automaton = FsmBackend(tiny_info).compile(JsonSchema({"type": "string"})).automaton
    width = automaton.vocab.width
    reused = 0
    seen_ids = set()
    for trial in range(40):
        first, second = np.zeros(width, dtype=np.int32), np.zeros(width, dtype=np.int32)
        first[trial % width], second[-1] = trial + 1, 1
        reused += (id(first), id(second)) in seen_ids
        seen_ids.add((id(first), id(second)))
        read = np.array([3 + trial % 5], dtype=np.int32)
        got = automaton._put_composed(("trial", trial), [first, second], read, False)
        expected = first | second
        walk.set_bits(expected, read)
        assert np.array_equal(got, expected), trial
        again = automaton._put_composed(("again", trial), [first, second], read, False)
        assert again is got  # the same arrays and exits: the row made before
        del first, second, got, again
    assert reused  # the case this guards against did occur


TREE = {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["name", "children"]}}, "$ref": "#/$defs/node"}


def _tree(depth: int) -> dict:
    return {"name": f"n{depth}", "children": [_tree(depth - 1)] if depth else []}


@pytest.mark.parametrize("schema, instance", [
    (TREE, _tree(7)),
    ({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": "x", "free": [[[[{"b": [[1]]}]]], {"c": {"d": {"e": {}}}}]}),
])
def test_a_row_made_from_a_few_frames_is_shared_by_every_stack_with_those_frames(llama_info, monkeypatch, schema, instance):
    # A recursive value repeats its frames at every depth (free values too): a stack row whose
    # making read only its top frames (and walks that found room) is taken by the next stack
    # with those frames, where it would be made again. Rows at every byte equal those made
    # with nothing shared.
    spec = JsonSchema(schema)
    text = spec.serialize(instance).encode()
    shared_hits = []
    shared_stack_row = PushdownAutomaton._shared_stack_row
    monkeypatch.setattr(PushdownAutomaton, "_shared_stack_row", lambda self, stack: shared_hits.append(found := shared_stack_row(self, stack)) or found)
    sharing = FsmBackend(llama_info).compile(spec).automaton
    rows = [sharing.row(sharing.walk(START, text[:cut])) for cut in range(len(text) + 1)]
    assert sum(found is not None for found in shared_hits) > 10
    monkeypatch.setattr(PushdownAutomaton, "_shared_stack_row", lambda self, stack: None)
    alone = FsmBackend(llama_info).compile(spec).automaton
    for cut, row in enumerate(rows):
        assert np.array_equal(row, alone.row(alone.walk(START, text[:cut]))), text[:cut]


def _text_target_by_bytes(dfa, state: int):
    """The reference for ``_text_target``: every valid multi-byte UTF-8 character stepped byte by
    byte through the automaton (each byte of each range, no byte classes, no expressions)."""
    found = set()
    for lead_low, lead_high, continuations in _UTF8_SHAPES:
        reached = {dfa.transition(state, byte) for byte in range(lead_low, lead_high + 1)}
        for low, high in continuations:
            if DEAD in reached:
                return None
            reached = {dfa.transition(middle, byte) for middle in reached for byte in range(low, high + 1)}
        found |= reached
        if len(found) > 1 or DEAD in found:
            return None
    return found.pop() if found else None


@pytest.mark.parametrize(
    "spec",
    [
        JsonSchema({"type": "string"}),
        JsonSchema({"type": "string", "maxLength": 3}),
        JsonSchema({"type": "string", "pattern": "^[^\u00e9]*$"}),
        JsonSchema({"type": "string", "pattern": "^(\u00e9|[a-z])+$"}),
        JsonSchema({"type": "object", "properties": {"n\u00e9e": {"type": "integer"}, "name": {"type": "string"}}}),
        Regex("[\u0080-\u07ff]x|[^x]*y|\u4e2d+"),
        Regex("[^\u07ff]*x"),  # the last byte of a range alone: U+07FF is DF BF
    ],
)
def test_the_state_every_character_leads_to_is_the_one_its_bytes_reach(spec):
    # Decided per expression (kept for the process) and placed in each automaton by state_of: the
    # same state as stepping every byte of every character, and None exactly where they part.
    expr = lower_json_schema(spec, calls=False)[0] if isinstance(spec, JsonSchema) else regex_to_expr(spec.pattern)
    dfa = RuleSet(Rule("#", expr), max_states=10_000).dfas[0]
    states, seen = [START], {START}
    while states and len(seen) < 60:
        state = states.pop()
        target = _text_target(dfa, state)
        assert target == _text_target_by_bytes(dfa, state), str(dfa.expr(state))[:200]
        for byte in b'a"\\:,{}0u\xc3\xa9\xe4\xb8\xad':
            following = dfa.transition(state, byte)
            if following != DEAD and following not in seen:
                seen.add(following)
                states.append(following)
    assert len(seen) >= 3  # the start and states past it were compared


def test_a_decided_text_target_keeps_no_expression_alive():
    # A string body's target is itself: kept strongly, the process-wide table would hold every
    # grammar's bodies for good.
    expr = regex_to_expr("[a-z\u0080-\U0010ffff]*(a body no other test builds)")
    assert _text_target_expr(expr) is expr
    assert _text_target_expr(expr) is expr  # decided before: read back
    body = weakref.ref(expr)
    del expr
    gc.collect()
    assert body() is None


SHARED_PIECES = [
    # A string, a number and an object's other members (calls of the any-value rule) at other
    # places of other rules than in the grammar that made their rows first.
    ({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "required": ["a"]},
     {"b": -40, "a": 'x"y\u00e9 z', "zz": [1.5, {"k": "v"}], "q": "r"}),
    ({"type": "array", "items": {"type": ["string", "number"]}}, ["q", -1.5, "w\u00e9", 7]),
    ({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}, {"k\u00e9": "v", "a": ""}),
]


@pytest.mark.parametrize("first", range(len(SHARED_PIECES)))
def test_a_row_made_by_another_grammar_is_the_row_this_grammar_allows(llama_info, monkeypatch, first):
    # Every grammar of the tokenizer shares its rows of strings, numbers and free members; each
    # names the exit states in its own automaton. Each grammar's rows are compared with the
    # inlined language's brute-force walk, after another grammar made the shared rows.
    taken = []
    get = SharedRuleRows.get

    def recording_get(store, dfa, state):
        found = get(store, dfa, state)
        if found is not None:
            taken.append((dfa.rule.name, str(dfa.expr(state))[:40]))
        return found

    monkeypatch.setattr(SharedRuleRows, "get", recording_get)
    backend = FsmBackend(llama_info)
    vocab = vocab_index(llama_info)
    eos = set(llama_info.eos_ids)
    for schema, instance in SHARED_PIECES[first:] + SHARED_PIECES[:first]:
        spec = JsonSchema(schema, max_depth=3)
        text = spec.serialize(instance).encode()
        automaton = backend.compile(spec).automaton
        dfa = LazyDfa(lower_json_schema(spec, calls=False)[0])
        for cut in range(len(text) + 1):
            position, state = automaton.walk(START, text[:cut]), dfa.step(START, text[:cut])
            bits = np.unpackbits(automaton.row(position).view(np.uint8), bitorder="little")
            expected = reference_row(dfa, state, vocab) | (eos if dfa.accepting[state] else set())
            assert set(np.flatnonzero(bits).tolist()) == expected, (schema, text[:cut])
    assert len({name for name, _ in taken}) >= 3, taken  # rows of several rules came from the store


def test_rows_that_call_a_grammars_own_rules_are_not_shared():
    own = Rule("own", E.literal("x"))
    shared = Rule("shared by every grammar", E.literal("y"))
    shared.shared = True
    body = E.cat(E.literal("a"), E.call(own))
    assert _calls_shared_rules_only(E.literal("a"))
    assert _calls_shared_rules_only(E.cat(E.literal("a"), E.call(shared)))
    assert not _calls_shared_rules_only(body)
    assert not _calls_shared_rules_only(E.alt(E.cat(E.literal("b"), E.call(shared)), body))


def test_a_shared_row_keeps_no_expression_alive(llama_info):
    vocab = vocab_index(llama_info)
    store = SharedRuleRows(8 << 20)
    piece = regex_to_expr("[a-z]*(a piece no other test builds)[0-9]")
    automaton = PushdownAutomaton(RuleSet(Rule("#", E.call(Rule("piece", piece))), max_states=1000), vocab,
                                  max_positions=1000, max_row_bytes=8 << 20)
    dfa = automaton.rules.dfas[1]
    row = automaton.rule_row(1, START)
    store.put(dfa, START, row)
    assert len(store) == 1 and store.get(dfa, START) is not None
    kept = weakref.ref(piece)
    del piece, automaton, dfa, row
    gc.collect()
    assert kept() is None


def test_the_backend_set_up_makes_the_rows_of_the_lexical_pieces(llama_info, monkeypatch):
    # A string's body, an integer's digits, the key of an object's other member: no grammar's
    # first visit computes their rows (FsmBackend's set-up did, once per tokenizer). The rows of
    # the grammar's own rules (the array around them) are computed.
    FsmBackend(llama_info)
    computed = []
    compute = pushdown_module._compute_rule_row

    def recording_compute(dfa, state, vocab, rule_row_of=None):
        computed.append(dfa.expr(state))
        return compute(dfa, state, vocab, rule_row_of)

    monkeypatch.setattr(pushdown_module, "_compute_rule_row", recording_compute)
    spec = JsonSchema({"type": "array", "items": {"type": ["string", "integer", "object"]}})
    automaton = FsmBackend(llama_info).compile(spec).automaton
    computed.clear()
    for text in (b'["ab', b'[12', b'[{"k'):
        automaton.row(automaton.walk(START, text))
    assert computed and [str(e) for e in computed if _calls_shared_rules_only(e)] == []


def test_rows_inside_an_intersection_or_a_complement_are_not_shared(llama_info):
    # A combinator's inlined values (not, overlapping oneOf) are a schema's own, and make rows by
    # the thousand: kept, they would push the lexical pieces out of the store.
    vocab = vocab_index(llama_info)
    store = SharedRuleRows(8 << 20)
    plain = regex_to_expr("[a-z]+(plain piece)")
    algebra = E.inter(regex_to_expr("[a-z]+(algebra piece)"), E.neg(regex_to_expr("b[a-z]+(algebra piece)")))
    for piece, kept in ((algebra, 0), (plain, 1)):
        automaton = PushdownAutomaton(RuleSet(Rule("#", E.call(Rule("piece", piece))), max_states=1000), vocab,
                                      max_positions=1000, max_row_bytes=8 << 20)
        store.put(automaton.rules.dfas[1], START, automaton.rule_row(1, START))
        assert len(store) == kept


@pytest.mark.parametrize("initial", [2, 4096])
def test_the_byte_table_grows_from_its_first_capacity_and_keeps_every_step(llama_info, monkeypatch, initial):
    # A grammar starts with a table of a few positions and grows it by copying as a request reaches
    # more: the steps and accepting flags known before each growth must survive it, whether the table
    # grew a dozen times (2) or never (4096).
    monkeypatch.setattr(pushdown_module, "INITIAL_POSITIONS", initial)
    schema = example_schema("invoice")
    spec = JsonSchema(schema)
    automaton = FsmBackend(llama_info).compile(spec).automaton
    text = spec.serialize(schema["examples"][0]).encode()
    steps, position = [], START
    for byte in text:
        following = automaton.step(position, byte)
        steps.append((position, byte, following))
        position = following
    assert automaton.num_positions > 100 and (initial > 16 or len(automaton.accepting) > initial)
    assert all(automaton.step(p, b) == f == automaton.table[p, b] for p, b, f in steps)
    assert automaton.accepting[position] and not automaton.accepting[steps[-1][0]]
    eos = automaton.vocab.eos_words
    assert not eos.flags.writeable and np.array_equal(eos, automaton.vocab.pack(automaton.vocab.eos_ids))
