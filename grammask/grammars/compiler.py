"""``GrammarCompiler``: turns specs into compiled grammars for one tokenizer, with a cache and the
``auto`` backend policy."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from typing import Any

from grammask.checks import as_int, check_instance
from grammask.errors import CompileLimitError, GrammaskError, InvalidParameterError, UnsupportedFeatureError
from grammask.grammars.base import Backend, CompiledGrammar, Unenforced
from grammask.grammars.registry import AUTO, available_backends, backend_class
from grammask.grammars.spec import Ebnf, JsonSchema, OnUnenforced, Reasoning, Regex, Spec, StructuralTag, shared_document
from grammask.schemas.validate import check_schema, prepare_meta_checks
from grammask.schemas.walk import json_nesting
from grammask.tokenizer import TokenizerInfo

EXACT, FAST = "fsm", "xgrammar"
MAX_SCHEMA_NESTING = 128
"""The deepest JSON nesting of a schema document that is compiled (the deepest schema of the
corpora nests 63 levels). A deeper one raises ``CompileLimitError('max_nesting')`` before the
meta-schema check or a backend recurses through it."""


SPEC_TYPES = (JsonSchema, Regex, Ebnf, StructuralTag, Reasoning)


def _check_options(options: Any) -> dict[str, dict[str, Any]]:
    if options is None:
        return {}
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in options.items()):
        raise InvalidParameterError("backend_options", options, "a dict of backend name -> dict of keyword options")
    return options


def auto_order(spec: Spec) -> tuple[tuple[str, ...], str]:
    """The order in which ``auto`` tries backends for ``spec``, and why.

    Regexes and JSON Schemas go to ``fsm`` first: it is exact (``not``, ``oneOf``, ``if``, formats,
    ``uniqueItems`` over finite domains...), its first mask comes in milliseconds where xgrammar
    takes seconds on length-bounded strings, and it closes within a token budget. ``xgrammar`` is the
    fallback, at compile time (what ``fsm`` refuses or cannot fit in its limits) and mid-request
    (a limit reached while exploring moves the matcher there, see
    :mod:`grammask.grammars.fallback`). EBNF and structural tags need ``xgrammar``.
    """
    if isinstance(spec, (Regex, JsonSchema)):
        return (EXACT, FAST), f"{spec.kind}: the exact automaton first"
    return (FAST,), f"{spec.kind}: only xgrammar compiles it"


DEFAULT_CACHE_BYTES = 2 << 30
"""The default ``cache_bytes``: 2 GiB of compiled grammars."""
SIZES_READ_PER_ADD = 4
"""How many of the least recently used grammars have their memory read again when one is added
to a compiler's cache (they may have grown since: the next to be dropped are read fresh)."""


