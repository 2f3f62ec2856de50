"""SureInstances: a deferred value rule is known to match something without being built, only when
the instance it names is one (jsonschema the judge), and then the first mask does not build it."""

from __future__ import annotations

from grammask import GrammarCompiler, JsonSchema
from grammask.grammars.fsm import patterns
from grammask.grammars.fsm.disjoint import DisjointnessProver
from grammask.grammars.fsm.sure import MAX_SURE_DEPTH, MAX_VISITS, UNSURE, SureInstances
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.schemas.resolve import Resolver, subschemas
from grammask.schemas.validate import instance_validator
from tests.conftest import CORPORA, read_jsonl

_COMBINATORS = frozenset(("$ref", "anyOf", "oneOf", "enum", "const"))


def test_every_sure_instance_of_a_corpus_subschema_is_valid(corpora):
    roots = [row["schema"] for path in sorted((CORPORA / "jsonschemabench" / "schemas").glob("*.dev.jsonl"))
             for row in read_jsonl(path)]
    roots += [row["schema"] for row in read_jsonl(CORPORA / "json-schema-test-suite" / "draft2020-12.dev.jsonl")]
    sure = unsure = through_combinators = 0
    for root in roots:
        if not isinstance(root, dict):
            continue
        resolver = Resolver(root)
        finder = SureInstances.of_document(root, resolver, DisjointnessProver(root, resolver))
        judge = instance_validator(root, search=patterns.search, is_regex=patterns.is_regex)
        for path, sub in subschemas(root):
            if not isinstance(sub, dict) or resolver.base_of(sub) != resolver.root_base:
                continue  # draft 4 has no boolean schemas; the judge reads references from the root's base
            instance = finder.instance(sub)
            if instance is UNSURE:
                unsure += 1
                continue
            sure += 1
            through_combinators += bool(_COMBINATORS & sub.keys())
            assert judge.evolve(schema=sub).is_valid(instance), (path, sub, instance)
    assert sure > 5000 and unsure > 1000 and through_combinators > 500


def test_unsure_where_a_keyword_or_bound_could_empty_the_schema():
    for schema in [False, {"enum": [1], "type": "string"}, {"const": 1, "enum": [2]}, {"type": "object", "required": ["x"], "additionalProperties": False},
                   {"type": "string", "minLength": 3, "maxLength": 2}, {"type": "array", "minItems": 1, "items": False},
                   {"$ref": "#"}, {"type": "string", "format": "email"}, {"not": {}}, {"type": "integer", "minimum": 3},
                   {"oneOf": [{"type": "string"}, {"type": "integer"}]}]:  # no prover given: no oneOf answered
        assert SureInstances().instance(schema) is UNSURE, schema
    assert SureInstances().instance({"type": ["object", "null"], "required": ["x"], "additionalProperties": False}) is None
    assert SureInstances().instance({"type": "array", "minItems": 2, "items": {"type": "object", "required": ["a"]}}) == [{"a": None}] * 2
    assert SureInstances().instance({"enum": ["a", 2], "type": "integer"}) == 2


def test_annotations_and_extension_keywords_are_read_past():
    """Real schemas carry vendor keywords (``x-…``, ``javaType``) beside their assertions; validators
    ignore keywords JSON Schema does not define, so the instance is named as without them. A real
    assertion beside them still makes it give up."""
    tagged = {"type": "object", "required": ["id"], "javaType": "com.example.Item",
              "x-intellij-html-description": "<b>item</b>", "properties": {"id": {"type": "string", "x-order": 1}}}
    assert SureInstances().instance(tagged) == {"id": ""}
    assert SureInstances().satisfies(tagged, {"id": "a"}) and not SureInstances().satisfies(tagged, {})
    assert SureInstances().instance({**tagged, "minProperties": 2}) is UNSURE
    assert SureInstances().instance({"type": "string", "x-pattern": "[", "pattern": "^a"}) is UNSURE


def test_references_and_branches_are_followed_where_the_instance_is_checked():
    root = {
        "$defs": {"tagged": {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": ["a", "b"]}}},
                  "loop": {"$ref": "#/$defs/loop"}},
        "properties": {
            "ref": {"$ref": "#/$defs/tagged"},
            "any": {"type": "object", "anyOf": [{"type": "string"}, {"required": ["x"]}]},
            "one": {"oneOf": [{"type": "array", "items": {"type": "string"}}, {"required": ["y"]}]},
            "overlap": {"oneOf": [{"type": "string"}, {"type": ["string", "null"]}]},
            "loop": {"$ref": "#/$defs/loop"},
            "remote": {"$ref": "https://example.com/elsewhere.json"},
        },
    }
    resolver = Resolver(root)
    finder = SureInstances.of_document(root, resolver, DisjointnessProver(root, resolver))
    found = {name: finder.instance(sub) for name, sub in root["properties"].items()}
    assert found["ref"] == {"kind": "a"}
    assert found["any"] == {"x": None}  # the string branch fails the sibling "type"
    assert found["one"] is None  # [] satisfies both branches ("required" reads objects only); null only the second
    assert found["overlap"] is None  # "" fits both branches; null only the second
    assert found["loop"] is UNSURE and found["remote"] is UNSURE


def test_the_first_mask_leaves_surely_productive_values_unbuilt(llama_info):
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        "b": {"type": "array", "items": {"type": "object", "properties": {"y": {"type": "integer"}}}},
        "c": {"type": "object", "properties": {"z": {"type": "integer", "minimum": 3}}, "required": ["z"]},
    }, "required": ["a"]}
    grammar = GrammarCompiler(llama_info, backend="fsm").compile(JsonSchema(schema))
    grammar.matcher().fill_next_token_bitmask(allocate_token_bitmask(1, llama_info.vocab_size))
    pending = {rule.name for rule in grammar._lowering._lowerer._deferred if rule.builder is not None}
    assert pending >= {"/properties/a", "/properties/b"}
    assert "/properties/c" not in pending  # its bound needs building to know it matches something


def test_a_wide_reference_graph_is_read_a_bounded_number_of_times():
    # Every definition is anyOf five references to others: unfolded, 5^depth paths. Facts are read
    # once per subschema and an instance search visits at most MAX_VISITS subschemas.
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{(7 * i + j) % 20}"} for j in range(5)]} for i in range(20)}
    root = {"$defs": defs, "oneOf": [{"$ref": "#/$defs/d0"}, {"$ref": "#/$defs/d1"}]}
    visits = []

    class CountingProver(DisjointnessProver):
        def _read_facts(self, schema, base, depth):
            visits.append(schema)
            return super()._read_facts(schema, base, depth)

    class CountingFinder(SureInstances):
        def _instances(self, schema, depth, kinds, budget):
            visits.append(schema)
            return super()._instances(schema, depth, kinds, budget)

    resolver = Resolver(root)
    prover = CountingProver(root, resolver)
    assert not prover.disjoint(root["oneOf"], resolver.root_base, {"object"})  # nothing is known of either
    assert len(visits) <= 2 * 5 * 20 + 2  # each definition and each of its branches once
    visits.clear()
    finder = CountingFinder(resolve=lambda s: resolver.resolve(s["$ref"], resolver.root_base).schema, rejects=prover.rejects)
    assert finder.instance(root) is UNSURE  # no branch ever reaches a value
    assert len(visits) <= MAX_VISITS + MAX_SURE_DEPTH  # one look past the budget per open level at most
