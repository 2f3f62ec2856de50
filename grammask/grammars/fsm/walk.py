"""The hot loops of the fsm backend: walking many token byte strings through lazily built automata.

Each function has a native implementation (the C extension ``grammask.grammars.fsm._walk``, built
by ``pip install``) and a pure-Python reference with the same contract, used when the extension is
not built and by the tests, which check that the two agree. :data:`NATIVE` says which one runs.

Automata are given as dense transition tables (``[capacity * width]`` int32, row-major: state
``s``'s successor on byte ``b`` is at ``width * s + columns[b]``, ``columns`` a ``[256]`` uint8 map
of bytes to columns), where ``0`` is the dead state and ``-1`` a
transition not computed yet. Given a callback, a walk that meets ``-1`` asks it to compute the
fact and reads on (the callback answers the automaton's arrays as they are then: computing may
grow them); without one, it stops there and says so ("pending"), and the caller computes the
transition and walks again from that point.

Rule state flags (``[capacity]`` uint8, one table per rule): :data:`ACCEPTING`, :data:`HAS_CALLS`,
and the liveness bits :data:`LIVE_KNOWN`, :data:`LIVE`.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

import numpy as np

DEAD = 0
UNKNOWN = -1

ACCEPTING = 1
HAS_CALLS = 2
LIVE_KNOWN = 4
LIVE = 8
EXIT = ACCEPTING | HAS_CALLS
"""A state the text may leave its rule from: by popping (accepting) or by calling another rule."""

STATUS_DEAD, STATUS_END, STATUS_PENDING, STATUS_LIMIT = 0, 1, 2, 3
LIVENESS_REQUEST = 256
"""Byte value of a pending request that asks for a state's liveness rather than a transition."""
IDENTITY_COLUMNS = np.arange(256, dtype=np.uint8)
"""The column map of a table with one column per byte."""

MAX_EPSILON_MOVES = 64
"""Pushes and pops a pushdown walk may make in a row without reading a byte (left recursion guard)."""
MAX_WALK_STEPS = 1 << 20
"""Search steps one item of a pushdown walk may take (:data:`STATUS_LIMIT` past it): a grammar
whose calls branch without reading bytes could otherwise make the search exponential."""
MAX_DEPTH = 4096
"""Frames a pushdown walk's stack holds (``MAX_DEPTH`` of ``_walk.c``): a call past it is not made."""

try:
    if os.environ.get("GRAMMASK_PURE_PYTHON"):
        raise ImportError("GRAMMASK_PURE_PYTHON is set")
    from grammask.grammars.fsm import _walk as _native
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _native = None

NATIVE = _native is not None
"""Whether the C extension is in use."""


# ---------------------------------------------------------------------------------- vocabulary


def first_outside(flat: np.ndarray, begins: np.ndarray, ends: np.ndarray, byte_set: np.ndarray) -> np.ndarray:
    """For each token ``flat[begins[i]:ends[i]]``, the flat index of its first byte not in
    ``byte_set`` (``[256]`` bool), or ``ends[i]`` when it has none. Returns ``[n]`` int64."""
    member = np.ascontiguousarray(byte_set, dtype=np.uint8)
    out = np.empty(len(begins), dtype=np.int64)
    if _native is not None:
        _native.first_outside(flat, begins, ends, member, out)
        return out
    return _first_outside_reference(flat, begins, ends, member.astype(bool), out)


def _first_outside_reference(flat, begins, ends, member, out):
    outside_at = np.flatnonzero(~member[flat])
    out[:] = ends
    if len(outside_at):
        owner = np.searchsorted(begins, outside_at, side="right") - 1
        first = np.concatenate(([True], owner[1:] != owner[:-1]))
        out[owner[first]] = outside_at[first]
    return out


def first_outside_text(flat: np.ndarray, begins: np.ndarray, ends: np.ndarray, ascii_set: np.ndarray) -> np.ndarray:
    """Like :func:`first_outside` for a set of characters: the ASCII bytes of ``ascii_set``
    (``[256]`` bool, only its first 128 entries read) and every valid multi-byte UTF-8 character
    (no surrogates). A token's first byte outside is an ASCII byte not in the set or the start of
    an invalid or unfinished character. Returns ``[n]`` int64."""
    member = np.ascontiguousarray(ascii_set, dtype=np.uint8)
    out = np.empty(len(begins), dtype=np.int64)
    if _native is not None:
        _native.first_outside_text(flat, begins, ends, member, out)
        return out
    data = flat.tobytes()
    for i, (begin, end) in enumerate(zip(begins.tolist(), ends.tolist())):
        p = begin
        while p < end:
            if data[p] < 0x80:
                if not member[data[p]]:
                    break
                p += 1
                continue
            length = _utf8_char(data, p, end)
            if not length:
                break
            p += length
        out[i] = p
    return out


