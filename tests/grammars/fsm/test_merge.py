"""Object schemas under allOf / anyOf / disjoint oneOf are merged (value positions keep their calls,
nothing is unrolled to max_depth), and dependentRequired is tracked along the slot chain; the
languages agree with jsonschema on instances."""

from __future__ import annotations

import itertools
import json

import pytest

from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance
from grammask.grammars.fsm.pushdown import matches
from grammask.grammars.spec import JsonSchema
from grammask.schemas.validate import validator_class

DISCRIMINATED = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
    "required": ["kind"],
    "additionalProperties": False,
    "anyOf": [
        {"properties": {"kind": {"const": "x"}}, "required": ["a"]},
        {"properties": {"kind": {"const": "y"}}, "required": ["b"], "x-note": "an unknown keyword is an annotation"},
    ],
}
INHERITED = {
    "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}}, "required": ["id"]}},
    "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string", "maxLength": 3}, "id": {"minimum": 0}}, "required": ["name"]}],
}
UNTYPED = {"anyOf": [{"properties": {"p": {"type": "null"}}}, {"required": ["q"]}], "required": ["r"]}
DEPENDENT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {}, "c": {"type": "string"}},
    "dependentRequired": {"a": ["c"], "c": ["b"], "z": ["a"]},
}
VALUES = [None, 1, -2, "s", "long", True, [], ["t"], [1], {}]
NAMES = ["kind", "a", "b", "id", "tags", "name", "p", "q", "r", "c", "z", "w"]


def candidates(rng_seed: int, count: int = 400):
    """Objects over a few names and values, plus a few non-objects."""
    import random

    rng = random.Random(rng_seed)
    yield from VALUES
    yield from ({"kind": "x", "a": 3}, {"kind": "y", "b": ["u"]}, {"kind": "x", "a": 3, "b": []}, {"id": 2, "name": "ab"},
                {"id": -1, "name": "ab"}, {"id": 2, "name": "abcd"}, {"r": 1, "q": 2}, {"r": 1, "p": None}, {"a": 1, "c": "s", "b": 0}, {"id": 0, "tags": [1], "name": ""})
    for _ in range(count):
        names = rng.sample(NAMES, rng.randint(0, 4))
        yield {n: ("x" if n == "kind" and rng.random() < 0.4 else "y" if n == "kind" and rng.random() < 0.5 else rng.choice(VALUES)) for n in names}


@pytest.mark.parametrize("schema", [DISCRIMINATED, INHERITED, UNTYPED, DEPENDENT], ids=["discriminated", "inherited", "untyped", "dependent"])
def test_merged_languages_agree_with_jsonschema(schema):
    spec = JsonSchema(schema)
    expr, unenforced, narrowed = lower_json_schema(spec)
    assert E.has_calls(expr)
    assert unenforced == () and narrowed == ()  # no depth cut: nothing fell back to the inlined algebra
    validator = validator_class(schema)(schema)
    agreed = 0
    for instance in candidates(len(json.dumps(schema))):
        text = spec.serialize(order_instance(spec, instance))
        assert matches(expr, text) == validator.is_valid(instance), (schema, text)
        agreed += validator.is_valid(instance)
    assert agreed >= 2  # the sample reaches valid instances too
