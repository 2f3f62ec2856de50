"""``generate_json(schema, model)``: one call, a model, JSON that follows the schema.

The decode loop: encode the prompt(s), prefill, then per step fill one bitmask row per live sequence
from its matcher, apply it to the logits (:func:`~grammask.kernels.apply_mask`: Triton on CUDA, torch
on CPU), sample with the full :class:`~grammask.sampler.Sampler`, advance each matcher and its
:class:`~grammask.sampler.stop.StopChecker`, and feed the tokens back with the KV cache. When the
compiled grammar supports budget-aware closing (the ``fsm`` backend), each matcher gets
``max_tokens=max_new_tokens`` and the output always ends inside the budget.

Validity is never assumed: every output is parsed and checked with ``jsonschema`` (formats checked,
leap seconds as RFC 3339 allows them: :func:`grammask.schemas.validate.output_validator`).
By default an invalid output is *flagged* (``result.valid`` is false, ``result.errors`` says why and
``result.value`` is ``None``); with ``strict=True`` it raises :class:`~grammask.errors.InvalidOutputError`.
An output cut off at ``max_new_tokens`` has ``finish_reason == "length"`` and is never valid.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from grammask.errors import GrammaskError, InvalidOutputError, InvalidParameterError, InvalidSchemaError
from grammask.grammars.base import CompiledGrammar, Matcher, Unenforced
from grammask.grammars.compiler import GrammarCompiler
from grammask.grammars.fallback import FallbackMatcher
from grammask.grammars.reasoning import ReasoningMatcher
from grammask.grammars.spec import JsonSchema, Reasoning
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.sampler import NO_TOKEN, Sampler, SamplingBatch, SamplingParams
from grammask.sampler.stop import FinishReason, StopChecker
from grammask.schemas.validate import output_validator
from grammask.tokenizer import TokenizerInfo

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "GenerationResult",
    "GenerationTimings",
    "ModelFn",
    "generate_json",
    "generate_json_batch",
    "load_schema",
]

DEFAULT_MAX_NEW_TOKENS = 256
DEFAULT_PROMPT = "Answer with one JSON value that follows this JSON Schema:\n{schema}\nJSON:"

ModelFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]
"""A plain model: ``(input_ids (batch, n) int64, past or None) -> (logits, past)``, logits
``(batch, n, vocab)`` or ``(batch, vocab)`` (the last position's), any float dtype."""


@dataclass(frozen=True)
class GenerationTimings:
    """Where the time went, for one batch.

    Attributes:
        compile_ms: compiling the grammars (0 when cached).
        prefill_ms: the first model call over the prompt(s).
        steps: decode steps run (one token per live sequence per step).
        mask_us_per_token: median per step of filling the bitmask rows and applying them to the logits.
        total_ms_per_token: mean per step of the whole step (model, mask, sampler, matchers, stop checks).
    """

    compile_ms: float
    prefill_ms: float
    steps: int
    mask_us_per_token: float
    total_ms_per_token: float


@dataclass(frozen=True)
class GenerationResult:
    """One generated output.

    Attributes:
        value: the parsed JSON value when ``valid``, else ``None``.
        instance: an instance of the pydantic model class given as schema (``None`` otherwise or when invalid).
        valid: the output parsed, ended where the grammar may end, and validates against the schema
            (``jsonschema``, formats checked).
        errors: why it is not valid (empty when valid).
        text: the generated text (without EOS), the think section included.
        reasoning: the think section's text (between its start and end tokens) when the request
            reasons (``reasoning=...``), else ``None``; the JSON is what follows it.
        token_ids: the generated token ids (with the final EOS when there was one).
        finish_reason: ``"stop"`` (EOS or a stop condition), ``"length"`` (``max_new_tokens`` reached),
            ``"no_allowed_token"``.
        backend: the backend that compiled the grammar; ``choice`` why (the ``auto`` policy).
        unenforced: keywords the grammar does not enforce (the validation still checks them).
        narrowed: places where the grammar is stricter than the schema.
        budget_aware: whether the matcher closed the output within ``max_new_tokens``.
        timings: see :class:`GenerationTimings` (shared by every result of one batch).
    """

    value: Any
    instance: Any
    valid: bool
    errors: tuple[str, ...]
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    backend: str
    choice: str
    unenforced: tuple[Unenforced, ...]
    narrowed: tuple[Unenforced, ...]
    budget_aware: bool
    timings: GenerationTimings = field(repr=False)
    reasoning: str | None = None


# ---------------------------------------------------------------------------------------------- schema


def load_schema(schema: Any) -> tuple[dict[str, Any] | bool, type | None]:
    """A schema given as a dict, a bool, a JSON string, a path (``str`` or ``Path``) or a pydantic
    model class, as ``(schema, pydantic_class_or_None)``.

    Raises:
        InvalidSchemaError: a string that is neither JSON nor an existing file, or a file that is not JSON.
        InvalidParameterError: any other type.
    """
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema(), schema
    if isinstance(schema, (dict, bool)):
        return schema, None
    if isinstance(schema, (str, os.PathLike)):
        text = str(schema)
        if isinstance(schema, str) and text.lstrip().startswith(("{", "true", "false")):
            return _parse_schema_text(text, "the schema string"), None
        path = Path(text)
        if not path.is_file():
            raise InvalidSchemaError(f"{text!r} is neither JSON nor an existing file")
        return _parse_schema_text(path.read_text(encoding="utf-8"), str(path)), None
    raise InvalidParameterError(
        "schema", type(schema).__name__, "a dict, a JSON string, a path to a .json file or a pydantic model class"
    )


def _parse_schema_text(text: str, where: str) -> dict[str, Any] | bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchemaError(f"{where} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(value, (dict, bool)):
        raise InvalidSchemaError(f"{where} holds a {type(value).__name__}; a schema is an object or a boolean")
    return value


# ---------------------------------------------------------------------------------------------- models


class _HuggingFaceModel:
    """A ``transformers`` causal LM behind ``prefill`` / ``step``: left padding, attention mask,
    position ids and the KV cache."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.vocab_size)
        self._past: Any = None
        self._mask: torch.Tensor | None = None
        self._next_position: torch.Tensor | None = None

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(prompts), width), dtype=torch.int64)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.int64)
            mask[row, width - len(prompt) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self._mask, self._next_position = mask, positions[:, -1:] + 1
        return self._call(input_ids, positions)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        assert self._mask is not None and self._next_position is not None  # prefill ran (internal order)
        self._mask = torch.cat([self._mask, self._mask.new_ones((self._mask.shape[0], 1))], dim=1)
        positions = self._next_position
        self._next_position = positions + 1
        return self._call(token_ids.to(self.device).view(-1, 1), positions)

    def _call(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=self._mask,
            position_ids=positions,
            past_key_values=self._past,
            use_cache=True,
        )
        self._past = out.past_key_values
        return out.logits[:, -1, :]


class _CallableModel:
    """A :data:`ModelFn` behind ``prefill`` / ``step``. Prompts of one batch must have equal length
    (a plain callable takes no attention mask)."""

    def __init__(self, fn: ModelFn, device: torch.device | str = "cpu") -> None:
        self.fn = fn
        self.device = torch.device(device)
        self.vocab_size: int | None = None
        self._past: Any = None

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        if len({len(p) for p in prompts}) != 1:
            lengths = sorted({len(p) for p in prompts})
            raise InvalidParameterError(
                "prompts", f"token lengths {lengths}", "prompts of equal token length for a callable model (or an HF model)"
            )
        logits = self._call(torch.tensor([list(p) for p in prompts], dtype=torch.int64, device=self.device))
        self.vocab_size = logits.shape[-1]
        return logits

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self._call(token_ids.to(self.device).view(-1, 1))

    def _call(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits, self._past = self.fn(input_ids, self._past)
        return logits[:, -1, :] if logits.dim() == 3 else logits


def _is_huggingface_model(model: Any) -> bool:
    return hasattr(model, "config") and hasattr(model, "parameters") and hasattr(model.config, "vocab_size")


def _find_tokenizer(model: Any) -> Any:
    name = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
    if not name:
        raise InvalidParameterError(
            "tokenizer",
            None,
            "a tokenizer: the model has no name_or_path to load one from (a randomly initialised model?); "
            "pass tokenizer=<a transformers tokenizer>",
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a test extra
        raise ImportError("finding a model's tokenizer needs transformers: pip install transformers") from exc
    return AutoTokenizer.from_pretrained(name)


def _encode(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.encode(text) if hasattr(tokenizer, "encode") else None
    if ids is None:
        raise InvalidParameterError("tokenizer", type(tokenizer).__name__, "a tokenizer with encode(text) -> ids")
    ids = list(ids.ids if hasattr(ids, "ids") else ids)
    if not ids:
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise InvalidParameterError("prompt", text, "a prompt that encodes to at least one token")
        ids = [bos]
    return ids


# ---------------------------------------------------------------------------------------------- public API


def generate_json(
    schema: Any,
    model: Any,
    tokenizer: Any = None,
    *,
    prompt: str | None = None,
    sampling: SamplingParams | None = None,
    backend: str = "auto",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    strict: bool = False,
    compiler: GrammarCompiler | None = None,
    reasoning: str | None = None,
) -> GenerationResult:
    """Generate one JSON value that follows ``schema``.

    Args:
        schema: a dict, a JSON string, a path to a ``.json`` file, or a pydantic model class (then
            ``result.instance`` is an instance of it).
        model: a ``transformers`` causal LM, or any :data:`ModelFn` ``(input_ids, past) -> (logits, past)``.
        tokenizer: a ``transformers`` tokenizer (anything with ``encode``). Found from an HF model's
            ``name_or_path`` when omitted; required for a callable or a randomly initialised model.
        prompt: the prompt text; default: an instruction that quotes the schema.
        sampling: sampling parameters (default greedy); their ``max_new_tokens`` is replaced by ours.
        backend: ``"auto"``, ``"fsm"`` or ``"xgrammar"``.
        max_new_tokens: the token budget, EOS included.
        strict: raise :class:`~grammask.errors.InvalidOutputError` instead of flagging an invalid output.
        compiler: a :class:`GrammarCompiler` to reuse (its tokenizer must match the model); it caches
            compiled grammars between calls. Its backend is used (``backend`` is then ignored).
        reasoning: a reasoning model's family (``"qwen3"``, ``"deepseek_r1"``): the output thinks
            freely inside its think section, then writes the JSON (:class:`~grammask.Reasoning`);
            ``result.reasoning`` holds the section's text. A thinking budget composes: pass
            ``sampling=SamplingParams(logits_processors=[{"name": "thinking_budget", ...}])``.

    Returns:
        a :class:`GenerationResult`. An invalid output is flagged (``valid=False``, ``value=None``, the
        reason in ``errors``) unless ``strict``. A cut-off output (``finish_reason="length"``) is never valid.

    Raises:
        InvalidSchemaError, UnsupportedFeatureError, CompileLimitError: the schema cannot be compiled
            (the message names why and where).
        InvalidParameterError: a bad argument (e.g. ``max_new_tokens`` below the shortest valid output
            under budget-aware closing, or no tokenizer).
        InvalidOutputError: ``strict`` and the output is not valid.
    """
    prompts = None if prompt is None else [prompt]
    return generate_json_batch(
        [schema], model, tokenizer, prompts=prompts, sampling=sampling, backend=backend,
        max_new_tokens=max_new_tokens, strict=strict, compiler=compiler, reasoning=reasoning,
    )[0]


def generate_json_batch(
    schemas: Sequence[Any],
    model: Any,
    tokenizer: Any = None,
    *,
    prompts: Sequence[str] | None = None,
    sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    backend: str = "auto",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    strict: bool = False,
    compiler: GrammarCompiler | None = None,
    reasoning: str | None = None,
) -> list[GenerationResult]:
    """Generate for many schemas (and prompts) as one batch, one matcher per row.

    Row ``i`` uses ``schemas[i]`` and ``prompts[i]``; ``sampling`` is one for all or one per row. An HF
    model gets left-padded prompts with an attention mask and position ids; a callable model needs
    prompts of equal token length. Rows that finish leave the sampled batch
    (:meth:`SamplingBatch.filter`); the model keeps stepping them until every row is done.
    Arguments and errors as :func:`generate_json`; returns one result per row, in order.
    """
    if not schemas:
        return []
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InvalidParameterError("max_new_tokens", max_new_tokens, "an int >= 1")
    loaded = [load_schema(s) for s in schemas]
    prompt_texts = _prompt_texts(prompts, [s for s, _ in loaded])
    params = _row_params(sampling, len(loaded), max_new_tokens)
    if tokenizer is None:
        if not _is_huggingface_model(model):
            raise InvalidParameterError("tokenizer", None, "a tokenizer (required with a callable model)")
        tokenizer = _find_tokenizer(model)
    token_prompts = [_encode(tokenizer, text) for text in prompt_texts]
    specs = [JsonSchema(s) for s, _ in loaded]
    if reasoning is not None:
        specs = [Reasoning.for_model(reasoning, spec) for spec in specs]
    run = _BatchRun(model, tokenizer, specs, params, token_prompts, max_new_tokens)
    compiler = compiler or run.default_compiler(backend)
    # Under "auto", a limit the fsm backend reaches mid-decode moves that row's matcher to xgrammar
    # (grammask.grammars.fallback); the result reports the grammar the row ended on.
    compiled, loop = run(compiler)
    compile_ms, prefill_ms = run.compile_ms, run.prefill_ms
    matchers = loop.matchers
    timings = loop.timings(compile_ms, prefill_ms)
    results = [
        _result(schema, cls, c, m, stop, timings, max_new_tokens)
        for (schema, cls), c, m, stop in zip(loaded, compiled, matchers, loop.stops)
    ]
    if strict:
        for r in results:
            if not r.valid:
                raise InvalidOutputError(r.text, "; ".join(r.errors), r.finish_reason)
    return results


# ---------------------------------------------------------------------------------------------- helpers


class _BatchRun:
    """Prefill, compile and decode one batch with a given compiler (callable again to rerun)."""

    def __init__(self, model: Any, tokenizer: Any, specs: list[JsonSchema | Reasoning], params: list[SamplingParams],
                 token_prompts: list[list[int]], max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.specs = model, tokenizer, specs
        self.params, self.token_prompts, self.max_new_tokens = params, token_prompts, max_new_tokens
        self.compile_ms = self.prefill_ms = 0.0

    def default_compiler(self, backend: str) -> GrammarCompiler:
        if _is_huggingface_model(self.model):
            vocab_size = int(self.model.config.vocab_size)
        else:  # a plain callable: its logits say how wide the vocabulary is
            with torch.no_grad():
                vocab_size = _CallableModel(self.model).prefill(self.token_prompts, 0).shape[-1]
        return _compiler_for(self.tokenizer, vocab_size, backend)

    def __call__(self, compiler: GrammarCompiler) -> tuple[list[CompiledGrammar], "_DecodeLoop"]:
        runner = _HuggingFaceModel(self.model) if _is_huggingface_model(self.model) else _CallableModel(self.model)
        # no_grad, not inference_mode: buffers that the mask kernel or sampler cache on first use must
        # stay ordinary tensors, usable later outside any mode.
        with torch.no_grad():
            start = time.perf_counter()
            compiled = [compiler.compile(spec) for spec in self.specs]
            matchers = [_matcher(c, self.max_new_tokens) for c in compiled]
            self.compile_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            logits = runner.prefill(self.token_prompts, pad_id=_pad_id(self.tokenizer))
            self.prefill_ms = (time.perf_counter() - start) * 1e3
            loop = _DecodeLoop(runner, compiler.tokenizer_info, matchers, self.params, self.token_prompts)
            loop.run(logits)
        return compiled, loop


def _prompt_texts(prompts: Sequence[str] | None, schemas: list[Any]) -> list[str]:
    if prompts is None:
        return [DEFAULT_PROMPT.format(schema=json.dumps(s)) for s in schemas]
    if isinstance(prompts, str) or len(prompts) != len(schemas):
        raise InvalidParameterError("prompts", prompts, f"a list of {len(schemas)} strings (one per schema)")
    return list(prompts)


def _row_params(sampling: Any, rows: int, max_new_tokens: int) -> list[SamplingParams]:
    if sampling is None:
        sampling = SamplingParams(temperature=0.0)
    per_row = [sampling] * rows if isinstance(sampling, SamplingParams) else list(sampling)
    if len(per_row) != rows or not all(isinstance(p, SamplingParams) for p in per_row):
        raise InvalidParameterError("sampling", sampling, f"a SamplingParams or a list of {rows}")
    return [dataclasses.replace(p, max_new_tokens=max_new_tokens) for p in per_row]


def _pad_id(tokenizer: Any) -> int:
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


_COMPILERS: dict[tuple[int, int, str], tuple[Any, GrammarCompiler]] = {}
_MAX_COMPILERS = 4


def _compiler_for(tokenizer: Any, vocab_size: int, backend: str) -> GrammarCompiler:
    """A compiler for this tokenizer and logits width, kept (a few, by tokenizer object) so repeated
    calls reuse the TokenizerInfo and the compiled grammars."""
    key = (id(tokenizer), vocab_size, backend)
    hit = _COMPILERS.get(key)
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size), backend=backend)
    while len(_COMPILERS) >= _MAX_COMPILERS:
        _COMPILERS.pop(next(iter(_COMPILERS)))
    _COMPILERS[key] = (tokenizer, compiler)
    return compiler


def _matcher(compiled: CompiledGrammar, max_new_tokens: int) -> Matcher:
    return compiled.matcher(max_tokens=max_new_tokens) if compiled.supports_budget else compiled.matcher()


class _DecodeLoop:
    """The per-step loop over one batch; records per-step mask and total times."""

    def __init__(
        self,
        runner: Any,
        info: TokenizerInfo,
        matchers: list[Matcher],
        params: list[SamplingParams],
        prompts: list[list[int]],
    ) -> None:
        self.runner = runner
        self.matchers = matchers
        self.stops = [StopChecker(p, info) for p in params]
        self.batch = SamplingBatch.build(
            params, vocab_size=info.vocab_size, tokenizer=info, prompt_token_ids=prompts, device=runner.device
        )
        self.sampler = Sampler()
        self.live = list(range(len(matchers)))
        self.vocab_size = info.vocab_size
        self.filler_id = info.eos_ids[0]
        self.mask_seconds: list[float] = []
        self.step_seconds: list[float] = []

    def run(self, logits: torch.Tensor) -> None:
        bitmask = allocate_token_bitmask(len(self.matchers), self.vocab_size)
        while self.live:
            start = time.perf_counter()
            logits = self._to_vocab(logits)[self.live]
            mask_start = time.perf_counter()
            rows = bitmask[: len(self.live)]
            fill_next_token_bitmask([self.matchers[i] for i in self.live], rows)
            apply_mask(logits, rows.to(logits.device, non_blocking=True))
            self.mask_seconds.append(time.perf_counter() - mask_start)
            sampled = self.sampler(logits, self.batch).token_ids
            self.batch.update(sampled)
            next_ids = self._advance(sampled.tolist())
            if self.live:
                logits = self.runner.step(next_ids)
            self.step_seconds.append(time.perf_counter() - start)

    def _to_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """``(batch, vocab_size)`` float32 logits (a model's LM head may be wider or narrower)."""
        logits = logits.float()
        width = logits.shape[-1]
        if width > self.vocab_size:
            return logits[:, : self.vocab_size]
        if width < self.vocab_size:
            pad = logits.new_full((logits.shape[0], self.vocab_size - width), float("-inf"))
            return torch.cat([logits, pad], dim=1)
        return logits

    def _advance(self, sampled: list[int]) -> torch.Tensor:
        """Advance matchers and stop checks of the live rows; drop finished rows; the next input ids
        ``(batch,)`` for every row of the model (finished rows are fed a filler token)."""
        next_ids = torch.full((len(self.matchers),), self.filler_id, dtype=torch.int64)
        keep = []
        for position, row in enumerate(self.live):
            token = sampled[position]
            if token != NO_TOKEN and not self.matchers[row].accept_token(token):
                raise GrammaskError(f"internal: the matcher rejected token {token} that its own mask allowed (row {row})")
            if self.stops[row].step(token) is None:
                keep.append(position)
                next_ids[row] = token
        if len(keep) != len(self.live):
            self.live = [self.live[p] for p in keep]
            if self.live:
                self.batch = self.batch.filter(keep)
        return next_ids

    def timings(self, compile_ms: float, prefill_ms: float) -> GenerationTimings:
        steps = len(self.step_seconds)
        return GenerationTimings(
            compile_ms=compile_ms,
            prefill_ms=prefill_ms,
            steps=steps,
            mask_us_per_token=statistics.median(self.mask_seconds) * 1e6 if steps else 0.0,
            total_ms_per_token=sum(self.step_seconds) / steps * 1e3 if steps else 0.0,
        )


def _result(
    schema: Any,
    pydantic_class: type | None,
    compiled: CompiledGrammar,
    matcher: Matcher,
    stop: StopChecker,
    timings: GenerationTimings,
    max_new_tokens: int,
) -> GenerationResult:
    finish = stop.finish.reason if stop.finish is not None else FinishReason.LENGTH
    thinking, content = _split_reasoning(matcher, stop, compiled.tokenizer_info)
    value, instance, errors = _validate(schema, pydantic_class, content, finish, matcher, max_new_tokens)
    if isinstance(matcher, FallbackMatcher):
        compiled = matcher.grammar
    return GenerationResult(
        value=value if not errors else None,
        instance=instance if not errors else None,
        valid=not errors,
        errors=tuple(errors),
        text=stop.text,
        token_ids=tuple(stop.token_ids),
        finish_reason=finish.value,
        backend=compiled.backend,
        choice=compiled.choice,
        unenforced=compiled.unenforced,
        narrowed=compiled.narrowed,
        budget_aware=compiled.supports_budget,
        timings=timings,
        reasoning=thinking,
    )


def _split_reasoning(matcher: Matcher, stop: StopChecker, info: TokenizerInfo) -> tuple[str | None, str]:
    """``(think section text or None, the text the structure covers)``."""
    if not isinstance(matcher, ReasoningMatcher):
        return None, stop.text
    ids = list(stop.token_ids)
    offset = matcher.content_offset
    if offset is None:  # still thinking when generation stopped
        return info.decode(ids).decode("utf-8", "replace"), ""
    end = ids.index(matcher.end_token_id) if matcher.end_token_id in ids[:offset] else offset
    thinking = info.decode(ids[:end]).decode("utf-8", "replace")
    return thinking, info.decode(ids[offset:]).decode("utf-8", "replace")


def _validate(
    schema: Any, pydantic_class: type | None, text: str, finish: FinishReason, matcher: Matcher, max_new_tokens: int
) -> tuple[Any, Any, list[str]]:
    """``(value, instance, errors)``; ``errors`` empty exactly when the output is valid."""
    if finish is FinishReason.LENGTH:
        return None, None, [f"cut off at max_new_tokens={max_new_tokens} before the structure ended"]
    if finish is FinishReason.NO_ALLOWED_TOKEN:
        return None, None, ["the grammar allowed no next token"]
    if not matcher.is_terminated():
        return None, None, ["stopped before the grammar accepted its end (a stop condition cut the output)"]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, None, [f"not JSON: {exc.msg} at character {exc.pos}"]
    errors = [
        f"at '{'/'.join(map(str, e.absolute_path)) or '/'}': {e.message}"
        for e in output_validator(schema).iter_errors(value)
    ]
    if errors or pydantic_class is None:
        return value, None, errors
    try:
        return value, pydantic_class.model_validate(value), []
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        return value, None, [f"pydantic: {exc}"]
