"""Visiting every object subschema of a JSON Schema with its JSON pointer."""

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