def _utf8_char(data: bytes, p: int, end: int) -> int:
    """Length of the valid multi-byte UTF-8 character at ``p`` (2-4), 0 if none ends before ``end``."""
    lead = data[p]
    low, high = 0x80, 0xBF
    if 0xC2 <= lead <= 0xDF:
        length = 2
    elif 0xE0 <= lead <= 0xEF:
        length = 3
        low, high = (0xA0 if lead == 0xE0 else 0x80), (0x9F if lead == 0xED else 0xBF)
    elif 0xF0 <= lead <= 0xF4:
        length = 4
        low, high = (0x90 if lead == 0xF0 else 0x80), (0x8F if lead == 0xF4 else 0xBF)
    else:
        return 0
    if p + length > end or not low <= data[p + 1] <= high:
        return 0
    return length if all(0x80 <= data[p + k] <= 0xBF for k in range(2, length)) else 0


def set_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """OR the bits of ``ids`` (``[k]`` int32) into the packed row ``words`` (``[width]`` int32), in place."""
    if not len(ids):
        return
    if _native is not None:
        _native.set_bits(words, np.ascontiguousarray(ids, dtype=np.int32))
        return
    ids = ids.astype(np.int64)
    bits = (np.int64(1) << (ids & 31)).astype(np.uint32).view(np.int32)
    np.bitwise_or.at(words, ids >> 5, bits)


def clear_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """Clear the bits of ``ids`` (``[k]`` int32) in the packed row ``words`` (``[width]`` int32), in place."""
    if not len(ids):
        return
    if _native is not None:
        _native.clear_bits(words, np.ascontiguousarray(ids, dtype=np.int32))
    else:
        ids = ids.astype(np.int64)
        bits = (np.int64(1) << (ids & 31)).astype(np.uint32).view(np.int32)
        np.bitwise_and.at(words, ids >> 5, ~bits)


def fill_row(target: np.ndarray, row: np.ndarray) -> None:
    """Write a held row into ``target`` (``[width]`` int32, writable): ``row`` is either packed
    words (``[width]`` int32, copied) or, when shorter, the ids of its few tokens (``[k]`` int32,
    ``k < width``: the target is cleared, then their bits set)."""
    if _native is not None:
        _native.fill_row(target, row)
    elif len(row) == len(target):
        target[...] = row
    else:
        target[...] = 0
        set_bits(target, row)


def fill_union(target: np.ndarray, rows: Sequence[np.ndarray]) -> None:
    """Write the union of held ``rows`` (each as :func:`fill_row` takes it: ``[width]`` int32
    packed words, or ``[k]`` int32 ids with ``k < width``) into ``target`` (``[width]`` int32,
    writable, C-contiguous), in one pass: no row is built for it."""
    if _native is not None:
        _native.fill_union(target, rows)
        return
    target[...] = 0
    for row in rows:
        or_row(target, row)


def or_row(words: np.ndarray, row: np.ndarray) -> None:
    """OR a held ``row`` (as :func:`fill_row` takes it) into ``words`` (``[width]`` int32, writable)."""
    if len(row) == len(words):
        np.bitwise_or(words, row, out=words)
    else:
        set_bits(words, row)


def union_ids(rows: Sequence[np.ndarray]) -> np.ndarray:
    """``[k]`` int32 the distinct ids of ``rows`` (each ``[n]`` int32 token ids, ``>= 0``), ascending."""
    if _native is None:
        return np.unique(np.concatenate([np.asarray(row, dtype=np.int32) for row in rows] or [np.zeros(0, np.int32)]))
    out = np.empty(sum(map(len, rows)), dtype=np.int32)
    count = _native.union_ids(tuple(np.ascontiguousarray(row, dtype=np.int32) for row in rows), out)
    return out if count == len(out) else out[:count].copy()


def packed_row(row: np.ndarray, width: int) -> np.ndarray:
    """``[width]`` int32 the held ``row`` (see :func:`fill_row`) as packed words: itself, or a new
    read-only packed row of its ids."""
    if len(row) == width:
        return row
    words = np.zeros(width, dtype=np.int32)
    set_bits(words, row)
    words.flags.writeable = False
    return words


