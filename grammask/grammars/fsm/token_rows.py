"""The token-level automaton: for a DFA state, which tokens may follow and where each one leads.

A state's :class:`TokenRow` is computed on first visit and cached, so a warm mask fill is a row
copy. Computing a row walks the vocabulary vectorised (see :func:`walk_tokens`); tokens made only
of bytes on which the state loops (the body of a JSON string, ``[a-z]*``) are answered at once from
a per-tokenizer cache and stay in the state ("context-independent" tokens).
"""

from __future__ import annotations

import sys
import threading
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from grammask.errors import CompileLimitError
from grammask.grammars.fsm.automaton import DEAD, INFINITE, UNKNOWN, LazyDfa
from grammask.grammars.fsm.expr import Expr
from grammask.grammars.fsm.vocab import VocabIndex

_BUDGET_CACHE_PER_ROW = 32


@dataclass(eq=False)
class TokenRow:
    """The allowed tokens of one state.

    Attributes:
        state: the DFA state.
        words: ``[width]`` int32 packed bitmask of allowed tokens (EOS included when accepting);
            read-only, possibly shared with equal rows.
        self_words: ``[width]`` int32 packed tokens that loop back to ``state`` by the shortcut, or ``None``.
        other_ids: ``[m]`` int32 sorted ids of the other allowed (non-EOS) tokens.
        other_next: ``[m]`` int32 the state each of ``other_ids`` leads to.
    """

    state: int
    words: np.ndarray
    self_words: np.ndarray | None
    other_ids: np.ndarray
    other_next: np.ndarray
    # Pure-Python views for the per-token path (accept_token): byte indexing and bisect beat numpy
    # scalar access by an order of magnitude.
    _bits: bytes = field(default=b"", repr=False)
    _ids: array = field(default_factory=lambda: array("i"), repr=False)
    _next: array = field(default_factory=lambda: array("i"), repr=False)
    _other_distance: np.ndarray | None = field(default=None, repr=False)
    _budget_words: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _max_distance: int | None = field(default=None, repr=False)

    @classmethod
    def build(cls, state: int, bits: bytes, self_words: np.ndarray | None, other_ids: np.ndarray, other_next: np.ndarray) -> "TokenRow":
        """A row from its packed bits (``bytes`` of the int32 words; bit ``j`` of byte ``b`` is token
        ``8 * b + j`` on the little-endian hosts numpy's packing here assumes) and sorted id/next arrays."""
        ids, following = array("i"), array("i")
        ids.frombytes(other_ids.astype(np.int32).tobytes())
        following.frombytes(other_next.astype(np.int32).tobytes())
        words = np.frombuffer(bits, dtype=np.int32)
        return cls(state, words, self_words, np.frombuffer(ids, np.int32), np.frombuffer(following, np.int32), bits, ids, following)

    def allows(self, token_id: int) -> bool:
        """Whether ``token_id`` (any id, EOS included) is in :attr:`words`."""
        return (self._bits[token_id >> 3] >> (token_id & 7)) & 1 == 1

    def next_state(self, token_id: int) -> int:
        """Where an allowed, non-EOS ``token_id`` leads."""
        ids = self._ids
        index = bisect_left(ids, token_id)
        if index < len(ids) and ids[index] == token_id:
            return self._next[index]
        return self.state

    def other_distances(self, dfa: LazyDfa) -> np.ndarray:
        """``[m]`` int64 distance to acceptance of each ``other_next`` (computed once)."""
        if self._other_distance is None:
            self._other_distance = per_state(self.other_next, dfa.distance, np.int64)
        return self._other_distance

    def budget_words(self, dfa: LazyDfa, limit: int) -> np.ndarray:
        """The row restricted to tokens whose next state is at most ``limit`` bytes from acceptance
        (EOS kept as in :attr:`words`). ``[width]`` int32, read-only."""
        cached = self._budget_words.get(limit)
        if cached is not None:
            return cached
        words = self.words.copy()
        if self.self_words is not None and dfa.distance(self.state) > limit:
            words &= ~self.self_words
        far = self.other_ids[self.other_distances(dfa) > limit].astype(np.int64)
        if len(far):
            bits = (np.int64(1) << (far & 31)).astype(np.uint32).view(np.int32)
            np.bitwise_and.at(words, far >> 5, ~bits)
        words.flags.writeable = False
        if len(self._budget_words) < _BUDGET_CACHE_PER_ROW:
            self._budget_words[limit] = words
        return words

    def max_distance(self, dfa: LazyDfa) -> int:
        """The largest distance to acceptance over every non-EOS allowed token's next state (cached)."""
        if self._max_distance is None:
            distances = self.other_distances(dfa)
            best = int(distances.max()) if len(distances) else -1
            if self.self_words is not None:
                best = max(best, dfa.distance(self.state))
            self._max_distance = best
        return self._max_distance

    @property
    def nbytes(self) -> int:
        return self.words.nbytes + self.other_ids.nbytes + self.other_next.nbytes


