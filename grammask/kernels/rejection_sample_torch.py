"""Speculative decoding's per-position work, in plain torch (the CPU path and the Triton kernel's reference).

For every target row (one per draft position, plus the bonus position of each request) it masks the
target logits with the row's grammar bitmask, tempers them into the target distribution ``p``, masks
and renormalises the draft distribution ``q`` the same way, and returns:

- ``ratio``: ``p(x) / q(x)`` for the row's draft token ``x`` (``p(x)`` without draft probabilities,
  where the draft is a point mass; 0 where ``q(x) == 0`` or ``x`` is not allowed), which the
  acceptance test compares with a uniform;
- ``token``: for a greedy row the target argmax among allowed tokens; for a random draft row the
  *recovered* token, drawn from ``max(0, p - q)`` normalised (from ``p`` in the measure-zero case
  where that is all zero); for a random bonus row a draw from ``p``. Draws are Gumbel-max with the
  hashed noise of :mod:`grammask.kernels.gumbel_sample_torch` at the row's state, so a seeded request
  draws the same tokens in any batch. ``-1`` where the mask allows nothing.

``p`` is ``exp(s - max(s)) / sum(exp(s - max(s)))`` over allowed tokens with ``s = logits / temperature``;
the log of a residual is taken in float64 and rounded to float32, as the Triton kernel does.
"""

from __future__ import annotations

import torch

from grammask.kernels.apply_mask_torch import apply_mask_torch
from grammask.kernels.gumbel_sample_torch import gumbel_noise_torch

NEG_INF = float("-inf")


def rejection_rows_torch(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_index: torch.Tensor,
    draft_token: torch.Tensor,
    temperature: torch.Tensor,
    greedy: torch.Tensor,
    row_state: torch.Tensor,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per target row: the draft token's acceptance ratio and the row's token.

    Args:
        logits: ``(rows, vocab)``, float32, the target model's logits (not edited).
        bitmask: ``(rows, ceil(vocab / 32))``, int32, each row's grammar mask.
        draft_probs: ``(draft_rows, vocab)``, float32 draft probabilities (need not be normalised or
            masked), or ``None`` for drafts without probabilities (n-gram).
        draft_index: ``(rows,)``, int64, the row of ``draft_probs`` of each draft row, ``-1`` for bonus rows.
        draft_token: ``(rows,)``, int64, each draft row's draft token, ``-1`` for bonus rows.
        temperature: ``(rows,)``, float32, > 0 (1.0 for greedy rows).
        greedy: ``(rows,)``, bool.
        row_state: ``(rows,)``, int64, :func:`~grammask.kernels.gumbel_sample_torch.seeded_row_state`
            of the row's seed and output position.
        needed: ``(rows,)``, bool, the random rows whose token to draw (``None``: all). Drawing is most
            of the cost on CPU, and a request uses one random row (its first rejection or its bonus);
            an undrawn random row's token is ``-1``. Greedy rows are always given.

    Returns:
        ``ratio`` ``(rows,)`` float32 and ``token`` ``(rows,)`` int64, as the module docstring says.
    """
    rows, vocab = logits.shape
    allowed_marks = logits.new_zeros(logits.shape, dtype=torch.float32)
    apply_mask_torch(allowed_marks, bitmask, None)
    allowed = allowed_marks == 0  # the grammar's mask (a -inf logit, e.g. cut by top-k, stays allowed for q)
    raw = logits.to(torch.float32).masked_fill(~allowed, NEG_INF)
    scores = raw / temperature.unsqueeze(1)
    peak = scores.amax(dim=1, keepdim=True)
    nothing = peak.squeeze(1) == NEG_INF
    weights = torch.exp(scores - peak.masked_fill(nothing.unsqueeze(1), 0.0))
    p = weights / weights.sum(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    is_draft = draft_index >= 0
    x = draft_token.clamp(min=0).unsqueeze(1)
    px = p.gather(1, x).squeeze(1)
    if draft_probs is None:
        q = torch.zeros_like(p).scatter_(1, x, 1.0)
        ratio = px
    else:
        q = torch.zeros_like(p)
        q[is_draft] = draft_probs[draft_index[is_draft]].to(torch.float32)
        q = q.masked_fill(~allowed, 0.0)
        total = q.sum(dim=1, keepdim=True)
        q = torch.where(total > 0, q / total.clamp_min(torch.finfo(torch.float32).tiny), 0.0)
        qx = q.gather(1, x).squeeze(1)
        ratio = torch.where(qx > 0, px / qx.clamp_min(torch.finfo(torch.float32).tiny), 0.0)
    token = raw.argmax(dim=1)
    wanted = ~greedy & ~nothing if needed is None else ~greedy & ~nothing & needed
    token = token.masked_fill(~greedy, -1)
    sampled = wanted.nonzero().flatten()  # only these rows need noise (one host read, CPU path)
    if sampled.numel():
        residual = torch.where(is_draft[sampled].unsqueeze(1), (p[sampled] - q[sampled]).clamp_min(0.0), p[sampled])
        noise = gumbel_noise_torch(row_state[sampled], torch.arange(vocab, device=logits.device).expand(len(sampled), -1))
        drawn = _log_argmax(residual, noise)
        empty = (residual.amax(dim=1) <= 0).nonzero().flatten()  # p == q: the residual is all zero, draw from p
        if empty.numel():
            drawn[empty] = _log_argmax(p[sampled[empty]], noise[empty])
        token[sampled] = drawn
    return ratio.masked_fill(~is_draft | nothing, 0.0), token.masked_fill(nothing, -1)


def _log_argmax(weights: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``argmax(log(weights) + noise)`` per row (weights 0 are never chosen unless all are)."""
    logs = torch.log(weights.to(torch.float64)).to(torch.float32)
    return (logs + noise).argmax(dim=1)
