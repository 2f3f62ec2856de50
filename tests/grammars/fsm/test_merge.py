"""Object schemas under allOf / anyOf / disjoint oneOf are merged (value positions keep their calls,
nothing is unrolled to max_depth), and dependentRequired is tracked along the slot chain; the
languages agree with jsonschema on instances."""

from __future__ import annotations

import itertools
import json

import pytest

from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import merge as M
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance
from grammask.grammars.fsm.pushdown import matches
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.grammars.spec import JsonSchema
from grammask.schemas.validate import validator_class

DISCRIMINATED = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
    "required": ["kind"],
    "additionalProperties": False,
    "anyOf": [
        {"properties": {"kind": {"const": "x"}}, "required": ["a"]},
        {"properties": {"kind": {"const": "y"}}, "required": ["b"], "x-note": "an unknown keyword is an annotation"},
    ],
}
INHERITED = {
    "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}}, "required": ["id"]}},
    "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string", "maxLength": 3}, "id": {"minimum": 0}}, "required": ["name"]}],
}
UNTYPED = {"anyOf": [{"properties": {"p": {"type": "null"}}}, {"required": ["q"]}], "required": ["r"]}
DEPENDENT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {}, "c": {"type": "string"}},
    "dependentRequired": {"a": ["c"], "c": ["b"], "z": ["a"]},
}
VALUES = [None, 1, -2, "s", "long", True, [], ["t"], [1], {}]
NAMES = ["kind", "a", "b", "id", "tags", "name", "p", "q", "r", "c", "z", "w"]


def candidates(rng_seed: int, count: int = 400):
    """Objects over a few names and values, plus a few non-objects."""
    import random

    rng = random.Random(rng_seed)
    yield from VALUES
    yield from ({"kind": "x", "a": 3}, {"kind": "y", "b": ["u"]}, {"kind": "x", "a": 3, "b": []}, {"id": 2, "name": "ab"},
                {"id": -1, "name": "ab"}, {"id": 2, "name": "abcd"}, {"r": 1, "q": 2}, {"r": 1, "p": None}, {"a": 1, "c": "s", "b": 0}, {"id": 0, "tags": [1], "name": ""})
    for _ in range(count):
        names = rng.sample(NAMES, rng.randint(0, 4))
        yield {n: ("x" if n == "kind" and rng.random() < 0.4 else "y" if n == "kind" and rng.random() < 0.5 else rng.choice(VALUES)) for n in names}


@pytest.mark.parametrize("schema", [DISCRIMINATED, INHERITED, UNTYPED, DEPENDENT], ids=["discriminated", "inherited", "untyped", "dependent"])
def test_merged_languages_agree_with_jsonschema(schema):
    spec = JsonSchema(schema)
    expr, unenforced, narrowed = lower_json_schema(spec)
    assert E.has_calls(expr)
    assert unenforced == () and narrowed == ()  # no depth cut: nothing fell back to the inlined algebra
    validator = validator_class(schema)(schema)
    agreed = 0
    for instance in candidates(len(json.dumps(schema))):
        text = spec.serialize(order_instance(spec, instance))
        assert matches(expr, text) == validator.is_valid(instance), (schema, text)
        agreed += validator.is_valid(instance)
    assert agreed >= 2  # the sample reaches valid instances too


ITEMS = {
    "$defs": {
        "base": {"type": "object", "properties": {"list": {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 2}}},
        "a": {"type": "object", "properties": {"kind": {"enum": ["x", "y"]}, "id": {"type": "integer"}}},
        "b": {"type": "object", "properties": {"kind": {"enum": ["y", "z"]}}, "required": ["kind"]},
    },
    "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"list": {"items": {"allOf": [{"$ref": "#/$defs/b"}]}, "minItems": 1}}}],
}


def reachable_nodes(expr):
    """Every node the expression's rules reach."""
    from grammask.grammars.fsm.rules import Rule, reachable_rules

    stack, seen = [rule.body for rule in reachable_rules(Rule("#", expr))], {}
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(a for a in node.args if isinstance(a, E.Expr))
    return seen.values()


def test_array_schemas_under_all_of_merge_into_one_with_merged_items():
    # The base's list of a's and the refinement's list of b's: one list whose items are a ∩ b,
    # merged as one object schema, not an intersection of two list languages.
    spec = JsonSchema(ITEMS)
    expr, unenforced, narrowed = lower_json_schema(spec)
    assert unenforced == () and narrowed == ()
    assert not [n for n in reachable_nodes(expr) if n.kind == E.AND_KIND]
    validator = validator_class(ITEMS)(ITEMS)
    elements = [{"kind": "y"}, {"kind": "y", "id": 3}, {"kind": "x"}, {"kind": "z"}, {"id": 1}, {}, 1, "s"]
    lists = [list(c) for n in range(4) for c in itertools.product(elements[:5], repeat=n) if n < 3 or c[0] == c[1] == c[2]]
    verdicts = []
    for instance in [{"list": value} for value in lists] + [{}, {"list": "s"}, [], 1]:
        text = spec.serialize(order_instance(spec, instance))
        verdicts.append(matches(expr, text))
        assert verdicts[-1] == validator.is_valid(instance), text
    assert sum(verdicts) >= 5 and not all(verdicts)


