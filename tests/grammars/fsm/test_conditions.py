"""Member conditions (``if`` / ``not`` / overlapping ``oneOf`` over names and member values) are
tracked along the object's slot chain: checked against jsonschema on enumerated instances, and
shown to take no complement."""

import itertools

import pytest

from grammask import JsonSchema
from grammask.grammars.fsm import conditions as C
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.json_schema import lower_json_schema
from grammask.grammars.fsm.rules import Rule, reachable_rules
from grammask.schemas.validate import validator_class

from .test_json_schema import check_against_jsonschema, lowered


def objects(values: dict, fixed: dict | None = None) -> list:
    """Every object with a subset of ``values``' members, each member taking each of its listed values."""
    out = []
    names = list(values)
    for mask in range(1 << len(names)):
        chosen = [n for i, n in enumerate(names) if mask >> i & 1]
        for combo in itertools.product(*(values[n] for n in chosen)):
            out.append({**(fixed or {}), **dict(zip(chosen, combo))})
    return out


def assert_no_complement(expr):
    """No rule the expression reaches takes a complement (a ¬ node)."""
    stack, seen = [rule.body for rule in reachable_rules(Rule("#", expr))], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or node.kind <= E.BYTES_KIND:
            continue
        seen.add(id(node))
        assert node.kind != E.NOT_KIND, E.to_string(node)[:200]
        stack.extend(a for a in node.args if isinstance(a, E.Expr))


APP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "engine": {"type": "string", "enum": ["static", "react", "custom"]},
        "serve": {"type": "string"},
        "include": {"type": "array", "items": {"type": "string"}},
        "public_routes": {"type": "array"},
        "public": {"type": "boolean"},
    },
    "required": ["name", "engine"],
    "allOf": [
        {"if": {"properties": {"engine": {"const": "static"}}, "required": ["engine"]}, "then": {"required": ["serve"]}},
        {"not": {"required": ["public", "public_routes"]}},
        {
            "if": {"properties": {"engine": {"enum": ["static", "react"]}}, "required": ["engine"]},
            "then": {"not": {"required": ["include"]}},
            "else": {"not": {"required": ["serve"]}},
        },
    ],
}


def test_if_then_else_and_not_over_names_and_literal_values_are_exact_without_complements():
    values = {"engine": ["static", "react", "custom", "other"], "serve": ["s"], "include": [["i"]], "public_routes": [[]], "public": [True]}
    instances = objects(values, {"name": "n"}) + [{"engine": "static", "serve": "s"}, "static", None]
    spec, expr, notes = lowered(APP)
    assert not notes
    check_against_jsonschema(APP, instances)
    assert_no_complement(expr)


def test_a_value_condition_on_an_open_string_splits_the_value_by_its_verdict():
    schema = {
        "type": "object",
        "properties": {"kind": {"type": "string"}, "x": {"type": "integer"}},
        "if": {"properties": {"kind": {"pattern": "^a"}}},
        "then": {"required": ["x"]},
        "else": {"not": {"required": ["x"]}},
    }
    values = {"kind": ["a", "ab", "b", "", "ba", 3], "x": [1, "1"]}
    check_against_jsonschema(schema, objects(values) + [[], "a"])


def test_conditions_on_a_schema_without_a_type_decide_the_other_types():
    # On a value that is not an object, required and properties hold: "not required" rejects it,
    # "if required then required" accepts it, a type branch decides by the type.
    values = {"a": [1, "x"], "b": [True]}
    others = [None, True, 0, 1.5, "s", [], [1]]
    for schema in (
        {"properties": {"a": {}, "b": {}}, "not": {"required": ["a"]}},
        {"properties": {"a": {}, "b": {}}, "if": {"required": ["a"]}, "then": {"required": ["b"]}},
        {"properties": {"a": {}, "b": {}}, "anyOf": [{"type": "string"}, {"required": ["a"]}], "oneOf": [{"required": ["b"]}, {"type": "array"}]},
        {"properties": {"a": {}, "b": {}}, "oneOf": [{"properties": {"a": {"type": "string"}}}, {"required": ["b"]}]},
    ):
        check_against_jsonschema(schema, objects(values) + others)


def test_one_of_members_with_typed_values_is_exact():
    # Each branch requires its own member and types its value: the branches overlap (an object
    # with both members), so this was a complement over the whole object.
    schema = {
        "type": "object",
        "properties": {"tag": {"type": "string"}},
        "oneOf": [
            {"required": ["image"], "properties": {"image": {"type": "string"}}},
            {"required": ["file"], "properties": {"file": {"type": "string"}}},
        ],
    }
    values = {"tag": ["t"], "image": ["i", 1], "file": ["f", None]}
    spec, expr, notes = lowered(schema)
    check_against_jsonschema(schema, objects(values))


