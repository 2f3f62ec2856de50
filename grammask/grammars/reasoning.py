"""A reasoning model's think section, then a structure: :class:`~grammask.grammars.spec.Reasoning`
compiled around any compiled grammar.

The section is not part of the inner grammar: a :class:`ReasoningMatcher` keeps the phase (opening
token, free thinking, the gap of newlines after the end token, content) and hands tokens to the
inner matcher only once the content starts, so the inner grammar keeps its own backend (``fsm`` for
JSON Schemas, with its exactness) and its mid-request fallback.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from grammask.checks import as_int
from grammask.errors import InvalidParameterError
from grammask.grammars.base import CompiledGrammar, Matcher
from grammask.grammars.spec import Reasoning
from grammask.masking.bitmask import bitmask_width, bool_to_bitmask, host_row
from grammask.tokenizer import TokenizerInfo

__all__ = ["ReasoningGrammar", "ReasoningMatcher", "compile_reasoning"]

_GAP_BYTES = frozenset(b" \n")


class Phase(enum.IntEnum):
    OPEN = 0  # before the start token (the output must open the section)
    THINK = 1  # inside the section
    GAP = 2  # after the end token, before the content's first token
    CONTENT = 3


@dataclass(frozen=True, eq=False)
class _Rows:
    """Packed rows (``(words,)`` int32 NumPy arrays) shared by every matcher of a grammar."""

    open: np.ndarray
    think: np.ndarray
    gap: tuple[np.ndarray, ...]  # gap[k]: newline / space tokens of at most k characters
    gap_lengths: dict[int, int]  # token id -> characters, for tokens made only of newlines and spaces


def _rows(info: TokenizerInfo, start_id: int, end_id: int, max_gap: int) -> _Rows:
    size = info.vocab_size
    ordinary = torch.zeros(size, dtype=torch.bool)
    ordinary[: info.real_vocab_size] = True
    ordinary[sorted(info.special_ids)] = False
    ordinary[list(info.eos_ids)] = False
    think = ordinary.clone()
    think[end_id] = True
    opening = torch.zeros(size, dtype=torch.bool)
    if start_id >= 0:
        opening[start_id] = True
    gap_lengths = {
        i: len(data)
        for i, data in enumerate(info.token_bytes[: info.real_vocab_size])
        if data and len(data) <= max_gap and not info.is_special(i) and set(data) <= _GAP_BYTES
    }
    gap = []
    for bound in range(max_gap + 1):
        allowed = torch.zeros(size, dtype=torch.bool)
        allowed[[i for i, n in gap_lengths.items() if n <= bound]] = True
        gap.append(bool_to_bitmask(allowed).numpy())
    return _Rows(bool_to_bitmask(opening).numpy(), bool_to_bitmask(think).numpy(), tuple(gap), gap_lengths)


def _single_token(info: TokenizerInfo, text: str, name: str) -> int:
    token = info.token_id(text)
    if token is None:
        raise InvalidParameterError(f"Reasoning.{name}", text, "the text of a single token of this tokenizer")
    return token


def compile_reasoning(spec: Reasoning, inner: CompiledGrammar) -> "ReasoningGrammar":
    """Wrap ``inner`` (``spec.content`` compiled) in ``spec``'s think section."""
    info = inner.tokenizer_info
    start_id = -1 if spec.started else _single_token(info, spec.start, "start")  # a started section has no opening
    end_id = _single_token(info, spec.end, "end")
    return ReasoningGrammar(
        spec=spec,
        tokenizer_info=info,
        backend=inner.backend,
        unenforced=inner.unenforced,
        narrowed=inner.narrowed,
        choice=f"a think section, then: {inner.choice}" if inner.choice else "a think section",
        compile_seconds=inner.compile_seconds,
        inner=inner,
        start_id=start_id,
        end_id=end_id,
        rows=_rows(info, start_id, end_id, spec.max_gap),
    )


@dataclass(frozen=True, eq=False)
class ReasoningGrammar(CompiledGrammar):
    """A think section followed by ``inner``'s language. Its ``unenforced`` / ``narrowed`` are the inner grammar's."""

    inner: CompiledGrammar | None = None
    start_id: int = -1
    end_id: int = -1
    rows: _Rows | None = field(default=None, repr=False)

    def matcher(self, *, max_tokens: int | None = None) -> "ReasoningMatcher":
        """A fresh matcher (``max_tokens`` is checked but ignored: the section's length is not bounded here)."""
        if max_tokens is not None:
            as_int("max_tokens", max_tokens, low=1)
        return ReasoningMatcher(self)

    @property
    def memory_bytes(self) -> int:
        """The inner grammar's, and the section's rows."""
        rows = 0 if self.rows is None else self.rows.open.nbytes + self.rows.think.nbytes + sum(g.nbytes for g in self.rows.gap)
        return self.inner.memory_bytes + rows


