"""Visiting every subschema of a JSON Schema with its JSON pointer."""

from __future__ import annotations

from typing import Any, Iterator

from grammask.schemas.validate import json_pointer

# Keywords whose value is one subschema.
SCHEMA_KEYWORDS = (
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
)
# Keywords whose value is a list of subschemas.
SCHEMA_LIST_KEYWORDS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
# Keywords whose value maps names to subschemas.
SCHEMA_MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")


def iter_subschemas(schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(json_pointer, subschema)`` for ``schema`` and every object subschema in it, depth first.

    Values of ``enum``, ``const``, ``default`` and ``examples`` are data, not schemas, and are not entered.
    Boolean subschemas are skipped (they hold no keywords).
    """
    if not isinstance(schema, dict):
        return
    yield json_pointer(path), schema
    for key in SCHEMA_KEYWORDS:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from iter_subschemas(value, (*path, key))
    for key in SCHEMA_LIST_KEYWORDS:
        value = schema.get(key)
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from iter_subschemas(item, (*path, key, index))
    for key in SCHEMA_MAP_KEYWORDS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, item in value.items():
                yield from iter_subschemas(item, (*path, key, name))
