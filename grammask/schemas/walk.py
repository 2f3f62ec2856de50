"""Visiting every object subschema of a JSON Schema with its JSON pointer; how deep a JSON value nests."""

from __future__ import annotations

from typing import Any, Iterator

from grammask.schemas.resolve import subschemas
from grammask.schemas.validate import json_pointer


def iter_subschemas(schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(json_pointer, subschema)`` for ``schema`` and every object subschema in it, pre-order
    (:func:`grammask.schemas.resolve.subschemas` without the boolean ones, which hold no keywords)."""
    for where, sub in subschemas(schema, path):
        if isinstance(sub, dict):
            yield json_pointer(where), sub


def json_nesting(value: Any, stop_past: int | None = None) -> int:
    """How many container levels ``value`` nests (``1`` for ``{}``/``[]``, ``0`` for a scalar),
    found without recursion. With ``stop_past``, the count stops at the first level past it."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if stop_past is not None and deepest > stop_past:
            break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
