"""The tokenizer's vocabulary in the shape the token walks need (built once per tokenizer).

Ordinary tokens (not special, not empty, below ``real_vocab_size``) are laid end to end in one byte
array, ``flat``; token ``p`` of this order (a *position*) is ``flat[begins[p]:ends[p]]`` and has id
``token_ids[p]``. For a byte set ``S`` (the bytes a state loops on), :meth:`VocabIndex.partition`
answers once per tokenizer which tokens lie wholly in ``S`` and, for the others, where their first
byte outside ``S`` is: a state that loops on ``S`` allows the first kind at once and walks the
others from that byte on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from grammask.grammars.fsm import walk
from grammask.masking.bitmask import bitmask_width
from grammask.tokenizer import TokenizerInfo

_CACHE_SIZE = 4
_PARTITIONS_KEPT = 512
_PARTITION_BYTES = 64 << 20
"""What a tokenizer's cached partitions may hold (about 3.5 MB each over a 128k vocabulary; the
least recently used go first)."""
_FEW_FIRST_BYTES = 64
"""Tokens starting with at most this many bytes are gathered by slices of a by-first-byte order;
with more, one mask over the tokens is cheaper."""


class _ByFirstByte:
    """The indexes ``0..m-1`` of ``firsts`` (``[m]`` uint8 first bytes of tokens) grouped by byte,
    so that the tokens starting with a few bytes are a few slices. Arrays read-only.

    Attributes:
        counts: ``[256]`` int64 how many start with each byte.
    """

    def __init__(self, firsts: np.ndarray) -> None:
        self.firsts = firsts
        self.counts = np.bincount(firsts, minlength=256).astype(np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._order = np.argsort(firsts, kind="stable").astype(np.int64)
        for array in (self.counts, self._offsets, self._order):
            array.flags.writeable = False

    def group(self, byte: int) -> np.ndarray:
        """``[k]`` int64 ascending indexes of the tokens starting with ``byte``."""
        return self._order[self._offsets[byte] : self._offsets[byte + 1]]

    def select(self, first_bytes: np.ndarray, *, ascending: bool = False) -> np.ndarray:
        """``[k]`` int64 indexes of the tokens whose first byte is in ``first_bytes`` (``[256]``
        bool), grouped by that byte, or all ascending with ``ascending`` (one mask gives them so
        when the bytes are many; a few slices are sorted)."""
        chosen = np.flatnonzero(first_bytes)
        if len(chosen) == 1:
            return self.group(int(chosen[0]))
        if len(chosen) > _FEW_FIRST_BYTES:
            return np.flatnonzero(first_bytes[self.firsts])
        groups = [self.group(b) for b in chosen.tolist()]
        if not groups:
            return np.zeros(0, dtype=np.int64)
        joined = np.concatenate(groups)
        return np.sort(joined) if ascending else joined

    @property
    def nbytes(self) -> int:  # firsts belongs to the owner
        return self.counts.nbytes + self._offsets.nbytes + self._order.nbytes


@dataclass(frozen=True, eq=False)
class BytePartition:
    """The vocabulary split by a loop set ``S`` of bytes, or of characters (``text``: the ASCII
    bytes of ``S`` and every multi-byte UTF-8 character). All arrays read-only.

    Attributes:
        first_out: ``[n]`` int64 per position, the flat index of the token's first byte outside
            ``S`` (its end when it has none).
        within_words: ``[width]`` int32, packed ids of the tokens made only of ``S``.
        within_count: how many such tokens.
        within: ``[w]`` int64 their positions; within_first: ``[w]`` uint8 their first bytes.
        outside: ``[m]`` int64 positions of the other tokens; outside_begins: ``[m]`` int64 the flat
            index of each one's first byte outside ``S``; outside_bytes: ``[m]`` uint8 that byte;
            outside_first: ``[m]`` uint8 each one's first byte.
        outside_by_first: ``outside_first`` grouped by byte (:meth:`outside_starting_with`).
        by_chars: what :meth:`VocabIndex.within_words_up_to` and
            :meth:`VocabIndex.outside_text_shape` computed for this partition.
    """

    first_out: np.ndarray
    within_words: np.ndarray
    within_count: int
    within: np.ndarray
    within_first: np.ndarray
    outside: np.ndarray
    outside_begins: np.ndarray
    outside_bytes: np.ndarray
    outside_first: np.ndarray
    outside_by_first: _ByFirstByte
    by_chars: dict = field(default_factory=dict, repr=False)

    def outside_starting_with(self, first_bytes: np.ndarray) -> np.ndarray:
        """``[k]`` int64 ascending indexes into :attr:`outside` of the tokens whose first byte is in
        ``first_bytes`` (``[256]`` bool): a few slices when the bytes are few (a state looping on
        digits is left by most of the vocabulary, and starts few of those tokens)."""
        return self.outside_by_first.select(first_bytes, ascending=True)

    @property
    def nbytes(self) -> int:
        return self.outside_by_first.nbytes + sum(a.nbytes for a in vars(self).values() if isinstance(a, np.ndarray))


class VocabIndex:
    """Ordinary tokens of one tokenizer, laid end to end, plus per-byte-set partitions.

    Attributes:
        token_ids: ``[n]`` int32, the ordinary token ids in position order (ascending ids).
        flat: ``[total]`` uint8, every token's bytes laid end to end.
        begins, ends: ``[n]`` int64, each token's slice of ``flat``.
        lengths: ``[n]`` int32, byte lengths; longest: the largest.
        vocab_size, width: logits width and ``ceil(vocab_size / 32)`` bitmask words.
        eos_ids: ``[e]`` int32; eos_words: ``[width]`` int32, those ids packed (read-only).
        has_every_byte: every single byte is an ordinary token (budget-aware closing relies on it).
    """

    def __init__(self, info: TokenizerInfo) -> None:
        ordinary = [i for i in range(info.real_vocab_size) if info.token_bytes[i] and not info.is_special(i)]
        self.token_ids = np.asarray(ordinary, dtype=np.int32)
        pieces = [info.token_bytes[i] for i in ordinary]
        self.lengths = np.fromiter((len(p) for p in pieces), dtype=np.int32, count=len(pieces))
        self.flat = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        self.ends = np.cumsum(self.lengths, dtype=np.int64)
        self.begins = self.ends - self.lengths
        self.vocab_size = info.vocab_size
        self.width = bitmask_width(info.vocab_size)
        self.eos_ids = np.asarray(info.eos_ids, dtype=np.int32)
        self.eos_words = self.pack(self.eos_ids)
        self.eos_words.flags.writeable = False
        self.has_every_byte = len({p for p in pieces if len(p) == 1}) == 256
        self.text = {int(i): p for i, p in zip(ordinary, pieces)}
        """token id → its bytes (ordinary tokens only)."""
        self.position_of = np.full(info.vocab_size, -1, dtype=np.int64)
        """``[vocab_size]`` int64: a token id's position, ``-1`` for special and padding ids."""
        self.position_of[self.token_ids] = np.arange(len(self.token_ids))
        first = self.flat[self.begins]
        self.first_bytes = first
        """``[n]`` uint8: each token's first byte."""
        self._by_first_byte = _ByFirstByte(first)
        self.id_of_text = {data: int(i) for i, data in self.text.items()}
        """bytes → ordinary token id."""
        order = np.asarray(sorted(range(len(pieces)), key=pieces.__getitem__), dtype=np.int64)
        self._sorted_positions = order
        self._sorted_begins, self._sorted_lengths = self.begins[order], self.lengths[order]
        self._prefix_index = walk.prefix_index(self.flat, self._sorted_begins, self._sorted_lengths)
        self._start_words: dict[int, np.ndarray] = {}
        self._by_length = np.argsort(self.lengths, kind="stable").astype(np.int64)
        self._sorted_by_length = self.lengths[self._by_length]
        self.longest = int(self.lengths.max(initial=0))
        self._short_words: dict[int, np.ndarray] = {}
        self._char_starts: np.ndarray | None = None
        self._partitions: OrderedDict[bytes, BytePartition] = OrderedDict()
        self._partition_bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.token_ids)

    def prefix_split(self, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tokens related to ``data`` by prefix, as ``[k]`` int64 positions each: those that
        are proper prefixes of it (shortest first), those equal to it, and the longer ones that
        start with it. One native search over the tokens in byte order (no per-length lookups), whose
        first two bytes are looked up in an index."""
        shorter, low, split, high = walk.prefix_range(self.flat, self._sorted_begins, self._sorted_lengths, data, self._prefix_index)
        order = self._sorted_positions
        return order[shorter], order[low:split], order[split:high]

    def run_prefixes(self, data: bytes, with_exact: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`prefix_split` of every suffix of ``data`` at once, as token ids
        (:func:`walk.run_prefixes`: ``(ids, offsets, longer)``)."""
        return walk.run_prefixes(
            self.flat, self._sorted_begins, self._sorted_lengths, self._prefix_index, self._sorted_positions, self.token_ids, data, with_exact
        )

    def count_starting_with(self, first_bytes: np.ndarray) -> int:
        """How many tokens start with a byte of ``first_bytes`` (``[256]`` bool)."""
        return int(self._by_first_byte.counts[first_bytes].sum())

    def starting_with(self, first_bytes: np.ndarray) -> np.ndarray:
        """``[m]`` int64 positions of the tokens whose first byte is in ``first_bytes`` (``[256]``
        bool), grouped by that byte (not sorted)."""
        return self._by_first_byte.select(first_bytes)

    def starting_words(self, first_bytes: np.ndarray) -> np.ndarray:
        """``[width]`` int32 packed row of the tokens whose first byte is in ``first_bytes``
        (``[256]`` bool); one cached row per byte, OR-ed."""
        words = np.zeros(self.width, dtype=np.int32)
        for b in np.flatnonzero(first_bytes).tolist():
            found = self._start_words.get(b)
            if found is None:
                found = self.pack(self.token_ids[self._by_first_byte.group(b)])
                self._start_words[b] = found
            np.bitwise_or(words, found, out=words)
        return words

    def longer_than(self, length: int) -> np.ndarray:
        """``[m]`` int64 read-only positions of the tokens of more than ``length`` bytes."""
        found = self._by_length[int(np.searchsorted(self._sorted_by_length, length, side="right")) :]
        found.flags.writeable = False
        return found

    def words_up_to_length(self, length: int) -> np.ndarray:
        """``[width]`` int32 read-only packed ids of the tokens of at most ``length`` bytes; cached
        per length asked for, up to :attr:`longest`."""
        length = min(length, self.longest)
        found = self._short_words.get(length)
        if found is None:
            found = self.pack(self.token_ids[self._by_length[: int(np.searchsorted(self._sorted_by_length, length, side="right"))]])
            found.flags.writeable = False
            self._short_words[length] = found
        return found

    def partition(self, byte_set: np.ndarray, *, text: bool = False) -> BytePartition:
        """The vocabulary split by ``byte_set`` (``[256]`` bool), or with ``text`` by its ASCII
        bytes plus every multi-byte UTF-8 character; cached per set."""
        key = np.packbits(byte_set).tobytes() + bytes([text])
        with self._lock:
            found = self._partitions.get(key)
            if found is not None:
                self._partitions.move_to_end(key)
                return found
        if text:
            first_out = walk.first_outside_text(self.flat, self.begins, self.ends, byte_set)
        else:
            first_out = walk.first_outside(self.flat, self.begins, self.ends, byte_set)
        inside = first_out == self.ends
        within, outside = np.flatnonzero(inside), np.flatnonzero(~inside)
        begins = first_out[outside]
        outside_first = self.first_bytes[outside]
        found = BytePartition(
            first_out, self.pack(self.token_ids[within]), len(within), within, self.first_bytes[within],
            outside, begins, self.flat[begins], outside_first, _ByFirstByte(outside_first),
        )
        for array in vars(found).values():
            if isinstance(array, np.ndarray):
                array.flags.writeable = False
        with self._lock:
            held = self._partitions.get(key)
            if held is not None:  # another thread built it meanwhile
                return held
            self._partitions[key] = found
            self._partition_bytes += found.nbytes
            while len(self._partitions) > 1 and (len(self._partitions) > _PARTITIONS_KEPT or self._partition_bytes > _PARTITION_BYTES):
                self._partition_bytes -= self._partitions.popitem(last=False)[1].nbytes
        return found

    def char_counts(self, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """``[m]`` int64: how many UTF-8 characters begin in each ``flat[begins[i]:ends[i]]`` (its
        bytes other than continuation bytes), from ``[m]`` int64 flat indexes."""
        starts = self._char_starts
        if starts is None:
            starts = np.zeros(len(self.flat) + 1, dtype=np.int64)
            np.cumsum((self.flat & 0xC0) != 0x80, out=starts[1:])
            self._char_starts = starts
        return starts[ends] - starts[begins]

    def within_words_up_to(self, partition: BytePartition, max_chars: int | None) -> np.ndarray:
        """``[width]`` int32 packed ids of ``partition``'s tokens made only of its set that have at
        most ``max_chars`` characters (all of them for ``None``). Read-only; cached per count up
        to the longest such token (so at most that many rows per partition)."""
        cache = partition.by_chars
        chars, ids = self.within_by_chars(partition)
        if max_chars is None or not len(chars) or max_chars >= chars[-1]:
            return partition.within_words
        found = cache.get(max_chars)
        if found is None:
            found = self.pack(ids[: int(np.searchsorted(chars, max_chars, side="right"))])
            found.flags.writeable = False
            cache[max_chars] = found
        return found

    def within_by_chars(self, partition: BytePartition) -> tuple[np.ndarray, np.ndarray]:
        """``(chars, ids)`` of ``partition``'s tokens made only of its set, ordered by how many
        characters each has (``[w]`` int64, ``[w]`` int32). Cached per partition."""
        found = partition.by_chars.get("within")
        if found is None:
            chars = self.char_counts(self.begins[partition.within], self.ends[partition.within])
            order = np.argsort(chars, kind="stable")
            found = partition.by_chars["within"] = (chars[order], self.token_ids[partition.within[order]])
        return found

    def text_partition(self, byte_set: np.ndarray) -> BytePartition:
        """:meth:`partition` of ``byte_set`` as text, with the character counts that
        :meth:`within_words_up_to` and :meth:`outside_text_shape` read already made (bounded
        strings and budgets need them). They take milliseconds over the whole vocabulary, so a
        backend builds them when it starts rather than in some request's fill."""
        partition = self.partition(byte_set, text=True)
        self.within_by_chars(partition)
        self.outside_text_shape(partition)
        return partition

    def outside_text_shape(self, partition: BytePartition) -> tuple[np.ndarray, np.ndarray]:
        """``(chars, tails)``, ``[m]`` int64 each, for ``partition``'s other tokens: how many
        characters precede each one's first byte outside the set, and how many bytes it has from
        that byte on. Cached per partition."""
        found = partition.by_chars.get("outside")
        if found is None:
            chars = self.char_counts(self.begins[partition.outside], partition.outside_begins)
            found = partition.by_chars["outside"] = (chars, self.ends[partition.outside] - partition.outside_begins)
            for array in found:
                array.flags.writeable = False
        return found

    def pack(self, token_ids: np.ndarray) -> np.ndarray:
        """A packed bitmask row with ``token_ids`` allowed. Returns ``[width]`` int32."""
        words = np.zeros(self.width, dtype=np.int32)
        walk.set_bits(words, np.asarray(token_ids, dtype=np.int32))
        return words


_INDEXES: OrderedDict[str, VocabIndex] = OrderedDict()
_INDEXES_LOCK = threading.Lock()


def vocab_index(info: TokenizerInfo) -> VocabIndex:
    """The :class:`VocabIndex` of ``info`` (built once per tokenizer fingerprint, a few kept)."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(info.fingerprint)
        if index is not None:
            _INDEXES.move_to_end(info.fingerprint)
            return index
    index = VocabIndex(info)
    with _INDEXES_LOCK:
        _INDEXES[info.fingerprint] = index
        while len(_INDEXES) > _CACHE_SIZE:
            _INDEXES.popitem(last=False)
    return index
