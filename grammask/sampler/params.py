"""Per-request sampling parameters, validated on construction.

Defaults and ranges follow vLLM and SGLang where they agree (temperature 1.0, top_p 1.0, top_k -1 =
off, min_p 0, frequency / presence penalty in [-2, 2], repetition penalty 1.0 = off, greedy below
``temperature < 1e-6``). Where they differ, the choices are:

- ``max_new_tokens`` defaults to ``None`` (no limit of our own; the engine's context length rules),
  rather than vLLM's 16 or SGLang's 128.
- ``repetition_penalty`` accepts any positive value (vLLM) rather than SGLang's [0, 2].
- ``logit_bias`` keys are token ids (int, or a decimal string as in the OpenAI API), values in
  [-100, 100] (OpenAI's range); an infinite bias is refused (it would defeat the grammar mask).
- ``seed`` must lie in ``[0, 2**63)`` (it is hashed as 64 bits, see :mod:`grammask.kernels.gumbel_sample`).
- ``logprobs`` (top-n) is at most :data:`MAX_LOGPROBS`.

What a request's output must obey is not a sampling parameter: it is a spec (:mod:`grammask.grammars.spec`),
carried beside these parameters (``grammask.openai.spec_from_request`` reads it from a request); the
sampler only sees the bitmask the grammar layer fills.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import regex

from grammask.errors import InvalidParameterError

__all__ = ["GREEDY_EPS", "MAX_BEST_OF", "MAX_LOGPROBS", "LogprobsMode", "ProcessorSpec", "SamplingParams"]

GREEDY_EPS = 1e-6
"""A temperature below this is greedy decoding (argmax)."""
MAX_LOGPROBS = 1024
"""The largest ``logprobs`` (top-n) a request may ask for."""
MAX_BEST_OF = 128
"""The largest ``best_of`` (and so ``n``) a request may ask for."""
MAX_SEED = 2**63
MAX_ABS_BIAS = 100.0
MAX_ABS_LINEAR_PENALTY = 2.0


class LogprobsMode(str, enum.Enum):
    """What the returned logprobs describe (vLLM's names and meanings).

    ``RAW_LOGPROBS``: ``log_softmax`` of the logits as the model gave them, before the grammar mask and
    every other stage (what the model itself thinks; the default, as in vLLM). ``RAW_LOGITS``: those
    logits themselves. ``PROCESSED_LOGPROBS``: ``log_softmax`` of the distribution the token was
    drawn from: after the mask, penalties, logit bias, processors, temperature and top-k / top-p /
    min-p (greedy rows skip temperature and the filters, as in vLLM); tokens outside it get ``-inf``.
    ``PROCESSED_LOGITS``: those processed logits. Prompt logprobs are the same in raw and processed
    modes (prompt tokens go through no sampling stage); the ``*_LOGITS`` modes give logits there too.
    """

    RAW_LOGPROBS = "raw_logprobs"
    RAW_LOGITS = "raw_logits"
    PROCESSED_LOGPROBS = "processed_logprobs"
    PROCESSED_LOGITS = "processed_logits"

    @property
    def is_raw(self) -> bool:
        return self in (LogprobsMode.RAW_LOGPROBS, LogprobsMode.RAW_LOGITS)

    @property
    def is_logits(self) -> bool:
        return self in (LogprobsMode.RAW_LOGITS, LogprobsMode.PROCESSED_LOGITS)

    @classmethod
    def parse(cls, field_name: str, value: "LogprobsMode | str") -> "LogprobsMode":
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in cls)
            raise InvalidParameterError(field_name, value, f"one of {allowed}") from None


@dataclass(frozen=True)
class ProcessorSpec:
    """A logits processor named in a request: a registry name and JSON-like parameters (never code)."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)


def _as_tuple_of_str(field_name: str, value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    items = (value,) if isinstance(value, str) else tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise InvalidParameterError(field_name, value, "a non-empty string or a list of non-empty strings")
    return items


def _as_token_ids(field_name: str, value: Sequence[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)):
        raise InvalidParameterError(field_name, value, "a list of token ids (non-negative ints)")
    items = tuple(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InvalidParameterError(field_name, value, "a list of token ids (non-negative ints)")
    return items


def _check_range(field_name: str, value: Any, low: float, high: float, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidParameterError(field_name, value, allowed)
    if not low <= value <= high:
        raise InvalidParameterError(field_name, value, allowed)


def _check_int(field_name: str, value: Any, low: int, allowed: str, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidParameterError(field_name, value, allowed)


def _normalise_bias(value: Mapping[Any, float] | None) -> dict[int, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidParameterError("logit_bias", value, "a mapping of token id -> bias")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise InvalidParameterError("logit_bias", {key: amount}, "token ids (int or decimal string) as keys") from None
        if isinstance(key, bool) or token < 0:
            raise InvalidParameterError("logit_bias", {key: amount}, "non-negative token ids as keys")
        allowed = f"finite biases in [-{MAX_ABS_BIAS:g}, {MAX_ABS_BIAS:g}]"
        _check_range("logit_bias", amount, -MAX_ABS_BIAS, MAX_ABS_BIAS, allowed)
        bias[token] = float(amount)
    return bias


def _normalise_processors(value: Sequence[ProcessorSpec | Mapping[str, Any]] | None) -> tuple[ProcessorSpec, ...]:
    from grammask.sampler.processors import registered_processors  # the registry lives beside the processors

    specs: list[ProcessorSpec] = []
    for item in value or ():
        if isinstance(item, ProcessorSpec):
            spec = item
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("params") or {}, Mapping):
            spec = ProcessorSpec(item["name"], dict(item.get("params") or {}))
        else:
            raise InvalidParameterError("logits_processors", item, "{'name': <registered name>, 'params': {...}}")
        if spec.name not in registered_processors():
            names = ", ".join(sorted(registered_processors()))
            raise InvalidParameterError("logits_processors", spec.name, f"one of the registered processors: {names}")
        if not isinstance(spec.params, Mapping):
            raise InvalidParameterError("logits_processors", spec.params, "a JSON object of parameters")
        specs.append(spec)
    return tuple(specs)


@dataclass(frozen=True)
class SamplingParams:
    """How one request is sampled and when it stops.

    Attributes:
        temperature: >= 0; below :data:`GREEDY_EPS` the request is greedy (argmax).
        top_p: in (0, 1]; 1 = off. Nucleus over the top-k-renormalised distribution.
        top_k: -1 = off, else >= 1.
        min_p: in [0, 1]; 0 = off. Keeps tokens with ``p >= min_p * p_max``.
        frequency_penalty, presence_penalty: in [-2, 2]; subtracted per occurrence / once for every token
            generated so far (output tokens only, as in OpenAI and vLLM).
        repetition_penalty: > 0; 1 = off. Divides positive / multiplies negative logits of every token seen
            in the prompt or the output (as in vLLM and transformers).
        min_new_tokens: EOS (unless ``ignore_eos``) and ``stop_token_ids`` are blocked before this many tokens.
        max_new_tokens: ``None`` or >= 1.
        stop: strings that end the output when they appear (also across token boundaries).
        stop_token_ids: token ids that end the output.
        stop_regex: patterns (``regex`` module syntax) that end the output when they match.
        ignore_eos: do not stop at EOS.
        no_stop_trim: keep the matched stop text in the output.
        logit_bias: token id -> bias added to its logit.
        seed: ``None`` (torch generator) or an int in ``[0, 2**63)``: reproducible whatever the batch.
        logprobs: ``None`` (none) or the number of top logprobs to return (0 = the chosen token's only).
        token_ids_logprobs: token ids whose logprobs are returned at every step.
        logprobs_mode: what those logprobs describe (:class:`LogprobsMode`, by value or name);
            ``None``: the sampler's default (``raw_logprobs`` unless the Sampler was built otherwise).
        prompt_logprobs: ``None`` or the number of top logprobs returned for every prompt token after
            the first (0 = the prompt token's own only); computed by the caller that runs the prompt
            (:func:`grammask.generate_json` does).
        n: number of completions returned for the prompt.
        best_of: ``None`` (= ``n``) or how many completions to draw, ``>= n``; the ``n`` with the highest
            cumulative logprob (of the chosen tokens, in this request's ``logprobs_mode``) are returned.
            An engine fans a request out into :meth:`sample_params` rows.
        logits_processors: registered processors by name, with JSON parameters.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    max_new_tokens: int | None = None
    stop: str | Sequence[str] | None = None
    stop_token_ids: Sequence[int] | None = None
    stop_regex: str | Sequence[str] | None = None
    ignore_eos: bool = False
    no_stop_trim: bool = False
    logit_bias: Mapping[Any, float] | None = None
    seed: int | None = None
    logprobs: int | None = None
    token_ids_logprobs: Sequence[int] | None = None
    logprobs_mode: LogprobsMode | str | None = None
    prompt_logprobs: int | None = None
    n: int = 1
    best_of: int | None = None
    logits_processors: Sequence[ProcessorSpec | Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        self._validate_sampling()
        self._validate_penalties()
        self._validate_lengths()
        self._validate_stops()
        self._validate_outputs()
        object.__setattr__(self, "logit_bias", _normalise_bias(self.logit_bias))
        object.__setattr__(self, "logits_processors", _normalise_processors(self.logits_processors))

    def _validate_sampling(self) -> None:
        _check_range("temperature", self.temperature, 0.0, math.inf, "a finite number >= 0 (below 1e-6 is greedy)")
        _check_range("top_p", self.top_p, 0.0, 1.0, "a number in (0, 1]")
        if self.top_p == 0:
            raise InvalidParameterError("top_p", self.top_p, "a number in (0, 1] (use temperature=0 for greedy)")
        if self.top_k != -1:
            _check_int("top_k", self.top_k, 1, "-1 (off) or an int >= 1")
        _check_range("min_p", self.min_p, 0.0, 1.0, "a number in [0, 1]")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < MAX_SEED
        ):
            raise InvalidParameterError("seed", self.seed, "None or an int in [0, 2**63)")

    def _validate_penalties(self) -> None:
        limit = MAX_ABS_LINEAR_PENALTY
        for name in ("frequency_penalty", "presence_penalty"):
            _check_range(name, getattr(self, name), -limit, limit, f"a number in [-{limit:g}, {limit:g}]")
        _check_range("repetition_penalty", self.repetition_penalty, 0.0, math.inf, "a finite number > 0 (1 = off)")
        if self.repetition_penalty == 0:
            raise InvalidParameterError("repetition_penalty", 0, "a finite number > 0 (1 = off)")

    def _validate_lengths(self) -> None:
        _check_int("min_new_tokens", self.min_new_tokens, 0, "an int >= 0")
        _check_int("max_new_tokens", self.max_new_tokens, 1, "None or an int >= 1", optional=True)
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise InvalidParameterError(
                "min_new_tokens", self.min_new_tokens, f"at most max_new_tokens={self.max_new_tokens}"
            )
        _check_int("n", self.n, 1, "an int >= 1")
        if self.best_of is not None:
            _check_int("best_of", self.best_of, 1, f"None or an int in [n={self.n}, {MAX_BEST_OF}]")
            if not self.n <= self.best_of <= MAX_BEST_OF:
                raise InvalidParameterError("best_of", self.best_of, f"None or an int in [n={self.n}, {MAX_BEST_OF}]")

    def _validate_stops(self) -> None:
        object.__setattr__(self, "stop", _as_tuple_of_str("stop", self.stop))
        object.__setattr__(self, "stop_token_ids", _as_token_ids("stop_token_ids", self.stop_token_ids))
        patterns = _as_tuple_of_str("stop_regex", self.stop_regex)
        for pattern in patterns:
            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise InvalidParameterError("stop_regex", pattern, f"a valid regex ({exc})") from None
        object.__setattr__(self, "stop_regex", patterns)

    def _validate_outputs(self) -> None:
        _check_int("logprobs", self.logprobs, 0, f"None or an int in [0, {MAX_LOGPROBS}]", optional=True)
        if self.logprobs is not None and self.logprobs > MAX_LOGPROBS:
            raise InvalidParameterError("logprobs", self.logprobs, f"None or an int in [0, {MAX_LOGPROBS}]")
        ids = _as_token_ids("token_ids_logprobs", self.token_ids_logprobs)
        object.__setattr__(self, "token_ids_logprobs", ids or None)
        allowed = f"None or an int in [0, {MAX_LOGPROBS}]"
        _check_int("prompt_logprobs", self.prompt_logprobs, 0, allowed, optional=True)
        if self.prompt_logprobs is not None and self.prompt_logprobs > MAX_LOGPROBS:
            raise InvalidParameterError("prompt_logprobs", self.prompt_logprobs, allowed)
        if self.logprobs_mode is not None:
            object.__setattr__(self, "logprobs_mode", LogprobsMode.parse("logprobs_mode", self.logprobs_mode))

    # ------------------------------------------------------------------ fan-out

    @property
    def num_samples(self) -> int:
        """How many completions are drawn (``best_of``, else ``n``)."""
        return self.best_of if self.best_of is not None else self.n

    def sample_params(self) -> list["SamplingParams"]:
        """The parameters of each of the :attr:`num_samples` independent completions, in sample order:
        ``n=1``, no ``best_of``, and the seed of sample ``i`` is ``(seed + i) mod 2**63`` (vLLM's
        derivation: sample ``i`` alone is reproduced by ``seed + i``; unseeded samples stay unseeded).
        When ``best_of`` ranks the samples, each returns at least the chosen token's logprob."""
        ranked = self.num_samples > self.n
        logprobs = 0 if ranked and self.logprobs is None else self.logprobs
        return [
            replace(
                self, n=1, best_of=None, logprobs=logprobs,
                seed=None if self.seed is None else (self.seed + i) % MAX_SEED,
            )
            for i in range(self.num_samples)
        ]

    # ------------------------------------------------------------------ derived

    @property
    def is_greedy(self) -> bool:
        """Whether the request decodes by argmax."""
        return self.temperature < GREEDY_EPS

    @property
    def needs_filter(self) -> bool:
        """Whether top-k, top-p or min-p narrows the distribution."""
        return self.top_k != -1 or self.top_p < 1.0 or self.min_p > 0.0

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0
