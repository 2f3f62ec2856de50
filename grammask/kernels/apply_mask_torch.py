"""Apply a token bitmask to logits with torch ops (the CPU path; also runs on any torch device).

Why it is fast: ``masked_fill_`` with a random boolean mask is a branchy scalar loop on CPU
(~5 ms for 16 x 128,256 fp32 here), while element-wise ``clamp_`` vectorises. So each byte of the
bitmask is looked up in a 256-entry table of 8 bounds (``+inf`` = allowed, ``-inf`` = masked) and the
logits are clamped from above by those bounds: ``min(x, +inf) = x`` and ``min(x, -inf) = -inf``.
One gather into a reused per-thread workspace plus one in-place clamp, per chunk of rows; no copy
of the logits, whatever their strides.

The one difference from a plain ``masked_fill_``: a NaN logit stays NaN even where it is masked
(``clamp`` propagates NaN). Finite and infinite logits give exactly the reference result.
"""

from __future__ import annotations

import sys
import threading

import torch

_LITTLE_ENDIAN = sys.byteorder == "little"
_BYTE_SHIFTS = (0, 8, 16, 24)
_WORKSPACE_ELEMENTS = 1 << 22
"""Bounds are computed per chunk of rows of at most this many elements (16 MiB of fp32) into a per-thread
workspace reused across calls. Few chunks matter: every torch op is a parallel region, costly on a busy CPU."""

_bounds_cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
_thread_local = threading.local()


def _byte_bounds(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(256, 8)`` table, ``dtype``: entry ``[b, j]`` is ``+inf`` when bit ``j`` of byte ``b`` is set, else ``-inf``."""
    key = (dtype, device)
    table = _bounds_cache.get(key)
    if table is None:
        bits = (torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1
        table = torch.where(bits.bool(), float("inf"), float("-inf")).to(dtype=dtype, device=device)
        _bounds_cache[key] = table
    return table


def _bitmask_bytes(bitmask: torch.Tensor) -> torch.Tensor:
    """``(rows, words)`` int32 -> ``(rows * words * 4,)`` int32 byte values, least significant byte first."""
    if _LITTLE_ENDIAN:  # a uint8 view already has that order: 10x cheaper than shifting
        return bitmask.contiguous().view(torch.uint8).reshape(-1).to(torch.int32)
    shifts = torch.tensor(_BYTE_SHIFTS, dtype=torch.int32, device=bitmask.device)
    return ((bitmask.unsqueeze(-1) >> shifts) & 0xFF).reshape(-1)


def _workspace(dtype: torch.dtype, device: torch.device, numel: int) -> torch.Tensor:
    """A reused ``(>= numel,)`` buffer, one per thread, dtype and device.

    A fresh multi-megabyte tensor per call costs page faults that can exceed the work itself.
    """
    buffers = getattr(_thread_local, "buffers", None)
    if buffers is None:
        buffers = _thread_local.buffers = {}
    buffer = buffers.get((dtype, device))
    if buffer is None or buffer.numel() < numel:
        # A normal tensor even when first needed under inference_mode, so later calls outside it can write it.
        with torch.inference_mode(False):
            buffer = buffers[(dtype, device)] = torch.empty(numel, dtype=dtype, device=device)
    return buffer


def apply_mask_torch(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    Inputs are assumed valid (the dispatcher :func:`grammask.kernels.apply_mask` checks them).

    Args:
        logits: ``(batch, vocab)``, float32 / float16 / bfloat16, any strides.
        bitmask: ``(rows, words)``, int32, on ``logits``' device; bit ``j`` of word ``w`` is token ``32 * w + j``,
            1 = allowed. Logit columns at or past ``32 * words`` are masked; bitmask bits past ``vocab`` are ignored.
        indices: ``(rows,)``, int, or ``None``; bitmask row ``i`` applies to logits row ``indices[i]``
            (``None``: to row ``i``, and ``rows == batch``).
    """
    rows, vocab = bitmask.shape[0], logits.shape[1]
    covered = min(vocab, 32 * bitmask.shape[1])
    targets = None if indices is None else indices.tolist()
    if covered < vocab and targets is None:
        logits[:, covered:].fill_(float("-inf"))
    elif covered < vocab:
        logits[targets, covered:] = float("-inf")
    if covered == 0 or rows == 0:
        return
    words = (covered + 31) // 32
    byte_values = _bitmask_bytes(bitmask[:, :words]).view(rows, 4 * words)
    table = _byte_bounds(logits.dtype, logits.device)
    chunk_rows = max(1, _WORKSPACE_ELEMENTS // (32 * words))
    workspace = _workspace(logits.dtype, logits.device, min(chunk_rows, rows) * 32 * words)
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        bounds = workspace[: (stop - start) * 32 * words].view(-1, 8)
        torch.index_select(table, 0, byte_values[start:stop].reshape(-1), out=bounds)
        bounds = bounds.view(stop - start, 32 * words)[:, :covered]
        if targets is None:
            logits[start:stop, :covered].clamp_(max=bounds)
            continue
        for offset, row in enumerate(targets[start:stop]):
            logits[row, :covered].clamp_(max=bounds[offset])
