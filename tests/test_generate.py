"""generate_json on tiny random HF models (Llama, GPT-2) with the real Llama-3.2 tokenizer; every
output is checked against jsonschema independently of grammask's own validation."""

from __future__ import annotations

import inspect
import json
import random

import pytest
import torch

import regex

from grammask import Ebnf, GrammarCompiler, JsonSchema, Regex, StructuralTag, Tag
from grammask.errors import InvalidOutputError, InvalidParameterError, InvalidSchemaError, UnsupportedFeatureError
from grammask.generate import generate_json, generate_json_batch, generate_structured
from grammask.schemas.load import load_schema
from grammask.sampler import SamplingParams
from grammask.validation import output_validator
from tests.conftest import read_jsonl
from tests.tiny_models import tiny_gpt2, tiny_llama

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
CHOICE = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}}, "required": ["ok", "n"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2()


@pytest.fixture(scope="module")
def fsm_compiler(llama_info):
    return GrammarCompiler(llama_info, backend="fsm")


@pytest.fixture(scope="module")
def xgr_compiler(llama_info):
    return GrammarCompiler(llama_info, backend="xgrammar")


def _independently_valid(schema, text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return output_validator(schema).is_valid(value)


@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_budget_aware_output_is_valid_and_matches_tokens(request, model_name, llama_hf, llama_info, fsm_compiler):
    model = request.getfixturevalue(model_name)
    result = generate_json(PERSON, model, llama_hf, max_new_tokens=40, compiler=fsm_compiler)
    assert result.backend == "fsm" and result.budget_aware
    assert result.valid, result.errors
    assert result.finish_reason == "stop"
    assert _independently_valid(PERSON, result.text)
    assert result.value == json.loads(result.text)
    assert len(result.token_ids) <= 40
    assert result.token_ids[-1] in llama_info.eos_ids
    assert b"".join(llama_info.token_bytes[t] for t in result.token_ids[:-1]).decode() == result.text
    assert result.timings.steps + result.forced_tokens == len(result.token_ids)
    assert result.forced_tokens > 0  # '{"name":"' and '","age":' are forced


def test_greedy_matches_unconstrained_argmax_where_allowed(llama, llama_hf, xgr_compiler):
    """With a schema that allows exactly one value, the output is that value whatever the model."""
    schema = {"const": {"a": [1, 2]}}
    result = generate_json(schema, llama, llama_hf, max_new_tokens=30, compiler=xgr_compiler)
    assert result.valid and result.value == {"a": [1, 2]}


def test_without_budget_a_cut_off_output_is_length_and_never_valid(llama, llama_hf, xgr_compiler):
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    result = generate_json(schema, llama, llama_hf, max_new_tokens=4, compiler=xgr_compiler)
    assert not xgr_compiler.compile(__import__("grammask").JsonSchema(schema)).supports_budget
    assert result.finish_reason == "length"
    assert not result.valid and result.value is None
    assert result.errors == ("cut off at max_new_tokens=4 before the structure ended",)
    with pytest.raises(InvalidOutputError, match="finish_reason='length'"):
        generate_json(schema, llama, llama_hf, max_new_tokens=4, compiler=xgr_compiler, strict=True)


def test_unenforced_keyword_is_checked_by_validation(llama, llama_hf, xgr_compiler):
    """xgrammar does not enforce uniqueItems; whatever comes out, valid == jsonschema's verdict."""
    schema = {"type": "array", "items": {"enum": [1, 2]}, "minItems": 2, "maxItems": 2, "uniqueItems": True}
    for seed in range(3):
        sampling = SamplingParams(temperature=1.0, seed=seed)
        result = generate_json(schema, llama, llama_hf, max_new_tokens=12, compiler=xgr_compiler, sampling=sampling)
        assert any(u.keyword == "uniqueItems" for u in result.unenforced)
        assert result.finish_reason == "stop"
        assert result.valid == _independently_valid(schema, result.text)
        assert (result.value is None) == (not result.valid)


def test_batch_rows_follow_their_own_schemas(llama, llama_hf, fsm_compiler):
    schemas = [PERSON, CHOICE, {"type": "string", "pattern": "^[a-c]{2,4}$"}]
    prompts = ["Person:", "A longer prompt so that rows need left padding:", "x"]
    results = generate_json_batch(schemas, llama, llama_hf, prompts=prompts, max_new_tokens=40, compiler=fsm_compiler)
    for schema, result in zip(schemas, results):
        assert result.valid and _independently_valid(schema, result.text), (result.text, result.errors)
    # each batch row equals the same request run alone (left padding, masks and positions are right)
    alone = generate_json(CHOICE, llama, llama_hf, prompt=prompts[1], max_new_tokens=40, compiler=fsm_compiler)
    assert alone.token_ids == results[1].token_ids


def test_callable_model(llama, llama_hf, fsm_compiler):
    name = "cache" if "cache" in inspect.signature(llama.forward).parameters else "past_key_values"  # 5.24 renamed it

    def model_fn(input_ids, past):
        out = llama(input_ids=input_ids, use_cache=True, **{name: past})
        return out.logits, out[name]

    by_callable = generate_json(PERSON, model_fn, llama_hf, prompt="hi", max_new_tokens=40, compiler=fsm_compiler)
    by_hf = generate_json(PERSON, llama, llama_hf, prompt="hi", max_new_tokens=40, compiler=fsm_compiler)
    assert by_callable.valid and by_callable.token_ids == by_hf.token_ids


def test_pydantic_model_in_instance_out(llama, llama_hf, llama_info):
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=8)
        legs: int = pydantic.Field(ge=0, le=8)

    compiler = GrammarCompiler(llama_info, backend="fsm")
    result = generate_json(Pet, llama, llama_hf, max_new_tokens=40, compiler=compiler)
    assert result.valid, result.errors
    assert isinstance(result.instance, Pet)
    # The schema allows other properties (pydantic's default); the instance keeps the model's fields.
    assert result.instance.model_dump() == {name: result.value[name] for name in Pet.model_fields}


def test_schema_forms(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(PERSON))
    assert load_schema(str(path)) == (PERSON, None)
    assert load_schema(path) == (PERSON, None)
    assert load_schema(json.dumps(PERSON)) == (PERSON, None)
    with pytest.raises(InvalidParameterError, match=r"invalid schema='no/such/file.json'.*\(no such file\)"):
        load_schema("no/such/file.json")
    with pytest.raises(InvalidParameterError, match=r"\(a directory\)"):
        load_schema(tmp_path)
    with pytest.raises(InvalidSchemaError, match="not JSON"):
        load_schema("{nope")
    with pytest.raises(InvalidParameterError, match="a dict, a JSON string"):
        load_schema(42)


def test_schema_no_backend_can_compile_names_why(llama, llama_hf, llama_info):
    schema = {"type": "string", "pattern": "(?<=a)b"}  # lookbehind: no backend has it
    with pytest.raises(UnsupportedFeatureError, match="lookbehind|look-behind|cannot enforce|lookaround"):
        generate_json(schema, llama, llama_hf, max_new_tokens=8, compiler=GrammarCompiler(llama_info))


def test_invalid_schema_names_the_pointer(llama, llama_hf, llama_info):
    with pytest.raises(InvalidSchemaError, match="/properties/a"):
        generate_json({"properties": {"a": {"type": 5}}}, llama, llama_hf, compiler=GrammarCompiler(llama_info))


def test_random_model_without_tokenizer_is_a_clear_error(llama):
    with pytest.raises(InvalidParameterError, match="pass tokenizer="):
        generate_json(PERSON, llama)


def test_budget_below_shortest_output_is_a_clear_error(llama, llama_hf, fsm_compiler):
    with pytest.raises(InvalidParameterError, match="invalid max_new_tokens=3: expected at least"):
        generate_json(PERSON, llama, llama_hf, max_new_tokens=3, compiler=fsm_compiler)


@pytest.mark.parametrize("backend", ["fsm", "xgrammar"])
def test_generate_structured_regex_output_matches_and_reports_progress(llama, llama_hf, llama_info, backend):
    pattern = r"(yes|no), [a-z]{2,6}\."
    steps = []
    result = generate_structured(Regex(pattern), llama, llama_hf, max_new_tokens=24,
                                 compiler=GrammarCompiler(llama_info, backend=backend), progress=steps.append)
    assert result.valid, result.errors
    assert result.value == result.text and regex.fullmatch(pattern, result.text)
    assert result.backend == backend and result.instance is None
    # one call per decode step with the tokens so far; jump-forward appends the forced ", " in the same step
    assert result.forced_tokens > 0 and len(steps) == result.timings.steps
    assert steps == sorted(set(steps)) and steps[-1] == len(result.token_ids)


def test_checking_a_regex_output_is_bounded_in_time(tiny_info):
    # The regex module judges a Regex output; on a text that a backtracking pattern misses it can
    # search for hours ((a|aa)+b on forty a's: the Fibonacci number of ways), so it has a deadline
    # and says the output is undecided instead.
    from grammask.generate import REGEX_CHECK_SECONDS, _validate
    from grammask.sampler.stop import FinishReason

    matcher = GrammarCompiler(tiny_info, backend="fsm").compile(Regex("a*")).matcher()
    assert all(matcher.accept_token(ord("a")) for _ in range(40)) and matcher.accept_token(tiny_info.eos_ids[0])
    text = "a" * 40
    _, _, errors = _validate(Regex("(a|aa)+b"), None, text, FinishReason.STOP, matcher, 64)
    assert errors == [f"the regex module could not decide within {REGEX_CHECK_SECONDS:g} s whether '(a|aa)+b' matches the whole text"]
    assert _validate(Regex("(a|aa)+"), None, text, FinishReason.STOP, matcher, 64) == (text, None, [])


def test_generate_structured_ebnf_and_tag(llama, llama_hf, llama_info):
    compiler = GrammarCompiler(llama_info)
    ebnf = generate_structured(Ebnf('root ::= "x=" [0-9] [0-9]? ";"'), llama, llama_hf, max_new_tokens=8,
                               compiler=compiler)
    assert ebnf.valid and regex.fullmatch(r"x=[0-9][0-9]?;", ebnf.text), ebnf
    tag = StructuralTag([Tag("<n>", JsonSchema({"type": "integer", "minimum": 0, "maximum": 9}), "</n>")], ["<n>"])
    # free text may run to the budget; only the structure inside a tag is constrained
    out = generate_structured(tag, llama, llama_hf, max_new_tokens=12, compiler=compiler, prompt="<n>")
    for inner in regex.findall(r"<n>(.*?)</n>", out.text):
        assert inner in {str(d) for d in range(10)}


def test_generate_structured_refuses_what_is_not_a_spec(llama, llama_hf):
    with pytest.raises(InvalidParameterError, match="a JsonSchema, Regex, Ebnf, StructuralTag or Reasoning"):
        generate_structured(PERSON, llama, llama_hf)


def _dev_sample(corpora, size: int):
    rows = []
    for path in sorted((corpora / "jsonschemabench" / "schemas").glob("*.dev.jsonl")):
        rows += [r for r in read_jsonl(path) if len(json.dumps(r["schema"])) < 600]
    return random.Random(5).sample(rows, size)


@pytest.mark.parametrize("size", [pytest.param(6, marks=pytest.mark.slow), 2])
def test_dev_corpus_sample_every_output_valid(corpora, llama, llama_hf, llama_info, size):
    """Budget-aware closing where the schema compiles on fsm (100% valid within max_new_tokens);
    otherwise xgrammar, where an output is valid or else cut off and reported as such."""
    compiler = GrammarCompiler(llama_info)
    counts = {"valid": 0, "length": 0}
    for row in _dev_sample(corpora, size):
        try:
            result = generate_json(row["schema"], llama, llama_hf, max_new_tokens=96, compiler=compiler,
                                   sampling=SamplingParams(temperature=1.0, seed=1))
        except (UnsupportedFeatureError, InvalidSchemaError):
            continue
        if result.budget_aware:
            assert result.valid, (row["id"], result.text, result.errors)
        if result.valid:
            assert _independently_valid(row["schema"], result.text), row["id"]
            counts["valid"] += 1
        else:
            assert result.finish_reason == "length" or not _independently_valid(row["schema"], result.text), row["id"]
            counts["length"] += 1
    assert counts["valid"] >= 1


def test_kernels_still_work_outside_any_mode_after_generation(llama, llama_hf, xgr_compiler, llama_info):
    """generate_json must not leave inference-mode tensors in caches that later calls reuse."""
    from grammask import apply_mask
    from grammask.masking.bitmask import bool_to_bitmask

    generate_json(CHOICE, llama, llama_hf, max_new_tokens=20, compiler=xgr_compiler)
    logits = torch.zeros(2, llama_info.vocab_size)
    allowed = torch.zeros(2, llama_info.vocab_size, dtype=torch.bool)
    allowed[0, 5] = allowed[1, 7] = True
    apply_mask(logits, bool_to_bitmask(allowed))
    assert torch.equal(torch.isfinite(logits), allowed)


def test_a_row_moved_to_xgrammar_mid_decode_reports_it(llama, llama_hf, llama_info):
    compiler = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": 30}})
    schema = {**PERSON, "not": {"required": ["nickname"]}}  # xgrammar cannot enforce "not": auto takes fsm
    result = generate_json(schema, llama, llama_hf, prompt="hi", max_new_tokens=40, compiler=compiler)
    assert result.backend == "xgrammar" and "moved from 'fsm'" in result.choice, result.choice
    assert not result.budget_aware and any(u.keyword == "not" for u in result.unenforced)
    assert result.valid or result.finish_reason == "length"


TWELVE_STRINGS = {
    "type": "object",
    "properties": {f"field_{i}": {"type": "string"} for i in range(12)},
    "required": [f"field_{i}" for i in range(12)],
    "additionalProperties": False,
}


@pytest.mark.parametrize("schema", [PERSON, CHOICE, TWELVE_STRINGS, "invoice", "tool_call"])
def test_the_fewest_tokens_plus_two_always_give_valid_json(schema, llama, llama_hf, llama_info):
    # The promise: max_new_tokens = the shortest valid output in tokens + 2 always ends
    # in valid JSON, whatever a random model samples (jump-forward on, as by default).
    from grammask import JsonSchema
    from grammask.schemas.bundled import example_schema

    schema = example_schema(schema) if isinstance(schema, str) else schema
    compiler = GrammarCompiler(llama_info)
    grammar = compiler.compile(JsonSchema(schema))
    assert grammar.supports_budget
    for seed in range(3):
        sampling = SamplingParams(temperature=1.5, seed=seed)
        result = generate_json(
            schema, llama, llama_hf, prompt="go", max_new_tokens=grammar.min_tokens + 2, compiler=compiler, sampling=sampling
        )
        assert result.finish_reason != "length" and _independently_valid(schema, result.text), (seed, result.text)
