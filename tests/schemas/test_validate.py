"""The meta-schema check: the flat 2020-12 meta-schema and the compiled fast check give jsonschema's own verdict (and first error)."""

from __future__ import annotations

import copy
from collections import OrderedDict

import jsonschema
import pytest
from jsonschema.exceptions import best_match

from grammask import GrammarCompiler
from grammask.errors import InvalidSchemaError
from grammask.schemas.resolve import subschemas
from grammask.grammars.fsm import patterns
from grammask.schemas.validate import (
    _fast_meta_check,
    _format_checker,
    _meta_validator,
    _safe_class,
    check_schema,
    instance_validator,
    validator_class,
)
from grammask.validation import output_validator
from tests.conftest import CORPORA, read_jsonl

PUBLISHED = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)

# Keyword values the meta-schema rejects, one per vocabulary (and the deprecated keywords it keeps).
BAD_KEYWORDS = [
    ("type", "strnig"),
    ("minLength", -1),
    ("required", "name"),
    ("properties", []),
    ("items", 3),
    ("$defs", {"x": 5}),
    ("dependencies", {"a": [1]}),
    ("enum", "red"),
    ("$anchor", "1bad"),
    ("deprecated", "yes"),
    ("contentMediaType", 7),
    ("unevaluatedProperties", "no"),
]


def _first_error(validator, schema) -> tuple | None:
    error = best_match(validator.iter_errors(schema))
    return None if error is None else (error.message, list(error.absolute_path))


def _test_suite_schemas() -> list:
    return [row["schema"] for row in read_jsonl(CORPORA / "json-schema-test-suite" / "draft2020-12.dev.jsonl")]


def test_flat_meta_schema_is_used_for_2020_12():
    assert "allOf" not in _meta_validator(jsonschema.Draft202012Validator).schema
    assert _meta_validator(jsonschema.Draft7Validator).schema is jsonschema.Draft7Validator.META_SCHEMA


def test_flat_meta_schema_agrees_on_corpus_schemas(corpora):
    """Every test-suite schema and the first 20 of each JSONSchemaBench file."""
    flat = _meta_validator(jsonschema.Draft202012Validator)
    bench = [row["schema"] for path in sorted((CORPORA / "jsonschemabench" / "schemas").glob("*.dev.jsonl"))
             for row in read_jsonl(path)[:20]]
    schemas = [s for s in _test_suite_schemas() + bench if validator_class(s) is jsonschema.Draft202012Validator]
    assert len(schemas) > 400
    for schema in schemas:
        assert _first_error(flat, schema) == _first_error(PUBLISHED, schema), schema


def _broken_copies(schemas, keywords):
    """``(broken, path, keyword, value)``: each of ``schemas`` (objects) with each keyword value
    placed in turn at each of its subschemas."""
    for schema in schemas:
        for path, sub in list(subschemas(schema)):
            if not isinstance(sub, dict):
                continue
            for keyword, value in keywords:
                broken = copy.deepcopy(schema)
                target = broken
                for key in path:
                    target = target[key]
                target[keyword] = value
                yield broken, path, keyword, value


def test_flat_meta_schema_agrees_on_broken_nested_schemas(corpora):
    """Every bad keyword value, placed in turn at every subschema of a sample of test-suite schemas,
    gets the same first error (message and path) from both meta-schemas."""
    flat = _meta_validator(jsonschema.Draft202012Validator)
    schemas = [s for s in _test_suite_schemas()[::10]
               if isinstance(s, dict) and validator_class(s) is jsonschema.Draft202012Validator]
    checked = 0
    for broken, path, keyword, _ in _broken_copies(schemas, BAD_KEYWORDS):
        expected = _first_error(PUBLISHED, broken)
        assert expected is not None and expected[1][: len(path) + 1] == [*path, keyword]
        assert _first_error(flat, broken) == expected, (keyword, path, broken)
        checked += 1
    assert checked > 600


