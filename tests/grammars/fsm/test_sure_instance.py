"""sure_instance: a deferred value rule is known to match something without being built, only when
the instance it names is one (jsonschema the judge), and then the first mask does not build it."""

from __future__ import annotations

from grammask import GrammarCompiler, JsonSchema
from grammask.grammars.fsm.json_schema import UNSURE, sure_instance
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.schemas.resolve import subschemas
from grammask.schemas.validate import validator_class
from tests.conftest import CORPORA, read_jsonl


def test_every_sure_instance_of_a_corpus_subschema_is_valid(corpora):
    roots = [row["schema"] for path in sorted((CORPORA / "jsonschemabench" / "schemas").glob("*.dev.jsonl"))
             for row in read_jsonl(path)]
    roots += [row["schema"] for row in read_jsonl(CORPORA / "json-schema-test-suite" / "draft2020-12.dev.jsonl")]
    sure = unsure = 0
    for root in roots:
        if not isinstance(root, dict):
            continue
        cls = validator_class(root)
        for path, sub in subschemas(root):
            if not isinstance(sub, dict):  # draft 4 has no boolean schemas to validate against
                continue
            instance = sure_instance(sub)
            if instance is UNSURE:
                unsure += 1
                continue
            sure += 1
            assert cls(sub).is_valid(instance), (path, sub, instance)
    assert sure > 5000 and unsure > 1000


def test_unsure_where_a_keyword_or_bound_could_empty_the_schema():
    for schema in [False, {"enum": [1]}, {"type": "object", "required": ["x"], "additionalProperties": False},
                   {"type": "string", "minLength": 3, "maxLength": 2}, {"type": "array", "minItems": 1, "items": False},
                   {"$ref": "#"}, {"type": "string", "format": "email"}, {"not": {}}, {"type": "integer", "minimum": 3}]:
        assert sure_instance(schema) is UNSURE, schema
    assert sure_instance({"type": ["object", "null"], "required": ["x"], "additionalProperties": False}) is None
    assert sure_instance({"type": "array", "minItems": 2, "items": {"type": "object", "required": ["a"]}}) == [{"a": None}] * 2


def test_the_first_mask_leaves_surely_productive_values_unbuilt(llama_info):
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        "b": {"type": "array", "items": {"type": "object", "properties": {"y": {"type": "integer"}}}},
        "c": {"type": "object", "properties": {"z": {"enum": [1, 2]}}, "required": ["z"]},
    }, "required": ["a"]}
    grammar = GrammarCompiler(llama_info, backend="fsm").compile(JsonSchema(schema))
    grammar.matcher().fill_next_token_bitmask(allocate_token_bitmask(1, llama_info.vocab_size))
    pending = {rule.name for rule in grammar._lowering._lowerer._deferred if rule.builder is not None}
    assert pending >= {"/properties/a", "/properties/b"}
    assert "/properties/c" not in pending  # its enum needs building to know it matches something