def row_has(row: np.ndarray, width: int, token_id: int) -> bool:
    """Whether the held ``row`` (see :func:`fill_row`; ``width`` words when packed) allows ``token_id``."""
    if len(row) == width:
        return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)
    return token_id in row.tolist()


def unpack_bits(words: np.ndarray) -> np.ndarray:
    """``[k]`` int32 ascending ids of the bits set in the packed row ``words`` (``[width]`` int32):
    one pass over the words, so a sparse row costs little (the NumPy way unpacks every bit)."""
    if _native is not None:
        out = np.empty(_native.count_bits(words), dtype=np.int32)
        _native.unpack_bits(words, out)
        return out
    return np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")).astype(np.int32)


def fingerprint(words: np.ndarray) -> int:
    """A hash of a C-contiguous array's bytes (equal bytes, equal values; nothing else promised):
    a few microseconds less than hashing a copy of them, for a 16 KB row."""
    if _native is not None:
        return _native.fingerprint(words)
    return hash(words.tobytes())


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two C-contiguous arrays hold the same bytes (one ``memcmp``, no temporaries)."""
    if _native is not None:
        return _native.same_bytes(a, b)
    return a.nbytes == b.nbytes and a.tobytes() == b.tobytes()


def prefix_range(
    flat: np.ndarray, begins: np.ndarray, lengths: np.ndarray, data: bytes, index: np.ndarray | None = None
) -> tuple[np.ndarray, int, int, int]:
    """Search tokens sorted by their bytes (``flat[begins[i]:begins[i] + lengths[i]]``, ascending)
    for those related to ``data`` by prefix, narrowing a range of the order one byte at a time.

    Args:
        flat: ``[total]`` uint8; begins: ``[n]`` int64; lengths: ``[n]`` int32, in sorted order.
        data: the byte string.
        index: ``[PREFIX_INDEX_SIZE]`` int32 from :func:`prefix_index` of the same tokens, or
            ``None``: with it, the native search looks up the ranges of ``data``'s first two bytes
            instead of searching them (the same result; the searches over the whole order are the
            slow part, a cache miss a step).

    Returns:
        ``(shorter, low, split, high)``: ``shorter`` ``[k]`` int64 the sorted indices of the tokens
        that are proper prefixes of ``data``, shortest first; ``[low, split)`` the tokens equal to
        ``data``; ``[split, high)`` the longer tokens that start with it.
    """
    if _native is not None:
        found, low, split, high = _native.prefix_range(flat, begins, lengths, data, *(() if index is None else (index,)))
        return np.frombuffer(found, dtype=np.int64), low, split, high
    low, high, shorter = 0, len(lengths), []  # the reference searches every byte (index unused)
    for k, byte in enumerate(data):
        if low >= high:
            break
        key = lambda i: int(flat[begins[i] + k]) if lengths[i] > k else -1  # noqa: E731
        low = _key_bound(key, low, high, byte - 1)
        high = _key_bound(key, low, high, byte)
        if k + 1 == len(data):
            break
        i = low
        while i < high and lengths[i] == k + 1:
            shorter.append(i)
            i += 1
    split = low
    while split < high and lengths[split] == len(data):
        split += 1
    return np.asarray(shorter, dtype=np.int64), low, split, high


PREFIX_INDEX_SIZE = 256 * 257 + 1


def run_prefixes(
    flat: np.ndarray,
    begins: np.ndarray,
    lengths: np.ndarray,
    index: np.ndarray,
    order: np.ndarray,
    token_ids: np.ndarray,
    data: bytes,
    with_exact: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`prefix_range` for every suffix ``data[k:]`` of a literal in one pass.

    Args:
        flat, begins, lengths, index: as :func:`prefix_range` (the index is required).
        order: ``[n]`` int64 the vocabulary position of each sorted token; token_ids: ``[v]`` int32
            the id of each vocabulary position.
        data: the literal; with_exact: whether a token equal to a suffix counts with its prefixes.

    Returns:
        ``(ids, offsets, longer)``: ``ids[offsets[k]:offsets[k + 1]]`` (``[t]`` int32, offsets
        ``[len(data) + 1]`` int64) the ids of the tokens that are proper prefixes of ``data[k:]``
        (and with ``with_exact`` equal to it), shortest first; ``longer`` ``[len(data)]`` int64 how
        many tokens start with ``data[k:]`` and go on.
    """
    if _native is not None:
        ids, *columns = _native.run_prefixes(flat, begins, lengths, index, order, token_ids, data, with_exact)
        return np.frombuffer(ids, dtype=np.int32), *(np.frombuffer(column, dtype=np.int64) for column in columns)
    found, offsets, longer = [], [0], []
    for k in range(len(data)):
        shorter, low, split, high = prefix_range(flat, begins, lengths, data[k:])
        sorted_found = np.concatenate([shorter, np.arange(low, split)]) if with_exact else shorter
        found.append(token_ids[order[sorted_found]])
        offsets.append(offsets[-1] + len(sorted_found))
        longer.append(high - split)
    ids = np.concatenate(found).astype(np.int32) if found else np.zeros(0, dtype=np.int32)
    return ids, np.array(offsets, dtype=np.int64), np.array(longer, dtype=np.int64)


