"""Local $ref resolution: pointers with escapes, $id bases, anchors, urn bases, errors."""

from __future__ import annotations

import pytest

from grammask import GrammarCompiler, JsonSchema
from grammask.errors import InvalidSchemaError, UnsupportedFeatureError
from grammask.schemas.resolve import Resolver, escape_pointer_token, subschemas, unescape_pointer_token


def test_pointer_escapes_round_trip():
    for token in ["a/b", "~x", "~1/~0", "plain"]:
        assert unescape_pointer_token(escape_pointer_token(token)) == token
    assert escape_pointer_token("a/b~") == "a~1b~0"


def test_pointer_percent_and_tilde_escapes():
    schema = {"$defs": {'a"b': {"type": "string"}, "c/d": {"type": "null"}, "e~f": {"type": "integer"}}}
    resolver = Resolver(schema)
    base = resolver.root_base
    assert resolver.resolve("#/$defs/a%22b", base).schema == {"type": "string"}
    assert resolver.resolve("#/$defs/c~1d", base).schema == {"type": "null"}
    assert resolver.resolve("#/$defs/e~0f", base).path == ("$defs", "e~f")


def test_ids_anchors_and_urn_bases():
    inner = {"$id": "http://example.com/inner.json", "$defs": {"x": {"$anchor": "ex", "type": "boolean"}}}
    schema = {"$id": "urn:example:root", "properties": {"i": inner}, "$defs": {"y": {"const": 1}}}
    resolver = Resolver(schema)
    assert resolver.resolve("#/$defs/y", "urn:example:root").schema == {"const": 1}
    assert resolver.resolve("http://example.com/inner.json#ex", "urn:example:root").schema["type"] == "boolean"
    assert resolver.resolve("#ex", "http://example.com/inner.json").schema["type"] == "boolean"
    assert resolver.resolve("inner.json", "http://example.com/other.json").schema is inner


def test_unresolvable_references_raise():
    resolver = Resolver({"$defs": {}})
    with pytest.raises(UnsupportedFeatureError, match="remote reference"):
        resolver.resolve("https://json-schema.org/draft/2020-12/schema", resolver.root_base)
    with pytest.raises(InvalidSchemaError, match="points at nothing"):
        resolver.resolve("#/$defs/nope", resolver.root_base)
    with pytest.raises(InvalidSchemaError, match="no anchor"):
        resolver.resolve("#nope", resolver.root_base)


def test_a_malformed_uri_is_an_invalid_schema_where_it_is_written(tiny_info):
    # urllib raises a bare ValueError on an unclosed IPv6 host
    with pytest.raises(InvalidSchemaError, match="at '/properties/a/\\$id': 'http://\\[bad' is not a URI reference"):
        Resolver({"properties": {"a": {"$id": "http://[bad"}}})
    resolver = Resolver({"$defs": {}})
    with pytest.raises(InvalidSchemaError, match="at '/items': 'http://\\[::1' is not a URI reference"):
        resolver.resolve("http://[::1", resolver.root_base, ("items",))
    with pytest.raises(InvalidSchemaError, match="is not a URI reference"):
        GrammarCompiler(tiny_info).compile(JsonSchema({"items": {"$ref": "http://[::1"}}))


def test_subschemas_skip_data_keywords():
    schema = {"enum": [{"properties": {"x": {}}}], "items": {"const": {"type": "x"}}, "allOf": [True]}
    paths = [path for path, _ in subschemas(schema)]
    assert paths == [(), ("items",), ("allOf", 0)]
