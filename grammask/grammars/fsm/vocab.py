"""The tokenizer's vocabulary in the shape the token-row walk needs (built once per tokenizer).

Ordinary tokens (not special, not empty, below ``real_vocab_size``) are sorted by byte length,
longest first, and stored column by column: ``columns[k]`` holds byte ``k`` of every token longer
than ``k`` (a prefix of the sorted order, ``counts[k]`` long). Walking all tokens ``k`` bytes deep
is then one gather per column over a shrinking prefix.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from grammask.masking.bitmask import bitmask_width
from grammask.tokenizer import TokenizerInfo

_CACHE_SIZE = 4


class VocabIndex:
    """Ordinary tokens of one tokenizer, sorted longest first, plus derived per-byte-set answers.

    Attributes:
        token_ids: ``[n]`` int32, ordinary token ids, longest first.
        lengths: ``[n]`` int32, their byte lengths (non-increasing).
        columns: ``columns[k]`` is ``[counts[k]]`` uint8: byte ``k`` of the ``counts[k]`` tokens longer than ``k``.
        counts: ``[max_len + 1]`` int64, ``counts[k]`` = how many tokens are longer than ``k``.
        vocab_size, width: logits width and ``ceil(vocab_size / 32)`` bitmask words.
        eos_ids: ``[e]`` int32.
        has_every_byte: every single byte is an ordinary token (budget-aware closing relies on it).
    """

    def __init__(self, info: TokenizerInfo) -> None:
        ordinary = [i for i in range(info.real_vocab_size) if info.token_bytes[i] and not info.is_special(i)]
        lengths = np.array([len(info.token_bytes[i]) for i in ordinary], dtype=np.int32)
        order = np.argsort(-lengths, kind="stable")
        self.token_ids = np.asarray(ordinary, dtype=np.int32)[order]
        self.lengths = lengths[order]
        max_len = int(self.lengths[0]) if len(self.lengths) else 0
        self.counts = np.array([int(np.count_nonzero(self.lengths > k)) for k in range(max_len + 1)], dtype=np.int64)
        padded = np.zeros((len(self.token_ids), max_len), dtype=np.uint8)
        for row, token in enumerate(self.token_ids):
            data = info.token_bytes[token]
            padded[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.columns = [np.ascontiguousarray(padded[: self.counts[k], k]) for k in range(max_len)]
        # The same bytes laid end to end (token after token), with each byte's offset + 1 in its token.
        self._flat_bytes = padded[np.arange(max_len) < self.lengths[:, None]]
        self._token_starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self._flat_offsets_plus_one = (np.arange(len(self._flat_bytes)) - np.repeat(self._token_starts, self.lengths) + 1).astype(np.int32)
        self.vocab_size = info.vocab_size
        self.width = bitmask_width(info.vocab_size)
        self.eos_ids = np.asarray(info.eos_ids, dtype=np.int32)
        singles = {info.token_bytes[i] for i in ordinary if len(info.token_bytes[i]) == 1}
        self.has_every_byte = len(singles) == 256
        self._within: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.token_ids)

    def tokens_within(self, byte_set: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tokens that consist only of bytes in ``byte_set`` (``[256]`` bool).

        Returns:
            ``([n] bool over the sorted token order, [width] int32 packed row of those tokens)``, both
            read-only. Cached per byte set: a state that loops on a byte class (the body of a JSON
            string) answers for all such tokens with this one lookup.
        """
        return self._byte_set_answers(byte_set)[:2]

    def suffix_start(self, byte_set: np.ndarray) -> np.ndarray:
        """``[n]`` int32 over the sorted order: the smallest ``k`` such that every byte of the token
        from ``k`` on is in ``byte_set`` (``[256]`` bool); the token's length if its last byte is not.
        Cached per byte set."""
        return self._byte_set_answers(byte_set)[2]

    def ends_within(self, byte_set: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
        """``[m]`` bool: whether every byte from offset ``k`` on of the tokens at ``positions`` (``[m]``
        int64, ascending) is in ``byte_set`` (``[256]`` bool). From the cached :meth:`suffix_start`
        when there is one or the tokens are many; otherwise column by column over just these tokens
        (a new byte set's whole-vocabulary answer costs milliseconds)."""
        if np.packbits(byte_set).tobytes() in self._within or 8 * len(positions) > len(self):
            return self.suffix_start(byte_set)[positions] <= k
        inside = np.ones(len(positions), dtype=bool)
        for column, count in zip(self.columns[k:], self.counts[k:]):
            longer = int(np.searchsorted(positions, count))  # tokens longer than this offset come first
            if not longer:
                break
            inside[:longer] &= byte_set[column[positions[:longer]]]
        return inside

    def _byte_set_answers(self, byte_set: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = np.packbits(byte_set).tobytes()
        cached = self._within.get(key)
        if cached is not None:
            return cached
        # Over all tokens' bytes laid end to end: a byte outside the set at offset k forces start > k.
        outside = ~byte_set[self._flat_bytes]
        start = np.zeros(len(self.token_ids), dtype=np.int32)
        if len(self._flat_bytes):
            start = np.maximum.reduceat(np.where(outside, self._flat_offsets_plus_one, 0), self._token_starts)
            start = start.astype(np.int32)
        inside = start == 0
        packed = self.pack(self.token_ids[inside])
        for array in (start, inside, packed):
            array.flags.writeable = False
        answers = (inside, packed, start)
        with self._lock:
            if len(self._within) > 1024:
                self._within.clear()
            self._within[key] = answers
        return answers

    def pack(self, token_ids: np.ndarray) -> np.ndarray:
        """A packed bitmask row with ``token_ids`` allowed. Returns ``[width]`` int32."""
        bits = np.zeros(self.width * 32, dtype=bool)
        bits[token_ids] = True
        return np.packbits(bits, bitorder="little").view("<i4").astype(np.int32, copy=False)


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