def test_dependent_required_and_formats_join_the_conditions():
    schema = {
        "type": "object",
        "properties": {"mail": {"enum": ["a@b.io", "nope", 7]}, "cc": {"type": "string"}, "bcc": {"type": "string"}},
        "dependentRequired": {"bcc": ["cc"]},
        "if": {"properties": {"mail": {"format": "email"}}, "required": ["mail"]},
        "then": {"required": ["cc"]},
    }
    values = {"mail": ["a@b.io", "nope", 7], "cc": ["c"], "bcc": ["d"]}
    check_against_jsonschema(schema, objects(values))
    check_against_jsonschema({**schema, "$schema": "http://json-schema.org/draft-07/schema#", "dependencies": schema["dependentRequired"]}, objects(values))


@pytest.mark.parametrize("typed", [True, False])
def test_dependent_schemas_join_the_conditions(typed):
    """``dependentSchemas`` is "has the member ⇒ the subschema", vacuous on other types: a
    condition with no complement, and a recursive member under it stays a call."""
    node = {
        "properties": {"next": {"$ref": "#"}, "n": {"type": "integer"}, "tag": {"type": "string"}},
        "dependentSchemas": {"next": {"required": ["n"]}, "tag": {"not": {"required": ["n"]}, "properties": {"next": {"required": ["tag"]}}}},
        **({"type": "object"} if typed else {}),
    }
    values = {"next": [{}, {"n": 1}, {"tag": "x"}], "n": [1, "x"], "tag": ["t"]}
    check_against_jsonschema(node, objects(values) + [1, "s", [{}], None])
    spec, expr, notes = lowered(node)
    assert_no_complement(expr)
    assert notes == () and E.has_calls(expr)
    deep = {}
    for _ in range(40):
        deep = {"next": deep, "n": 0}
    check_against_jsonschema(node, [deep, {"next": deep}])
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"a": {"type": "integer"}}, "dependencies": {"a": {"required": ["b"]}}}
    check_against_jsonschema(draft7, objects({"a": [1, "x"], "b": [2]}))


def test_the_formula_reader_declines_what_it_cannot_track():
    reader = C.ConditionReader(lambda ref, base, path: (None, None), 2020)
    assert reader.read({"minProperties": 2}, "", ()) is None
    assert reader.read({"$ref": "#/nowhere"}, "", ()) is None
    assert reader.read({"not": {"patternProperties": {"a": {}}}}, "", ()) is None
    formula = reader.read({"oneOf": [{"required": ["a"]}, {"required": ["b"], "properties": {"c": False}}]}, "", ())
    bits = C.ConditionBits(formula)
    a, b, c = bits.names["a"], bits.names["b"], bits.names["c"]
    assert [bits.allowed(x) for x in (0, a, b, a | b, b | c)] == [False, True, True, False, False]
    assert C.holds_for_type(formula, "string") is False  # both branches hold on a string
    assert C.holds_for_type(reader.read({"not": {"type": "integer"}}, "", ()), "number") is None
    # Past the caps (value atoms on one name, combinations over all names) nothing is tracked.
    many_values = reader.read({"anyOf": [{"properties": {"a": {"const": i}}} for i in range(C.MAX_VALUE_ATOMS_PER_NAME + 1)]}, "", ())
    many_names = reader.read({"anyOf": [{"required": [f"n{i}"]} for i in range(13)]}, "", ())
    assert not C.ConditionBits(many_values).trackable and not C.ConditionBits(many_names).trackable
    assert C.ConditionBits(reader.read({"anyOf": [{"required": [f"n{i}"]} for i in range(12)]}, "", ())).trackable
    # ... and the schema is lowered through its complement, exact as before.
    untracked = {"type": "object", "properties": {"a": {}}, "anyOf": [{"properties": {"a": {"const": i}}, "required": ["a"]} for i in range(7)]}
    check_against_jsonschema(untracked, [{"a": i} for i in range(9)] + [{}, {"a": "0"}])


@pytest.mark.parametrize("ident", ["JsonSchemaStore/spacefile.schema", "JsonSchemaStore/testenvironments"])
def test_dev_corpus_member_conditions_lower_without_complements(corpora, ident):
    # spacefile's micros: if engine is "static" then serve is required, public and public_routes
    # exclude each other... (2 s for one fill, 78 MB, searching an intersection's states for one
    # that accepts). testenvironments: a oneOf of four environments without "type": "object", one
    # of them an overlapping oneOf of two required members (a state limit after 60 s). Both are
    # now slot chains carrying bits: exact, nothing narrowed, no complement.
    from tests.conftest import read_jsonl

    dataset = ident.split("/")[0]
    schema = next(r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / f"{dataset}.dev.jsonl") if r["id"] == ident)
    tests = next(r["tests"] for r in read_jsonl(corpora / "jsonschemabench" / "instances" / f"{dataset}.dev.jsonl") if r["id"] == ident)
    expr, unenforced, narrowed = lower_json_schema(JsonSchema(schema))
    assert narrowed == () and {u.keyword for u in unenforced} <= {"uniqueItems"}  # repeated strings are not tracked
    assert_no_complement(expr)
    validator = validator_class(schema)(schema)
    judged = [t["data"] for t in tests if validator.is_valid(t["data"]) or any(e.validator != "uniqueItems" for e in validator.iter_errors(t["data"]))]
    assert len(judged) >= 3
    check_against_jsonschema(schema, judged)
