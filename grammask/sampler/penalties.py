"""Penalty state with a lifecycle: built only for the rows that need it, counted incrementally each step,
filtered and merged with the batch (continuous batching).

Semantics (vLLM's, which OpenAI's API and transformers share):

- **repetition** (multiplicative, as in transformers' ``RepetitionPenaltyLogitsProcessor``): the logit of
  every token seen in the prompt *or* the output is divided by the penalty when positive and multiplied
  by it otherwise;
- **frequency / presence** (additive, OpenAI): ``logit -= frequency * count + presence * (count > 0)``,
  counting output tokens only;
- applied in that order, repetition first.

:class:`MinTokensBlock` blocks EOS (unless ``ignore_eos``) and the stop token ids while a request has
generated fewer than ``min_new_tokens`` tokens, without reading the counter on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from grammask.sampler.ops import FLOAT32_MAX, NEG_INF


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """``(rows, vocab)`` logits, ``(rows, vocab)`` bool seen-mask, ``(rows, 1)`` penalty → penalised logits (new).

    A finite logit stays finite (any positive penalty is allowed, so ``5 / 1e-35`` would overflow to
    ``+inf`` and ``-5 * 1e38`` to ``-inf``, excluding an allowed token); ``-inf`` (excluded) stays ``-inf``.
    """
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty).clamp_(-FLOAT32_MAX, FLOAT32_MAX)
    return torch.where(seen & (logits > NEG_INF), penalised, logits)


def apply_frequency_presence(
    logits: torch.Tensor, counts: torch.Tensor, frequency: torch.Tensor, presence: torch.Tensor
) -> torch.Tensor:
    """``logits - frequency * counts - presence * (counts > 0)``; counts ``(rows, vocab)`` float32, the rest ``(rows, 1)``."""
    return logits - counts * frequency - (counts > 0).to(logits.dtype) * presence


@dataclass
class PenaltyState:
    """Penalty parameters and incremental state of the rows that have penalties.

    The additive part is kept ready to subtract (``linear = frequency * counts + presence * (counts > 0)``,
    updated by one scatter per step, as SGLang's accumulated penalties), and the repetition penalty reads
    a maintained ``seen`` mask, so applying costs two or three passes over the covered rows.

    Attributes:
        rows: ``(p,)``, int64, the batch rows this state covers (ascending).
        repetition, frequency, presence: ``(p, 1)``, float32.
        counts: ``(p, vocab)``, float32, how often each token was generated (exact up to 2**24).
        seen: ``(p, vocab)``, bool, tokens of the prompt or the output (only maintained for repetition).
        linear: ``(p, vocab)``, float32, the additive penalty.
        has_repetition, has_linear: whether any covered row has a repetition / an additive penalty.
    """

    rows: torch.Tensor
    repetition: torch.Tensor
    frequency: torch.Tensor
    presence: torch.Tensor
    counts: torch.Tensor
    seen: torch.Tensor
    linear: torch.Tensor
    has_repetition: bool
    has_linear: bool

    @classmethod
    def build(
        cls,
        rows: Sequence[int],
        repetition: Sequence[float],
        frequency: Sequence[float],
        presence: Sequence[float],
        prompt_token_ids: Sequence[Sequence[int]],
        output_token_ids: Sequence[Sequence[int]],
        vocab_size: int,
        device: torch.device,
    ) -> "PenaltyState":
        """State for ``rows``; each other argument has one entry per row in ``rows``."""
        n = len(rows)
        column = lambda values: torch.tensor(values, dtype=torch.float32, device=device).reshape(n, 1)  # noqa: E731
        counts = torch.zeros(n, vocab_size, dtype=torch.float32, device=device)
        seen = torch.zeros(n, vocab_size, dtype=torch.bool, device=device)
        for i, (prompt, output) in enumerate(zip(prompt_token_ids, output_token_ids)):
            if prompt:
                seen[i, torch.tensor(list(prompt), dtype=torch.int64, device=device)] = True
            if output:
                ids = torch.tensor(list(output), dtype=torch.int64, device=device)
                counts[i].index_add_(0, ids, torch.ones(len(ids), device=device))
        frequency_t, presence_t = column(frequency), column(presence)
        return cls(
            rows=torch.tensor(list(rows), dtype=torch.int64, device=device),
            repetition=column(repetition),
            frequency=frequency_t,
            presence=presence_t,
            counts=counts,
            seen=seen | (counts > 0),
            linear=counts * frequency_t + (counts > 0).to(torch.float32) * presence_t,
            has_repetition=any(r != 1.0 for r in repetition),
            has_linear=any(f != 0.0 or p != 0.0 for f, p in zip(frequency, presence)),
        )

    def apply(self, logits: torch.Tensor) -> None:
        """Penalise the covered rows of ``logits`` ``(batch, vocab)``, float32, in place."""
        if self.rows.numel() == 0:
            return
        rows = logits[self.rows]
        if self.has_repetition:
            rows = apply_repetition_penalty(rows, self.seen, self.repetition)
        if self.has_linear:
            rows -= self.linear
        logits.index_copy_(0, self.rows, rows)

    def update(self, next_token_ids: torch.Tensor) -> None:
        """Count the tokens just generated; ``next_token_ids`` ``(batch,)`` int64, negative ids are skipped."""
        if self.rows.numel() == 0:
            return
        tokens = next_token_ids[self.rows]
        valid = (tokens >= 0).unsqueeze(1)
        at = tokens.clamp(min=0).unsqueeze(1)
        before = self.counts.gather(1, at)
        self.counts.scatter_add_(1, at, valid.to(torch.float32))
        first = (before == 0) & valid
        self.linear.scatter_add_(1, at, valid * self.frequency + first * self.presence)
        self.seen.scatter_(1, at, self.seen.gather(1, at) | valid)

    def select(self, positions: torch.Tensor, new_rows: torch.Tensor) -> "PenaltyState":
        """The state of entries ``positions`` (into this state), renumbered to batch rows ``new_rows``."""
        repetition, frequency, presence = self.repetition[positions], self.frequency[positions], self.presence[positions]
        return PenaltyState(
            rows=new_rows,
            repetition=repetition,
            frequency=frequency,
            presence=presence,
            counts=self.counts[positions],
            seen=self.seen[positions],
            linear=self.linear[positions],
            has_repetition=bool((repetition != 1.0).any()),
            has_linear=bool(((frequency != 0.0) | (presence != 0.0)).any()),
        )

    def concat(self, other: "PenaltyState", row_offset: int) -> "PenaltyState":
        """This state followed by ``other``, whose rows are shifted by ``row_offset``."""
        return PenaltyState(
            rows=torch.cat([self.rows, other.rows + row_offset]),
            repetition=torch.cat([self.repetition, other.repetition]),
            frequency=torch.cat([self.frequency, other.frequency]),
            presence=torch.cat([self.presence, other.presence]),
            counts=torch.cat([self.counts, other.counts]),
            seen=torch.cat([self.seen, other.seen]),
            linear=torch.cat([self.linear, other.linear]),
            has_repetition=self.has_repetition or other.has_repetition,
            has_linear=self.has_linear or other.has_linear,
        )


@dataclass
class MinTokensBlock:
    """Blocks stop tokens of rows still short of ``min_new_tokens``.

    Attributes:
        rows: ``(m,)``, int64, the batch rows with ``min_new_tokens > 0`` and something to block.
        min_new_tokens: ``(m,)``, int64.
        stop_ids: ``(m, s)``, int64, the ids to block per row, padded by repeating the row's first id.
    """

    rows: torch.Tensor
    min_new_tokens: torch.Tensor
    stop_ids: torch.Tensor

    @classmethod
    def build(
        cls, rows: Sequence[int], min_new_tokens: Sequence[int], stop_ids: Sequence[Sequence[int]], device: torch.device
    ) -> "MinTokensBlock":
        width = max((len(ids) for ids in stop_ids), default=0)
        padded = [list(ids) + [ids[0]] * (width - len(ids)) for ids in stop_ids]
        return cls(
            rows=torch.tensor(list(rows), dtype=torch.int64, device=device),
            min_new_tokens=torch.tensor(list(min_new_tokens), dtype=torch.int64, device=device),
            stop_ids=torch.tensor(padded, dtype=torch.int64, device=device).reshape(len(rows), width),
        )

    def apply(self, logits: torch.Tensor, output_len: torch.Tensor) -> None:
        """Set the stop ids of short rows to ``-inf`` in ``logits`` ``(batch, vocab)``; ``output_len`` ``(batch,)`` int64."""
        if self.rows.numel() == 0:
            return
        short = (output_len[self.rows] < self.min_new_tokens).unsqueeze(1)
        rows = self.rows.unsqueeze(1).expand_as(self.stop_ids)
        current = logits[rows, self.stop_ids]
        logits[rows, self.stop_ids] = torch.where(short, torch.full_like(current, NEG_INF), current)
