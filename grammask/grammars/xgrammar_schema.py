"""What xgrammar needs done to a JSON Schema before it compiles it, and what it does not enforce."""

from __future__ import annotations

import copy
import regex as re
from typing import Any

from grammask.grammars.base import Unenforced
from grammask.schemas.walk import iter_subschemas

# Keywords that only constrain one JSON type (``number`` covers integers).
TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    "object": frozenset(
        {
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "dependencies",
            "unevaluatedProperties",
        }
    ),
    "array": frozenset(
        {
            "items",
            "prefixItems",
            "additionalItems",
            "minItems",
            "maxItems",
            "contains",
            "minContains",
            "maxContains",
            "uniqueItems",
            "unevaluatedItems",
        }
    ),
    "string": frozenset({"minLength", "maxLength", "pattern", "format"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
}
_ALL_TYPES = ("object", "array", "string", "number", "boolean", "null")
# Keywords that, once present, already fix the set of values (xgrammar handles them without a type).
_VALUE_FIXING = ("type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf")

# Measured with xgrammar 0.2.8: instances that break these keywords are still accepted.
XGRAMMAR_IGNORES: dict[str, str] = {
    "not": "ignored: values matching the 'not' schema are accepted",
    "if": "if/then/else ignored",
    "dependentRequired": "ignored",
    "dependentSchemas": "ignored",
    "dependencies": "ignored",
    "uniqueItems": "ignored: duplicate items are accepted",
    "contains": "ignored: arrays without a matching item are accepted",
    "minContains": "ignored",
    "maxContains": "ignored",
    "oneOf": "treated as anyOf: values matching several branches are accepted",
    "allOf": "branches merged approximately: some constraints of later branches are dropped",
    "unevaluatedProperties": "ignored",
    "unevaluatedItems": "approximated: items evaluated by in-place applicators (anyOf, ...) are not tracked",
    "$dynamicRef": "resolved statically",
}
# Formats whose xgrammar 0.2.8 grammar is looser than the format (measured on the test suite's optional/format).
XGRAMMAR_APPROXIMATE_FORMATS = {
    "date-time": "approximate: accepts leap seconds at any minute and days past the month's end",
    "time": "approximate: accepts leap seconds at any minute",
}
# Formats xgrammar 0.2.8 has a grammar for; any other format is accepted as a plain string.
XGRAMMAR_FORMATS = frozenset(
    {
        "date",
        "time",
        "date-time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uuid",
        "uri",
        "uri-reference",
        "json-pointer",
        "relative-json-pointer",
        "uri-template",
    }
)


def xgrammar_unenforced(schema: Any, *, any_order: bool = False) -> tuple[Unenforced, ...]:
    """The keywords of ``schema`` (with their JSON pointers) that xgrammar does not enforce, once
    :func:`prepare_schema` has rewritten it. With ``any_order``, xgrammar checks neither required keys
    nor duplicate keys."""
    found: list[Unenforced] = []
    subschemas = list(iter_subschemas(schema))
    nested_ids = any("$id" in sub for pointer, sub in subschemas if pointer)
    for pointer, sub in subschemas:
        ref = sub.get("$ref")
        if isinstance(ref, str) and (nested_ids or not (ref == "#" or ref.startswith("#/"))):
            found.append(Unenforced("$ref", pointer, "xgrammar resolves only local JSON pointers against the root"))
        if any_order and sub.get("required"):
            found.append(Unenforced("required", pointer, "not checked when properties may come in any order"))
        elif _unplaceable_required(sub):
            names = ", ".join(_unplaceable_required(sub))
            found.append(Unenforced("required", pointer, f"names outside 'properties' not required: {names}"))
        for keyword, reason in XGRAMMAR_IGNORES.items():
            if keyword in sub:
                found.append(Unenforced(keyword, pointer, reason))
        if _overlapping_patterns(sub):
            found.append(Unenforced("patternProperties", pointer, "a name matched by several patterns (or a pattern and "
                                    "'properties') is checked against one of them only"))
        multiple = sub.get("multipleOf")
        if multiple is not None and (not _is_integer_schema(sub) or not float(multiple).is_integer()):
            found.append(Unenforced("multipleOf", pointer, "ignored on non-integers"))
        fmt = sub.get("format")
        if isinstance(fmt, str) and _may_be_string(sub):
            if fmt not in XGRAMMAR_FORMATS:
                found.append(Unenforced("format", pointer, f"format '{fmt}' accepted as any string"))
            elif fmt in XGRAMMAR_APPROXIMATE_FORMATS:
                found.append(Unenforced("format", pointer, XGRAMMAR_APPROXIMATE_FORMATS[fmt]))
    return tuple(found)


def xgrammar_narrowed(schema: Any) -> tuple[Unenforced, ...]:
    """Where xgrammar's grammar for ``schema`` rejects valid instances: strings bounded by length or
    constrained by ``pattern`` take no escape sequences (no ``\\"``, ``\\n``, ``\\u00e9``)."""
    found = []
    for pointer, sub in iter_subschemas(schema):
        for keyword in ("minLength", "maxLength", "pattern"):
            if keyword in sub and _may_be_string(sub):
                found.append(Unenforced(keyword, pointer, "string values with escape sequences are rejected"))
                break
    return tuple(found)


def _is_integer_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "integer"


def _may_be_string(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)


def prepare_schema(schema: Any) -> Any:
    """A copy of ``schema`` that xgrammar compiles to the right language: type-specific keywords
    without ``type`` are split by type, and ``pattern`` gets JSON Schema's search semantics."""
    schema = copy.deepcopy(schema)
    for _pointer, sub in list(iter_subschemas(schema)):
        pattern = sub.get("pattern")
        if isinstance(pattern, str):
            sub["pattern"] = unanchor_pattern(pattern)
        _declare_required(sub)
        split = _split_by_type(sub)
        if split is not None:
            sub.clear()
            sub.update(split)
    return schema


def _overlapping_patterns(schema: dict[str, Any]) -> bool:
    """Whether a property name may be matched by two of ``patternProperties`` (any two patterns are
    taken to overlap) or by a pattern and a ``properties`` entry."""
    patterns = schema.get("patternProperties")
    if not isinstance(patterns, dict) or not patterns:
        return False
    if len(patterns) > 1:
        return True
    names = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    pattern = next(iter(patterns))
    try:
        return any(re.search(pattern, name) for name in names)
    except re.error:
        return True


def without_formats(schema: Any) -> Any:
    """A copy of ``schema`` with no ``format`` keyword in any subschema (formats as annotations)."""
    schema = copy.deepcopy(schema)
    for _pointer, sub in list(iter_subschemas(schema)):
        sub.pop("format", None)
    return schema


def _missing_required(schema: dict[str, Any]) -> list[str]:
    required = schema.get("required")
    properties = schema.get("properties")
    if not isinstance(required, list):
        return []
    declared = properties if isinstance(properties, dict) else {}
    return [name for name in required if isinstance(name, str) and name not in declared]


def _unplaceable_required(schema: dict[str, Any]) -> list[str]:
    """Required names :func:`_declare_required` cannot declare (their schema is not one schema)."""
    if "patternProperties" in schema or schema.get("additionalProperties") is False:
        return _missing_required(schema)
    return []


def _declare_required(schema: dict[str, Any]) -> None:
    """xgrammar only requires names listed in ``properties``: declare each missing required name with
    the schema it has anyway (``additionalProperties``, or ``{}``)."""
    if _unplaceable_required(schema):
        return
    missing = _missing_required(schema)
    if missing:
        extra = schema.get("additionalProperties", {})
        properties = dict(schema.get("properties") or {})
        properties.update({name: copy.deepcopy(extra) for name in missing})
        schema["properties"] = properties


def _split_by_type(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``{"properties": ...}`` → ``{"anyOf": [{"type": "object", "properties": ...}, {"type": [others]}]}``."""
    if any(k in schema for k in _VALUE_FIXING):
        return None
    constrained = [t for t in TYPE_KEYWORDS if any(k in schema for k in TYPE_KEYWORDS[t])]
    if not constrained:
        return None
    typed = set().union(*TYPE_KEYWORDS.values())
    generic = {k: v for k, v in schema.items() if k not in typed}
    branches = [
        {"type": t, **{k: v for k, v in schema.items() if k in TYPE_KEYWORDS[t]}} for t in constrained
    ]
    free = [t for t in _ALL_TYPES if t not in constrained]
    if free:
        branches.append({"type": free})
    return {**generic, "anyOf": branches}


def unanchor_pattern(pattern: str) -> str:
    """Rewrite a JSON Schema ``pattern`` (a match anywhere in the string) as a whole-string regex.

    Each top-level alternative keeps its own ``^`` / ``$``; where one is missing, any text may
    stand there.
    """
    alternatives = _split_top_level(pattern)
    rewritten = []
    for alternative in alternatives:
        start = alternative.startswith("^")
        end = alternative.endswith("$") and not _is_escaped(alternative, len(alternative) - 1)
        core = alternative[1 if start else 0 : len(alternative) - 1 if end else len(alternative)]
        rewritten.append(("" if start else r"[\s\S]*") + f"(?:{core})" + ("" if end else r"[\s\S]*"))
    return "|".join(rewritten) if len(rewritten) > 1 else rewritten[0]


def _is_escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and text[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _split_top_level(pattern: str) -> list[str]:
    """Split at ``|`` outside groups and character classes."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts
