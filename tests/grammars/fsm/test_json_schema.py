"""JSON Schema lowering, keyword by keyword: expr.matches against jsonschema (the reference)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from grammask import GrammarCompiler
from grammask.errors import CompileLimitError, InvalidSchemaError, UnsupportedFeatureError
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.pushdown import matches
from grammask.grammars.fsm.rules import Rule, reachable_rules
from grammask.grammars.fsm.automaton import START, LazyDfa
from grammask.grammars.fsm.disjoint import BASIC_TYPES, DisjointnessProver
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance, property_ranking
from grammask.schemas.resolve import Resolver
from grammask.schemas.validate import validator_class
from grammask.grammars.spec import JsonSchema
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.validation import output_validator


def lowered(schema, **options):
    spec = JsonSchema(schema, **options)
    expr, unenforced, narrowed = lower_json_schema(spec)
    return spec, expr, unenforced + narrowed


def check_against_jsonschema(schema, instances, **options):
    """Every instance: the expression accepts its canonical text exactly when jsonschema validates it."""
    spec, expr, _ = lowered(schema, **options)
    cls = validator_class(schema)  # the schema's own draft
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    for instance in instances:
        text = spec.serialize(order_instance(spec, instance))
        assert matches(expr, text) == validator.is_valid(instance), (schema, text)


def test_strings_are_canonical_and_length_counts_characters():
    spec, expr, _ = lowered({"type": "string", "minLength": 2, "maxLength": 3})
    assert matches(expr, '"ab"') and matches(expr, '"é\\n"') and matches(expr, '"\\"\\\\x"')
    assert not matches(expr, '"a"') and not matches(expr, '"abcd"')
    assert not matches(expr, '"a\\u0062"')  # not the canonical spelling of "ab"
    assert not matches(expr, '"a\nb"')  # raw control characters are not JSON
    assert matches(expr, json.dumps("\x01z", ensure_ascii=False))  # \u0001 counts as one character


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^\\d{1,3}(\\.\\d)?$"},
        {"type": "string", "pattern": "é|\\\\|\"|[^\\x00-\\x7f]+"},
        {"type": "string", "format": "date"},
        {"type": "string", "pattern": "^[^a]*$", "format": "email"},
    ],
)
def test_a_pattern_or_format_is_its_own_universe(schema):
    """Patterns and formats are languages of Unicode characters: without length bounds the string
    is their encoding alone, with no intersection, and still exact."""
    _, expr, _ = lowered(schema)
    if "format" not in schema:
        assert E.is_plain(expr)
    texts = ["", "12", "12.5", "1234", "é", "\\", '"', "€€", "2024-02-29", "2023-02-29", "a@b.co", "b@c.de", "x\ny", "12.", "\u0000"]
    check_against_jsonschema(schema, texts)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": -3, "exclusiveMaximum": 12},
        {"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.25},
        {"type": "integer", "multipleOf": 3, "minimum": 0},
        {"type": "number", "multipleOf": 0.25},
    ],
)
def test_numbers_match_jsonschema(schema):
    values = [-4, -3, -2.5, 0, 0.5, 0.75, 1, 1.0, 2.25, 2.26, 3, 6, 9.0, 11, 12, 12.5, 99]
    check_against_jsonschema(schema, values)


def test_integer_accepts_zero_fraction_when_lenient_but_draft4_does_not():
    _, expr, _ = lowered({"type": "integer"}, number_form="lenient")
    assert matches(expr, "1.0") and not matches(expr, "1.5") and not matches(expr, "1e3")
    _, expr4, _ = lowered({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}, number_form="lenient")
    assert matches(expr4, "1") and not matches(expr4, "1.0")


def test_canonical_numbers_have_one_spelling_per_value():
    # Issue #12: "type": "integer" accepted 16.0, -0 and "90.0000000000000000000000000".
    _, integer, _ = lowered({"type": "integer"})
    for text in ("16.0", "-0", "90.0000000000000000000000000", "007", "1e3"):
        assert not matches(integer, text), text
    assert matches(integer, "16") and matches(integer, "0") and matches(integer, "-90")
    _, number, _ = lowered({"type": "number"})
    for text in ("1.50", "-0", "-0.0", "2.0", "0.10"):
        assert not matches(number, text), text
    assert matches(number, "1.5") and matches(number, "-0.05") and matches(number, "2")
    # Every value keeps its spelling: bounds, multipleOf, enum and not see the same texts.
    values = [-3, -0.0, 0, 0.25, 1, 1.0, 1.5, 2.5, 3, 12.0, 1e-7, 1e16, 99.75]
    for schema in ({"type": "number", "minimum": 0.25, "exclusiveMaximum": 12}, {"type": "integer", "multipleOf": 3},
                   {"type": "number", "multipleOf": 0.25}, {"enum": [1, 2.5, 12]}, {"not": {"const": 1}}):
        check_against_jsonschema(schema, values)


def test_draft4_writes_an_integral_float_with_one_zero():
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#"}
    spec, number, _ = lowered({**draft4, "type": "number"})
    assert spec.serialize([1.0, 1, -0.0]) == "[1.0,1,0.0]"
    assert matches(number, "1.0") and matches(number, "1") and not matches(number, "1.00") and not matches(number, "-0.0")
    _, integer, _ = lowered({**draft4, "type": "integer"})
    assert matches(integer, "1") and not matches(integer, "1.0")
    _, listed, _ = lowered({**draft4, "enum": [2]})
    assert matches(listed, "2") and matches(listed, "2.0")  # JSON equality: 2 == 2.0


def test_one_of_is_exactly_one_and_not_is_complement():
    schema = {"oneOf": [{"type": "integer"}, {"minimum": 2}], "not": {"const": 5}}
    check_against_jsonschema(schema, [1, 2, 2.5, 3, 5, 5.0, "x", None, 1.5])


@pytest.mark.parametrize(
    "branches",
    [
        [{"type": "string"}, {"type": "integer"}],
        [{"enum": [1, "a"]}, {"const": 1.5}],
        [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"], "additionalProperties": False},
            {"$ref": "#/$defs/b"},
        ],
    ],
)
def test_disjoint_one_of_is_a_plain_union_without_depth_cuts(branches):
    b = {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}}, "required": ["kind"], "additionalProperties": False}
    schema = {"oneOf": branches, "$defs": {"b": b}}
    instances = ["s", 3, 3.5, 1, "a", 1.5, {"kind": "a", "x": 1}, {"kind": "b", "x": "y"}, {"kind": "d"}, {"x": 1}, None]
    check_against_jsonschema(schema, instances)
    _, _, notes = lowered(schema)
    assert notes == ()  # no complement taken (free values only would need a max_depth cut)


def test_overlapping_one_of_stays_exact():
    # Same discriminator value in both branches: not provably disjoint, so each minus the other.
    schema = {"oneOf": [{"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
                        {"type": "object", "properties": {"k": {"enum": [1, 2]}, "v": {"type": "string"}}, "required": ["k", "v"]}]}
    check_against_jsonschema(schema, [{"k": 1}, {"k": 1, "v": "s"}, {"k": 2, "v": "s"}, {"k": 2}, {"k": 1, "v": 3}])


def test_if_then_else_and_dependents():
    schema = {
        "type": "object",
        "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        "then": {"required": ["x"]},
        "else": {"properties": {"x": {"type": "string"}}},
        "dependentRequired": {"y": ["z"]},
        "dependentSchemas": {"w": {"properties": {"x": {"type": "integer"}}}},
    }
    instances = [
        {"kind": "a", "x": 1},
        {"kind": "a"},
        {"kind": "b", "x": 1},
        {"kind": "b", "x": "s"},
        {"y": 1},
        {"y": 1, "z": 2},
        {"w": 1, "x": "s"},
        {"w": 1, "x": 3, "kind": "a"},
    ]
    check_against_jsonschema(schema, instances)
    check_against_jsonschema(schema, instances, property_order="any")


@pytest.mark.parametrize("schema, instances", [
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {"a": {"const": 1}}},
     [{"a": 1}, {"a": 2}]),
    ({"$schema": "http://json-schema.org/draft-06/schema#", "if": {"type": "integer"}, "then": {"minimum": 5}}, [1, 7, "x"]),
    # minContains and prefixItems would loosen what draft 7 asks: [] and [1] lack a string; "a" is no integer
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "contains": {"type": "string"}, "minContains": 0},
     [[1], ["a"], []]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "prefixItems": [{"type": "string"}],
      "items": {"type": "integer"}}, [["a"], [1], [1, 2]]),
    ({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "array", "prefixItems": [{"type": "string"}]}, [[1], ["a"]]),
    ({"type": "object", "dependencies": {"a": ["b"]}, "properties": {"a": {"type": "integer"}}}, [{"a": 1}, {"a": "s"}]),
    ({"type": "object", "properties": {"a": {"$recursiveRef": "#"}}}, [{"a": 1}, {"a": {}}]),
])
def test_keywords_the_schemas_draft_does_not_define_are_annotations(schema, instances):
    check_against_jsonschema(schema, instances)
    assert lowered(schema)[2] == ()  # exact: nothing unenforced, nothing narrowed


def test_objects_required_additional_pattern_and_counts():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "boolean"}},
        "additionalProperties": {"type": "null"},
        "required": ["a"],
        "minProperties": 2,
        "maxProperties": 3,
        "propertyNames": {"maxLength": 4},
    }
    instances = [
        {"a": 1},
        {"a": 1, "b": "s"},
        {"a": 1, "x-1": True},
        {"a": 1, "x-1": 3},
        {"a": 1, "zz": None},
        {"a": 1, "zz": 0},
        {"a": 1, "b": "s", "c": None, "d": None},
        {"a": 1, "toolong": None},
        {"b": "s", "c": None},
    ]
    check_against_jsonschema(schema, instances)
    check_against_jsonschema(schema, instances, property_order="any")


def test_declared_order_is_enforced_and_any_order_is_not():
    schema = {"type": "object", "properties": {"a": {}, "b": {}}}
    _, declared, _ = lowered(schema)
    _, anyorder, _ = lowered(schema, property_order="any")
    assert matches(declared, '{"a":1,"b":2}') and not matches(declared, '{"b":2,"a":1}')
    assert matches(anyorder, '{"a":1,"b":2}') and matches(anyorder, '{"b":2,"a":1}')
    assert not matches(anyorder, '{"a":1,"a":2}') and not matches(declared, '{"a":1,"a":2}')
    assert list(order_instance(JsonSchema(schema), {"z": 0, "b": 1, "a": 2})) == ["a", "b", "z"]
    # Members the object's schema does not mention may come anywhere, once each mentioned one.
    assert matches(declared, '{"z":0,"a":1,"y":0,"b":2,"x":0}') and not matches(declared, '{"z":0,"b":1,"a":2}')
    required = lowered({"properties": {"a": {}, "b": {"type": "integer"}}, "required": ["b"]})[1]
    assert matches(required, '{"x":0,"b":2}') and not matches(required, '{"a":0,"x":1}')
    assert not matches(required, '{"b":"s"}') and not matches(required, '{"b":1,"b":2}')
    # A $ref may point outside the keywords (here into a vendor member); its names rank too.
    odd = {"x-types": {"pod": {"properties": {"kind": {}, "apiVersion": {}}}}, "properties": {"spec": {"$ref": "#/x-types/pod"}}}
    assert property_ranking(odd) == {"spec": 0, "kind": 1, "apiVersion": 2}
    assert matches(lowered(odd)[1], '{"spec":{"kind":1,"apiVersion":2}}')
    # An object's own keywords rank before its subschemas' (pre-order over schema objects).
    ranking = property_ranking({"properties": {"b": {}, "a": {"properties": {"c": {}}}}, "required": ["d"]})
    assert ranking == {"b": 0, "a": 1, "d": 2, "c": 3}


def test_arrays_prefix_items_contains_and_unique_enum_items():
    schema = {
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "items": {"type": "integer"},
        "contains": {"minimum": 5},
        "minContains": 1,
        "maxContains": 2,
        "maxItems": 4,
    }
    instances = [["s"], ["s", 5], ["s", 5, 6], ["s", 5, 6, 7], [5], ["s", 1, 2], ["s", 1, 9, 2], [], ["s", 5, 6, 1, 2]]
    check_against_jsonschema(schema, instances)
    unique = {"type": "array", "items": {"enum": ["a", "b", 1]}, "uniqueItems": True}
    check_against_jsonschema(unique, [["a", "b"], ["a", "a"], [1, 1.0], [1, "a", "b"], []])


def test_enum_and_const_use_json_equality():
    schema = {"enum": [1, "x", {"k": [True, None]}, [1, 2]]}
    check_against_jsonschema(schema, [1, 1.0, 2, "x", {"k": [True, None]}, {"k": [True]}, [1, 2], [1.0, 2], True])
    check_against_jsonschema(
        {"const": {"a": 1, "b": 2}}, [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1}], property_order="any"
    )
    _, expr, _ = lowered({"const": {"a": 1, "b": 2}}, property_order="any")
    assert matches(expr, '{"b":2,"a":1}') and not matches(expr, '{"a":1,"a":1}')


def test_refs_defs_anchors_and_recursion_at_any_depth():
    schema = {
        "$defs": {"node": {"$anchor": "n", "type": "object", "properties": {"next": {"$ref": "#n"}, "v": {"type": "integer"}}}},
        "$ref": "#/$defs/node",
    }
    spec, expr, narrowed = lowered(schema, max_depth=3)
    assert matches(expr, '{"next":{"v":2},"v":1}')  # declared order: "next" ranks first
    assert not matches(expr, '{"next":{"v":"x"},"v":1}')
    deep = '{"next":' * 40 + "{}" + "}" * 40
    assert matches(expr, deep) and not matches(expr, deep + "}")  # recursion is a call: no depth cut
    assert narrowed == ()


@pytest.mark.parametrize("max_depth", [2, 3, 4])
def test_a_complement_over_a_cycle_of_two_schemas_is_exact_to_max_depth(max_depth):
    """Under ``not``, recursion is unrolled (no calls), and a cycle through two schemas re-enters
    both at each level. The budget counts levels, so every value nested up to ``max_depth`` is
    decided as jsonschema decides it: had each re-entry spent a unit, the inner schema would be cut
    at half the depth, and its complement would accept values the schema forbids."""
    schema = {
        "$defs": {
            "P": {"properties": {"x": {"$ref": "#/$defs/Q"}}, "additionalProperties": False},
            "Q": {"type": "object", "allOf": [{"$ref": "#/$defs/P"}]},
        },
        "not": {"$ref": "#/$defs/Q"},
    }
    chains, other = [{}], [{"y": 1}]
    for _ in range(max_depth - 1):
        chains.append({"x": chains[-1]})
        other.append({"x": other[-1]})
    check_against_jsonschema(schema, chains + other + [1, "x", [{}]], max_depth=max_depth)
    spec, expr, _ = lowered(schema, max_depth=max_depth)
    deeper = {"x": chains[-1]}  # beyond max_depth: rejected, valid or not
    assert not matches(expr, spec.serialize(deeper)) and not matches(expr, spec.serialize({"x": other[-1]}))


@pytest.mark.parametrize("applicator", ["anyOf", "oneOf"])
def test_recursion_through_a_member_condition_is_a_call(applicator):
    """A recursive ``$ref`` that a branch puts on a member (``{"type": "string"}`` or an object
    whose ``c`` is again the schema) is one of the member conditions the object's slot chain
    tracks. Each combination of conditions is one schema, so the recursion meets its own rule: it
    used to build a new combined schema at every level, and recursed until Python's limit."""
    tree = {applicator: [{"type": "string"}, {"type": "object", "properties": {"c": {"$ref": "#/$defs/t"}}, "required": ["c"]}]}
    schema = {"$defs": {"t": tree}, "$ref": "#/$defs/t"}
    deep = "x"
    for _ in range(40):
        deep = {"c": deep}
    check_against_jsonschema(schema, ["a", {"c": "a"}, {"c": {"c": "b"}}, {"c": 1}, {"c": {"c": {}}}, {}, {"d": "a"}, deep, {"c": deep}, 3])
    spec, expr, narrowed = lowered(schema)
    assert matches(expr, spec.serialize(deep)) and not matches(expr, spec.serialize(deep)[:-1])
    assert narrowed == ()


