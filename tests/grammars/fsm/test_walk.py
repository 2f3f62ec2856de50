"""The native walks agree with their pure-Python references (random automata and byte strings)."""

from __future__ import annotations

import numpy as np
import pytest

from grammask.grammars.fsm import walk

pytestmark = pytest.mark.skipif(not walk.NATIVE, reason="the native extension is not built")


def random_tokens(rng, count, alphabet):
    lengths = rng.integers(1, 7, size=count)
    flat = rng.choice(np.array(alphabet, dtype=np.uint8), size=int(lengths.sum()))
    ends = np.cumsum(lengths).astype(np.int64)
    return flat, ends - lengths, ends


def random_table(rng, states, alphabet, unknown=0.1):
    """A table with fewer columns than bytes, as an automaton's byte atoms make it: ``(flat table,
    columns, width)``; the alphabet's bytes share a few columns, every other byte column 0 (dead)."""
    width = 1 + len(alphabet) // 2
    columns = np.zeros(256, dtype=np.uint8)
    columns[alphabet] = rng.integers(1, width, size=len(alphabet))
    table = np.zeros((states, width), dtype=np.int32)
    for s in range(1, states):
        for c in range(1, width):
            r = rng.random()
            table[s, c] = -1 if r < unknown else (0 if r < unknown + 0.15 else rng.integers(1, states))
    return table.reshape(-1), columns, width


def one_column_per_byte(table, columns, width):
    """The same automaton with one column per byte (the layout the walks read without a column map)."""
    return table.reshape(-1, width)[:, columns].reshape(-1)


def random_rules(rng, alphabet, count=3, states=8):
    """``count`` random rule automata that call one another (never from their start state)."""
    rules = []
    for _ in range(count):
        table, columns, width = random_table(rng, states, alphabet, unknown=0.05)
        flags = rng.integers(0, 16, size=states).astype(np.uint8)
        offsets = np.full(states, -1, dtype=np.int32)
        data = []
        for s in range(2, states):  # the start state (1) calls nothing: no left recursion
            if rng.random() < 0.3:
                offsets[s] = len(data)
                calls = [(int(rng.integers(0, count)), int(rng.integers(1, states))) for _ in range(int(rng.integers(1, 3)))]
                data += [len(calls)] + [x for pair in calls for x in pair]
        rules.append(walk.RuleTables(table, flags, offsets, np.array(data or [0], dtype=np.int32), columns, width))
    return rules


def reference(name):
    return getattr(walk, f"_{name}_reference")


def test_first_outside_matches_reference():
    rng = np.random.default_rng(0)
    flat, begins, ends = random_tokens(rng, 500, list(range(97, 105)))
    for _ in range(20):
        member = rng.random(256) < 0.5
        native = walk.first_outside(flat, begins, ends, member)
        expected = reference("first_outside")(flat, begins, ends, member, np.empty(len(begins), np.int64))
        assert np.array_equal(native, expected)


def test_set_bits_matches_reference():
    rng = np.random.default_rng(1)
    ids = rng.choice(1000, size=300, replace=False).astype(np.int32)
    words = np.zeros(32, dtype=np.int32)
    walk.set_bits(words, ids)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    assert set(np.flatnonzero(bits)) == set(ids.tolist())


@pytest.mark.parametrize("native", [True, False])
def test_clear_bits_clears_exactly_the_given_ids(native, monkeypatch):
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    rng = np.random.default_rng(4)
    ids = rng.choice(1000, size=400, replace=False).astype(np.int32)
    cleared = np.concatenate([ids[:150], [31, 63, 31]]).astype(np.int32)  # the sign bit; twice in one word
    words = np.zeros(32, dtype=np.int32)
    walk.set_bits(words, np.concatenate([ids, [31, 63]]).astype(np.int32))
    walk.clear_bits(words, cleared)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    assert set(np.flatnonzero(bits)) == set(ids.tolist()) - set(cleared.tolist())