def test_check_schema_names_the_bad_keyword_and_where():
    with pytest.raises(InvalidSchemaError, match="at '/properties/a/minLength': -1 is less than the minimum of 0"):
        check_schema({"properties": {"a": {"minLength": -1}}})
    with pytest.raises(InvalidSchemaError, match="at '/items/type': 'strnig' is not valid"):
        check_schema({"items": {"type": "strnig"}})
    check_schema({"$defs": {"a": {"type": "integer"}}, "dependencies": {"b": ["c"]}})
    # jsonschema's draft lookup reads $schema as a URL string (AttributeError on an int)
    for not_a_string in (5, None, ["x"]):
        with pytest.raises(InvalidSchemaError, match="at '/\\$schema': .* is not of type 'string'"):
            check_schema({"$schema": not_a_string})


def test_output_validator_takes_leap_seconds_as_the_test_suite_does(corpora):
    """jsonschema rejects every leap second; the suite's labels (RFC 3339) accept 23:59:60 UTC under
    any offset. The output validator agrees with every date-time and time label, but one: a final
    newline, which jsonschema's own check lets through."""
    groups = [r for r in read_jsonl(CORPORA / "json-schema-test-suite" / "draft2020-12.dev.jsonl")
              if r["id"].split("#")[0] in ("optional/format/date-time.json", "optional/format/time.json")]
    leap_seconds = 0
    for group in groups:
        validator = output_validator(group["schema"])
        for test in group["tests"]:
            if isinstance(test["data"], str) and test["data"].endswith("\n"):
                continue
            assert validator.is_valid(test["data"]) == test["valid"], test
            leap_seconds += isinstance(test["data"], str) and ":60" in test["data"]
    assert leap_seconds >= 8
    validator = output_validator({"format": "date-time"})
    assert validator.is_valid("8435-10-01t16:01:60.5-07:58")  # the budget run's case: 23:59 UTC
    assert not validator.is_valid("8435-10-01t16:02:60.5-07:58") and not validator.is_valid("1998-02-30T15:59:60-08:00")


DRAFT_URIS = {
    jsonschema.Draft4Validator: "http://json-schema.org/draft-04/schema#",
    jsonschema.Draft6Validator: "http://json-schema.org/draft-06/schema#",
    jsonschema.Draft7Validator: "http://json-schema.org/draft-07/schema#",
    jsonschema.Draft202012Validator: "https://json-schema.org/draft/2020-12/schema",
}
# Values that differ between drafts or sit on a keyword's edge (1.0 is an integer from draft 6 on,
# a boolean exclusiveMinimum only in draft 4, required may be empty from draft 6 on).
EDGE_KEYWORDS = BAD_KEYWORDS + [
    ("minLength", 1.0), ("minLength", True), ("maxItems", 2.5), ("exclusiveMinimum", True), ("exclusiveMinimum", 3),
    ("exclusiveMaximum", True), ("required", []), ("required", ["a", "a"]), ("enum", []), ("enum", [1, True]),
    ("enum", [1, 1.0]), ("enum", [{"a": [1]}, {"a": [1.0]}]), ("type", ["string", "string"]), ("type", []),
    ("multipleOf", 0), ("multipleOf", -2), ("pattern", 5), ("additionalItems", {"type": "strnig"}),
    ("dependencies", {"a": "b"}), ("propertyNames", {"maxLength": -1}), ("items", [{"type": 1}]),
]


def _as_draft(schema, cls):
    return {**schema, "$schema": DRAFT_URIS[cls]}


@pytest.mark.parametrize("cls", list(DRAFT_URIS), ids=lambda c: c.__name__)
def test_fast_meta_check_gives_jsonschemas_verdict_on_corpus_schemas(corpora, cls):
    """The compiled check says yes exactly when jsonschema does: corpus schemas read under each draft."""
    fast, slow = _fast_meta_check(cls), _meta_validator(cls)
    bench = [row["schema"] for path in sorted((CORPORA / "jsonschemabench" / "schemas").glob("*.dev.jsonl"))
             for row in read_jsonl(path)[:40]]
    schemas = [_as_draft(s, cls) for s in _test_suite_schemas() + bench if isinstance(s, dict)]
    verdicts = [(fast(s), slow.is_valid(s)) for s in schemas]
    assert all(f == s for f, s in verdicts), next(sch for sch, (f, s) in zip(schemas, verdicts) if f != s)
    assert sum(s for _, s in verdicts) > 300


