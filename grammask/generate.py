"""``generate_json(schema, model)``: one call, a model, JSON that follows the schema;
``generate_structured(spec, model)`` for any spec (a regex, an EBNF grammar, a structural tag).

The decode loop: encode the prompt(s), prefill, then per step fill one bitmask row per live sequence
from its matcher, apply it to the logits (:func:`~grammask.kernels.apply_mask`: Triton on CUDA, torch
on CPU), sample with the full :class:`~grammask.sampler.Sampler`, advance each matcher and its
:class:`~grammask.sampler.stop.StopChecker`, and feed the tokens back with the KV cache. When the
compiled grammar supports budget-aware closing (the ``fsm`` backend), each matcher gets
``max_tokens=max_new_tokens`` and the output always ends inside the budget.

Jump-forward (on by default): where the grammar forces the next text (a key, ``":"``, a closing
bracket), its canonical tokens are appended at once and fed to the model in the next forward pass
with the sampled token (:mod:`grammask.masking.jump_forward`), so forced text costs no pass per
token. Rows of a batch append different numbers of tokens (an HF model gets an attention mask with
holes; a plain callable, which takes no mask, appends only as many as every live row has). Rows that
return logprobs do not jump (their forced tokens would have no sampled logprobs).

``n`` and ``best_of`` (:class:`~grammask.sampler.SamplingParams`) fan a request out into independent
sample rows (:meth:`~grammask.sampler.params.SamplingParams.sample_params`: the seed of sample ``i`` is
``seed + i``); with ``best_of > n`` the ``n`` samples with the highest cumulative logprob are
returned, best first.

Validity is never assumed: every JSON output is parsed and checked with ``jsonschema`` (formats
checked, leap seconds as RFC 3339 allows them, patterns in ECMA-262, nothing fetched:
:mod:`grammask.validation`); a regex output is matched with the ``regex`` module; an EBNF or structural-tag output is valid
when its grammar accepted the end (there is no second checker for those).
By default an invalid output is *flagged* (``result.valid`` is false, ``result.errors`` says why and
``result.value`` is ``None``); with ``strict=True`` it raises :class:`~grammask.errors.InvalidOutputError`.
An output cut off at ``max_new_tokens`` has ``finish_reason == "length"`` and is never valid.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import regex
import torch

from grammask.checks import as_bool, as_int, check_instance
from grammask.errors import GrammaskError, InvalidOutputError, InvalidParameterError
from grammask.grammars.base import CompiledGrammar, Matcher, Unenforced
from grammask.grammars.compiler import SPEC_TYPES, GrammarCompiler
from grammask.grammars.fallback import FallbackMatcher
from grammask.grammars.spec import Ebnf, JsonSchema, Reasoning, Regex, Spec, StructuralTag
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.masking.jump_forward import Encoder, accept_forced_tokens, plain_encoder
from grammask.sampler import NO_TOKEN, LogprobsMode, Sampler, SamplerOutput, SamplingBatch, SamplingParams, prompt_logprobs
from grammask.sampler.stop import FinishReason, StopChecker
from grammask.schemas.load import load_schema
from grammask.tokenizer import TokenizerInfo
from grammask.validation import output_errors

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "GenerationResult",
    "GenerationTimings",
    "Logprob",
    "ModelFn",
    "generate_json",
    "generate_json_batch",
    "generate_structured",
    "ProgressFn",
]

DEFAULT_MAX_NEW_TOKENS = 256
REGEX_CHECK_SECONDS = 1.0
"""The longest the ``regex`` module may search when checking a ``Regex`` output (it backtracks)."""
DEFAULT_PROMPT = "Answer with one JSON value that follows this JSON Schema:\n{schema}\nJSON:"
"""The prompt of a JSON Schema request given none (``{schema}``: the schema as JSON)."""
_DEFAULT_PROMPTS = {
    JsonSchema: lambda spec: DEFAULT_PROMPT.format(schema=json.dumps(spec.schema)),
    Regex: lambda spec: f"Answer with text that matches this regular expression:\n{spec.pattern}\nAnswer:",
    Ebnf: lambda spec: f"Answer with text that follows this grammar:\n{spec.grammar}\nAnswer:",
    StructuralTag: lambda spec: _structural_tag_prompt(spec),
    Reasoning: lambda spec: _DEFAULT_PROMPTS[type(spec.content)](spec.content),
}
ProgressFn = Callable[[int], None]
"""Called after each decode step with the number of tokens generated so far by the longest row (under
jump-forward a step may add several)."""

ModelFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]
"""A plain model, ``(input_ids (batch, n) int64, past or None) -> (logits, past)``, with logits
``(batch, n, vocab)`` or ``(batch, vocab)`` (the last position's), any float dtype."""


@dataclass(frozen=True)
class GenerationTimings:
    """Where the time went, for one batch.

    Attributes:
        compile_ms: compiling the grammars (0 when cached).
        prefill_ms: the first model call over the prompt(s).
        steps: decode steps run (one forward pass each; a step may append several tokens to a row
            under jump-forward).
        mask_us_per_token: median per step of filling the bitmask rows and applying them to the logits.
        total_ms_per_token: mean per step of the whole step (model, mask, sampler, matchers, stop checks).
    """

    compile_ms: float
    prefill_ms: float
    steps: int
    mask_us_per_token: float
    total_ms_per_token: float


@dataclass(frozen=True)
class Logprob:
    """One token's log-probability (or logit, in a ``*_logits`` mode) and its 1-based rank (``None``
    for a token asked for by id, whose rank is not computed)."""

    logprob: float
    rank: int | None


@dataclass(frozen=True)
class GenerationResult:
    """One generated output.

    Attributes:
        value: when ``valid``, the parsed JSON value (a JSON Schema) or the text (any other spec); else ``None``.
        instance: an instance of the pydantic model class given as schema (``None`` otherwise or when invalid).
        valid: the output ended where the grammar may end and, for a JSON Schema, parses and validates
            against it (``jsonschema``, formats checked); for a regex, the ``regex`` module matches it whole.
        errors: why it is not valid (empty when valid).
        text: the generated text (without EOS), a think section included.
        reasoning: the think section's text when the spec is a :class:`Reasoning`
            (``generate_json(..., reasoning=...)``), else ``None``; the structure is what follows it.
        token_ids: the generated token ids (with the final EOS when there was one).
        finish_reason: ``"stop"`` (EOS or a stop condition), ``"length"`` (``max_new_tokens`` reached),
            ``"no_allowed_token"``.
        backend: the backend that compiled the grammar; ``choice`` why (the ``auto`` policy).
        unenforced: keywords the grammar does not enforce (the validation still checks them).
        narrowed: places where the grammar is stricter than the schema.
        budget_aware: whether the matcher closed the output within ``max_new_tokens``.
        index: the sample's index among its request's ``n`` / ``best_of`` samples.
        cumulative_logprob: the sum of the chosen tokens' logprobs (in the request's logprobs mode),
            or ``None`` when neither ``logprobs`` nor a ``best_of`` ranking asked for them.
        logprobs: per output token, ``{token id: Logprob}`` for the chosen token, the top
            ``logprobs`` and the ``token_ids_logprobs``; ``None`` unless ``logprobs`` was asked.
        prompt_logprobs: per prompt token, the same for the prompt token and the top
            ``prompt_logprobs`` (``None`` for the first token, which nothing predicts); ``None``
            unless asked.
        forced_tokens: how many of ``token_ids`` jump-forward appended without sampling them.
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
    index: int = 0
    cumulative_logprob: float | None = None
    logprobs: tuple[dict[int, Logprob], ...] | None = field(default=None, repr=False)
    prompt_logprobs: tuple[dict[int, Logprob] | None, ...] | None = field(default=None, repr=False)
    forced_tokens: int = 0
    reasoning: str | None = None


# ---------------------------------------------------------------------------------------------- models


class _HuggingFaceModel:
    """A ``transformers`` causal LM behind ``prefill`` / ``step``: left padding, attention mask,
    position ids and the KV cache. A step feeds each row its own number of tokens: shorter rows are
    padded after their tokens, and the padding is masked out for every later position."""

    accepts_ragged = True

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.vocab_size)
        # transformers 5.24 renamed the KV-cache argument and output ``past_key_values`` to ``cache``.
        self._cache_argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._past: Any = None
        self._mask: torch.Tensor | None = None
        self._next_position: torch.Tensor | None = None

    def prefill(self, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """``(batch, width, vocab)`` logits over the left-padded prompts (row ``r``'s prompt ends at the last column)."""
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

    def step(self, chunks: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Feed row ``r`` the tokens ``chunks[r]``; ``(batch, vocab)`` logits at each row's last token
        (an empty chunk feeds nothing, and its row's logits are meaningless)."""
        assert self._mask is not None and self._next_position is not None  # prefill ran (internal order)
        lengths = torch.tensor([len(c) for c in chunks], dtype=torch.int64, device=self.device)
        width = int(lengths.max())
        input_ids = torch.full((len(chunks), width), pad_id, dtype=torch.int64)
        for row, chunk in enumerate(chunks):
            input_ids[row, : len(chunk)] = torch.tensor(chunk, dtype=torch.int64)
        offsets = torch.arange(width, device=self.device).unsqueeze(0)
        self._mask = torch.cat([self._mask, (offsets < lengths.unsqueeze(1)).to(self._mask.dtype)], dim=1)
        positions = self._next_position + offsets
        self._next_position = self._next_position + lengths.unsqueeze(1)
        logits = self._call(input_ids.to(self.device), positions)
        return logits[torch.arange(len(chunks), device=self.device), lengths - 1]

    def _call(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=self._mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_argument: self._past},
        )
        cache = getattr(out, "cache", None)
        self._past = cache if cache is not None else out.past_key_values
        return out.logits


class _CallableModel:
    """A :data:`ModelFn` behind ``prefill`` / ``step``. Prompts of one batch must have equal length,
    and a step feeds every row the same number of tokens (a plain callable takes no attention mask)."""

    accepts_ragged = False

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

    def step(self, chunks: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
        """Feed every row its chunk; live rows' chunks have one length, finished rows' are padded to it."""
        width = max(len(c) for c in chunks)
        padded = [list(c) + [pad_id] * (width - len(c)) for c in chunks]
        return self._call(torch.tensor(padded, dtype=torch.int64, device=self.device))[:, -1]

    def _call(self, input_ids: torch.Tensor) -> torch.Tensor:
        returned = self.fn(input_ids, self._past)
        logits = returned[0] if isinstance(returned, tuple) and len(returned) == 2 else None
        if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point or logits.dim() not in (2, 3):
            raise InvalidParameterError(
                "model", type(returned).__name__, "a callable returning (logits, past), logits a float tensor (batch, [seq,] vocab)"
            )
        self._past = returned[1]
        return logits if logits.dim() == 3 else logits.unsqueeze(1)


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
    ids = ids.ids if hasattr(ids, "ids") else ids
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidParameterError("tokenizer", type(tokenizer).__name__, "a tokenizer whose encode(text) returns a list of ids")
    ids = [as_int("tokenizer.encode(prompt)", token, low=0) for token in ids]
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
    progress: ProgressFn | None = None,
    jump_forward: bool = True,
    reasoning: str | None = None,
) -> GenerationResult | list[GenerationResult]:
    """Generate one JSON value that follows ``schema`` (or ``sampling.n`` of them).

    Args:
        schema: a dict, a JSON string, a path to a ``.json`` file, or a pydantic model class (then
            ``result.instance`` is an instance of it).
        model: a ``transformers`` causal LM, or any :data:`ModelFn` ``(input_ids, past) -> (logits, past)``.
        tokenizer: a ``transformers`` tokenizer (anything with ``encode``). Found from an HF model's
            ``name_or_path`` when omitted; required for a callable or a randomly initialised model.
        prompt: the prompt text; default: an instruction that quotes the schema.
        sampling: sampling parameters (default greedy); their ``max_new_tokens`` is replaced by ours.
            ``n`` / ``best_of`` draw several independent samples (seed of sample ``i``: ``seed + i``).
        backend: ``"auto"``, ``"fsm"`` or ``"xgrammar"``.
        max_new_tokens: the token budget, EOS included.
        strict: raise :class:`~grammask.errors.InvalidOutputError` instead of flagging an invalid output.
        compiler: a :class:`GrammarCompiler` to reuse (its tokenizer must match the model); it caches
            compiled grammars between calls. Its backend is used (``backend`` is then ignored).
        progress: called after each decode step with the number of tokens generated so far (see
            :data:`ProgressFn`).
        jump_forward: append the text the grammar forces without a forward pass per token
            (see the module docstring); ``False`` samples every token.
        reasoning: a reasoning model's family (``"qwen3"``, ``"deepseek_r1"``): the output thinks freely
            inside its think section, then writes the JSON (a :class:`Reasoning` spec);
            ``result.reasoning`` holds the section. A thinking budget composes: pass
            ``sampling=SamplingParams(logits_processors=[{"name": "thinking_budget", ...}])``.

    Returns:
        a :class:`GenerationResult` (``result.value`` is the parsed JSON value); with
        ``sampling.n > 1`` a list of ``n`` of them (in sample order, or best first when ``best_of > n``
        ranked them). An invalid output is flagged (``valid=False``, ``value=None``, the reason in
        ``errors``) unless ``strict``. A cut-off output (``finish_reason="length"``) is never valid.

    Raises:
        InvalidSchemaError, UnsupportedFeatureError, CompileLimitError: the schema cannot be compiled
            (the message names why and where).
        InvalidParameterError: a bad argument (e.g. ``max_new_tokens`` below the shortest valid output
            under budget-aware closing, or no tokenizer).
        InvalidOutputError: ``strict`` and the output is not valid.
    """
    prompts = None if prompt is None else [prompt]
    results = generate_json_batch(
        [schema], model, tokenizer, prompts=prompts, sampling=sampling, backend=backend,
        max_new_tokens=max_new_tokens, strict=strict, compiler=compiler, progress=progress,
        jump_forward=jump_forward, reasoning=reasoning,
    )
    return _one_or_all(results)


def generate_structured(
    spec: Spec,
    model: Any,
    tokenizer: Any = None,
    *,
    prompt: str | None = None,
    sampling: SamplingParams | None = None,
    backend: str = "auto",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    strict: bool = False,
    compiler: GrammarCompiler | None = None,
    progress: ProgressFn | None = None,
    jump_forward: bool = True,
) -> GenerationResult | list[GenerationResult]:
    """Generate one output that follows any spec: a :class:`~grammask.grammars.spec.JsonSchema`,
    :class:`~grammask.grammars.spec.Regex`, :class:`~grammask.grammars.spec.Ebnf`,
    :class:`~grammask.grammars.spec.StructuralTag` or :class:`~grammask.grammars.spec.Reasoning`
    (or ``sampling.n`` of them).

    Arguments, errors and the result as :func:`generate_json`, except that ``result.value`` is the
    text for a spec other than a JSON Schema, and that the default prompt quotes the spec. For a
    :class:`~grammask.grammars.spec.Reasoning` spec, ``result.reasoning`` is the think section and
    the content after it is what is checked.
    """
    check_instance("spec", spec, SPEC_TYPES, "a JsonSchema, Regex, Ebnf, StructuralTag or Reasoning")
    results = _generate_batch(
        [spec], [None], model, tokenizer, prompts=None if prompt is None else [prompt], sampling=sampling,
        backend=backend, max_new_tokens=max_new_tokens, strict=strict, compiler=compiler, progress=progress,
        jump_forward=jump_forward,
    )
    return _one_or_all(results)


def _one_or_all(results: list[GenerationResult]) -> GenerationResult | list[GenerationResult]:
    """One request's results: the result itself, or the list of its ``n > 1`` samples."""
    return results[0] if len(results) == 1 else results


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
    progress: ProgressFn | None = None,
    jump_forward: bool = True,
    reasoning: str | None = None,
) -> list[GenerationResult]:
    """Generate for many schemas (and prompts) as one batch, one matcher per sample row.

    Request ``i`` uses ``schemas[i]`` and ``prompts[i]``; ``sampling`` is one for all or one per
    request. A request with ``n`` / ``best_of`` becomes that many sample rows. An HF model gets
    left-padded prompts with an attention mask and position ids; a callable model needs prompts of
    equal token length. Rows that finish leave the sampled batch (:meth:`SamplingBatch.filter`); the
    model keeps stepping them until every row is done. Arguments and errors as :func:`generate_json`.

    Returns:
        every request's results in request order, ``n`` per request (``results[i]`` is request ``i``'s
        when every ``n`` is 1), each with its sample ``index``.
    """
    if isinstance(schemas, (str, bytes, dict)) or not isinstance(schemas, Sequence):
        raise InvalidParameterError("schemas", type(schemas).__name__, "a list of schemas (use generate_json for one)")
    if not schemas:
        return []
    max_new_tokens = _check_arguments(model, max_new_tokens, strict, compiler, progress, jump_forward)
    loaded = [load_schema(s) for s in schemas]
    specs = [JsonSchema(schema) for schema, _ in loaded]
    if reasoning is not None:
        specs = [Reasoning.for_model(reasoning, spec) for spec in specs]
    return _generate_batch(
        specs, [cls for _, cls in loaded], model, tokenizer, prompts=prompts, sampling=sampling, backend=backend,
        max_new_tokens=max_new_tokens, strict=strict, compiler=compiler, progress=progress,
        jump_forward=jump_forward,
    )


def _generate_batch(
    specs: list[Spec],
    pydantic_classes: list[type | None],
    model: Any,
    tokenizer: Any,
    *,
    prompts: Sequence[str] | None,
    sampling: SamplingParams | Sequence[SamplingParams] | None,
    backend: str,
    max_new_tokens: int,
    strict: bool,
    compiler: GrammarCompiler | None,
    progress: ProgressFn | None,
    jump_forward: bool,
) -> list[GenerationResult]:
    max_new_tokens = _check_arguments(model, max_new_tokens, strict, compiler, progress, jump_forward)
    prompt_texts = _prompt_texts(prompts, specs)
    requests = _row_params(sampling, len(specs), max_new_tokens)
    if tokenizer is None:
        if not _is_huggingface_model(model):
            raise InvalidParameterError("tokenizer", None, "a tokenizer (required with a callable model)")
        tokenizer = _find_tokenizer(model)
    token_prompts = [_encode(tokenizer, text) for text in prompt_texts]
    rows = [(request, index) for request, p in enumerate(requests) for index in range(p.num_samples)]
    row_params = [sample for p in requests for sample in p.sample_params()]
    run = _BatchRun(
        model, tokenizer, [specs[r] for r, _ in rows], row_params, [token_prompts[r] for r, _ in rows],
        max_new_tokens, progress, jump_forward,
    )
    compiler = compiler or run.default_compiler(backend)
    # Under "auto", a limit the fsm backend reaches mid-decode moves that row's matcher to xgrammar
    # (grammask.grammars.fallback); the result reports the grammar the row ended on.
    compiled, loop = run(compiler)
    timings = loop.timings(run.compile_ms, run.prefill_ms)
    row_results = [
        _result(specs[request], pydantic_classes[request], compiled[row], loop, row, timings, max_new_tokens, index)
        for row, (request, index) in enumerate(rows)
    ]
    results = []
    for request, p in enumerate(requests):
        samples = [res for res, (r, _) in zip(row_results, rows) if r == request]
        if p.num_samples > p.n:  # best_of: the n best by cumulative logprob, best first
            samples = sorted(samples, key=lambda res: -res.cumulative_logprob)[: p.n]
        results.extend(samples)
    if strict:
        for r in results:
            if not r.valid:
                raise InvalidOutputError(r.text, "; ".join(r.errors), r.finish_reason)
    return results


# ---------------------------------------------------------------------------------------------- helpers


def _check_arguments(
    model: Any, max_new_tokens: Any, strict: Any, compiler: Any, progress: Any, jump_forward: Any
) -> int:
    """The generation arguments every entry point shares, checked; returns ``max_new_tokens`` as an int."""
    max_new_tokens = as_int("max_new_tokens", max_new_tokens, low=1)
    as_bool("strict", strict)
    as_bool("jump_forward", jump_forward)
    if not _is_huggingface_model(model) and not callable(model):
        raise InvalidParameterError("model", type(model).__name__, "a transformers causal LM or a callable (input_ids, past) -> (logits, past)")
    if compiler is not None:
        check_instance("compiler", compiler, GrammarCompiler, "a GrammarCompiler or None")
    if progress is not None and not callable(progress):
        raise InvalidParameterError("progress", type(progress).__name__, "a callable (tokens generated so far) or None")
    return max_new_tokens


class _BatchRun:
    """Prefill, compile and decode one batch of sample rows with a given compiler."""

    def __init__(self, model: Any, tokenizer: Any, specs: list[Spec], params: list[SamplingParams],
                 token_prompts: list[list[int]], max_new_tokens: int, progress: ProgressFn | None,
                 jump_forward: bool) -> None:
        self.model, self.tokenizer, self.specs = model, tokenizer, specs
        self.params, self.token_prompts, self.max_new_tokens = params, token_prompts, max_new_tokens
        self.progress, self.jump_forward = progress, jump_forward
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
            matchers = [budget_matcher(c, self.max_new_tokens) for c in compiled]
            self.compile_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            logits = runner.prefill(self.token_prompts, pad_id=_pad_id(self.tokenizer))
            self.prefill_ms = (time.perf_counter() - start) * 1e3
            encode = plain_encoder(self.tokenizer) if self.jump_forward else None
            loop = _DecodeLoop(runner, compiler.tokenizer_info, matchers, self.params, self.token_prompts, encode,
                               _pad_id(self.tokenizer), self.progress)
            loop.prompt_logprobs = [
                _prompt_logprobs(logits[row], prompt, p) for row, (prompt, p) in enumerate(zip(self.token_prompts, self.params))
            ]
            last = logits[:, -1].clone()
            del logits  # the whole prompt's logits are not kept through the decode
            loop.run(last)
        return compiled, loop


def _prompt_logprobs(logits: torch.Tensor, prompt: list[int], params: SamplingParams) -> tuple | None:
    """Row logits ``(width, vocab)`` of a left-padded prompt → its prompt logprobs, or ``None``."""
    if params.prompt_logprobs is None:
        return None
    if logits.shape[0] < len(prompt):
        raise InvalidParameterError(
            "prompt_logprobs", params.prompt_logprobs, "None with a model that returns only the last position's logits"
        )
    width = logits.shape[0]
    predicting = logits[width - len(prompt) : width - 1]
    mode = params.logprobs_mode or LogprobsMode.RAW_LOGPROBS
    values = prompt_logprobs(predicting, torch.tensor(prompt[1:], device=logits.device), params.prompt_logprobs, mode)
    chosen, rank, top_values, top_ids = (v.tolist() for v in values)
    entries = [
        {**{t: Logprob(v, i + 1) for i, (t, v) in enumerate(zip(ids, vals))}, token: Logprob(lp, rk)}
        for token, lp, rk, vals, ids in zip(prompt[1:], chosen, rank, top_values, top_ids)
    ]
    return (None, *entries)


def _structural_tag_prompt(spec: StructuralTag) -> str:
    tree = spec.format
    tags = tree.get("tags", []) if tree.get("type") == "triggered_tags" else []
    if tags:
        return "Answer; to call a tool, write " + " or ".join(f"{t['begin']}...{t['end']}" for t in tags) + "."
    return f"Answer in this format (an xgrammar structural tag):\n{spec.format_json}\nAnswer:"


def _prompt_texts(prompts: Sequence[str] | None, specs: list[Spec]) -> list[str]:
    if prompts is None:
        return [_DEFAULT_PROMPTS[type(spec)](spec) for spec in specs]
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) != len(specs):
        raise InvalidParameterError("prompts", prompts, f"a list of {len(specs)} strings (one per schema)")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise InvalidParameterError(f"prompts[{i}]", prompt, "a string")
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


def budget_matcher(compiled: CompiledGrammar, max_new_tokens: int) -> Matcher:
    """A matcher of ``compiled`` that closes within ``max_new_tokens`` where the grammar supports it.

    Raises:
        InvalidParameterError: (field ``max_new_tokens``) the shortest valid output plus EOS does not fit.
    """
    if not compiled.supports_budget:
        return compiled.matcher()
    try:
        return compiled.matcher(max_tokens=max_new_tokens)
    except InvalidParameterError as exc:
        raise InvalidParameterError("max_new_tokens", max_new_tokens, exc.allowed) from None


class _DecodeLoop:
    """The per-step loop over one batch; records per-step mask and total times, logprobs and forced tokens."""

    def __init__(
        self,
        runner: Any,
        info: TokenizerInfo,
        matchers: list[Matcher],
        params: list[SamplingParams],
        prompts: list[list[int]],
        encode: Encoder | None,
        pad_id: int,
        progress: ProgressFn | None = None,
    ) -> None:
        self.runner = runner
        self.info = info
        self.progress = progress
        self.matchers = matchers
        self.params = params
        self.stops = [StopChecker(p, info) for p in params]
        self.batch = SamplingBatch.build(
            params, vocab_size=info.vocab_size, tokenizer=info, prompt_token_ids=prompts, device=runner.device
        )
        self.sampler = Sampler()
        self.live = list(range(len(matchers)))
        self.vocab_size = info.vocab_size
        self.filler_id = info.eos_ids[0]
        self.pad_id = pad_id
        # Rows that return logprobs do not jump: their forced tokens would have no sampled logprobs.
        self.encode = encode
        self.jumps = [encode is not None and p.logprobs is None for p in params]
        self.forced = [0] * len(matchers)
        self.logprobs: list[list[dict[int, Logprob]]] = [[] for _ in matchers]
        self.cumulative = [0.0] * len(matchers)
        self.prompt_logprobs: list[tuple | None] = [None] * len(matchers)
        self.mask_seconds: list[float] = []
        self.step_seconds: list[float] = []

    def run(self, logits: torch.Tensor) -> None:
        """Decode from the prompt's last logits ``(batch, vocab)`` until every row is done."""
        bitmask = allocate_token_bitmask(len(self.matchers), self.vocab_size)
        logits = self._jump_before_first_step(logits)
        while self.live:
            start = time.perf_counter()
            logits = self._to_vocab(logits)[self.live]
            mask_start = time.perf_counter()
            rows = bitmask[: len(self.live)]
            fill_next_token_bitmask([self.matchers[i] for i in self.live], rows)
            rows = rows.to(logits.device, non_blocking=True)
            if not self.batch.logprob_row_list:
                apply_mask(logits, rows)
                rows = None  # applied; with logprobs the sampler applies it, after reading the raw logits
            self.mask_seconds.append(time.perf_counter() - mask_start)
            output = self.sampler(logits, self.batch, rows)
            self._record_logprobs(output)
            chunks = self._advance(output.token_ids)
            if self.live:
                logits = self.runner.step(chunks, self.pad_id)
            self.step_seconds.append(time.perf_counter() - start)
            if self.progress is not None:
                self.progress(max(len(stop.token_ids) for stop in self.stops))

    def _jump_before_first_step(self, logits: torch.Tensor) -> torch.Tensor:
        """Text forced at the very start (``{"name":"`` of a schema whose first key is fixed) is fed as
        one chunk before the first token is sampled; the rows that jumped take the logits after it."""
        chunks = self._forced_chunks({row: [] for row in self.live})
        jumped = [row for row, chunk in enumerate(chunks) if chunk]
        if not jumped:
            return logits
        after = self.runner.step(chunks, self.pad_id)
        index = torch.tensor(jumped, dtype=torch.int64, device=logits.device)
        logits = logits.clone()
        logits[index] = after[index].to(logits.dtype)
        return logits

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

    def _record_logprobs(self, output: SamplerOutput) -> None:
        if output.logprobs is None:
            return
        chosen, ranks = output.logprobs.tolist(), output.ranks.tolist()
        top_values = output.top_logprobs.tolist() if output.top_logprobs is not None else None
        top_ids = output.top_ids.tolist() if output.top_ids is not None else None
        by_id = output.token_ids_logprobs.tolist() if output.token_ids_logprobs is not None else None
        tokens = output.token_ids.tolist()
        for position, row in enumerate(self.live):
            if self.params[row].logprobs is None or tokens[position] == NO_TOKEN:
                continue
            entry: dict[int, Logprob] = {}
            if top_ids is not None:
                entry.update({t: Logprob(v, i + 1) for i, (t, v) in enumerate(zip(top_ids[position], top_values[position]))
                              if t >= 0 and v > float("-inf")})
            for t, v in zip(self.params[row].token_ids_logprobs or (), by_id[position] if by_id else ()):
                entry.setdefault(t, Logprob(v, None))
            entry[tokens[position]] = Logprob(chosen[position], ranks[position])
            self.logprobs[row].append(entry)
            self.cumulative[row] += chosen[position]

    def _advance(self, sampled: torch.Tensor) -> list[list[int]]:
        """Advance the live rows' matchers and stop checks by the sampled tokens, then by the tokens
        jump-forward appends; drop finished rows. Returns every model row's next chunk of input ids
        (finished rows are fed a filler token)."""
        tokens = sampled.tolist()
        self.batch.update(sampled)
        fed: dict[int, list[int]] = {}
        for position, row in enumerate(self.live):
            token = tokens[position]
            if token != NO_TOKEN and not self.matchers[row].accept_token(token):
                raise GrammaskError(f"internal: the matcher rejected token {token} that its own mask allowed (row {row})")
            if self.stops[row].step(token) is None:
                fed[row] = [token]
        chunks = self._forced_chunks(fed)
        return [chunk or [self.filler_id] for chunk in chunks]

    def _forced_chunks(self, fed: dict[int, list[int]]) -> list[list[int]]:
        """Append each still-live row's forced tokens to its chunk ``fed[row]`` (rows not in ``fed`` have
        finished), record them, and keep only the live rows. Returns one chunk per model row."""
        forced = {row: self._forced(row, chunk[-1] if chunk else None) for row, chunk in fed.items()}
        if forced and not self.runner.accepts_ragged:  # one chunk width for every row
            width = min(len(f) + len(fed[row]) for row, f in forced.items())
            for row, f in forced.items():
                extra = len(f) + len(fed[row]) - width
                if extra > 0:
                    self.matchers[row].rollback(extra)
                    del f[len(f) - extra :]
        self._record_forced(forced, fed)
        keep = [position for position, row in enumerate(self.live) if row in fed]
        if len(keep) != len(self.live):
            self.live = [self.live[p] for p in keep]
            if self.live:
                self.batch = self.batch.filter(keep)
        chunks: list[list[int]] = [[] for _ in self.matchers]
        for row, chunk in fed.items():
            chunks[row] = chunk
        return chunks

    def _forced(self, row: int, previous: int | None) -> list[int]:
        if not self.jumps[row] or self.encode is None:
            return []
        previous = previous if previous is not None else (self.stops[row].token_ids[-1] if self.stops[row].token_ids else None)
        return accept_forced_tokens(self.matchers[row], self.encode, self.info, previous)

    def _record_forced(self, forced: dict[int, list[int]], fed: dict[int, list[int]]) -> None:
        """Count the forced tokens in each row's stop check and sampling state; a row that a stop
        condition ends inside them keeps what came before and leaves (its matcher rolled back)."""
        width = max((len(f) for f in forced.values()), default=0)
        columns = [[NO_TOKEN] * len(self.live) for _ in range(width)]
        for position, row in enumerate(self.live):
            tokens = forced.get(row, [])
            for k, token in enumerate(tokens):
                columns[k][position] = token
                self.forced[row] += 1
                if self.stops[row].step(token) is not None:
                    self.matchers[row].rollback(len(tokens) - k - 1)
                    del fed[row]
                    break
                fed[row].append(token)
        for column in columns:
            self.batch.update(torch.tensor(column, dtype=torch.int64, device=self.batch.device))

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
    spec: Spec,
    pydantic_class: type | None,
    compiled: CompiledGrammar,
    loop: _DecodeLoop,
    row: int,
    timings: GenerationTimings,
    max_new_tokens: int,
    index: int,
) -> GenerationResult:
    matcher, stop, params = loop.matchers[row], loop.stops[row], loop.params[row]
    finish = stop.finish.reason if stop.finish is not None else FinishReason.LENGTH
    thinking, content = _split_reasoning(matcher, stop, compiled.tokenizer_info)
    if isinstance(spec, Reasoning):
        spec = spec.content
    value, instance, errors = _validate(spec, pydantic_class, content, finish, matcher, max_new_tokens)
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
        index=index,
        cumulative_logprob=loop.cumulative[row] if params.logprobs is not None else None,
        logprobs=tuple(loop.logprobs[row]) if params.logprobs is not None else None,
        prompt_logprobs=loop.prompt_logprobs[row],
        forced_tokens=loop.forced[row],
        reasoning=thinking,
    )