@pytest.mark.parametrize("native", [True, False])
def test_union_ids_gives_the_distinct_ids_of_its_rows_in_order(native, monkeypatch):
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    rng = np.random.default_rng(2)
    for _ in range(50):
        rows = [rng.integers(0, int(rng.choice([40, 128_256])), size=int(rng.integers(0, 60))).astype(np.int32) for _ in range(int(rng.integers(1, 5)))]
        found = walk.union_ids(rows)
        assert found.dtype == np.int32 and found.tolist() == sorted(set(np.concatenate(rows).tolist()))
    assert walk.union_ids([np.zeros(0, np.int32)]).tolist() == []


@pytest.mark.parametrize("native", [True, False])
def test_a_union_of_held_rows_written_at_once_has_each_rows_tokens_and_no_others(native, monkeypatch):
    # Packed rows and rows of ids mixed, none at all, one alone; the target starts dirty.
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    rng = np.random.default_rng(4)
    width = (128_256 + 31) // 32
    for _ in range(40):
        rows, expected = [], set()
        for _ in range(int(rng.integers(0, 5))):
            ids = np.unique(rng.integers(0, 128_256, size=int(rng.integers(0, 40)))).astype(np.int32)
            expected |= set(ids.tolist())
            rows.append(walk.packed_row(ids, width) if rng.random() < 0.4 else ids)
        target = np.full(width, -1, dtype=np.int32)
        walk.fill_union(target, rows)
        assert set(np.flatnonzero(np.unpackbits(target.view(np.uint8), bitorder="little")).tolist()) == expected


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("count", [0, 1, 7, 31])
def test_a_held_row_of_ids_or_words_is_written_whole_and_read_alike(native, count, monkeypatch):
    # A held row is packed words (as wide as the target) or fewer ids; the target starts dirty,
    # so whatever the write leaves from before shows.
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    rng = np.random.default_rng(count)
    width = 32
    ids = np.sort(rng.choice(width * 32, size=count, replace=False)).astype(np.int32)
    words = np.zeros(width, dtype=np.int32)
    walk.set_bits(words, ids)
    for held in (ids, words):
        target = np.full(width, -1, dtype=np.int32)
        walk.fill_row(target, held)
        assert np.array_equal(target, words)
        assert np.array_equal(walk.packed_row(held, width), words)
        assert all(walk.row_has(held, width, t) == (t in ids.tolist()) for t in range(width * 32))
    assert walk.packed_row(words, width) is words


@pytest.mark.parametrize("density", [0.0, 0.0005, 0.3, 1.0])
def test_unpack_bits_gives_the_ids_of_the_set_bits_in_order(density, monkeypatch):
    rng = np.random.default_rng(3)
    ids = np.flatnonzero(rng.random(128_256) < density).astype(np.int32)
    words = np.zeros(4008, dtype=np.int32)
    walk.set_bits(words, ids)
    native = walk.unpack_bits(words)
    monkeypatch.setattr(walk, "_native", None)
    for found in (native, walk.unpack_bits(words)):
        assert found.dtype == np.int32 and np.array_equal(found, ids)


def test_walk_rule_matches_reference():
    rng = np.random.default_rng(2)
    alphabet = list(range(97, 103))
    flat, begins, ends = random_tokens(rng, 400, alphabet)
    for _ in range(10):
        table, columns, width = random_table(rng, 12, alphabet)
        flags = rng.integers(0, 16, size=12).astype(np.uint8)
        states = rng.integers(1, 12, size=len(begins)).astype(np.int32)
        native = walk.walk_rule(table, flags, flat, states, begins, ends, walk.EXIT, columns, width)
        m = len(states)
        outputs = np.empty(m, np.uint8), np.empty(m, np.int32), np.empty(m, np.int64)
        expected = reference("walk_rule")(table, flags, flat, states, begins, ends, *outputs, walk.EXIT, columns, width)
        wide = walk.walk_rule(one_column_per_byte(table, columns, width), flags, flat, states, begins, ends)
        for field in ("status", "finals", "resume", "exit_items", "exit_at", "exit_states"):
            assert np.array_equal(getattr(native, field), getattr(expected, field)), field
            assert np.array_equal(getattr(native, field), getattr(wide, field)), field


