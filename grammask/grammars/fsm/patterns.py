"""Deciding JSON Schema ``pattern`` s on given strings, for validating outputs (ECMA-262, linear time).

``jsonschema`` decides ``pattern``, ``patternProperties`` and ``format: regex`` with Python's ``re``,
which reads another dialect (``\\p{L}`` raises ``re.error``; ``{,3}`` is a quantifier there, a literal
in ECMA-262) and backtracks: ``^(a+)+$`` on 26 ``a`` and a ``b`` takes seconds, and so does a
pattern of the JSONSchemaBench corpus on a 32-character hex string (past the 1 s timeout of the
``regex`` module; measured over the corpora's 1,759 patterns, see ``docs/design-notes.md``).

Here a pattern goes through the ``fsm`` backend's ECMA-262 front end
(:func:`~grammask.grammars.fsm.regex.pattern_to_expr`, the very reading its grammars enforce) into
a lazily built DFA: a string is decided in one step per byte, whatever the pattern. The few
patterns an automaton cannot express (lookarounds, backreferences, ``\\b``) or that pass the
state cap fall back to the ``regex`` module with a timeout; a search that times out, or a
pattern that module cannot read either, is :class:`UndecidedPattern` — never a wrong verdict.
"""

from __future__ import annotations

import functools
from typing import Union

import regex

from grammask.errors import CompileLimitError, GrammaskError, InvalidRegexError, UnsupportedFeatureError
from grammask.grammars.fsm.automaton import START, LazyDfa
from grammask.grammars.fsm.regex import pattern_to_expr
from grammask.grammars.spec import LONE_SURROGATE

MAX_STATES = 2_000
"""States one pattern's DFA may reach (about 2 MB) before the pattern is left to the fallback."""
FALLBACK_SECONDS = 1.0
"""The time one fallback search may take."""
CACHED_PATTERNS = 128


class UndecidedPattern(GrammaskError):
    """Whether a pattern matches a string could not be decided (a fallback timeout, or a pattern
    neither engine reads). Attributes: ``pattern``, ``reason``."""

    def __init__(self, pattern: str, reason: str) -> None:
        self.pattern = pattern
        self.reason = reason
        super().__init__(f"cannot decide pattern {pattern!r}: {reason}")


class _Fallback:
    """A pattern the automaton cannot take, run by the ``regex`` module under a timeout."""

    def __init__(self, pattern: str, why: str) -> None:
        self.why = why
        try:
            self.compiled = regex.compile(pattern)
        except (regex.error, RecursionError, OverflowError, ValueError) as error:
            raise UndecidedPattern(pattern, f"{why}, and the regex module cannot read it ({error})") from None


@functools.lru_cache(maxsize=CACHED_PATTERNS)
def _engine(pattern: str) -> Union[LazyDfa, _Fallback]:
    try:
        return LazyDfa(pattern_to_expr(pattern), max_states=MAX_STATES)
    except UnsupportedFeatureError as error:
        return _Fallback(pattern, f"an automaton cannot express {error.feature}")
    except (CompileLimitError, RecursionError):
        return _Fallback(pattern, "its automaton would be too large")


def pattern_text(text: str) -> bytes:
    """The bytes a pattern's automaton reads for the string ``text``: its UTF-8, a lone surrogate
    read as U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A JSON string may hold a lone surrogate ("\ud800"), which UTF-8 cannot carry. ECMA-262
        # reads it as one code unit that "." and negated classes match, like U+FFFD stands in here.
        return LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` is found in ``text`` (JSON Schema ``pattern``: unanchored, ECMA-262).

    Raises:
        InvalidRegexError: ``pattern`` is not an ECMA-262 regex.
        UndecidedPattern: see the module docstring.
    """
    engine = _engine(pattern)
    if isinstance(engine, LazyDfa):
        try:
            state = engine.step(START, pattern_text(text))
        except CompileLimitError:  # this text explored past the state cap
            engine = _Fallback(pattern, "its automaton grew too large on this text")
        else:
            return bool(engine.accepting[state])  # read after the step: a step can grow the arrays
    try:
        return engine.compiled.search(text, timeout=FALLBACK_SECONDS) is not None
    except TimeoutError:
        raise UndecidedPattern(pattern, f"{engine.why}, and a backtracking search ran past {FALLBACK_SECONDS:g} s") from None


def is_regex(text: str) -> bool:
    """Whether ``text`` is an ECMA-262 regex (``format: regex``), as the front end reads one."""
    try:
        _engine(text)
    except InvalidRegexError:
        return False
    except UndecidedPattern:
        return True  # the front end read it; only its automaton was out of reach
    return True


__all__ = ["FALLBACK_SECONDS", "MAX_STATES", "UndecidedPattern", "is_regex", "pattern_text", "search"]
