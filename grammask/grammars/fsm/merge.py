"""Object schemas combined by ``allOf`` / ``anyOf`` / disjoint ``oneOf``, merged into one schema.

``{"type": "object", "properties": {...}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}``
is, as a language, the union of two object schemas, each the merge of the outer object schema
with one branch. Written that way, the value positions of the merged objects can call rules
(:meth:`~grammask.grammars.fsm.json_schema._Lowerer.value`) where an intersection of the object
languages could not: the pushdown runtime keeps its calls, and nothing is unrolled to a depth.

Merging is exact for the keywords listed in :data:`OBJECT_KEYWORDS` (annotations aside): an object satisfies two schemas
exactly when every member satisfies both schemas' rules for its name and it has every name either
requires. A member's two rules become one ``allOf`` subschema, which is merged again where both
are objects and intersected otherwise. Any other keyword (``patternProperties``, counts,
dependencies, nested applicators...) makes :func:`merge_object_schemas` decline (``None``).
"""

from __future__ import annotations

from typing import Any

from grammask.schemas.keywords import KEYWORDS

OBJECT_KEYWORDS = frozenset(("type", "properties", "required", "additionalProperties"))
"""The assertions a schema may have to be merged as an object schema."""


def is_annotation(keyword: str) -> bool:
    """Whether ``keyword`` has no effect on validity: a known annotation (``title``, ``$defs``…) or
    a keyword JSON Schema does not define (``x-…``, ``preferredOrder``), which validators ignore."""
    known = KEYWORDS.get(keyword)
    return known is None or not known.assertion


def object_view(schema: Any) -> dict | None:
    """``{"types", "properties", "required", "additional"}`` of a mergeable object schema (types
    ``None``: any value, the keywords constraining objects only; else ``{"object"}``), or ``None``
    (not a dict, an assertion outside :data:`OBJECT_KEYWORDS`, a type other than object)."""
    if schema is True:
        return {"types": None, "properties": {}, "required": [], "additional": True}
    if not isinstance(schema, dict) or any(k not in OBJECT_KEYWORDS and not is_annotation(k) for k in schema):
        return None
    declared = schema.get("type")
    if declared is None:
        types = None
    elif declared == "object" or declared == ["object"]:
        types = {"object"}
    else:  # other types carry keywords of their own: not merged here
        return None
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


def merge_views(a: dict, b: dict) -> dict:
    """The object schema of values satisfying both views."""
    types = a["types"] if b["types"] is None else b["types"]
    names = list(dict.fromkeys([*a["properties"], *b["properties"]]))
    properties = {
        name: _both(a["properties"].get(name, a["additional"]), b["properties"].get(name, b["additional"])) for name in names
    }
    return {
        "types": types,
        "properties": properties,
        "required": list(dict.fromkeys([*a["required"], *b["required"]])),
        "additional": _both(a["additional"], b["additional"]),
    }


def view_to_schema(view: dict) -> dict:
    """A JSON Schema object for a merged view."""
    out: dict[str, Any] = {} if view["types"] is None else {"type": sorted(view["types"])}
    if view["properties"]:
        out["properties"] = view["properties"]
    if view["required"]:
        out["required"] = view["required"]
    if view["additional"] is not True:
        out["additionalProperties"] = view["additional"]
    return out


__all__ = ["OBJECT_KEYWORDS", "is_annotation", "merge_views", "object_view", "view_to_schema"]