def test_walk_rule_refuses_a_column_map_past_the_width():
    table, columns, width = random_table(np.random.default_rng(9), 4, [97, 98])
    one = np.ones(1, dtype=np.int32)
    with pytest.raises(ValueError, match="column map"):
        walk.walk_rule(table, np.zeros(4, np.uint8), np.array([97], np.uint8), one, np.zeros(1, np.int64), one.astype(np.int64),
                       walk.EXIT, np.full(256, width, dtype=np.uint8), width)


def test_walk_pushdown_matches_reference(monkeypatch):
    rng = np.random.default_rng(3)
    alphabet = list(range(97, 102))
    flat, begins, ends = random_tokens(rng, 300, alphabet)
    for trial in range(12):
        rules = random_rules(rng, alphabet)
        frames = np.array([[0, int(rng.integers(1, 8))], [1, int(rng.integers(1, 8))]], dtype=np.int32)
        tops = rng.integers(1, 8, size=len(begins)).astype(np.int32)
        leave = bool(trial % 2)
        native_status, native_requests = walk.walk_pushdown(rules, frames, 2, tops, flat, begins, ends, leave_first=leave)
        monkeypatch.setattr(walk, "_native", None)
        ref_status, ref_requests = walk.walk_pushdown(rules, frames, 2, tops, flat, begins, ends, leave_first=leave)
        monkeypatch.undo()
        wide_rules = [r._replace(table=one_column_per_byte(r.table, r.columns, r.width), columns=walk.IDENTITY_COLUMNS, width=256)
                      for r in rules]
        wide_status, _ = walk.walk_pushdown(wide_rules, frames, 2, tops, flat, begins, ends, leave_first=leave)
        assert np.array_equal(native_status, ref_status) and np.array_equal(native_status, wide_status)
        assert {tuple(r) for r in native_requests.tolist()} == {tuple(r) for r in ref_requests.tolist()}
        assert len({tuple(r) for r in native_requests.tolist()}) == len(native_requests)  # each asked once



def test_walk_exits_gives_the_ids_walk_pushdown_reads(monkeypatch):
    # The native pass over exits equals the reference: walk_pushdown (leaving first), then the ids
    # of the items read in item order, the items pending and the requests.
    rng = np.random.default_rng(5)
    alphabet = list(range(97, 102))
    flat, begins, ends = random_tokens(rng, 300, alphabet)
    token_ids = rng.permutation(1000)[: len(begins)].astype(np.int32)
    seen_below = set()
    for trial in range(12):
        rules = random_rules(rng, alphabet)
        frames = np.array([[0, int(rng.integers(1, 8))], [1, int(rng.integers(1, 8))]], dtype=np.int32)
        tops = rng.integers(1, 8, size=len(begins)).astype(np.int32)
        positions = rng.permutation(len(begins)).astype(np.int64)
        item_begins, item_ends = begins[positions] + 1, ends[positions]  # the rest after the first byte
        read, pending, limited, requests, below, above = walk.walk_exits(rules, frames, 2, tops, flat, item_begins, item_ends, positions, token_ids)
        status, expected_requests = walk.walk_pushdown(rules, frames, 2, tops, flat, item_begins, item_ends, leave_first=True)
        assert read.dtype == np.int32 and read.tolist() == token_ids[positions[status == walk.STATUS_END]].tolist()
        assert pending.tolist() == np.flatnonzero(status == walk.STATUS_PENDING).tolist()
        assert not limited and len(pending) > 0 and len(read) > 1
        assert {tuple(r) for r in requests.tolist()} == {tuple(r) for r in expected_requests.tolist()}
        monkeypatch.setattr(walk, "_native", None)
        ref_read, ref_pending, _, _, ref_below, ref_above = walk.walk_exits(rules, frames, 2, tops, flat, item_begins, item_ends, positions, token_ids)
        monkeypatch.undo()
        assert np.array_equal(read, ref_read) and np.array_equal(pending, ref_pending)
        assert (below, above) == (ref_below, ref_above) and 0 <= below <= len(frames) and above >= 0
        seen_below.add(below)
        # Only the frames the walk says it returned into matter: on them alone, every item reads alike.
        kept = frames[len(frames) - below:]
        assert walk.walk_pushdown(rules, kept, 2, tops, flat, item_begins, item_ends, leave_first=True)[0].tolist() == status.tolist()
    assert seen_below >= {0, 1}


