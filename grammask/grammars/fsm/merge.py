"""Object schemas combined by ``allOf`` / ``anyOf`` / disjoint ``oneOf``, merged into one schema
(and array schemas combined by ``allOf``).

``{"type": "object", "properties": {...}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}``
is, as a language, the union of two object schemas, each the merge of the outer object schema
with one branch. Written that way, the value positions of the merged objects can call rules
(:meth:`~grammask.grammars.fsm.json_schema._Lowerer.value`) where an intersection of the object
languages could not: the pushdown runtime keeps its calls, and nothing is unrolled to a depth.

Merging is exact for the keywords listed in :data:`OBJECT_KEYWORDS` (annotations aside): an object satisfies two schemas
exactly when every member satisfies both schemas' rules for its name and it has every name either
requires. A member's two rules become one ``allOf`` subschema, which is merged again where both
are objects and intersected otherwise. Any other keyword (``patternProperties``, counts,
dependencies, nested applicators...) makes :func:`object_view` decline (``None``).

Array schemas under ``allOf`` merge alike (:data:`ARRAY_KEYWORDS`): an array satisfies two of them
exactly when its length is within both bounds, every item satisfies both item schemas and it has
the items ``contains`` asks for (one of the two may ask), so the items' schemas become one
``allOf`` (merged again where both are objects) rather than an intersection of two array
languages, whose item states would multiply.
"""

from __future__ import annotations

from typing import Any, Callable

from grammask.schemas.keywords import KEYWORDS

OBJECT_KEYWORDS = frozenset(("type", "properties", "required", "additionalProperties"))
"""The assertions a schema may have to be merged as an object schema."""


def is_annotation(keyword: str) -> bool:
    """Whether ``keyword`` has no effect on validity: a known annotation (``title``, ``$defs``…) or
    a keyword JSON Schema does not define (``x-…``, ``preferredOrder``), which validators ignore."""
    known = KEYWORDS.get(keyword)
    return known is None or not known.assertion


def negated_required(negated: Any) -> list[str] | None:
    """The names of a ``not`` that asserts only ``required`` (``not: {"required": [...]}``,
    annotations beside it), else ``None``. No object has all of them; every other value satisfies
    ``required``, so such a ``not`` rejects it."""
    if not isinstance(negated, dict) or [k for k in negated if not is_annotation(k)] != ["required"]:
        return None
    names = negated["required"]
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def view_types(declared: Any, kind: str) -> frozenset[str] | None | bool:
    """The types of a view of ``kind`` (``"object"`` or ``"array"``) whose schema's ``type`` is
    ``declared``: ``None`` for any type (no ``type``), else the set named, which holds ``kind``
    (the other types' values are all valid: the view's keywords constrain ``kind`` only);
    ``False`` where ``declared`` is malformed or leaves ``kind`` out (no view of ``kind``)."""
    if declared is None:
        return None
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPE_NAMES for n in names) or kind not in names:
        return False
    return frozenset(names)


_TYPE_NAMES = frozenset(("null", "boolean", "integer", "number", "string", "array", "object"))


