"""``FsmMatcher``: one request's cursor over a :class:`~grammask.grammars.fsm.pushdown.PushdownAutomaton`.

The state is a list of positions (one entry per accepted token), so rollback to any depth is a
pop. A warm mask fill writes the position's cached row (packed words, or a few ids) into the caller's bitmask.

Budget-aware closing (``max_tokens``): with ``R`` tokens of budget left (the EOS token counts), a
non-EOS token ``t`` is allowed only if ``n(next(t)) <= R - 2``, where ``n`` is the fewest tokens
known to finish (:meth:`~grammask.grammars.fsm.pushdown.PushdownAutomaton.token_distance`: a
completion with that many tokens exists); EOS needs ``R >= 1``. The invariant ``n(state) + 1 <= R``
holds after every step: the first token of the state's own witness completion is always allowed
and leads to a state at least one token closer, so the mask never runs empty and the output always
ends accepted within the budget. (Every byte being a token, checked per tokenizer, a completion can
always be cut into tokens.)
"""

from __future__ import annotations

import numpy as np
import torch

from grammask.errors import InvalidParameterError
from grammask.checks import as_int
from grammask.grammars.base import Matcher
from grammask.grammars.fsm import walk
from grammask.grammars.fsm.automaton import DEAD, INFINITE, START, read_only
from grammask.grammars.fsm.pushdown import PushdownAutomaton
from grammask.masking.bitmask import host_row

TERMINATED = -2
"""Stack entry pushed by an accepted EOS."""
_NOTHING = read_only(np.zeros(0, dtype=np.int32))
"""The held row that allows no token (after EOS, or with no budget left)."""


class FsmMatcher(Matcher):
    """A matcher over a grammar's shared pushdown automaton.

    Args:
        automaton: the compiled grammar's automaton (shared, thread-safe).
        max_tokens: the token budget including the final EOS, or ``None`` for no budget.

    Raises:
        InvalidParameterError: ``max_tokens`` is below the shortest completion plus EOS, or the
            vocabulary lacks some single-byte token (then budgets cannot be guaranteed).
    """

    def __init__(self, automaton: PushdownAutomaton, *, max_tokens: int | None = None) -> None:
        self._automaton = automaton
        self._eos_ids = frozenset(int(i) for i in automaton.vocab.eos_ids)
        self._max_tokens = max_tokens
        self._states: list[int] = [START]
        if max_tokens is not None:
            self._check_budget(max_tokens)

    def _check_budget(self, max_tokens: int) -> None:
        if not self._automaton.vocab.has_every_byte:
            raise InvalidParameterError(
                "max_tokens", max_tokens, "None: this tokenizer lacks some single-byte tokens, so budget-aware closing cannot be guaranteed"
            )
        distance = self._automaton.token_distance(START)
        if distance == INFINITE:
            return  # the grammar matches nothing: every mask is empty, whatever the budget
        needed = distance + 1
        if max_tokens < needed:
            raise InvalidParameterError("max_tokens", max_tokens, f"at least {needed} (the shortest valid output plus EOS)")

    # ------------------------------------------------------------------ queries

    @property
    def num_accepted(self) -> int:
        return len(self._states) - 1

    @property
    def state(self) -> int:
        """The current position (``-2`` once terminated)."""
        return self._states[-1]

    def is_terminated(self) -> bool:
        return self._states[-1] == TERMINATED

    def is_accepting(self) -> bool:
        """Whether the output so far is a complete match (EOS would be accepted)."""
        state = self._states[-1]
        return state != TERMINATED and bool(self._automaton.accepting[state]) and self._remaining() != 0

    def _remaining(self) -> int | None:
        return None if self._max_tokens is None else self._max_tokens - self.num_accepted

    def allowed_words(self) -> np.ndarray:
        """The packed mask of the current state. ``[ceil(vocab_size / 32)]`` int32, read-only."""
        states = self._states
        return walk.packed_row(self._row_at(states[-1], len(states) - 1), self._automaton.vocab.width)

    def _row_at(self, state: int, num_accepted: int) -> np.ndarray:
        """The mask after ``num_accepted`` tokens ending in ``state``, as the automaton holds it
        (packed words or a few ids: :meth:`PushdownAutomaton.held_row`): taken as arguments so a
        caller reads the list once, and a matcher shared by threads never mixes two positions."""
        automaton = self._automaton
        if state == TERMINATED:
            return _NOTHING
        if self._max_tokens is None:
            return automaton.held_row(state)
        remaining = self._max_tokens - num_accepted
        if remaining < 1:
            return _NOTHING
        return automaton.budget_row(state, remaining - 2)

    # ------------------------------------------------------------------ the protocol

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        automaton = self._automaton
        target = host_row(bitmask, row, automaton.vocab.width)
        states = self._states
        state = states[-1]
        if self._max_tokens is None and state != TERMINATED:
            automaton.fill(target, state)  # a held row (the warm path), or a first visit written from its stacks
        else:
            walk.fill_row(target, self._row_at(state, len(states) - 1))  # the position read above

    def accept_token(self, token_id: int) -> bool:
        token_id = as_int("token_id", token_id)
        states = self._states
        state = states[-1]
        num_accepted = len(states) - 1
        if state == TERMINATED:
            return False
        automaton = self._automaton
        if not 0 <= token_id < automaton.vocab.vocab_size:
            return False
        if self._max_tokens is None:
            allowed = automaton.allows(state, token_id)  # the row the mask shows, so the two always agree
        else:
            allowed = walk.row_has(self._row_at(state, num_accepted), automaton.vocab.width, token_id)
        if not allowed:
            return False
        if token_id in self._eos_ids:
            self._states.append(TERMINATED)
            return True
        following = automaton.advance(state, token_id)
        if following == DEAD:  # pragma: no cover - a row and its positions disagree
            raise RuntimeError(f"token {token_id} is in the mask of position {state} but cannot be read")
        self._states.append(following)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        num_tokens = as_int("num_tokens", num_tokens)
        if not 0 <= num_tokens <= self.num_accepted:
            raise InvalidParameterError("num_tokens", num_tokens, f"0 <= num_tokens <= {self.num_accepted} (tokens accepted)")
        if num_tokens:
            del self._states[-num_tokens:]

    def reset(self) -> None:
        del self._states[1:]

    def fork(self) -> "FsmMatcher":
        copy = FsmMatcher.__new__(FsmMatcher)
        copy._automaton = self._automaton
        copy._eos_ids = self._eos_ids
        copy._max_tokens = self._max_tokens
        copy._states = list(self._states)
        return copy

    def jump_forward_string(self) -> str:
        """The forced continuation: bytes while exactly one byte keeps the match alive and the state
        is not accepting, cut back to whole UTF-8 characters."""
        return _complete_utf8_prefix(self.jump_forward_bytes())

    def jump_forward_bytes(self) -> bytes:
        """Like :meth:`jump_forward_string`, as raw bytes (possibly ending inside a character)."""
        state = self._states[-1]
        if state == TERMINATED:
            return b""
        automaton = self._automaton
        out = bytearray()
        while not automaton.accepting[state] and len(out) < 1 << 16:
            following = automaton.forced_byte(state)
            if following is None:
                break
            byte, state = following
            out.append(byte)
        return bytes(out)


def _complete_utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is whole UTF-8 characters, decoded."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="ignore")


__all__ = ["FsmMatcher", "TERMINATED"]