def test_walk_exits_says_when_a_call_found_no_room(monkeypatch):
    # Frames up to MAX_DEPTH: a call from the top has room for one more frame and no further;
    # the walks that wanted more say so (above == -1), natively as in the reference.
    rng, alphabet, seen = np.random.default_rng(8), list(range(97, 102)), set()
    flat, begins, ends = random_tokens(rng, 60, alphabet)
    positions = np.arange(len(begins), dtype=np.int64)
    for trial in range(6):
        rules = random_rules(rng, alphabet)
        below_top = next(s for s in range(1, 8) if not rules[0].flags[s] & walk.ACCEPTING)  # no long run of returns
        for base in (3, walk.MAX_DEPTH - 2):
            frames = np.tile(np.array([[0, below_top]], dtype=np.int32), (base, 1))
            tops = rng.integers(1, 8, size=len(begins)).astype(np.int32)
            *native, below, above = walk.walk_exits(rules, frames, 2, tops, flat, begins, ends, positions, positions.astype(np.int32))
            monkeypatch.setattr(walk, "_native", None)
            *expected, ref_below, ref_above = walk.walk_exits(rules, frames, 2, tops, flat, begins, ends, positions, positions.astype(np.int32))
            monkeypatch.undo()
            assert (below, above) == (ref_below, ref_above) and np.array_equal(native[0], expected[0])
            assert above == -1 or base + 1 + above <= walk.MAX_DEPTH
            seen.add((base > 3, above == -1))
    assert seen == {(False, False), (True, False), (True, True)}


def sorted_tokens(rng, count, alphabet):
    """Random tokens in byte order, as a tokenizer's vocabulary is kept: neighbours share prefixes."""
    texts = sorted({bytes(rng.choice(alphabet, size=int(rng.integers(1, 9))).tolist()) for _ in range(count)})
    flat = np.frombuffer(b"".join(texts), dtype=np.uint8)
    ends = np.cumsum([len(t) for t in texts]).astype(np.int64)
    return flat, ends - np.array([len(t) for t in texts], dtype=np.int64), ends


@pytest.mark.parametrize("leave", [False, True])
def test_walks_over_items_sharing_prefixes_match_reference(monkeypatch, leave):
    # Items in byte order under few top states: the native walks skip an item whose first bytes
    # killed every path of an earlier one; the statuses, bits and requests must not change.
    rng = np.random.default_rng(11)
    alphabet = list(range(97, 101))
    flat, begins, ends = sorted_tokens(rng, 600, alphabet)
    token_ids = np.arange(len(begins), dtype=np.int32)
    positions = np.arange(len(begins), dtype=np.int64)
    statuses = set()
    for trial in range(16):
        rules = random_rules(rng, alphabet)
        frames = np.array([[0, int(rng.integers(1, 8))], [1, int(rng.integers(1, 8))]], dtype=np.int32)
        tops = np.full(len(begins), int(rng.integers(1, 8)), dtype=np.int32)
        tops[rng.random(len(begins)) < 0.2] = int(rng.integers(1, 8))
        native, native_requests = walk.walk_pushdown(rules, frames, 2, tops, flat, begins, ends, leave_first=leave)
        read, pending, *_ = walk.walk_exits(rules, frames, 2, tops, flat, begins, ends, positions, token_ids) if leave else (None,) * 2
        monkeypatch.setattr(walk, "_native", None)
        expected, expected_requests = walk.walk_pushdown(rules, frames, 2, tops, flat, begins, ends, leave_first=leave)
        monkeypatch.undo()
        assert np.array_equal(native, expected)
        assert {tuple(r) for r in native_requests.tolist()} == {tuple(r) for r in expected_requests.tolist()}
        if leave:
            assert read.tolist() == np.flatnonzero(expected == walk.STATUS_END).tolist()
            assert pending.tolist() == np.flatnonzero(expected == walk.STATUS_PENDING).tolist()
        statuses |= set(expected.tolist())
    assert statuses >= {walk.STATUS_DEAD, walk.STATUS_END, walk.STATUS_PENDING}


