"""Seeded Gumbel-max sampling as Triton kernels (bit-identical to :mod:`gumbel_sample_torch`).

A program walks a row (or, for the argmax, a slice of one) in power-of-two blocks: it hashes
``(row state, token id)`` with the MurmurHash3 token block and finaliser in wrapping uint32 arithmetic,
turns the hash into Gumbel noise in float64 (rounded to float32, as the torch reference does) and either
stores the noise or keeps a running ``argmax(score + noise)`` (first index on a tie, like
``torch.argmax``). On a GPU the argmax splits each row over several programs, so that a few rows still
fill the device, and the slices' winners are reduced by two torch ops.

Importing this module imports triton; the dispatcher imports it lazily.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from grammask.kernels import gumbel_sample_torch as reference

MAX_BLOCK = 4096
GPU_ARGMAX_BLOCK = 1024
TARGET_PROGRAMS = 4096
"""Argmax programs to aim for on a GPU (many per multiprocessor), splitting rows into slices. With
``GPU_ARGMAX_BLOCK``, the fastest of blocks 512-4096 × 256-4096 programs on an H200 for 1-64 rows of
128,256 columns (see docs/design-notes.md)."""
INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
# jit functions may only read constexpr globals
C1 = tl.constexpr(reference.C1)
C2 = tl.constexpr(reference.C2)
FMIX1 = tl.constexpr(reference.FMIX1)
FMIX2 = tl.constexpr(reference.FMIX2)
MIX_ADD = tl.constexpr(reference.MIX_ADD)
KEY_BYTES = tl.constexpr(reference.KEY_BYTES)
TWO_POW_MINUS_32 = tl.constexpr(2.0**-32)


@triton.jit
def _rotl32(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def _gumbel_of(state, token):
    """Noise for a block of tokens: state and token are uint32."""
    uniform = (_hash_of(state, token).to(tl.float64) + 0.5) * TWO_POW_MINUS_32
    return (-tl.log(-tl.log(uniform))).to(tl.float32)


@triton.jit
def _hash_of(state, token):
    """The finished MurmurHash3 of (row state, token): uint32 in, uint32 out."""
    k = token * C1
    k = _rotl32(k, 15)
    k = k * C2
    h = state ^ k
    h = _rotl32(h, 13)
    h = h * 5 + MIX_ADD
    h = h ^ KEY_BYTES
    h = h ^ (h >> 16)
    h = h * FMIX1
    h = h ^ (h >> 13)
    h = h * FMIX2
    return h ^ (h >> 16)


@triton.jit
def _gumbel_noise_kernel(
    state_ptr, ids_ptr, out_ptr, n_cols, ids_stride, out_stride, HAS_IDS: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    state = tl.load(state_ptr + row).to(tl.uint32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        if HAS_IDS:
            token = tl.load(ids_ptr + row * ids_stride + cols, mask=inside, other=0).to(tl.uint32)
        else:
            token = cols.to(tl.uint32)
        tl.store(out_ptr + row * out_stride + cols, _gumbel_of(state, token), mask=inside)


@triton.jit
def _gumbel_argmax_kernel(
    scores_ptr,
    state_ptr,
    ids_ptr,
    best_value_ptr,
    best_index_ptr,
    n_cols,
    slice_cols,
    scores_stride,
    ids_stride,
    HAS_IDS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program ``(row, s)`` finds the argmax of ``score + noise`` over columns ``[s * slice_cols,
    (s + 1) * slice_cols)`` and stores it with its value at ``[row, s]`` (``(0, -inf)`` when the slice
    excludes every column)."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    state = tl.load(state_ptr + row).to(tl.uint32)
    best_value = tl.full([], float("-inf"), tl.float32)
    best_index = tl.full([], 0, tl.int32)
    first = part * slice_cols
    for start in range(first, tl.minimum(first + slice_cols, n_cols), BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        if HAS_IDS:
            token = tl.load(ids_ptr + row * ids_stride + cols, mask=inside, other=0).to(tl.uint32)
        else:
            token = cols.to(tl.uint32)
        score = tl.load(scores_ptr + row * scores_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
        perturbed = score + _gumbel_of(state, token)
        # NaN (x != x) excludes a column like -inf, as in the torch reference
        perturbed = tl.where(inside & (perturbed == perturbed), perturbed, -float("inf"))
        block_best = tl.max(perturbed, axis=0)
        # first column holding the block maximum (argmax's tie rule)
        block_index = tl.min(tl.where(perturbed == block_best, cols, n_cols), axis=0).to(tl.int32)
        better = block_best > best_value
        best_index = tl.where(better, block_index, best_index)
        best_value = tl.where(better, block_best, best_value)
    slices = tl.num_programs(1)
    tl.store(best_value_ptr + row * slices + part, best_value)
    tl.store(best_index_ptr + row * slices + part, best_index.to(tl.int64))


def _block_size(n_cols: int) -> int:
    return min(MAX_BLOCK, triton.next_power_of_2(max(n_cols, 16)))


def _ids_args(token_ids: torch.Tensor | None, device: torch.device) -> tuple[torch.Tensor, int, bool]:
    if token_ids is None:
        return torch.empty(1, dtype=torch.int64, device=device), 0, False
    ids = token_ids if token_ids.stride(1) == 1 else token_ids.contiguous()
    return ids, ids.stride(0), True


def gumbel_noise_triton(row_state: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Same contract as :func:`gumbel_noise_torch`: ``(rows,)`` state, ``(rows, k)`` ids → ``(rows, k)`` float32."""
    rows, n_cols = token_ids.shape
    out = torch.empty(rows, n_cols, dtype=torch.float32, device=token_ids.device)
    if rows == 0 or n_cols == 0:
        return out
    ids, ids_stride, _ = _ids_args(token_ids, token_ids.device)
    state = row_state.to(torch.int64).contiguous()
    _gumbel_noise_kernel[(rows,)](state, ids, out, n_cols, ids_stride, out.stride(0), True, _block_size(n_cols))
    return out


