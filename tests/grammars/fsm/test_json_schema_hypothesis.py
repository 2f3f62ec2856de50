"""Completeness: random valid instances (hypothesis-jsonschema) are accepted by the lowered expression.

Instances the policy cannot write are skipped: numbers in exponent notation (the policy writes plain
decimals), strings with lone surrogates (string languages hold Unicode scalar values only), and
values nested deeper than the spec allows.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from grammask.grammars.fsm.pushdown import matches
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance
from grammask.grammars.spec import JsonSchema
from grammask.schemas.validate import validator_class

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name"]},
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": -2.5, "maximum": 100}, "maxItems": 5},
    {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "integer", "multipleOf": 5}]},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "boolean"}}, "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}, "additionalProperties": False},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}, {"type": "null"}], "additionalItems": {"type": "integer"}},
    {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 10}, "maxContains": 2},
    {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}, "additionalProperties": {"type": "string"}, "maxProperties": 3},
    {"type": "string", "pattern": "^[A-Z][a-z]{1,5}(-[0-9]{2})?$"},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True}, "id": {"type": "integer"}}, "dependentRequired": {"tags": ["id"]}},
    {"not": {"type": ["string", "object", "array"]}},
    {"definitions": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"], "additionalProperties": False}}, "type": "array", "items": {"$ref": "#/definitions/pt"}, "minItems": 1},
]


def writable(value, depth=0) -> bool:
    if isinstance(value, float):
        return "e" not in repr(value) and "inf" not in repr(value) and "nan" not in repr(value)
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return depth < 4 and all(writable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return depth < 4 and all(writable(k) and writable(v, depth + 1) for k, v in value.items())
    return True


@pytest.mark.parametrize("order", ["declared", "any"])
@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_valid_instances_are_accepted(index, order):
    schema = SCHEMAS[index]
    spec = JsonSchema(schema, property_order=order)
    expr, _, _ = lower_json_schema(spec)
    validator = validator_class(schema)(schema)

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(from_schema(schema))
    def check(instance):
        # hypothesis-jsonschema predates 2020-12 (prefixItems): keep only what jsonschema validates.
        assume(writable(instance) and validator.is_valid(instance))
        text = spec.serialize(order_instance(spec, instance))
        assert matches(expr, text), text

    check()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.sampled_from(SCHEMAS), st.data())
def test_accepted_mutations_validate(schema, data):
    """Soundness probe: random JSON values (often invalid) are accepted only when they validate."""
    spec = JsonSchema(schema)
    expr, _, _ = lower_json_schema(spec)
    leaves = st.none() | st.booleans() | st.integers(-20, 200) | st.sampled_from([0.5, -2.5, 1.0, 15.0]) | st.text("abxyzAB-0", max_size=6)
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["name", "age", "kind", "x", "v", "next", "tags", "id", "ab", "Q"]), inner, max_size=4), max_leaves=10)
    instance = data.draw(values)
    text = spec.serialize(order_instance(spec, instance))
    if matches(expr, text):
        assert validator_class(schema)(schema).is_valid(instance), text
