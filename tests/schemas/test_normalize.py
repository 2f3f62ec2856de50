"""Draft differences, read with 2020-12 names."""

from __future__ import annotations

import pytest

from grammask.errors import UnsupportedFeatureError
from grammask.schemas.normalize import draft_of, normalize_keywords, undefined_keywords, without_undefined_keywords
from grammask.schemas.validate import validator_class


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


DRAFT_URIS = {
    4: "http://json-schema.org/draft-04/schema#",
    6: "http://json-schema.org/draft-06/schema#",
    7: "http://json-schema.org/draft-07/schema#",
    2019: "https://json-schema.org/draft/2019-09/schema",
    2020: "https://json-schema.org/draft/2020-12/schema",
}

# keyword → (a schema where it decides, an instance it rejects where it is defined)
REJECTED_BY = {
    "const": ({"const": 1}, 2),
    "contains": ({"contains": {"type": "string"}}, [1]),
    "propertyNames": ({"propertyNames": {"maxLength": 1}}, {"ab": 1}),
    "if": ({"if": {"type": "integer"}, "then": {"minimum": 5}}, 1),
    "then": ({"if": {"type": "integer"}, "then": {"minimum": 5}}, 1),
    "else": ({"if": {"type": "string"}, "else": {"minimum": 5}}, 1),
    "dependentRequired": ({"dependentRequired": {"a": ["b"]}}, {"a": 1}),
    "dependentSchemas": ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1}),
    "dependencies": ({"dependencies": {"a": ["b"]}}, {"a": 1}),
    "unevaluatedProperties": ({"unevaluatedProperties": False}, {"a": 1}),
    "unevaluatedItems": ({"unevaluatedItems": False}, [1]),
    "minContains": ({"contains": {"type": "string"}, "minContains": 2}, ["a"]),
    "maxContains": ({"contains": {"type": "string"}, "maxContains": 1}, ["a", "b"]),
    "prefixItems": ({"prefixItems": [{"type": "string"}]}, [1]),
    "additionalItems": ({"items": [{}], "additionalItems": False}, [1, 2]),
    "$recursiveRef": ({"type": "object", "properties": {"a": {"$recursiveRef": "#"}}}, {"a": 1}),
    "$dynamicRef": ({"type": "object", "properties": {"a": {"$dynamicRef": "#"}}}, {"a": 1}),
}


def test_every_keyword_some_draft_leaves_undefined_has_a_case():
    assert set().union(*(undefined_keywords(draft) for draft in DRAFT_URIS)) == REJECTED_BY.keys()


@pytest.mark.parametrize("draft", sorted(DRAFT_URIS))
@pytest.mark.parametrize("keyword", sorted(REJECTED_BY))
def test_a_keyword_is_undefined_exactly_where_its_drafts_validators_ignore_it(keyword, draft):
    schema, instance = REJECTED_BY[keyword]
    if draft == 2020 and isinstance(schema.get("items"), list):  # 2020-12 has no array form of items
        schema = {"prefixItems": schema["items"], "additionalItems": False}
    document = {"$schema": DRAFT_URIS[draft], **schema}
    ignored = validator_class(document)(document).is_valid(instance)
    assert ignored == (keyword in undefined_keywords(draft))


def test_undefined_keywords_leave_every_subschema_but_data_and_names():
    document = {
        "$schema": DRAFT_URIS[4],
        "type": "object",
        "properties": {"const": {"const": 1, "type": "integer"}, "b": {"enum": [{"const": 2}]}},
        "items": [{"contains": {}}],
        "definitions": {"d": {"if": {}, "minimum": 1}},
    }
    kept = without_undefined_keywords(document, "fsm")
    assert kept == {
        "$schema": DRAFT_URIS[4],
        "type": "object",
        "properties": {"const": {"type": "integer"}, "b": {"enum": [{"const": 2}]}},
        "items": [{}],
        "definitions": {"d": {"minimum": 1}},
    }
    assert kept["properties"]["b"] is document["properties"]["b"]  # shared where nothing goes
    assert document["properties"]["const"] == {"const": 1, "type": "integer"}  # the input is not touched


def test_a_document_its_draft_reads_whole_is_returned_as_is():
    document = {"$schema": DRAFT_URIS[7], "if": {"type": "string"}, "then": {"minLength": 2}, "contains": {}}
    assert without_undefined_keywords(document, "fsm") is document
    later = {"prefixItems": [{}], "minContains": 1, "contains": {}, "dependentRequired": {}}
    assert without_undefined_keywords(later, "fsm") is later


def test_a_reference_into_an_undefined_keyword_is_refused_by_name():
    document = {"$schema": DRAFT_URIS[6], "if": {"type": "string"}, "properties": {"a": {"$ref": "#/if"}}}
    with pytest.raises(UnsupportedFeatureError, match="draft 6") as raised:
        without_undefined_keywords(document, "fsm")
    assert (raised.value.feature, raised.value.path, raised.value.backend) == ("$ref", "/properties/a", "fsm")
