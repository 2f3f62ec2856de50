"""``FsmBackend``: grammask's native automaton backend, registered as ``"fsm"``.

Regexes and JSON Schemas become rules of byte expressions (a JSON Schema's value positions call
the rules of their subschemas); the compiled grammar holds one lazily explored
:class:`~grammask.grammars.fsm.pushdown.PushdownAutomaton` shared by all its matchers. ``compile``
builds the start position's row eagerly (so the first mask is warm); every other position's row is
composed on first visit. The state cap can therefore be reached mid-generation: the matcher call
that needed the new state raises ``CompileLimitError``.
"""

from __future__ import annotations

import importlib
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from grammask.errors import CompileLimitError, InvalidParameterError, UnsupportedFeatureError
from grammask.grammars.base import Backend, CompiledGrammar, Matcher, Support, Unenforced
from grammask.grammars.fallback import LATE_ERRORS, FallbackMatcher
from grammask.grammars.fsm import patterns
from grammask.grammars.fsm.automaton import START
from grammask.grammars.fsm.collector import PAUSE_GC
from grammask.grammars.fsm.expr import INFINITE_LENGTH, BuildBudget, Expr, current_budget, nested_too_deeply
from grammask.grammars.fsm.json_text import build_format_languages
from grammask.grammars.fsm.matcher import FsmMatcher
from grammask.grammars.fsm.pushdown import DEFAULT_MAX_STACKS, PushdownAutomaton, prepare_rule_rows, prepare_text_tables
from grammask.grammars.fsm.regex import regex_to_expr
from grammask.grammars.fsm.rules import Rule, RuleSet, length_lower_bound
from grammask.grammars.fsm.vocab import vocab_index
from grammask.grammars.registry import register_backend
from grammask.grammars.spec import JsonSchema, Regex, Spec
from grammask.schemas.validate import prepare_instance_validators, stack_exhausted
from grammask.tokenizer import TokenizerInfo

DEFAULT_MAX_STATES = 50_000
DEFAULT_COMPILE_SECONDS = 10.0
DEFAULT_MAX_ROW_BYTES = 512 << 20
DEFAULT_MAX_EXPRESSION_BYTES = 1 << 30


@dataclass(frozen=True, eq=False)
class FsmCompiledGrammar(CompiledGrammar):
    """A spec compiled by the fsm backend: a shared, lazily explored pushdown automaton.

    Attributes:
        automaton: the automaton every matcher of this grammar steps through.
    """

    automaton: PushdownAutomaton | None = field(default=None, repr=False)
    fallback: Callable[[], CompiledGrammar] | None = field(default=None, repr=False)
    _fallback_cache: list = field(default_factory=list, repr=False)
    _fallback_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def matcher(self, *, max_tokens: int | None = None) -> Matcher:
        """A fresh matcher; with a :attr:`fallback`, one that moves there on a compile limit."""
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise InvalidParameterError("max_tokens", max_tokens, "a positive int or None")
        if self.fallback is None:
            return FsmMatcher(self.automaton, max_tokens=max_tokens)
        try:
            inner = FsmMatcher(self.automaton, max_tokens=max_tokens)
        except LATE_ERRORS as limit:
            return FallbackMatcher.moved(self, limit)
        return FallbackMatcher(self, inner)

    def with_fallback(
        self,
        compile_fallback: Callable[[], CompiledGrammar],
        notes: Callable[[], tuple[tuple[Unenforced, ...], tuple[Unenforced, ...]]] = lambda: ((), ()),
    ) -> "FsmCompiledGrammar":
        """A copy whose matchers move to ``compile_fallback()`` (called once) on a compile limit.

        A request may end on the fallback, so the copy's ``unenforced`` and ``narrowed`` also list
        the fallback's (``notes()``, asked for on the first read of either)."""
        copy = self.with_choice(self.choice)
        object.__setattr__(copy, "fallback", compile_fallback)
        object.__setattr__(copy, "_fallback_cache", [])
        object.__setattr__(copy, "_fallback_notes", [notes])
        return copy

    def fallback_grammar(self) -> CompiledGrammar:
        """The fallback's compiled grammar (compiled on first call; shared by every matcher)."""
        with self._fallback_lock:
            if not self._fallback_cache:
                self._fallback_cache.append(self.fallback())
            return self._fallback_cache[0]

    @property
    def memory_bytes(self) -> int:
        """The automaton's ``memory_bytes`` (rows, tables, stacks, rule automata) and the expressions its
        lowering built (counted by :class:`~grammask.grammars.fsm.expr.BuildBudget`)."""
        return self.automaton.memory_bytes + self.__dict__.get("_built_bytes", [0])[0]

    @property
    def supports_budget(self) -> bool:
        """Whether every rule's shortest text is known exactly (false too when finding them
        reached a limit, or met a subschema this backend cannot lower)."""
        try:
            return self.automaton.rules.lengths_exact
        except LATE_ERRORS:
            return False

    @property
    def min_tokens(self) -> int:
        """The fewest tokens of a valid output including EOS (the smallest usable ``max_tokens``)."""
        return self.automaton.token_distance(START) + 1


