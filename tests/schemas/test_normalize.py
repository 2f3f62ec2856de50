"""Draft differences, read with 2020-12 names."""

from __future__ import annotations

from grammask.schemas.normalize import draft_of, normalize_keywords


def test_draft_detection():
    assert draft_of({"$schema": "http://json-schema.org/draft-04/schema#"}) == 4
    assert draft_of({"$schema": "http://json-schema.org/draft-07/schema#"}) == 7
    assert draft_of({}) == 2020
    assert draft_of(True) == 2020


def test_draft4_boolean_exclusive_bounds():
    out = normalize_keywords({"minimum": 1, "exclusiveMinimum": True, "maximum": 5, "exclusiveMaximum": False}, 4)
    assert out == {"exclusiveMinimum": 1, "maximum": 5}


def test_items_array_and_dependencies():
    out = normalize_keywords({"items": [{}, {}], "additionalItems": False, "dependencies": {"a": ["b"], "c": {"minProperties": 2}}}, 7)
    assert out == {"prefixItems": [{}, {}], "items": False, "dependentRequired": {"a": ["b"]}, "dependentSchemas": {"c": {"minProperties": 2}}}
    assert normalize_keywords({"items": {}, "additionalItems": False}, 2019) == {"items": {}}


def test_ref_overrides_siblings_before_2019():
    assert normalize_keywords({"$ref": "#/a", "type": "string"}, 7) == {"$ref": "#/a"}
    schema = {"$ref": "#/a", "type": "string"}
    assert normalize_keywords(schema, 2020) is schema
