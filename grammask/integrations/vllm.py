"""grammask as vLLM's structured-output backend (vLLM 0.33).

vLLM's engine asks a ``StructuredOutputBackend`` for one ``StructuredOutputGrammar`` per request
(``compile_grammar(request_type, grammar_spec)``, on the manager's compile threads) and, every
step, has each grammar fill its rows of one bitmask: one row per draft token plus one under
speculative decoding (accepting the drafts as it goes and rolling them back), and from a thread
pool above 128 requests. :class:`GrammaskBackend` and :class:`GrammaskGrammar` implement those two
classes over grammask's compiler and matchers; every ``StructuredOutputOptions`` kind goes through
:func:`grammask.openai.spec_from_request`, so JSON Schemas get grammask's exact ``fsm`` backend and
structural tags (tool calls) its special-token handling.

Turning it on: vLLM picks its backend from a fixed list, so grammask installs itself through the
``vllm.general_plugins`` entry point that ``pip install grammask`` declares. The plugin does nothing
unless the environment says ``GRAMMASK_VLLM=1`` (set it before starting vLLM; every vLLM process
reads it); then it checks the vLLM version (:data:`SUPPORTED_VLLM`) and routes every structured
request of the engine, whatever ``structured_outputs_config.backend`` says, to grammask. Requests
are validated by grammask at the front end too, so a bad schema is a 400 that names the problem.
:func:`enable` does the same from code (for ``LLM(...)`` in the same process).

Whitespace follows vLLM's config: ``disable_any_whitespace`` gives compact JSON, otherwise bounded
runs (grammask never allows unbounded whitespace). Stop tokens of a request that are not EOS for the
tokenizer are masked until the grammar ends, as vLLM asks.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import regex
import torch

from grammask.errors import GrammaskError, InvalidRegexError
from grammask.grammars.base import CompiledGrammar, Matcher
from grammask.grammars.compiler import GrammarCompiler
from grammask.grammars.spec import Regex, Spec, Whitespace
from grammask.masking.bitmask import allocate_token_bitmask, host_words
from grammask.openai import spec_from_request
from grammask.tokenizer import TokenizerInfo

try:
    import vllm
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputBackend,
        StructuredOutputGrammar,
        StructuredOutputOptions,
    )
except ImportError as exc:  # pragma: no cover - vLLM is optional
    raise ImportError(
        "grammask.integrations.vllm needs vLLM 0.33: pip install --no-deps vllm==0.33.0 (then grammask's 'engines' extra)"
    ) from exc

__all__ = ["BACKEND_NAME", "ENABLE_ENV", "GrammaskBackend", "GrammaskGrammar", "SUPPORTED_VLLM", "enable", "register", "spec_for_key"]

BACKEND_NAME = "grammask"
ENABLE_ENV = "GRAMMASK_VLLM"
SUPPORTED_VLLM = ((0, 33), (0, 34))
"""vLLM versions this module is built for: ``[0.33, 0.34)``. It replaces two methods of vLLM's
(``StructuredOutputManager.grammar_init`` and ``SamplingParams._validate_structured_outputs``), which
other versions may shape differently."""

_FIELD_OF_OPTION = {
    "JSON": "json",
    "JSON_OBJECT": "json_object",
    "REGEX": "regex",
    "GRAMMAR": "grammar",
    "CHOICE": "choice",
    "STRUCTURAL_TAG": "structural_tag",
}


def spec_for_key(request_type: StructuredOutputOptions, grammar_spec: str, whitespace: Whitespace = Whitespace.FLEXIBLE) -> Spec:
    """The grammask spec of one of vLLM's structured-output keys ``(request_type, grammar_spec)``.

    Raises:
        GrammaskError: the spec is malformed (the message names the ``structured_outputs`` field).
    """
    name = _FIELD_OF_OPTION.get(request_type.name)
    if name is None:
        raise GrammaskError(f"unknown vLLM structured output kind {request_type!r}")
    value: Any = True if name == "json_object" else grammar_spec
    spec = spec_from_request({"structured_outputs": {name: value}}, whitespace=whitespace)
    assert spec is not None  # one field given: spec_from_request returns a spec or raises
    return spec


@dataclass
class GrammaskBackend(StructuredOutputBackend):
    """vLLM's engine-level backend: one grammask compiler for the engine's tokenizer (cached, thread-safe)."""

    def __post_init__(self) -> None:
        self.tokenizer_info = TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
        self.compiler = GrammarCompiler(self.tokenizer_info)
        outputs_config = getattr(self.vllm_config, "structured_outputs_config", None)
        compact = bool(getattr(outputs_config, "disable_any_whitespace", False))
        self.whitespace = Whitespace.COMPACT if compact else Whitespace.FLEXIBLE

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> "GrammaskGrammar":
        compiled = self.compiler.compile(spec_for_key(request_type, grammar_spec, self.whitespace))
        extra_stops = sorted(set(stop_token_ids or ()) - set(self.tokenizer_info.eos_ids))
        extra_stops = [t for t in extra_stops if 0 <= t < self.vocab_size]
        return GrammaskGrammar(compiled=compiled, matcher=compiled.matcher(), vocab_size=self.vocab_size, masked_stops=tuple(extra_stops))

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """``(max_num_seqs, ceil(vocab_size / 32))`` int32, every token allowed."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        self.compiler.clear_cache()


