"""The sampler's stages as small pure functions over tensors.

Two forms of the filters exist:

- **full rows** (``apply_top_k``, ``apply_top_p``, ``apply_min_p``): ``(rows, vocab)`` logits in, filtered
  logits (``-inf`` outside the kept set) out. They are the readable definition (the tests hold them and
  :func:`filter_sorted` to transformers' warpers); the Sampler itself uses :func:`filter_sorted`.
- **sorted candidates** (:func:`filter_sorted`): the same three filters on logits already sorted in
  descending order (from ``torch.topk`` or ``torch.sort``), returning the mask of kept columns. Top-k,
  top-p and min-p all keep a prefix of the sorted order, so the kept set is a prefix, and a few hundred
  candidates usually hold it entirely; :func:`filter_sorted` also says whether they did.

Semantics (shared by both forms, and equal to transformers' warpers applied in the order
temperature → top-k → top-p → min-p):

- top-k keeps the ``k`` largest logits (ties at the k-th value are all kept, as in transformers and vLLM);
- top-p keeps the smallest prefix whose mass reaches ``top_p`` *of the top-k-renormalised distribution*
  (a token is dropped when the mass strictly above it is already ``>= top_p``); vLLM and transformers
  apply top-p after top-k the same way, while SGLang's fused kernel can apply both jointly;
- min-p keeps tokens with ``p >= min_p * p_max``, i.e. ``logit >= max_logit + log(min_p)``; it runs last
  (as in transformers; vLLM runs it first, which changes the nucleus top-p sees);
- the most likely token is always kept.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")
FLOAT32_MAX = torch.finfo(torch.float32).max


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``(logits - row max) / temperature`` per row, in place.

    Shifting by the row's maximum first changes no softmax, and it keeps every allowed logit in range
    at any temperature: the best token becomes exactly 0 and the others are ``<= 0``, so a division
    by a tiny temperature can only underflow an unlikely token to ``-inf`` (probability 0 either
    way), never overflow the likely ones to ``+inf`` (whose ``inf - inf`` would make the weights NaN).
    A row that is all ``-inf`` stays so.

    Args:
        logits: ``(rows, vocab)``, float32, each value finite or ``-inf``.
        temperature: ``(rows,)``, float32, > 0 (greedy rows must carry 1.0).
    """
    peak = logits.amax(dim=1, keepdim=True)
    peak.masked_fill_(peak == NEG_INF, 0.0)
    return logits.sub_(peak).div_(temperature.unsqueeze(1))


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor, *, k_max: int | None = None) -> torch.Tensor:
    """Keep the ``top_k[i]`` largest logits of each row (``top_k >= vocab`` keeps all). Returns a new tensor.

    Args:
        logits: ``(rows, vocab)``, float32.
        top_k: ``(rows,)``, int64 in ``[1, vocab]``.
        k_max: at least ``top_k.max()``, when the caller knows it on the host; ``None`` reads it from
            ``top_k`` (a wait for the device when ``top_k`` lives on one).
    """
    vocab = logits.shape[1]
    if k_max is None:
        k_max = int(top_k.max().item()) if top_k.numel() else 1
    k_max = max(1, min(vocab, k_max))
    values = torch.topk(logits, k_max, dim=1).values
    kth = values.gather(1, (top_k.clamp(1, k_max) - 1).unsqueeze(1))
    return logits.masked_fill(logits < kth, NEG_INF)


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Nucleus filtering of full rows (sorts each row). Returns a new tensor.

    Args:
        logits: ``(rows, vocab)``, float32.
        top_p: ``(rows,)``, float32 in (0, 1].
    """
    values, order = torch.sort(logits, dim=1, descending=True)
    keep = top_p_keep_sorted(values, top_p, logsumexp_sorted(values))
    keep_full = torch.empty_like(keep).scatter_(1, order, keep)
    return logits.masked_fill(~keep_full, NEG_INF)


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Keep tokens with ``p >= min_p * p_max``. Returns a new tensor.

    Args:
        logits: ``(rows, vocab)``, float32.
        min_p: ``(rows,)``, float32 in [0, 1].
    """
    threshold = logits.amax(dim=1, keepdim=True) + torch.log(min_p).unsqueeze(1)
    return logits.masked_fill(logits < threshold, NEG_INF)