class _Step(NamedTuple):
    """What one accepted token changed, for :meth:`ReasoningMatcher.rollback`."""

    phase: Phase  # the phase before the token
    gap_left: int  # the gap budget before the token
    to_inner: bool  # whether the inner matcher accepted it


class ReasoningMatcher(Matcher):
    """One request's place in a :class:`ReasoningGrammar`."""

    def __init__(self, grammar: ReasoningGrammar, inner: Matcher | None = None) -> None:
        assert grammar.inner is not None and grammar.rows is not None  # built by compile_reasoning
        self._grammar = grammar
        self._rows = grammar.rows
        self._info = grammar.tokenizer_info
        self._inner = inner if inner is not None else grammar.inner.matcher()
        self._history: list[_Step] = []
        self._phase = Phase.THINK if grammar.spec.started else Phase.OPEN
        self._gap_left = 0

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def content_offset(self) -> int | None:
        """How many accepted tokens precede the content (opening, thinking, end, gap), or ``None``
        before the content has started."""
        for position, step in enumerate(self._history):
            if step.to_inner:
                return position
        return None

    @property
    def end_token_id(self) -> int:
        return self._grammar.end_id

    @property
    def num_accepted(self) -> int:
        return len(self._history)

    def accept_token(self, token_id: int) -> bool:
        token_id = as_int("token_id", token_id)
        before = _Step(self._phase, self._gap_left, False)
        if self._phase is Phase.OPEN:
            if token_id != self._grammar.start_id:
                return False
            self._phase = Phase.THINK
        elif self._phase is Phase.THINK:
            if token_id == self._grammar.end_id:
                self._phase, self._gap_left = Phase.GAP, self._grammar.spec.max_gap
            elif not self._is_ordinary(token_id):
                return False
        elif self._inner.accept_token(token_id):
            self._phase = Phase.CONTENT
            before = before._replace(to_inner=True)
        elif self._phase is Phase.GAP and self._rows.gap_lengths.get(token_id, self._gap_left + 1) <= self._gap_left:
            self._gap_left -= self._rows.gap_lengths[token_id]
        else:
            return False
        self._history.append(before)
        return True

    def _is_ordinary(self, token_id: int) -> bool:
        return 0 <= token_id < self._info.real_vocab_size and not self._info.is_special(token_id) and token_id not in self._info.eos_ids

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        target = host_row(bitmask, row, bitmask_width(self._info.vocab_size))
        if self._phase is Phase.OPEN:
            target[:] = self._rows.open
        elif self._phase is Phase.THINK:
            target[:] = self._rows.think
        else:
            self._inner.fill_next_token_bitmask(bitmask, row)
            if self._phase is Phase.GAP and self._gap_left:
                target |= self._rows.gap[self._gap_left]

    def rollback(self, num_tokens: int = 1) -> None:
        num_tokens = as_int("num_tokens", num_tokens)
        if not 0 <= num_tokens <= len(self._history):
            raise InvalidParameterError("num_tokens", num_tokens, f"0 <= num_tokens <= {len(self._history)} (tokens accepted)")
        inner_steps = 0
        for _ in range(num_tokens):
            step = self._history.pop()
            inner_steps += step.to_inner
            self._phase, self._gap_left = step.phase, step.gap_left
        if inner_steps:
            self._inner.rollback(inner_steps)

    def is_terminated(self) -> bool:
        return self._phase is Phase.CONTENT and self._inner.is_terminated()

    def reset(self) -> None:
        self._inner.reset()
        self._history.clear()
        self._phase = Phase.THINK if self._grammar.spec.started else Phase.OPEN
        self._gap_left = 0

    def jump_forward_string(self) -> str:
        """The inner grammar's forced text once the content has started; ``""`` before (free text)."""
        return self._inner.jump_forward_string() if self._phase is Phase.CONTENT else ""

    def fork(self) -> "ReasoningMatcher":
        copy = ReasoningMatcher(self._grammar, self._inner.fork())
        copy._history = list(self._history)
        copy._phase, copy._gap_left = self._phase, self._gap_left
        return copy
