"""Specs: frozen, hashable, stable cache keys, validated options."""

from __future__ import annotations

import hashlib
import json

import pytest

from grammask import Ebnf, InvalidParameterError, InvalidSchemaError, JsonSchema, Regex, StructuralTag, Tag
from grammask.grammars.spec import NumberForm, PropertyOrder, Whitespace


def test_json_schema_key_is_stable_and_option_sensitive():
    a = JsonSchema({"type": "object", "properties": {"x": {"type": "integer"}}})
    b = JsonSchema('{"type":"object","properties":{"x":{"type":"integer"}}}')
    assert a == b and hash(a) == hash(b) and a.cache_key == b.cache_key
    assert JsonSchema(a.schema, whitespace="flexible").cache_key != a.cache_key
    assert JsonSchema(a.schema, property_order="any").cache_key != a.cache_key
    assert JsonSchema(a.schema, strict=True).cache_key != a.cache_key
    assert JsonSchema(a.schema, number_form="lenient").cache_key != a.cache_key
    # Key order is part of the schema (it fixes the declared property order).
    c = JsonSchema({"properties": {"x": {}, "y": {}}})
    d = JsonSchema({"properties": {"y": {}, "x": {}}})
    assert c.cache_key != d.cache_key



def test_digest_parts_keep_their_bounds_and_kinds():
    from grammask.grammars.spec import _digest

    assert _digest("ab", "c") != _digest("a", "bc")  # each part is length-prefixed
    assert _digest("1") != _digest(1) and _digest("null") != _digest(None)  # a string is not its JSON twin
    assert _digest("x", [1, {"b": 2, "a": 1}]) == _digest("x", [1, {"a": 1, "b": 2}])  # JSON parts sort their keys
    assert _digest("\ud800") != _digest("\ud801")  # a lone surrogate is hashed, not refused
    assert JsonSchema('{"enum":["\\ud800"]}').cache_key != JsonSchema('{"enum":["\\ud801"]}').cache_key
    # ints and booleans are written as json.dumps writes them (without its set-up): the same keys
    for part in (0, 7, -3, 10**30, True, False):
        text = json.dumps(part).encode()
        reference = hashlib.sha256(b"j" + len(text).to_bytes(8, "little") + text).hexdigest()[:32]
        assert _digest(part) == reference, part
    assert _digest(1) != _digest(True) and _digest(0) != _digest(False) and _digest(1.0) != _digest(1)

def test_json_schema_copies_the_callers_dict():
    schema = {"type": "string"}
    spec = JsonSchema(schema)
    schema["type"] = "integer"
    assert spec.schema == {"type": "string"}


def test_default_policies():
    spec = JsonSchema({})
    assert spec.whitespace is Whitespace.COMPACT
    assert spec.property_order is PropertyOrder.DECLARED
    assert spec.serialize({"a": [1, 2]}) == '{"a":[1,2]}'
    assert JsonSchema({}, whitespace="flexible").serialize({"a": 1}) == '{"a": 1}'
    assert spec.number_form is NumberForm.CANONICAL


def test_serialize_writes_numbers_canonically():
    spec = JsonSchema({})
    assert spec.serialize([16.0, -0.0, 2.50, 1e-7, 1e16, 7, True, None, "é"]) == '[16,0,2.5,0.0000001,10000000000000000,7,true,null,"é"]'
    assert json.loads(spec.serialize({"x": [0.1, -3.25e-5]})) == {"x": [0.1, -3.25e-5]}  # the same values


def test_bad_options_name_the_field():
    with pytest.raises(InvalidParameterError, match="invalid whitespace='tabs'"):
        JsonSchema({}, whitespace="tabs")
    with pytest.raises(InvalidParameterError, match="invalid number_form='short'"):
        JsonSchema({}, number_form="short")
    with pytest.raises(InvalidParameterError, match="max_depth=0"):
        JsonSchema({}, max_depth=0)
    with pytest.raises(InvalidSchemaError, match="not JSON"):
        JsonSchema("{nope")
    with pytest.raises(InvalidSchemaError, match="object or a boolean, got list"):
        JsonSchema([1])  # type: ignore[arg-type]


def test_other_specs():
    assert Regex("a+").cache_key == Regex("a+").cache_key != Regex("a*").cache_key
    assert Ebnf('root ::= "a"').cache_key != Ebnf('root ::= "a"', root="other").cache_key
    tag = Tag("<f=a>", JsonSchema({"type": "object"}), "</f>")
    spec = StructuralTag([tag], ["<f="])
    assert spec.cache_key == StructuralTag((tag,), ("<f=",)).cache_key
    with pytest.raises(InvalidParameterError, match=r"triggers\[0\]"):
        StructuralTag([tag], ["<g="])
    with pytest.raises(InvalidParameterError, match="grammar"):
        Ebnf("  ")


def test_structural_tag_from_its_plain_form():
    plain = {
        "type": "structural_tag",
        "structures": [{"begin": "<f=a>", "schema": {"type": "object"}, "end": "</f>"}],
        "triggers": ["<f="],
    }
    expected = StructuralTag([Tag("<f=a>", JsonSchema({"type": "object"}), "</f>")], ["<f="])
    assert StructuralTag.from_dict(plain) == expected
    assert StructuralTag.from_dict({k: v for k, v in plain.items() if k != "type"}) == expected
    with pytest.raises(InvalidParameterError, match=r"structural_tag.structures\[0\].*begin, schema and end"):
        StructuralTag.from_dict({**plain, "structures": [{"begin": "<f=a>", "end": "</f>"}]})
    with pytest.raises(InvalidParameterError, match="structural_tag.triggers"):
        StructuralTag.from_dict({**plain, "triggers": "<f="})
    with pytest.raises(InvalidParameterError, match="structural_tag.type"):
        StructuralTag.from_dict({**plain, "type": "json_schema"})
    with pytest.raises(InvalidParameterError, match=r"triggers\[0\]"):
        StructuralTag.from_dict({**plain, "triggers": ["<g="]})
