"""The native automaton backend (``"fsm"``): regular languages over bytes, explored lazily, with
per-state cached token rows. Importing this package registers :class:`FsmBackend`."""

from grammask.grammars.fsm.backend import FsmBackend, FsmCompiledGrammar
from grammask.grammars.fsm.matcher import FsmMatcher

__all__ = ["FsmBackend", "FsmCompiledGrammar", "FsmMatcher"]