class GrammarCompiler:
    """Compiles specs for one tokenizer, caching the results.

    Args:
        tokenizer_info: the tokenizer every grammar is compiled for.
        backend: a registered backend name, or ``"auto"`` (try backends in :func:`auto_order`, take the first that
            compiles the spec; the compiled grammar's ``choice`` says which and why).
        cache_size: how many compiled grammars to keep (least recently used are dropped).
        cache_bytes: how much memory the kept grammars may hold together
            (:attr:`~grammask.grammars.base.CompiledGrammar.memory_bytes`, read when ``compile``
            returns a grammar, and for the :data:`SIZES_READ_PER_ADD` least recently used again
            when one is added: lazily explored grammars grow as they are used); least recently
            used are dropped past it, the newest is always kept.
        backend_options: keyword options per backend name, passed to its constructor.

    Thread-safe: concurrent ``compile`` calls of the same spec compile it once.
    """

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        backend: str = AUTO,
        *,
        cache_size: int = 128,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        backend_options: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        check_instance("tokenizer_info", tokenizer_info, TokenizerInfo, "a grammask TokenizerInfo")
        if backend != AUTO:
            backend_class(backend)  # fail fast on an unknown name
        self._options = _check_options(backend_options)
        self.tokenizer_info = tokenizer_info
        self.backend = backend
        self._cache_size = as_int("cache_size", cache_size, low=0)
        self._cache_bytes = as_int("cache_bytes", cache_bytes, low=1)
        self._cache: OrderedDict[tuple[str, str, str], CompiledGrammar] = OrderedDict()
        self._sizes: dict[tuple[str, str, str], int] = {}  # each cached grammar's memory when last read
        self._held = 0  # their sum: an add reads a few sizes, not every grammar's
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, str, str], threading.Lock] = {}
        prepare_meta_checks()  # per process, here rather than in the first request of each draft

    def compile(self, spec: Spec) -> CompiledGrammar:
        """Compile ``spec`` (or return the cached result).

        Raises:
            InvalidSchemaError: a JSON Schema fails its meta-schema.
            UnsupportedFeatureError: no backend can enforce the spec, or one cannot enforce a keyword
                and the spec asks for ``on_unenforced="error"``.
            InvalidRegexError, InvalidGrammarError, CompileLimitError: as the backend reports.
        """
        check_instance("spec", spec, SPEC_TYPES, "a JsonSchema, Regex, Ebnf, StructuralTag or Reasoning")
        key = (spec.cache_key, self.tokenizer_info.fingerprint, self.backend)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._read_size(key, cached)
                return cached
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                cached = self._cache.get(key)
            if cached is None:
                cached = self._compile_uncached(spec)
                with self._lock:
                    self._cache[key] = cached
                    self._read_size(key, cached)
                    dropped = self._evict()
                del dropped  # freed here, not under the lock: a large grammar takes a millisecond
        with self._lock:
            self._key_locks.pop(key, None)
        return cached

    @property
    def cache_memory_bytes(self) -> int:
        """What the cached grammars hold now, together (see ``cache_bytes``)."""
        with self._lock:
            return sum(grammar.memory_bytes for grammar in self._cache.values())

    def _read_size(self, key: tuple[str, str, str], grammar: CompiledGrammar) -> None:
        """Read ``grammar``'s memory into the running sum. Called with the lock held."""
        size = grammar.memory_bytes
        self._held += size - self._sizes.get(key, 0)
        self._sizes[key] = size

    def _evict(self) -> list[CompiledGrammar]:
        """Drop the least recently used grammars past ``cache_size`` or ``cache_bytes`` (the
        newest stays), the sizes of the first few read again: reading every grammar's on each
        add took 2.4 ms of a compile with 128 kept. Returns the grammars dropped, for the caller
        to let go of once the lock is released. Called with the lock held."""
        dropped = []
        while len(self._cache) > self._cache_size:
            dropped.append(self._drop_oldest())
        for key in list(itertools.islice(self._cache, SIZES_READ_PER_ADD)):
            self._read_size(key, self._cache[key])
        while self._held > self._cache_bytes and len(self._cache) > 1:
            dropped.append(self._drop_oldest())
        return dropped

    def _drop_oldest(self) -> CompiledGrammar:
        key, grammar = self._cache.popitem(last=False)
        self._held -= self._sizes.pop(key)
        return grammar

    def backend_instance(self, name: str) -> Backend:
        """The (shared) instance of backend ``name`` for this compiler's tokenizer."""
        with self._lock:
            instance = self._backends.get(name)
            if instance is None:
                options = self._options.get(name, {})
                try:
                    instance = backend_class(name)(self.tokenizer_info, **options)
                except TypeError as exc:  # an option the backend does not take
                    raise InvalidParameterError(f"backend_options[{name!r}]", options, f"options backend {name!r} takes ({exc})") from None
                self._backends[name] = instance
            return instance

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._sizes.clear()
            self._held = 0

    def _compile_uncached(self, spec: Spec) -> CompiledGrammar:
        if isinstance(spec, Reasoning):  # a wrapper: its content compiles (and is cached) on its own
            from grammask.grammars.reasoning import compile_reasoning

            return compile_reasoning(spec, self.compile(spec.content))
        if isinstance(spec, JsonSchema):
            schema = shared_document(spec)  # the lowering reads this parse too
            nesting = json_nesting(schema, stop_past=MAX_SCHEMA_NESTING)
            if nesting > MAX_SCHEMA_NESTING:
                raise CompileLimitError("max_nesting", f"more than {MAX_SCHEMA_NESTING}", MAX_SCHEMA_NESTING, "JSON levels in the schema document")
            check_schema(schema)
        elif isinstance(spec, StructuralTag):
            for content in spec.contents:
                if isinstance(content, JsonSchema):
                    check_schema(shared_document(content))
        if self.backend == AUTO:
            compiled = self._compile_auto(spec)
        else:
            compiled = self._compile_with(self.backend, spec)
            compiled = compiled.with_choice(f"backend '{self.backend}' requested")
        _check_unenforced(spec, compiled)
        return compiled

    def _compile_with(self, name: str, spec: Spec) -> CompiledGrammar:
        start = time.perf_counter()
        compiled = self.backend_instance(name).compile(spec)
        if not compiled.compile_seconds:
            object.__setattr__(compiled, "compile_seconds", time.perf_counter() - start)
        return compiled

    def _compile_auto(self, spec: Spec) -> CompiledGrammar:
        loaded = set(available_backends())
        order, reason = auto_order(spec)
        refusals: list[str] = []
        errors: list[GrammaskError] = []
        for name in order:
            if name not in loaded:
                continue
            support = self.backend_instance(name).supports(spec)
            if not support:
                refusals.append(f"{name}: {support.reason}")
                continue
            try:
                compiled = self._compile_with(name, spec)
            except (UnsupportedFeatureError, CompileLimitError) as exc:
                refusals.append(f"{name}: {exc}")
                errors.append(exc)
                continue
            why = f"auto chose '{name}' ({reason})"
            if refusals:
                why += " after " + "; ".join(refusals)
            compiled = compiled.with_choice(why)
            return self._with_fallback(compiled, spec, [n for n in order[order.index(name) + 1 :] if n in loaded])
        if len(errors) == 1 and len(refusals) == 1:
            raise errors[0]
        if errors and all(isinstance(e, UnsupportedFeatureError) for e in errors):
            first = errors[0]  # the feature as the first backend named it; every backend's words follow
            raise UnsupportedFeatureError(first.feature, first.path, AUTO, "no backend compiles it: " + "; ".join(refusals))
        if errors:
            raise errors[-1]
        raise UnsupportedFeatureError(spec.kind, "", AUTO, "; ".join(refusals) or "no backend is installed")

    def _with_fallback(self, compiled: CompiledGrammar, spec: Spec, later: list[str]) -> CompiledGrammar:
        """``compiled`` with the first of ``later`` that supports ``spec`` as its mid-request
        fallback (a lazily explored grammar can reach a limit mid-request: its matchers then move
        on). What the fallback would not enforce joins ``compiled.unenforced``, as a request may end
        there; it is predicted when first read, not on the cold path. Under
        ``on_unenforced="error"`` a fallback that would lose a keyword is not taken: the limit is
        raised to the caller instead."""
        for name in later:
            backend = self.backend_instance(name)
            if not backend.supports(spec):
                continue
            if getattr(spec, "on_unenforced", None) is OnUnenforced.ERROR and backend.predict_unenforced(spec):
                return compiled
            return compiled.with_fallback(
                lambda: self._compile_with(name, spec).with_choice(f"auto fell back to '{name}'"),
                lambda: (_after_move(name, backend.predict_unenforced(spec)), _after_move(name, backend.predict_narrowed(spec))),
            )
        return compiled


def _after_move(backend: str, entries: tuple[Unenforced, ...]) -> tuple[Unenforced, ...]:
    """``entries`` of a fallback's list, each reason saying it holds once a request has moved there."""
    return tuple(
        Unenforced(u.keyword, u.path, f"after a mid-request move to '{backend}'" + (f": {u.reason}" if u.reason else ""))
        for u in entries
    )


def _check_unenforced(spec: Spec, compiled: CompiledGrammar) -> None:
    if getattr(spec, "on_unenforced", None) is OnUnenforced.ERROR and compiled.unenforced:
        first = compiled.unenforced[0]
        detail = f"{len(compiled.unenforced)} keyword(s) unenforced: " + "; ".join(map(str, compiled.unenforced))
        raise UnsupportedFeatureError(first.keyword, first.path, compiled.backend, detail)
