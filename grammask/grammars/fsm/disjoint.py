"""Cheap proofs that ``oneOf`` branches are pairwise disjoint (then ``oneOf`` is ``anyOf``).

``oneOf`` lowered exactly is "each branch minus the union of the others", a product of automata
that can grow large; most real ``oneOf`` lists are disjoint by construction (different types,
different literals, a discriminator property, member names that may not come together, array
lengths or first items of different types), and for those a plain union is exact. A proof
here only ever says "disjoint" when it is sure; anything it cannot see keeps the exact lowering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.schemas.normalize import draft_of, normalize_keywords
from grammask.schemas.resolve import Resolver
from grammask.grammars.fsm import patterns
from grammask.grammars.fsm.merge import negated_required
from grammask.schemas.validate import instance_validator, stack_exhausted

BASIC_TYPES = frozenset(("null", "boolean", "number", "string", "array", "object"))
"""JSON's value types (``integer`` is a kind of ``number``)."""

MAX_FACT_DEPTH = 12
"""How many references and applicators deep a branch's facts are read (recursive schemas end here)."""
MAX_ALTERNATIVES = 16
"""Most alternatives (:meth:`DisjointnessProver.alternatives`) one branch is split into."""


@dataclass
class BranchFacts:
    """What a branch surely implies about its object values: their possible types, their possible
    values (``None``: any), the names they require, the literal values of each required property
    that must be a const/enum, the member keywords of each schema object that applies
    (``member_rules``: ``properties``, ``patternProperties`` and ``additionalProperties``, ``None``
    where absent; :meth:`schemas_of` reads them), their fewest and most members (``None``: no
    bound) and the sets of names no object value has all of (``not: {"required": [...]}``). Of array values:
    their fewest and most items, and a schema every first item satisfies (``None``: unknown)."""

    types: set[str]
    values: set[str] | None = None
    required: set[str] = field(default_factory=set)
    tags: dict[str, list] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    member_rules: list[tuple[dict, dict, Any]] = field(default_factory=list)
    min_properties: int = 0
    max_properties: int | None = None
    forbidden: list[frozenset[str]] = field(default_factory=list)
    min_items: int = 0
    max_items: int | None = None
    first_item: Any = None

    def copy(self) -> "BranchFacts":
        return BranchFacts(set(self.types), None if self.values is None else set(self.values), set(self.required),
                           dict(self.tags), dict(self.properties), list(self.member_rules), self.min_properties, self.max_properties,
                           list(self.forbidden), self.min_items, self.max_items, self.first_item)

    def schemas_of(self, name: str) -> list:
        """Schemas every value of member ``name`` satisfies: per schema object that applies, its
        ``properties`` entry and the ``patternProperties`` entries whose pattern matches the name,
        or, where none does (surely: no pattern left undecided), its ``additionalProperties``."""
        found = []
        for properties, by_pattern, additional in self.member_rules:
            matched = undecided = False
            if name in properties:
                matched = True
                found.append(properties[name])
            for pattern, schema in by_pattern.items():
                try:
                    hit = isinstance(pattern, str) and patterns.search(pattern, name)
                except Exception:  # an invalid or undecided pattern: it may match
                    undecided = True
                    continue
                if hit:
                    matched = True
                    found.append(schema)
            if not matched and not undecided and additional is not None:
                found.append(additional)
        return found

    def closed_names(self) -> set[str] | None:
        """The names an object member may have where a schema object that applies allows no
        others (no ``patternProperties``, ``additionalProperties`` false); ``None``: any name."""
        names = None
        for properties, by_pattern, additional in self.member_rules:
            if additional is False and not by_pattern:
                allowed = {name for name, schema in properties.items() if schema is not False}
                names = allowed if names is None else names & allowed
        return names