def test_a_recursive_member_condition_is_exact_where_both_branches_nest():
    """Github_easy/o78062's shape (its oneOf overlaps on objects: member conditions). Where a
    member's only condition is its value schema, the inlined complement of the other branch
    re-enters that schema, which is being lowered further up with calls: charged as recursion,
    it cut the complement a level early, inside the universe that bounds it, and accepted an
    object two levels down that satisfies both branches."""
    items = lambda ref: {"type": "array", "items": {"$ref": ref}}  # noqa: E731
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {
        "competency": {"type": "object", "oneOf": [
            {"properties": {"competencies": items("#/definitions/competency")}, "required": ["competencies"]},
            {"properties": {"abilities": items("#/definitions/ability")}, "required": ["abilities"]},
        ]},
        "ability": {"type": "object"},
    }, "allOf": [{"$ref": "#/definitions/competency"}]}
    both = {"abilities": [{}], "competencies": [{"abilities": [{}]}]}
    instances = [{"competencies": [{"competencies": [{"abilities": [{}]}, both]}]}, {"competencies": [{"competencies": [{"abilities": [{}]}]}]},
                 {"competencies": [both]}, both, {"abilities": []}, {"competencies": [{"abilities": [{}]}, {"competencies": []}]}]
    check_against_jsonschema(schema, instances)


@pytest.mark.parametrize("shape", ["two recursive schemas", "inheritance"])
def test_recursion_through_merged_members_is_a_call(shape):
    """``allOf`` of object schemas merges them member by member (:mod:`merge`): each pair of
    member schemas is one schema object, so recursion through a merged member meets its rule.
    A new ``allOf`` per merge made every level a new schema: ten seconds to the compile cap for
    the first shape. The second checks that a pair of schemas that constrain nothing stays
    ``true`` (an ``{"allOf": [true]}`` would nest one level deeper at each merge)."""
    ref = lambda name: {"$ref": f"#/$defs/{name}"}  # noqa: E731
    if shape == "two recursive schemas":
        defs = {"a": {"type": "object", "properties": {"x": ref("a")}}, "b": {"type": "object", "properties": {"x": ref("b"), "y": {"type": "integer"}}}}
        schema, grow, wrong = {"$defs": defs, "allOf": [ref("a"), ref("b")]}, (lambda x: {"x": x, "y": 1}), {"x": {"x": {"y": "s"}}}
    else:
        defs = {"base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                "n": {"allOf": [ref("base"), {"properties": {"kids": {"type": "array", "items": ref("n")}}}]}}
        schema, grow, wrong = {"$defs": defs, "$ref": "#/$defs/n"}, (lambda x: {"id": "a", "kids": [x]}), {"id": "a", "kids": [{"kids": []}]}
    deep = {"id": "z"}
    for _ in range(40):
        deep = grow(deep)
    check_against_jsonschema(schema, [deep, wrong, grow({}), grow(grow({"id": "q"})), 1])
    spec, expr, notes = lowered(schema)
    assert notes == () and matches(expr, spec.serialize(deep))


def test_free_values_nest_at_any_depth():
    spec, expr, narrowed = lowered({"type": "object", "properties": {"a": {}}})
    assert matches(expr, '{"a":' + "[" * 50 + '{"b":null}' + "]" * 50 + "}")
    assert not matches(expr, '{"a":' + "[" * 50 + "]" * 49 + "}")
    assert narrowed == ()


@pytest.mark.parametrize("first", ["lenient", "canonical", "draft4"])
def test_free_values_spell_numbers_as_their_own_grammar_says(first):
    """The any-value rule is shared by the grammars of one text policy, and the number form and the
    draft are part of it: whichever grammar of the process built it first, a canonical grammar's
    free values never take ``16.0`` or ``-0``, a lenient one's always do, and only draft 4 writes
    an integral float as ``1.0``."""
    schema = {"type": "object", "properties": {"a": {}}}
    options = {"lenient": {"number_form": "lenient"}, "canonical": {}, "draft4": {}}
    draft4 = {**schema, "$schema": "http://json-schema.org/draft-04/schema#"}
    order = [first] + [name for name in options if name != first]
    built = {name: lowered(draft4 if name == "draft4" else schema, **options[name])[1] for name in order}
    for text, allowed in [('{"a":[16.0]}', {"lenient", "draft4"}), ('{"a":{"b":-0}}', {"lenient"}), ('{"a":16}', set(options))]:
        assert {name for name, expr in built.items() if matches(expr, text)} == allowed, text


def test_flexible_whitespace_is_bounded():
    spec, expr, _ = lowered({"type": "object", "properties": {"a": {"type": "array"}}}, whitespace="flexible", max_whitespace=2)
    assert matches(expr, '{ "a" : [ 1 , 2 ] }')
    assert matches(expr, '{\n  "a": []\n}') is False  # three whitespace characters in a row
    assert matches(expr, '{\n "a": [\n]}')
    assert matches(expr, spec.serialize({"a": [1, {"b": 2}]}))


def test_formats_are_asserted_unless_disabled():
    spec = JsonSchema({"type": "string", "format": "date"})
    expr, _, _ = lower_json_schema(spec)
    assert matches(expr, '"2024-02-29"') and not matches(expr, '"2023-02-29"')
    lax, _, _ = lower_json_schema(spec, assert_formats=False)
    assert matches(lax, '"2023-02-29"')
    _, unknown, _ = lower_json_schema(JsonSchema({"format": "color"}))
    assert [u.keyword for u in unknown if u.keyword == "format"] == ["format"]


def test_hostname_rejects_a_final_dot_and_every_a_label_and_says_so():
    spec = JsonSchema({"type": "string", "format": "hostname"})
    expr, unenforced, narrowed = lower_json_schema(spec)
    assert matches(expr, '"www.example.com"') and matches(expr, '"a--b.com"')
    for text in ("example.", "xn--X", "xn--hello-txk", "xn--9n2bp8q.xn--9t4b11yi5a"):
        assert not matches(expr, json.dumps(text)), text
    assert unenforced == () and [(u.keyword, u.path) for u in narrowed] == [("format", "/format")]


def test_unique_items_over_open_domain_is_reported():
    _, expr, unenforced = lowered({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    assert "uniqueItems" in [u.keyword for u in unenforced]
    assert matches(expr, '["a","b"]')


def test_unenforced_unique_items_keeps_its_items_calls():
    """``uniqueItems`` over objects is not enforced: the array keeps calling its item rule, so
    items nest at any depth (it used to intersect with the universe, which inlined them to
    ``max_depth`` and listed that cut)."""
    node = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}, "uniqueItems": True}}}
    spec, expr, notes = lowered(node)
    assert [(n.keyword, n.path) for n in notes] == [("uniqueItems", "/properties/kids")]
    deep = {}
    for _ in range(40):
        deep = {"kids": [deep, {}]}
    assert matches(expr, spec.serialize(deep)) and not matches(expr, spec.serialize({"kids": [{"kids": 1}]}))


@pytest.mark.parametrize(
    "bounds", [{}, {"minItems": 2}, {"maxItems": 1}, {"minItems": 1, "maxItems": 3}, {"minItems": 4}, {"maxItems": 0}, {"minItems": 3, "maxItems": 2}]
)
@pytest.mark.parametrize("prefix", [0, 1, 2])
def test_prefix_items_with_item_counts_match_jsonschema(bounds, prefix):
    """Counts are built into the chain of items (no intersection), exact for every length, and
    object items keep their calls (nothing narrowed)."""
    item = {"type": "object", "properties": {"v": {"type": "integer"}}}
    schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}][:prefix], "items": item, **bounds}
    arrays = [["s", True, {"v": 1}, {}, {"v": 2}][:n] for n in range(6)]
    wrong = [[1], ["s", 1], ["s", True, 1], [{"v": "x"}]]
    check_against_jsonschema(schema, arrays + wrong)
    assert lowered(schema)[2] == ()
    if prefix:  # strict: no item past a prefix
        closed = {k: v for k, v in schema.items() if k != "items"}
        check_against_jsonschema(closed, [["s", True][:n] for n in range(prefix + 1)], strict=True)
        spec, expr, _ = lowered(closed, strict=True)
        assert not matches(expr, spec.serialize(["s", True, {}][: prefix + 1]))


@pytest.mark.parametrize(
    "bounds", [{"minProperties": 1}, {"maxProperties": 2}, {"minProperties": 2, "maxProperties": 3}, {"maxProperties": 0},
               {"minProperties": 3, "maxProperties": 2}, {"minProperties": 1, "maxProperties": 1}]
)
@pytest.mark.parametrize("closed", [False, True])
def test_member_counts_in_the_chain_match_jsonschema_and_keep_recursion_a_call(bounds, closed):
    """``minProperties`` / ``maxProperties`` are carried along the object's chain of members (no
    intersection with a counted list, which inlined every value to ``max_depth``): exact for
    every count, and a recursive member stays a call."""
    schema = {"type": "object", "properties": {"c": {"$ref": "#"}, "d": {"type": "integer"}}, **bounds}
    if closed:
        schema["additionalProperties"] = False
    objects = [{}, {"c": {}}, {"d": 1}, {"c": {}, "d": 1}, {"x": 1}, {"x": 1, "y": 2}, {"c": {"x": 1}, "d": 2, "e": 3},
               {"d": 1, "x": 2, "y": 3}, {"c": {"c": {}, "d": 1, "x": 1}}, {"c": {"d": 1}}, {"d": "s"}, {"c": 1}]
    check_against_jsonschema(schema, objects)
    spec, expr, narrowed = lowered(schema)
    assert "max_depth" not in [n.keyword for n in narrowed]
    deep = {"d": 1, **({} if closed else {"x": 2})}
    for _ in range(40):
        deep = {"c": deep, "d": 1}
    valid = jsonschema.Draft202012Validator(schema).is_valid(deep)
    assert matches(expr, spec.serialize(deep)) == valid


def test_errors_name_keyword_and_place():
    with pytest.raises(UnsupportedFeatureError, match="remote reference"):
        lower_json_schema(JsonSchema({"properties": {"a": {"$ref": "https://example.com/x.json"}}}))
    with pytest.raises(InvalidSchemaError, match="points at nothing"):
        lower_json_schema(JsonSchema({"$ref": "#/$defs/missing"}))
    with pytest.raises(UnsupportedFeatureError, match="'multipleOf' at '/multipleOf'"):
        lower_json_schema(JsonSchema({"multipleOf": 0.123456789}))
    with pytest.raises(CompileLimitError, match="max_repeat"):
        lower_json_schema(JsonSchema({"type": "string", "minLength": 10**6}))
    with pytest.raises(UnsupportedFeatureError, match="reference cycle"):
        lower_json_schema(JsonSchema({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}))


def test_long_bounds_are_exact_and_huge_ones_reported():
    _, expr, unenforced = lowered({"type": "string", "minLength": 90, "maxLength": 1200})
    assert not unenforced
    assert matches(expr, '"' + "é" * 1200 + '"') and not matches(expr, '"' + "é" * 1201 + '"')
    assert matches(expr, '"' + "\\n" * 90 + '"') and not matches(expr, '"' + "x" * 89 + '"')
    _, expr, unenforced = lowered({"type": "array", "maxItems": 2**31 - 1})
    assert "maxItems" in [u.keyword for u in unenforced]


