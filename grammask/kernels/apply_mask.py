"""The dispatcher of ``apply_mask``: one signature, one implementation per file."""

from __future__ import annotations

import torch

from grammask.kernels.apply_mask_torch import apply_mask_torch


def apply_mask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    indices: torch.Tensor | None = None,
    impl: str = "auto",
) -> None:
    """Set the logits of tokens the bitmask forbids to ``-inf``, in place.

    Args:
        logits: ``(batch, vocab)``, float32 / float16 / bfloat16.
        bitmask: ``(rows, ceil(vocab' / 32))``, int32; 1 = allowed. Columns past ``32 * words`` are masked.
        indices: ``(rows,)``, int; which logits row each bitmask row applies to.
        impl: ``"auto"``, ``"torch"`` or ``"triton"``.
    """
    apply_mask_torch(logits, bitmask, indices)
