"""Output validation under hostile schemas (issue #12): references that leave the schema are refused at
compile time by every backend, and validation decides every regex keyword in ECMA-262 without Python's
``re`` (no ``re.error`` on ``\\p{L}``, no backtracking on ``(a+)+$``), with plain ``jsonschema`` as the
reference wherever ``re`` reads a pattern the same way."""

from __future__ import annotations

import threading

import jsonschema
import pytest

import grammask as gm
from grammask.grammars.fsm import patterns
from grammask.validation import output_errors, output_validator

REMOTE_REFERENCES = [
    {"$ref": "http://127.0.0.1:9/schema.json"},
    {"$ref": "https://example.com/schema.json#/definitions/x"},
    {"$ref": "file:///etc/passwd"},
    {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd#/x"}}},
    {"$id": "http://127.0.0.1:9/root.json", "$ref": "other.json"},
    {"$defs": {"x": {"$dynamicRef": "http://127.0.0.1:9/d.json#x"}}, "$ref": "#/$defs/x"},
]


@pytest.fixture(scope="module")
def compilers(tiny_info):
    return {name: gm.GrammarCompiler(tiny_info, backend=name) for name in ("auto", "fsm", "xgrammar")}


@pytest.mark.parametrize("backend", ["auto", "fsm", "xgrammar"])
@pytest.mark.parametrize("schema", REMOTE_REFERENCES, ids=range(len(REMOTE_REFERENCES)))
def test_a_reference_leaving_the_schema_is_refused_at_compile_time(compilers, backend, schema):
    with pytest.raises(gm.UnsupportedFeatureError, match=r"leaves the schema, and grammask never fetches one") as caught:
        compilers[backend].compile(gm.JsonSchema(schema))
    assert caught.value.feature in ("$ref", "$dynamicRef")


def test_a_structural_tag_schema_is_held_to_the_same_rule(compilers):
    tag = gm.Tag("<f>", gm.JsonSchema({"$ref": "file:///etc/passwd"}), "</f>")
    with pytest.raises(gm.UnsupportedFeatureError, match=r"'\$ref' at '/'"):
        compilers["auto"].compile(gm.StructuralTag([tag], ["<f>"]))


def test_a_missing_local_target_is_an_invalid_schema(compilers):
    with pytest.raises(gm.InvalidSchemaError, match=r"points at nothing"):
        compilers["xgrammar"].compile(gm.JsonSchema({"$ref": "#/$defs/missing"}))


def test_a_published_meta_schema_is_read_from_the_bundled_copy():
    """The one kind of external reference allowed: it ships with jsonschema, nothing is fetched."""
    schema = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    assert output_errors(schema, {"type": "string"}) == []
    assert output_errors(schema, {"type": 5})


def test_validating_against_a_reference_outside_the_schema_is_a_grammask_error():
    with pytest.raises(gm.InvalidSchemaError, match=r"does not resolve inside the schema"):
        output_errors({"$ref": "http://127.0.0.1:9/x.json"}, 1)


# ------------------------------------------------------------------------------------------ patterns


def finishes_within(seconds: float, work) -> bool:
    """Run ``work`` in a thread; False if it is still running after ``seconds`` (a hang guard for
    backtracking, which would take years here, not a speed target)."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def messages(schema, value):
    return [error.message for error in output_errors(schema, value)]


@pytest.mark.parametrize(
    "schema, valid, invalid",
    [
        ({"type": "string", "pattern": r"^\p{L}+$"}, ["Hello", "πλ", "Ünïcödé"], ["123", "a1", ""]),
        ({"type": "string", "pattern": r"^\p{Lu}\p{Ll}*$"}, ["Éric", "A"], ["éric", "AB"]),
        ({"type": "string", "pattern": r"^/{env}/x$"}, ["/{env}/x"], ["/env/x"]),  # re cannot read it
        ({"type": "string", "pattern": r"^[^]$"}, ["a", "\n"], ["", "ab"]),  # ECMA's "any character"; re errs
        ({"type": "string", "pattern": r"^\d+$"}, ["0123"], ["٣", "12\n"]),  # ECMA \d and $, not re's
    ],
)
def test_patterns_are_read_as_ecma_262(schema, valid, invalid):
    for value in valid:
        assert messages(schema, value) == [], value
    for value in invalid:
        assert messages(schema, value), value


CATASTROPHIC = [
    (r"^(a+)+$", "a" * 100_000 + "b"),
    (r"^(a|aa)*c$", "a" * 100_000),
    (r"^(?:(?:[A-Za-z0-9]+[-]?)+[A-Za-z0-9]/)?[A-Za-z0-9_-]+$", "18546f6171f67e29d1cb983322ad1329" * 1000 + "!"),  # JSONSchemaBench
]


@pytest.mark.parametrize("pattern, text", CATASTROPHIC, ids=["nested plus", "alternation", "corpus"])
def test_backtracking_patterns_are_decided_by_the_automaton(pattern, text):
    schemas = [
        {"type": "string", "pattern": pattern},
        {"type": "object", "patternProperties": {pattern: {"type": "integer"}}, "additionalProperties": False},
        {"type": "object", "patternProperties": {pattern: {}}, "unevaluatedProperties": False},
    ]
    values = [text, {text: 1}, {text: 1}]
    verdicts = []
    assert finishes_within(60, lambda: verdicts.extend(output_errors(s, v) for s, v in zip(schemas, values)))
    assert all(verdicts), verdicts  # each of the three rejects the text
    assert not isinstance(patterns._engine(pattern), patterns._Fallback)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^x-": {"type": "string"}, "^n_": {"type": "integer"}},
         "additionalProperties": {"type": "boolean"}},
        {"type": "object", "properties": {"a": {}}, "patternProperties": {"^b": {}}, "additionalProperties": False},
        {"type": "object", "allOf": [{"patternProperties": {"^b": {}}}], "properties": {"a": {}},
         "unevaluatedProperties": False},
        {"type": "object", "if": {"patternProperties": {"^i": {"const": 1}}}, "then": {"properties": {"t": {}}},
         "else": {"patternProperties": {"^e": {}}}, "unevaluatedProperties": {"type": "string"}},
        {"$defs": {"d": {"patternProperties": {"^r": {}}}}, "$ref": "#/$defs/d", "unevaluatedProperties": False},
        {"type": "object", "dependentSchemas": {"a": {"patternProperties": {"^z": {}}}}, "unevaluatedProperties": False},
        {"type": "object", "anyOf": [{"patternProperties": {"^q": {"type": "integer"}}}, {"required": ["w"]}],
         "unevaluatedProperties": False},
    ],
)
def test_property_keywords_agree_with_jsonschema_where_re_reads_the_patterns_alike(schema):
    """Plain jsonschema (with re) is the independent reference for patterns both dialects share."""
    reference = jsonschema.Draft202012Validator(schema)
    instances = [{}, {"a": 1}, {"b": 2}, {"x-1": "s"}, {"x-1": 3}, {"n_1": 1}, {"n_1": "s"}, {"c": True},
                 {"c": "s"}, {"i": 1, "t": 0}, {"i": 2, "e": 0}, {"i": 1, "e": 0}, {"u": "s"}, {"r": 0},
                 {"r": 0, "s": 0}, {"a": 0, "z": 0}, {"z": 0}, {"q": 1}, {"q": "s"}, {"q": 1, "w": 0}, {"w": 0, "q": "s"}]
    for instance in instances:
        assert (messages(schema, instance) == []) == reference.is_valid(instance), instance


def test_regex_format_is_ecma_262():
    schema = {"type": "string", "format": "regex"}
    assert messages(schema, r"^\p{L}+$") == []
    assert messages(schema, "(?<=a)b") == []  # valid ECMA, beyond an automaton
    assert messages(schema, "a(b")


def test_a_lookaround_pattern_is_decided_by_the_fallback():
    schema = {"type": "string", "pattern": r"^(?!pattern$).*$"}  # from JSONSchemaBench
    assert messages(schema, "other") == []
    assert messages(schema, "pattern")


def test_a_backtracking_fallback_is_reported_undecided_not_wrong():
    """A lookahead sends the corpus pattern above to the regex module, which times out."""
    schema = {"type": "string", "pattern": r"^(?=x|[0-9])" + CATASTROPHIC[2][0][1:]}
    found = messages(schema, "18546f6171f67e29d1cb983322ad1329!")
    assert len(found) == 1 and "cannot decide pattern" in found[0]


def test_a_lone_surrogate_in_a_string_is_one_character():
    assert messages({"type": "string", "pattern": "^a.$"}, "a\ud800") == []
    assert messages({"type": "string", "pattern": "^a[^x]$"}, "a\udc00") == []
    assert messages({"type": "string", "pattern": "^b"}, "a\ud800")


def test_output_validator_is_a_jsonschema_validator():
    validator = output_validator({"type": "string", "pattern": r"\p{N}"})
    assert validator.is_valid("x1") and not validator.is_valid("x")