@pytest.mark.parametrize("lo, hi", [(0, 65), (3, 130), (0, 700), (80, 80), (100, 1000), (4097, None)])
def test_bounded_repeat_counts_exactly(lo, hi):
    from grammask.grammars.fsm import expr as E
    from grammask.grammars.fsm.json_text import bounded_repeat

    run = bounded_repeat(E.literal("ab"), lo, hi)
    top = lo + 70 if hi is None else hi
    for n in sorted({0, 1, lo - 1, lo, lo + 1, (lo + top) // 2, top - 1, top, top + 1} - {-1}):
        assert matches(run, "ab" * n) == (lo <= n and (hi is None or n <= hi)), n
    assert not matches(run, "ab" * lo + "a")


def test_strict_forbids_unlisted_properties_and_items():
    _, expr, _ = lowered({"type": "object", "properties": {"a": {}}}, strict=True)
    assert matches(expr, '{"a":1}') and not matches(expr, '{"a":1,"b":2}')
    _, expr, _ = lowered({"type": "array", "prefixItems": [{}]}, strict=True)
    assert matches(expr, "[1]") and not matches(expr, "[1,2]")


def test_unevaluated_properties_and_items_through_all_of_and_ref():
    schema = {
        "$defs": {"b": {"properties": {"b": {"type": "integer"}}}},
        "allOf": [{"properties": {"a": {"type": "string"}}}, {"$ref": "#/$defs/b"}],
        "properties": {"c": {}},
        "unevaluatedProperties": False,
    }
    check_against_jsonschema(schema, [{"a": "x"}, {"a": "x", "b": 1}, {"b": "s"}, {"c": 1, "d": 2}, {"d": 2}, {}], property_order="any")
    items = {"prefixItems": [{"type": "string"}], "allOf": [{"prefixItems": [True, {"type": "integer"}]}], "unevaluatedItems": {"type": "null"}}
    check_against_jsonschema(items, [["a"], ["a", 1], ["a", 1, None], ["a", 1, 2], ["a", "b"], []])
    with pytest.raises(UnsupportedFeatureError, match="next to 'anyOf'"):
        lower_json_schema(JsonSchema({"anyOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False}))


def test_one_of_disjointness_follows_refs_and_the_enclosing_type():
    # The inner oneOf's branches carry no "type"; the enclosing schema's "object" makes the
    # discriminators ("kind" literals, or a literal the other branch's property schema rejects) decisive.
    schema = {
        "$defs": {
            "a": {"required": ["kind"], "properties": {"kind": {"const": "a"}}},
            "b": {"required": ["tags"], "properties": {"tags": {"const": ["deleted"]}, "kind": {"const": "b"}}},
            "c": {"required": ["kind"], "properties": {"kind": {"enum": ["c"]}, "tags": {"type": "array", "items": {"enum": ["x"]}}}},
        },
        "type": "object",
        "oneOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}, {"$ref": "#/$defs/c"}],
        "additionalProperties": {"type": ["string", "array"], "items": {"type": "string"}},
    }
    instances = [{"kind": "a"}, {"tags": ["deleted"]}, {"kind": "c", "tags": ["x"]}, {"kind": "a", "tags": ["deleted"]},
                 {"kind": "c", "tags": ["deleted"]}, {"kind": "b"}, {"kind": "b", "tags": ["deleted"]}, {}, 3]
    check_against_jsonschema(schema, instances)
    resolver = Resolver(schema)
    prover = DisjointnessProver(schema, resolver)
    assert prover.disjoint(schema["oneOf"], resolver.root_base, {"object"})  # lowered as a union
    assert not prover.disjoint(schema["oneOf"], resolver.root_base, {"object", "string"})  # "x" fits all three


def test_one_of_disjointness_reads_member_counts_forbidden_members_and_nested_branches():
    tagged = {"type": "object", "oneOf": [
        {"required": ["type", "url"], "properties": {"type": {"enum": ["vcs", "git"]}, "url": {"type": "string"}}},
        {"required": ["type"], "properties": {"type": {"const": "path"}}},
    ]}
    schemas = [
        # a tag every branch of a nested oneOf carries, against another branch's additionalProperties
        [{"$ref": "#/$defs/tagged"}, {"type": "object", "additionalProperties": {"enum": [False]}, "maxProperties": 1}],
        # two required members against at most one
        [{"type": "object", "required": ["a", "b"]}, {"type": "object", "maxProperties": 1}],
        # a required member the other branch forbids
        [{"type": "object", "required": ["a"]}, {"type": "object", "properties": {"b": {}}, "additionalProperties": False}],
        # a required member whose value types the other branch's schema for it rejects
        [{"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
         {"type": "object", "properties": {"a": {"type": ["string", "null"]}}}],
    ]
    instances = [{"type": "git", "url": "u"}, {"type": "path"}, {"x": False}, {"type": False}, {"a": 1, "b": 2},
                 {"a": 1}, {"b": 1}, {"b": 1, "a": 2}, {}, {"type": "svn", "url": "u"}, {"a": "s"}, {"a": None}, {"a": 1.5}]
    for branches in schemas:
        schema = {"$defs": {"tagged": tagged}, "oneOf": branches}
        resolver = Resolver(schema)
        assert DisjointnessProver(schema, resolver).disjoint(branches, resolver.root_base, {"object"}), branches
        check_against_jsonschema(schema, instances)


def _font_resource(scale_pattern: str, needs: dict) -> dict:
    """A resource that is a font definition (an object with a size, or a string) or a selector of
    resources (by platform, or by scale), both ``oneOf`` (as Github_easy/o37787 has them)."""
    return {
        "$defs": {
            "definition": {"oneOf": [
                {"type": "object", "additionalProperties": False, **needs,
                 "properties": {"size": {"type": ["number", "string"]}, "style": {"enum": ["italic", "normal"]}}},
                {"type": "string", "pattern": "^[1-9][0-9]*px$"},
            ]},
            "selector": {"oneOf": [
                {"type": "object", "required": ["ios"], "properties": {"ios": {"$ref": "#/$defs/resource"}}, "additionalProperties": False},
                {"type": "object", "patternProperties": {scale_pattern: {"$ref": "#/$defs/resource"}}, "additionalProperties": False,
                 "minProperties": 1},
            ]},
            "resource": {"oneOf": [{"$ref": "#/$defs/definition"}, {"$ref": "#/$defs/selector"}]},
        },
        "$ref": "#/$defs/resource",
    }


@pytest.mark.parametrize("needs", [{"required": ["size"]}, {"minProperties": 1}])
@pytest.mark.parametrize("scale_pattern, disjoint", [
    ("^[0-9]x$", True),  # "size", "style" and "ios" are no scales: every pair of alternatives is apart
    ("^s", False),  # {"size": "12px"} is a definition and a scale selector (of the resource "12px")
])
def test_one_of_disjointness_splits_nested_branches_and_reads_pattern_properties(scale_pattern, disjoint, needs):
    """Branches that are themselves ``oneOf`` are disjoint when each alternative of one is
    disjoint from each of the other (their shared facts alone show nothing); a name no pattern
    of a closed object matches is one that object forbids, and an object that needs a member
    meets none of an object whose every name it forbids. Proved, the recursion needs no depth
    cut; jsonschema judges both ways."""
    schema = _font_resource(scale_pattern, needs)
    resolver = Resolver(schema)
    prover = DisjointnessProver(schema, resolver)
    defs = schema["$defs"]
    assert prover.disjoint(defs["resource"]["oneOf"], resolver.root_base, set(BASIC_TYPES)) is disjoint
    assert prover.disjoint(defs["selector"]["oneOf"], resolver.root_base, set(BASIC_TYPES))  # "ios" is no scale
    deep: object = {"size": 3}
    for level in range(8):  # twice the default max_depth
        deep = {"ios": deep} if level % 2 else {"2x": deep}
    instances = [
        deep, {"size": 3}, {"size": "12px"}, {"size": 3, "style": "normal"}, {"style": "normal"}, "12px", {"ios": "12px"},
        {"3x": {"size": 1}, "4x": "2px"}, {"ios": {"size": 1}, "3x": "2px"}, {"size": None}, {}, {"ios": "px"},
        {"2x": {"s": 1}}, {"s": {"size": 1}}, {"sx": "2px"}, "3",
    ]
    check_against_jsonschema(schema, instances)
    if disjoint:
        assert lowered(schema)[2] == ()  # a union all the way down: nothing cut at max_depth


_RPC_COMMON = {"required": ["jsonrpc", "id"], "properties": {"jsonrpc": {"const": "2.0"}},
               "not": {"description": "never both", "required": ["result", "error"]}}


@pytest.mark.parametrize("branches, disjoint, draft", [
    # JSON-RPC 2.0 responses: a result or an error, which a shared "not: {required}" keeps apart
    ([{"allOf": [{"$ref": "#/$defs/common"}], "required": ["result"]},
      {"allOf": [{"$ref": "#/$defs/common"}], "required": ["error"], "properties": {"error": {"type": "object"}}}], True, None),
    ([{"required": ["jsonrpc", "result"]}, {"required": ["jsonrpc", "error"]}], False, None),  # both may come
    # array lengths that do not meet, and first items of different types
    ([{"type": "array", "maxItems": 0}, {"type": "array", "minItems": 1}], True, None),
    ([{"type": "array", "minItems": 1, "items": {"type": "string"}},
      {"type": "array", "minItems": 2, "items": {"type": "object", "additionalProperties": {"$ref": "#/$defs/tree"}}}], True, None),
    ([{"type": "array", "minItems": 1, "items": [{"type": "string"}]}, {"type": "array", "minItems": 1, "items": {"type": "object"}}],
     True, "http://json-schema.org/draft-07/schema#"),  # a tuple's first item
    ([{"type": "array", "items": {"type": "string"}}, {"type": "array", "minItems": 1, "items": {"type": "object"}}], False, None),  # []
    ([{"type": "array", "minItems": 1, "prefixItems": [{"type": "string"}]}, {"type": "array", "minItems": 1, "items": {"type": "string"}}],
     False, None),
])
def test_one_of_disjointness_reads_names_that_never_come_together_and_array_shapes(branches, disjoint, draft):
    """A proof is a plain union (free and recursive values keep no depth cut); no proof keeps the
    exact "one and only one" (an instance of two branches is refused), jsonschema the judge."""
    schema = {"$defs": {"common": _RPC_COMMON, "tree": {"type": "object", "additionalProperties": {"$ref": "#/$defs/tree"}}},
              "oneOf": branches, **({"$schema": draft} if draft else {})}
    resolver = Resolver(schema)
    assert DisjointnessProver(schema, resolver).disjoint(branches, resolver.root_base, {"object", "array"}) is disjoint
    deep: dict = {}
    for _ in range(8):
        deep = {"a": deep}
    instances = [
        {"jsonrpc": "2.0", "id": 1, "result": deep}, {"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "data": deep}},
        {"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, {"jsonrpc": "2.0", "result": 1}, {"jsonrpc": "1.0", "id": 1, "result": 1},
        [], ["a"], ["a", "b"], [{}], [{}, deep], [{"a": 1}, {}], ["a", {}], [1], [{}, "a"],
    ]
    check_against_jsonschema(schema, instances)
    if disjoint:
        assert lowered(schema)[2] == ()  # no complement, so nothing is cut at max_depth


@pytest.mark.parametrize("one_of", [
    [{"pattern": "^A"}, {"pattern": "B$"}],  # typeless: both accept every value of another type
    [{"format": "date"}, {"pattern": "^2"}],  # a format constrains strings only (Snowplow/sp_209: uuid or a $name)
    [{"minimum": 3}, {"maximum": 5}, {"minLength": 2}, {"maxLength": 3}],
    [{"type": "number", "minimum": 3}, {"type": "integer", "maximum": 5}, {"type": "object", "properties": {"c": {"$ref": "#"}}}],
    [{"type": ["string", "null"]}, {"type": "string", "maxLength": 2}, {"enum": [1, "a"]}, {"$ref": "#/$defs/node"}],
    [{"type": "string"}, {"type": "object", "required": ["d"], "properties": {"d": {"type": "integer"}}},
     {"type": "object", "properties": {"c": {"$ref": "#"}, "d": {"type": "string"}}}],
])
def test_one_of_taken_type_by_type_keeps_recursion_a_call(one_of):
    """An ``oneOf`` whose branches overlap only on scalar types, or on types two branches accept
    whole, needs no complement of a value with calls: taken type by type it is exact, and a
    recursive branch stays a call (it was inlined and cut at ``max_depth``)."""
    node = {"type": "object", "properties": {"c": {"$ref": "#"}}}
    schema = {"$defs": {"node": node}, "oneOf": one_of}
    values = [None, True, 0, 3, 4, 5, 6, 2.5, "", "A", "AB", "B", "xB", "abcd", "a", "2020-01-01", "2020-13-01", "1999-01-01",
              [], ["a"], {}, {"c": 1}, {"c": {}},
              {"c": {"c": 1}}, {"c": "s"}, {"c": {"c": "AB"}}, {"d": 1}, {"d": "s"}, {"c": {}, "d": 1}, {"c": {"d": 2}}]
    check_against_jsonschema(schema, values)
    spec, expr, narrowed = lowered(schema)
    assert narrowed == ()
    deep: object = {}
    for _ in range(10):  # past max_depth; the last shape keeps two views a level (2^depth stacks)
        deep = {"c": deep}
    assert matches(expr, spec.serialize(deep)) == jsonschema.Draft202012Validator(schema).is_valid(deep)


@pytest.mark.parametrize("schema", [
    {"allOf": [{"$ref": "#/$defs/count"}, {"default": 0}]},  # the draft-06 meta-schema's nonNegativeIntegerDefault0
    {"allOf": [{"$ref": "#/$defs/text"}, {"maxLength": 1, "pattern": "^[A-Z]?$"}]},  # Github_hard/o12409
    {"anyOf": [{"type": "string"}, {"type": "integer"}], "allOf": [{"minLength": 2}, {"not": {"minimum": 5}}]},
    {"allOf": [{"$ref": "#/$defs/list"}, {"description": "an annotation"}]},  # buildOptions/embed (JsonSchemaStore)
    {"allOf": [{"$ref": "#/$defs/event"}], "not": {"type": "array", "items": {"$ref": "#/$defs/event"}}},  # grunt-watch-task
])
def test_in_place_parts_without_a_type_part_meet_type_by_type(schema):
    """A schema of in-place keywords only has no type part; where one part's values are scalars
    of one kind and another's (typeless, or an annotation) hold free containers, the two used to
    be intersected whole and the value inlined to ``max_depth``. Type by type, a type one part
    has no value of is ∅ and a part that holds every value of a type is left out; an
    annotation-only ``allOf`` branch is left out, and a branch's plain reference bounds the
    types the other parts are lowered for."""
    defs = {"count": {"type": "integer", "minimum": 0}, "text": {"type": "string"},
            "event": {"type": "string", "enum": ["a", "AB"]},
            "list": {"type": ["string", "array", "object"], "items": {"type": "string"}, "properties": {"k": {"type": ["string", "array"]}}}}
    tree = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": schema}, "$defs": defs}
    values = [0, 1, 7, -1, 2.5, "", "A", "ab", "a", "AB", None, True, [], [1], ["a", "b"], [["a"]], {}, {"k": "s"}, {"k": 1},
              {"k": {"k": {"k": {"k": 1}}}}]
    check_against_jsonschema({**schema, "$defs": defs}, values)
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "c", {"t": v}) for v in values[:6]])
    assert lowered(tree)[2] == ()


@pytest.mark.parametrize("schema", [
    {"allOf": [True], "not": {"anyOf": [{"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}]}},
    {"type": "array", "items": {"$ref": "#"}, "not": {"maxItems": 0}},  # a nonempty list of trees
    {"not": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}},
    {"not": {"$ref": "#/$defs/pair"}, "type": ["array", "string"]},
    {"not": {"items": False}},
    {"not": {"items": {"not": {"type": "integer"}}, "minItems": 1}},
])
def test_not_of_an_array_schema_keeps_calls(schema):
    """``not`` of a schema that constrains arrays by ``items`` and counts only is taken by the
    arrays' structure: a count out of bounds, or an item the items schema rejects after items
    it accepts. Items stay calls, so deep values are exact (the value used to be inlined to
    ``max_depth``); the complement of the items schema is lowered the same way."""
    defs = {"pair": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}}
    tree = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": schema}, "$defs": defs}
    values = [None, 1, 2.5, "s", {}, {"k": [1]}, [], [1], [1, 2], [1, "a"], ["a", 2], [1, 2, 3], [[]], [["a"]], [["a"], [1]],
              [["a"], "b"], [[["a"]]], [None], [[], [[]]], _nested(9, "k", [1])]
    check_against_jsonschema({**schema, "$defs": defs}, values)
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "c", {"t": v}) for v in values[5:12]])
    assert lowered(tree)[2] == ()


def test_one_of_with_tagged_branches_beside_an_overlapping_one_stays_within_the_merge_cap():
    """Two branches tagged by a required ``kind`` and a third whose ``kind`` overlaps the first:
    the prover cannot separate the three. A tagged branch fails the other tagged one surely (the
    required tags are disjoint), so no merge is made for that pair; without that, one failure
    per optional member of each branch multiplied past ``MAX_MERGED_VIEWS`` and the value was
    inlined (cut at ``max_depth``)."""
    def tagged(tag, prefix):
        properties = {f"{prefix}{i}": {"type": "integer"} for i in range(7)}
        return {"type": "object", "required": ["kind"], "properties": {"kind": {"const": tag}, "tree": {"$ref": "#/$defs/node"}, **properties}}
    overlapping = {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": ["a", "c"]}, "p0": {"type": "string"}}}
    node = {"type": "object", "properties": {"c": {"$ref": "#/$defs/node"}}}
    schema = {"type": "object", "properties": {"k": {"$ref": "#"}, "t": {"oneOf": [tagged("a", "p"), tagged("b", "q"), overlapping]}},
              "$defs": {"node": node}}
    values = [{}, {"kind": "a"}, {"kind": "a", "p0": 1}, {"kind": "a", "p0": "s"}, {"kind": "a", "p1": "s", "p0": "s"}, {"kind": "b"},
              {"kind": "b", "q3": 1}, {"kind": "b", "q3": "x"}, {"kind": "c"}, {"kind": "c", "p0": 1}, {"kind": "d"},
              {"kind": "a", "tree": _nested(9)}, {"kind": "b", "tree": _nested(9)}, {"kind": "a", "p0": "s", "tree": _nested(9)}]
    check_against_jsonschema(schema, [{"t": v} for v in values] + [_nested(9, "k", {"t": v}) for v in values[:6]])
    assert lowered(schema)[2] == ()


def test_one_of_of_four_open_objects_is_merged_whole():
    """Four open object branches, each with its own required name and two members: an object
    may satisfy any number of them, and each branch merged with one way to fail each other one
    is 108 object schemas (past the 64 that distributing applicators may make, under
    ``MAX_EXCLUSIVE_VIEWS`` and ``MAX_EXCLUSIVE_MEMBERS``). Exact, and a recursive member is
    not cut (inlined, its fills took seconds)."""
    node = {"type": "object", "properties": {"c": {"$ref": "#/$defs/node"}}}
    branches = [{"type": "object", "required": [f"r{i}"], "properties": {f"p{i}": {"type": "integer"}, f"q{i}": {"type": "string"},
                                                                      "tree": {"$ref": "#/$defs/node"}}} for i in range(4)]
    schema = {"type": "object", "properties": {"k": {"$ref": "#"}, "t": {"oneOf": branches}}, "$defs": {"node": node}}
    values = [{}, {"r0": 1}, {"r0": 1, "r1": 2}, {"r0": 1, "p1": 1}, {"r0": 1, "r1": 2, "p1": "s"}, {"r0": 1, "r1": 2, "q0": 1},
              {"r3": 1, "p3": 2, "q3": "s"}, {"r3": 1, "p3": "x"}, {"r2": 1, "r3": 2, "p2": 1, "q3": 2}, {"r1": 1, "tree": _nested(9)},
              {"r0": 1, "r1": 1, "r2": 1, "r3": 1}, {"r0": 1, "r1": 1, "r2": 1, "r3": 1, "p0": "a", "p1": "b", "p2": "c"}]
    check_against_jsonschema(schema, [{"t": v} for v in values] + [_nested(9, "k", {"t": v}) for v in values[:4]])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("schema", [
    # a locale map that must not name "ios" (JsonSchemaStore's colorSelector / fontSelector)
    {"type": "object", "patternProperties": {"^[a-z]{2,3}$": {"$ref": "#"}}, "additionalProperties": False, "minProperties": 1,
     "not": {"required": ["ios"]}},
    {"type": ["string", "object"], "not": {"required": ["c"]}},
    {"type": "string", "not": {"required": ["c"]}},
    {"not": {"required": ["a", "b"]}, "properties": {"a": {"type": "integer"}}},
    # build or image, and a dockerfile only with a build (a docker-compose service)
    {"anyOf": [{"not": {"required": ["image"]}, "required": ["build"]},
               {"not": {"anyOf": [{"required": ["build"]}, {"required": ["dockerfile"]}]}, "required": ["image"]}]},
])
def test_not_of_required_names_is_their_absence(schema):
    """``not {"required": [n]}`` is folded into the schema as ``properties: {n: false}`` (and
    the object type, since other values satisfy ``required``); several names are one such branch
    each. No complement is taken, so a recursive value beside it stays a call."""
    tree = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": schema}}
    values = [None, 1, "s", {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}, {"c": 1}, {"ios": {}}, {"en": {}}, {"en": {"ios": {}}},
              {"en": {}, "ios": {}}, {"build": 1}, {"image": 1}, {"build": 1, "image": 2}, {"image": 1, "dockerfile": 2},
              {"en": _nested(8, "fr")}]
    check_against_jsonschema(schema, values)
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "c", {"t": v}) for v in values[:6]])
    assert lowered(tree)[2] == ()


@pytest.mark.parametrize("schema", [
    {"not": {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/node"}}}},
    {"not": {"properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}},
    {"type": "array", "items": {"not": {"$ref": "#/$defs/node"}}},
    {"not": {"type": ["object", "string"], "required": ["c"]}},
    {"not": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}},
    # more names than member conditions track (3^8 combinations of bits)
    {"not": {"type": "object", "required": ["a", "b"], "properties": {n: {"type": "integer"} for n in "abcdefgh"}}},
])
def test_not_of_an_object_schema_keeps_calls(schema):
    """``not`` of a schema that constrains objects by ``properties``, ``required``, member
    counts and ``additionalProperties: false`` only is the union of the ways to fail it: a
    required name absent, a named member's value rejected (its complement lowered as a value of
    its own), too few or too many members, a name outside ``properties``. No complement of a
    value with calls is taken, so a recursive value beside it stays exact at any depth."""
    node = {"type": "object", "properties": {"c": {"$ref": "#/$defs/node"}}}
    tree = {"type": "object", "properties": {"k": {"$ref": "#"}, "t": schema}, "$defs": {"node": node}}
    values = [None, 1, "s", [], [{}], [1], [{"c": 1}], {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"b": {}}, {"a": 1, "b": 2},
              {"a": 1, "b": {"c": {}}}, {"c": 1}, {"c": {"c": 1}}, {"a": 1, "b": 2, "c": 3}, {"x": "s"}, {"a": 1, "x": 1}, _nested(9)]
    check_against_jsonschema({**schema, "$defs": {"node": node}}, values)
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "k", {"t": v}) for v in values[7:14]])
    assert lowered(tree)[2] == ()


def test_one_of_over_overlapping_objects_keeps_calls():
    """An ``oneOf`` of object schemas that overlap (an object can satisfy both), with more names
    than member conditions track (Github_medium/o19154's resource definitions), is the union
    over branches of the branch merged with one way to fail each other one: a required name
    absent, a member's value its schema rejects, or (two closed objects) one of its own names
    the other lacks. Each choice is one object schema, so nothing is inlined and a recursive
    member is exact at any depth (it was cut at 4)."""
    names = ["flavor", "count", "image", "keypair", "networks", "tags", "zone", "size"]
    lists = {"type": "array", "items": {"type": "string"}}
    first = {"properties": {n: lists if n in ("networks", "tags") else {"type": "string"} for n in names},
             "required": ["flavor", "image", "keypair", "networks"]}
    first["properties"]["count"] = {"type": "number"}
    second = {"properties": {"sample_name": {"type": "string"}, "tree": {"$ref": "#/$defs/node"}, "count": {"type": "integer"}},
              "required": ["name"]}
    third = {"type": "object", "required": ["zone"], "properties": {"zone": {"enum": ["a", "b"]}, "tree": {"$ref": "#/$defs/node"}}}
    node = {"type": "object", "properties": {"c": {"$ref": "#/$defs/node"}}}
    full = {"flavor": "f", "image": "i", "keypair": "k", "networks": ["n"]}
    values = [1, "s", {}, full, {**full, "name": "x"}, {"name": "x"}, {"name": "x", "count": 1.5}, {**full, "name": "x", "count": 1.5},
              {**full, "name": "x", "networks": "n"}, {**full, "name": 1, "count": 2}, {"name": "x", "tree": _nested(9)},
              {**full, "name": "x", "tags": [1]}, {"zone": "a"}, {"zone": "a", "name": "x"}, {"zone": "c", "name": "x"},
              {**full, "zone": "b"}, {**full, "zone": 1}, {"zone": "a", "tree": _nested(9)}, {"zone": "a", "name": "x", "tree": 1}]
    closed = [{"type": "object", "properties": {"zone": {"type": "string"}, "tree": {"$ref": "#/$defs/node"}}, "additionalProperties": False},
              {"type": "object", "properties": {"zone": {"type": "string"}, "count": {"type": "integer"}}, "additionalProperties": False}]
    for branches in ([first, second], [second, third], [third, second, node], closed):
        schema = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": {"oneOf": branches}}, "$defs": {"node": node}}
        check_against_jsonschema(schema, [{"t": v} for v in values] + [_nested(9, "c", {"t": v}) for v in values[3:8]])
        assert lowered(schema)[2] == ()


@pytest.mark.parametrize("schema", [
    {"pattern": "^[0-9]*$", "maxLength": 9, "oneOf": [{"minLength": 9}, {"$ref": "#/$defs/empty"}]},
    {"minimum": 2, "oneOf": [{"maximum": 5}, {"multipleOf": 2}], "items": {"type": "integer"}},
    {"maxItems": 2, "not": {"type": "string"}},
])
def test_a_type_part_and_a_part_by_type_meet_type_by_type(schema):
    """A schema's own type part (free containers) beside an ``oneOf`` / ``not`` taken type by type
    (free containers too) were two languages with calls to intersect: now they meet type by
    type, where a part that holds every value of the type is left out, so nothing is inlined."""
    schema = {**schema, "$defs": {"empty": {"type": "string", "maxLength": 0}}}
    tree = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": schema}, "$defs": schema["$defs"]}
    values = ["", "123456789", "12345", "abc", "1234567890", 1, 2, 4, 6, 7, 10, 2.5, None, [], [1], [1, 2, 3], ["a"], [[[["x"]]]],
              {}, {"k": {"k": {"k": {"k": 1}}}}]
    check_against_jsonschema(schema, values)
    check_against_jsonschema(tree, [{"t": v} for v in values] + [{"c": {"t": v}} for v in values[:6]])
    assert lowered(schema)[2] == () and lowered(tree)[2] == ()


def test_not_taken_type_by_type_keeps_recursion_a_call():
    """A ``not`` whose schema says nothing of containers, or accepts them whole, needs no
    complement of a value with calls: free where the negated schema has no value of a type, out
    where it accepts the type whole, automaton algebra on scalars. A recursive member beside it
    stays a call, and free values under it are not cut at ``max_depth``."""
    schema = {"type": "object", "properties": {
        "c": {"$ref": "#"}, "d": {"not": {"type": ["integer", "string"]}}, "e": {"not": {"pattern": "^a"}},
        "f": {"not": {"minimum": 3}}, "g": {"not": {"type": "object", "required": ["x"]}},
    }}
    values = [{"d": 1}, {"d": "s"}, {"d": 1.5}, {"d": []}, {"d": {"k": [[[[[[1]]]]]]}}, {"d": None}, {"e": "abc"}, {"e": "b"},
              {"e": 3}, {"e": [["a"]]}, {"f": 2}, {"f": 3}, {"f": "x"}, {"f": {}}, {"c": {"d": 2}}, {"c": {"d": 2.5}}, {"g": {"x": 1}}, {"g": 1}]
    check_against_jsonschema(schema, values)
    spec, expr, narrowed = lowered(schema)
    assert narrowed == ()
    deep: object = {"d": [[[[[[[[True]]]]]]]]}
    for _ in range(40):
        deep = {"c": deep, "e": "b"}
    assert matches(expr, spec.serialize(deep))


@pytest.mark.parametrize("outer", [{}, {"type": "object"}, {"type": ["object", "string"]}])
@pytest.mark.parametrize("typed", [0, 1, 2])
def test_one_of_disjoint_on_objects_only_is_a_union_of_object_views(outer, typed):
    """Branches that constrain objects only (no ``type``) all accept a string: disjoint on
    objects, they overlap on every other type, which oneOf then rejects when two or more branches
    say nothing of types, and accepts when one does. Written as object views, members keep their
    calls (a free value member needs no depth cut); it was a complement before."""
    branches = [
        {"properties": {"first": {"type": "string"}, "meta": {}}, "required": ["first"]},
        {"properties": {"vehicle": {"type": "string"}, "price": {"type": "integer"}}, "additionalProperties": False},
    ]
    branches = [dict(b, type="object") if i < typed else b for i, b in enumerate(branches)]
    schema = {**outer, "oneOf": branches}
    instances = ["s", 3, None, [1], {}, {"first": "a"}, {"first": "a", "meta": [[{"x": 1}]]}, {"vehicle": "v", "price": 2},
                 {"first": "a", "vehicle": "v"}, {"price": "x"}, {"first": 1}, {"other": 1}]
    check_against_jsonschema(schema, instances)
    if outer.get("type") != ["object", "string"]:  # (a type list besides objects is still a complement: exact, cut)
        assert lowered(schema)[2] == ()


def test_one_of_disjointness_reads_the_names_the_enclosing_schema_requires():
    # "kind" is required beside the oneOf, its literals are given inside each branch.
    schema = {"type": "object", "required": ["kind"], "oneOf": [
        {"properties": {"kind": {"const": "a"}}},
        {"properties": {"kind": {"enum": ["b", "c"]}, "x": {"type": "string"}}, "required": ["x"]},
    ]}
    resolver = Resolver(schema)
    prover = DisjointnessProver(schema, resolver)
    assert prover.disjoint(schema["oneOf"], resolver.root_base, {"object"}, schema)
    assert not prover.disjoint(schema["oneOf"], resolver.root_base, {"object"})  # {"x": "s"} fits both
    check_against_jsonschema(schema, [{"kind": "a"}, {"kind": "b", "x": "s"}, {"kind": "b"}, {"x": "s"}, {"kind": "d", "x": "s"}, {}])


def test_ref_siblings_before_2019_prove_nothing():
    # Draft 7 ignores "type" beside "$ref": the first branch accepts everything, so integers fit both.
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"any": {}},
              "oneOf": [{"$ref": "#/definitions/any", "type": "string"}, {"type": "integer"}]}
    resolver = Resolver(schema)
    assert not DisjointnessProver(schema, resolver).disjoint(schema["oneOf"], resolver.root_base, {"number", "string"})
    check_against_jsonschema(schema, [3, "s", None, 2.5])