def test_walk_exits_refuses_an_item_that_names_no_token():
    rules = [walk.RuleTables(np.zeros(2 * 256, dtype=np.int32), np.array([0, walk.ACCEPTING | walk.LIVE_KNOWN | walk.LIVE], dtype=np.uint8),
                             np.full(2, -1, dtype=np.int32), np.zeros(1, dtype=np.int32))]
    flat = np.frombuffer(b"ab", dtype=np.uint8)
    one = np.array([1], dtype=np.int32)
    at_end = np.array([2], dtype=np.int64)  # nothing left to read: the item is read at once
    for position, ids in ((5, [0]), (0, [-1])):  # no such position; no id at that position
        with pytest.raises(ValueError, match="names no token"):
            walk.walk_exits(rules, np.zeros((0, 2), dtype=np.int32), 0, one, flat, at_end, at_end,
                            np.array([position], dtype=np.int64), np.array(ids, dtype=np.int32))


def test_first_outside_text_matches_reference(monkeypatch):
    rng = np.random.default_rng(4)
    pieces = [b"a", b"b", b'"', "é".encode(), "€".encode(), "😀".encode(), b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80"]
    tokens = [b"".join(pieces[i] for i in rng.integers(0, len(pieces), size=rng.integers(1, 5))) for _ in range(400)]
    tokens += [b"ab\xc3\xa9b", b"a\xc3", "é😀".encode() + b'"', b"\xed\xa0\x80a"]
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    ends = np.cumsum([len(t) for t in tokens]).astype(np.int64)
    begins = ends - np.array([len(t) for t in tokens])
    member = np.zeros(256, dtype=bool)
    member[[ord("a"), ord("b")]] = True
    native = walk.first_outside_text(flat, begins, ends, member)
    monkeypatch.setattr(walk, "_native", None)
    reference = walk.first_outside_text(flat, begins, ends, member)
    assert np.array_equal(native, reference)
    offsets = (native - begins)[-4:].tolist()
    assert offsets == [5, 1, 6, 0]  # whole characters pass; a cut or a surrogate stops the run


def test_walk_pushdown_reads_a_rules_tables_when_it_reaches_them():
    # Tables are taken as the walk reaches a rule: a malformed entry it never reaches is not read,
    # one it reaches is a TypeError (never a crash).
    table = np.zeros(2 * 256, dtype=np.int32)
    table[256 + ord("a")] = 1
    flags = np.array([0, walk.ACCEPTING | walk.LIVE_KNOWN | walk.LIVE], dtype=np.uint8)
    calls_a = np.array([-1, 0], dtype=np.int32)
    data = np.array([1, 1, 1], dtype=np.int32)  # state 1 of rule 0 calls rule 1, returning to 1
    readable = walk.RuleTables(table, flags, calls_a, data)
    flat = np.frombuffer(b"a", dtype=np.uint8)
    one = np.array([1], dtype=np.int32)
    begins, ends = np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)
    frames = np.zeros((0, 2), dtype=np.int32)
    status, _ = walk.walk_pushdown((readable, "never read"), frames, 0, one, flat, begins, ends, leave_first=False)
    assert status.tolist() == [walk.STATUS_END]
    with pytest.raises(TypeError):
        walk.walk_pushdown((readable, "read"), frames, 0, one, flat, begins, ends, leave_first=True)


def small_alphabet_tokens(seed: int) -> list[bytes]:
    """640 tokens over a small alphabet (0 and 255 at the prefix index's edges), duplicates included."""
    rng = np.random.default_rng(seed)
    tokens = [bytes(rng.choice([0, 97, 98, 99, 255], size=int(rng.integers(1, 6))).tolist()) for _ in range(600)]
    return tokens + tokens[:40]


