"""Object schemas combined by ``allOf`` / ``anyOf`` / disjoint ``oneOf``, merged into one schema.

``{"type": "object", "properties": {...}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}``
is, as a language, the union of two object schemas, each the merge of the outer object schema
with one branch. Written that way, the value positions of the merged objects can call rules
(:meth:`~grammask.grammars.fsm.json_schema._Lowerer.value`) where an intersection of the object
languages could not: the pushdown runtime keeps its calls, and nothing is unrolled to a depth.

Merging is exact for the keywords listed in :data:`MERGEABLE`: an object satisfies two schemas
exactly when every member satisfies both schemas' rules for its name and it has every name either
requires. A member's two rules become one ``allOf`` subschema, which is merged again where both
are objects and intersected otherwise. Any other keyword (``patternProperties``, counts,
dependencies, nested applicators...) makes :func:`merge_object_schemas` decline (``None``).
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = frozenset(
    ("title", "description", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly", "$schema", "$id",
     "$anchor", "$defs", "definitions", "format_version")
)
"""Keywords with no effect on validity (kept out of a merged schema)."""
MERGEABLE = frozenset(("type", "properties", "required", "additionalProperties")) | ANNOTATIONS
"""The keywords a schema may have to be merged as an object schema."""


def object_view(schema: Any) -> dict | None:
    """``{"types", "properties", "required", "additional"}`` of a mergeable object schema, or
    ``None`` (not a dict, a keyword outside :data:`MERGEABLE`, a type list without objects)."""
    if schema is True:
        return {"types": None, "properties": {}, "required": [], "additional": True}
    if not isinstance(schema, dict) or not set(schema) <= MERGEABLE:
        return None
    declared = schema.get("type")
    if declared is None:
        types = None
    else:
        types = [declared] if isinstance(declared, str) else declared
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            return None
        types = set(types)
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    return {"types": types, "properties": properties, "required": required, "additional": schema.get("additionalProperties", True)}


def _both(a: Any, b: Any) -> Any:
    """A schema for values satisfying ``a`` and ``b``."""
    if a is True or a == {}:
        return b
    if b is True or b == {} or a is b:
        return a
    if a is False or b is False:
        return False
    return {"allOf": [a, b]}


def merge_views(a: dict, b: dict) -> dict | None:
    """The object schema of values satisfying both views (``None`` if their types share no object)."""
    if a["types"] is None:
        types = b["types"]
    elif b["types"] is None:
        types = a["types"]
    else:
        types = a["types"] & b["types"]
    if types is not None and "object" not in types:
        return None
    names = list(dict.fromkeys([*a["properties"], *b["properties"]]))
    properties = {
        name: _both(a["properties"].get(name, a["additional"]), b["properties"].get(name, b["additional"])) for name in names
    }
    return {
        "types": {"object"},
        "properties": properties,
        "required": list(dict.fromkeys([*a["required"], *b["required"]])),
        "additional": _both(a["additional"], b["additional"]),
    }


def view_to_schema(view: dict) -> dict:
    """A JSON Schema object for a merged view (objects only)."""
    out: dict[str, Any] = {"type": "object"}
    if view["properties"]:
        out["properties"] = view["properties"]
    if view["required"]:
        out["required"] = view["required"]
    if view["additional"] is not True:
        out["additionalProperties"] = view["additional"]
    return out


__all__ = ["ANNOTATIONS", "MERGEABLE", "merge_views", "object_view", "view_to_schema"]