SHORTCUT_MIN_TOKENS = 2048
"""Mid-walk self-loop shortcuts are tried while at least this many tokens are still walking."""


def walk_tokens(dfa: LazyDfa, vocab: VocabIndex, state: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run every token at ``positions`` (indices into the sorted vocabulary, ascending) from ``state``.

    Step ``k`` gathers the transition on byte ``k`` of every still-live token longer than ``k``;
    missing transition rows are materialised for the few distinct states that need them; dead
    tokens are dropped; tokens that end at step ``k`` are set aside. While many tokens are still
    walking, a token sitting in a state that loops on every one of its remaining bytes is finished
    at once (see :meth:`VocabIndex.suffix_start`).

    Returns:
        ``(positions, states)``: ``[r]`` int64 positions of the tokens that survive, and ``[r]`` int32 the
        state each one ends in (never ``DEAD``).
    """
    current = np.full(len(positions), state, dtype=np.int32)
    done_positions, done_states = [], []
    for k, column in enumerate(vocab.columns):
        if not len(positions):
            break
        active = int(np.searchsorted(positions, vocab.counts[k]))  # tokens longer than k come first
        if active < len(positions):
            done_positions.append(positions[active:])
            done_states.append(current[active:])
            positions, current = positions[:active], current[:active]
        byte = column[positions]
        if k == 0:  # every token is still at ``state``: a 256-entry lookup
            following = dfa.row(state)[byte]
        else:
            if len(positions) >= SHORTCUT_MIN_TOKENS:
                positions, current, byte = _finish_looping(dfa, vocab, k, positions, current, byte, done_positions, done_states)
            flat_index = current * 256 + byte
            following = dfa.table.reshape(-1)[flat_index]
            missing = following == UNKNOWN
            if missing.any():
                dfa.materialise_pairs(current[missing], byte[missing])
                following[missing] = dfa.table.reshape(-1)[flat_index[missing]]
        alive = following != DEAD
        positions, current = positions[alive], following[alive]
    done_positions.append(positions)
    done_states.append(current)
    return np.concatenate(done_positions), np.concatenate(done_states)


def _distinct(states: np.ndarray) -> np.ndarray:
    """The distinct values of ``states`` (small non-negative ints), ascending. O(n + max)."""
    return np.flatnonzero(np.bincount(states))


def per_state(states: np.ndarray, function, dtype) -> np.ndarray:
    """``function(s)`` for each entry of ``states``, calling it once per distinct state."""
    if not len(states):
        return np.zeros(0, dtype=dtype)
    distinct = _distinct(states)
    table = np.zeros(int(distinct[-1]) + 1, dtype=dtype)
    table[distinct] = [function(int(s)) for s in distinct]
    return table[states]


def _finish_looping(dfa, vocab, k, positions, current, byte, done_positions, done_states):
    """Set aside the tokens whose remaining bytes (from ``k``) all loop on their current state."""
    distinct = _distinct(current)
    keep = None
    for state in distinct:
        loop = dfa.self_loop_bytes(int(state))
        if not loop.any():
            continue
        finished = vocab.ends_within(loop, positions, k)
        if len(distinct) > 1:
            finished &= current == state
        if finished.any():
            done_positions.append(positions[finished])
            done_states.append(current[finished])
            keep = ~finished if keep is None else keep & ~finished
    if keep is None:
        return positions, current, byte
    return positions[keep], current[keep], byte[keep]


CHAIN_MIN_BYTES = 16
"""A chain is followed only for a byte set at least this large (smaller ones cover few tokens)."""


def follow_chain(dfa: LazyDfa, vocab: VocabIndex, state: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Answer at once the tokens made only of bytes of one chain from ``state``.

    The chain's byte set is the largest set of bytes that lead from ``state`` to one live-looking
    state other than itself (in a length-bounded string: the plain characters, each moving the
    count on by one). While every byte of the set leads each chain state to one next state, a
    token of ``m`` such bytes ends in the chain's ``m``-th state, whatever its bytes: one lookup
    per token instead of a walk. Tokens longer than the chain holds are left to the walk.

    Args:
        positions: ``[n]`` int64 ascending indices into the sorted vocabulary, the tokens to answer.

    Returns:
        ``(rest, chained, finals)``: ``[n - c]`` int64 positions left to walk, ``[c]`` int64 positions
        answered, and ``[c]`` int32 the state each of those ends in (never ``DEAD``).
    """
    none = positions[:0]
    if state == DEAD or not len(positions):
        return positions, none, none.astype(np.int32)
    row = dfa.row(state)
    targets, sizes = np.unique(row, return_counts=True)
    useful = (targets != DEAD) & (targets != state) & (sizes >= CHAIN_MIN_BYTES)
    if not useful.any():
        return positions, none, none.astype(np.int32)
    target = int(targets[useful][np.argmax(sizes[useful])])
    byte_set = row == target
    if (dfa.row(target)[byte_set] == target).all():
        return positions, none, none.astype(np.int32)  # a loop after one byte: the walk's shortcut takes it
    inside = vocab.tokens_within(byte_set)[0][positions]
    lengths = vocab.lengths[positions[inside]]
    chain = [state, target]  # chain[m]: the state after m bytes of the set
    while len(chain) <= int(lengths.max()) and chain[-1] != DEAD:
        following = dfa.row(chain[-1])[byte_set]
        if (following != following[0]).any():
            break  # the set splits here: longer tokens are walked
        chain.append(int(following[0]))
    answered = inside.copy()
    answered[inside] = lengths < len(chain)
    finals = np.asarray(chain, dtype=np.int32)[vocab.lengths[positions[answered]]]
    alive = finals != DEAD
    return positions[~answered], positions[answered][alive], finals[alive]


class TokenAutomaton:
    """A lazy DFA plus its cached token rows, shared by every matcher of one compiled grammar.

    Thread-safe: row computation is serialised by a lock; reading a computed row takes no lock.

    Args:
        expr: the language.
        vocab: the tokenizer's :class:`VocabIndex`.
        max_states: cap on DFA states (``CompileLimitError('max_states')``).
        max_row_bytes: cap on the memory of cached rows (``CompileLimitError('memory_bytes')``).
    """

    def __init__(self, expr: Expr, vocab: VocabIndex, *, max_states: int = 50_000, max_row_bytes: int = 512 << 20) -> None:
        self.dfa = LazyDfa(expr, max_states=max_states)
        self.vocab = vocab
        self.max_row_bytes = max_row_bytes
        self._rows: dict[int, TokenRow] = {}
        self._dedup: dict[bytes, bytes] = {}
        self._row_bytes = 0
        self._lock = threading.Lock()
        self._eos_words = vocab.pack(vocab.eos_ids)

    @property
    def row_bytes(self) -> int:
        """Memory held by cached rows, in bytes."""
        return self._row_bytes

    def cached_row(self, state: int) -> TokenRow | None:
        """The row of ``state`` if already computed (no lock, no work)."""
        return self._rows.get(state)

    def row(self, state: int) -> TokenRow:
        """The :class:`TokenRow` of ``state`` (computed on first visit)."""
        row = self._rows.get(state)
        if row is not None:
            return row
        with self._lock:
            row = self._rows.get(state)
            if row is None:
                try:
                    row = self._compute(state)
                except RecursionError:
                    raise CompileLimitError(
                        "max_depth", "Python's recursion limit", sys.getrecursionlimit(), "the expression is nested too deeply"
                    ) from None
                self._rows[state] = row
        return row

    def _compute(self, state: int) -> TokenRow:
        dfa, vocab = self.dfa, self.vocab
        words = np.zeros(vocab.width, dtype=np.int32)
        self_words = None
        skip = None
        if state != DEAD:
            loop = dfa.self_loop_bytes(state)
            if loop.any() and dfa.is_live(state):
                skip, self_words = vocab.tokens_within(loop)
                words |= self_words
        positions = np.arange(len(vocab), dtype=np.int64) if skip is None else np.flatnonzero(~skip)
        if state == DEAD:
            positions = positions[:0]
        positions, chained, chain_finals = follow_chain(dfa, vocab, state, positions)
        positions, finals = walk_tokens(dfa, vocab, state, positions)
        positions, finals = np.concatenate([chained, positions]), np.concatenate([chain_finals, finals])
        if dfa.may_have_dead_states and len(finals):
            keep = per_state(finals, dfa.is_live, bool)
            positions, finals = positions[keep], finals[keep]
        next_of = np.full(vocab.vocab_size, DEAD, dtype=np.int32)  # a scatter sorts by id in O(V)
        next_of[vocab.token_ids[positions]] = finals
        other_ids = np.flatnonzero(next_of != DEAD).astype(np.int32)
        other_next = next_of[other_ids]
        words |= vocab.pack(other_ids)
        if dfa.accepting[state]:
            words |= self._eos_words
        row = TokenRow.build(state, self._deduplicate(words), self_words, other_ids, other_next)
        self._account(row)
        return row

    def _deduplicate(self, words: np.ndarray) -> bytes:
        """The packed row as ``bytes``, shared with every equal row seen before."""
        key = words.tobytes()
        shared = self._dedup.setdefault(key, key)
        if shared is key:
            self._row_bytes += len(key)
        return shared

    def _account(self, row: TokenRow) -> None:
        self._row_bytes += row.other_ids.nbytes + row.other_next.nbytes
        if self._row_bytes > self.max_row_bytes:
            raise CompileLimitError("memory_bytes", self._row_bytes, self.max_row_bytes, "cached token rows")

    def distance(self, state: int) -> int:
        """Fewest bytes from ``state`` to acceptance (:data:`~grammask.grammars.fsm.automaton.INFINITE` if none)."""
        return self.dfa.distance(state)


__all__ = ["INFINITE", "TokenAutomaton", "TokenRow", "follow_chain", "walk_tokens"]
