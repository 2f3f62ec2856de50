"""The batched tensor form of many requests' :class:`SamplingParams`, built once per batch.

Static parts (per-row parameter tensors, row groups, shortcut flags, logit bias, logprob requests) are a
pure function of the parameters and are rebuilt by :meth:`SamplingBatch.filter` / :meth:`merge`; dynamic
parts (how many tokens each row generated, penalty counts, processor state, the output ids processors
read) are carried over row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from grammask.checks import MAX_VOCAB_SIZE, as_device, as_int, check_instance, check_tensor, same_device
from grammask.errors import InvalidParameterError
from grammask.sampler.params import SamplingParams
from grammask.sampler.penalties import MinTokensBlock, PenaltyState
from grammask.sampler.processors import LogitsProcessor, ProcessorContext, create_processor
from grammask.tokenizer import TokenizerInfo

__all__ = ["RowGroups", "SamplingBatch"]


def _index(rows: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(rows), dtype=torch.int64, device=device)


@dataclass(frozen=True)
class RowGroups:
    """Which rows take which sampling path (host lists and their device index tensors).

    ``greedy``: argmax. ``full``: random over the whole (masked, penalised) distribution.
    ``filtered``: random after top-k / top-p / min-p. ``*_seeded`` flags say, per position in the group,
    whether the row draws with the seeded hash (True) or the torch generator (False); ``*_split`` holds
    the same as two device index tensors (seeded positions, generator positions), built once.
    """

    greedy: list[int]
    full: list[int]
    filtered: list[int]
    full_seeded: list[bool]
    filtered_seeded: list[bool]
    greedy_index: torch.Tensor
    full_index: torch.Tensor
    filtered_index: torch.Tensor
    full_split: tuple[torch.Tensor, torch.Tensor]
    filtered_split: tuple[torch.Tensor, torch.Tensor]

    @classmethod
    def of(cls, params: Sequence[SamplingParams], device: torch.device) -> "RowGroups":
        greedy = [i for i, p in enumerate(params) if p.is_greedy]
        full = [i for i, p in enumerate(params) if not p.is_greedy and not p.needs_filter]
        filtered = [i for i, p in enumerate(params) if not p.is_greedy and p.needs_filter]
        return cls(
            greedy=greedy,
            full=full,
            filtered=filtered,
            full_seeded=[params[i].seed is not None for i in full],
            filtered_seeded=[params[i].seed is not None for i in filtered],
            greedy_index=_index(greedy, device),
            full_index=_index(full, device),
            filtered_index=_index(filtered, device),
            full_split=seeded_split([params[i].seed is not None for i in full], device),
            filtered_split=seeded_split([params[i].seed is not None for i in filtered], device),
        )


def seeded_split(seeded: Sequence[bool], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (within a group) of the seeded rows and of the others, as int64 index tensors."""
    return (
        _index([i for i, s in enumerate(seeded) if s], device),
        _index([i for i, s in enumerate(seeded) if not s], device),
    )