@dataclass
class GrammaskGrammar(StructuredOutputGrammar):
    """One request's grammar for vLLM: a grammask matcher behind vLLM's interface.

    Attributes:
        compiled: the compiled grammar (its ``backend``, ``choice``, ``unenforced``).
        matcher: the request's matcher.
        masked_stops: the request's stop tokens that are not EOS ids; never allowed by a filled row.
    """

    compiled: CompiledGrammar
    matcher: Matcher
    vocab_size: int
    masked_stops: tuple[int, ...] = ()
    _stop_words: list[tuple[int, int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._stop_words = [(t >> 5, ~(1 << (t & 31))) for t in self.masked_stops]

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; ``False`` at the first one the grammar rejects (the tokens before it
        stay accepted). Tokens after the grammar ended are ignored."""
        for token in tokens:
            if self.matcher.is_terminated():
                return True
            if not self.matcher.accept_token(int(token)):
                return False
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts (up to its end), state unchanged."""
        if self.matcher.is_terminated():
            return []
        return list(tokens[: self.matcher.validate_tokens([int(t) for t in tokens])])

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        """Write the allowed next tokens into ``bitmask[idx]`` (``bitmask``: int32 CPU, ``(rows, ceil(V / 32))``)."""
        self.matcher.fill_next_token_bitmask(bitmask, idx)
        if self._stop_words:
            words = host_words(bitmask)
            for word, keep in self._stop_words:
                words[idx, word] &= keep

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()


# ---------------------------------------------------------------------------------------- enabling

_enabled = False
_enable_lock = threading.Lock()


def register() -> None:
    """The ``vllm.general_plugins`` entry point: :func:`enable` when ``GRAMMASK_VLLM=1``, else nothing."""
    if os.environ.get(ENABLE_ENV, "").strip().lower() in ("1", "true", "yes"):
        enable()


def _version_tuple(version: str) -> tuple[int, int]:
    parts = (version.split("+")[0].split(".") + ["0", "0"])[:2]
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def enable() -> None:
    """Make grammask the structured-output backend of every vLLM engine in this process (idempotent).

    Raises:
        GrammaskError: the installed vLLM is outside :data:`SUPPORTED_VLLM`.
    """
    global _enabled
    found = _version_tuple(vllm.__version__)
    low, high = SUPPORTED_VLLM
    if not low <= found < high:
        raise GrammaskError(
            f"grammask's vLLM backend supports vLLM {low[0]}.{low[1]}.x; found {vllm.__version__} "
            f"(unset {ENABLE_ENV} to use vLLM's own backends)"
        )
    with _enable_lock:
        if _enabled:
            return
        from vllm.sampling_params import SamplingParams
        from vllm.v1.structured_output import StructuredOutputManager

        StructuredOutputManager.grammar_init = _grammar_init_with(StructuredOutputManager.grammar_init)
        SamplingParams._validate_structured_outputs = _validate_structured_outputs
        _enabled = True


def _grammar_init_with(original: Any) -> Any:
    def grammar_init(self: Any, request: Any) -> None:
        if request.structured_output_request is not None:
            if self.backend is None:
                self.backend = GrammaskBackend(
                    self.vllm_config, tokenizer=self.tokenizer, vocab_size=self.vllm_config.model_config.get_vocab_size()
                )
                self.backend_name = BACKEND_NAME
            request.sampling_params.structured_outputs._backend = BACKEND_NAME
        original(self, request)

    grammar_init.__doc__ = "vLLM's grammar_init with grammask as the backend (see grammask.integrations.vllm)."
    return grammar_init


def _validate_structured_outputs(self: Any, model_config: Any, structured_outputs_config: Any, tokenizer: Any) -> None:
    """vLLM's request check, by grammask: the constraint must make a grammask spec (a 400 otherwise)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.structured_output.request import get_structured_output_key

    if structured_outputs_config is None or self.structured_outputs is None:
        return
    if model_config.is_diffusion:
        raise VLLMValidationError("structured outputs are not supported for diffusion language models")
    if tokenizer is None:
        raise VLLMValidationError("structured outputs need a tokenizer (they cannot be used with skip_tokenizer_init)")
    try:
        spec = spec_for_key(*get_structured_output_key(self.structured_outputs))
        if isinstance(spec, Regex):  # the syntax, cheaply: the compile (in the engine core) checks the rest
            _check_regex_syntax(spec.pattern)
    except (GrammaskError, ValueError) as exc:
        raise VLLMValidationError(f"grammask: {exc}") from exc
    self.structured_outputs._backend = BACKEND_NAME
    self.structured_outputs._backend_was_auto = True


def _check_regex_syntax(pattern: str) -> None:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise InvalidRegexError(f"structured_outputs.regex: {exc.msg}", pattern, exc.pos) from None
