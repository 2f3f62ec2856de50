"""Apply a token bitmask to logits with a Triton kernel (CUDA; CPU tensors under ``TRITON_INTERPRET=1``).

Importing this module imports triton; the dispatcher imports it only when it is needed. To run the
kernel on CPU tensors, ``TRITON_INTERPRET=1`` must be set before triton is first imported.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
"""Whether the kernel below was built for the Triton interpreter (``TRITON_INTERPRET=1`` at import)."""

GPU_BLOCK_SIZE = 1024
"""Logit columns per program on a GPU (32 bitmask words, 4 KiB of fp32 logits)."""
GPU_NUM_WARPS = 16
"""Warps per program on a GPU (two columns per thread). Of blocks 1024-8192 × 4-32 warps, the fastest
on an H200 at batch 64 and 256 (fp32 and bf16), and within 0.1 µs of it at batch 1 (kernel time from
CUDA-graph replays; see docs/design-notes.md)."""

INTERPRETER_MAX_BLOCK_SIZE = 1 << 18
"""The largest block under the interpreter, which costs per program rather than per element, so it gets one program per row when it can."""


@triton.jit
def _apply_mask_kernel(
    logits_ptr,
    bitmask_ptr,
    indices_ptr,
    num_logits_rows,
    vocab_size,
    num_words,
    logits_row_stride,
    logits_col_stride,
    bitmask_row_stride,
    bitmask_col_stride,
    HAS_INDICES: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """Program ``(i, b)`` masks columns ``[b * BLOCK_SIZE, (b + 1) * BLOCK_SIZE)`` of the logits row that
    bitmask row ``i`` applies to. It only writes ``-inf`` and never reads the logits; a logits row out of
    range (a bad index the host did not check) is not written."""
    WORDS_PER_BLOCK: tl.constexpr = BLOCK_SIZE // 32
    bitmask_row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1).to(tl.int64)
    if HAS_INDICES:
        logits_row = tl.load(indices_ptr + bitmask_row).to(tl.int64)
    else:
        logits_row = bitmask_row

    word_ids = block * WORDS_PER_BLOCK + tl.arange(0, WORDS_PER_BLOCK)
    words = tl.load(
        bitmask_ptr + bitmask_row * bitmask_row_stride + word_ids * bitmask_col_stride,
        mask=word_ids < num_words,
        other=0,  # columns past the bitmask are masked
    )
    # Bit j of word w is column 32 * w + j; `& 1` undoes the sign extension of the arithmetic shift.
    bits = (words[:, None] >> tl.arange(0, 32)[None, :]) & 1
    allowed = tl.reshape(bits, (BLOCK_SIZE,)) != 0

    columns = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    pointers = logits_ptr + logits_row * logits_row_stride + columns * logits_col_stride
    in_range = (logits_row >= 0) & (logits_row < num_logits_rows)
    columns_written = tl.where(in_range, vocab_size, 0)
    tl.store(pointers, float("-inf"), mask=(columns < columns_written) & ~allowed)


def _block_size(vocab_size: int) -> int:
    if not INTERPRETED:
        return GPU_BLOCK_SIZE
    return min(triton.next_power_of_2(max(vocab_size, 32)), INTERPRETER_MAX_BLOCK_SIZE)


def apply_mask_triton(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    block_size: int | None = None,
) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    Inputs are assumed valid (the dispatcher :func:`grammask.kernels.apply_mask` checks them).

    Args:
        logits: ``(batch, vocab)``, float32 / float16 / bfloat16, any strides; CUDA (or CPU when interpreted).
        bitmask: ``(rows, words)``, int32, on ``logits``' device; bit ``j`` of word ``w`` is token ``32 * w + j``,
            1 = allowed. Logit columns at or past ``32 * words`` are masked; bitmask bits past ``vocab`` are ignored.
        indices: ``(rows,)``, int, or ``None``; bitmask row ``i`` applies to logits row ``indices[i]``
            (``None``: to row ``i``, and ``rows == batch``).
        block_size: logit columns per program, a power of two >= 32 (default: chosen for the device).
    """
    rows, num_words = bitmask.shape
    vocab_size = logits.shape[1]
    if rows == 0 or vocab_size == 0:
        return
    block = block_size or _block_size(vocab_size)
    grid = (rows, triton.cdiv(vocab_size, block))
    _apply_mask_kernel[grid](
        logits,
        bitmask,
        indices if indices is not None else bitmask,  # any pointer; unused without indices
        logits.shape[0],
        vocab_size,
        num_words,
        logits.stride(0),
        logits.stride(1),
        bitmask.stride(0),
        bitmask.stride(1),
        HAS_INDICES=indices is not None,
        BLOCK_SIZE=block,
        num_warps=GPU_NUM_WARPS if not INTERPRETED and block == GPU_BLOCK_SIZE else 4,
    )
