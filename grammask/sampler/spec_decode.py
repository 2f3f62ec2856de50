"""Speculative decoding under a grammar: rejection sampling with vLLM's semantics, every position masked.

A request proposes ``K`` draft tokens; the target model scores ``K + 1`` positions (after each draft
prefix, and one more). At each position both the target distribution ``p`` and the draft
distribution ``q`` are restricted to what the grammar allows there (the position's row of the
bitmask that :func:`grammask.masking.draft.fill_draft_bitmask` fills) and renormalised. Then, as in
vLLM's ``RejectionSampler`` (Leviathan et al., 2023):

- a **random** request accepts draft ``x`` with probability ``min(1, p(x) / q(x))``; at the first
  rejection it emits a *recovered* token drawn from ``max(0, p - q)`` normalised and stops; when every
  draft is accepted it emits a *bonus* token drawn from ``p`` at position ``K``. Drafts without
  probabilities (n-gram) are a point mass: accepted with probability ``p(x)``. The emitted tokens
  follow ``p`` exactly, whatever ``q`` is, provided the drafts were drawn from the masked ``q``;
- a **greedy** request emits the target argmax at each position while it equals the draft, then the
  first differing argmax (or the bonus argmax);
- a **seeded** request draws its uniforms and Gumbel noise from the hash of (seed, output position,
  token id) (:mod:`grammask.kernels.gumbel_sample`), so it emits the same tokens in any batch; other
  random requests hash a seed drawn from ``generator`` per call.

The grammar mask, temperature and top-k / top-p / min-p (for ``p``) are applied here; penalties,
logit bias and processors depend on each position's history and are the caller's, on the logits it
passes. A draft the grammar rejects has ``p(x) = 0`` and is always rejected, so nothing outside a
position's mask is ever emitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from grammask.checks import as_int, check_instance, check_tensor, same_device
from grammask.errors import InvalidParameterError
from grammask.kernels.apply_mask import apply_mask
from grammask.kernels.gumbel_sample import seeded_row_state
from grammask.kernels.rejection_sample import (
    RejectionImpl,
    accept_walk,
    accepted_counts,
    acceptance_uniform,
    rejection_rows,
    resolve_impl,
)
from grammask.sampler import ops
from grammask.sampler.batch import SamplingBatch
from grammask.sampler.params import MAX_SEED

__all__ = ["RejectionOutput", "rejection_sample"]


@dataclass
class RejectionOutput:
    """The tokens each request emits this step.

    Attributes:
        token_ids: ``(requests, max_drafts + 1)``, int64: request ``i``'s first ``num_tokens[i]`` entries
            are its output (accepted drafts, then a recovered or bonus token), ``-1`` after them.
        num_tokens: ``(requests,)``, int64, between 0 (the first position allowed nothing) and ``K_i + 1``.
    """

    token_ids: torch.Tensor
    num_tokens: torch.Tensor

    def to_lists(self) -> list[list[int]]:
        """Each request's emitted tokens (one host read)."""
        counts = self.num_tokens.tolist()
        return [row[:n] for row, n in zip(self.token_ids.tolist(), counts)]