def test_unranked_names_first_stay_alive_in_complements():
    # oneOf of overlapping branches is a complement; a member the schema never names may come
    # first, and the state after it must be provably alive without exhausting the product.
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    check_against_jsonschema(schema, [{"x": 1, "a": 2}, {"x": 1, "a": 2, "b": 3}, {"x": 1}, {"b": 1, "y": [1]}])
    expr = lower_json_schema(JsonSchema(schema), calls=False)[0]  # one regular language: byte steps
    dfa = LazyDfa(expr, max_states=5000)
    assert dfa.distance(dfa.step(START, b'{"x":[1,{"y":')) < 40  # alive, found within the cap


def test_dead_prefixes_in_overlapping_one_of_die_without_a_search():
    # Test suite oneOf.json#8: neither branch mentions the other's name. With slots for every name
    # the value's schemas mention, "bar" first and "baz" after "foo" and "bar" are dead as
    # expressions; before, proving it explored the product of free values past 50,000 states.
    schema = {"type": "object", "oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}]}
    instances = [{"bar": 2}, {"foo": 1, "bar": 2}, {"foo": 1, "baz": 3}, {"foo": 1, "bar": 2, "baz": 3}, {"foo": 1, "x": {"bar": 1}}]
    check_against_jsonschema(schema, instances)
    expr = lower_json_schema(JsonSchema(schema), calls=False)[0]
    dfa = LazyDfa(expr, max_states=2000)
    assert not dfa.is_live(dfa.step(START, b'{"bar":'))
    assert not dfa.is_live(dfa.step(START, b'{"foo":1,"bar":2,"baz":'))
    assert dfa.is_live(dfa.step(START, b'{"foo":1,"baz":'))


def test_an_empty_recursive_language_accepts_nothing(tiny_info):
    from grammask.grammars.fsm.backend import FsmBackend

    # Every valid value nests forever: the rule has no shortest text, and the grammar stays exact.
    chain = {"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"]}}}
    for schema in (chain, {"not": {}}):
        grammar = FsmBackend(tiny_info).compile(JsonSchema(schema))
        assert grammar.unenforced == () and grammar.narrowed == ()
        matcher = grammar.matcher()
        assert not any(matcher.accept_token(t) for t in (ord("{"), ord("1"), ord("n"), *tiny_info.eos_ids))