def _merged(own: tuple[Unenforced, ...], more: tuple[Unenforced, ...]) -> tuple[Unenforced, ...]:
    """``own``, then each entry of ``more`` at a keyword and path ``own`` does not name."""
    named = {(u.keyword, u.path) for u in own}
    return own + tuple(dict.fromkeys(u for u in more if (u.keyword, u.path) not in named))


@register_backend
class FsmBackend(Backend):
    """The native automaton backend.

    Args:
        tokenizer_info: the tokenizer.
        max_states: cap on DFA states per grammar. A spec whose every output is at least that
            many bytes long is refused at compile time (its automaton has more states).
        compile_seconds: cap on the eager part of a compile (lowering, start row), enforced
            while expressions are built, not only after; and on each first visit a request
            makes later (a new position's step, row or budget row, a subschema lowered then).
            The garbage collection a build puts off (it runs when the build ends) counts too.
        max_row_bytes: cap on the memory of a grammar's cached token rows (and of the budget
            profiles its stacks keep under ``max_tokens``).
        max_expression_bytes: cap on the memory of the expressions a compile builds (see
            :class:`~grammask.grammars.fsm.expr.BuildBudget`), enforced as they are built; and
            on what each such first visit builds.
        max_stacks: cap on the parses one position of a request holds at once (its stacks).
            Alternatives that overlap over a recursive value (a ``oneOf`` of two object shapes
            whose members recurse) double them at each level, and every byte reads them all:
            past the cap a request raises ``CompileLimitError('max_stacks')`` (``auto`` then
            moves it to its fallback) rather than slowing down without bound.
    """

    name = "fsm"

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        *,
        max_states: int = DEFAULT_MAX_STATES,
        compile_seconds: float = DEFAULT_COMPILE_SECONDS,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        max_expression_bytes: int = DEFAULT_MAX_EXPRESSION_BYTES,
        max_stacks: int = DEFAULT_MAX_STACKS,
        **options: Any,
    ) -> None:
        super().__init__(tokenizer_info, **options)
        limits = (("max_states", max_states), ("compile_seconds", compile_seconds), ("max_row_bytes", max_row_bytes),
                  ("max_expression_bytes", max_expression_bytes), ("max_stacks", max_stacks))
        for name, value in limits:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidParameterError(name, value, "a positive number")
        self.max_states = max_states
        self.compile_seconds = compile_seconds
        self.max_row_bytes = max_row_bytes
        self.max_expression_bytes = max_expression_bytes
        self.max_stacks = max_stacks
        # Per-process set-up, paid here rather than by the first request that needs it.
        vocab = vocab_index(tokenizer_info)
        prepare_text_tables(vocab)
        build_format_languages()
        prepare_instance_validators(patterns.search, patterns.is_regex)
        lowering = _json_schema_module()
        if lowering is not None:
            prepare_rule_rows(vocab, lowering.prepare_shared_rules())

    def supports(self, spec: Spec) -> Support:
        if isinstance(spec, Regex):
            return Support(True)
        if isinstance(spec, JsonSchema):
            if _json_schema_lowering() is None:
                return Support(False, "JSON Schema lowering (grammask.grammars.fsm.json_schema) is not available")
            return Support(True)
        return Support(False, f"the fsm backend compiles regular languages only (Regex, JsonSchema), not {spec.kind}")

    def compile(self, spec: Spec) -> FsmCompiledGrammar:
        started = time.perf_counter()
        # Lowering, regex parsing and the start row build expressions: the budget stops them as
        # soon as they pass the time or memory cap, wherever they are.
        budget = BuildBudget(seconds=self.compile_seconds, max_bytes=self.max_expression_bytes, started=started)
        built = [0]  # expression bytes built by later lowerings
        try:
            with budget, PAUSE_GC:
                expr, lowering = self._lower(spec, built)
                self._check_time(budget, "lowering")
                self._check_reachable(expr)
                automaton = PushdownAutomaton(
                    RuleSet(Rule("#", expr), max_states=self.max_states),
                    vocab_index(self.tokenizer_info),
                    max_positions=self.max_states,
                    max_row_bytes=self.max_row_bytes,
                    max_stacks=self.max_stacks,
                    build_budget=lambda: self._request_budget(built),
                )
                automaton.held_row(START)  # the first mask is then a row write
                if lowering is not None and not automaton.rules.dfas[0].is_live(START):
                    if any(n.keyword == "max_depth" for n in lowering.complete()[1]):
                        # Not the schema's emptiness (that is exact, and kept): the depth cut's.
                        raise CompileLimitError("max_depth", "no value", spec.max_depth, "every value the schema allows nests deeper than max_depth")
        except BaseException as exc:
            if not stack_exhausted(exc):
                raise
            raise nested_too_deeply() from None
        self._check_time(budget, "start row")
        grammar = FsmCompiledGrammar(
            spec=spec,
            tokenizer_info=self.tokenizer_info,
            backend=self.name,
            compile_seconds=time.perf_counter() - started,
            automaton=automaton,
        )
        object.__setattr__(grammar, "_lowering", lowering)
        built[0] += budget.bytes
        object.__setattr__(grammar, "_built_bytes", built)
        return grammar

    def _lower(self, spec: Spec, built: list[int]):
        """``(expression, lowering)``: the spec's root expression, and for a JSON Schema the
        deferred lowering that builds the rest and knows what is unenforced or narrowed."""
        if isinstance(spec, Regex):
            return regex_to_expr(spec.pattern), None
        if isinstance(spec, JsonSchema):
            lowering = _json_schema_lowering()
            if lowering is None:
                raise UnsupportedFeatureError("JsonSchema", "", self.name, "JSON Schema lowering is not available in this build")
            deferred = lowering(spec, build_budget=lambda: self._later_budget(built))
            return deferred.expr, deferred
        raise UnsupportedFeatureError(spec.kind, "", self.name, "the fsm backend compiles Regex and JsonSchema specs only")

    @contextlib.contextmanager
    def _later_budget(self, built: list[int]) -> Iterator[None]:
        """The budget of a subschema lowered when a request first reaches it (the compile's own
        budget while compiling, or that of the automaton's cold section it is lowered in): such a
        build gets the caps a compile gets; what it builds is added to ``built[0]``."""
        if current_budget() is not None:
            yield
            return
        with self._request_budget(built), PAUSE_GC:
            yield

    def _request_budget(self, built: list[int]) -> BuildBudget:
        """The caps of what a request builds after the compile (a compile's own), adding what it
        builds to ``built[0]``."""
        return BuildBudget(seconds=self.compile_seconds, max_bytes=self.max_expression_bytes, tally=built)

    def _check_reachable(self, expr: Expr) -> None:
        """Refuse a language whose every string is at least ``max_states`` bytes long: the shortest
        accepted path of its automaton visits that many distinct states, so no output could ever
        finish within the cap (``(((a{100}){100}){100}){100}``, ``minItems: 100000``). A shortest
        path never visits a position twice, and a position includes the stack of called rules, so
        this holds through calls too."""
        shortest = length_lower_bound(expr)  # exact for plain expressions, a lower bound otherwise
        if self.max_states <= shortest < INFINITE_LENGTH:
            raise CompileLimitError(
                "max_states", f"at least {shortest + 1:,}", self.max_states,
                f"every output is at least {shortest:,} bytes long, so its automaton has more states than that",
            )

    def _check_time(self, budget: BuildBudget, stage: str) -> None:
        """Raise when the compile is past ``compile_seconds`` (:meth:`BuildBudget.elapsed`:
        the garbage collection it has put off counts)."""
        elapsed = budget.elapsed()
        if elapsed > self.compile_seconds:
            raise CompileLimitError("compile_seconds", round(elapsed, 3), self.compile_seconds, f"after {stage}")


