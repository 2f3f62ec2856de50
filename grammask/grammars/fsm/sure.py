"""Instances named without lowering: knowing a deferred value rule matches something unbuilt.

A state that calls a rule must know the rule matches some text. For a deferred value rule that
used to mean lowering it, even when no token enters it. :class:`SureInstances` names an instance of
a schema directly (null, false, 0, a short string, the shortest container, required members
filled the same way) where every keyword on its way is one whose meaning it checks, so an answer
never depends on a keyword, bound or format it does not read.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.fsm.disjoint import DisjointnessProver, json_type, literals, value_key
from grammask.grammars.fsm.merge import is_annotation
from grammask.schemas.normalize import draft_of, normalize_keywords
from grammask.schemas.resolve import Resolver

SURE_KEYWORDS = frozenset((
    "type", "properties", "additionalProperties", "required", "items", "minItems", "maxItems", "minLength",
    "maxLength", "title", "description", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "$anchor", "definitions", "$defs",
))
"""Keywords whose meaning :class:`SureInstances` checks (any other assertion on the way makes it
give up; annotations and keywords JSON Schema does not define, such as ``x-…``, are read past)."""
UNSURE = object()
"""What :meth:`SureInstances.instance` returns when it cannot name an instance."""
MAX_SURE_DEPTH = 16
"""How deep (nested values, references, branches) an instance is looked for."""
MAX_VISITS = 256
"""How many subschemas one question visits before giving up (wide reference graphs stay cheap)."""
_SHORT = 64
"""Lower bounds (``minLength``, ``minItems``) above this are not filled."""


class SureInstances:
    """Names instances of the schemas of one document.

    Args:
        draft: the document's draft (how ``$ref`` siblings and array keywords read).
        resolve: the target schema of a schema holding ``$ref``, or ``None`` (no references followed).
        rejects: whether a schema surely rejects a value (``oneOf`` needs the other branches to);
            ``None``: never sure, so no ``oneOf`` is answered.
    """

    def __init__(
        self,
        draft: int = 2020,
        resolve: Callable[[dict], Any] | None = None,
        rejects: Callable[[Any, Any], bool] | None = None,
    ) -> None:
        self.draft = draft
        self.resolve = resolve
        self.rejects = rejects

    @classmethod
    def of_document(cls, root: Any, resolver: Resolver, prover: DisjointnessProver) -> "SureInstances":
        """For the subschemas of ``root``: references followed by ``resolver`` (those it cannot
        resolve here give up), other ``oneOf`` branches rejected by ``prover``."""

        def resolve(schema: dict) -> Any:
            try:
                return resolver.resolve(schema["$ref"], resolver.base_of(schema)).schema
            except (UnsupportedFeatureError, InvalidSchemaError):
                return None

        return cls(draft_of(root), resolve, prover.rejects)

    def instance(self, schema: Any, depth: int = 0, kinds: Any = None, budget: list[int] | None = None) -> Any:
        """An instance of ``schema``, or :data:`UNSURE`; ``kinds`` (a ``type`` value) says which
        types to try where the schema has no ``type`` of its own (default: null). At most
        :data:`MAX_VISITS` subschemas are visited in all (``budget``: what is left, shared by nested calls)."""
        return next(self._instances(schema, depth, kinds, [MAX_VISITS] if budget is None else budget), UNSURE)

    def satisfies(self, schema: Any, value: Any, depth: int = 0) -> bool:
        """Whether ``value`` surely satisfies ``schema`` (read through :data:`SURE_KEYWORDS` only)."""
        if schema is True or schema == {}:
            return True
        if not isinstance(schema, dict) or depth > MAX_SURE_DEPTH:
            return False
        schema = normalize_keywords(schema, self.draft)
        allowed = literals(schema)
        if allowed is not None:
            if not any(value_key(value) == value_key(v) for v in allowed):
                return False
            schema = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if not _readable(schema):
            return False
        types = schema.get("type")
        if types is not None and not any(_has_type(value, t) for t in ([types] if isinstance(types, str) else types)):
            return False
        if isinstance(value, str):
            return _within(len(value), schema, "minLength", "maxLength")
        if isinstance(value, list):
            items = schema.get("items", True)
            return _within(len(value), schema, "minItems", "maxItems") and all(
                self.satisfies(items, item, depth + 1) for item in value
            )
        if isinstance(value, dict):
            properties, required = schema.get("properties", {}), schema.get("required", [])
            if not isinstance(properties, dict) or not isinstance(required, list) or not set(required) <= value.keys():
                return False
            other = schema.get("additionalProperties", True)
            return all(self.satisfies(properties.get(name, other), member, depth + 1) for name, member in value.items())
        return True

    def _instances(self, schema: Any, depth: int, kinds: Any, budget: list[int]) -> Iterator[Any]:
        """Instances of ``schema``, at most one per type it may take and branch it may satisfy."""
        budget[0] -= 1
        if budget[0] < 0:
            return
        if schema is True or schema == {}:
            yield from self._of_types({}, "null" if kinds is None else kinds, depth, budget)
            return
        if not isinstance(schema, dict) or depth > MAX_SURE_DEPTH:
            return
        original, schema = schema, normalize_keywords(schema, self.draft)
        if "$ref" in schema:
            yield from self._via_reference(original, schema, depth, kinds, budget)
            return
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                yield from self._via_branches(schema, keyword, depth, kinds, budget)
                return
        allowed = literals(schema)
        if allowed is not None:
            rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
            yield from (v for v in allowed if self.satisfies(rest, v, depth))
        elif _readable(schema):
            yield from self._of_types(schema, schema.get("type", "null" if kinds is None else kinds), depth, budget)

    def _via_reference(self, original: dict, schema: dict, depth: int, kinds: Any, budget: list[int]) -> Iterator[Any]:
        target = self.resolve(original) if self.resolve is not None else None
        if target is None:
            return
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        yield from (found for found in self._instances(target, depth + 1, kinds, budget) if self.satisfies(rest, found, depth))

    def _via_branches(self, schema: dict, keyword: str, depth: int, kinds: Any, budget: list[int]) -> Iterator[Any]:
        rest = {k: v for k, v in schema.items() if k != keyword}
        branches = schema[keyword]
        if not isinstance(branches, list) or (keyword == "oneOf" and self.rejects is None):
            return
        hint = rest.get("type", kinds)
        for i, branch in enumerate(branches):
            if budget[0] <= 0:
                return
            others = branches[:i] + branches[i + 1 :]
            for found in self._instances(branch, depth + 1, hint, budget):
                if not self.satisfies(rest, found, depth):
                    continue
                if keyword == "oneOf" and not all(self.rejects(other, found) for other in others):
                    continue
                yield found

    def _of_types(self, schema: dict, types: Any, depth: int, budget: list[int]) -> Iterator[Any]:
        for kind in [types] if isinstance(types, str) else types if isinstance(types, list) else ():
            found = self._of_type(schema, kind, depth, budget)
            if found is not UNSURE:
                yield found

    def _of_type(self, schema: dict, kind: Any, depth: int, budget: list[int]) -> Any:
        if kind in ("null", "boolean", "number", "integer"):
            return {"null": None, "boolean": False}.get(kind, 0)
        if kind == "string":
            return "a" * schema.get("minLength", 0) if _fits(schema, "minLength", "maxLength") else UNSURE
        if kind == "array":
            if not _fits(schema, "minItems", "maxItems"):
                return UNSURE
            low = schema.get("minItems", 0)
            if low == 0:
                return []
            item = self.instance(schema.get("items", True), depth + 1, budget=budget) if not isinstance(schema.get("items"), list) else UNSURE
            return UNSURE if item is UNSURE else [item] * low
        if kind == "object":
            return self._object(schema, depth, budget)
        return UNSURE

    def _object(self, schema: dict, depth: int, budget: list[int]) -> Any:
        properties, required = schema.get("properties", {}), schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            return UNSURE
        instance = {}
        for name in required:
            sub = properties[name] if name in properties else schema.get("additionalProperties", True)
            value = self.instance(sub, depth + 1, budget=budget) if isinstance(name, str) else UNSURE
            if value is UNSURE:
                return UNSURE
            instance[name] = value
        return instance


def _readable(schema: dict) -> bool:
    """Whether every keyword of ``schema`` is one of :data:`SURE_KEYWORDS` or has no effect on validity."""
    return all(keyword in SURE_KEYWORDS or is_annotation(keyword) for keyword in schema)


def _fits(schema: dict, low_key: str, high_key: str) -> bool:
    """A small lower bound (int) at most the upper bound (int, or none)."""
    low, high = schema.get(low_key, 0), schema.get(high_key, _SHORT)
    return type(low) is int and type(high) is int and 0 <= low <= min(high, _SHORT)


def _within(size: int, schema: dict, low_key: str, high_key: str) -> bool:
    low, high = schema.get(low_key, 0), schema.get(high_key, size)
    return type(low) is int and type(high) is int and low <= size <= high


def _has_type(value: Any, kind: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(kind, str) and json_type(value) == kind


__all__ = ["MAX_SURE_DEPTH", "SURE_KEYWORDS", "SureInstances", "UNSURE"]
