"""Catalogue of JSON Schema keywords: what each one is, and how the fsm backend treats it.

The conformance report uses it to tell, keyword by keyword, what a backend enforces. Support levels:

* ``EXACT`` — lowered exactly (within the policy's canonical text form);
* ``PARTIAL`` — lowered exactly in the common cases; the rest raises or is listed in ``unenforced``
  (the note says when);
* ``UNSUPPORTED`` — raises :class:`~grammask.errors.UnsupportedFeatureError`;
* ``ANNOTATION`` — no effect on validity, nothing to enforce.

A keyword the schema's declared draft does not define (a draft-04 ``const``) is an annotation there
whatever its level here (:func:`grammask.schemas.normalize.without_undefined_keywords`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterator

from grammask.schemas.resolve import subschemas


class Support(str, enum.Enum):
    EXACT = "exact"
    PARTIAL = "partial"
    UNSUPPORTED = "unsupported"
    ANNOTATION = "annotation"


@dataclass(frozen=True)
class Keyword:
    """One keyword: its name, whether it asserts anything, and the fsm backend's support."""

    name: str
    assertion: bool
    fsm: Support
    note: str = ""


_E, _P, _U, _A = Support.EXACT, Support.PARTIAL, Support.UNSUPPORTED, Support.ANNOTATION

KEYWORDS: dict[str, Keyword] = {
    k.name: k
    for k in [
        Keyword("type", True, _E, "integer accepts 1.0 (not in draft 4); numbers are written without exponent"),
        Keyword("enum", True, _E, "JSON equality: 1 == 1.0, objects in any key order under ANY"),
        Keyword("const", True, _E),
        Keyword("allOf", True, _E, "intersection"),
        Keyword("anyOf", True, _E, "union"),
        Keyword("oneOf", True, _E, "each branch minus the union of the others; a plain union when provably disjoint"),
        Keyword("not", True, _E, "complement within the JSON values of the policy"),
        Keyword("if", True, _E, "(if ∩ then) ∪ (¬if ∩ else)"),
        Keyword("then", True, _E),
        Keyword("else", True, _E),
        Keyword("$ref", True, _P, "local references only; remote ones raise; recursion inlined under a complement unrolled to max_depth"),
        Keyword("$defs", False, _A),
        Keyword("definitions", False, _A),
        Keyword("$anchor", False, _A),
        Keyword("$id", False, _A),
        Keyword("$dynamicRef", True, _U, "2020-12; dynamic scope is not resolved"),
        Keyword("$recursiveRef", True, _U, "2019-09; dynamic scope is not resolved"),
        Keyword("properties", True, _E),
        Keyword("required", True, _E),
        Keyword("additionalProperties", True, _E),
        Keyword("patternProperties", True, _P, "patterns with lookarounds or backreferences raise"),
        Keyword("propertyNames", True, _E),
        Keyword("minProperties", True, _E),
        Keyword("maxProperties", True, _E),
        Keyword("dependentRequired", True, _E),
        Keyword("dependentSchemas", True, _E),
        Keyword("dependencies", True, _E, "draft ≤ 7, read as dependentRequired / dependentSchemas"),
        Keyword("unevaluatedProperties", True, _P, "evaluated names followed through allOf and $ref; raises next to anyOf, oneOf, if, dependentSchemas"),
        Keyword("items", True, _E),
        Keyword("prefixItems", True, _E),
        Keyword("additionalItems", True, _E, "draft ≤ 2019"),
        Keyword("unevaluatedItems", True, _P, "evaluated prefix followed through allOf and $ref; raises next to anyOf, oneOf, if, contains"),
        Keyword("minItems", True, _E),
        Keyword("maxItems", True, _E),
        Keyword("contains", True, _E),
        Keyword("minContains", True, _E),
        Keyword("maxContains", True, _E),
        Keyword("uniqueItems", True, _P, "enforced when items come from a small finite set; listed as unenforced otherwise"),
        Keyword("minLength", True, _E, "counts code points, up to 5000"),
        Keyword("maxLength", True, _E, "counts code points, up to 5000"),
        Keyword("pattern", True, _P, "ECMA regex; lookarounds and backreferences raise"),
        Keyword("format", True, _P, "asserted (unless assert_formats=False) for the formats of grammask.schemas.formats; "
                "hostname without A-labels (xn--) and idn-hostname as ASCII names (narrowed); others listed as unenforced"),
        Keyword("minimum", True, _E),
        Keyword("maximum", True, _E),
        Keyword("exclusiveMinimum", True, _E),
        Keyword("exclusiveMaximum", True, _E),
        Keyword("multipleOf", True, _P, "exact when its digit automaton is small (e.g. 2, 3, 0.01, 1.5); raises otherwise"),
        Keyword("contentMediaType", False, _A, "an annotation in 2020-12"),
        Keyword("contentEncoding", False, _A, "an annotation in 2020-12"),
        Keyword("contentSchema", False, _A, "an annotation in 2020-12"),
        Keyword("title", False, _A),
        Keyword("description", False, _A),
        Keyword("default", False, _A),
        Keyword("examples", False, _A),
        Keyword("deprecated", False, _A),
        Keyword("readOnly", False, _A),
        Keyword("writeOnly", False, _A),
        Keyword("$comment", False, _A),
        Keyword("$schema", False, _A),
        Keyword("$vocabulary", False, _A),
    ]
}
"""Keyword name → :class:`Keyword`. Names not listed are unknown keywords (annotations by the spec)."""


def keywords_used(schema: Any) -> Iterator[tuple[str, str]]:
    """Yield ``(keyword, json_pointer)`` for every keyword of every schema object in ``schema``."""
    for path, node in subschemas(schema):
        if isinstance(node, dict):
            pointer = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
            for name in node:
                yield name, pointer


def accepts_everything(schema: Any) -> bool:
    """Whether ``schema`` is ``true`` or an object of known non-assertion keywords only (``{}``,
    ``{"description": …}``): every instance is valid. ``False`` means "not shown", not "no"."""
    if schema is True:
        return True
    return isinstance(schema, dict) and all(name in KEYWORDS and not KEYWORDS[name].assertion for name in schema)


def fsm_support(schema: Any) -> dict[str, Support]:
    """For each known keyword a schema uses, the fsm backend's support level."""
    return {name: KEYWORDS[name].fsm for name, _ in keywords_used(schema) if name in KEYWORDS}


__all__ = ["KEYWORDS", "Keyword", "Support", "accepts_everything", "fsm_support", "keywords_used"]
