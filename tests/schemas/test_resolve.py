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


@pytest.mark.parametrize("base", [
    "https://grammask.invalid/root.json", "urn:example:root", "http://x/a?q=1", "file:///tmp/s.json",
    "tag:example.com,2020:schema", "http://[::1]:8080/s",
])
def test_a_fragment_reference_lands_where_rfc_3986_resolution_puts_it(base):
    """``#...`` references skip URI parsing (the base's document is read once): they land where
    the same reference written as an absolute URI lands, which ``urljoin`` and ``urldefrag`` resolve."""
    from urllib.parse import urldefrag

    from grammask.schemas.resolve import urljoin

    document = urldefrag(base)[0]
    resolver = Resolver({"$id": base, "$defs": {"a": {"$anchor": "here", "type": "integer"}, "a b": {"type": "string"}}})

    def landing(ref):
        try:
            return resolver.resolve(ref, resolver.root_base)
        except InvalidSchemaError:
            return "nowhere"

    for fragment in ("", "/$defs/a", "/$defs/a%20b", "here", "/$defs/a#b", "nowhere"):
        assert urldefrag(urljoin(base, "#" + fragment)) == (document, fragment)
        found = landing("#" + fragment)
        assert found == landing(document + "#" + fragment), fragment
    assert landing("#").schema is resolver.root and landing("#/$defs/a%20b").schema == {"type": "string"}
    assert landing("#here").schema == {"$anchor": "here", "type": "integer"} and landing("#nowhere") == "nowhere"


def test_a_fragment_reference_stays_in_a_document_whose_uri_ends_in_an_empty_query():
    # urllib drops the empty query ("?") when it splits "http://x/a?#/..." again: the document
    # indexed as "http://x/a?" must still be where "#/..." lands, not a remote "http://x/a".
    resolver = Resolver({"$id": "http://x/a?", "$defs": {"a": {"type": "integer"}}})
    assert resolver.resolve("#/$defs/a", resolver.root_base).schema == {"type": "integer"}
