"""Draft differences: read any draft's schema object with 2020-12 keyword names.

Normalisation is shallow and per schema object (:func:`normalize_keywords`): it returns a new dict
for one schema object whose subschemas are the *same objects* as in the document, so JSON
pointers, ``$ref`` targets and identity-based caches keep working.
"""

from __future__ import annotations

from typing import Any

from grammask.schemas.validate import validator_class

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


__all__ = ["draft_of", "normalize_keywords"]
