"""The dispatcher of speculative decoding's rejection sampling: one signature, one implementation per file.

:func:`rejection_rows` does the per-position work (mask, temperature, acceptance ratio, recovered /
bonus / greedy token): ``impl="auto"`` takes the Triton kernel for CUDA tensors when triton imports,
plain torch otherwise (:mod:`grammask.kernels.rejection_sample_torch` is the reference). The walk that
turns those rows into each request's output tokens (:func:`accept_walk`) is a few vectorised torch
ops shared by both, with no host read.
"""

from __future__ import annotations

import enum
import functools
from types import ModuleType

import torch

from grammask.errors import InvalidParameterError
from grammask.kernels.gumbel_sample_torch import MASK32, hash_tokens
from grammask.kernels.rejection_sample_torch import rejection_rows_torch

__all__ = ["RejectionImpl", "UNIFORM_KEY", "accept_walk", "accepted_counts", "acceptance_uniform", "rejection_rows", "resolve_impl"]

UNIFORM_KEY = MASK32
"""The token id hashed for a position's acceptance uniform (no vocabulary reaches 2**32 - 1 tokens, so it
never shares a key with the noise of a token)."""


class RejectionImpl(str, enum.Enum):
    AUTO = "auto"
    TORCH = "torch"
    TRITON = "triton"


@functools.lru_cache(maxsize=1)
def _triton_module() -> ModuleType | None:
    try:
        from grammask.kernels import rejection_sample_triton
    except ImportError:
        return None
    return rejection_sample_triton


def resolve_impl(impl: str | RejectionImpl, device: torch.device) -> RejectionImpl:
    """The implementation ``impl`` names for tensors on ``device``."""
    try:
        choice = RejectionImpl(impl)
    except ValueError:
        raise InvalidParameterError("impl", impl, "'auto', 'torch' or 'triton'") from None
    if choice is RejectionImpl.AUTO:
        return RejectionImpl.TRITON if device.type == "cuda" and _triton_module() is not None else RejectionImpl.TORCH
    if choice is RejectionImpl.TRITON and _triton_module() is None:
        raise ImportError("impl='triton' needs the 'triton' package: pip install triton")
    return choice


def rejection_rows(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_index: torch.Tensor,
    draft_token: torch.Tensor,
    temperature: torch.Tensor,
    greedy: torch.Tensor,
    row_state: torch.Tensor,
    *,
    needed: torch.Tensor | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per target row, the draft token's acceptance ratio ``p(x) / q(x)`` and the row's token; arguments
    and results as :func:`~grammask.kernels.rejection_sample_torch.rejection_rows_torch` (``needed`` is
    honoured by the torch path; the Triton kernel draws every row, in parallel)."""
    args = (logits, bitmask, draft_probs, draft_index, draft_token, temperature, greedy, row_state)
    if resolve_impl(impl, logits.device) is RejectionImpl.TRITON:
        return _triton_module().rejection_rows_triton(*args)
    return rejection_rows_torch(*args, needed=needed)


def acceptance_uniform(row_state: torch.Tensor) -> torch.Tensor:
    """Each row's acceptance uniform in (0, 1), float64: the hash of (row state, :data:`UNIFORM_KEY`)."""
    hashed = hash_tokens(row_state, torch.full_like(row_state, UNIFORM_KEY).unsqueeze(1)).squeeze(1)
    return (hashed.to(torch.float64) + 0.5) * 2.0**-32


def accepted_counts(
    ratio: torch.Tensor, token: torch.Tensor, uniform: torch.Tensor, greedy: torch.Tensor,
    draft_token: torch.Tensor, row_of: torch.Tensor,
) -> torch.Tensor:
    """``(requests,)`` int64: how many leading drafts each request accepts (arguments as :func:`accept_walk`;
    only greedy rows read ``token``)."""
    safe = row_of.clamp(min=0)
    draft = draft_token[safe]
    is_draft = (row_of >= 0) & (draft >= 0)
    accepted = torch.where(greedy[safe], draft == token[safe], ratio[safe].to(torch.float64) >= uniform[safe])
    return torch.cumprod((accepted & is_draft).to(torch.int64), dim=1).sum(dim=1)


def accept_walk(
    ratio: torch.Tensor,
    token: torch.Tensor,
    uniform: torch.Tensor,
    greedy: torch.Tensor,
    draft_token: torch.Tensor,
    row_of: torch.Tensor,
    max_drafts: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request's output: its accepted drafts, then the token of its first rejected position (the
    recovered token) or, when every draft was accepted, of its bonus position.

    A random row accepts draft ``x`` when ``p(x) / q(x) >= u`` (vLLM's test; ``q(x) = 0`` rejects); a
    greedy row when ``x`` is the target argmax. A position whose mask allows nothing ends the output.

    Args:
        ratio, token: ``(rows,)`` from :func:`rejection_rows`.
        uniform: ``(rows,)``, float64, from :func:`acceptance_uniform`.
        greedy: ``(rows,)``, bool.
        draft_token: ``(rows,)``, int64, ``-1`` on bonus rows.
        row_of: ``(requests, max_drafts + 1)``, int64: the target row of request ``i``'s position ``j``,
            ``-1`` past its bonus position.
        max_drafts: the most drafts any request has.

    Returns:
        ``token_ids`` ``(requests, max_drafts + 1)`` int64 (``-1`` after the output) and
        ``num_tokens`` ``(requests,)`` int64.
    """
    safe = row_of.clamp(min=0)
    draft = draft_token[safe]
    num_accepted = accepted_counts(ratio, token, uniform, greedy, draft_token, row_of)
    positions = torch.arange(max_drafts + 1, device=row_of.device).unsqueeze(0)
    last = token[safe.gather(1, num_accepted.unsqueeze(1))].squeeze(1)
    out = torch.where(positions < num_accepted.unsqueeze(1), draft, -1)
    out.scatter_(1, num_accepted.unsqueeze(1), last.unsqueeze(1))
    num_tokens = num_accepted + (last >= 0).to(torch.int64)
    return out, num_tokens