class DisjointnessProver:
    """Proves branches of one schema document disjoint.

    Args:
        root: the schema document (``$ref`` targets and property schemas are read from it).
        resolver: its :class:`~grammask.schemas.resolve.Resolver`.
    """

    def __init__(self, root: Any, resolver: Resolver) -> None:
        self.root = root
        self.resolver = resolver
        self.draft = draft_of(root)
        self._validator = None
        # (id, base) → (the schema, kept alive so its id stays its own; its facts, None while being read)
        self._facts: dict[tuple[int, str], tuple[Any, BranchFacts | None]] = {}
        self._alternatives: dict[tuple[int, str], tuple[Any, list[BranchFacts]]] = {}

    def disjoint(self, branches: list, base: str, types: set[str], siblings: Any = None) -> bool:
        """Whether no value of ``types`` (what the enclosing schema allows) satisfies two branches;
        ``siblings``, the enclosing schema without its ``oneOf``, holds for every branch too (a
        member it requires is tagged by a branch's literal property schema)."""
        allowed = {basic_type(t) for t in types}
        context = self._read_facts({k: v for k, v in siblings.items() if k != "oneOf"}, base, 0) if isinstance(siblings, dict) else None
        per_branch = []
        for branch in branches:
            found = []
            for alternative in self.alternatives(branch, base):
                fact = alternative.copy()
                if context is not None:
                    _merge(fact, context)
                fact.types &= allowed
                found.append(fact)
            per_branch.append(found)
        return all(
            self._pair_disjoint(a, b) for i, ours in enumerate(per_branch) for theirs in per_branch[i + 1 :] for a in ours for b in theirs
        )

    def alternatives(self, schema: Any, base: str, depth: int = 0) -> list[BranchFacts]:
        """Facts of ``schema`` split by its ``anyOf`` / ``oneOf`` branches (nested ones and those
        of its references and ``allOf`` too): every value it accepts has the facts of one of them.
        Two schemas are disjoint when every alternative of one is disjoint from every alternative
        of the other, which the merged facts (:meth:`facts`) cannot show: they keep only what all
        branches share. At most :data:`MAX_ALTERNATIVES`; a choice that would pass it is left
        unsplit (its shared facts hold)."""
        key = (id(schema), base)
        known = self._alternatives.get(key)
        if known is not None:
            return known[1]
        whole = self.facts(schema, base, depth)
        self._alternatives[key] = (schema, [whole])  # a reference cycle meets the unsplit facts
        if not isinstance(schema, dict) or depth > MAX_FACT_DEPTH:
            return [whole]
        found = [whole]
        for options in self._choices(schema, base, depth):
            if len(options) > 1 and len(found) * len(options) <= MAX_ALTERNATIVES:
                found = [_merged(a, b) for a in found for b in options]
        found = [fact for fact in found if fact.types] or found[:1]
        self._alternatives[key] = (schema, found)
        return found

    def _choices(self, schema: dict, base: str, depth: int) -> list[list[BranchFacts]]:
        """The alternatives of each subschema that applies to the same value as ``schema``: its
        reference's, each ``allOf`` branch's, and its ``anyOf`` / ``oneOf`` branches' together."""
        original, schema = schema, normalize_keywords(schema, self.draft)
        choices = []
        if isinstance(schema.get("$ref"), str):
            try:
                target = self.resolver.resolve(schema["$ref"], self.resolver.base_of(original, base))
            except (UnsupportedFeatureError, InvalidSchemaError):
                target = None
            if target is not None and target.schema is not original:
                choices.append(self.alternatives(target.schema, target.base, depth + 1))
        for branch in schema.get("allOf", ()) if isinstance(schema.get("allOf"), list) else ():
            choices.append(self.alternatives(branch, base, depth + 1))
        for keyword in ("anyOf", "oneOf"):
            if isinstance(schema.get(keyword), list) and schema[keyword]:
                choices.append([fact for branch in schema[keyword] for fact in self.alternatives(branch, base, depth + 1)])
        return choices

    def facts(self, schema: Any, base: str, depth: int = 0) -> BranchFacts:
        """What every value ``schema`` accepts surely has (read through references and applicators
        down to :data:`MAX_FACT_DEPTH`; below it, and on a reference cycle, nothing is known).
        Each subschema is read once per prover, so shared references cost nothing twice."""
        key = (id(schema), base)
        if key in self._facts:
            known = self._facts[key][1]
            return BranchFacts(set(BASIC_TYPES)) if known is None else known.copy()
        self._facts[key] = (schema, None)
        found = self._read_facts(schema, base, depth)
        self._facts[key] = (schema, found.copy())
        return found

    def _read_facts(self, schema: Any, base: str, depth: int) -> BranchFacts:
        original = schema
        if schema is False:
            return BranchFacts(set(), set())
        if not isinstance(schema, dict) or depth > MAX_FACT_DEPTH:
            return BranchFacts(set(BASIC_TYPES))
        schema = normalize_keywords(schema, self.draft)
        allowed = literals(schema)
        fact = BranchFacts(_sure_types(schema), None if allowed is None else {value_key(v) for v in allowed})
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        fact.properties = dict(properties)
        by_pattern = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), dict) else {}
        additional = schema.get("additionalProperties")
        if properties or by_pattern or additional is not None:
            fact.member_rules = [(properties, by_pattern, additional)]
        fact.min_properties = _count(schema, "minProperties") or 0
        fact.max_properties = _count(schema, "maxProperties")
        fact.min_items = _count(schema, "minItems") or 0
        fact.max_items = _count(schema, "maxItems")
        prefix = schema.get("prefixItems")
        fact.first_item = prefix[0] if isinstance(prefix, list) and prefix else schema.get("items")
        names = negated_required(schema.get("not"))
        if names is not None:  # it rejects every non-object (and, with no names, everything)
            fact.types &= {"object"} if names else set()
            fact.forbidden.append(frozenset(names))
        fact.required = {n for n in schema.get("required", ()) if isinstance(n, str)} if isinstance(schema.get("required"), list) else set()
        for name in fact.required:
            tag = literals(properties.get(name))
            if tag is not None:
                fact.tags[name] = tag
        if isinstance(schema.get("$ref"), str):
            try:
                target = self.resolver.resolve(schema["$ref"], self.resolver.base_of(original, base))
            except (UnsupportedFeatureError, InvalidSchemaError):
                return fact
            if target.schema is not original:
                _merge(fact, self.facts(target.schema, target.base, depth + 1))
        for branch in schema.get("allOf", ()) if isinstance(schema.get("allOf"), list) else ():
            _merge(fact, self.facts(branch, base, depth + 1))
        for keyword in ("anyOf", "oneOf"):
            if isinstance(schema.get(keyword), list) and schema[keyword]:
                _merge(fact, _either(self.facts(branch, base, depth + 1) for branch in schema[keyword]))
        return fact

    def _pair_disjoint(self, a: BranchFacts, b: BranchFacts) -> bool:
        common = a.types & b.types
        if not common or (a.values is not None and b.values is not None and not a.values & b.values):
            return True
        if not common <= {"object", "array"}:
            return False
        if "object" in common and not (self._excludes(a, b) or self._excludes(b, a) or _names_forbidden(a, b)):
            return False
        return "array" not in common or _arrays_disjoint(a, b)

    def _excludes(self, a: BranchFacts, b: BranchFacts) -> bool:
        """No object satisfies both: ``a`` requires more members than ``b`` allows, or a member
        ``b`` forbids or whose value must have a type ``b``'s schemas for it reject, or a property
        whose every allowed literal ``b`` rejects (by ``b``'s own tag or by ``b``'s schema for that
        member), or ``a`` needs a member and allows only names ``b`` forbids."""
        if b.max_properties is not None and len(a.required) > b.max_properties:
            return True
        names = b.closed_names()
        if names is not None and (a.required or a.min_properties) and all(_forbids(a, name) for name in names):
            return True
        for name in a.required:
            if _forbids(b, name):
                return True
            theirs = b.schemas_of(name)
            if not _types_of_all(a.schemas_of(name)) & _types_of_all(theirs):
                return True  # a's member has a type b's schemas for it reject
        for name, values in a.tags.items():
            if name in b.tags and not {value_key(v) for v in values} & {value_key(v) for v in b.tags[name]}:
                return True
            if any(all(self.rejects(rule, v) for v in values) for rule in b.schemas_of(name)):
                return True
        return False

    def rejects(self, schema: Any, value: Any) -> bool:
        """Whether ``schema`` surely rejects ``value``: ``jsonschema``'s verdict with formats
        unchecked (so "invalid" is sure); False when unsure."""
        return self.verdict(schema, value) is False

    def verdict(self, schema: Any, value: Any) -> bool | None:
        """Whether ``value`` is valid under ``schema`` (a subschema of the document) by
        ``jsonschema`` with formats unchecked, or ``None`` where it cannot tell (an unresolvable
        reference or the like). Exact where formats are annotations."""
        try:
            if self._validator is None:
                self._validator = instance_validator(
                    self.root, search=patterns.search, is_regex=patterns.is_regex, assert_formats=False
                )
            return bool(self._validator.evolve(schema=schema).is_valid(value))
        except Exception:  # an unresolvable reference or the like: no verdict
            return None
        except BaseException as exc:  # the recursion limit reached inside rpds: no verdict either
            if stack_exhausted(exc):
                return None
            raise