def logsumexp_sorted(values: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` of each row, ``(rows, k)`` → ``(rows, 1)``; a row of only ``-inf`` gives ``-inf``."""
    return torch.logsumexp(values, dim=1, keepdim=True)


def top_p_keep_sorted(values: torch.Tensor, top_p: torch.Tensor, log_total: torch.Tensor) -> torch.Tensor:
    """Which columns of descending-sorted logits the nucleus keeps.

    Args:
        values: ``(rows, k)``, float32, sorted descending (a prefix of the row, or the whole row).
        top_p: ``(rows,)``, float32 in (0, 1].
        log_total: ``(rows, 1)``, the log of the normaliser (logsumexp over the distribution top-p sees).

    Returns:
        ``(rows, k)``, bool.
    """
    probs = torch.exp(values - log_total)
    mass_above = torch.cumsum(probs, dim=1) - probs
    keep = (mass_above < top_p.unsqueeze(1)) | (top_p >= 1.0).unsqueeze(1)  # rounding must not cut at 1.0
    keep[:, 0] = True
    return keep


def filter_sorted(
    values: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    log_total: torch.Tensor,
    vocab: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k → top-p → min-p on descending-sorted candidate logits.

    Args:
        values: ``(rows, k)``, float32, each row's ``k`` largest logits in descending order (``k <= vocab``;
            ``k == vocab`` for whole sorted rows).
        top_k: ``(rows,)``, int64, ``vocab`` when off.
        top_p: ``(rows,)``, float32, 1.0 when off.
        min_p: ``(rows,)``, float32, 0.0 when off.
        log_total: ``(rows, 1)``, logsumexp of the *whole* row (the normaliser when top-k is off).
        vocab: the width of the whole rows.

    Returns:
        ``keep``: ``(rows, k)`` bool, the kept columns (a prefix of each row);
        ``covered``: ``(rows,)`` bool, whether these ``k`` columns decide the row: its whole kept set lies
        within them, and top-p's normaliser is known (top-k fits in the candidates, or is off, or top-p
        is off). An uncovered row must be filtered again on more (or all) of its sorted row.
    """
    n_cols = values.shape[1]
    k_fits = (top_k <= n_cols).unsqueeze(1)
    # ties at the k-th value all stay, as in transformers (the k-th value is in view when k fits)
    kth = values.gather(1, (top_k.clamp(1, n_cols) - 1).unsqueeze(1))
    in_top_k = (values >= kth) | ~k_fits
    topk_values = values.masked_fill(~in_top_k, NEG_INF)
    normaliser = torch.where(k_fits, logsumexp_sorted(topk_values), log_total)
    keep = in_top_k & top_p_keep_sorted(topk_values, top_p, normaliser)
    keep &= values >= values[:, :1] + torch.log(min_p).unsqueeze(1)
    keep[:, 0] = True
    keep &= values > NEG_INF
    if n_cols >= vocab:
        return keep, torch.ones_like(top_k, dtype=torch.bool)
    # The kept set is a prefix: it ends inside the candidates iff the last candidate is dropped. The
    # normaliser is known when top-k fits in the candidates or is off.
    decided = k_fits.squeeze(1) | (top_k >= vocab) | (top_p >= 1.0)
    covered = decided & (~keep[:, -1] | (values[:, -1] == NEG_INF))
    return keep, covered


def top_p_keep_threshold(logits: torch.Tensor, top_p: torch.Tensor, buckets: int = 2048) -> torch.Tensor:
    """Nucleus filtering of whole rows without sorting them (for nuclei too large for a candidate view).

    Each row's logit range is cut into ``buckets`` equal slices (slice 0 holds the largest logits) and the
    probability mass of each slice is summed (one weighted ``bincount``). Slices before the first one
    where the running mass reaches ``top_p`` are kept whole, slices after it dropped whole, and only the
    tokens of that boundary slice are sorted and decided exactly as :func:`top_p_keep_sorted` does.
    A few passes over the rows instead of a sort. Reads the boundary slices' tokens on the host.

    Args:
        logits: ``(rows, vocab)``, float32 (already tempered; ``-inf`` for excluded tokens).
        top_p: ``(rows,)``, float32 in (0, 1]; 1 keeps every finite token.
        buckets: how many slices per row.

    Returns:
        ``(rows, vocab)``, bool, the kept tokens.
    """
    rows = logits.shape[0]
    finite = logits > NEG_INF
    probs = torch.softmax(logits, dim=1)
    high = logits.amax(dim=1, keepdim=True)
    low = logits.masked_fill(~finite, float("inf")).amin(dim=1, keepdim=True)
    width = ((high - low) / buckets).clamp_min(torch.finfo(torch.float32).tiny)
    slice_of = ((high - logits) / width).nan_to_num_(nan=buckets - 1).clamp_(0, buckets - 1).to(torch.int64)
    offsets = torch.arange(rows, device=logits.device).unsqueeze(1) * buckets
    mass = torch.bincount((slice_of + offsets).flatten(), weights=probs.flatten(), minlength=rows * buckets)
    running = torch.cumsum(mass.view(rows, buckets).to(torch.float32), dim=1)
    boundary = (running < top_p.unsqueeze(1)).sum(dim=1, keepdim=True).clamp_(max=buckets - 1)
    before = torch.where(boundary > 0, running.gather(1, (boundary - 1).clamp(min=0)), 0.0).squeeze(1)
    nucleus = (top_p < 1.0).unsqueeze(1)
    keep = (slice_of < boundary) | ~nucleus  # top-p off: everything stays
    undecided = (slice_of == boundary) & nucleus & finite
    for row in undecided.any(dim=1).nonzero().flatten().tolist():
        columns = undecided[row].nonzero().flatten()
        columns = columns[torch.argsort(logits[row, columns], descending=True)]
        token_mass = probs[row, columns]
        mass_above = before[row] + torch.cumsum(token_mass, dim=0) - token_mass
        keep[row, columns] = mass_above < top_p[row]
    keep[torch.arange(rows, device=logits.device), logits.argmax(dim=1)] = True
    return keep & finite


def inverse_cdf_sample(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Draw one column per row with probability proportional to ``weights`` (no host sync).

    Args:
        weights: ``(rows, k)``, float32, >= 0, at least one positive per row.
        uniform: ``(rows,)``, float32 in [0, 1).

    Returns:
        ``(rows,)``, int64 column index; never a column of zero weight.
    """
    cdf = torch.cumsum(weights, dim=1)
    total = cdf[:, -1:]
    # u * total can round up to total itself, which would land past the last positive column (on a
    # zero-weight tail): the target stays strictly below the total.
    target = torch.minimum(uniform.unsqueeze(1) * total, torch.nextafter(total, torch.zeros_like(total)))
    target = target.contiguous()
    index = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return index.clamp_(max=weights.shape[1] - 1)


def log_softmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` in float32: ``(rows, vocab)`` → ``(rows, vocab)``."""
    return torch.log_softmax(logits.to(torch.float32), dim=1)


def gather_logprobs(
    logprobs: torch.Tensor, chosen: torch.Tensor, top_n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chosen tokens' logprobs, their 1-based ranks, and the top-n logprobs.

    Args:
        logprobs: ``(rows, vocab)``, float32 log-probabilities.
        chosen: ``(rows,)``, int64 token ids (a negative id gives logprob ``-inf`` and rank 0).
        top_n: how many top entries to return (0 for none).

    Returns:
        ``chosen_logprob`` ``(rows,)`` float32, ``rank`` ``(rows,)`` int64 (1 + the number of tokens with a
        strictly larger logprob, as vLLM), ``top_values`` ``(rows, top_n)`` float32 and ``top_ids``
        ``(rows, top_n)`` int64, in descending order.
    """
    valid = chosen >= 0
    picked = logprobs.gather(1, chosen.clamp(min=0).unsqueeze(1))
    picked = picked.masked_fill(~valid.unsqueeze(1), NEG_INF)
    rank = (logprobs > picked).sum(dim=1) + 1
    rank = rank.masked_fill(~valid, 0)
    if top_n > 0:
        top_values, top_ids = torch.topk(logprobs, min(top_n, logprobs.shape[1]), dim=1)
    else:
        top_values = logprobs.new_empty(logprobs.shape[0], 0)
        top_ids = torch.empty(logprobs.shape[0], 0, dtype=torch.int64, device=logprobs.device)
    return picked.squeeze(1), rank, top_values, top_ids
