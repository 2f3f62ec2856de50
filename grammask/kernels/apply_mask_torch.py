"""Apply a token bitmask to logits with plain torch (the CPU path and the reference)."""

from __future__ import annotations

import torch

from grammask.masking.bitmask import bitmask_to_bool


def apply_mask_torch(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    Args:
        logits: ``(batch, vocab)``, float32 / float16 / bfloat16, rows may be non-contiguous.
        bitmask: ``(rows, words)``, int32, same device as ``logits``. Columns at or past ``32 * words`` are masked.
        indices: ``(n,)``, int; logits row ``indices[i]`` takes bitmask row ``i``. ``None``: row ``i`` takes row ``i``.
    """
    vocab = logits.shape[1]
    allowed = bitmask_to_bool(bitmask, min(vocab, bitmask.shape[1] * 32))
    if indices is None:
        rows = logits[: allowed.shape[0]]
    else:
        rows = logits[indices]
    masked = rows.clone()
    masked[:, : allowed.shape[1]].masked_fill_(~allowed, float("-inf"))
    masked[:, allowed.shape[1] :] = float("-inf")
    if indices is None:
        logits[: allowed.shape[0]] = masked
    else:
        logits[indices] = masked
