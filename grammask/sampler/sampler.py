"""The batched sampler: masked logits → next token ids, their logprobs and ranks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grammask.checks import check_instance, check_tensor, same_device
from grammask.errors import InvalidParameterError
from grammask.kernels.apply_mask import apply_mask, has_overlapping_rows
from grammask.kernels.gumbel_sample import gumbel_argmax, seeded_row_state
from grammask.sampler import ops
from grammask.sampler.batch import SamplingBatch, seeded_split
from grammask.sampler.params import LogprobsMode

__all__ = ["LogprobsMode", "Sampler", "SamplerOutput", "NO_TOKEN", "prompt_logprobs"]

NO_TOKEN = -1
"""The token id returned for a row where no token is allowed (its request ends with ``"no_allowed_token"``)."""
POSINF_STANDIN = 1e30
"""``+inf`` logits become this: the token dominates, and the value stays finite through every stage."""
LOWEST_LOGIT = -ops.FLOAT32_MAX
"""NaN and ``-inf`` logits become this: the model ranks tokens, it cannot disallow one (only the grammar
mask, ``min_new_tokens`` and processors exclude tokens, with ``-inf``)."""
DEFAULT_CPU_CANDIDATES = 256


@dataclass
class SamplerOutput:
    """One step's result; every tensor is on the logits' device, row ``i`` is batch row ``i``.

    Attributes:
        token_ids: ``(batch,)``, int64; :data:`NO_TOKEN` where nothing was allowed.
        no_allowed_token: ``(batch,)``, bool; the rows where nothing was allowed.
        logprobs: ``(batch,)`` float32, the chosen tokens' logprobs (NaN for rows that did not ask),
            or ``None`` when no row asked for logprobs.
        ranks: ``(batch,)`` int64, 1-based rank of the chosen token (0 for rows that did not ask), or ``None``.
        top_logprobs, top_ids: ``(batch, n)`` float32 / int64, ``n`` the largest requested top-n; each row's
            own top-n in descending order, then NaN / -1 padding; or ``None`` when no row asked.
        token_ids_logprobs: ``(batch, m)`` float32, the logprobs of each row's requested ids
            (order of ``SamplingBatch.token_ids_logprobs``, NaN padding), or ``None``.
    """

    token_ids: torch.Tensor
    no_allowed_token: torch.Tensor
    logprobs: torch.Tensor | None = None
    ranks: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None
    top_ids: torch.Tensor | None = None
    token_ids_logprobs: torch.Tensor | None = None


def _check_inputs(logits: torch.Tensor, batch: SamplingBatch) -> None:
    check_instance("batch", batch, SamplingBatch, "a SamplingBatch")
    check_tensor("logits", logits)
    if not logits.dtype.is_floating_point:
        raise InvalidParameterError("logits.dtype", logits.dtype, "a floating dtype (float32, float16, bfloat16)")
    if logits.dim() != 2 or logits.shape[0] != len(batch) or logits.shape[1] != batch.vocab_size:
        raise InvalidParameterError("logits", tuple(logits.shape), f"(batch={len(batch)}, vocab={batch.vocab_size}) floats")
    if not same_device(logits.device, batch.device):
        raise InvalidParameterError("logits.device", logits.device, f"the batch's device {batch.device}")
    if logits.requires_grad and logits.is_leaf and torch.is_grad_enabled():
        raise InvalidParameterError("logits.requires_grad", True, "logits autograd lets us edit in place (use torch.no_grad())")
    if has_overlapping_rows(logits) and logits.dtype == torch.float32:
        raise InvalidParameterError("logits.stride", logits.stride(), "logits whose elements do not share memory")


class Sampler:
    """Turns a batch of logits into next tokens.

    Stages, in order (each row takes only the stages its parameters need):

    1. **grammar bitmask** — :func:`grammask.kernels.apply_mask` sets disallowed tokens to ``-inf``
       (before anything else; NaN and ``-inf`` logits are first read as ``LOWEST_LOGIT``, ``+inf``
       as ``POSINF_STANDIN``);
    2. **penalties** — ``min_new_tokens`` blocks EOS and stop token ids, then repetition (prompt + output),
       then frequency and presence (output) — see :mod:`grammask.sampler.penalties`;
    3. **logit bias**;
    4. **registered logits processors** (per request, by name) — see :mod:`grammask.sampler.processors`;
    5. **temperature** (greedy rows skip stages 5-7 and take the argmax), after shifting each row's
       maximum to 0 (:func:`ops.apply_temperature`);
    6. **top-k → top-p → min-p** — see :mod:`grammask.sampler.ops` for the exact semantics;
    7. **sample** — unseeded rows draw with the sampler's torch generator (inverse CDF of one uniform
       per row); seeded rows by Gumbel-max with noise hashed from (seed, output position, token id),
       so they draw the same token whatever their batch or row (:mod:`grammask.kernels.gumbel_sample`);
    8. **logprobs** — of the chosen token, its rank, the top-n and requested ids, from the distribution
       each row's :class:`~grammask.sampler.params.LogprobsMode` names (the request's own, else the
       sampler's default, ``raw_logprobs`` as in vLLM).

    A row where stage 1-4 left nothing allowed returns :data:`NO_TOKEN` and ``no_allowed_token=True``
    instead of a garbage sample. Whatever the parameters and logits, a token the mask forbids (or that
    ``min_new_tokens`` or a processor excluded) is never returned, and a row with a token still allowed
    always returns one: after stage 1 exactly the excluded tokens are ``-inf`` and every other value is
    finite, and each later stage keeps it so (a penalty clamps instead of overflowing, processors cannot
    lift a ``-inf``, temperature works on logits shifted to a maximum of 0), so no NaN weight can reach
    the draw. An all-greedy batch is one argmax. Nothing on the sampling path reads a
    device value on the host, except on CPU, where the filter stage first looks at each row's
    ``candidate_cap`` largest logits; a row whose kept set did not fit is cut by a sliced-mass threshold
    (top-p without top-k, :func:`ops.top_p_keep_threshold`) or looks at 16 times more candidates, up to
    a whole sort (a host read is free on CPU; on CUDA, ``candidate_cap=None`` sorts whole rows and never
    syncs). Processors
    are host logic: a batch with processors reads the sampled ids on the host in ``SamplingBatch.update``.

    ``forward`` edits float32 ``logits`` in place (other dtypes are converted to a float32 copy).

    Where vLLM and SGLang differ, the choices made here:

    - the grammar mask comes first (vLLM applies it before its sampler; SGLang after its penalties):
      the result is the same for allowed tokens, and nothing after it can lift a ``-inf``;
    - logit bias comes after the penalties (SGLang; vLLM adds it first, so its repetition penalty scales
      the biased logit): a bias then means the same whatever the history;
    - top-p is computed on the top-k-renormalised distribution (vLLM, transformers; SGLang's fused
      kernel can apply both jointly), and min-p comes last (transformers; vLLM applies it first);
    - NaN and ``-inf`` logits rank last but stay allowed (SGLang writes -1e5 for NaN, likewise): a
      structure never stalls on a broken logit; a row the mask leaves with nothing allowed ends with
      ``"no_allowed_token"`` (neither engine has this);
    - seeded rows hash (seed, *output* position, token id) as SGLang's deterministic mode does with
      absolute positions: the draw does not move when the prompt's length changes; vLLM keeps one torch
      generator per seeded request instead, whose stream depends on how many draws it has served;
    - logprobs are ``raw_logprobs`` by default (vLLM); the mode is per request (vLLM sets it per engine,
      with a per-call override), with vLLM's four names and meanings.
    """

    def __init__(
        self,
        *,
        logprobs_mode: LogprobsMode | str = LogprobsMode.RAW_LOGPROBS,
        generator: torch.Generator | None = None,
        candidate_cap: int | None | str = "auto",
    ) -> None:
        """
        Args:
            logprobs_mode: the default :class:`~grammask.sampler.params.LogprobsMode` of rows whose request
                names none (``"raw_logprobs"``, ``"raw_logits"``, ``"processed_logprobs"``, ``"processed_logits"``).
            generator: the torch generator of unseeded rows (default: torch's global one).
            candidate_cap: how many sorted candidates the filter stage looks at first; ``None`` sorts whole
                rows; ``"auto"``: 256 on CPU, ``None`` on other devices.
        """
        self.logprobs_mode = LogprobsMode.parse("logprobs_mode", logprobs_mode)
        if candidate_cap not in ("auto", None) and not (
            isinstance(candidate_cap, int) and not isinstance(candidate_cap, bool) and candidate_cap >= 1
        ):
            raise InvalidParameterError("candidate_cap", candidate_cap, "'auto', None or an int >= 1")
        if generator is not None:
            check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
        self.generator = generator
        self.candidate_cap = candidate_cap

    def __call__(self, *args, **kwargs) -> SamplerOutput:
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        logits: torch.Tensor,
        batch: SamplingBatch,
        bitmask: torch.Tensor | None = None,
        *,
        indices: torch.Tensor | None = None,
    ) -> SamplerOutput:
        """Sample one token per row.

        Args:
            logits: ``(batch, vocab)``, float32 (edited in place) / float16 / bfloat16.
            batch: the rows' :class:`SamplingBatch` (``len(batch) == logits.shape[0]``).
            bitmask: ``(rows, ceil(vocab / 32))``, int32 grammar bitmask, or ``None``.
            indices: ``(rows,)``, int64; which logits row each bitmask row applies to.
        """
        _check_inputs(logits, batch)
        work = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
        kinds = self._logprob_kinds(batch)
        values = work.new_empty((len(batch.logprob_row_list), work.shape[1])) if kinds else None
        for kind in kinds:
            if kind.raw:
                self._logprob_values(values, work, batch, kind)
        self._process(work, batch, bitmask, indices)
        token_ids = torch.full((len(batch),), NO_TOKEN, dtype=torch.int64, device=work.device)
        self._sample_greedy(work, batch, token_ids)
        self._sample_full(work, batch, token_ids)
        self._sample_filtered(work, batch, token_ids)
        output = SamplerOutput(token_ids=token_ids, no_allowed_token=token_ids == NO_TOKEN)
        if values is not None:
            for kind in kinds:
                if not kind.raw:
                    self._logprob_values(values, work, batch, kind)
            self._fill_logprobs(output, values, batch)
        return output

    def _logprob_kinds(self, batch: SamplingBatch) -> list[_LogprobRows]:
        """The batch's logprob rows split by kind (raw, processed), built on the first step of the batch."""
        key = ("logprob_rows", self.logprobs_mode)
        if key not in batch.memo:
            modes = [batch.params[row].logprobs_mode or self.logprobs_mode for row in batch.logprob_row_list]
            batch.memo[key] = [_LogprobRows.of(batch, modes, raw) for raw in (True, False) if any(m.is_raw == raw for m in modes)]
        return batch.memo[key]

    @staticmethod
    def _logprob_values(values: torch.Tensor, work: torch.Tensor, batch: SamplingBatch, kind: _LogprobRows) -> None:
        """Fill ``kind``'s rows of ``values`` ``(len(batch.logprob_rows), vocab)``: raw (before any stage)
        or processed (after the sampling stages: greedy rows as processed, others tempered and filtered,
        as each was drawn)."""
        scores = work[kind.rows]
        if not kind.raw:
            scores = _as_sampled(scores, kind, batch)
        scores = torch.where(kind.take_logs, ops.log_softmax_rows(scores), scores)
        values.index_copy_(0, kind.positions, scores)

    def _process(
        self, work: torch.Tensor, batch: SamplingBatch, bitmask: torch.Tensor | None, indices: torch.Tensor | None
    ) -> None:
        """Stages 1-4, in place on float32 ``work``."""
        torch.nan_to_num_(work, nan=LOWEST_LOGIT, posinf=POSINF_STANDIN, neginf=LOWEST_LOGIT)
        if bitmask is not None:
            apply_mask(work, bitmask, indices=indices)
        if batch.min_tokens is not None:
            batch.min_tokens.apply(work, batch.output_len)
        if batch.penalties is not None:
            batch.penalties.apply(work)
        if batch.bias_rows.numel():
            work.index_put_((batch.bias_rows, batch.bias_ids), batch.bias_values, accumulate=True)
        if batch.has_processors:
            self._run_processors(work, batch)

    @staticmethod
    def _run_processors(work: torch.Tensor, batch: SamplingBatch) -> None:
        """Stage 4. A processor may move a logit or exclude a token (``-inf``), never revive one an earlier
        stage excluded (the grammar mask above all); a NaN it leaves ranks last, ``+inf`` first."""
        for row, processors in enumerate(batch.processors):
            if not processors:
                continue
            logits = work[row]
            excluded = logits == ops.NEG_INF
            for processor in processors:
                processor.apply(logits, batch.output_ids[row])
            torch.nan_to_num_(logits, nan=LOWEST_LOGIT, posinf=ops.FLOAT32_MAX, neginf=ops.NEG_INF)
            logits.masked_fill_(excluded, ops.NEG_INF)

    # ------------------------------------------------------------------ sampling paths

    @staticmethod
    def _sample_greedy(work: torch.Tensor, batch: SamplingBatch, token_ids: torch.Tensor) -> None:
        rows = batch.groups.greedy_index
        if not batch.groups.greedy:
            return
        values, best = (work if batch.all_greedy else work[rows]).max(dim=1)
        best = best.masked_fill(values == ops.NEG_INF, NO_TOKEN)
        token_ids.index_copy_(0, rows, best)

    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=device)

    def _row_state(self, batch: SamplingBatch, rows: torch.Tensor) -> torch.Tensor:
        return seeded_row_state(batch.seeds[rows], batch.output_len[rows])

    def _sample_full(self, work: torch.Tensor, batch: SamplingBatch, token_ids: torch.Tensor) -> None:
        """Rows without filters: draw from the whole tempered distribution."""
        groups = batch.groups
        if not groups.full:
            return
        scores = ops.apply_temperature(work[groups.full_index], batch.temperature[groups.full_index])
        log_total = ops.logsumexp_sorted(scores)
        chosen = self._draw(scores, None, log_total, groups.full_index, groups.full_split, batch)
        chosen = chosen.masked_fill(log_total.squeeze(1) == ops.NEG_INF, NO_TOKEN)
        token_ids.index_copy_(0, groups.full_index, chosen)

    def _sample_filtered(self, work: torch.Tensor, batch: SamplingBatch, token_ids: torch.Tensor) -> None:
        """Rows with top-k / top-p / min-p: filter sorted candidates, widen for rows that did not fit."""
        groups = batch.groups
        if not groups.filtered:
            return
        rows = groups.filtered_index
        scores = ops.apply_temperature(work[rows], batch.temperature[rows])
        vocab = scores.shape[1]
        cap = self._first_cap(scores.device, vocab)
        pending = list(range(len(groups.filtered)))
        chosen = torch.empty(len(pending), dtype=torch.int64, device=scores.device)
        first = True
        while pending:
            if first:  # every row, without a host-to-device copy
                positions = torch.arange(len(pending), device=scores.device)
                part, picked, split = scores, rows, groups.filtered_split
            else:
                positions = torch.tensor(pending, dtype=torch.int64, device=scores.device)
                part, picked = scores[positions], rows[positions]
                split = seeded_split([groups.filtered_seeded[i] for i in pending], scores.device)
            first = False
            if cap < vocab:
                values, ids = torch.topk(part, cap, dim=1)
            else:
                values, ids = torch.sort(part, dim=1, descending=True)
            keep, covered = ops.filter_sorted(
                values, batch.top_k[picked], batch.top_p[picked], batch.min_p[picked],
                self._log_total(part, [groups.filtered[i] for i in pending], batch, cap < vocab), vocab,
            )
            masked = values.masked_fill(~keep, ops.NEG_INF)
            draw = self._draw(masked, ids, ops.logsumexp_sorted(masked), picked, split, batch)
            draw = draw.masked_fill(values[:, 0] == ops.NEG_INF, NO_TOKEN)
            if cap >= vocab:
                chosen.index_copy_(0, positions, draw)
                break
            chosen.index_copy_(0, positions[covered], draw[covered])
            # cap < vocab only on CPU, where this host read is free: widen the rows that did not fit
            pending = [pos for pos, done in zip(pending, covered.tolist()) if not done]
            pending = self._sample_wide_nuclei(scores, pending, batch, chosen)
            cap = min(vocab, cap * 16)
        token_ids.index_copy_(0, rows, chosen)

    def _sample_wide_nuclei(
        self, scores: torch.Tensor, pending: list[int], batch: SamplingBatch, chosen: torch.Tensor
    ) -> list[int]:
        """Draw the pending filtered rows whose top-k is off by a top-p threshold; return the others.

        These rows' nucleus did not fit in the candidates, so it is large: a bisection on the threshold
        beats sorting the whole row. (CPU only, like the candidate view.)
        """
        groups = batch.groups
        wide = [pos for pos in pending if batch.params[groups.filtered[pos]].top_k == -1]
        if not wide:
            return pending
        positions = torch.tensor(wide, dtype=torch.int64, device=scores.device)
        part, picked = scores[positions], groups.filtered_index[positions]
        keep = ops.top_p_keep_threshold(part, batch.top_p[picked])
        keep &= part >= part.amax(dim=1, keepdim=True) + torch.log(batch.min_p[picked]).unsqueeze(1)
        masked = part.masked_fill(~keep, ops.NEG_INF)
        split = seeded_split([groups.filtered_seeded[pos] for pos in wide], scores.device)
        chosen.index_copy_(0, positions, self._draw(masked, None, ops.logsumexp_sorted(masked), picked, split, batch))
        done = set(wide)
        return [pos for pos in pending if pos not in done]

    @staticmethod
    def _log_total(part: torch.Tensor, rows: list[int], batch: SamplingBatch, partial: bool) -> torch.Tensor:
        """logsumexp of whole rows, computed only when a partial view has a row with top-p but no top-k."""
        needed = partial and any(batch.params[r].top_k == -1 and batch.params[r].top_p < 1.0 for r in rows)
        return ops.logsumexp_sorted(part) if needed else part.new_zeros(part.shape[0], 1)

    def _first_cap(self, device: torch.device, vocab: int) -> int:
        cap = self.candidate_cap
        if cap == "auto":
            cap = DEFAULT_CPU_CANDIDATES if device.type == "cpu" else None
        return vocab if cap is None else min(int(cap), vocab)

    def _draw(
        self,
        scores: torch.Tensor,
        ids: torch.Tensor | None,
        log_total: torch.Tensor,
        rows: torch.Tensor,
        split: tuple[torch.Tensor, torch.Tensor],
        batch: SamplingBatch,
    ) -> torch.Tensor:
        """One token per row from ``softmax(scores)``; ``ids`` maps columns to token ids (``None``: identity).

        ``scores``: ``(n, k)`` float32; ``log_total``: ``(n, 1)`` their logsumexp; ``rows``: ``(n,)`` their
        batch rows; ``split``: positions (into the ``n`` rows) drawn by the seeded hash / by the generator.
        """
        seeded, plain = split
        column = torch.empty(scores.shape[0], dtype=torch.int64, device=scores.device)
        if seeded.numel():
            part_ids = None if ids is None else ids[seeded]
            column.index_copy_(0, seeded, gumbel_argmax(scores[seeded], self._row_state(batch, rows[seeded]), part_ids))
        if plain.numel():
            weights = torch.exp(scores[plain] - log_total[plain])
            column.index_copy_(0, plain, ops.inverse_cdf_sample(weights, self._uniform(plain.numel(), scores.device)))
        return column if ids is None else ids.gather(1, column.unsqueeze(1)).squeeze(1)

    # ------------------------------------------------------------------ logprobs

    @staticmethod
    def _fill_logprobs(output: SamplerOutput, logprobs: torch.Tensor, batch: SamplingBatch) -> None:
        rows = batch.logprob_rows
        n_rows = len(batch)
        top_n = batch.max_top_logprobs or 0
        chosen, rank, top_values, top_ids = ops.gather_logprobs(logprobs, output.token_ids[rows], top_n)
        device = logprobs.device
        output.logprobs = torch.full((n_rows,), float("nan"), device=device).index_copy_(0, rows, chosen)
        output.ranks = torch.zeros(n_rows, dtype=torch.int64, device=device).index_copy_(0, rows, rank)
        if batch.max_top_logprobs is not None:
            beyond = torch.arange(top_ids.shape[1], device=device) >= batch.top_logprobs_n[rows].unsqueeze(1)
            top_values = top_values.masked_fill(beyond, float("nan"))
            top_ids = top_ids.masked_fill(beyond, -1)
            output.top_logprobs = torch.full((n_rows, top_values.shape[1]), float("nan"), device=device)
            output.top_logprobs.index_copy_(0, rows, top_values)
            output.top_ids = torch.full((n_rows, top_ids.shape[1]), -1, dtype=torch.int64, device=device)
            output.top_ids.index_copy_(0, rows, top_ids)
        if batch.token_ids_logprobs is not None:
            wanted = batch.token_ids_logprobs[rows]
            values = logprobs.gather(1, wanted.clamp(min=0)).masked_fill(wanted < 0, float("nan"))
            output.token_ids_logprobs = torch.full(
                (n_rows, wanted.shape[1]), float("nan"), device=device
            ).index_copy_(0, rows, values)