@pytest.mark.parametrize("order", ["declared", "any"])
def test_disjoint_pattern_properties_are_read_without_complement(order):
    # Closed objects keyed by disjoint patterns (as Github_hard/o12337's metadata fields): each
    # member is read by its one pattern, and the named properties that match a pattern keep
    # their own schema, so the lowering has no & or ¬ (states that each needed a search).
    schema = {
        "type": "object",
        "properties": {"name:en": {"type": "string"}, "id": {"type": "integer"}},
        "patternProperties": {"^name:(en|nl)$": {"type": "string", "maxLength": 3}, "^count:[0-9]$": {"type": "integer"}, "^x-": {"type": "boolean"}},
        "additionalProperties": False,
        "required": ["id"],
    }
    instances = [
        {"id": 1},
        {"id": 1, "name:en": "long"},
        {"id": 1, "name:en": "ab"},
        {"id": 1, "name:nl": "ab"},
        {"id": 1, "name:nl": "long"},
        {"id": 1, "count:7": 3},
        {"id": 1, "count:7": "3"},
        {"id": 1, "count:77": 3},
        {"id": 1, "x-": True, "x-count:1": False},
        {"id": 1, "x-name:en": "s"},
        {"id": 1, "name:fr": "ab"},
        {"id": 1, "": True},
        {"id": "1"},
    ]
    check_against_jsonschema(schema, instances, property_order=order)
    same_value = {**schema, "properties": {"name:en": {"type": "string", "maxLength": 3}, "id": {"type": "integer"}}}
    _, expr, _ = lowered(same_value, property_order=order)
    assert E.is_plain(expr) == (order == "declared")  # "any" order keeps each name once with ¬
    overlapping = {**schema, "patternProperties": {"^x-": {"type": "boolean"}, "-y$": {"type": "integer"}}}
    check_against_jsonschema(overlapping, [{"id": 1, "x-y": True}, {"id": 1, "x-z": True}, {"id": 1, "a-y": 1}, {"id": 1, "a-y": True}])
    # "x-y" matches both: its value is one value of both schemas (none here), so no product of
    # the two patterns' members is left in the object
    assert E.is_plain(lowered(overlapping)[1])


@pytest.mark.parametrize("additional", [None, {"type": "string"}, True])
def test_names_no_pattern_matches_are_read_by_a_plain_complement(additional):
    # An open object keyed by patterns (JsonSchemaStore/apibuilder's annotations): the names no
    # pattern matches take the additional value, read by the patterns' complement written out
    # (json_text.plain_complement), so the lowering has no & or ¬ there either.
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "ab": {"type": "integer"}, "A": {"type": "boolean"}},
        "patternProperties": {"^[a-z]+$": {"type": "integer"}, "^é": {"type": "null"}},
    }
    if additional is not None:
        schema["additionalProperties"] = additional
    instances = [
        {}, {"id": 1}, {"ab": True}, {"ab": 1}, {"abc": 1}, {"abc": "x"}, {"A": "x"}, {"A": True}, {"B": "x"}, {"a1": "x"},
        {"a1": 2}, {"": "x"}, {"": 1}, {"é": None}, {"éa": None}, {"éa": "x"}, {"aé": "x"}, {"x-y": True},
    ]
    check_against_jsonschema(schema, instances)
    _, expr, _ = lowered(schema)
    assert E.is_plain(expr)
    wide = {**schema, "patternProperties": {"^(?:\\S+\\s+){0,20}\\S+$": {"type": "integer"}}}  # a complement too large to write
    check_against_jsonschema(wide, [{"a b": 1}, {"a b": "x"}, {" ": "x"}, {" ": 1}])
    _, expr, notes = lowered(wide)
    assert not all(E.is_plain(rule.body) for rule in reachable_rules(Rule("#", expr)))  # the complement, kept
    assert notes == ()  # "ab" is one value of its property's and its pattern's schemas: no inlining


def _nested(depth: int, key: str = "c", leaf=None):
    value = leaf if leaf is not None else {}
    for _ in range(depth):
        value = {key: value}
    return value


@pytest.mark.parametrize("schema, instances", [
    # JSON:API's attributes (Github_hard/o366): any value under a word name, none under the two
    # reserved ones, which the word pattern matches too.
    (
        {"type": "object", "patternProperties": {"^\\w[-\\w_]*$": {"description": "any value"}, "^(relationships|links)$": {"not": {}}},
         "additionalProperties": False},
        [{"a": _nested(9, "b", [[[1]]])}, {"links": 1}, {"relationships": {}}, {"link": [[[[[[[[[]]]]]]]]]}, {"-a": 1}, {}],
    ),
    # A tree whose children's names two patterns match, one of them {}: the value stays a call.
    (
        {"$defs": {"tree": {"type": "object", "properties": {"c0": {"title": "first"}},
                            "patternProperties": {"^c": {"$ref": "#/$defs/tree"}, ".": {}}, "additionalProperties": False}},
         "$ref": "#/$defs/tree"},
        [_nested(10), _nested(10, leaf={"x": [1]}), _nested(10, leaf={"c": 1}), _nested(10, "c0"), _nested(3, "c0", {"c": 2}),
         {"c": {"": 1}}, {"x": {"c": 1}}],
    ),
    # Six patterns (JsonSchemaStore/appsettings has eight names spelt several ways), three
    # recursive, one overlapping those three: members per set of patterns that overlap pairwise.
    (
        {"$defs": {"t": {"type": "object", "additionalProperties": False, "patternProperties": {
            "^a$": {"$ref": "#/$defs/t"}, "^b$": {"$ref": "#/$defs/t"}, "^c$": {"$ref": "#/$defs/t"}, "^d$": {"type": "integer"},
            "^e$": {"type": "string"}, "^[a-c]$": {"description": "a, b or c"}}}}, "$ref": "#/$defs/t"},
        [_nested(10, "a"), _nested(5, "b", _nested(5, "c", {"d": 1, "e": "x"})), {"d": "x"}, {"f": 1}, {"a": {"e": 1}}, {"ab": {}}],
    ),
])
def test_overlapping_patterns_that_constrain_one_value_keep_its_calls(schema, instances):
    # Overlapping patterns used to be intersected member by member with a universe of values,
    # which inlined every value of the object to max_depth. A name now reads the intersection of
    # only the schemas that constrain its value (∅ where one allows nothing), keys alone are
    # intersected and complemented, and deep values are accepted exactly.
    check_against_jsonschema(schema, instances)
    assert not any(note.keyword == "max_depth" for note in lowered(schema)[2])


def test_a_named_property_takes_the_patterns_that_match_it_as_ecma_262_reads_them():
    # A named property's value is also under every patternProperties entry that matches its name,
    # decided with the grammar's own (ECMA-262) reading of the pattern, as grammask's validator
    # decides it: "\\d" is ASCII there, so the Arabic-Indic digit "٣" is not matched (Python's
    # regex module matches it: the member used to be integer ∩ string, nothing).
    schema = {
        "type": "object",
        "properties": {"٣": {"type": "string"}, "7": {"type": ["string", "integer"]}},
        "patternProperties": {"^\\d$": {"type": "integer"}},
    }
    spec, expr, _ = lowered(schema)
    validator = output_validator(schema)
    verdicts = []
    for instance in [{"٣": "x"}, {"٣": 1}, {"7": 1}, {"7": "x"}]:
        text = spec.serialize(order_instance(spec, instance))
        verdicts.append(matches(expr, text))
        assert verdicts[-1] == validator.is_valid(instance), (instance, text)
    assert verdicts == [True, False, True, False]  # hand-checked


def test_a_lone_surrogate_in_a_schema_is_no_foreign_error(tiny_info):
    # JSON text may spell a lone surrogate ("\\ud800"); the cache key's digest and the key
    # complement's trie encoded such strings strictly and raised UnicodeEncodeError.
    schema = {"type": "object", "description": "\ud800", "properties": {"\udc00": {"type": "integer"}, "a": {"enum": ["\ud800", 1]}}}
    grammar = GrammarCompiler(tiny_info, "fsm").compile(JsonSchema(schema))
    matcher = grammar.matcher()
    bitmask = allocate_token_bitmask(1, tiny_info.vocab_size)
    for byte in b'{"a":1,"b":2}':  # "b" is read by the other names' trie
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(byte)
    assert matcher.accept_token(tiny_info.eos_ids[0])