@dataclass
class SamplingBatch:
    """Per-request sampling parameters as tensors on the logits' device.

    Build with :meth:`build`. After every step call :meth:`update` with the sampled ids.

    Attributes:
        params: one :class:`SamplingParams` per row.
        vocab_size: the logits width.
        temperature: ``(batch,)``, float32; 1.0 for greedy rows (they never divide).
        top_k: ``(batch,)``, int64; ``vocab_size`` when off (``top_k_list`` on the host).
        top_p: ``(batch,)``, float32; 1.0 when off.
        min_p: ``(batch,)``, float32; 0.0 when off.
        seeds: ``(batch,)``, int64; 0 for unseeded rows.
        groups: the greedy / full / filtered row groups.
        all_greedy, needs_filter, needs_penalties, has_seeded, has_processors: shortcut flags.
        bias_rows, bias_ids, bias_values: ``(nnz,)`` the logit bias as coordinates (int64, int64, float32).
        logprob_rows: ``(l,)`` int64, rows that asked for logprobs (``logprob_row_list`` on the host);
            ``max_top_logprobs`` the largest top-n.
        top_logprobs_n: ``(batch,)`` int64, each row's top-n (0 when none).
        token_ids_logprobs: ``(batch, m)`` int64, ids whose logprobs each row asked for, padded with -1.
        output_len: ``(batch,)`` int64, tokens generated so far (the seeded draw's position).
        penalties: the penalty state of the rows with penalties, or ``None``.
        min_tokens: the stop-token block of rows with ``min_new_tokens``, or ``None``.
        processors: per row, its logits processors.
        output_ids: per row, the ids generated so far (kept only when the batch has processors).
        memo: what a sampler derives from ``params`` once per batch (e.g. index tensors on the device,
            so that a step copies nothing from the host), by the sampler's key.
    """

    params: tuple[SamplingParams, ...]
    vocab_size: int
    device: torch.device
    eos_ids: tuple[int, ...]
    tokenizer: TokenizerInfo | None
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_k_list: list[int]
    top_p: torch.Tensor
    min_p: torch.Tensor
    seeds: torch.Tensor
    groups: RowGroups
    all_greedy: bool
    needs_filter: bool
    needs_penalties: bool
    has_seeded: bool
    has_processors: bool
    bias_rows: torch.Tensor
    bias_ids: torch.Tensor
    bias_values: torch.Tensor
    logprob_rows: torch.Tensor
    logprob_row_list: list[int]
    max_top_logprobs: int | None
    top_logprobs_n: torch.Tensor
    token_ids_logprobs: torch.Tensor | None
    output_len: torch.Tensor
    penalties: PenaltyState | None
    min_tokens: MinTokensBlock | None
    processors: list[list[LogitsProcessor]]
    output_ids: list[list[int]] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        *,
        vocab_size: int,
        eos_ids: Sequence[int] = (),
        prompt_token_ids: Sequence[Sequence[int]] | None = None,
        output_token_ids: Sequence[Sequence[int]] | None = None,
        tokenizer: TokenizerInfo | None = None,
        device: torch.device | str = "cpu",
    ) -> "SamplingBatch":
        """Batch ``params`` (one per row).

        Every row is one completion: a request with ``n > 1`` or ``best_of`` is refused; fan it out into
        :meth:`SamplingParams.sample_params` rows (one each, seeds derived per sample).

        Args:
            vocab_size: the logits width.
            eos_ids: the tokenizer's EOS ids (blocked by ``min_new_tokens`` unless ``ignore_eos``);
                default ``tokenizer.eos_ids`` when a tokenizer is given.
            prompt_token_ids: per row, the prompt (counts for the repetition penalty).
            output_token_ids: per row, tokens already generated (a resumed request); default none.
            tokenizer: needed by processors that look tokens up by text (thinking budget).
            device: the logits' device.

        Raises:
            InvalidParameterError: an argument of the wrong type, a token id outside ``[0, vocab_size)``,
                or per-row lists of another length than ``params``.
        """
        device = as_device("device", device)
        params = _sequence("params", params, lambda name, p: check_instance(name, p, SamplingParams, "SamplingParams"))
        vocab_size = as_int("vocab_size", vocab_size, low=1, high=MAX_VOCAB_SIZE)
        if tokenizer is not None:
            check_instance("tokenizer", tokenizer, TokenizerInfo, "a grammask TokenizerInfo or None")
        n = len(params)
        fanned = [i for i, p in enumerate(params) if p.num_samples > 1]
        if fanned:
            raise InvalidParameterError(
                "params", f"n or best_of > 1 at rows {fanned[:8]}",
                "one row per completion: fan such a request out into SamplingParams.sample_params()",
            )
        if not eos_ids and tokenizer is not None:
            eos_ids = tokenizer.eos_ids
        eos_ids = _token_ids("eos_ids", eos_ids, vocab_size)
        prompts = _per_row("prompt_token_ids", prompt_token_ids, n, vocab_size)
        outputs = _per_row("output_token_ids", output_token_ids, n, vocab_size)
        context = ProcessorContext(vocab_size=vocab_size, tokenizer=tokenizer)
        processors = [[create_processor(s.name, s.params, context) for s in p.logits_processors] for p in params]
        has_processors = any(processors)
        try:
            penalties = _build_penalties(params, prompts, outputs, vocab_size, device)
        except (RuntimeError, MemoryError) as exc:  # a vocabulary too large for the penalty state
            raise InvalidParameterError("vocab_size", vocab_size, f"a vocabulary whose penalty state fits ({exc})") from None
        return cls._assemble(
            params,
            vocab_size=vocab_size,
            device=device,
            eos_ids=eos_ids,
            tokenizer=tokenizer,
            output_len=torch.tensor([len(o) for o in outputs], dtype=torch.int64, device=device),
            penalties=penalties,
            processors=processors,
            output_ids=outputs if has_processors else [[] for _ in params],
        )

    @classmethod
    def _assemble(
        cls,
        params: tuple[SamplingParams, ...],
        *,
        vocab_size: int,
        device: torch.device,
        eos_ids: tuple[int, ...],
        tokenizer: TokenizerInfo | None,
        output_len: torch.Tensor,
        penalties: PenaltyState | None,
        processors: list[list[LogitsProcessor]],
        output_ids: list[list[int]],
    ) -> "SamplingBatch":
        """The static tensors from ``params``, with the dynamic state given."""
        floats = lambda values: torch.tensor(values, dtype=torch.float32, device=device)  # noqa: E731
        bias_rows, bias_ids, bias_values = _bias_coordinates(params, vocab_size, device)
        logprob_rows = [i for i, p in enumerate(params) if p.logprobs is not None or p.token_ids_logprobs]
        top_ns = [p.logprobs or 0 for p in params if p.logprobs is not None]
        top_k = [vocab_size if p.top_k == -1 else min(p.top_k, vocab_size) for p in params]
        return cls(
            params=params,
            vocab_size=vocab_size,
            device=device,
            eos_ids=eos_ids,
            tokenizer=tokenizer,
            temperature=floats([1.0 if p.is_greedy else p.temperature for p in params]),
            top_k=_index(top_k, device),
            top_k_list=top_k,
            top_p=floats([p.top_p for p in params]),
            min_p=floats([p.min_p for p in params]),
            seeds=_index([p.seed or 0 for p in params], device),
            groups=RowGroups.of(params, device),
            all_greedy=all(p.is_greedy for p in params),
            needs_filter=any(p.needs_filter and not p.is_greedy for p in params),
            needs_penalties=penalties is not None,
            has_seeded=any(p.seed is not None and not p.is_greedy for p in params),
            has_processors=any(processors),
            bias_rows=bias_rows,
            bias_ids=bias_ids,
            bias_values=bias_values,
            logprob_rows=_index(logprob_rows, device),
            logprob_row_list=logprob_rows,
            max_top_logprobs=max(top_ns) if top_ns else None,
            top_logprobs_n=_index([p.logprobs or 0 for p in params], device),
            token_ids_logprobs=_token_ids_logprobs(params, vocab_size, device),
            output_len=output_len,
            penalties=penalties,
            min_tokens=_build_min_tokens(params, eos_ids, vocab_size, device),
            processors=processors,
            output_ids=output_ids,
        )

    def __len__(self) -> int:
        return len(self.params)

    # ------------------------------------------------------------------ per step

    def update(self, next_token_ids: torch.Tensor) -> None:
        """Record the tokens just sampled, ``(batch,)`` int64; a negative id (no token) is not counted.

        Raises:
            InvalidParameterError: not a 1-D integer tensor of one id per row on the batch's device, or
                (checked on the CPU, where reading is free) an id at or past ``vocab_size``.
        """
        self._check_sampled(next_token_ids)
        self.output_len += (next_token_ids >= 0).to(torch.int64)
        if self.penalties is not None:
            self.penalties.update(next_token_ids)
        if self.has_processors:  # processors are host logic: one host copy per step, only for them
            for row, token in enumerate(next_token_ids.tolist()):
                if token >= 0 and self.processors[row]:
                    self.output_ids[row].append(token)

    def _check_sampled(self, ids: torch.Tensor) -> None:
        check_tensor("next_token_ids", ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise InvalidParameterError("next_token_ids.dtype", ids.dtype, "an integer dtype (torch.int64)")
        if tuple(ids.shape) != (len(self),):
            raise InvalidParameterError("next_token_ids.shape", tuple(ids.shape), f"({len(self)},), one id per row")
        if not same_device(ids.device, self.device):
            raise InvalidParameterError("next_token_ids.device", ids.device, f"the batch's device {self.device}")
        if ids.device.type == "cpu" and len(self) and int(ids.max()) >= self.vocab_size:
            raise InvalidParameterError("next_token_ids", int(ids.max()), f"ids below vocab_size={self.vocab_size}")

    # ------------------------------------------------------------------ continuous batching

    def filter(self, keep: Sequence[int]) -> "SamplingBatch":
        """A batch of rows ``keep`` (in that order): finished requests leave, state is kept."""
        keep = list(_sequence("keep", keep, as_int))
        if any(not 0 <= i < len(self) for i in keep):
            raise InvalidParameterError("keep", keep, f"row indices in [0, {len(self)})")
        penalties = None
        if self.penalties is not None:
            where = {row: pos for pos, row in enumerate(self.penalties.rows.tolist())}
            kept = [(new, where[old]) for new, old in enumerate(keep) if old in where]
            if kept:
                new_rows, positions = zip(*kept)
                penalties = self.penalties.select(_index(positions, self.device), _index(new_rows, self.device))
        return self._assemble(
            tuple(self.params[i] for i in keep),
            vocab_size=self.vocab_size,
            device=self.device,
            eos_ids=self.eos_ids,
            tokenizer=self.tokenizer,
            output_len=self.output_len[_index(keep, self.device)],
            penalties=penalties,
            processors=[self.processors[i] for i in keep],
            output_ids=[self.output_ids[i] for i in keep],
        )

    def merge(self, other: "SamplingBatch") -> "SamplingBatch":
        """This batch's rows followed by ``other``'s (same vocabulary and device)."""
        check_instance("other", other, SamplingBatch, "a SamplingBatch")
        if other.vocab_size != self.vocab_size or other.device != self.device:
            raise InvalidParameterError(
                "other", f"vocab_size={other.vocab_size}, device={other.device}",
                f"vocab_size={self.vocab_size} on {self.device}",
            )
        penalties = self.penalties
        if other.penalties is not None:
            shifted = other.penalties.select(torch.arange(other.penalties.rows.numel(), device=self.device),
                                             other.penalties.rows + len(self))
            penalties = shifted if penalties is None else penalties.concat(shifted, 0)
        return self._assemble(
            self.params + other.params,
            vocab_size=self.vocab_size,
            device=self.device,
            eos_ids=self.eos_ids or other.eos_ids,
            tokenizer=self.tokenizer or other.tokenizer,
            output_len=torch.cat([self.output_len, other.output_len]),
            penalties=penalties,
            processors=self.processors + other.processors,
            output_ids=self.output_ids + other.output_ids,
        )


# ---------------------------------------------------------------------------------------- builders


def _sequence(name: str, values: Any, check: Any) -> tuple:
    """``values`` (a list or tuple; not a string) with ``check(f"{name}[i]", value)`` applied to each."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidParameterError(name, type(values).__name__, "a list or tuple")
    return tuple(check(f"{name}[{i}]", value) for i, value in enumerate(values))


def _token_ids(name: str, ids: Any, vocab_size: int) -> tuple[int, ...]:
    checked = _sequence(name, ids, as_int)
    _check_ids_in_vocab(name, checked, vocab_size)
    return checked


def _per_row(name: str, lists: Any, rows: int, vocab_size: int) -> list[list[int]]:
    """Per-row token-id lists (``None``: empty ones), each id in ``[0, vocab_size)``."""
    if lists is None:
        return [[] for _ in range(rows)]
    checked = _sequence(name, lists, lambda item, ids: list(_token_ids(item, ids, vocab_size)))
    if len(checked) != rows:
        raise InvalidParameterError(name, f"{len(checked)} rows", f"one list per request ({rows})")
    return list(checked)


def _check_ids_in_vocab(name: str, ids, vocab_size: int) -> None:
    for token in ids:
        if not 0 <= token < vocab_size:
            raise InvalidParameterError(name, token, f"token ids in [0, {vocab_size})")


def _build_penalties(params, prompts, outputs, vocab_size: int, device: torch.device) -> PenaltyState | None:
    rows = [i for i, p in enumerate(params) if p.needs_penalties]
    if not rows:
        return None
    return PenaltyState.build(
        rows,
        [params[i].repetition_penalty for i in rows],
        [params[i].frequency_penalty for i in rows],
        [params[i].presence_penalty for i in rows],
        # the prompt only matters to the repetition penalty
        [prompts[i] if params[i].repetition_penalty != 1.0 else [] for i in rows],
        [outputs[i] for i in rows],
        vocab_size,
        device,
    )


def _build_min_tokens(params, eos_ids, vocab_size: int, device: torch.device) -> MinTokensBlock | None:
    rows, minimums, blocked = [], [], []
    for i, p in enumerate(params):
        ids = list(dict.fromkeys([*(() if p.ignore_eos else eos_ids), *p.stop_token_ids]))
        _check_ids_in_vocab("stop_token_ids", p.stop_token_ids, vocab_size)
        if p.min_new_tokens > 0 and ids:
            rows.append(i)
            minimums.append(p.min_new_tokens)
            blocked.append(ids)
    return MinTokensBlock.build(rows, minimums, blocked, device) if rows else None


def _bias_coordinates(params, vocab_size: int, device: torch.device):
    rows, ids, values = [], [], []
    for i, p in enumerate(params):
        _check_ids_in_vocab("logit_bias", p.logit_bias, vocab_size)
        for token, amount in p.logit_bias.items():
            rows.append(i)
            ids.append(token)
            values.append(amount)
    return _index(rows, device), _index(ids, device), torch.tensor(values, dtype=torch.float32, device=device)


def _token_ids_logprobs(params, vocab_size: int, device: torch.device) -> torch.Tensor | None:
    lists = [list(p.token_ids_logprobs or ()) for p in params]
    width = max((len(ids) for ids in lists), default=0)
    if width == 0:
        return None
    _check_ids_in_vocab("token_ids_logprobs", (i for ids in lists for i in ids), vocab_size)
    return _index([], device).new_tensor([ids + [-1] * (width - len(ids)) for ids in lists])
