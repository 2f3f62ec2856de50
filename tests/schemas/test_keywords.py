"""Keyword catalogue: its claims match what the fsm lowering does."""

from __future__ import annotations

import pytest

from grammask.errors import UnsupportedFeatureError
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask.grammars.spec import JsonSchema
from grammask.schemas.keywords import KEYWORDS, Support, fsm_support, keywords_used
from grammask.schemas.normalize import undefined_keywords


def test_keywords_used_walks_subschemas_with_pointers():
    schema = {"properties": {"a/b": {"minimum": 1}}, "items": {"enum": [{"type": "x"}]}}
    assert sorted(keywords_used(schema)) == [("enum", "/items"), ("items", ""), ("minimum", "/properties/a~1b"), ("properties", "")]


def test_fsm_support_levels():
    support = fsm_support({"oneOf": [{"uniqueItems": True}], "$dynamicRef": "#x"})
    assert support == {"oneOf": Support.EXACT, "uniqueItems": Support.PARTIAL, "$dynamicRef": Support.UNSUPPORTED}


@pytest.mark.parametrize("name", [k for k, v in KEYWORDS.items() if v.fsm is Support.UNSUPPORTED])
def test_unsupported_keywords_raise(name):
    # in a draft that defines the keyword: any other reads it as an annotation
    draft = "https://json-schema.org/draft/2019-09/schema" if name in undefined_keywords(2020) else "https://json-schema.org/draft/2020-12/schema"
    with pytest.raises(UnsupportedFeatureError, match=name.replace("$", r"\$")):
        lower_json_schema(JsonSchema({"$schema": draft, "$defs": {"x": {"$dynamicAnchor": "x"}}, name: "#x"}))


def test_annotations_do_not_change_the_language():
    plain, _, _ = lower_json_schema(JsonSchema({"type": "integer"}))
    annotated, _, _ = lower_json_schema(JsonSchema({"type": "integer", "title": "t", "default": 3, "examples": [1], "contentMediaType": "x"}))
    assert plain is annotated