def _split_reasoning(matcher: Matcher, stop: StopChecker, info: TokenizerInfo) -> tuple[str | None, str]:
    """``(think section text or None, the text the structure covers)``."""
    from grammask.grammars.reasoning import ReasoningMatcher

    if not isinstance(matcher, ReasoningMatcher):
        return None, stop.text
    ids = list(stop.token_ids)
    offset = matcher.content_offset
    if offset is None:  # still thinking when generation stopped
        return info.decode(ids).decode("utf-8", "replace"), ""
    end = ids.index(matcher.end_token_id) if matcher.end_token_id in ids[:offset] else offset
    return info.decode(ids[:end]).decode("utf-8", "replace"), info.decode(ids[offset:]).decode("utf-8", "replace")


def _validate(
    spec: Spec, pydantic_class: type | None, text: str, finish: FinishReason, matcher: Matcher, max_new_tokens: int
) -> tuple[Any, Any, list[str]]:
    """``(value, instance, errors)``; ``errors`` empty exactly when the output is valid."""
    if finish is FinishReason.LENGTH:
        return None, None, [f"cut off at max_new_tokens={max_new_tokens} before the structure ended"]
    if finish is FinishReason.NO_ALLOWED_TOKEN:
        return None, None, ["the grammar allowed no next token"]
    if not matcher.is_terminated():
        return None, None, ["stopped before the grammar accepted its end (a stop condition cut the output)"]
    if isinstance(spec, Regex):
        try:
            matched = regex.fullmatch(spec.pattern, text, timeout=REGEX_CHECK_SECONDS) is not None
        except TimeoutError:  # a backtracking pattern on a text it does not match: undecided, not valid
            return text, None, [f"the regex module could not decide within {REGEX_CHECK_SECONDS:g} s whether {spec.pattern!r} matches the whole text"]
        return text, None, [] if matched else [f"the regex module does not match the whole text to {spec.pattern!r}"]
    if not isinstance(spec, JsonSchema):
        return text, None, []  # EBNF, structural tags: the grammar accepting the end is the check
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, None, [f"not JSON: {exc.msg} at character {exc.pos}"]
    errors = [
        f"at '{'/'.join(map(str, e.absolute_path)) or '/'}': {e.message}"
        for e in output_errors(spec.schema, value)
    ]
    if errors or pydantic_class is None:
        return value, None, errors
    try:
        return value, pydantic_class.model_validate(value), []
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        return value, None, [f"pydantic: {exc}"]
