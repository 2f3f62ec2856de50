"""The dispatcher of seeded Gumbel-max sampling: one signature, one implementation per file.

``impl="auto"`` takes the Triton kernel for CUDA tensors when triton imports, and plain torch otherwise
(on CPU, torch's vectorised ops beat the Triton interpreter by orders of magnitude). Both give the same
bits: see :mod:`grammask.kernels.gumbel_sample_torch` for the hash and the noise.
"""

from __future__ import annotations

import enum
import functools
from types import ModuleType

import torch

from grammask.errors import InvalidParameterError
from grammask.kernels.gumbel_sample_torch import gumbel_argmax_torch, gumbel_noise_torch, seeded_row_state

__all__ = ["GumbelImpl", "gumbel_argmax", "gumbel_noise", "seeded_row_state"]


class GumbelImpl(str, enum.Enum):
    AUTO = "auto"
    TORCH = "torch"
    TRITON = "triton"


@functools.lru_cache(maxsize=1)
def _triton_module() -> ModuleType | None:
    try:
        from grammask.kernels import gumbel_sample_triton
    except ImportError:
        return None
    return gumbel_sample_triton


def _resolve(impl: str | GumbelImpl, device: torch.device) -> GumbelImpl:
    try:
        choice = GumbelImpl(impl)
    except ValueError:
        raise InvalidParameterError("impl", impl, "'auto', 'torch' or 'triton'") from None
    if choice is GumbelImpl.AUTO:
        return GumbelImpl.TRITON if device.type == "cuda" and _triton_module() is not None else GumbelImpl.TORCH
    if choice is GumbelImpl.TRITON and _triton_module() is None:
        raise ImportError("impl='triton' needs the 'triton' package: pip install triton")
    return choice


def gumbel_noise(row_state: torch.Tensor, token_ids: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """Gumbel noise of each ``(row, token)``, a pure function of (seed, position, token id).

    Args:
        row_state: ``(rows,)``, int64, from :func:`seeded_row_state`.
        token_ids: ``(rows, k)``, integer token ids.
        impl: ``"auto"``, ``"torch"`` or ``"triton"``.

    Returns:
        ``(rows, k)``, float32.
    """
    if _resolve(impl, token_ids.device) is GumbelImpl.TRITON:
        return _triton_module().gumbel_noise_triton(row_state, token_ids)
    return gumbel_noise_torch(row_state, token_ids)


def gumbel_argmax(
    scores: torch.Tensor,
    row_state: torch.Tensor,
    token_ids: torch.Tensor | None = None,
    *,
    impl: str = "auto",
) -> torch.Tensor:
    """Draw one column per row from ``softmax(scores)`` by Gumbel-max with seeded noise.

    Args:
        scores: ``(rows, k)``, float32 log-weights (logits / temperature); ``-inf`` or NaN excludes a column.
        row_state: ``(rows,)``, int64, from :func:`seeded_row_state`.
        token_ids: ``(rows, k)``, the token id of each column (candidate lists); ``None`` when column ``j`` is token ``j``.
        impl: ``"auto"``, ``"torch"`` or ``"triton"``.

    Returns:
        ``(rows,)``, int64 column indices (first on a tie; 0 for a row with every column excluded).
    """
    if _resolve(impl, scores.device) is GumbelImpl.TRITON:
        return _triton_module().gumbel_argmax_triton(scores, row_state, token_ids)
    return gumbel_argmax_torch(scores, row_state, token_ids)
