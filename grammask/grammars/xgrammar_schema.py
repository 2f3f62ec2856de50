"""What xgrammar needs done to a JSON Schema before it compiles it, and what it then does not
enforce (``unenforced``: outputs may break it) or enforces too strictly (``narrowed``).

What xgrammar 0.2.8 does with a schema object (measured against ``jsonschema``;
``tests/grammars/test_xgrammar_schema.py`` holds a case of each, and checks that every value the
grammar then accepts wrongly is listed):

* it reads the first of ``$ref``, ``const``, ``enum``, ``anyOf``, ``oneOf``, ``allOf`` the object
  holds and ignores every sibling keyword (``{"type": "string", "anyOf": [...]}`` accepted ``68``);
  ``allOf`` with two or more branches accepts any value; ``oneOf`` is read as ``anyOf``;
* a keyword that constrains one type, without ``type``, rejects every other type;
* of a string's ``format``, ``pattern`` and length bounds it enforces only the first it finds, in
  that order, and it drops lookarounds from a pattern (with a log warning);
* ``multipleOf`` holds only on integers, up to 1024, without bounds or between two bounds at most
  10,000 values apart; a number with bounds takes at most 6 fraction digits;
* ``propertyNames`` is not applied to the names in ``properties`` (their values then go
  unchecked), nor next to ``additionalProperties: false``; ``patternProperties`` next to
  ``properties`` lets any member through, alone it rejects names that match no pattern; a
  declared name beyond ASCII or with characters JSON escapes passes as another member, and so
  did any declared name spelled with an escape (``"\\u0061"``: the grammask backend admits only
  canonical escapes);
* ``not``, ``if``, ``dependent*``, ``contains``, ``uniqueItems`` and ``unevaluated*`` are ignored;
* several formats are looser than their RFC (:data:`XGRAMMAR_APPROXIMATE_FORMATS`) or stricter
  (:data:`XGRAMMAR_NARROWED_FORMATS`).

:func:`prepare_for_xgrammar` rewrites the schema so that xgrammar drops nothing an exact rewrite
can keep, and lists, at the pointer of the original schema object, whatever is still lost:

* ``allOf`` branches are merged into their schema object keyword by keyword (types intersected,
  bounds tightened, ``required`` and ``dependentRequired`` united, ``enum`` intersected,
  ``properties`` and ``prefixItems`` merged with each side's ``additionalProperties`` / ``items``
  standing for the names and positions the other side lists); a keyword that cannot be merged
  (two patterns, two ``not``) is dropped from one side and listed;
* the siblings of ``anyOf`` / ``oneOf`` are merged into every branch (S ∧ (A ∨ B) is
  (S ∧ A) ∨ (S ∧ B), and exactly one of S ∧ Aᵢ holds when exactly one Aᵢ does); a ``oneOf`` whose
  branches are provably disjoint is an ``anyOf``;
* a ``$ref`` with sibling assertions is inlined once, its target merged with them; every other
  reference is pointed at a copy of its target in ``$defs``, so that the rewrite of the document
  around it cannot move it (and ``$id`` / ``$anchor`` references resolve);
* ``enum`` / ``const`` with sibling assertions keep only the values the siblings accept;
* keywords of one type without ``type`` are split into one ``anyOf`` branch per type; property
  names are strings; ``pattern`` and ``patternProperties`` get JSON Schema's search semantics;
  drafts 4-2019 are read with 2020-12 names.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import regex as re

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.base import Unenforced
from grammask.grammars.fsm.disjoint import BASIC_TYPES, DisjointnessProver, value_key
from grammask.schemas.keywords import KEYWORDS
from grammask.schemas.normalize import draft_of, normalize_keywords
from grammask.schemas.resolve import Resolver, escape_pointer_token
from grammask.schemas.validate import asserted_formats, json_pointer, unasserted_format_note
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
            "unevaluatedProperties",
        }
    ),
    "array": frozenset(
        {"items", "prefixItems", "minItems", "maxItems", "contains", "minContains", "maxContains", "uniqueItems", "unevaluatedItems"}
    ),
    "string": frozenset({"minLength", "maxLength", "pattern", "format"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
}
_ALL_TYPES = ("object", "array", "string", "number", "boolean", "null")
_IN_PLACE = ("$ref", "const", "enum", "anyOf", "oneOf", "allOf")
"""xgrammar reads the first of these a schema object holds and ignores its siblings."""

# Measured with xgrammar 0.2.8: instances that break these keywords are still accepted.
XGRAMMAR_IGNORES: dict[str, str] = {
    "not": "ignored: values matching the 'not' schema are accepted",
    "if": "if/then/else ignored",
    "dependentRequired": "ignored",
    "dependentSchemas": "ignored",
    "uniqueItems": "ignored: duplicate items are accepted",
    "contains": "ignored: arrays without a matching item are accepted",
    "minContains": "ignored",
    "maxContains": "ignored",
    "unevaluatedProperties": "ignored",
    "unevaluatedItems": "ignored",
    "$dynamicRef": "not followed: any value accepted",
}
# Formats whose xgrammar 0.2.8 grammar accepts invalid strings (measured on the test suite's optional/format).
XGRAMMAR_APPROXIMATE_FORMATS = {
    "date": "approximate: accepts days past the month's end (2023-02-31) and February 29 of any year",
    "date-time": "approximate: accepts leap seconds at any minute and days past the month's end",
    "time": "approximate: accepts leap seconds at any minute",
    "hostname": "approximate: accepts labels over 63 characters, names over 253 and invalid xn-- A-labels",
    "ipv6": "approximate: accepts a leading zero in an embedded IPv4 octet",
}
# Formats whose xgrammar 0.2.8 grammar rejects valid strings.
XGRAMMAR_NARROWED_FORMATS = {
    "email": "IP address literals after the @ are rejected",
    "date-time": "a lower-case t or z is rejected",
    "time": "a lower-case z is rejected",
    "ipv6": "some mixed IPv6/IPv4 forms are rejected",
    "uri": "some valid URIs (an IPv6 host followed by a path) are rejected",
    "uri-reference": "some valid references (a query after the path, IPv4-like host names) are rejected",
    "uri-template": "some valid literals (an apostrophe, characters outside the BMP) are rejected",
}
# Formats xgrammar 0.2.8 has a grammar for; any other format is accepted as a plain string.
XGRAMMAR_FORMATS = frozenset(
    {
        "date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri",
        "uri-reference", "json-pointer", "relative-json-pointer", "uri-template",
    }
)  # fmt: skip
MAX_MULTIPLE_OF = 1024
"""The largest integer ``multipleOf`` xgrammar enforces."""
MAX_MULTIPLE_OF_RANGE = 10_000
"""With bounds, xgrammar enforces ``multipleOf`` only when they hold at most this many integers."""
_LOOKAROUND = re.compile(r"(?<!\\)(?:\\\\)*\(\?<?[=!]")
"""A lookahead or lookbehind group in a regex (an unescaped ``(?=``, ``(?!``, ``(?<=``, ``(?<!``)."""
_MERGE_STEPS = 64

_OBJECT_GROUP = ("properties", "additionalProperties", "patternProperties", "unevaluatedProperties")
_ARRAY_GROUP = ("prefixItems", "items", "unevaluatedItems")
_TOGETHER = (("contains", "minContains", "maxContains"), ("if", "then", "else"))
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")
_ANNOTATIONS = frozenset(name for name, keyword in KEYWORDS.items() if not keyword.assertion)
_ASSERTIONS = frozenset(name for name, keyword in KEYWORDS.items() if keyword.assertion)


@dataclass(frozen=True)
class XGrammarSchema:
    """A schema rewritten for xgrammar, with what xgrammar still does not enforce and where it is
    stricter than the schema (pointers into the original schema)."""

    schema: Any
    unenforced: tuple[Unenforced, ...]
    narrowed: tuple[Unenforced, ...]


def prepare_for_xgrammar(schema: Any, *, any_order: bool = False) -> XGrammarSchema:
    """Rewrite ``schema`` (see the module docstring) and list what xgrammar still loses. With
    ``any_order``, xgrammar checks neither required keys nor duplicate keys."""
    rewriter = _Rewriter(schema, any_order=any_order)
    prepared = rewriter.rewrite(schema, _Where(""))
    if rewriter.copies and isinstance(prepared, dict):
        prepared = {**prepared, "$defs": rewriter.copies}
    return XGrammarSchema(prepared, tuple(rewriter.unenforced.values()), tuple(rewriter.narrowed.values()))


def without_formats(schema: Any) -> Any:
    """A copy of ``schema`` with no ``format`` keyword in any subschema (formats as annotations)."""
    schema = copy.deepcopy(schema)
    for _pointer, sub in list(iter_subschemas(schema)):
        sub.pop("format", None)
    return schema


@dataclass(frozen=True)
class _Where:
    """Where a schema object's keywords come from: ``pointer`` for the object itself, ``keywords``
    for keywords merged from other objects (one or several pointers each), ``spelled`` for keywords
    a draft spells otherwise, ``ref_base`` for the base URI its ``$ref`` was written under."""

    pointer: str
    keywords: dict[str, tuple[str, ...]] = field(default_factory=dict)
    spelled: dict[str, str] = field(default_factory=dict)
    ref_base: str | None = None

    def of(self, keyword: str) -> tuple[str, ...]:
        return self.keywords.get(keyword, (self.pointer,))

    def child(self, keyword: str, *keys: Any) -> "_Where":
        tokens = (self.spelled.get(keyword, keyword), *keys)
        return _Where(self.of(keyword)[0] + "".join("/" + escape_pointer_token(str(t)) for t in tokens))

    def merged(self, other: "_Where", taken: list[str], combined: list[str]) -> "_Where":
        """This object's origins, with ``taken`` keywords from ``other`` and ``combined`` ones from both."""
        keywords = {**self.keywords, **{k: other.of(k) for k in taken}}
        keywords.update({k: tuple(dict.fromkeys(self.of(k) + other.of(k))) for k in combined})
        spelled = {**self.spelled, **{k: other.spelled[k] for k in taken if k in other.spelled}}
        return _Where(self.pointer, keywords, spelled, other.ref_base if "$ref" in taken else self.ref_base)


def _asserting(schema: dict, *, but: tuple[str, ...] = ()) -> list[str]:
    """The keywords of ``schema`` that assert something (unknown keywords are annotations)."""
    return [k for k in schema if k in _ASSERTIONS and k not in but]


_LOCATIONS = frozenset({"$id", "$anchor", "$dynamicAnchor", "$defs", "definitions", "$vocabulary", "$schema"})
"""Annotations that place a schema object (its base, its name, its definitions): every reference
is resolved here, so they are left out of what xgrammar reads, where they could only misplace one."""
_DROPPED = {**XGRAMMAR_IGNORES, "then": "if/then/else ignored", "else": "if/then/else ignored", "$recursiveRef": "not followed: any value accepted"}
"""Keywords xgrammar ignores: listed, and left out of what it compiles."""
_KEPT = _ANNOTATIONS - _LOCATIONS


class _Rewriter:
    def __init__(self, root: Any, *, any_order: bool) -> None:
        self.root = root
        self.any_order = any_order
        self.draft = draft_of(root)
        self.judged_formats = asserted_formats(root)
        self.resolver = Resolver(root) if isinstance(root, dict) else None
        self.prover = DisjointnessProver(root, self.resolver) if self.resolver else None
        self.unenforced: dict[tuple[str, str], Unenforced] = {}
        self.narrowed: dict[tuple[str, str], Unenforced] = {}
        self.copies: dict[str, Any] = {}
        self._copy_names: dict[tuple, str] = {}
        self._placed: dict[int, tuple[dict, _Where]] = {}
        self._validator: Any = None
        self._local_refs = self._all_refs_local()

    # ------------------------------------------------------------------ bookkeeping

    def lose(self, keyword: str, pointers: tuple[str, ...], reason: str) -> None:
        for pointer in pointers:
            self.unenforced.setdefault((keyword, pointer), Unenforced(keyword, pointer, reason))

    def narrow(self, keyword: str, pointers: tuple[str, ...], reason: str) -> None:
        for pointer in pointers:
            self.narrowed.setdefault((keyword, pointer), Unenforced(keyword, pointer, reason))

    def place(self, schema: Any, where: _Where) -> Any:
        """Remember where the keywords of ``schema``, a dict built here, come from."""
        if isinstance(schema, dict):
            self._placed[id(schema)] = (schema, where)
        return schema

    def _all_refs_local(self) -> bool:
        """Whether every reference of the document resolves inside it and under the root's base
        (then ``jsonschema`` and the disjointness proofs may read any part of it on its own)."""
        if self.resolver is None:
            return True
        for pointer, sub in iter_subschemas(self.root):
            if "$dynamicRef" in sub or "$recursiveRef" in sub or (pointer and "$id" in sub):
                return False
            if "$ref" in sub:
                try:
                    self.resolver.resolve(sub["$ref"], self.resolver.base_of(sub))
                except (UnsupportedFeatureError, InvalidSchemaError, TypeError, AttributeError):
                    return False
        return True

    # ------------------------------------------------------------------ one schema object

    def rewrite(self, schema: Any, where: _Where, *, names: bool = False) -> Any:
        """The rewritten copy of ``schema`` (``names``: it applies to property names, strings)."""
        if not isinstance(schema, dict):
            return schema
        schema, where = self._prepared(schema, where)
        if names:
            schema, where = self.merge(self.place({"type": "string"}, _Where(where.pointer)), _Where(where.pointer), schema, where)
        schema, where = self._flatten(schema, where)
        if not isinstance(schema, dict):
            return schema
        if "$ref" in schema:
            return self._reference(schema, where)
        if "enum" in schema or "const" in schema:
            return {k: v for k, v in schema.items() if k not in _LOCATIONS}
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                return self._branches(schema, where, keyword)
        split = self._split_by_type(schema, where)
        return split if split is not None else self._typed(schema, where)

    def _prepared(self, schema: dict, where: _Where) -> tuple[dict, _Where]:
        """``schema`` as built here, or an original object read with 2020-12 keyword names
        (remembering how its draft spells them)."""
        placed = self._placed.get(id(schema))
        if placed is not None and placed[0] is schema:
            return schema, placed[1]
        normal = dict(normalize_keywords(schema, self.draft))
        spelled = dict(where.spelled)
        if "prefixItems" in normal and "prefixItems" not in schema:
            spelled["prefixItems"] = "items"
            if "items" in normal:
                spelled["items"] = "additionalItems"
        for keyword in ("dependentRequired", "dependentSchemas"):
            if keyword in normal and keyword not in schema:
                spelled[keyword] = "dependencies"
        ref_base = self.resolver.base_of(schema) if self.resolver is not None and "$ref" in normal else where.ref_base
        where = _Where(where.pointer, where.keywords, spelled, ref_base)
        return self.place(normal, where), where

    def _flatten(self, schema: dict, where: _Where) -> tuple[Any, _Where]:
        """Merge ``allOf`` branches and referenced schemas with sibling assertions into the object,
        and filter ``enum`` / ``const`` by their siblings, until xgrammar reads it whole."""
        inlined: set[tuple] = set()
        for _ in range(_MERGE_STEPS):
            if not isinstance(schema, dict):
                return schema, where
            if "allOf" in schema:
                schema, where = self._merge_all_of(schema, where)
            elif "$ref" in schema and _asserting(schema, but=("$ref",)):
                target = self._target(schema, where)
                if target is None or target.path in inlined:
                    for keyword in _asserting(schema, but=("$ref",)):
                        self.lose(keyword, where.of(keyword), "ignored beside a recursive or unresolvable $ref")
                    return self.place({k: v for k, v in schema.items() if k == "$ref" or k in _KEPT}, where), where
                inlined.add(target.path)
                siblings = self.place({k: v for k, v in schema.items() if k != "$ref"}, where)
                target_schema, target_where = self._prepared(target.schema, _Where(json_pointer(target.path)))
                # The object's own keywords first: its properties come first in declared order.
                schema, where = self.merge(siblings, where, target_schema, target_where)
            else:
                break
        else:
            for keyword in _asserting(schema):
                self.lose(keyword, where.of(keyword), "references nest too deeply to merge: any value accepted")
            return True, where
        if "enum" in schema or "const" in schema:
            schema = self._filter_values(schema, where)
        return schema, where

    def _merge_all_of(self, schema: dict, where: _Where) -> tuple[Any, _Where]:
        branches = schema["allOf"] if isinstance(schema["allOf"], list) else []
        merged: Any = self.place({k: v for k, v in schema.items() if k != "allOf"}, where)
        merged_where = where
        for index, branch in enumerate(branches):
            branch_where = where.child("allOf", index)
            if isinstance(branch, dict):
                branch, branch_where = self._prepared(branch, branch_where)
            merged, merged_where = self.merge(merged, merged_where, branch, branch_where)
        return merged, merged_where

    def _filter_values(self, schema: dict, where: _Where) -> Any:
        """``enum`` / ``const`` that keeps only the values the sibling assertions accept."""
        siblings = _asserting(schema, but=("enum", "const"))
        if not siblings:
            return schema
        values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
        if "const" in schema:
            values = [schema["const"]] if "enum" not in schema else [v for v in values if value_key(v) == value_key(schema["const"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        renamed = self.draft < 2020 and any(k in rest for k in _RENAMED_BY_NORMALIZING)
        try:
            if not self._local_refs or renamed:
                raise ValueError("the siblings cannot be checked here")
            if self._validator is None:
                from grammask.validation import output_validator  # validation imports the fsm backend

                self._validator = output_validator(self.root)
            check = self._validator.evolve(schema=rest)
            kept = [v for v in values if check.is_valid(v)]
        except Exception:  # an unresolvable reference, a pattern Python's re cannot read, ...
            for keyword in siblings:
                self.lose(keyword, where.of(keyword), "ignored beside enum/const")
            return self.place({k: v for k, v in schema.items() if k in ("enum", "const") or k in _KEPT}, where)
        if not kept:
            return False
        return self.place({**{k: v for k, v in schema.items() if k in _KEPT}, "enum": kept}, where)

    def _target(self, schema: dict, where: _Where) -> Any:
        if self.resolver is None or not isinstance(schema.get("$ref"), str):
            return None
        try:
            return self.resolver.resolve(schema["$ref"], where.ref_base or self.resolver.root_base)
        except (UnsupportedFeatureError, InvalidSchemaError):
            return None

    def _reference(self, schema: dict, where: _Where) -> Any:
        """A ``$ref`` alone: point it at a copy of its target in ``$defs`` (made once), so that the
        rewrite of the document around the target cannot move it."""
        annotations = {k: v for k, v in schema.items() if k in _KEPT}
        target = self._target(schema, where)
        if target is None:
            self.lose("$ref", where.of("$ref"), "a reference outside the document is not followed: any value accepted")
            return annotations
        name = self._copy_names.get(target.path)
        if name is None:
            name = self._copy_names[target.path] = f"grammask_ref_{len(self._copy_names)}"
            self.copies[name] = True  # a placeholder while the target is rewritten (it may refer to itself)
            self.copies[name] = self.rewrite(target.schema, _Where(json_pointer(target.path)))
        return {**annotations, "$ref": f"#/$defs/{name}"}

    def _branches(self, schema: dict, where: _Where, keyword: str) -> Any:
        """``anyOf`` / ``oneOf`` with every sibling assertion merged into each branch."""
        branches = schema[keyword] if isinstance(schema[keyword], list) else []
        siblings = self.place({k: v for k, v in schema.items() if k != keyword and k not in _LOCATIONS}, where)
        merged = []
        for index, branch in enumerate(branches):
            branch_where = where.child(keyword, index)
            if isinstance(branch, dict):
                branch, branch_where = self._prepared(branch, branch_where)
            merged.append(self.merge(siblings, where, branch, branch_where))
        # Each merged branch holds the siblings too (a required discriminator, the type).
        disjoint = keyword == "oneOf" and self._provably_disjoint([branch for branch, _ in merged])
        if keyword == "oneOf" and not disjoint:
            self.lose("oneOf", where.of("oneOf"), "treated as anyOf: values matching several branches are accepted")
        rewritten = [self.rewrite(branch, branch_where) for branch, branch_where in merged]
        rewritten = [branch for branch in rewritten if branch is not False]  # a branch no value satisfies adds nothing
        if not rewritten:
            return False
        return {**{k: v for k, v in schema.items() if k in _KEPT}, "anyOf" if disjoint else keyword: rewritten}

    def _provably_disjoint(self, branches: list) -> bool:
        if self.prover is None or not self._local_refs:
            return False
        try:
            return self.prover.disjoint(branches, self.resolver.root_base, set(BASIC_TYPES))
        except Exception:  # a malformed branch: no proof
            return False

    def _split_by_type(self, schema: dict, where: _Where) -> dict | None:
        """``{"properties": ...}`` → ``{"anyOf": [{"type": "object", "properties": ...}, {"type": [others]}]}``."""
        if "type" in schema:
            return None
        constrained = [t for t in TYPE_KEYWORDS if any(k in schema for k in TYPE_KEYWORDS[t])]
        if not constrained:
            return None
        typed = set().union(*TYPE_KEYWORDS.values())
        generic = {k: v for k, v in schema.items() if k not in typed}
        branches = [self._typed({"type": t, **{k: v for k, v in schema.items() if k in TYPE_KEYWORDS[t]}}, where) for t in constrained]
        free = [t for t in _ALL_TYPES if t not in constrained]
        if free:
            branches.append({"type": free})
        return {**self._typed(generic, where), "anyOf": branches}

    # ------------------------------------------------------------------ merging

    def merge(self, a: Any, wa: _Where, b: Any, wb: _Where) -> tuple[Any, _Where]:
        """``a`` ∧ ``b`` as one schema object, keyword by keyword; where a keyword of ``b`` cannot
        be merged with ``a``'s, ``a``'s is kept and ``b``'s is listed."""
        if b is True or b == {}:
            return a, wa
        if a is True or a == {}:
            return b, wb
        if a is False or b is False or not isinstance(a, dict) or not isinstance(b, dict):
            return False, wa
        out = dict(a)
        taken: list[str] = []
        combined: list[str] = []
        done: set[str] = set()
        for group in _GROUPS:
            in_a, in_b = [k for k in group if k in a], [k for k in group if k in b]
            if not (in_a and in_b):
                continue
            done.update(in_b)
            merged = self._merge_group(group, a, wa, b, wb)
            if merged is None:
                for keyword in in_b:
                    self.lose(keyword, wb.of(keyword), f"not merged with '{in_a[0]}' at '{wa.of(in_a[0])[0] or '/'}': ignored")
                continue
            for keyword in group:
                out.pop(keyword, None)
            out.update(merged)
            combined.extend(merged)
        for keyword, value in b.items():
            if keyword in done:
                continue
            if keyword not in out:
                out[keyword] = value
                taken.append(keyword)
                continue
            merged = self._merge_keyword(keyword, out[keyword], value)
            if merged is _UNSATISFIABLE:
                return False, wa
            if merged is None:
                if keyword in _ASSERTIONS:
                    self.lose(keyword, wb.of(keyword), f"not merged with '{keyword}' at '{wa.of(keyword)[0] or '/'}': ignored")
                continue
            if merged is not out[keyword]:
                combined.append(keyword)
            out[keyword] = merged
        where = wa.merged(wb, taken, combined)
        return self.place(out, where), where

    def _merge_keyword(self, keyword: str, a: Any, b: Any) -> Any:
        if value_key(a) == value_key(b):
            return a
        if keyword == "type":
            common = _with_integers(_types(a)) & _with_integers(_types(b))
            if "number" in common:
                common.discard("integer")
            return sorted(common) if common else _UNSATISFIABLE
        if keyword == "required" and isinstance(a, list) and isinstance(b, list):
            return list(dict.fromkeys([*a, *b]))
        if keyword == "enum" and isinstance(a, list) and isinstance(b, list):
            keys = {value_key(v) for v in b}
            common = [v for v in a if value_key(v) in keys]
            return common if common else _UNSATISFIABLE
        if keyword in _LOWER_BOUNDS and _is_number(a) and _is_number(b):
            return max(a, b)
        if keyword in _UPPER_BOUNDS and _is_number(a) and _is_number(b):
            return min(a, b)
        if keyword == "multipleOf" and _is_number(a) and _is_number(b) and float(a).is_integer() and float(b).is_integer():
            return math.lcm(int(a), int(b))
        if keyword == "uniqueItems" and isinstance(a, bool) and isinstance(b, bool):
            return a or b
        if keyword == "dependentRequired" and isinstance(a, dict) and isinstance(b, dict):
            return {name: list(dict.fromkeys([*a.get(name, []), *b.get(name, [])])) for name in {**a, **b}}
        return None

    def _merge_group(self, group: tuple[str, ...], a: dict, wa: _Where, b: dict, wb: _Where) -> dict | None:
        """The keywords of ``group`` (e.g. properties with additionalProperties) of ``a`` ∧ ``b``,
        or None when they cannot be merged exactly."""
        if group is _OBJECT_GROUP:
            return self._merge_members(a, wa, b, wb, "properties", "additionalProperties")
        if group is _ARRAY_GROUP:
            return self._merge_members(a, wa, b, wb, "prefixItems", "items")
        return None

    def _merge_members(self, a: dict, wa: _Where, b: dict, wb: _Where, listed: str, rest: str) -> dict | None:
        """Each side's ``listed`` members (properties, prefixItems) and the schema of the others
        (``rest``): a member one side does not list takes that side's ``rest``."""
        if any(k in side for side in (a, b) for k in ("patternProperties", "unevaluatedProperties", "unevaluatedItems")):
            return None
        named = listed == "properties"
        members = [side.get(listed, {} if named else []) for side in (a, b)]
        if not all(isinstance(m, dict if named else list) for m in members):
            return None
        keys = list(dict.fromkeys([*members[0], *members[1]])) if named else list(range(max(map(len, members))))
        merged_members: Any = {} if named else []
        for key in keys:
            parts = []
            for side, side_members, side_where in ((a, members[0], wa), (b, members[1], wb)):
                if key in side_members if named else key < len(side_members):
                    parts.append((side_members[key], side_where.child(listed, key)))
                else:
                    parts.append((side.get(rest, True), side_where.child(rest)))
            value, _ = self.merge(*parts[0], *parts[1])
            if named:
                merged_members[key] = value
            else:
                merged_members.append(value)
        out: dict = {listed: merged_members} if keys else {}
        rest_value, _ = self.merge(a.get(rest, True), wa.child(rest), b.get(rest, True), wb.child(rest))
        if rest_value is not True:
            out[rest] = rest_value
        return out

    # ------------------------------------------------------------------ what xgrammar enforces

    def _typed(self, schema: dict, where: _Where) -> dict:
        """A schema object without in-place keywords: its own keywords checked, listed or
        rewritten where xgrammar needs it, and its subschemas rewritten."""
        out = {k: v for k, v in schema.items() if k not in _LOCATIONS}
        for keyword, reason in _DROPPED.items():
            if keyword in out:
                self.lose(keyword, where.of(keyword), reason)
                del out[keyword]
        self._strings(out, where)
        self._numbers(out, where)
        self._objects(out, where)
        return self._rewrite_children(out, where)

    def _strings(self, schema: dict, where: _Where) -> None:
        if not _may_be(schema, "string"):
            return
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt not in XGRAMMAR_FORMATS:
            self.lose("format", where.of("format"), f"format '{fmt}' accepted as any string")
            del schema["format"]
        elif isinstance(fmt, str):
            if fmt in XGRAMMAR_APPROXIMATE_FORMATS:
                self.lose("format", where.of("format"), XGRAMMAR_APPROXIMATE_FORMATS[fmt])
            if fmt in XGRAMMAR_NARROWED_FORMATS:
                self.narrow("format", where.of("format"), XGRAMMAR_NARROWED_FORMATS[fmt])
            if fmt not in self.judged_formats:
                self.narrow("format", where.of("format"), unasserted_format_note(fmt))
            for keyword in ("pattern", "minLength", "maxLength"):
                if keyword in schema:
                    self.lose(keyword, where.of(keyword), f"ignored beside format '{fmt}'")
                    del schema[keyword]
            return
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            for loss in pattern_losses(pattern):
                self.lose("pattern", where.of("pattern"), loss)
            schema["pattern"] = unanchor_pattern(pattern)
            for keyword in ("minLength", "maxLength"):
                if keyword in schema:
                    self.lose(keyword, where.of(keyword), "ignored beside a pattern")
                    del schema[keyword]
            self.narrow("pattern", where.of("pattern"), "string values with escape sequences are rejected")
        elif "minLength" in schema or "maxLength" in schema:
            keyword = "minLength" if "minLength" in schema else "maxLength"
            self.narrow(keyword, where.of(keyword), "string values with escape sequences are rejected")

    def _numbers(self, schema: dict, where: _Where) -> None:
        types = _types(schema.get("type", list(_ALL_TYPES)))
        if not types & {"number", "integer"}:
            return
        bounds = [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in schema]
        if "number" in types and bounds:
            self.narrow(bounds[0], where.of(bounds[0]), "numbers with more than 6 fraction digits are rejected")
        if "multipleOf" in schema and not _multiple_enforced(schema, types):
            self.lose("multipleOf", where.of("multipleOf"), "ignored (xgrammar holds it on integers up to "
                      f"{MAX_MULTIPLE_OF}, unbounded or between bounds at most {MAX_MULTIPLE_OF_RANGE:,} values apart)")
            del schema["multipleOf"]

    def _objects(self, schema: dict, where: _Where) -> None:
        if not _may_be(schema, "object"):
            return
        if self.any_order and schema.get("required"):
            self.lose("required", where.of("required"), "not checked when properties may come in any order")
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        if schema.get("additionalProperties") is not False and not all(map(_plain_name, properties)):
            # xgrammar keeps other members off the declared names by the bytes of the decoded name,
            # read as characters: a name beyond ASCII, or one JSON writes with an escape, passes.
            self.lose("properties", where.of("properties"), "a member whose name is not plain ASCII may take the schema of other members")
        patterns = schema.get("patternProperties")
        if "propertyNames" in schema:
            if schema.get("additionalProperties") is False and not schema.get("properties") and not patterns:
                del schema["propertyNames"]  # no member is allowed anyway
            elif schema.get("properties") or patterns:
                self.lose("propertyNames", where.of("propertyNames"), "not checked next to properties or patternProperties")
                del schema["propertyNames"]
        if isinstance(patterns, dict) and patterns:
            self._pattern_properties(schema, where, patterns)
        self._declare_required(schema, where)

    def _pattern_properties(self, schema: dict, where: _Where, patterns: dict) -> None:
        if schema.get("properties"):
            # Next to properties xgrammar lets any member through: give every other member the
            # patterns' schemas (and additionalProperties') instead.
            additional = schema.get("additionalProperties", True)
            del schema["patternProperties"]
            self.lose("patternProperties", where.of("patternProperties"), "a member matching a pattern may take the schema of "
                      "any pattern or of additionalProperties")
            if additional is not True:
                self.lose("additionalProperties", where.of("additionalProperties"), "a member matching no pattern may take "
                          "the schema of any pattern")
                schema["additionalProperties"] = self.place({"anyOf": [additional, *patterns.values()]}, where)
            return
        if len(patterns) > 1:
            self.lose("patternProperties", where.of("patternProperties"), "a name matched by several patterns is checked "
                      "against one of them only")
        if schema.get("additionalProperties") is not False:
            self.narrow("patternProperties", where.of("patternProperties"), "names matching no pattern are rejected")
        for pattern in patterns:
            for loss in pattern_losses(pattern):
                self.lose("patternProperties", where.of("patternProperties"), f"{pattern!r}: {loss}")
        schema["patternProperties"] = {unanchor_pattern(p): s for p, s in patterns.items()}

    def _declare_required(self, schema: dict, where: _Where) -> None:
        """xgrammar only requires names listed in ``properties``: declare each missing required
        name with the schema it has anyway (``additionalProperties``, or ``{}``)."""
        required = schema.get("required")
        declared = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        missing = [n for n in required if isinstance(n, str) and n not in declared] if isinstance(required, list) else []
        if not missing:
            return
        if "patternProperties" in schema or schema.get("additionalProperties") is False:
            self.lose("required", where.of("required"), f"names outside 'properties' not required: {', '.join(missing)}")
            return
        extra = schema.get("additionalProperties", {})
        schema["properties"] = {**declared, **{name: self.place(copy.deepcopy(extra), where.child("additionalProperties"))
                                               if isinstance(extra, dict) else extra for name in missing}}

    def _rewrite_children(self, schema: dict, where: _Where) -> dict:
        out = dict(schema)
        for keyword, value in schema.items():
            if keyword in ("properties", "patternProperties") and isinstance(value, dict):
                out[keyword] = {name: self.rewrite(sub, where.child(keyword, name)) for name, sub in value.items()}
            elif keyword == "prefixItems" and isinstance(value, list):
                out[keyword] = [self.rewrite(sub, where.child(keyword, i)) for i, sub in enumerate(value)]
            elif keyword in ("items", "additionalProperties"):
                out[keyword] = self.rewrite(value, where.child(keyword))
            elif keyword == "propertyNames":
                names = self.rewrite(value, where.child(keyword), names=True)
                if names is False:  # no name is allowed: no member
                    del out[keyword]
                    out["maxProperties"] = 0
                else:
                    out[keyword] = names
        return out


_GROUPS = (_OBJECT_GROUP, _ARRAY_GROUP, *_TOGETHER)
_RENAMED_BY_NORMALIZING = ("prefixItems", "items", "dependentRequired", "dependentSchemas", "exclusiveMinimum", "exclusiveMaximum")
_UNSATISFIABLE = object()


def _plain_name(name: str) -> bool:
    """Whether JSON writes ``name`` as it is, in ASCII (no escape)."""
    return name.isascii() and not any(c in '"\\' or c < " " for c in name)


def _with_integers(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else types


def _multiple_enforced(schema: dict, types: set[str]) -> bool:
    """Whether xgrammar holds ``multipleOf`` here (see :data:`MAX_MULTIPLE_OF`)."""
    multiple = schema["multipleOf"]
    if "number" in types or not _is_number(multiple) or not float(multiple).is_integer() or not 0 < multiple <= MAX_MULTIPLE_OF:
        return False
    low = [math.ceil(schema["minimum"])] if _is_number(schema.get("minimum")) else []
    low += [math.floor(schema["exclusiveMinimum"]) + 1] if _is_number(schema.get("exclusiveMinimum")) else []
    high = [math.floor(schema["maximum"])] if _is_number(schema.get("maximum")) else []
    high += [math.ceil(schema["exclusiveMaximum"]) - 1] if _is_number(schema.get("exclusiveMaximum")) else []
    if not low and not high:
        return True
    return bool(low and high) and min(high) - max(low) + 1 <= MAX_MULTIPLE_OF_RANGE


def _types(declared: Any) -> set[str]:
    names = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    return {n for n in names if isinstance(n, str)}


def _may_be(schema: dict, kind: str) -> bool:
    types = _types(schema.get("type", list(_ALL_TYPES)))
    return kind in types or (kind == "number" and "integer" in types)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def pattern_losses(pattern: str) -> list[str]:
    """What xgrammar drops from ``pattern``: lookarounds, and anchors other than a ``^`` opening or a
    ``$`` closing a top-level alternative (:func:`unanchor_pattern` places those; xgrammar ignores
    any other, so ``$^`` would match every string)."""
    losses = ["lookarounds are dropped from the pattern"] if _LOOKAROUND.search(pattern) else []
    for alternative in _split_top_level(pattern):
        if _inner_anchor(alternative):
            losses.append("an anchor (^ or $) inside the pattern is dropped")
            break
    return losses


def _inner_anchor(alternative: str) -> bool:
    """Whether a top-level alternative has a ``^`` or ``$`` (outside a class, unescaped) other than
    a leading ``^`` and a trailing ``$``."""
    last = len(alternative) - 1
    return any((char == "^" and i > 0) or (char == "$" and i < last) for i, char in _outside_classes(alternative))


def _outside_classes(pattern: str):
    """Yield ``(index, char)`` for each character of ``pattern`` that is neither escaped nor inside
    a character class (nor one of its brackets)."""
    in_class, i = False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern.startswith("^", i + 1):
                i += 1  # a negated class
        else:
            yield i, char
        i += 1


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
    parts, depth, start = [], 0, 0
    for i, char in _outside_classes(pattern):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    parts.append(pattern[start:])
    return parts


__all__ = ["XGrammarSchema", "pattern_losses", "prepare_for_xgrammar", "unanchor_pattern", "without_formats"]