def _merge(fact: BranchFacts, more: BranchFacts) -> None:
    """``fact`` ∧ ``more`` (a schema and its ``$ref`` target or ``allOf`` branch both apply): the
    member keywords of both are kept; where both name a ``properties`` schema for the same member
    (read for tags), either one is a sure fact, and ``fact``'s is kept."""
    fact.types &= more.types
    if more.values is not None:
        fact.values = more.values if fact.values is None else fact.values & more.values
    fact.required |= more.required
    fact.tags = {**more.tags, **fact.tags}
    fact.properties = {**more.properties, **fact.properties}
    fact.member_rules = fact.member_rules + more.member_rules
    fact.min_properties = max(fact.min_properties, more.min_properties)
    fact.max_properties = _least(fact.max_properties, more.max_properties)
    fact.forbidden += more.forbidden
    fact.min_items = max(fact.min_items, more.min_items)
    fact.max_items = _least(fact.max_items, more.max_items)
    if fact.first_item is None:
        fact.first_item = more.first_item
    for name in fact.required - fact.tags.keys():  # required by one, a literal by the other
        tag = literals(fact.properties.get(name))
        if tag is not None:
            fact.tags[name] = tag


def _merged(a: BranchFacts, b: BranchFacts) -> BranchFacts:
    """A new :class:`BranchFacts` of ``a`` ∧ ``b``."""
    fact = a.copy()
    _merge(fact, b)
    return fact