@pytest.mark.parametrize(
    "schema, instance",
    [
        ({"const": "\ud800"}, "\ud800"),
        ({"enum": ["a\udc00b", 1]}, "a\udc00b"),
        ({"type": "object", "properties": {"\ud83d": {"type": "integer"}}, "required": ["\ud83d"], "additionalProperties": False}, {"\ud83d": 1}),
    ],
)
def test_a_lone_surrogate_the_grammar_writes_is_its_escape(schema, instance):
    # UTF-8 cannot carry a lone surrogate: its raw bytes (ED A0 80 for U+D800) are no text a
    # tokenizer decodes. The grammar and serialize write the JSON escape, which decodes to the value.
    spec, expr, _ = lowered(schema)
    text = spec.serialize(instance)
    assert "\\ud" in text and json.loads(text) == instance and output_validator(schema).is_valid(instance)
    assert matches(expr, text)
    raw = json.dumps(instance, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    assert not matches(expr, raw)


def test_a_name_with_a_lone_surrogate_under_property_names_is_reported_narrowed():
    # String languages hold Unicode scalar values, so such a name cannot be matched against
    # propertyNames: its member is refused, and the refusal is reported, not silent.
    schema = {"type": "object", "properties": {"\ud83d": {"type": "integer"}, "a": {"type": "integer"}}, "propertyNames": {"maxLength": 3}}
    spec, expr, notes = lowered(schema)
    assert [(n.keyword, "\\ud83d" in n.reason) for n in notes if n.keyword == "propertyNames"] == [("propertyNames", True)]
    assert not matches(expr, spec.serialize({"\ud83d": 1}))
    assert matches(expr, spec.serialize({"a": 1}))


@pytest.mark.parametrize("draft, asserted_by_the_judge", [("http://json-schema.org/draft-06/schema#", False), ("https://json-schema.org/draft/2020-12/schema", True)])
def test_a_format_the_drafts_validators_do_not_assert_is_reported_narrowed(draft, asserted_by_the_judge):
    # uuid came with 2019-09: to a draft-06 validator it is an annotation, and any string passes.
    # The grammar asserts it all the same (what a user writing it means), so it rejects strings
    # the validator accepts: a narrowing, reported.
    schema = {"$schema": draft, "type": "string", "format": "uuid"}
    spec, expr, notes = lowered(schema)
    not_a_uuid = "123e4567-e89b-12d3-a456-42665544000"  # one hex digit short
    assert output_validator(schema).is_valid(not_a_uuid) is not asserted_by_the_judge
    assert not matches(expr, spec.serialize(not_a_uuid))
    assert matches(expr, spec.serialize("123e4567-e89b-12d3-a456-426655440000"))
    reported = [n for n in notes if n.keyword == "format" and "annotation" in n.reason]
    assert bool(reported) is not asserted_by_the_judge


def test_min_properties_over_open_names_is_listed_as_unenforced():
    # Names matched only by patternProperties may repeat ({"c": 1, "c": 2} is two members written,
    # one parsed), so a count above one is not exact there; with named members only it is.
    open_names = {"type": "object", "patternProperties": {"^[a-d]$": True}, "additionalProperties": False, "minProperties": 3}
    _, unenforced, _ = lower_json_schema(JsonSchema(open_names))
    assert [u.keyword for u in unenforced] == ["minProperties"]
    closed = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False, "minProperties": 2}
    _, unenforced, _ = lower_json_schema(JsonSchema(closed))
    assert unenforced == ()


@pytest.mark.parametrize("typed", [True, False])
def test_a_oneof_of_required_names_is_tracked_as_presence(typed):
    # Overlapping branches that only require names: exactly one list present, on the slot chain
    # (no complement: Github_hard/o31351's ad units took 4 s to a first mask before).
    schema = {
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}, "d": {"type": "null"}},
        "required": ["d"],
        "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}, {"$ref": "#/$defs/only_c"}],
        "$defs": {"only_c": {"required": ["c"], "title": "an annotation"}},
    }
    if typed:
        schema["type"] = "object"
    values = {"a": 1, "b": "x", "c": True, "e": [1]}
    instances = [1, "s", None, [], {}]
    for mask in range(16):
        chosen = {k: v for i, (k, v) in enumerate(values.items()) if mask >> i & 1}
        instances += [chosen, {**chosen, "d": None}]
    spec, expr, notes = lowered(schema)
    assert not notes
    check_against_jsonschema(schema, instances)
    rules = reachable_rules(Rule("#", expr))
    assert all(E.is_plain(rule.body) for rule in rules)  # no complement was taken


@pytest.mark.parametrize("ident", ["Github_medium/o65917", "Github_hard/o31351"])
def test_dev_corpus_one_of_objects_lower_without_complements(corpora, ident):
    # Both timed out on the cold path (46 s to a state limit; 4 s to a first mask): o65917 nests a
    # oneOf of three object shapes (told apart by an enum "type" and a "changes" literal) in a
    # oneOf told apart by "status"; o31351 requires exactly one of "bids" / "config_id". Both are
    # now object schemas merged along slot chains: exact, nothing narrowed, no complement.
    from tests.conftest import read_jsonl

    dataset = ident.split("/")[0]
    schema = next(r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / f"{dataset}.dev.jsonl") if r["id"] == ident)
    tests = next(r["tests"] for r in read_jsonl(corpora / "jsonschemabench" / "instances" / f"{dataset}.dev.jsonl") if r["id"] == ident)
    spec, expr, notes = lowered(schema)
    assert not notes  # a complement over these objects cuts their free values at max_depth
    validator = jsonschema.Draft4Validator(schema)
    for test in tests:
        text = spec.serialize(order_instance(spec, test["data"]))
        assert matches(expr, text) == validator.is_valid(test["data"]), text