@pytest.mark.parametrize("cls", list(DRAFT_URIS), ids=lambda c: c.__name__)
def test_fast_meta_check_gives_jsonschemas_verdict_on_broken_nested_schemas(corpora, cls):
    """Every edge keyword value placed at every subschema of a sample of test-suite schemas: the
    compiled check's yes is jsonschema's yes (and its no, jsonschema's no)."""
    fast, slow = _fast_meta_check(cls), _meta_validator(cls)
    schemas = [_as_draft(s, cls) for s in _test_suite_schemas()[::12] if isinstance(s, dict)]
    checked = rejected = 0
    for broken, path, keyword, value in _broken_copies(schemas, EDGE_KEYWORDS):
        expected = slow.is_valid(broken)
        assert fast(broken) == expected, (keyword, value, path, broken)
        checked += 1
        rejected += not expected
    assert checked > 1000 and rejected > 500


@pytest.mark.parametrize("cls", list(DRAFT_URIS), ids=lambda c: c.__name__)
def test_fast_meta_check_reads_subclasses_of_json_types_as_jsonschema_does(cls):
    """The compiled check tests a value's exact JSON class first and asks the type's own test for
    any other class: an ``OrderedDict`` is an object, ``True`` no integer, ``2.0`` an integer after
    draft 4. A ``str`` subclass is no option of a string ``enum`` there (``_equal`` compares
    classes), so that no goes to jsonschema, which accepts it; ``check_schema`` does too."""

    class Name(str):
        pass

    fast, slow = _fast_meta_check(cls), _meta_validator(cls)
    after_4 = cls is not jsonschema.Draft4Validator
    cases = [  # schema, the compiled check's verdict, jsonschema's
        (OrderedDict([("type", "object"), ("properties", OrderedDict(a={"minLength": 2}))]), True, True),
        ({"type": Name("string")}, False, True),
        ({"minLength": True}, False, False),
        ({"minLength": 2.0}, after_4, after_4),
        ({"items": OrderedDict(type="integer"), "minItems": 1}, True, True),
    ]
    for schema, fast_verdict, verdict in cases:
        schema = _as_draft(schema, cls)
        assert (fast(schema), slow.is_valid(schema)) == (fast_verdict, verdict), schema
    check_schema(_as_draft({"type": Name("string")}, cls))


def test_fast_meta_check_is_not_compiled_for_2019_09():
    """2019-09's meta-schema recurses through $recursiveRef: its schemas go to jsonschema alone."""
    assert _fast_meta_check(jsonschema.Draft201909Validator)({"type": "object"}) is False
    check_schema({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"})
    with pytest.raises(InvalidSchemaError, match="minLength"):
        check_schema({"$schema": "https://json-schema.org/draft/2019-09/schema", "minLength": -1})


def test_a_compiler_prepares_every_drafts_meta_check(llama_info):
    """The first schema of each draft a server compiles pays nothing for its meta-schema check:
    the compiler built them when it was made."""
    _fast_meta_check.cache_clear()
    GrammarCompiler(llama_info, backend="fsm")
    built = _fast_meta_check.cache_info()
    for draft in ("draft-04", "draft-06", "draft-07", "draft/2020-12"):
        check_schema({"$schema": f"http://json-schema.org/{draft}/schema#", "type": "object"})
    assert _fast_meta_check.cache_info().misses == built.misses >= 4


def test_the_fsm_backend_prepares_every_drafts_instance_validator(llama_info):
    """Nor does the first schema of each draft pay for the class of the validator its proofs use
    (``jsonschema`` builds one a draft): the fsm backend built them when it was made."""
    _safe_class.cache_clear()
    _format_checker.cache_clear()
    GrammarCompiler(llama_info, backend="fsm").backend_instance("fsm")
    classes, checkers = _safe_class.cache_info(), _format_checker.cache_info()
    drafts = [f"http://json-schema.org/draft-0{n}/schema#" for n in (3, 4, 6, 7)]
    drafts += [f"https://json-schema.org/draft/{year}/schema" for year in ("2019-09", "2020-12")]
    schemas = [{"$schema": draft, "minimum": 1} for draft in drafts]
    assert len({validator_class(schema) for schema in schemas}) == 6
    for schema in schemas:
        validator = instance_validator(schema, search=patterns.search, is_regex=patterns.is_regex)
        assert validator.is_valid(2) and not validator.is_valid(0)
    assert _safe_class.cache_info().misses == classes.misses >= 6
    assert _format_checker.cache_info().misses == checkers.misses >= 6