def _either(branches) -> BranchFacts:
    """What holds whichever of ``branches`` (``anyOf`` / ``oneOf``) a value satisfies: the union of
    their types and values, the names all of them require, and a tag wherever all of them have
    one (any of their literals), the name sets all of them forbid, and the widest item counts.
    Member and item schemas and member bounds differ by branch, so none is kept."""
    branches = [b for b in branches if b.types] or list(branches)  # a branch nothing satisfies adds nothing
    fact = BranchFacts(set().union(*(b.types for b in branches)))
    if all(b.values is not None for b in branches):
        fact.values = set().union(*(b.values for b in branches))
    fact.required = set.intersection(*(b.required for b in branches))
    for name in fact.required:
        if all(name in b.tags for b in branches):
            fact.tags[name] = [v for b in branches for v in b.tags[name]]
    fact.forbidden = [names for names in branches[0].forbidden if all(names in b.forbidden for b in branches[1:])]
    fact.min_properties = min(b.min_properties for b in branches)
    fact.min_items = min(b.min_items for b in branches)
    if all(b.max_items is not None for b in branches):
        fact.max_items = max(b.max_items for b in branches)
    return fact


def _names_forbidden(a: BranchFacts, b: BranchFacts) -> bool:
    """No object satisfies both: together they require every name of a set one of them forbids."""
    required = a.required | b.required
    return any(names <= required for names in (*a.forbidden, *b.forbidden))


def _arrays_disjoint(a: BranchFacts, b: BranchFacts) -> bool:
    """No array satisfies both: their item counts do not meet, or both need a first item and no
    value has a type both first-item schemas accept."""
    if (a.max_items is not None and a.max_items < b.min_items) or (b.max_items is not None and b.max_items < a.min_items):
        return True
    return (
        min(a.min_items, b.min_items) >= 1 and a.first_item is not None and b.first_item is not None
        and not _sure_types(a.first_item) & _sure_types(b.first_item)
    )


def _count(schema: dict, keyword: str) -> int | None:
    value = schema.get(keyword)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _forbids(fact: BranchFacts, name: str) -> bool:
    """Whether no object of ``fact`` has a member ``name``."""
    return any(schema is False for schema in fact.schemas_of(name))


def _types_of_all(schemas: list) -> set[str]:
    """The basic types a value satisfying every one of ``schemas`` may have (:func:`_sure_types`)."""
    types = set(BASIC_TYPES)
    for schema in schemas:
        types &= _sure_types(schema)
    return types


def _sure_types(schema: Any) -> set[str]:
    """The basic types ``schema`` may accept, read from its own ``type``, ``enum`` and ``const``
    only (a superset: what a reference or an applicator adds only narrows it)."""
    if schema is False:
        return set()
    types = set(BASIC_TYPES)
    if not isinstance(schema, dict):
        return types
    if isinstance(schema.get("type"), (str, list)):
        declared = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        types &= {basic_type(t) for t in declared if isinstance(t, str)}
    allowed = literals(schema)
    if allowed is not None:
        types &= {json_type(v) for v in allowed}
    return types


def basic_type(type_name: str) -> str:
    """The JSON value type of a ``type`` name (``integer`` → ``number``)."""
    return "number" if type_name == "integer" else type_name


def literals(schema: Any) -> list | None:
    """The values a schema's ``const`` / ``enum`` allow (where both are given, their common ones), or None."""
    if not isinstance(schema, dict):
        return None
    found = list(schema["enum"]) if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        const = schema["const"]
        found = [const] if found is None else [v for v in found if value_key(v) == value_key(const)]
    return found


def value_key(value: Any) -> str:
    """A key equal for JSON-equal values (``1`` and ``1.0``; ``true`` is not ``1``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "n" + str(Decimal(repr(value) if isinstance(value, float) else value).normalize())
    return "j" + json.dumps(value, sort_keys=True)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "object")


__all__ = ["BASIC_TYPES", "BranchFacts", "DisjointnessProver", "basic_type", "json_type", "literals", "value_key"]