def prefix_index(flat: np.ndarray, begins: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``[PREFIX_INDEX_SIZE]`` int32: for tokens sorted by their bytes (as :func:`prefix_range`
    takes them), where each two-byte key begins in the order. A token's key is ``257 * b0 + b1 + 1``
    for its first two bytes, ``257 * b0`` for a one-byte token (it sorts before the longer ones it
    starts), and below every key for an empty one; entry ``j`` is the first position whose key is
    at least ``j``."""
    first = np.where(lengths >= 1, flat[np.minimum(begins, len(flat) - 1)], 0).astype(np.int64)
    second = np.where(lengths >= 2, flat[np.minimum(begins + 1, len(flat) - 1)].astype(np.int64) + 1, 0)
    keys = np.where(lengths >= 1, first * 257 + second, -1)
    return np.searchsorted(keys, np.arange(PREFIX_INDEX_SIZE), side="left").astype(np.int32)


def _key_bound(key, low: int, high: int, below: int) -> int:
    """The first index in ``[low, high)`` whose key is above ``below`` (keys ascend)."""
    while low < high:
        middle = (low + high) // 2
        if key(middle) > below:
            high = middle
        else:
            low = middle + 1
    return low


# ---------------------------------------------------------------------------------- one rule


class RuleWalk:
    """The result of :func:`walk_rule`.

    Attributes:
        status: ``[m]`` uint8 per item: dead, ended (in ``finals``) or pending.
        finals: ``[m]`` int32: the end state; for a pending item, the state at the unknown byte.
        resume: ``[m]`` int64: for a pending item, the flat index of the unknown byte.
        exit_items, exit_at: ``[x]`` int64: item and flat index where the rest of the token begins,
            for every point inside a token (not its end) where the walk stood on a state with a
            flag in ``exit_mask``; exit_states: ``[x]`` int32 that state.
    """

    __slots__ = ("status", "finals", "resume", "exit_items", "exit_at", "exit_states")

    def __init__(self, status, finals, resume, exit_items, exit_at, exit_states) -> None:
        self.status, self.finals, self.resume = status, finals, resume
        self.exit_items, self.exit_at, self.exit_states = exit_items, exit_at, exit_states


def walk_rule(
    table: np.ndarray, flags: np.ndarray, flat: np.ndarray, states: np.ndarray, begins: np.ndarray, ends: np.ndarray,
    exit_mask: int = EXIT, columns: np.ndarray | None = None, width: int = 256,
    fill: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = None,
) -> RuleWalk:
    """Walk byte strings ``flat[begins[i]:ends[i]]`` from ``states[i]`` through one automaton.

    Args:
        table: ``[capacity, width]`` or ``[capacity * width]`` int32 transitions (C-contiguous).
        columns, width: the table column of each byte (``[256]`` uint8; ``None``: the byte itself)
            and the table's columns.
        flags: ``[capacity]`` uint8 state flags.
        flat: ``[total]`` uint8 bytes.
        states: ``[m]`` int32 start states; begins, ends: ``[m]`` int64 slices of ``flat``.
        exit_mask: the flags that make a state an exit (:data:`EXIT`; :data:`HAS_CALLS` for a rule
            that is never called, since it can never return).
        fill: ``fill(state, byte)`` computes an unknown transition and answers ``(table, flags)``,
            the automaton's arrays as they are then (no item is left pending); ``None``: items
            stop at unknown transitions.
    """
    m = len(states)
    status = np.empty(m, dtype=np.uint8)
    finals = np.empty(m, dtype=np.int32)
    resume = np.empty(m, dtype=np.int64)
    columns = IDENTITY_COLUMNS if columns is None else columns
    if len(columns) != 256 or columns.dtype != np.uint8 or int(columns.max()) >= width or table.size % width:
        raise ValueError(f"walk_rule: a [256] uint8 column map below width={width} and a table of whole rows")
    if _native is not None:
        raw = _native.walk_rule(table, flags, flat, states, begins, ends, status, finals, resume, exit_mask, columns, width, fill)
        exits = np.frombuffer(raw, dtype=np.int64).reshape(-1, 3)
        return RuleWalk(status, finals, resume, exits[:, 0].copy(), exits[:, 1].copy(), exits[:, 2].astype(np.int32))
    return _walk_rule_reference(table, flags, flat, states, begins, ends, status, finals, resume, exit_mask, columns, width, fill)


def _walk_rule_reference(table, flags, flat, states, begins, ends, status, finals, resume, exit_mask, columns, width, fill=None) -> RuleWalk:
    exits: list[tuple[int, int, int]] = []
    for item in range(len(states)):
        state = int(states[item])
        end = int(ends[item])
        position = int(begins[item])
        outcome = STATUS_END
        while position < end:
            following = int(table.flat[width * state + int(columns[flat[position]])])
            if following == UNKNOWN and fill is not None:
                table, flags = fill(state, int(flat[position]))
                following = int(table.flat[width * state + int(columns[flat[position]])])
                if following == UNKNOWN:
                    raise RuntimeError("walk_rule: fill left the transition unknown")
            if following == UNKNOWN:
                outcome = STATUS_PENDING
                break
            state = following
            position += 1
            if state == DEAD:
                outcome = STATUS_DEAD
                break
            if position < end and flags[state] & exit_mask:
                exits.append((item, position, state))
        status[item], finals[item], resume[item] = outcome, state, position
    data = np.array(exits, dtype=np.int64).reshape(-1, 3)
    return RuleWalk(status, finals, resume, data[:, 0].copy(), data[:, 1].copy(), data[:, 2].astype(np.int32))


# ---------------------------------------------------------------------------------- pushdown


class RuleTables(NamedTuple):
    """One rule's arrays as the pushdown walk reads them.

    Attributes:
        table: ``[capacity * width]`` int32 transitions.
        flags: ``[capacity]`` uint8 state flags.
        call_offsets: ``[capacity]`` int32: ``-1`` when a state calls nothing, else where its calls
            begin in ``call_data``.
        call_data: int32: at an offset, ``count`` then ``count`` pairs ``(callee rule, return state)``.
        columns: ``[256]`` uint8, the table column of each byte.
        width: the table's columns.
    """

    table: np.ndarray
    flags: np.ndarray
    call_offsets: np.ndarray
    call_data: np.ndarray
    columns: np.ndarray = IDENTITY_COLUMNS
    width: int = 256


def walk_pushdown(
    rules: Sequence[RuleTables],
    frames: np.ndarray,
    top_rule: int,
    top_states: np.ndarray,
    flat: np.ndarray,
    begins: np.ndarray,
    ends: np.ndarray,
    *,
    leave_first: bool,
    resolve: Callable[[int, int, int], tuple] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each byte string can be read by the pushdown automaton from a configuration.

    Item ``i``'s configuration is the stack ``frames`` (``[d, 2]`` int32 ``(rule, state)`` rows,
    bottom first, each state a return state) with ``(top_rule, top_states[i])`` on top; its bytes
    are ``flat[begins[i]:ends[i]]``. At each byte the walk may read it in the top rule, call a rule
    the top state calls (the callee's start state reads it; the caller's frame keeps the return
    state), or, when the top state accepts, return to the frame below. With ``leave_first``, the
    first byte may not be read in the top rule (the caller has covered that path). The string is
    read when some path reads every byte and ends on a live top state.

    ``resolve(rule, state, byte)`` computes an unknown fact (a transition; with byte
    :data:`LIVENESS_REQUEST`, a liveness) and answers the rules' tables as they are then (a new
    tuple where an automaton grew or a rule was added). With it no item is left pending and no
    request is made; without it (``None``) the walk asks for what it misses:

    Returns:
        ``(status, requests)``: ``[m]`` uint8 per item (:data:`STATUS_DEAD`: cannot be read,
        :data:`STATUS_END`: can, :data:`STATUS_PENDING`: a needed fact is unknown,
        :data:`STATUS_LIMIT`: the search took more than :data:`MAX_WALK_STEPS`), and ``[r, 3]``
        int32 requests ``(rule, state, byte)``, each once: a transition to compute, or with byte
        :data:`LIVENESS_REQUEST`, a liveness to decide. Pending items are walked again from the start.
    """
    frames = np.ascontiguousarray(frames, dtype=np.int32).reshape(-1)
    if _native is None:
        return _reference_walk(rules, frames, top_rule, top_states, flat, begins, ends, leave_first, resolve)[:2]
    status = np.empty(len(top_states), dtype=np.uint8)
    packed = rules if type(rules) is tuple else tuple(rules)
    raw = _native.walk_pushdown(packed, frames, top_rule, top_states, flat, begins, ends, status, int(leave_first), resolve)
    return status, np.frombuffer(raw, dtype=np.int32).reshape(-1, 3)


def _reference_walk(rules, frames, top_rule, top_states, flat, begins, ends, leave_first, resolve):
    """:func:`walk_pushdown` in Python (``frames`` flat), with the ``below`` and ``above`` of
    :func:`walk_exits`: ``(status, requests, below, above)``."""
    status = np.empty(len(top_states), dtype=np.uint8)
    requests: dict[tuple[int, int, int], None] = {}
    stack = [(int(frames[2 * i]), int(frames[2 * i + 1])) for i in range(len(frames) // 2)]
    base = len(stack)
    walker = _PushdownWalk(rules, flat, requests, resolve)
    walker.lowest = walker.highest = base + 1
    for item in range(len(top_states)):
        walker.end, walker.steps = int(ends[item]), 0
        stack.append((top_rule, int(top_states[item])))
        status[item] = walker.run(stack, int(begins[item]), leave_first, 0)
        stack.pop()
    above = -1 if walker.cut else walker.highest - base - 1
    return status, np.array(list(requests), dtype=np.int32).reshape(-1, 3), base + 1 - walker.lowest, above


def walk_exits(
    rules: Sequence[RuleTables],
    frames: np.ndarray,
    top_rule: int,
    top_states: np.ndarray,
    flat: np.ndarray,
    begins: np.ndarray,
    ends: np.ndarray,
    positions: np.ndarray,
    token_ids: np.ndarray,
    resolve: Callable[[int, int, int], tuple] | None = None,
) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
    """:func:`walk_pushdown` with ``leave_first`` over a rule row's exits, giving the ids of the
    tokens read in the same pass (no status array, masks or id gathering in Python).

    Args:
        rules, frames, top_rule, top_states, flat, begins, ends, resolve: as :func:`walk_pushdown`.
        positions: ``[m]`` int64, each item's vocabulary position; its token is
            ``token_ids[positions[i]]`` (``token_ids``: ``[n]`` int32).

    Returns:
        ``(read, pending, limited, requests, below, above)``: ``[k]`` int32 the ids of the items
        read to their end, in item order; ``[p]`` int64 indices of the items waiting for a fact
        (to walk again once ``requests`` are answered); whether some item ran past
        :data:`MAX_WALK_STEPS`; the ``[r, 3]`` int32 requests as :func:`walk_pushdown` gives them;
        how many frames of ``frames`` (from its top) any path returned into; and how many frames
        over the top any path called, ``-1`` where a call found no room (:data:`MAX_DEPTH`). With
        ``above`` not ``-1``, every stack whose top ``below + 1`` frames are these (and, where
        ``below`` reaches the bottom, no more) and that has room for ``above`` more frames reads
        the same ids.
    """
    frames = np.ascontiguousarray(frames, dtype=np.int32).reshape(-1)
    if _native is None:
        status, requests, below, above = _reference_walk(rules, frames, top_rule, top_states, flat, begins, ends, True, resolve)
        read = token_ids[positions[status == STATUS_END]].astype(np.int32)
        return read, np.flatnonzero(status == STATUS_PENDING), bool((status == STATUS_LIMIT).any()), requests, below, above
    read = np.empty(len(top_states), dtype=np.int32)
    pending = np.empty(len(top_states), dtype=np.int64)
    packed = rules if type(rules) is tuple else tuple(rules)
    waiting, limited, raw, count, below, above = _native.walk_exits(
        packed, frames, top_rule, top_states, flat, begins, ends, positions, token_ids, read, pending, resolve
    )
    return read[:count], pending[:waiting], bool(limited), np.frombuffer(raw, dtype=np.int32).reshape(-1, 3), below, above


class _PushdownWalk:
    """Depth-first search over one item's paths (the reference of the native walk)."""

    def __init__(self, rules, flat, requests, resolve) -> None:
        self.rules, self.flat, self.requests, self.resolve = rules, flat, requests, resolve
        self.end = self.steps = self.lowest = self.highest = 0
        self.cut = False

    def live(self, rule: int, state: int) -> bool | None:
        flag = int(self.rules[rule].flags[state])
        if not flag & LIVE_KNOWN and self.resolve is not None:
            self.rules = self.resolve(rule, state, LIVENESS_REQUEST)
            flag = int(self.rules[rule].flags[state])
            if not flag & LIVE_KNOWN:
                raise RuntimeError("pushdown walk: resolve left a liveness unknown")
        if flag & LIVE_KNOWN:
            return bool(flag & LIVE)
        self.requests[(rule, state, LIVENESS_REQUEST)] = None
        return None

    def successor(self, rule: int, state: int, byte: int) -> int:
        tables = self.rules[rule]
        following = int(tables.table[tables.width * state + int(tables.columns[byte])])
        if following == UNKNOWN and self.resolve is not None:
            self.rules = self.resolve(rule, state, byte)
            tables = self.rules[rule]
            following = int(tables.table[tables.width * state + int(tables.columns[byte])])
            if following == UNKNOWN:
                raise RuntimeError("pushdown walk: resolve left a transition unknown")
        if following == UNKNOWN:
            self.requests[(rule, state, byte)] = None
        return following

    def run(self, stack: list, position: int, leave: bool, epsilon: int) -> int:
        self.steps += 1
        if self.steps > MAX_WALK_STEPS:
            return STATUS_LIMIT
        rule, state = stack[-1]
        if position == self.end:
            live = self.live(rule, state)
            return STATUS_PENDING if live is None else (STATUS_END if live else STATUS_DEAD)
        if epsilon > MAX_EPSILON_MOVES:
            return STATUS_DEAD
        pending = False
        if not leave:
            following = self.successor(rule, state, int(self.flat[position]))
            if following == UNKNOWN:
                pending = True
            elif following != DEAD:
                stack[-1] = (rule, following)
                outcome = self.run(stack, position + 1, False, 0)
                stack[-1] = (rule, state)
                if outcome in (STATUS_END, STATUS_LIMIT):
                    return outcome
                pending |= outcome == STATUS_PENDING
        offset = int(self.rules[rule].call_offsets[state])
        if offset >= 0 and len(stack) >= MAX_DEPTH:
            self.cut = True
        elif offset >= 0:
            for k in range(int(self.rules[rule].call_data[offset])):
                data = self.rules[rule].call_data  # read again: resolving may have replaced it
                callee, back = int(data[offset + 1 + 2 * k]), int(data[offset + 2 + 2 * k])
                live = self.live(rule, back)
                if not live:
                    pending |= live is None
                    continue
                stack[-1] = (rule, back)
                stack.append((callee, 1))
                self.highest = max(self.highest, len(stack))
                outcome = self.run(stack, position, False, epsilon + 1)
                stack.pop()
                stack[-1] = (rule, state)
                if outcome in (STATUS_END, STATUS_LIMIT):
                    return outcome
                pending |= outcome == STATUS_PENDING
        if self.rules[rule].flags[state] & ACCEPTING and len(stack) > 1:
            stack.pop()
            self.lowest = min(self.lowest, len(stack))
            outcome = self.run(stack, position, False, epsilon + 1)
            stack.append((rule, state))
            if outcome in (STATUS_END, STATUS_LIMIT):
                return outcome
            pending |= outcome == STATUS_PENDING
        return STATUS_PENDING if pending else STATUS_DEAD


__all__ = [
    "ACCEPTING", "DEAD", "EXIT", "HAS_CALLS", "LIVE", "LIVE_KNOWN", "LIVENESS_REQUEST", "NATIVE", "RuleTables",
    "RuleWalk", "STATUS_DEAD", "STATUS_END", "STATUS_LIMIT", "STATUS_PENDING", "UNKNOWN", "fill_union", "first_outside", "or_row", "set_bits", "union_ids",
    "walk_exits", "walk_pushdown", "walk_rule", "first_outside_text",
]
