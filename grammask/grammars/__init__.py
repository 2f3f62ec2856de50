"""Specs, the backend protocol and registry, the compiler with its ``auto`` policy, and the backends."""

from grammask.grammars.base import Backend, CompiledGrammar, Matcher, Support, Unenforced
from grammask.grammars.compiler import GrammarCompiler
from grammask.grammars.registry import available_backends, register_backend
from grammask.grammars.spec import (
    Ebnf,
    JsonSchema,
    OnUnenforced,
    PropertyOrder,
    Reasoning,
    Regex,
    Spec,
    StructuralTag,
    Tag,
    Whitespace,
)

__all__ = [
    "Backend",
    "CompiledGrammar",
    "Ebnf",
    "GrammarCompiler",
    "JsonSchema",
    "Matcher",
    "OnUnenforced",
    "PropertyOrder",
    "Reasoning",
    "Regex",
    "Spec",
    "StructuralTag",
    "Support",
    "Tag",
    "Unenforced",
    "Whitespace",
    "available_backends",
    "register_backend",
]
