"""What xgrammar enforces of a JSON Schema once grammask has rewritten it, against ``jsonschema``:
every value the grammar accepts that ``jsonschema`` rejects must be explained by the grammar's
``unenforced`` list (valid once the listed keywords are taken out of the schema).

Issue #12: keywords beside ``anyOf`` / ``oneOf`` / ``enum`` / ``$ref`` / ``allOf`` were silently
dropped (``{"type": "string", "anyOf": [...]}`` accepted ``68``), ``propertyNames`` let ``{null:1}``
through, ``multipleOf`` with one bound and ``format: date`` were looser than listed.
"""

from __future__ import annotations

import copy
import json
import random

import jsonschema
import pytest

from grammask import GrammarCompiler, JsonSchema, Regex, UnsupportedFeatureError
from grammask.grammars.xgrammar_schema import prepare_for_xgrammar
from grammask.schemas.resolve import unescape_pointer_token
from grammask.validation import output_validator
from tests.conftest import read_jsonl
from tests.helpers import walk


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info, backend="xgrammar")


def accepts(grammar, text: str, hf, info) -> bool:
    return walk(grammar.matcher(), hf.encode(text, add_special_tokens=False), info).terminated


def stripped(schema, unenforced):
    """``schema`` without the keywords listed as unenforced (``oneOf`` read as ``anyOf``)."""
    schema = copy.deepcopy(schema)
    for entry in unenforced:
        pointer = entry.path
        if pointer.endswith("/" + entry.keyword):
            pointer = pointer[: -len(entry.keyword) - 1]
        node = schema
        for token in pointer.split("/")[1:]:
            token = unescape_pointer_token(token)
            node = node[int(token)] if isinstance(node, list) else node[token]
        if entry.keyword == "oneOf":
            node["anyOf"] = node.pop("oneOf")
        group = {"if": ("if", "then", "else"), "contains": ("contains", "minContains", "maxContains")}
        for keyword in group.get(entry.keyword, (entry.keyword,)):
            node.pop(keyword, None)
    return schema


def unexplained_accepts(compiler, schema, instances, hf, info) -> list:
    """Instances the grammar accepts that ``jsonschema`` rejects even without the unenforced keywords."""
    grammar = compiler.compile(JsonSchema(schema))
    loose = output_validator(stripped(schema, grammar.unenforced))
    strict = output_validator(schema)
    found = []
    for instance in instances:
        text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
        if accepts(grammar, text, hf, info) and not strict.is_valid(instance) and not loose.is_valid(instance):
            found.append(instance)
    return found


# (schema, instances): each found a value xgrammar accepted against an assertion nothing listed.
SILENT_LOSSES = [
    ({"type": "string", "anyOf": [{"pattern": "(?=a)a"}]}, [68, None, "abc", "b"]),
    ({"type": "object", "propertyNames": {"pattern": "^(?=a)"}}, [{"ab": 1}, {"b": 1}, "x"]),
    ({"type": "integer", "multipleOf": 7, "minimum": 0}, [1, 14]),
    ({"type": "integer", "multipleOf": 4001}, [1, 4001]),
    ({"type": "string", "format": "date"}, ["2023-02-31", "2023-02-28"]),
    ({"type": "object", "oneOf": [{"properties": {"a": {"type": "integer"}}}, {"required": ["b"]}]}, ["s", 5, {"a": 1}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": "x"}, {"a": 1}, {}, 5]),
    ({"minimum": 5, "anyOf": [{"type": "integer"}, {"type": "string"}]}, [1, 6, "x"]),
    ({"type": "string", "enum": ["a", 1]}, [1, "a"]),
    ({"minimum": 5, "enum": [1, 6]}, [1, 6]),
    ({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a", "minimum": 5}, [1, 6, "a"]),
    ({"allOf": [{"type": "integer"}, {"minimum": 5}]}, [1, 6, "a"]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]},
     [{"a": 1}, {"a": 1, "b": "x"}, {"b": "x"}, {"a": "s", "b": "x"}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"x": {"type": "integer"}}},
     [{"a": 1, "xa": "s"}, {"a": "s"}, {"b": "s"}]),
    ({"type": "object", "properties": {"abc": {"type": "integer"}}, "propertyNames": {"maxLength": 2}}, [{"abc": 1}, {"ab": 1}]),
    ({"type": "object", "additionalProperties": False, "propertyNames": {"maxLength": 2}}, [{"a": 1}, {}]),
    ({"type": "string", "maxLength": 3, "pattern": "^a"}, ["abcd", "ab", "b"]),
    ({"type": "string", "format": "uuid", "pattern": "^0"}, ["123e4567-e89b-12d3-a456-426614174000"]),
    ({"type": "string", "oneOf": [{"minLength": 2}, {"maxLength": 4}]}, [3, "abc", "a"]),
    ({"type": "object", "properties": {"n": {"type": "integer"}}, "dependentRequired": {"n": ["m"]}}, [{"n": 1}]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "uniqueItems": True}, [[1, 1], [5]]),
]