def rejection_sample(
    target_logits: torch.Tensor,
    draft_token_ids: torch.Tensor,
    num_draft_tokens: Sequence[int],
    bitmask: torch.Tensor,
    batch: SamplingBatch,
    *,
    draft_probs: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    impl: str = "auto",
) -> RejectionOutput:
    """Verify every request's drafts against the target model under the grammar.

    Request ``i`` has ``K_i = num_draft_tokens[i]`` drafts and ``K_i + 1`` target rows, requests one
    after another (rows of request ``i`` start at ``sum(K_j + 1 for j < i)``).

    Args:
        target_logits: ``(sum(K_i + 1), vocab)``, float32 / float16 / bfloat16 (not edited).
        draft_token_ids: ``(sum(K_i),)``, int64, the drafts, requests one after another.
        num_draft_tokens: ``K_i`` per request (host ints).
        bitmask: ``(sum(K_i + 1), ceil(vocab / 32))``, int32, on the logits' device: each target row's
            grammar mask (:func:`grammask.masking.draft.fill_draft_bitmask`).
        batch: one row per request (temperature, greedy, seed, output length, top-k / top-p / min-p).
            Call ``batch.update`` with each emitted token afterwards.
        draft_probs: ``(sum(K_i), vocab)``, float, the draft model's probabilities at each draft (they
            are masked and renormalised here), or ``None`` for drafts without probabilities.
        generator: draws the per-call seeds of unseeded random requests.
        impl: ``"auto"``, ``"torch"`` or ``"triton"``.

    Raises:
        InvalidParameterError: an argument of the wrong type, dtype or device, shapes that do not fit
            together, or a draft id outside the vocabulary.
    """
    counts = _draft_counts(num_draft_tokens)
    _check_types(target_logits, draft_token_ids, bitmask, batch, draft_probs, generator)
    filtering = [i for i, p in enumerate(batch.params) if p.needs_filter and not p.is_greedy]
    plan = _Plan(counts, filtering, target_logits.device)
    _check(target_logits, draft_token_ids, bitmask, batch, draft_probs, plan)
    request, position = plan.request, plan.position
    draft_token = torch.where(plan.draft_index >= 0, draft_token_ids[plan.draft_index.clamp(min=0)], -1)
    greedy, unseeded = _request_flags(batch)
    logits = _filtered(target_logits, bitmask, batch, plan, filtering)
    seeds = batch.seeds.clone()
    if any(p.seed is None for p in batch.params):
        drawn = torch.randint(0, MAX_SEED - 1, (len(counts),), generator=generator, dtype=torch.int64,
                              device="cpu" if generator is None else generator.device).to(seeds.device)
        seeds = torch.where(unseeded, drawn, seeds)
    row_state = seeded_row_state(seeds[request], batch.output_len[request] + position)
    args = (logits, bitmask, draft_probs, plan.draft_index, draft_token, batch.temperature[request], greedy[request], row_state)
    uniform = acceptance_uniform(row_state)
    needed = None
    if resolve_impl(impl, logits.device) is RejectionImpl.TORCH:
        # On the CPU path the draws cost most: accept first (ratios and greedy argmaxes only), then draw
        # each request's one random row that is used (its first rejection, or its bonus position).
        ratio, token = rejection_rows(*args, needed=torch.zeros_like(greedy[request]), impl=impl)
        counts = accepted_counts(ratio, token, uniform, greedy[request], draft_token, plan.row_of)
        needed = torch.zeros_like(greedy[request])
        needed[plan.row_of.gather(1, counts.unsqueeze(1)).squeeze(1)] = True
    ratio, token = rejection_rows(*args, needed=needed, impl=impl)
    token_ids, num_tokens = accept_walk(ratio, token, uniform, greedy[request], draft_token, plan.row_of, plan.max_drafts)
    return RejectionOutput(token_ids=token_ids, num_tokens=num_tokens)


class _Plan:
    """Where each request's rows are: per target row its request, position and draft row, and the target
    rows of the requests that filter (built on the host, copied to the device in one transfer)."""

    def __init__(self, counts: list[int], filtering: list[int], device: torch.device) -> None:
        request, position, draft_index, row_of = [], [], [], []
        self.max_drafts = max(counts, default=0)
        row = draft = 0
        for i, k in enumerate(counts):
            request += [i] * (k + 1)
            position += list(range(k + 1))
            draft_index += list(range(draft, draft + k)) + [-1]
            row_of += list(range(row, row + k + 1)) + [-1] * (self.max_drafts - k)
            row += k + 1
            draft += k
        filtered = set(filtering)
        filtered_rows = [r for r, i in enumerate(request) if i in filtered]
        self.rows, self.drafts = row, draft
        parts = [request, position, draft_index, row_of, filtered_rows]
        packed = torch.tensor([v for part in parts for v in part], dtype=torch.int64)
        if device.type == "cuda":  # from pinned memory the copy does not wait for the device's queue
            packed = packed.pin_memory().to(device, non_blocking=True)
        self.request, self.position, self.draft_index, row_of_flat, self.filtered_rows = packed.split([len(v) for v in parts])
        self.row_of = row_of_flat.reshape(len(counts), self.max_drafts + 1)


