"""Cheap proofs that ``oneOf`` branches are pairwise disjoint (then ``oneOf`` is ``anyOf``).

``oneOf`` lowered exactly is "each branch minus the union of the others", a product of automata
that can grow large; most real ``oneOf`` lists are disjoint by construction (different types,
different literals, or a discriminator property), and for those a plain union is exact. A proof
here only ever says "disjoint" when it is sure; anything it cannot see keeps the exact lowering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.schemas.resolve import Resolver
from grammask.grammars.fsm import patterns
from grammask.schemas.validate import instance_validator

BASIC_TYPES = frozenset(("null", "boolean", "number", "string", "array", "object"))
"""JSON's value types (``integer`` is a kind of ``number``)."""


@dataclass
class BranchFacts:
    """What a branch surely implies: its possible types, its possible values (``None``: any), the
    literal values of each property it requires to be a const/enum, and its property schemas."""

    types: set[str]
    values: set[str] | None = None
    tags: dict[str, list] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)


class DisjointnessProver:
    """Proves branches of one schema document disjoint.

    Args:
        root: the schema document (``$ref`` targets and property schemas are read from it).
        resolver: its :class:`~grammask.schemas.resolve.Resolver`.
    """

    def __init__(self, root: Any, resolver: Resolver) -> None:
        self.root = root
        self.resolver = resolver
        self._validator = None

    def disjoint(self, branches: list, base: str, types: set[str]) -> bool:
        """Whether no value of ``types`` (what the enclosing schema allows) satisfies two branches."""
        allowed = {basic_type(t) for t in types}
        facts = []
        for branch in branches:
            fact = self.facts(branch, base)
            fact.types &= allowed
            facts.append(fact)
        return all(self._pair_disjoint(a, b) for i, a in enumerate(facts) for b in facts[i + 1 :])

    def facts(self, schema: Any, base: str) -> BranchFacts:
        if schema is False:
            return BranchFacts(set(), set())
        if not isinstance(schema, dict):
            return BranchFacts(set(BASIC_TYPES))
        literals = _literals(schema)
        fact = BranchFacts(set(BASIC_TYPES), None if literals is None else {value_key(v) for v in literals})
        if isinstance(schema.get("type"), (str, list)):
            declared = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            fact.types = {basic_type(t) for t in declared if isinstance(t, str)}
        if literals is not None:
            fact.types &= {_json_type(v) for v in literals}
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        fact.properties = dict(properties)
        for name in schema.get("required", ()) if isinstance(schema.get("required"), list) else ():
            tag = _literals(properties.get(name))
            if tag is not None:
                fact.tags[name] = tag
        if isinstance(schema.get("$ref"), str):
            try:
                target = self.resolver.resolve(schema["$ref"], self.resolver.base_of(schema, base))
            except (UnsupportedFeatureError, InvalidSchemaError):
                return fact
            if target.schema is not schema:
                _merge(fact, self.facts(target.schema, target.base))
        return fact

    def _pair_disjoint(self, a: BranchFacts, b: BranchFacts) -> bool:
        common = a.types & b.types
        if not common or (a.values is not None and b.values is not None and not a.values & b.values):
            return True
        return common == {"object"} and (self._tag_excludes(a, b) or self._tag_excludes(b, a))

    def _tag_excludes(self, a: BranchFacts, b: BranchFacts) -> bool:
        """``a`` requires a property whose every allowed literal ``b`` rejects (by ``b``'s own tag or
        by ``b``'s schema for that property)."""
        for name, values in a.tags.items():
            if name in b.tags and not {value_key(v) for v in values} & {value_key(v) for v in b.tags[name]}:
                return True
            if name in b.properties and not any(self._valid(b.properties[name], v) for v in values):
                return True
        return False

    def _valid(self, schema: Any, value: Any) -> bool:
        """``jsonschema``'s verdict, formats unchecked (so "invalid" is sure); True when unsure."""
        try:
            if self._validator is None:
                self._validator = instance_validator(
                    self.root, search=patterns.search, is_regex=patterns.is_regex, assert_formats=False
                )
            return self._validator.evolve(schema=schema).is_valid(value)
        except Exception:  # an unresolvable reference or the like: no proof
            return True


def _merge(fact: BranchFacts, more: BranchFacts) -> None:
    """``fact`` ∧ ``more`` (a schema and its ``$ref`` target both apply)."""
    fact.types &= more.types
    if more.values is not None:
        fact.values = more.values if fact.values is None else fact.values & more.values
    fact.tags = {**more.tags, **fact.tags}
    fact.properties = {**more.properties, **fact.properties}


def basic_type(type_name: str) -> str:
    """The JSON value type of a ``type`` name (``integer`` → ``number``)."""
    return "number" if type_name == "integer" else type_name


def _literals(schema: Any) -> list | None:
    """The values a schema's ``const`` / ``enum`` allow, or None."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    return None


def value_key(value: Any) -> str:
    """A key equal for JSON-equal values (``1`` and ``1.0``; ``true`` is not ``1``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "n" + str(Decimal(repr(value) if isinstance(value, float) else value).normalize())
    return "j" + json.dumps(value, sort_keys=True)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "object")


__all__ = ["BASIC_TYPES", "BranchFacts", "DisjointnessProver", "basic_type", "value_key"]