@pytest.mark.parametrize("schema, instances", SILENT_LOSSES, ids=[json.dumps(s)[:60] for s, _ in SILENT_LOSSES])
def test_every_false_accept_is_listed(compiler, llama_hf, llama_info, schema, instances):
    assert unexplained_accepts(compiler, schema, instances, llama_hf, llama_info) == []


def test_issue_reproducers_are_enforced_or_listed(compiler, llama_hf, llama_info):
    # The outer type holds in every branch: neither 68 nor null is a string.
    grammar = compiler.compile(JsonSchema({"type": "string", "anyOf": [{"pattern": "(?=a)a"}]}))
    assert not accepts(grammar, "68", llama_hf, llama_info) and not accepts(grammar, "null", llama_hf, llama_info)
    assert [(u.keyword, u.path) for u in grammar.unenforced] == [("pattern", "/anyOf/0")]
    # An object beside an untyped oneOf never becomes a bare string.
    grammar = compiler.compile(JsonSchema({"type": "object", "oneOf": [{"required": ["a"]}, {"properties": {"b": {"type": "integer"}}}]}))
    assert not accepts(grammar, '"s"', llama_hf, llama_info) and accepts(grammar, '{"a":1}', llama_hf, llama_info)
    # Property names are strings: never {null:1}, whatever the pattern.
    grammar = compiler.compile(JsonSchema({"type": "object", "propertyNames": {"pattern": "^(?=a)"}}))
    assert not accepts(grammar, "{null:1}", llama_hf, llama_info) and accepts(grammar, '{"ab":1}', llama_hf, llama_info)
    for schema, keyword in [({"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 20000}, "multipleOf"),
                            ({"type": "string", "format": "date"}, "format")]:
        assert keyword in {u.keyword for u in compiler.compile(JsonSchema(schema)).unenforced}, schema
    exact = compiler.compile(JsonSchema({"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 100}))
    assert exact.is_exact and not accepts(exact, "1", llama_hf, llama_info) and accepts(exact, "14", llama_hf, llama_info)


def test_a_multiple_of_the_fsm_refuses_is_listed_where_auto_takes_it(llama_info, llama_hf):
    grammar = GrammarCompiler(llama_info).compile(JsonSchema({"type": "integer", "multipleOf": 4001}))
    assert grammar.backend == "xgrammar" and "fsm: backend 'fsm' cannot enforce 'multipleOf'" in grammar.choice
    assert not grammar.is_exact and [u.keyword for u in grammar.unenforced] == ["multipleOf"]


def test_merges_are_exact_where_keywords_are_independent():
    prepared = prepare_for_xgrammar({"allOf": [{"type": "integer"}, {"minimum": 5}, {"type": "number", "maximum": 9}]})
    assert prepared.schema == {"type": ["integer"], "minimum": 5, "maximum": 9} and not prepared.unenforced
    prepared = prepare_for_xgrammar({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False,
                                     "allOf": [{"properties": {"b": {}}, "required": ["a"]}]})
    assert prepared.schema["properties"] == {"a": {"type": "integer"}, "b": False} and not prepared.unenforced
    # Two patterns cannot be one: one is kept, the other listed at its own place.
    prepared = prepare_for_xgrammar({"type": "string", "pattern": "a", "allOf": [{"pattern": "b"}]})
    assert [(u.keyword, u.path) for u in prepared.unenforced] == [("pattern", "/allOf/0")]


def test_disjoint_one_of_is_exact_and_siblings_reach_every_branch():
    schema = {"type": "object", "required": ["kind"], "oneOf": [
        {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
        {"properties": {"kind": {"const": "b"}}},
    ]}
    prepared = prepare_for_xgrammar(schema)
    assert prepared.unenforced == () and "anyOf" in prepared.schema
    assert all(branch["type"] == "object" and branch["required"] == ["kind"] for branch in prepared.schema["anyOf"])


def test_references_survive_the_rewrite_around_them(compiler, llama_hf, llama_info):
    # "#/properties/foo" pointed into a part the type split moves; now every reference has its copy.
    grammar = compiler.compile(JsonSchema({"properties": {"foo": {"type": "integer"}}, "items": {"$ref": "#/properties/foo"}}))
    assert accepts(grammar, "[1]", llama_hf, llama_info) and not accepts(grammar, '["a"]', llama_hf, llama_info)
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}], "additionalItems": False}
    grammar = compiler.compile(JsonSchema(draft7))
    assert accepts(grammar, "[1]", llama_hf, llama_info) and not accepts(grammar, "[1,2]", llama_hf, llama_info)


def test_a_regex_lookaround_is_refused_not_dropped(compiler):
    # In a schema's pattern xgrammar drops a lookaround (listed above); as a whole regex it refuses it.
    with pytest.raises(UnsupportedFeatureError, match="lookahead"):
        compiler.compile(Regex("[a-z]+(?=x)x"))


def _suite_groups(corpora) -> list[dict]:
    return read_jsonl(corpora / "json-schema-test-suite" / "draft2020-12.dev.jsonl")


def _suite_false_accepts(compiler, groups, hf, info) -> list[str]:
    """Instances labelled invalid that a grammar accepts and that stay invalid without its
    unenforced keywords (formats are asserted only under optional/format/, the suite's rule)."""
    found = []
    for group in groups:
        formats = group["file"].startswith("optional/format/")
        try:
            grammar = compiler.compile(JsonSchema(group["schema"], assert_formats=formats))
        except Exception:  # not compiled: nothing accepted
            continue
        loose = stripped(group["schema"], grammar.unenforced)
        check = output_validator(loose) if formats else jsonschema.validators.validator_for(loose)(loose)
        for test in group["tests"]:
            text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
            if test["valid"] or not accepts(grammar, text, hf, info):
                continue
            try:
                explained = check.is_valid(test["data"])
            except Exception:  # a pattern Python's re cannot read: jsonschema has no verdict
                explained = True
            if not explained:
                found.append(f"{group['id']}: {text}")
    return found


def test_a_sample_of_the_test_suite_has_no_unlisted_false_accept(compiler, llama_hf, llama_info, corpora):
    groups = random.Random(12).sample(_suite_groups(corpora), 40)
    assert _suite_false_accepts(compiler, groups, llama_hf, llama_info) == []


@pytest.mark.slow
def test_the_test_suite_has_no_unlisted_false_accept(compiler, llama_hf, llama_info, corpora):
    assert _suite_false_accepts(compiler, _suite_groups(corpora), llama_hf, llama_info) == []


def test_a_format_the_drafts_validators_do_not_assert_is_reported_narrowed():
    # As on fsm (tests/grammars/fsm/test_json_schema.py): xgrammar asserts uuid under any draft.
    draft6 = prepare_for_xgrammar({"$schema": "http://json-schema.org/draft-06/schema#", "type": "string", "format": "uuid"})
    latest = prepare_for_xgrammar({"type": "string", "format": "uuid"})
    assert [n.keyword for n in draft6.narrowed if "annotation" in n.reason] == ["format"]
    assert not [n for n in latest.narrowed if "annotation" in n.reason]


@pytest.mark.parametrize("schema, valid, invalid", [
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {"a": {"type": "integer", "const": 1}}}, '{"a":2}', '{"a":"s"}'),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "prefixItems": [{"type": "string"}],
      "items": {"type": "integer"}}, "[1]", '["a"]'),
])
def test_keywords_the_schemas_draft_does_not_define_are_annotations(compiler, llama_hf, llama_info, schema, valid, invalid):
    # As on fsm: xgrammar itself would enforce them whatever the draft.
    judge = output_validator(schema)
    assert judge.is_valid(json.loads(valid)) and not judge.is_valid(json.loads(invalid))
    grammar = compiler.compile(JsonSchema(schema))
    assert accepts(grammar, valid, llama_hf, llama_info) and not accepts(grammar, invalid, llama_hf, llama_info)
    assert grammar.is_exact and not grammar.narrowed
