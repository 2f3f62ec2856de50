"""Speculative decoding's per-position work as a Triton kernel (same contract as
:mod:`grammask.kernels.rejection_sample_torch`).

One program per target row makes two passes over the vocabulary in blocks. The first unpacks the
row's bitmask words, keeps a running maximum and rescaled sum of ``exp(logit / temperature)`` over
allowed tokens (online softmax), the greedy argmax, and the mass of the allowed draft probabilities.
The second forms ``p``, the normalised masked ``q``, the residual ``max(0, p - q)``, and keeps the
running argmax of ``log(residual) + gumbel`` (and of ``log(p) + gumbel``, for the row whose residual is
all zero), with the seeded hash noise of :mod:`grammask.kernels.gumbel_sample_triton`.

Importing this module imports triton; the dispatcher imports it lazily.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from grammask.kernels.gumbel_sample_triton import _gumbel_of

MAX_BLOCK = 4096


@triton.jit
def _allowed(bitmask_ptr, row_base, cols, inside):
    words = tl.load(bitmask_ptr + row_base + cols // 32, mask=inside, other=0)
    return (((words >> (cols % 32)) & 1) != 0) & inside


@triton.jit
def _rejection_rows_kernel(
    logits_ptr,
    bitmask_ptr,
    draft_probs_ptr,
    draft_index_ptr,
    draft_token_ptr,
    temperature_ptr,
    greedy_ptr,
    state_ptr,
    ratio_ptr,
    token_ptr,
    vocab,
    logits_stride,
    bitmask_stride,
    draft_stride,
    HAS_DRAFT_PROBS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    temperature = tl.load(temperature_ptr + row)
    greedy = tl.load(greedy_ptr + row) != 0
    draft_row = tl.load(draft_index_ptr + row)
    is_draft = draft_row >= 0
    draft_token = tl.minimum(tl.maximum(tl.load(draft_token_ptr + row), 0), vocab - 1)
    state = tl.load(state_ptr + row).to(tl.uint32)
    logits_base = row * logits_stride
    bitmask_base = row * bitmask_stride
    draft_base = tl.maximum(draft_row, 0) * draft_stride
    draft_limit = tl.where(is_draft, vocab, 0)  # columns of q to read: none on a bonus row

    peak = tl.full([], float("-inf"), tl.float32)
    total = tl.full([], 0.0, tl.float32)
    best_value = tl.full([], float("-inf"), tl.float32)
    best_index = tl.full([], 0, tl.int64)
    q_total = tl.full([], 0.0, tl.float32)
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < vocab
        allowed = _allowed(bitmask_ptr, bitmask_base, cols, inside)
        raw = tl.load(logits_ptr + logits_base + cols, mask=inside, other=float("-inf")).to(tl.float32)
        raw = tl.where(allowed, raw, float("-inf"))
        scores = raw / temperature
        block_peak = tl.max(scores, axis=0)
        new_peak = tl.maximum(peak, block_peak)
        shift = tl.where(new_peak == float("-inf"), 0.0, new_peak)
        total = total * tl.exp(peak - shift) + tl.sum(tl.exp(scores - shift), axis=0)
        peak = new_peak
        block_best = tl.max(raw, axis=0)
        block_index = tl.min(tl.where(raw == block_best, cols, vocab), axis=0).to(tl.int64)
        better = block_best > best_value
        best_index = tl.where(better, block_index, best_index)
        best_value = tl.where(better, block_best, best_value)
        if HAS_DRAFT_PROBS:
            q = tl.load(draft_probs_ptr + draft_base + cols, mask=allowed & (cols < draft_limit), other=0.0)
            q_total += tl.sum(q.to(tl.float32), axis=0)

    nothing = peak == float("-inf")
    shift = tl.where(nothing, 0.0, peak)
    norm = tl.maximum(total, 1.1754943508222875e-38)
    x_word = tl.load(bitmask_ptr + bitmask_base + draft_token // 32)
    x_allowed = ((x_word >> (draft_token % 32)) & 1) != 0
    x_logit = tl.load(logits_ptr + logits_base + draft_token).to(tl.float32)
    px = tl.where(x_allowed, tl.exp(x_logit / temperature - shift) / norm, 0.0)
    if HAS_DRAFT_PROBS:
        q_norm = tl.maximum(q_total, 1.1754943508222875e-38)
        qx_raw = tl.where(is_draft, tl.load(draft_probs_ptr + draft_base + draft_token).to(tl.float32), 0.0)
        qx = tl.where(x_allowed & (q_total > 0), qx_raw / q_norm, 0.0)
        ratio = tl.where(qx > 0, px / tl.maximum(qx, 1.1754943508222875e-38), 0.0)
    else:
        ratio = px
    ratio = tl.where(is_draft & ~nothing, ratio, 0.0)

    residual_value = tl.full([], float("-inf"), tl.float32)
    residual_index = tl.full([], 0, tl.int64)
    p_value = tl.full([], float("-inf"), tl.float32)
    p_index = tl.full([], 0, tl.int64)
    residual_peak = tl.full([], 0.0, tl.float32)
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < vocab
        allowed = _allowed(bitmask_ptr, bitmask_base, cols, inside)
        raw = tl.load(logits_ptr + logits_base + cols, mask=inside, other=float("-inf")).to(tl.float32)
        p = tl.where(allowed, tl.exp(raw / temperature - shift) / norm, 0.0)
        if HAS_DRAFT_PROBS:
            q = tl.load(draft_probs_ptr + draft_base + cols, mask=allowed & (cols < draft_limit), other=0.0).to(tl.float32)
            q = tl.where(q_total > 0, q / tl.maximum(q_total, 1.1754943508222875e-38), 0.0)
        else:
            q = tl.where(cols == draft_token, 1.0, 0.0)
        residual = tl.where(is_draft, tl.maximum(p - q, 0.0), p)
        residual_peak = tl.maximum(residual_peak, tl.max(tl.where(inside, residual, 0.0), axis=0))
        noise = _gumbel_of(state, cols.to(tl.uint32))
        keyed = tl.where(inside, tl.log(residual.to(tl.float64)).to(tl.float32) + noise, float("-inf"))
        block_best = tl.max(keyed, axis=0)
        block_index = tl.min(tl.where(keyed == block_best, cols, vocab), axis=0).to(tl.int64)
        better = block_best > residual_value
        residual_index = tl.where(better, block_index, residual_index)
        residual_value = tl.where(better, block_best, residual_value)
        keyed = tl.where(inside, tl.log(p.to(tl.float64)).to(tl.float32) + noise, float("-inf"))
        block_best = tl.max(keyed, axis=0)
        block_index = tl.min(tl.where(keyed == block_best, cols, vocab), axis=0).to(tl.int64)
        better = block_best > p_value
        p_index = tl.where(better, block_index, p_index)
        p_value = tl.where(better, block_best, p_value)

    drawn = tl.where(residual_peak > 0, residual_index, p_index)
    token = tl.where(greedy, best_index, drawn)
    token = tl.where(nothing, -1, token)
    tl.store(ratio_ptr + row, ratio)
    tl.store(token_ptr + row, token)


def rejection_rows_triton(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_index: torch.Tensor,
    draft_token: torch.Tensor,
    temperature: torch.Tensor,
    greedy: torch.Tensor,
    row_state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as :func:`~grammask.kernels.rejection_sample_torch.rejection_rows_torch`."""
    rows, vocab = logits.shape
    ratio = torch.zeros(rows, dtype=torch.float32, device=logits.device)
    token = torch.full((rows,), -1, dtype=torch.int64, device=logits.device)
    if rows == 0 or vocab == 0:
        return ratio, token
    values = logits if logits.stride(1) == 1 else logits.contiguous()
    words = bitmask if bitmask.stride(1) == 1 else bitmask.contiguous()
    has_probs = draft_probs is not None and draft_probs.shape[0] > 0  # no draft rows: no q to read
    probs = draft_probs if has_probs and draft_probs.stride(1) == 1 else (
        draft_probs.contiguous() if has_probs else torch.empty(1, 1, dtype=torch.float32, device=logits.device)
    )
    _rejection_rows_kernel[(rows,)](
        values, words, probs, draft_index.to(torch.int64).contiguous(), draft_token.to(torch.int64).contiguous(),
        temperature.to(torch.float32).contiguous(), greedy.to(torch.int8).contiguous(),
        row_state.to(torch.int64).contiguous(), ratio, token, vocab, values.stride(0), words.stride(0),
        probs.stride(0), has_probs, min(MAX_BLOCK, triton.next_power_of_2(max(vocab, 16))),
    )
    return ratio, token