def _request_flags(batch: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(requests,)`` bool tensors on the batch's device: greedy requests, unseeded requests (built once
    per batch)."""
    if "rejection_flags" not in batch.memo:
        flags = [[p.is_greedy for p in batch.params], [p.seed is None for p in batch.params]]
        batch.memo["rejection_flags"] = tuple(torch.tensor(flags, dtype=torch.bool, device=batch.device))
    return batch.memo["rejection_flags"]


def _filtered(
    logits: torch.Tensor, bitmask: torch.Tensor, batch: SamplingBatch, plan: _Plan, filtering: list[int]
) -> torch.Tensor:
    """The target logits with tokens outside top-k / top-p / min-p of the masked, tempered distribution
    set to ``-inf`` for the ``filtering`` requests (the others' rows are passed as they are)."""
    if not filtering:
        return logits
    rows = plan.filtered_rows
    part = logits[rows].to(torch.float32)
    apply_mask(part, bitmask[rows])
    request = plan.request[rows]
    scores = ops.apply_temperature(part.clone(), batch.temperature[request])
    scores = ops.apply_top_k(scores, batch.top_k[request], k_max=max(batch.top_k_list[i] for i in filtering))
    scores = ops.apply_top_p(scores, batch.top_p[request])
    scores = ops.apply_min_p(scores, batch.min_p[request])
    out = logits.to(torch.float32).clone()
    out[rows] = part.masked_fill(scores == float("-inf"), float("-inf"))
    return out


def _draft_counts(num_draft_tokens: Sequence[int]) -> list[int]:
    if isinstance(num_draft_tokens, (str, bytes)) or not isinstance(num_draft_tokens, (Sequence, torch.Tensor)):
        raise InvalidParameterError("num_draft_tokens", type(num_draft_tokens).__name__, "a list of ints, K_i per request")
    return [as_int(f"num_draft_tokens[{i}]", k, low=0) for i, k in enumerate(num_draft_tokens)]


def _check_types(logits, draft_token_ids, bitmask, batch, draft_probs, generator) -> None:
    """Types, dtypes and devices; :func:`_check` fits the shapes together."""
    check_instance("batch", batch, SamplingBatch, "a SamplingBatch")
    tensors = {"target_logits": logits, "draft_token_ids": draft_token_ids, "bitmask": bitmask}
    if draft_probs is not None:
        tensors["draft_probs"] = draft_probs
    for name, tensor in tensors.items():
        check_tensor(name, tensor)
        if not same_device(tensor.device, batch.device):
            raise InvalidParameterError(f"{name}.device", tensor.device, f"the batch's device {batch.device}")
    for name, tensor in [("target_logits", logits), ("draft_probs", draft_probs)]:
        if tensor is not None and not tensor.dtype.is_floating_point:
            raise InvalidParameterError(f"{name}.dtype", tensor.dtype, "a floating dtype (float32, float16, bfloat16)")
    if draft_token_ids.dtype not in (torch.int32, torch.int64):
        raise InvalidParameterError("draft_token_ids.dtype", draft_token_ids.dtype, "torch.int64 (or int32)")
    if bitmask.dtype != torch.int32:
        raise InvalidParameterError("bitmask.dtype", bitmask.dtype, "torch.int32")
    if generator is not None:
        check_instance("generator", generator, torch.Generator, "a torch.Generator or None")


def _check(logits, draft_token_ids, bitmask, batch, draft_probs, plan: _Plan) -> None:
    if logits.dim() != 2 or logits.shape[0] != plan.rows:
        raise InvalidParameterError("target_logits.shape", tuple(logits.shape), f"({plan.rows}, vocab): sum(K_i + 1) rows")
    if logits.shape[1] != batch.vocab_size:
        raise InvalidParameterError("target_logits.shape", tuple(logits.shape), f"vocab {batch.vocab_size} columns")
    if len(batch) != plan.row_of.shape[0]:
        raise InvalidParameterError("batch", f"{len(batch)} rows", f"one per request ({plan.row_of.shape[0]})")
    if tuple(draft_token_ids.shape) != (plan.drafts,):
        raise InvalidParameterError("draft_token_ids.shape", tuple(draft_token_ids.shape), f"({plan.drafts},): sum(K_i)")
    words = (logits.shape[1] + 31) // 32  # the Triton kernel reads every word a column of the vocabulary needs
    if bitmask.dim() != 2 or bitmask.shape[0] != plan.rows or bitmask.shape[1] < words:
        raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), f"({plan.rows}, {words}): sum(K_i + 1) rows, ceil(vocab / 32) words")
    if draft_probs is not None and tuple(draft_probs.shape) != (plan.drafts, logits.shape[1]):
        raise InvalidParameterError("draft_probs.shape", tuple(draft_probs.shape), f"({plan.drafts}, {logits.shape[1]})")
    if draft_token_ids.device.type == "cpu" and plan.drafts:
        bad = draft_token_ids[(draft_token_ids < 0) | (draft_token_ids >= logits.shape[1])]
        if bad.numel():
            raise InvalidParameterError("draft_token_ids", bad.tolist()[:8], f"ids in [0, {logits.shape[1]})")
