"""Logits processors by name, from a safe registry.

A request names a processor and passes JSON parameters (``{"name": "no_repeat_ngram", "params":
{"ngram_size": 3}}``); the registry maps the name to a class registered in-process with
:func:`register_processor`, which validates the parameters and builds one instance per request. No
request payload is ever unpickled or evaluated: unlike SGLang's dill-serialised ``CustomLogitProcessor``,
a request can only choose among code the server already runs.

A processor sees one row at a time: ``apply(logits, output_ids)`` edits the ``(vocab,)`` float32 row in
place, given the tokens the request generated so far (a host list: processors are host logic, and a
batch that has any pays one host copy of the sampled ids per step; batches without processors do not).
They run after the grammar mask, penalties and logit bias, before temperature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar

import torch

from grammask.errors import InvalidParameterError
from grammask.tokenizer import TokenizerInfo

__all__ = [
    "DisallowedTokens",
    "LogitsProcessor",
    "NoRepeatNGram",
    "ProcessorContext",
    "ThinkingBudget",
    "create_processor",
    "register_processor",
    "registered_processors",
]

NEG_INF = float("-inf")


@dataclass(frozen=True)
class ProcessorContext:
    """What a processor may know when it is built: the logits width and, when given, the tokenizer."""

    vocab_size: int
    tokenizer: TokenizerInfo | None = None


class LogitsProcessor(Protocol):
    def apply(self, logits: torch.Tensor, output_ids: Sequence[int]) -> None:
        """Edit ``logits`` ``(vocab,)``, float32, in place, given the ids generated so far."""


P = TypeVar("P")
_REGISTRY: dict[str, Callable[[Mapping[str, Any], ProcessorContext], LogitsProcessor]] = {}


def register_processor(name: str) -> Callable[[type[P]], type[P]]:
    """Class decorator: register ``cls`` under ``name``; ``cls.from_params(params, context)`` builds it."""

    if not isinstance(name, str) or not name:
        raise InvalidParameterError("name", name, "a non-empty string")

    def decorate(cls: type[P]) -> type[P]:
        if name in _REGISTRY:
            raise InvalidParameterError("name", name, "a name no other logits processor is registered under")
        if not callable(getattr(cls, "from_params", None)):
            raise InvalidParameterError("cls", cls, "a class with from_params(params, context) -> processor")
        _REGISTRY[name] = cls.from_params  # type: ignore[attr-defined]
        return cls

    return decorate


def registered_processors() -> frozenset[str]:
    """The names requests may use."""
    return frozenset(_REGISTRY)


def create_processor(name: str, params: Mapping[str, Any], context: ProcessorContext) -> LogitsProcessor:
    """Build the processor ``name`` for one request from its JSON parameters."""
    if name not in _REGISTRY:
        raise InvalidParameterError("logits_processors", name, f"one of {sorted(_REGISTRY)}")
    return _REGISTRY[name](params, context)


# ---------------------------------------------------------------------------------------- parameter checks


def _check_keys(name: str, params: Mapping[str, Any], known: set[str]) -> None:
    unknown = set(params) - known
    if unknown:
        raise InvalidParameterError(f"{name}.params", sorted(unknown), f"only the keys {sorted(known)}")


def _int_param(name: str, params: Mapping[str, Any], key: str, low: int, default: Any = ...) -> Any:
    value = params.get(key, default)
    if value is ...:
        raise InvalidParameterError(f"{name}.{key}", None, f"an int >= {low} (required)")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidParameterError(f"{name}.{key}", value, f"an int >= {low}")
    return value


def _token_ids_param(name: str, params: Mapping[str, Any], key: str, vocab_size: int) -> tuple[int, ...]:
    value = params.get(key, [])
    ids = value if isinstance(value, (list, tuple)) else None
    if ids is None or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab_size for i in ids):
        raise InvalidParameterError(f"{name}.{key}", value, f"a list of token ids in [0, {vocab_size})")
    return tuple(ids)


def _token_of_text(name: str, key: str, text: Any, context: ProcessorContext) -> int:
    if not isinstance(text, str) or not text:
        raise InvalidParameterError(f"{name}.{key}", text, "the text of a token, such as '<think>'")
    if context.tokenizer is None:
        raise InvalidParameterError(f"{name}.{key}", text, "a tokenizer to look the token up (pass tokenizer=...)")
    token = context.tokenizer.token_id(text)
    if token is None:
        raise InvalidParameterError(f"{name}.{key}", text, "the text of a single token of this tokenizer")
    return token


def _force(logits: torch.Tensor, token: int) -> None:
    logits.fill_(NEG_INF)
    logits[token] = 0.0


# ---------------------------------------------------------------------------------------- built-ins


@register_processor("disallowed_tokens")
@dataclass(frozen=True)
class DisallowedTokens:
    """Never sample ``token_ids``. Params: ``{"token_ids": [int, ...]}``."""

    token_ids: tuple[int, ...]

    @classmethod
    def from_params(cls, params: Mapping[str, Any], context: ProcessorContext) -> "DisallowedTokens":
        _check_keys("disallowed_tokens", params, {"token_ids"})
        return cls(_token_ids_param("disallowed_tokens", params, "token_ids", context.vocab_size))

    def apply(self, logits: torch.Tensor, output_ids: Sequence[int]) -> None:
        if self.token_ids:
            logits[list(self.token_ids)] = NEG_INF


@register_processor("thinking_budget")
@dataclass(frozen=True)
class ThinkingBudget:
    """End a thinking block after ``budget`` tokens by forcing its end token.

    Params: ``{"budget": int >= 0, "start": "<think>", "end": "</think>", "newline": null | "\\n",
    "started": false}``. The start / end (and newline) ids are looked up in the tokenizer by their text.
    ``started`` says the prompt already opened the block (chat templates that end with ``<think>``).
    With ``newline``, that token is forced first (unless it was just generated), then the end token.
    A forced token gets logit 0 and every other token ``-inf``: the thinking text lies outside any
    structure, so the force overrides the grammar mask.
    """

    budget: int
    start_id: int
    end_id: int
    newline_id: int | None
    started: bool

    @classmethod
    def from_params(cls, params: Mapping[str, Any], context: ProcessorContext) -> "ThinkingBudget":
        name = "thinking_budget"
        _check_keys(name, params, {"budget", "start", "end", "newline", "started"})
        newline = params.get("newline")
        started = params.get("started", False)
        if not isinstance(started, bool):
            raise InvalidParameterError(f"{name}.started", started, "true or false")
        return cls(
            budget=_int_param(name, params, "budget", 0),
            start_id=_token_of_text(name, "start", params.get("start", "<think>"), context),
            end_id=_token_of_text(name, "end", params.get("end", "</think>"), context),
            newline_id=None if newline is None else _token_of_text(name, "newline", newline, context),
            started=started,
        )

    def _thinking_length(self, output_ids: Sequence[int]) -> int | None:
        """Tokens generated inside an open thinking block, or ``None`` when no block is open."""
        for position in range(len(output_ids) - 1, -1, -1):
            token = output_ids[position]
            if token == self.end_id:
                return None
            if token == self.start_id:
                return len(output_ids) - position - 1
        return len(output_ids) if self.started else None

    def apply(self, logits: torch.Tensor, output_ids: Sequence[int]) -> None:
        length = self._thinking_length(output_ids)
        if length is None or length < self.budget:
            return
        if self.newline_id is not None and (not output_ids or output_ids[-1] != self.newline_id):
            _force(logits, self.newline_id)
        else:
            _force(logits, self.end_id)


@register_processor("no_repeat_ngram")
@dataclass(frozen=True)
class NoRepeatNGram:
    """Never complete an n-gram that already occurred in the output (as transformers' ``NoRepeatNGramLogitsProcessor``
    over the generated tokens).

    Params: ``{"ngram_size": int >= 1, "window_size": null | int >= 1, "whitelist_token_ids": [int, ...]}``:
    only the last ``window_size`` output tokens are searched; whitelisted tokens are never banned.
    """

    ngram_size: int
    window_size: int | None
    whitelist: frozenset[int]

    @classmethod
    def from_params(cls, params: Mapping[str, Any], context: ProcessorContext) -> "NoRepeatNGram":
        name = "no_repeat_ngram"
        _check_keys(name, params, {"ngram_size", "window_size", "whitelist_token_ids"})
        return cls(
            ngram_size=_int_param(name, params, "ngram_size", 1),
            window_size=_int_param(name, params, "window_size", 1, default=None),
            whitelist=frozenset(_token_ids_param(name, params, "whitelist_token_ids", context.vocab_size)),
        )

    def banned(self, output_ids: Sequence[int]) -> set[int]:
        """The tokens that would repeat an n-gram after ``output_ids``."""
        ids = list(output_ids[-self.window_size :] if self.window_size else output_ids)
        n = self.ngram_size
        if len(ids) + 1 < n:
            return set()
        prefix = ids[len(ids) - n + 1 :] if n > 1 else []
        banned = {ids[i + n - 1] for i in range(len(ids) - n + 1) if ids[i : i + n - 1] == prefix}
        return banned - self.whitelist

    def apply(self, logits: torch.Tensor, output_ids: Sequence[int]) -> None:
        banned = self.banned(output_ids)
        if banned:
            logits[sorted(banned)] = NEG_INF
