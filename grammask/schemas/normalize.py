"""Draft differences: read any draft's schema object with 2020-12 keyword names.

Normalisation is shallow and per schema object (:func:`normalize_keywords`): it returns a new dict
for one schema object whose subschemas are the *same objects* as in the document, so JSON
pointers, ``$ref`` targets and identity-based caches keep working.
"""

from __future__ import annotations

from typing import Any

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.schemas.resolve import SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS, Resolver, subschemas
from grammask.schemas.validate import json_pointer, validator_class

_DRAFT_BY_NAME = {
    "Draft3Validator": 3,
    "Draft4Validator": 4,
    "Draft6Validator": 6,
    "Draft7Validator": 7,
    "Draft201909Validator": 2019,
    "Draft202012Validator": 2020,
}


def draft_of(schema: Any) -> int:
    """The draft a schema declares in ``$schema``: 4, 6, 7, 2019 or 2020 (2020 when absent or unknown)."""
    return _DRAFT_BY_NAME.get(validator_class(schema).__name__, 2020)


_DRAFTS_DEFINING: dict[str, tuple[int, int]] = {
    "const": (6, 2020),
    "contains": (6, 2020),
    "propertyNames": (6, 2020),
    "if": (7, 2020),
    "then": (7, 2020),
    "else": (7, 2020),
    "dependentRequired": (2019, 2020),
    "dependentSchemas": (2019, 2020),
    "unevaluatedProperties": (2019, 2020),
    "unevaluatedItems": (2019, 2020),
    "minContains": (2019, 2020),
    "maxContains": (2019, 2020),
    "$recursiveRef": (2019, 2019),
    "prefixItems": (2020, 2020),
    "$dynamicRef": (2020, 2020),
    "dependencies": (3, 7),
    "additionalItems": (3, 2019),
}
"""The assertion keywords that only some drafts define: the first and the last draft that do. The
validators of any other draft ignore them, as they ignore every keyword they do not know."""


def undefined_keywords(draft: int) -> frozenset[str]:
    """The assertion keywords that ``draft`` does not define (:data:`_DRAFTS_DEFINING`)."""
    return frozenset(name for name, (first, last) in _DRAFTS_DEFINING.items() if not first <= draft <= last)


def without_undefined_keywords(document: Any, backend: str) -> Any:
    """``document`` as the validators of its draft read it: every keyword its draft does not define
    (a draft-04 ``const``, a draft-07 ``prefixItems`` or ``minContains``) removed from each of its
    schema objects. Such a keyword is an annotation there, so enforcing it would reject valid
    instances, or accept invalid ones where it changes how a defined keyword reads (``minContains:
    0`` beside ``contains``, ``prefixItems`` beside ``items``). The result validates every instance
    as ``document`` does; it is ``document`` itself when nothing is removed, and otherwise shares
    every subschema that loses nothing.

    Raises:
        UnsupportedFeatureError: a ``$ref`` of ``document`` points into a removed keyword's value
            (``backend`` names who refuses).
    """
    undefined = undefined_keywords(draft_of(document))
    if all(not isinstance(node, dict) or undefined.isdisjoint(node) for _, node in subschemas(document)):
        return document
    kept = without_keywords(document, undefined)
    _check_references_kept(document, kept, backend)
    return kept


def without_keywords(schema: Any, keywords: frozenset[str]) -> Any:
    """``schema`` without the ``keywords`` in it or in any subschema (copied on write:
    ``schema`` itself when none is there). References are not checked (see
    :func:`without_undefined_keywords`)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in keywords:
            continue
        if key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            kept = {name: without_keywords(sub, keywords) for name, sub in value.items()}
            out[key] = value if all(kept[name] is sub for name, sub in value.items()) else kept
        elif key in SCHEMA_LIST_KEYWORDS and isinstance(value, list):
            kept_list = [without_keywords(sub, keywords) for sub in value]
            out[key] = value if all(a is b for a, b in zip(kept_list, value)) else kept_list
        elif key in SCHEMA_KEYWORDS:
            out[key] = without_keywords(value, keywords)
        else:
            out[key] = value
    if len(out) == len(schema) and all(out[key] is value for key, value in schema.items()):
        return schema
    return out


def _check_references_kept(document: Any, kept: Any, backend: str) -> None:
    """Raise where a reference of ``kept`` lands on nothing while it lands in ``document``."""
    resolver = Resolver(kept)
    for keyword, ref, schema, path in resolver.references:
        try:
            resolver.resolve(ref, resolver.base_of(schema), path + (keyword,))
        except InvalidSchemaError:
            original = Resolver(document)
            original.resolve(ref, original.base_of(_at(document, path)), path + (keyword,))  # raises if it never resolved
            raise UnsupportedFeatureError(
                keyword, json_pointer(path), backend, f"{ref!r} points into a keyword that draft {draft_of(document)} does not define"
            ) from None


def _at(document: Any, path: tuple) -> Any:
    for token in path:
        document = document[token]
    return document


def normalize_keywords(schema: dict[str, Any], draft: int) -> dict[str, Any]:
    """``schema``'s keywords under their 2020-12 names and meanings.

    * draft ≤ 7: ``$ref`` overrides every sibling keyword;
    * draft 4: boolean ``exclusiveMinimum`` / ``exclusiveMaximum`` become numeric bounds;
    * draft ≤ 2019: an ``items`` array is ``prefixItems`` and ``additionalItems`` is ``items``;
    * draft ≤ 7: ``dependencies`` splits into ``dependentRequired`` and ``dependentSchemas``.
    """
    if draft >= 2020:
        return schema
    if draft <= 7 and "$ref" in schema:
        return {"$ref": schema["$ref"]}
    out = dict(schema)
    if draft <= 4:
        for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(flag), bool):
                if out.pop(flag) and bound in out:
                    out[flag] = out.pop(bound)
    if isinstance(out.get("items"), list):
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    else:
        out.pop("additionalItems", None)
    if draft <= 7 and isinstance(out.get("dependencies"), dict):
        deps = out.pop("dependencies")
        required = {k: v for k, v in deps.items() if isinstance(v, list)}
        schemas = {k: v for k, v in deps.items() if not isinstance(v, list)}
        if required:
            out["dependentRequired"] = required
        if schemas:
            out["dependentSchemas"] = schemas
    return out


__all__ = ["draft_of", "normalize_keywords", "undefined_keywords", "without_keywords", "without_undefined_keywords"]