def _json_schema_module():
    """The JSON Schema lowering module, or ``None`` in a build without it."""
    try:
        return importlib.import_module("grammask.grammars.fsm.json_schema")
    except ModuleNotFoundError as err:
        if err.name != "grammask.grammars.fsm.json_schema":
            raise
        return None


def _json_schema_lowering():
    module = _json_schema_module()
    return None if module is None else getattr(module, "lower_json_schema_deferred", None)


class _CompletedNotes:
    """``unenforced`` / ``narrowed`` of an fsm grammar: a JSON Schema's subschemas are lowered
    when first reached, so the first read of either builds the rest (what is unenforced or
    narrowed is then known exactly; compiling stays as cheap as the first mask needs)."""

    def __init__(self, name: str, index: int) -> None:
        self.name, self.index = name, index

    def __get__(self, grammar, owner=None):
        if grammar is None:
            return ()
        lowering = grammar.__dict__.get("_lowering")
        own = grammar.__dict__.get(self.name, ()) if lowering is None else lowering.complete()[self.index]
        fallback_notes = grammar.__dict__.get("_fallback_notes")
        if fallback_notes is None:
            return own
        if callable(fallback_notes[0]):
            fallback_notes[0] = fallback_notes[0]()  # once per grammar (a benign race computes it twice)
        return _merged(own, fallback_notes[0][self.index])

    def __set__(self, grammar, value) -> None:
        grammar.__dict__[self.name] = value


FsmCompiledGrammar.unenforced = _CompletedNotes("unenforced", 0)  # type: ignore[assignment]
FsmCompiledGrammar.narrowed = _CompletedNotes("narrowed", 1)  # type: ignore[assignment]

__all__ = ["FsmBackend", "FsmCompiledGrammar"]
