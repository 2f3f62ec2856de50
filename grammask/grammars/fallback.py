"""``auto``'s safety net: a matcher that moves a request to another backend when the fsm backend
reaches a limit in the middle of it.

The fsm backend explores its automaton lazily, so a state or memory cap
(:class:`~grammask.errors.CompileLimitError`) can be reached while a request is decoding. Rather
than fail the request, the matcher compiles the spec on the fallback backend (once per grammar),
replays the tokens accepted so far and carries on there; :attr:`FallbackMatcher.fell_back` says
why, and :attr:`FallbackMatcher.grammar` is the grammar now in use (its ``unenforced``, its
``supports_budget``: a budget is not honoured after the move).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from grammask.errors import CompileLimitError, GrammaskError, InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.base import CompiledGrammar, Matcher

if TYPE_CHECKING:
    from grammask.grammars.fsm.backend import FsmCompiledGrammar


LATE_ERRORS = (CompileLimitError, UnsupportedFeatureError, InvalidSchemaError)
"""The errors an fsm grammar can raise after compiling (a limit of its lazily explored automaton,
or a subschema it cannot lower, met when a request first reaches it)."""


class FallbackMatcher(Matcher):
    """An fsm matcher that moves to its grammar's fallback on a compile limit.

    Args:
        grammar: the fsm grammar (its :meth:`~FsmCompiledGrammar.fallback_grammar` gives the other).
        inner: a fresh matcher of ``grammar``.
    """

    def __init__(self, grammar: "FsmCompiledGrammar", inner: Matcher) -> None:
        self._grammar: CompiledGrammar = grammar
        self._primary = grammar
        self._inner = inner
        self._primary_inner = inner
        self._tokens: list[int] = []
        self.fell_back: str | None = None
        """Why the request moved to the fallback backend (``None`` while it has not)."""

    @classmethod
    def moved(cls, grammar: "FsmCompiledGrammar", limit: GrammaskError) -> "FallbackMatcher":
        """A matcher that starts on the fallback: the fsm one could not be made (``limit``, e.g.
        reached while finding the fewest tokens a budget needs)."""
        matcher = cls(grammar, None)  # type: ignore[arg-type]
        matcher._move(limit)
        return matcher

    @property
    def grammar(self) -> CompiledGrammar:
        """The compiled grammar in use (the fsm one, or the fallback after a move)."""
        return self._grammar

    def _move(self, limit: GrammaskError) -> None:
        try:
            grammar = self._primary.fallback_grammar()
        except GrammaskError:
            raise limit from None
        inner = grammar.matcher()
        if inner.accept_tokens(self._tokens) != len(self._tokens):
            raise limit  # the fallback cannot continue this output (it is narrower there)
        reason = f"moved from 'fsm' to '{grammar.backend}' after {len(self._tokens)} tokens: {limit}"
        self._grammar, self._inner, self.fell_back = grammar.with_choice(f"{self._primary.choice}; {reason}"), inner, reason

    def _call(self, method: str, *args: Any) -> Any:
        """``self._inner.<method>(*args)``, moved to the fallback and retried on a compile limit, or
        on a subschema the fsm backend cannot lower, met when a request first reaches it (its
        subschemas are lowered then)."""
        try:
            return getattr(self._inner, method)(*args)
        except LATE_ERRORS as limit:
            return self._retry_moved(limit, method, args)

    def _retry_moved(self, limit: GrammaskError, method: str, args: tuple) -> Any:
        """After ``limit`` from the fsm matcher: move to the fallback and call ``method`` there
        (``limit`` again where the request had moved already)."""
        if self._inner is not self._primary_inner:
            raise limit
        self._move(limit)
        return getattr(self._inner, method)(*args)

    def accept_token(self, token_id: int) -> bool:
        accepted = self._call("accept_token", token_id)
        if accepted:
            self._tokens.append(int(token_id))
        return accepted

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        try:  # every decoding step: the inner call without _call's lookup and frame
            self._inner.fill_next_token_bitmask(bitmask, row)
        except LATE_ERRORS as limit:
            self._retry_moved(limit, "fill_next_token_bitmask", (bitmask, row))

    def jump_forward_string(self) -> str:
        return self._call("jump_forward_string")

    def rollback(self, num_tokens: int = 1) -> None:
        self._inner.rollback(num_tokens)
        if num_tokens:
            del self._tokens[-num_tokens:]

    def is_terminated(self) -> bool:
        return self._inner.is_terminated()

    def reset(self) -> None:
        self._inner.reset()
        self._tokens.clear()

    def fork(self) -> "FallbackMatcher":
        copy = FallbackMatcher(self._primary, self._inner.fork())
        copy._grammar, copy._tokens, copy.fell_back = self._grammar, list(self._tokens), self.fell_back
        if self._inner is not self._primary_inner:
            copy._primary_inner = None  # moved already: a limit on the fallback is not retried
        return copy

    @property
    def num_accepted(self) -> int:
        return len(self._tokens)


__all__ = ["LATE_ERRORS", "FallbackMatcher"]
