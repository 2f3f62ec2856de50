"""Corpus readers, sampling, keyword attribution and declared-order reordering, on hand-made files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grammask.conformance.corpus import declared_order, keywords, read_corpus, sample
from grammask.errors import InvalidParameterError


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_test_suite_groups_assert_format_only_under_optional_format(tmp_path):
    path = _write(tmp_path / "suite.jsonl", [
        {"id": "format.json#0", "file": "format.json", "description": "d", "schema": {"format": "email"},
         "tests": [{"description": "x", "data": "nope", "valid": True}]},
        {"id": "optional/format/email.json#0", "file": "optional/format/email.json", "description": "d",
         "schema": {"format": "email"}, "tests": [{"description": "x", "data": "nope", "valid": False}]},
    ])
    cases = read_corpus(path)
    assert [c.corpus for c in cases] == ["test-suite", "test-suite"]
    assert [c.format_asserted for c in cases] == [False, True]
    assert cases[1].instances[0].data == "nope" and cases[1].instances[0].valid is False


def test_jsonschemabench_schemas_join_instances_by_id_and_keep_schema_only_records(tmp_path):
    schemas = _write(tmp_path / "schemas" / "Tiny.dev.jsonl", [
        {"id": "Tiny/a", "dataset": "Tiny", "schema": {"type": "integer"}},
        {"id": "Tiny/b", "dataset": "Tiny", "schema": {"type": "string"}},
    ])
    _write(tmp_path / "instances" / "Tiny.dev.jsonl", [
        {"id": "Tiny/b", "dataset": "Tiny", "tests": [{"description": "s", "data": "x", "valid": True}]},
    ])
    cases = read_corpus(schemas)
    assert [(c.id, c.corpus, len(c.instances), c.format_asserted) for c in cases] == [
        ("Tiny/a", "Tiny", 0, True), ("Tiny/b", "Tiny", 1, True)]


def test_an_instances_file_is_refused_as_a_corpus(tmp_path):
    path = _write(tmp_path / "i.jsonl", [{"id": "x", "tests": []}])
    with pytest.raises(InvalidParameterError, match="a schemas file, not instances"):
        read_corpus(path)


def test_sample_is_deterministic_keeps_file_order_and_depends_on_seed(tmp_path):
    path = _write(tmp_path / "s" / "D.jsonl", [{"id": f"D/{i}", "schema": {}} for i in range(50)])
    cases = read_corpus(path)
    first, again, other = sample(cases, 10, 0), sample(cases, 10, 0), sample(cases, 10, 1)
    assert [c.id for c in first] == [c.id for c in again]
    assert len(first) == 10 and [c.id for c in first] == [c.id for c in cases if c in first]
    assert {c.id for c in first} != {c.id for c in other}
    assert sample(cases, None) is cases


def test_keywords_skip_property_names_values_and_annotations():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t",
        "type": "object",
        "properties": {"minimum": {"type": "string", "format": "date"}, "enum": {"const": {"pattern": 1}}},
        "$defs": {"x": {"uniqueItems": True}},
        "anyOf": [{"required": ["a"]}],
        "examples": [{"maxLength": 3}],
    }
    assert keywords(schema) == {"type", "properties", "format", "format:date", "const", "anyOf", "required", "uniqueItems"}


def test_keywords_leave_out_what_the_schemas_draft_does_not_define():
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "const": 1, "dependencies": {"a": ["b"]}}
    assert keywords(draft4) == {"type", "dependencies"}  # const is draft 6's: an annotation here
    assert keywords({**draft4, "$schema": "https://json-schema.org/draft/2020-12/schema"}) == {"type", "const"}
    # what is inside such a keyword is no schema of the document either
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": {"minLength": 1},
              "prefixItems": [{"minimum": 1, "format": "date"}], "dependentSchemas": {"a": {"maxProperties": 2}}}
    assert keywords(draft7) == {"type", "items", "minLength"}
    assert keywords({**draft7, "$schema": "https://json-schema.org/draft/2020-12/schema"}) == {
        "type", "items", "minLength", "prefixItems", "minimum", "format", "format:date", "dependentSchemas", "maxProperties"}


def test_declared_order_follows_properties_refs_and_items():
    schema = {
        "type": "object",
        "properties": {"b": {"$ref": "#/$defs/inner"}, "a": {"type": "integer"}},
        "$defs": {"inner": {"properties": {"y": {}, "x": {}}}},
    }
    instance = {"extra": 0, "a": 1, "b": [{"x": 1, "y": 2}]}
    schema["$defs"]["inner"] = {"type": "array", "items": {"properties": {"y": {}, "x": {}}}}
    assert json.dumps(declared_order(instance, schema)) == json.dumps({"b": [{"y": 2, "x": 1}], "a": 1, "extra": 0})