def _slices(rows: int, n_cols: int, block: int, slices: int | None) -> tuple[int, int]:
    """(slices per row, columns per slice): ``slices`` if given, else enough to fill a GPU (one under
    the interpreter, whose cost is per program); each slice a whole number of blocks."""
    blocks = triton.cdiv(n_cols, block)
    if slices is None:
        slices = 1 if INTERPRETED else TARGET_PROGRAMS // rows
    slice_cols = triton.cdiv(blocks, max(1, min(slices, blocks))) * block
    return triton.cdiv(n_cols, slice_cols), slice_cols


def gumbel_argmax_triton(
    scores: torch.Tensor,
    row_state: torch.Tensor,
    token_ids: torch.Tensor | None = None,
    *,
    block: int | None = None,
    slices: int | None = None,
) -> torch.Tensor:
    """Same contract as :func:`gumbel_argmax_torch`; ``scores`` rows may be strided (the last dim must be dense).

    ``block`` (columns per step, a power of two) and ``slices`` (programs per row) default to a choice
    for the device; tests set them to reach every path under the interpreter.
    """
    rows, n_cols = scores.shape
    if rows == 0 or n_cols == 0:
        return torch.zeros(rows, dtype=torch.int64, device=scores.device)
    values = scores if scores.stride(1) == 1 else scores.contiguous()
    ids, ids_stride, has_ids = _ids_args(token_ids, scores.device)
    state = row_state.to(torch.int64).contiguous()
    block = block or (_block_size(n_cols) if INTERPRETED else min(GPU_ARGMAX_BLOCK, _block_size(n_cols)))
    slices, slice_cols = _slices(rows, n_cols, block, slices)
    best_value = torch.empty(rows, slices, dtype=torch.float32, device=scores.device)
    best_index = torch.empty(rows, slices, dtype=torch.int64, device=scores.device)
    _gumbel_argmax_kernel[(rows, slices)](
        values, state, ids, best_value, best_index, n_cols, slice_cols, values.stride(0), ids_stride, has_ids, block
    )
    if slices == 1:
        return best_index.view(rows)
    # the first column holding the row's maximum: slices are in column order, each reports its first
    winner = best_value == best_value.amax(dim=1, keepdim=True)
    return torch.where(winner, best_index, n_cols).amin(dim=1)