def test_array_views_carry_one_contains():
    """``contains`` (with its counts) is part of an array view; two views that both have one do
    not merge (no one schema says both), and a bad count is no view."""
    view = M.array_view({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 3}, "maxContains": 2})
    merged = M.merge_array_views(view, M.array_view({"minItems": 1}))
    assert M.array_view_to_schema(merged) == {
        "type": ["array"], "items": {"type": "integer"}, "minItems": 1, "contains": {"minimum": 3}, "minContains": 1, "maxContains": 2,
    }
    assert M.merge_array_views(view, M.array_view({"contains": {"type": "string"}})) is None
    assert M.array_view({"contains": {}, "minContains": -1}) is None
    assert M.array_view({"contains": 3}) is None


def test_view_types_name_the_other_types_a_view_allows_whole():
    assert M.object_view({"type": ["object", "null"]})["types"] == {"object", "null"}
    assert M.object_view({"type": ["array", "null"]}) is None and M.array_view({"type": "object"}) is None
    assert M.array_view({"type": ["array", "nothing"]}) is None
    assert M.meet_types(frozenset({"object", "integer", "null"}), frozenset({"object", "number"})) == {"object", "integer"}
    assert M.meet_types(None, frozenset({"array"})) == {"array"} and M.meet_types(None, None) is None
    merged = M.merge_views(M.object_view({"type": ["object", "null"]}), M.object_view({"type": ["object", "string"], "required": ["a"]}))
    assert M.view_to_schema(merged) == {"type": ["object"], "required": ["a"]}


def test_array_schemas_with_other_keywords_are_not_merged():
    # A tuple form (or uniqueItems…) is no array view: the intersection is kept, exact.
    schema = {"allOf": [{"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}}, {"items": {"minLength": 1}, "maxItems": 2}]}
    spec = JsonSchema(schema)
    expr, unenforced, _ = lower_json_schema(spec)
    assert unenforced == () and [n for n in reachable_nodes(expr) if n.kind == E.AND_KIND]
    validator = validator_class(schema)(schema)
    for instance in [[], [1], [1, "a"], [1, ""], ["a"], [1, "a", "b"], "s"]:
        assert matches(expr, spec.serialize(instance)) == validator.is_valid(instance), instance


def test_dev_corpus_inherited_lists_compile_without_a_product(corpora, llama_info, llama_hf):
    # Github_hard/o65425: allOf of a base statement and a refinement, each with a "data" list of
    # another object kind. The two list languages were intersected, and the first fill searched their product past max_states
    # (then moved to xgrammar, which ignores one of the two item schemas). Both kinds require
    # their own data_type, so only an empty list is valid.
    from grammask.grammars.fsm.backend import FsmBackend
    from tests.conftest import read_jsonl

    schema = next(r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / "Github_hard.dev.jsonl") if r["id"] == "Github_hard/o65425")
    spec = JsonSchema(schema)
    expr, unenforced, _ = lower_json_schema(spec)
    assert unenforced == ()
    company = {"name": "Acme", "jurisdiction": "uk"}
    parcel = {"properties": {"shareholders": [{"name": "Ann"}]}}
    instances = [
        {"company": company, "data": []},
        {"company": company, "data": [parcel], "source_jurisdiction": "uk"},
        {"company": company, "data": [{"data_type": "share_parcel", **parcel}]},  # not a financial payment
        {"company": company, "data": [{"properties": {}}]},  # no shareholders
        {"company": {"name": "Acme"}, "data": []},
        {"zzz": 1, "company": company, "data": []},
    ]
    validator = validator_class(schema)(schema)
    assert [validator.is_valid(i) for i in instances] == [True, False, False, False, False, True]  # hand-checked
    for instance in instances:
        assert matches(expr, spec.serialize(order_instance(spec, instance))) == validator.is_valid(instance), instance
    matcher = FsmBackend(llama_info).compile(spec).matcher()  # masks, not only bytes: rows need liveness
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    text = spec.serialize(order_instance(spec, instances[-1]))
    for token in [*llama_hf.encode(text, add_special_tokens=False), llama_info.eos_ids[0]]:
        matcher.fill_next_token_bitmask(bitmask)
        assert bitmask[0, token // 32] >> (token % 32) & 1 and matcher.accept_token(token)
    assert matcher.is_terminated()
