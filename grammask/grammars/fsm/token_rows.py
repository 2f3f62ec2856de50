"""The token-level automaton: for a DFA state, which tokens may follow and where each one leads.

A state's :class:`TokenRow` is computed on first visit and cached, so a warm mask fill is a row
copy. Computing a row walks the vocabulary vectorised (see :func:`walk_tokens`); tokens made only
of bytes on which the state loops (the body of a JSON string, ``[a-z]*``) are answered at once from
a per-tokenizer cache and stay in the state ("context-independent" tokens).
"""

from __future__ import annotations

import threading
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
    _other_distance: np.ndarray | None = field(default=None, repr=False)
    _budget_words: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def allows(self, token_id: int) -> bool:
        return bool((int(self.words[token_id >> 5]) >> (token_id & 31)) & 1)

    def next_state(self, token_id: int) -> int:
        """Where an allowed, non-EOS ``token_id`` leads."""
        index = int(np.searchsorted(self.other_ids, token_id))
        if index < len(self.other_ids) and self.other_ids[index] == token_id:
            return int(self.other_next[index])
        return self.state

    def other_distances(self, dfa: LazyDfa) -> np.ndarray:
        """``[m]`` int64 distance to acceptance of each ``other_next`` (computed once)."""
        if self._other_distance is None:
            unique, inverse = np.unique(self.other_next, return_inverse=True)
            per_state = np.array([dfa.distance(int(s)) for s in unique], dtype=np.int64)
            self._other_distance = per_state[inverse.reshape(-1)] if len(unique) else np.zeros(0, np.int64)
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
        """The largest distance to acceptance over every non-EOS allowed token's next state."""
        distances = self.other_distances(dfa)
        best = int(distances.max()) if len(distances) else -1
        if self.self_words is not None:
            best = max(best, dfa.distance(self.state))
        return best

    @property
    def nbytes(self) -> int:
        return self.words.nbytes + self.other_ids.nbytes + self.other_next.nbytes


def walk_tokens(dfa: LazyDfa, vocab: VocabIndex, state: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run every token at ``positions`` (indices into the sorted vocabulary, ascending) from ``state``.

    Step ``k`` gathers the transition on byte ``k`` of every still-live token longer than ``k``;
    missing transition rows are materialised for the few distinct states that need them; dead
    tokens are dropped; tokens that end at step ``k`` are set aside.

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
        following = dfa.table[current, byte]
        missing = following == UNKNOWN
        if missing.any():
            dfa.materialise(np.unique(current[missing]))
            following[missing] = dfa.table[current[missing], byte[missing]]
        alive = following != DEAD
        positions, current = positions[alive], following[alive]
    done_positions.append(positions)
    done_states.append(current)
    return np.concatenate(done_positions), np.concatenate(done_states)


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
        self._dedup: dict[bytes, np.ndarray] = {}
        self._row_bytes = 0
        self._lock = threading.Lock()
        self._eos_words = vocab.pack(vocab.eos_ids)

    @property
    def row_bytes(self) -> int:
        """Memory held by cached rows, in bytes."""
        return self._row_bytes

    def row(self, state: int) -> TokenRow:
        """The :class:`TokenRow` of ``state`` (computed on first visit)."""
        row = self._rows.get(state)
        if row is not None:
            return row
        with self._lock:
            row = self._rows.get(state)
            if row is None:
                row = self._compute(state)
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
        positions, finals = walk_tokens(dfa, vocab, state, positions)
        if dfa.may_have_dead_states and len(finals):
            unique, inverse = np.unique(finals, return_inverse=True)
            live = np.array([dfa.is_live(int(s)) for s in unique], dtype=bool)
            keep = live[inverse.reshape(-1)]
            positions, finals = positions[keep], finals[keep]
        ids = vocab.token_ids[positions]
        order = np.argsort(ids)
        other_ids, other_next = ids[order].astype(np.int32), finals[order].astype(np.int32)
        words |= vocab.pack(other_ids)
        if dfa.accepting[state]:
            words |= self._eos_words
        words = self._deduplicate(words)
        row = TokenRow(state, words, self_words, other_ids, other_next)
        self._account(row)
        return row

    def _deduplicate(self, words: np.ndarray) -> np.ndarray:
        key = words.tobytes()
        shared = self._dedup.get(key)
        if shared is not None:
            return shared
        words = np.frombuffer(key, dtype=np.int32)  # read-only, shares the key's memory
        self._dedup[key] = words
        self._row_bytes += words.nbytes
        return words

    def _account(self, row: TokenRow) -> None:
        self._row_bytes += row.other_ids.nbytes + row.other_next.nbytes
        if self._row_bytes > self.max_row_bytes:
            raise CompileLimitError("memory_bytes", self._row_bytes, self.max_row_bytes, "cached token rows")

    def distance(self, state: int) -> int:
        """Fewest bytes from ``state`` to acceptance (:data:`~grammask.grammars.fsm.automaton.INFINITE` if none)."""
        return self.dfa.distance(state)


__all__ = ["INFINITE", "TokenAutomaton", "TokenRow", "walk_tokens"]
