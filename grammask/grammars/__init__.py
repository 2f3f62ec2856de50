"""Specs, the backend protocol and registry, the compiler with its ``auto`` policy, and the backends.

Names are imported on first use (see :mod:`grammask._lazy`): the registry's names and the specs
are readable without torch or jsonschema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grammask._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["Backend", "CompiledGrammar", "Matcher", "Support", "Unenforced"], "grammask.grammars.base"),
    "GrammarCompiler": "grammask.grammars.compiler",
    **dict.fromkeys(["available_backends", "backend_names", "register_backend"], "grammask.grammars.registry"),
    **dict.fromkeys(
        ["Ebnf", "JsonSchema", "NumberForm", "OnUnenforced", "PropertyOrder", "Reasoning", "Regex", "Spec", "StructuralTag",
         "Tag", "Whitespace"],
        "grammask.grammars.spec",
    ),
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from grammask.grammars.base import Backend, CompiledGrammar, Matcher, Support, Unenforced
    from grammask.grammars.compiler import GrammarCompiler
    from grammask.grammars.registry import available_backends, backend_names, register_backend
    from grammask.grammars.spec import (
        Ebnf,
        JsonSchema,
        NumberForm,
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
    "NumberForm",
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
    "backend_names",
    "register_backend",
]