def test_a_finite_enum_is_lowered_as_the_literals_jsonschema_accepts():
    # The enum (here in an allOf branch) bounds the value to a list: each literal is judged against
    # the whole schema, so the not / oneOf around it need no complement (the Synthesized test-suite
    # schemas built this way took 40-130 ms to a first mask through the complement).
    schema = {
        "allOf": [
            {"enum": [{"foo": 1, "baz": 3}, {"foo": 1, "bar": 2}, {"baz": 3}, "x", 2, [1, 1]]},
            {"not": {"oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}], "type": "object"}},
            {"uniqueItems": True},
        ]
    }
    spec, expr, notes = lowered(schema)
    assert not notes and E.is_plain(expr)
    check_against_jsonschema(schema, [{"foo": 1, "baz": 3}, {"foo": 1, "bar": 2}, {"baz": 3}, "x", 2, [1, 1], [1], {}, "y"])
    # Where the verdict would not be this lowering's own (an asserted format), the schema is lowered as usual.
    dated = {"enum": ["2024-01-01", "soon"], "format": "date"}
    check_against_jsonschema(dated, ["2024-01-01", "soon", "2024-13-01"])


def test_a_finite_enum_is_judged_through_references_within_the_document():
    # What the references reach is judged too: a name pattern some member must match (a not over
    # propertyNames), which the object lowering has no slot for, costs nothing beside an enum.
    schema = {
        "definitions": {
            "short": {"type": "string", "maxLength": 2},
            "some_name_has_a": {"not": {"propertyNames": {"not": {"pattern": "a"}}}},
        },
        "anyOf": [{"$ref": "#/definitions/short"}, {"$ref": "#/definitions/some_name_has_a"}],
        "enum": ["a", "abc", 1, {"b": 1}, {"ba": 1}],
    }
    spec, expr, notes = lowered(schema)
    assert not notes and E.is_plain(expr) and not E.has_calls(expr)
    check_against_jsonschema(schema, ["a", "abc", 1, {"b": 1}, {"ba": 1}, "b"])
    # A reference into another resource (its own $id) or to a multipleOf is lowered as usual.
    elsewhere = {
        "$id": "http://example.com/root",
        "definitions": {"short": {"$id": "http://example.com/other", "type": "string", "maxLength": 1}},
        "allOf": [{"$ref": "http://example.com/other"}],
        "enum": ["a", "ab", 2],
    }
    check_against_jsonschema(elsewhere, ["a", "ab", 2])
    halves = {"definitions": {"half": {"multipleOf": 0.5}}, "allOf": [{"$ref": "#/definitions/half"}], "enum": [1.5, 0.7, "x"]}
    check_against_jsonschema(halves, [1.5, 0.7, "x"])


@pytest.mark.parametrize("additional", [None, {"type": "integer"}, {"type": "string", "maxLength": 3}])
def test_an_open_objects_other_keys_are_built_once_a_request_reads_past_their_quote(llama_info, llama_hf, additional):
    """Other members' keys (every name but the object's own) are a deferred rule after the quote:
    the first mask reads ``{"`` at most, so it leaves the trie of names unbuilt; forcing an
    instance builds it, and the matcher agrees with jsonschema on members it names or not."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}, "required": ["name"]}
    if additional is not None:
        schema["additionalProperties"] = additional
    grammar = GrammarCompiler(llama_info, backend="fsm").compile(JsonSchema(schema))
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    grammar.matcher().fill_next_token_bitmask(bitmask)
    rules = grammar.automaton.rules
    (other,) = [dfa for dfa in rules.dfas if dfa.rule.name.endswith("(other members after the quote)")]
    assert not other.built and other.rule.builder is not None
    for instance in [{"name": "a", "size": 2}, {"nam": 1, "name": "a"}, {"name": "a", "sizes": [1, {"x": None}]},
                     {"size": 2}, {"name": 3}, {"name": "a", "size": "2"}, {"name": "a", "x": "abcd"}, {"name": "a", "x": "ab"}]:
        matcher, accepted = grammar.matcher(), True
        for token in llama_hf.encode(json.dumps(instance, separators=(",", ":")), add_special_tokens=False) + [llama_info.eos_ids[0]]:
            matcher.fill_next_token_bitmask(bitmask)
            if not (int(bitmask[0, token >> 5]) >> (token & 31)) & 1 or not matcher.accept_token(token):
                accepted = False
                break
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(instance), instance
    assert other.built and other.rule.builder is None


def test_objects_with_the_same_names_keep_their_own_other_values(llama_info, llama_hf):
    """Two objects naming the same properties, whose other members take different values, each
    keep theirs (their deferred other-members rules are not shared)."""
    shape = {"type": "object", "properties": {"id": {"type": "string"}}}
    schema = {"type": "object", "properties": {"ints": {**shape, "additionalProperties": {"type": "integer"}},
                                               "texts": {**shape, "additionalProperties": {"type": "string"}}}}
    spec = JsonSchema(schema)
    grammar = GrammarCompiler(llama_info, backend="fsm").compile(spec)
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    for instance in [{"ints": {"n": 1}, "texts": {"n": "a"}}, {"ints": {"n": "a"}}, {"texts": {"n": 1}},
                     {"texts": {"id": "x", "n": "b"}, "ints": {"id": "y", "m": 2}}]:
        matcher, accepted = grammar.matcher(), True
        for token in llama_hf.encode(spec.serialize(order_instance(spec, instance)), add_special_tokens=False) + [llama_info.eos_ids[0]]:
            matcher.fill_next_token_bitmask(bitmask)
            if not (int(bitmask[0, token >> 5]) >> (token & 31)) & 1 or not matcher.accept_token(token):
                accepted = False
                break
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(instance), instance


_ITEM_VALUES = [None, 0, 3, 6, 7, 2.5, "a", "pairwise", True, [], {}, [3], {"c": 3}, [[6]], [[[[[[3]]]]]], _nested(6, "c", [3])]
_ARRAYS = [[], *([v] for v in _ITEM_VALUES), [3, "a"], ["a", 3], [3, 6], [3, 6, 7], [7, 7, 3, 3], ["a", "b", "c"], [[3], [6, 2]], [[4]],
           [[3, 6], [2]], ["public", "pairwise"], ["public"], [_nested(6, "c", [3]), 3], [[[[[[[3]]]]]], "a", 6], [0, 1, 2, 3, 4, 5, 6, 7]]


@pytest.mark.parametrize("schema", [
    {"type": "array", "contains": {"type": "number", "multipleOf": 3}},
    {"contains": {"const": "pairwise"}},
    {"type": "array", "items": {"$ref": "#"}, "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3, "minItems": 1, "maxItems": 7},
    {"type": "array", "prefixItems": [{"type": "string"}, {"$ref": "#/$defs/tree"}], "contains": {"type": "integer"}, "maxContains": 1},
    {"type": "array", "contains": {"type": "integer", "minimum": 5}, "minContains": 2},
    {"type": "array", "contains": {"type": "integer"}, "minContains": 0, "maxContains": 1},
    {"type": "array", "contains": {"type": "integer"}, "maxContains": 0},
    {"type": "array", "contains": {"type": "array"}, "items": {"type": ["array", "integer"], "items": {"$ref": "#"}}, "maxItems": 2},
    {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}], "additionalItems": {"type": "integer"},
     "contains": {"type": "integer", "minimum": 5}},
    # allOf of an items schema and a contains schema merges into one array schema (Handwritten/itemscontains1)
    {"type": "array", "allOf": [{"items": {"$ref": "#/$defs/tree"}}, {"contains": {"type": "integer", "multipleOf": 3}}]},
    {"allOf": [{"type": "array", "items": {"enum": ["public", "pairwise"]}}, {"contains": {"const": "pairwise"}}, {"minItems": 1}]},
])
def test_contains_keeps_calls(schema):
    """An array with ``contains`` is read item by item, each item one that ``contains`` accepts
    (merged with its own schema) or, where ``maxContains`` counts them, one it rejects; the
    item and ``contains`` counts are in the chain. Items stay calls, so a recursive or free item
    is exact at any depth (the arrays used to be intersected, every item inlined to
    ``max_depth``)."""
    tree = {"type": ["array", "integer"], "items": {"$ref": "#/$defs/tree"}}
    schema = {**schema, "$defs": {"tree": tree}}
    check_against_jsonschema(schema, _ARRAYS + [1, "s", {}])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("schema", [
    {"not": {"contains": {"type": "integer"}}},
    {"type": "array", "items": {"$ref": "#"}, "not": {"contains": {"type": "integer"}, "minContains": 2, "maxContains": 3}},
    {"type": "array", "items": {"enum": ["public", "pairwise"]}, "not": {"anyOf": [{"contains": {"const": "pairwise"}}]}},
    {"not": {"contains": {"type": "array"}, "items": {"type": ["integer", "array"]}, "maxItems": 3}},
    {"not": {"type": "array", "contains": {"type": "array", "contains": {"type": "integer"}}}},
    {"items": {"$ref": "#"}, "not": {"type": "array", "minItems": 1}},
    # two item complements, each a count where the items are strings (Github_hard/o48770)
    {"allOf": [{"type": "array", "items": {"type": ["string", "array"], "items": {"$ref": "#"}}},
               {"not": {"type": "array", "items": {"type": "object"}}}, {"not": {"type": "array", "items": {"type": "object", "required": ["u"]}}}]},
    {"allOf": [True], "not": {"anyOf": [{"type": "array"}]}},
    {"not": {"maxItems": 1}, "items": {"not": {"type": "array"}}},
    {"not": {"type": ["string", "object", "array"]}},
    {"not": {"type": ["array", "string"], "items": {"type": "integer"}}},
])
def test_not_of_an_array_schema_beside_array_keywords_is_merged(schema):
    """What an array schema under ``not`` rejects is a union of array schemas (too few or too
    many items, an item its ``items`` rejects, too few or too many items its ``contains``
    accepts), each merged with the array keywords beside the ``not``: no intersection of arrays
    whose items call rules is taken."""
    check_against_jsonschema(schema, _ARRAYS + [1, "s", None, {}, {"a": [1]}])
    tree = {"type": "object", "properties": {"k": {"$ref": "#"}, "t": schema}}
    check_against_jsonschema(tree, [{"t": v} for v in _ARRAYS[:30]] + [_nested(9, "k", {"t": v}) for v in _ARRAYS[:12]])
    assert lowered(tree)[2] == ()


@pytest.mark.parametrize("schema", [
    {"not": {"anyOf": [{"pattern": "^....$"}, {"pattern": "ab1"}, {"pattern": "b12"}]}},
    {"not": {"allOf": [{"pattern": "^....$"}, {"pattern": "ab1"}]}},
    {"not": {"anyOf": [{"maxLength": 3}, {"not": {"type": "array"}}]}},
    {"not": {"allOf": [{"minLength": 2}, {"not": {"type": "integer"}}]}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "not": {"anyOf": [{"dependencies": {"a": ["b"]}}, {"pattern": "ab"}]}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "not": {"anyOf": [{"items": [{"type": "string"}], "additionalItems": False},
                                                                               {"pattern": "ab"}]}},
])
def test_not_of_applicators_leaves_out_the_types_they_accept_whole(schema):
    """``not`` of an ``anyOf`` / ``allOf`` of string assertions (Handwritten/allany*): a
    container type every branch (``allOf``) or some branch (``anyOf``) accepts whole is not in
    the complement, so no complement of containers with calls is taken (a draft-07
    ``dependencies`` or ``additionalItems`` does constrain its type)."""
    values = ["abcd", "ab1", "b12", "ab12", "xyzw", "zzzzz", "ab", "", 1, 12, None, [], ["x"], [1], [1, 2], {}, {"a": 1}, {"a": 1, "b": 2},
              {"b": {"c": "ab"}}, _nested(9, "c")]
    check_against_jsonschema(schema, values)
    draft = {"$schema": schema["$schema"]} if "$schema" in schema else {}
    tree = {**draft, "type": "object", "properties": {"k": {"$ref": "#"}, "t": {k: v for k, v in schema.items() if k != "$schema"}}}
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "k", {"t": v}) for v in values[:8]])
    assert lowered(tree)[2] == ()


@pytest.mark.parametrize("schema", [
    {"not": {"patternProperties": {"^cde": False}}},
    {"not": {"patternProperties": {"^cde": False, "^b": {}, "z$": {"description": "any"}}}},
    {"not": {"properties": {"a": {"type": "integer"}}, "patternProperties": {"^b": {}}, "additionalProperties": False}},
    {"not": {"properties": {"a": {"type": "integer"}}, "patternProperties": {"^b": {}, "x": False}, "additionalProperties": False,
             "required": ["a"]}},
])
def test_not_of_pattern_properties_that_forbid_or_allow_all_keeps_calls(schema):
    """A pattern whose schema is ``false`` fails an object by a member whose name matches it
    (whatever its value, so a repeated name cannot hide it); beside ``additionalProperties:
    false`` a name that matches a pattern is not an extra one (Handwritten/allOfPProp*)."""
    values = [None, 1, "s", [], {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"bz": [1]}, {"cde": 1}, {"cdef": {}, "a": 1}, {"x": 1}, {"ax": 1, "a": 1},
              {"z": 1}, {"a": 1, "q": 2}, {"a": 1, "b": _nested(9)}, {"q": _nested(9)}, {"cde": _nested(9)}]
    check_against_jsonschema(schema, values)
    tree = {"type": "object", "properties": {"k": {"$ref": "#"}, "t": schema}}
    check_against_jsonschema(tree, [{"t": v} for v in values] + [_nested(9, "k", {"t": v}) for v in values[:10]])
    assert lowered(tree)[2] == ()


@pytest.mark.parametrize("schema", [
    {"type": "object", "additionalProperties": {"$ref": "#"}, "not": {"required": ["a", "b"], "properties": {"a": {"type": "integer"}}}},
    {"properties": {"c": {"$ref": "#"}}, "not": {"properties": {"a": {"type": "integer"}}}},
    {"type": "object", "properties": {"c": {"$ref": "#"}}, "not": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
    {"allOf": [{"properties": {"c": {"$ref": "#"}}}], "not": {"anyOf": [{"required": ["a"], "properties": {"a": {"const": 1}}}]}},
    # more names than member conditions track (3^10 combinations of bits)
    {"type": "object", "properties": {"c": {"$ref": "#"}}, "not": {"properties": {n: {"type": "integer"} for n in "abdefghijk"}}},
    {"properties": {"c": {"$ref": "#"}}, "not": {"required": ["a"], "properties": {n: {"type": "integer"} for n in "abdefghijk"}}},
])
def test_not_of_an_object_schema_beside_object_keywords_is_merged(schema):
    """What an object schema under ``not`` rejects, where each way to fail it is an object schema
    (a required name absent, a member's value invalid), is merged with the object keywords
    beside the ``not``: one object schema per way, its members calls, so a recursive member is
    exact at any depth (the two object languages were intersected, every value inlined, where
    the names were more than member conditions track)."""
    values = [None, 1, "s", [], {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 1}, {"c": {"a": 1}}, {"c": {"a": "x", "b": 1}},
              {"c": _nested(9, "c", {"a": 1})}, _nested(9, "c", {"a": "x"}), _nested(9, "c", {"a": 1, "b": 1}), {"a": 1, "c": _nested(9)},
              {"k": "x"}, {"a": 1, "k": "x"}, {"j": 1, "k": 2}, {"a": 1, "j": [], "c": _nested(9, "c", {"k": {}})}]
    check_against_jsonschema(schema, values)
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("branch", [{"type": "object"}, {"type": ["object", "null"]}, {"anyOf": [{"type": "object"}, {"type": "string"}]}])
def test_all_of_part_whose_schema_accepts_every_object_is_left_out(branch):
    """An ``allOf`` beside object parts with calls (Github_hard/o74466: ``{"type": "object"}``
    beside an object with ``patternProperties``): the part's schema accepts every object, so it
    is left out of the objects' intersection by its schema, not by the shape of its language
    (which lists the names other parts give slots to, so is no "any object" expression)."""
    options = {"type": "object", "properties": {"d": {"type": "boolean"}}, "patternProperties": {"^x": {"$ref": "#"}},
               "additionalProperties": False}
    schema = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": {"allOf": [branch, options]}}}
    values = [{"t": v} for v in ({}, {"d": True}, {"d": 1}, {"x1": {}}, {"x1": {"t": {"y": 1}}}, {"y": 1}, {"x": _nested(9, "c")}, 1, None)]
    check_against_jsonschema(schema, values + [_nested(9, "c", v) for v in values])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("branches", [
    [{"type": "array", "items": {"$ref": "#/$defs/node"}}, {"type": "array", "items": {"type": "number"}}],
    [{"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "array", "items": {"$ref": "#/$defs/node"}}}],
    [{"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}, {"type": "array", "minItems": 2}, {"type": "string"}],
    [{"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "number"}]}, "contains": {"type": "number"}},
     {"type": "array", "maxItems": 1}],
])
def test_one_of_over_overlapping_arrays_keeps_calls(branches):
    """An ``oneOf`` of array schemas that overlap (Github_hard/o4413: lists of numbers or of
    lists, both holding ``[]``): per branch, its array view merged with one way to fail each
    other branch, so items stay calls and a recursive item is exact at any depth."""
    node = {"type": "object", "properties": {"n": {"$ref": "#/$defs/node"}}}
    schema = {"type": "object", "properties": {"c": {"$ref": "#"}, "t": {"oneOf": branches}}, "$defs": {"node": node}}
    values = [[], [1], [1, 2], [{}], [{}, {}], [{}, 1], [[1]], [[{}]], [[]], [1, [1]], ["s"], "s", 1, [_nested(9, "n")], [[_nested(9, "n")], []],
              [_nested(9, "n"), 2, 3], [{"n": 1}]]
    check_against_jsonschema(schema, [{"t": v} for v in values] + [_nested(9, "c", {"t": v}) for v in values])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("schema", [
    {"allOf": [{"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}}, {"type": ["object", "null"], "required": ["a"]}]},
    {"oneOf": [{"type": ["object", "null"], "properties": {"k": {"const": 1}, "a": {"$ref": "#"}}, "required": ["k"]},
               {"type": ["object", "null"], "properties": {"k": {"const": 2}}, "required": ["k"]}]},
    {"oneOf": [{"type": ["object", "null"], "required": ["k"], "properties": {"k": {"const": 1}}},
               {"type": "object", "required": ["k"], "properties": {"k": {"const": 2}, "a": {"$ref": "#"}}}]},
    # integers satisfy both branches, other numbers only the second
    {"oneOf": [{"type": ["object", "integer"], "required": ["k"], "properties": {"k": {"const": 1}}},
               {"type": ["object", "number"], "required": ["k"], "properties": {"k": {"const": 2}, "a": {"$ref": "#"}}}]},
    {"allOf": [{"type": ["object", "integer"], "properties": {"a": {"$ref": "#"}}}, {"type": ["object", "number"], "required": ["a"]}]},
    {"allOf": [{"type": ["array", "null"], "items": {"$ref": "#"}}, {"type": ["array", "null"], "maxItems": 2}]},
    {"oneOf": [{"type": ["array", "null"], "items": {"type": "integer"}}, {"type": ["array", "null"], "items": {"$ref": "#"}, "minItems": 2}]},
    {"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}, "not": {"required": ["k"], "properties": {"k": {"const": 1}}}},
    {"type": ["object", "null", "string"], "properties": {"a": {"$ref": "#"}}, "not": {"type": ["object", "string"], "required": ["k"]}},
])
def test_views_of_containers_with_other_types_merge(schema):
    """Object and array schemas whose ``type`` names other types too (``["object", "null"]``)
    merge as views of those types (the other types' values are all valid there): their types
    meet (``integer`` within ``number``), and under ``oneOf`` a value of a type two branches
    allow satisfies both. Members and items stay calls."""
    values = [None, 0, 1, 2.5, "s", True, [], [1], [1, 2], [1, 2, 3], [None], [[1]], ["s"], {}, {"a": 1}, {"k": 1}, {"k": 2}, {"k": 1, "a": None},
              {"a": {"a": None}}, {"a": _nested(8, "a", None)}, [_nested(8, "a", 1)], {"k": 2, "a": _nested(8, "a")}]
    check_against_jsonschema(schema, values + [{"a": v} for v in values] + [[v] for v in values])
    assert lowered(schema)[2] == ()


_TAGGED_VALUES = [None, 1, "s", [], {}, {"type": "a"}, {"type": "b"}, {"type": "a", "x": 1}, {"type": "a", "x": "s"}, {"type": "b", "x": 1},
                  {"x": 1}, {"type": "a", "x": 1, "y": 2}, {"type": "c"}, {"type": "a", "x": 1, "c": _nested(8)},
                  {"c": _nested(8, "c", {"type": "a"})}, {"c": _nested(8, "c", {"type": "a", "x": 2})}, {"type": "b", "y": 3, "c": {"type": "b"}}]


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"c": {"$ref": "#"}, "type": {"enum": ["a", "b"]}}, "if": {"properties": {"type": {"const": "a"}}},
     "then": {"properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    {"properties": {"c": {"$ref": "#"}}, "if": {"properties": {"type": {"const": "a"}}, "required": ["type"]},
     "then": {"properties": {"x": {"type": "integer"}, "type": True, "c": True}, "required": ["x"], "additionalProperties": False},
     "else": {"properties": {"y": {"type": "integer"}}}},
    {"properties": {"c": {"$ref": "#"}}, "if": {"properties": {"type": {"const": "a"}}}, "then": {"$ref": "#/$defs/t"},
     "$defs": {"t": {"type": "object", "required": ["x"]}}},
    {"type": ["object", "null"], "properties": {"c": {"$ref": "#"}}, "if": {"properties": {"type": {"const": "b"}}}, "then": False},
])
def test_if_of_an_object_schema_is_merged_with_then_and_else(schema):
    """``if`` / ``then`` / ``else`` over objects (JsonSchemaStore/openrewrite, typo3: a tag member
    decides which members are allowed) where the condition's ways to fail are object schemas:
    the condition merged with ``then``, or a way to fail it merged with ``else``, each one object
    schema whose members call rules (``then`` closed by ``additionalProperties: false`` used to
    stop the member conditions, and every value was inlined)."""
    check_against_jsonschema(schema, _TAGGED_VALUES + [{"c": v} for v in _TAGGED_VALUES])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("shape", ["all_of", "member"])
@pytest.mark.parametrize("dependent", [
    {"dependentSchemas": {"website": {"properties": {"type": {"enum": ["section"]}}}}},
    {"dependentRequired": {"website": ["type"]}},
    {"dependentSchemas": {"website": {"properties": {"type": {"enum": ["section"]}}}}, "dependentRequired": {"type": ["id"]}},
])
def test_dependencies_merge_as_object_views(dependent, shape):
    """An object schema with ``dependentSchemas`` / ``dependentRequired`` under ``allOf`` or merged
    as a member (WashingtonPost's reference ``referent``, a draft-04 ``dependencies``, narrowed
    by the ``allOf`` around it): per name, the name absent or present with what it asks for, two
    object schemas to merge. It was no object view, so the schemas were intersected and the free
    member's values inlined and cut at ``max_depth``."""
    referent = {"type": "object", "additionalProperties": False, "required": ["id"], **dependent, "properties": {
        "id": {"type": "string"}, "free": {"type": "object", "additionalProperties": {}}, "type": {"type": "string"}, "website": {"type": "string"}}}
    narrowed = {"properties": {"type": {"enum": ["section", "page"]}}}
    if shape == "all_of":
        schema = {"allOf": [referent, narrowed]}
    else:
        schema = {"type": "object", "properties": {"r": referent}, "allOf": [{"properties": {"r": narrowed}}]}
    values = [{"id": "i"}, {"id": "i", "website": "w"}, {"id": "i", "website": "w", "type": "section"}, {"id": "i", "website": "w", "type": "page"},
              {"id": "i", "type": "page"}, {"type": "page"}, {"id": "i", "type": "post"}, {"id": "i", "other": 1}, {"id": "i", "free": {"a": [1]}},
              {"id": "i", "website": "w", "type": "section", "free": _nested(8, "x", [1, {"y": None}])}, {"id": "i", "free": _nested(8)}, [], "s"]
    check_against_jsonschema(schema, values if shape == "all_of" else [{"r": v} for v in values] + [{}, {"r": 1}])
    assert lowered(schema)[2] == ()


_PLUGINS = {"common": {"properties": {"name": {"type": "string"}, "config": {"type": "object"}}}}


@pytest.mark.parametrize("schema", [
    # JsonSchemaStore/discovery (meltano): a plugin is its common part and its own, nothing else
    {"$defs": _PLUGINS, "type": "object", "$ref": "#/$defs/common", "unevaluatedProperties": False,
     "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}},
    {"$defs": _PLUGINS, "type": "object", "allOf": [{"$ref": "#/$defs/common"}, {"properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}],
     "unevaluatedProperties": {"type": "integer"}},
    # Github_hard/o10421: a reference beside the names it requires
    {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"}, "config": {"type": "object"},
                                                         "children": {"type": "array", "items": {"$ref": "#"}}}}},
     "$ref": "#/$defs/node", "required": ["name"]},
])
def test_a_reference_beside_object_keywords_and_unevaluated_properties_merge_as_object_views(schema):
    """A ``$ref`` beside object keywords (2019-09 on) is one more part that always applies, so it
    merges as an object schema like an ``allOf`` branch; ``unevaluatedProperties`` beside
    ``allOf`` / ``$ref`` is said as properties (each evaluated name, ``true``) and
    ``additionalProperties`` first. The two were intersected, and the free ``config`` values
    inlined and cut at ``max_depth``."""
    values = [{"name": "n"}, {"name": 1}, {"other": 1}, {"other": "s"}, {}, {"config": {"x": [1, {"y": 2}]}}, {"name": "n", "config": _nested(8, "x")},
              {"name": "n", "children": [{"name": "a"}, {"name": "b", "other": 1}]}, [], "s"]
    deep = {"name": "n", "children": [{"name": "m", "config": _nested(8, "x", [])}]}
    check_against_jsonschema(schema, values + [deep, {"name": "n", "children": [deep, {"other": 2}]}])
    assert lowered(schema)[2] == ()


_NODE = {"properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}, "unevaluatedProperties": False}


@pytest.mark.parametrize("schema", [
    # a branch's own unevaluatedProperties: it evaluates name and config only, whatever the outer
    # properties say
    {"type": "object", "properties": {"config": {"type": "object"}, "other": {}},
     "allOf": [{"properties": {"name": {"type": "string"}, "config": True}, "unevaluatedProperties": False}]},
    # the same behind a reference, recursive
    {"$defs": {"node": _NODE}, "type": "object", "allOf": [{"$ref": "#/$defs/node"}], "required": ["name"]},
    # a branch whose names come through its own allOf and $ref
    {"$defs": _PLUGINS, "type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
     "allOf": [{"$ref": "#/$defs/common", "allOf": [{"properties": {"children": True}}], "unevaluatedProperties": {"type": "integer"}}]},
    # in anyOf branches, and in a dependent schema
    {"type": "object", "properties": {"config": {"type": "object"}},
     "anyOf": [{"properties": {"name": {"type": "string"}, "config": True}, "unevaluatedProperties": False}, {"required": ["other"]}]},
    {"type": "object", "properties": {"config": {"type": "object"}, "name": {"type": "string"}},
     "dependentSchemas": {"name": {"properties": {"config": True, "name": True}, "unevaluatedProperties": False}}},
])
def test_unevaluated_properties_of_a_branch_merges_as_object_views(schema):
    """``unevaluatedProperties`` inside an ``allOf`` / ``anyOf`` branch, a ``$ref`` target or a
    dependent schema sees only what that schema object evaluates, so it is said by view keywords
    there too (each evaluated name a property, the rest ``additionalProperties``). Such a branch
    was no object view: the schemas were intersected, and the free ``config`` values (or the
    recursive ``children``) inlined and cut at ``max_depth``."""
    values = [{}, {"name": "n"}, {"name": 1}, {"other": 1}, {"other": "s", "name": "n"}, {"config": {"x": [1, {"y": 2}]}},
              {"name": "n", "config": _nested(8, "x")}, {"name": "n", "children": [{"name": "a"}, {"name": "b", "other": 1}]},
              {"name": "n", "children": [{"name": "a", "children": []}]}, {"config": 1}, [], "s"]
    deep = {"name": "n", "children": [{"name": "m", "config": _nested(8, "x", [])}]}
    for _ in range(6):
        deep = {"name": "n", "children": [deep]}
    check_against_jsonschema(schema, values + [deep, {"name": "n", "children": [deep, {"other": 2}]}])
    assert lowered(schema)[2] == ()


_OPERATORS = ["eq", "ne", "lt", "le", "gt", "ge", "in", "has", "not"]


@pytest.mark.parametrize("inline_args", [False, True])
@pytest.mark.parametrize("operand", [{"type": "integer"}, {"type": "string", "maxLength": 2}])
def test_one_of_branches_that_each_require_a_name_of_their_own_keep_calls(operand, inline_args):
    """``oneOf`` of nine object branches, each requiring one operator name
    (JsonSchemaStore/component_spec: ``{"required": ["=="], "properties": {"==": …}}``): an object
    fails another branch by that name absent or its value invalid, one way to fail rather than
    two, so a branch is merged with one object schema per other branch, not with each of 2⁸
    choices (past the cap of merged schemas, every value was inlined and cut at ``max_depth``).
    With ``inline_args`` each branch spells its own equal copy of the recursive member: the
    merged schemas share one, so a parse does not split nine ways at each level."""
    args = lambda: {"type": "array", "items": {"$ref": "#"}} if inline_args else {"$ref": "#/$defs/args"}  # noqa: E731
    branches = [{"type": "object", "required": [op], "properties": {op: operand, "args": args()}} for op in _OPERATORS]
    schema = {"oneOf": branches, "$defs": {"args": {"type": "array", "items": {"$ref": "#"}}}}
    good = 1 if operand["type"] == "integer" else "ab"
    values = [None, 1, {}, {"eq": good}, {"eq": good, "ne": good}, {"eq": good, "ne": [good]}, {"eq": [good]}, {"eq": good, "args": []},
              {"eq": good, "args": [{"ne": good}]}, {"eq": good, "args": [{"ne": good, "lt": good}]}, {"x": good, "gt": good},
              {"eq": good, "ne": "abc", "lt": {}, "has": None}, {"in": good, "not": good, "args": [{"le": good}]}]
    shallow, deep = {"eq": good}, {"eq": good}
    for op in _OPERATORS[:5]:
        shallow = {op: good, "args": [shallow]}
    for op in _OPERATORS * 4:
        deep = {op: good, "args": [deep]}
    check_against_jsonschema(schema, values + [shallow, {"eq": good, "args": [shallow, {"ge": good, "ne": good}]}])
    spec, expr, notes = lowered(schema)
    assert notes == ()
    # 37 levels, each one operator with a valid operand (jsonschema's oneOf would try 9^37 paths)
    assert matches(expr, spec.serialize(order_instance(spec, deep)))
    assert not matches(expr, spec.serialize(order_instance(spec, {"eq": good, "args": [{**deep, "ne": good}]})))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"c": {"$ref": "#"}, "ab": {"type": "object", "properties": {"n": {"$ref": "#"}}, "required": ["n"]}},
     "patternProperties": {"^a": {"type": "object", "properties": {"m": {"type": "integer"}}}}},
    {"type": "object", "properties": {"c": {"$ref": "#"}, "ab": {"type": "array", "items": {"$ref": "#"}}},
     "patternProperties": {"^a": {"type": ["array", "string"], "maxItems": 2}}},
    # a name two patterns match (Github_hard/o82144: ".*" and "github")
    {"type": "object", "properties": {"c": {"$ref": "#"}},
     "patternProperties": {"^a": {"type": "object", "properties": {"on": {"type": "boolean"}}}, "^ab": {"type": "object", "properties": {"n": {"$ref": "#"}}}}},
])
def test_a_name_two_schemas_constrain_keeps_calls(schema):
    """A member whose name a property and a pattern (or two patterns) both constrain with
    schemas that hold calls: its value is one value of their ``allOf`` (merged where both are
    object or array schemas), so the object keeps its calls (the two value languages were
    intersected there, and the whole object was inlined and cut at ``max_depth``)."""
    inner = [{}, {"n": {}}, {"n": 1}, {"m": 1}, {"m": "x", "n": {}}, {"on": True}, {"on": 1, "n": {}}, [], [{}], [{}, {}, {}], [1], "s", 1, None,
             {"n": _nested(8, "c")}, [_nested(8, "c")]]
    values = [{"ab": v} for v in inner] + [{"az": v} for v in inner] + [{"b": v} for v in inner]
    check_against_jsonschema(schema, values + [_nested(8, "c", v) for v in values])
    assert lowered(schema)[2] == ()


@pytest.mark.parametrize("negated", [
    {"type": ["string", "array"], "minLength": 2, "items": {"type": "string"}},
    {"type": ["object", "number"], "minimum": 3, "required": ["a"], "properties": {"a": {"type": "integer"}}},
    {"type": ["array", "object", "string"], "pattern": "^x", "maxItems": 1, "required": ["b"], "multipleOf": 2},
])
def test_not_of_a_schema_of_several_types_keeps_calls(negated):
    """``not`` of a schema that constrains several types (Github_hard/o63152: strings with a
    ``format`` or arrays of them): the arrays and objects it rejects are read from its array
    and object keywords alone (a string keyword says nothing of them), so they stay calls
    (the keyword of another type made the array or object views decline, and the value was
    inlined)."""
    schema = {"type": "object", "properties": {"c": {"$ref": "#"}, "v": {"not": negated}}}
    inner = [None, True, 1, 4, 3.5, "", "x", "xy", "ab", [], ["s"], ["s", "t"], [1], ["s", {}], {}, {"a": 1}, {"a": "s"}, {"a": 1, "b": 2},
             {"b": _nested(8, "c")}, [_nested(8, "c")]]
    values = [{"v": v} for v in inner]
    check_against_jsonschema(schema, values + [_nested(8, "c", v) for v in values])
    assert lowered(schema)[2] == ()


def _alternately_nested(value: object, levels: int) -> object:
    """``value`` inside ``levels`` alternating one-item arrays and one-member objects."""
    for level in range(levels):
        value = {"x": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("schema", [
    # neither a string nor an array of strings and objects (Github_hard/o36012's pfx): objects free
    {"not": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": ["string", "object"]}}]}},
    # overlapping object shapes: exactly one holds, members free but where a shape says more
    {"oneOf": [{"type": "object", "required": ["a"]},
               {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "array"}}]},
    # names that neither set holds alone (Handwritten/pnmp2's shape), member values free
    {"type": "object", "maxProperties": 2, "not": {"anyOf": [{"propertyNames": {"enum": ["a", "c"]}}, {"propertyNames": {"enum": ["b", "c"]}}]}},
    # a condition on a free member, and a complement of arrays of objects
    {"if": {"type": "object", "required": ["k"]}, "then": {"properties": {"k": {"type": "array", "items": {"type": "integer"}}}},
     "else": {"not": {"type": "array", "items": {"type": "object"}}}},
])
def test_free_values_under_complements_and_intersections_keep_any_depth(schema):
    """A value that a complement or an intersection does not look inside stays a call of the
    free-value rule, which ``&`` and ``¬`` read through only where a part looks inside it: no
    depth cut (nothing narrowed), and values nested twice ``max_depth`` deep are judged as
    jsonschema judges them, both ways."""
    assert lowered(schema)[2] == ()
    deep = _alternately_nested(1, 8)
    instances = [
        {}, {"a": deep}, {"a": ["s"]}, {"a": ["s", deep]}, {"a": 3}, {"a": 3, "b": [deep]}, {"a": 3, "b": deep}, {"b": [deep]},
        {"k": [1, 2]}, {"k": [deep]}, {"k": deep, "a": 1}, {"c": deep}, {"a": 1, "b": [deep]}, {"a": deep, "c": 2}, {"b": 1, "c": 2},
        [deep], [[1], [1, 2]], [[1, 2], [deep, deep]], [[1, 2], deep], [[deep, 1]], [{}, {"x": deep}], [{}, deep], ["s", {"x": deep}],
        [], "s", deep, _alternately_nested([1, 2], 9),
    ]
    check_against_jsonschema(schema, instances)


def test_free_value_calls_meet_under_intersection_and_complement_and_no_other_calls_do():
    """Calls of a free-value rule may stand under & and ¬: a value every part leaves free stays one
    call (any depth), one a part spells out is read through; calls of another rule still raise."""
    free = Rule("toy value")  # 0, or an array of toy values: followed by "," "]" or the end only
    free.free_value = True
    value = E.call(free)
    free.body = E.alt(E.literal("0"), E.cat(E.literal("["), E.opt(E.cat(value, E.star(E.cat(E.literal(","), value)))), E.literal("]")))
    pair = E.cat(E.literal("["), value, E.literal(","), value, E.literal("]"))
    first_not_zero_list = E.diff(pair, E.cat(E.literal("[[0],"), value, E.literal("]")))
    deep = "[" * 12 + "0" + "]" * 12
    accepted = ["[0,0]", f"[[[0]],{deep}]", f"[{deep},0]", "[[],[0,0]]", "[[0,0],[0]]"]
    rejected = ["[[0],0]", f"[[0],{deep}]", "[0]", "[0,0,0]", "[[0],[0,[]]]", "[1,0]"]
    assert all(matches(first_not_zero_list, text) for text in accepted)
    assert not any(matches(first_not_zero_list, text) for text in rejected)
    both = E.inter(pair, E.cat(E.literal("["), value, E.literal(",[0]]")))  # the second is [0]
    assert matches(both, f"[{deep},[0]]") and not matches(both, f"[{deep},[0,0]]") and not matches(both, "[0,0]")
    other = Rule("a value rule")
    other.body = E.literal("0")
    with pytest.raises(E.CallsUnderAlgebraError):
        E.inter(pair, E.cat(E.literal("["), E.call(other), E.literal(",0]")))
    with pytest.raises(E.CallsUnderAlgebraError):
        E.neg(E.call(other))