@dataclass(frozen=True)
class _LogprobRows:
    """The logprob rows of one kind (raw or processed modes), as device tensors and host facts.

    Attributes:
        raw: the rows' modes are raw (else processed).
        positions: ``(n,)`` int64, the rows' places in ``batch.logprob_rows``.
        rows: ``(n,)`` int64, their batch rows.
        take_logs: ``(n, 1)`` bool, log-softmax the scores (``*_logprobs``), else keep them (``*_logits``).
        sampled: ``(n, 1)`` bool, non-greedy rows; ``any_sampled``, ``any_filtered`` (a sampled row with
            top-k, top-p or min-p) and ``k_max`` (the largest top-k) are known on the host.
    """

    raw: bool
    positions: torch.Tensor
    rows: torch.Tensor
    take_logs: torch.Tensor
    sampled: torch.Tensor
    any_sampled: bool
    any_filtered: bool
    k_max: int

    @classmethod
    def of(cls, batch: SamplingBatch, modes: list[LogprobsMode], raw: bool) -> "_LogprobRows":
        """The rows among ``batch.logprob_row_list`` (modes in that order) whose mode is raw / processed."""
        positions = [i for i, mode in enumerate(modes) if mode.is_raw == raw]
        rows = [batch.logprob_row_list[i] for i in positions]
        params = [batch.params[row] for row in rows]
        sampled = [not p.is_greedy for p in params]
        flags = lambda values: torch.tensor(values, dtype=torch.bool, device=batch.device).unsqueeze(1)  # noqa: E731
        return cls(
            raw=raw,
            positions=torch.tensor(positions, dtype=torch.int64, device=batch.device),
            rows=torch.tensor(rows, dtype=torch.int64, device=batch.device),
            take_logs=flags([not modes[i].is_logits for i in positions]),
            sampled=flags(sampled),
            any_sampled=any(sampled),
            any_filtered=any(p.needs_filter and not p.is_greedy for p in params),
            k_max=max(batch.top_k_list[row] for row in rows),
        )