def laid_out(tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(flat, begins, lengths)`` of ``tokens`` laid end to end in the order given."""
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    lengths = np.array([len(t) for t in tokens], dtype=np.int32)
    return flat, (np.cumsum(lengths) - lengths).astype(np.int64), lengths


@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("native", [True, False])
def test_prefix_range_finds_what_startswith_finds(monkeypatch, native, indexed):
    # Tokens sorted by their bytes as the vocabulary index keeps them; every query is checked
    # against bytes.startswith.
    tokens = sorted(small_alphabet_tokens(5))
    flat, begins, lengths = laid_out(tokens)
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    index = walk.prefix_index(flat, begins, lengths) if indexed else None
    queries = [b"", b"a", b"\xff", b"\xff\xff", b"\x00", b"a\x00", b"d", b"ad", b"abcab", b"cccccccc"]
    queries += [t + extra for t in tokens[::17] for extra in (b"", b"a", b"ba", b"\xff")]
    for data in queries:
        shorter, low, split, high = walk.prefix_range(flat, begins, lengths, data, index)
        assert [tokens[i] for i in shorter.tolist()] == sorted((t for t in tokens if len(t) < len(data) and data.startswith(t)), key=len)
        assert tokens[low:split] == [t for t in tokens if t == data]
        assert tokens[split:high] == [t for t in tokens if len(t) > len(data) and t.startswith(data)]


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("with_exact", [True, False])
def test_run_prefixes_finds_what_startswith_finds_at_every_suffix(monkeypatch, native, with_exact):
    # The same shape of vocabulary, in an order of their own (positions and ids shuffled as a
    # tokenizer's are): every suffix of each literal is checked against bytes.startswith.
    pieces = small_alphabet_tokens(7)
    token_ids = np.random.default_rng(7).permutation(5000)[: len(pieces)].astype(np.int32)
    order = np.asarray(sorted(range(len(pieces)), key=pieces.__getitem__), dtype=np.int64)
    flat, begins, lengths = laid_out(pieces)
    sorted_begins, sorted_lengths = begins[order], lengths[order]
    index = walk.prefix_index(flat, sorted_begins, sorted_lengths)
    if not native:
        monkeypatch.setattr(walk, "_native", None)
    for data in [b"abcab\xff\x00a", b"\xff\xff\xff", b"a", b"cabba", *pieces[::37]]:
        ids, offsets, longer = walk.run_prefixes(flat, sorted_begins, sorted_lengths, index, order, token_ids, data, with_exact)
        assert ids.dtype == np.int32 and len(offsets) == len(data) + 1 and len(longer) == len(data)
        for k in range(len(data)):
            rest = data[k:]
            allowed = [p for p in range(len(pieces)) if rest.startswith(pieces[p]) and (with_exact or len(pieces[p]) < len(rest))]
            assert sorted(ids[offsets[k] : offsets[k + 1]].tolist()) == sorted(token_ids[allowed].tolist()), (data, k)
            assert longer[k] == sum(len(p) > len(rest) and p.startswith(rest) for p in pieces)


def test_fingerprint_follows_the_bytes_alone():
    rng = np.random.default_rng(6)
    rows = [rng.integers(-(2**31), 2**31, size=n, dtype=np.int64).astype(np.int32) for n in (4007, 4007, 3, 1)]
    for row in rows:
        assert walk.fingerprint(row) == walk.fingerprint(row.copy())
        for word in (0, len(row) // 2, len(row) - 1):  # one bit anywhere, the odd tail included
            changed = row.copy()
            changed[word] ^= 1 << int(rng.integers(0, 31))
            assert walk.fingerprint(changed) != walk.fingerprint(row)
    sparse = np.zeros(4007, dtype=np.uint32)
    seen = set()
    for token in range(4007 * 32):  # every one-token row of a 128k vocabulary: no two alike
        sparse[token >> 5] = 1 << (token & 31)
        seen.add(walk.fingerprint(sparse))
        sparse[token >> 5] = 0
    assert len(seen) == 4007 * 32


def test_walk_pushdown_refuses_a_column_map_past_the_width():
    rng = np.random.default_rng(10)
    rules = random_rules(rng, [97, 98])
    rules[1] = rules[1]._replace(columns=np.full(256, rules[1].width, dtype=np.uint8))
    flat, begins, ends = random_tokens(rng, 5, [97, 98])
    frames = np.array([[0, 1], [1, 1]], dtype=np.int32)
    with pytest.raises(ValueError, match="column map"):
        walk.walk_pushdown(rules, frames, 2, np.ones(len(begins), dtype=np.int32), flat, begins, ends, leave_first=False)


def _derivative_walk(expr, data: bytes):
    """Where the derivatives of ``expr`` by ``data`` end: ``(dead, expression)``."""
    from grammask.grammars.fsm.expr import EMPTY, derivative

    for byte in data:
        expr = derivative(expr, byte)
        if expr is EMPTY:
            return True, expr
    return False, expr


@pytest.mark.parametrize("native", [True, False])
def test_walk_rule_fills_the_transitions_it_meets_unknown(monkeypatch, native):
    # Given `fill`, a walk computes what it lacks on the way, the automaton's table growing under
    # it, and stops where the derivatives stop: no item is left pending.
    from grammask.grammars.fsm.automaton import START, LazyDfa
    from grammask.grammars.fsm.regex import regex_to_expr

    expr = regex_to_expr("(ab|cd)*[a-e]{0,40}!")
    dfa = LazyDfa(expr)
    capacity = len(dfa.accepting)
    rng = np.random.default_rng(11)
    flat, begins, ends = random_tokens(rng, 300, list(b"abcde!"))
    long_run = np.frombuffer(b"ab" * 30 + b"e" * 30, dtype=np.uint8)  # past the initial capacity in one item
    flat = np.concatenate([flat, long_run])
    begins, ends = np.append(begins, ends[-1]), np.append(ends, ends[-1] + len(long_run))
    asked = []

    def fill(state, byte):
        asked.append((state, byte))
        dfa.transition(state, byte)
        return dfa.table, np.zeros(len(dfa.accepting), np.uint8)

    if not native:
        monkeypatch.setattr(walk, "_native", None)
    states = np.full(len(begins), START, dtype=np.int32)
    result = walk.walk_rule(dfa.table, np.zeros(len(dfa.accepting), np.uint8), flat, states, begins, ends, 0,
                            dfa.column_of_byte, dfa.width, fill)
    assert len(dfa.accepting) > capacity and len(asked) == len(set(asked))
    for item in range(len(begins)):
        dead, after = _derivative_walk(expr, bytes(flat[begins[item]:ends[item]]))
        assert result.status[item] == (walk.STATUS_DEAD if dead else walk.STATUS_END)
        if not dead:
            assert dfa.expr(int(result.finals[item])) is after


@pytest.mark.parametrize("native", [True, False])
def test_walk_rule_passes_on_what_fill_does_wrong(monkeypatch, native):
    from grammask.grammars.fsm.automaton import START, LazyDfa
    from grammask.grammars.fsm.expr import literal

    dfa = LazyDfa(literal("abc"))
    flags = np.zeros(len(dfa.accepting), np.uint8)
    flat = np.frombuffer(b"abc", dtype=np.uint8)
    one = np.array([START], dtype=np.int32)
    if not native:
        monkeypatch.setattr(walk, "_native", None)

    def walk_with(fill):
        return walk.walk_rule(dfa.table, flags, flat, one, np.zeros(1, np.int64), np.array([3], np.int64), 0,
                              dfa.column_of_byte, dfa.width, fill)

    def failing(state, byte):
        raise KeyError("no such state")

    with pytest.raises(KeyError, match="no such state"):
        walk_with(failing)
    with pytest.raises(RuntimeError, match="left the transition unknown"):
        walk_with(lambda state, byte: (dfa.table, flags))
    if native:
        with pytest.raises(TypeError, match="answer"):
            walk_with(lambda state, byte: dfa.table)


def _nested_lists():
    """Rules of ``L → '[' (I (',' I)*)? ']'``, ``I → 'x' | 'y'{40} | L``: a rule set that grows as it
    is walked (the item rule is added, then its table outgrows its first capacity)."""
    from grammask.grammars.fsm import expr as E
    from grammask.grammars.fsm.rules import Rule, RuleSet

    lists, item = Rule("list"), Rule("item")
    item.body = E.alt(E.literal("x"), E.literal("y" * 40), E.call(lists))
    items = E.cat(E.call(item), E.star(E.cat(E.literal(","), E.call(item))))
    lists.body = E.cat(E.literal("["), E.opt(items), E.literal("]"))
    return RuleSet(lists, max_states=10_000)


def _viable_list_prefix(text: bytes) -> bool:
    """Whether ``text`` begins some word of :func:`_nested_lists`' language (a hand-written check)."""
    depth, last, run = 0, None, 0
    for char in text.decode():
        if depth == 0 and last is not None:
            return False  # the outer list is closed
        item_done = last in ("x", "]") or (last == "y" and run == 40)
        if char == "[":
            ok = last in (None, "[", ",")
            depth += 1
        elif char == "x":
            ok = last in ("[", ",")
        elif char == "y":
            ok = last in ("[", ",") or (last == "y" and run < 40)
            run = run + 1 if last == "y" else 1
        elif char == ",":
            ok = item_done
        else:
            ok = last == "[" or item_done
            depth -= 1
        if not ok:
            return False
        last = char
    return True


@pytest.mark.parametrize("native", [True, False])
def test_walk_pushdown_resolves_facts_as_rules_are_added(monkeypatch, native):
    # With `resolve`, a walk over a grammar whose automata are built as it goes (rules added, tables
    # replaced by larger ones mid-walk) reads exactly the prefixes of the language.
    rules = _nested_lists()
    rng = np.random.default_rng(12)
    words = [bytes(rng.choice(list(b"[],xy"), size=int(rng.integers(1, 12))).tolist()) for _ in range(400)]
    words += [b"[[x],x,[[x,[]]]]", b"[x,[x]", b"[[[[[[[[[[[[[[[[[[[x", b"[x," + b"y" * 40 + b"]", b"[" + b"y" * 41, b"[[" + b"y" * 39 + b"]"]
    flat = np.frombuffer(b"".join(words), dtype=np.uint8)
    ends = np.cumsum([len(w) for w in words]).astype(np.int64)
    begins = ends - np.array([len(w) for w in words])
    first_tables = rules.tables()
    seen = []

    def resolve(rule, state, byte):
        dfa = rules.dfas[rule]
        dfa.is_live(state) if byte == walk.LIVENESS_REQUEST else dfa.transition(state, byte)
        seen.append(rules.tables())
        return seen[-1]

    if not native:
        monkeypatch.setattr(walk, "_native", None)
    tops = np.ones(len(words), dtype=np.int32)
    status, requests = walk.walk_pushdown(first_tables, np.zeros((0, 2), np.int32), 0, tops, flat, begins, ends,
                                          leave_first=False, resolve=resolve)
    assert len(first_tables) == 1 and len(rules.dfas) == 2 and len({id(t) for t in seen}) > 2  # a rule added, a table grown
    assert len(requests) == 0
    expected = [walk.STATUS_END if _viable_list_prefix(w) else walk.STATUS_DEAD for w in words]
    assert status.tolist() == expected


@pytest.mark.parametrize("native", [True, False])
def test_walk_pushdown_passes_on_what_resolve_does_wrong(monkeypatch, native):
    rules = _nested_lists()
    flat = np.frombuffer(b"[x]", dtype=np.uint8)
    args = (rules.tables(), np.zeros((0, 2), np.int32), 0, np.ones(1, np.int32), flat, np.zeros(1, np.int64), np.array([3], np.int64))
    if not native:
        monkeypatch.setattr(walk, "_native", None)

    def failing(rule, state, byte):
        raise KeyError("no such rule")

    with pytest.raises(KeyError, match="no such rule"):
        walk.walk_pushdown(*args, leave_first=False, resolve=failing)
    with pytest.raises(RuntimeError, match="left a transition unknown"):
        walk.walk_pushdown(*args, leave_first=False, resolve=lambda rule, state, byte: rules.tables())
    if native:  # frames would be left without tables (the reference fails on its own indexing)
        with pytest.raises(ValueError, match="fewer rules"):
            walk.walk_pushdown(*args, leave_first=False, resolve=lambda rule, state, byte: ())