def meet_types(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    """The types both view type sets allow (``None``: any; ``integer`` is within ``number``)."""
    if a is None or b is None:
        return b if a is None else a
    return frozenset(t for t in a | b if (t in a or (t == "integer" and "number" in a)) and (t in b or (t == "integer" and "number" in b)))


def object_view(schema: Any) -> dict | None:
    """``{"types", "properties", "required", "additional"}`` of a mergeable object schema (types
    ``None``: any value, the keywords constraining objects only; else the types its ``type``
    names, object among them: :func:`view_types`), or ``None`` (not a dict, an assertion
    outside :data:`OBJECT_KEYWORDS`, a ``type`` without object)."""
    if schema is True:
        return {"types": None, "properties": {}, "required": [], "additional": True}
    if not isinstance(schema, dict) or any(k not in OBJECT_KEYWORDS and not is_annotation(k) for k in schema):
        return None
    types = view_types(schema.get("type"), "object")
    if types is False:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    return {"types": types, "properties": properties, "required": required, "additional": schema.get("additionalProperties", True)}


def deciding_schema(a: Any, b: Any) -> Any:
    """The schema of values satisfying ``a`` and ``b`` where one of them alone decides (the other
    constrains nothing, or is the same, or one is ``false``); ``None`` otherwise."""
    if a is True or a == {}:
        return b
    if b is True or b == {} or a is b:
        return a
    if a is False or b is False:
        return False
    return None


def both_schemas(a: Any, b: Any) -> Any:
    """A schema for values satisfying ``a`` and ``b`` (a new ``allOf`` unless one of them decides)."""
    decided = deciding_schema(a, b)
    return {"allOf": [a, b]} if decided is None else decided


def merge_views(a: dict, b: dict, both: Callable[[Any, Any], Any] = both_schemas) -> dict:
    """The object schema of values satisfying both views; ``both`` combines two member schemas
    (a lowering passes one that gives the same pair the same schema object)."""
    types = meet_types(a["types"], b["types"])
    names = list(dict.fromkeys([*a["properties"], *b["properties"]]))
    properties = {
        name: both(a["properties"].get(name, a["additional"]), b["properties"].get(name, b["additional"])) for name in names
    }
    return {
        "types": types,
        "properties": properties,
        "required": list(dict.fromkeys([*a["required"], *b["required"]])),
        "additional": both(a["additional"], b["additional"]),
    }


ARRAY_KEYWORDS = frozenset(("type", "items", "minItems", "maxItems", "contains", "minContains", "maxContains"))
"""The assertions a schema may have to be merged as an array schema (after
:func:`~grammask.schemas.normalize.normalize_keywords`: ``items`` applies to every item)."""


def array_view(schema: Any) -> dict | None:
    """``{"types", "items", "min", "max", "contains"}`` of a mergeable array schema (types ``None``:
    any value, the keywords constraining arrays only; ``max`` ``None``: no bound; ``contains``
    ``None`` or ``(schema, minContains, maxContains)``), or ``None`` (not a dict, an assertion
    outside :data:`ARRAY_KEYWORDS`, a type other than array, a malformed bound)."""
    if schema is True:
        return {"types": None, "items": True, "min": 0, "max": None, "contains": None}
    if not isinstance(schema, dict) or any(k not in ARRAY_KEYWORDS and not is_annotation(k) for k in schema):
        return None
    types = view_types(schema.get("type"), "array")
    if types is False:
        return None
    items, low, high = schema.get("items", True), schema.get("minItems", 0), schema.get("maxItems")
    contains = (schema["contains"], schema.get("minContains", 1), schema.get("maxContains")) if "contains" in schema else None
    bounds_ok = all(type(b) is int and b >= 0 for b in (low, high, *(contains or ())[1:]) if b is not None)
    if not isinstance(items, (dict, bool)) or not bounds_ok or not isinstance((contains or (True,))[0], (dict, bool)):
        return None
    return {"types": types, "items": items, "min": low, "max": high, "contains": contains}


def merge_array_views(a: dict, b: dict, both: Callable[[Any, Any], Any] = both_schemas) -> dict | None:
    """The array schema of values satisfying both views: items satisfying both item schemas
    (combined by ``both``, as in :func:`merge_views`), the larger lower bound and the smaller upper
    one, the ``contains`` of either; ``None`` where both have one (no one schema says both)."""
    if a["contains"] is not None and b["contains"] is not None:
        return None
    highs = [h for h in (a["max"], b["max"]) if h is not None]
    return {
        "types": meet_types(a["types"], b["types"]),
        "items": both(a["items"], b["items"]),
        "min": max(a["min"], b["min"]),
        "max": min(highs) if highs else None,
        "contains": a["contains"] or b["contains"],
    }


def _kept_unless_true(value: Any) -> bool:
    return value is not True  # an item or member schema of ``true`` is the keyword's default


def _kept_unless_none(value: Any) -> bool:
    return value is not None


_ARRAY_KEYWORDS_OF_VIEW = (("items", "items", _kept_unless_true), ("min", "minItems", bool), ("max", "maxItems", _kept_unless_none))
_OBJECT_KEYWORDS_OF_VIEW = (
    ("properties", "properties", bool), ("required", "required", bool), ("additional", "additionalProperties", _kept_unless_true),
)


def _schema_of_view(view: dict, keywords: tuple) -> dict:
    """A JSON Schema object for a merged view: its types, then each ``(view key, keyword, kept)``
    whose value ``kept`` says differs from the keyword's default."""
    out: dict[str, Any] = {} if view["types"] is None else {"type": sorted(view["types"])}
    for key, keyword, kept in keywords:
        if kept(view[key]):
            out[keyword] = view[key]
    return out


def array_view_to_schema(view: dict) -> dict:
    """A JSON Schema object for a merged array view."""
    out = _schema_of_view(view, _ARRAY_KEYWORDS_OF_VIEW)
    if view["contains"] is not None:
        out["contains"], out["minContains"] = view["contains"][:2]
        if view["contains"][2] is not None:
            out["maxContains"] = view["contains"][2]
    return out


def view_to_schema(view: dict) -> dict:
    """A JSON Schema object for a merged view."""
    return _schema_of_view(view, _OBJECT_KEYWORDS_OF_VIEW)


__all__ = [
    "ARRAY_KEYWORDS", "both_schemas", "deciding_schema", "OBJECT_KEYWORDS", "array_view", "array_view_to_schema", "is_annotation", "merge_array_views",
    "meet_types", "merge_views", "negated_required", "object_view", "view_to_schema", "view_types",
]