def _as_sampled(scores: torch.Tensor, kind: _LogprobRows, batch: SamplingBatch) -> torch.Tensor:
    """The processed scores ``(n, vocab)`` of ``kind``'s rows as they were drawn from: divided by the
    temperature, then top-k → top-p → min-p on whole rows (the readable full-row filters, which the
    tests hold equal to the candidate view the sampler draws with). Greedy rows are returned as given."""
    if not kind.any_sampled:
        return scores
    rows = kind.rows
    tempered = ops.apply_temperature(scores.clone(), batch.temperature[rows])
    if kind.any_filtered:
        tempered = ops.apply_top_k(tempered, batch.top_k[rows], k_max=kind.k_max)
        tempered = ops.apply_top_p(tempered, batch.top_p[rows])
        tempered = ops.apply_min_p(tempered, batch.min_p[rows])
    return torch.where(kind.sampled, tempered, scores)


def prompt_logprobs(
    logits: torch.Tensor, prompt_token_ids: torch.Tensor, top_n: int, mode: LogprobsMode | str = LogprobsMode.RAW_LOGPROBS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logprobs of a prompt's tokens from the logits the model gave at the positions before them.

    Args:
        logits: ``(m, vocab)`` float, the logits at prompt positions ``0 .. m-1`` (position ``j``
            predicts prompt token ``j + 1``).
        prompt_token_ids: ``(m,)`` int64, prompt tokens ``1 .. m``.
        top_n: how many top entries per position.
        mode: raw and processed modes are the same here; ``*_logits`` modes give the logits.

    Returns:
        ``(logprob (m,), rank (m,), top_values (m, top_n), top_ids (m, top_n))`` as
        :func:`grammask.sampler.ops.gather_logprobs`.
    """
    mode = LogprobsMode.parse("mode", mode)
    values = logits.to(torch.float32) if mode.is_logits else ops.log_softmax_rows(logits)
    return ops.gather_logprobs(values, prompt_token_ids.to(torch.int64), top_n)
