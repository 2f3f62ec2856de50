"""OpenAI-style request translation (grammask.openai.spec_from_request): each field to the spec it
means, checked by walking texts through the compiled grammar with the Llama-3.2 tokenizer; bad
fields raise errors that name them."""

from __future__ import annotations

import pytest

from grammask import (
    Ebnf,
    GrammarCompiler,
    InvalidGrammarError,
    InvalidParameterError,
    InvalidSchemaError,
    JsonSchema,
    Reasoning,
    Regex,
    StructuralTag,
)
from grammask.openai import spec_from_request
from tests.helpers import walk

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info)


def _accepts(compiler, spec, text, llama_hf, prefix=()):
    ids = [*prefix, *llama_hf.encode(text, add_special_tokens=False)]
    return walk(compiler.compile(spec).matcher(), ids, compiler.tokenizer_info).terminated


def test_response_format_kinds(compiler, llama_hf):
    assert spec_from_request({}) is None
    assert spec_from_request({"response_format": {"type": "text"}}) is None
    any_object = spec_from_request({"response_format": {"type": "json_object"}})
    assert isinstance(any_object, JsonSchema) and _accepts(compiler, any_object, '{"a":[1]}', llama_hf)
    assert not _accepts(compiler, any_object, "[1]", llama_hf)
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}}
    strict = spec_from_request(body)
    assert strict.strict and _accepts(compiler, strict, '{"city":"Rome"}', llama_hf)
    assert not _accepts(compiler, strict, '{"city":"Rome","x":1}', llama_hf)  # strict: closed objects
    body["response_format"]["json_schema"]["strict"] = False
    assert _accepts(compiler, spec_from_request(body), '{"city":"Rome","x":1}', llama_hf)  # JSON Schema's meaning
    flexible = spec_from_request({"response_format": {"type": "json_object"}}, whitespace="flexible")
    assert _accepts(compiler, flexible, '{"a": 1}', llama_hf)


def test_vllm_structured_outputs(compiler, llama_hf):
    def spec(**fields):
        return spec_from_request({"structured_outputs": fields})

    assert isinstance(spec(json='{"type": "integer"}'), JsonSchema)
    assert _accepts(compiler, spec(regex=r"\d{3}"), "123", llama_hf)
    choice = spec(choice=["a.b", "c|d", "(x)"])
    assert isinstance(choice, Regex)
    assert all(_accepts(compiler, choice, text, llama_hf) for text in ["a.b", "c|d", "(x)"])
    assert not _accepts(compiler, choice, "axb", llama_hf) and not _accepts(compiler, choice, "c", llama_hf)
    assert isinstance(spec(grammar='root ::= "x"'), Ebnf)
    assert _accepts(compiler, spec(json_object=True), "{}", llama_hf)
    legacy = spec(structural_tag={"structures": [{"begin": "<f>", "schema": WEATHER, "end": "</f>"}], "triggers": ["<f>"]})
    assert isinstance(legacy, StructuralTag) and _accepts(compiler, legacy, 'hi <f>{"city":"x"}</f>', llama_hf)
    tree = spec(structural_tag='{"type": "structural_tag", "format": {"type": "const_string", "value": "ok"}}')
    assert _accepts(compiler, tree, "ok", llama_hf)


def test_tools_and_tool_choice(compiler, llama_hf):
    call = '{"name": "get_weather", "parameters": {"city": "Rome"}}'
    for choice in ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]:
        spec = spec_from_request({"tools": TOOLS, "tool_choice": choice}, tool_format="llama3_json")
        assert _accepts(compiler, spec, call, llama_hf, prefix=[128010]), choice
        assert _accepts(compiler, spec, "Hello", llama_hf) == (choice == "auto"), choice
    assert spec_from_request({"tools": TOOLS, "tool_choice": "none"}) is None
    two = call + "; " + call
    parallel = spec_from_request({"tools": TOOLS, "tool_choice": "required"}, tool_format="llama3_json")
    single = spec_from_request({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}, tool_format="llama3_json")
    assert _accepts(compiler, parallel, two, llama_hf) and not _accepts(compiler, single, two, llama_hf)
    # auto with a response format: the reply is calls, or JSON following the response schema
    body = {"tools": TOOLS, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}}
    either = spec_from_request(body, tool_format="llama3_json")
    assert _accepts(compiler, either, "42", llama_hf) and _accepts(compiler, either, call, llama_hf)
    assert not _accepts(compiler, either, "Hello", llama_hf)


def test_reasoning_wraps_the_constraint():
    spec = spec_from_request({"response_format": {"type": "json_object"}}, reasoning="deepseek_r1")
    assert isinstance(spec, Reasoning) and spec.started and isinstance(spec.content, JsonSchema)
    assert spec_from_request({"response_format": {"type": "text"}}, reasoning="qwen3") is None


@pytest.mark.parametrize(
    ("body", "error", "field"),
    [
        ("not a dict", InvalidParameterError, "request"),
        ({"response_format": {"type": "xml"}}, InvalidParameterError, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, InvalidParameterError, "response_format.json_schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}}, InvalidParameterError, "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strng"}}}}, InvalidSchemaError, "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, InvalidParameterError, "structured_outputs"),
        ({"structured_outputs": {"regex": "a", "json": "{}"}}, InvalidParameterError, "structured_outputs"),
        ({"structured_outputs": {"choice": []}}, InvalidParameterError, "structured_outputs.choice"),
        ({"structured_outputs": {"grammar": "start: 'a'"}}, InvalidParameterError, "structured_outputs.grammar"),
        ({"structured_outputs": {"json": "{not json"}}, InvalidParameterError, "structured_outputs.json"),
        ({"structured_outputs": {"json_object": False}}, InvalidParameterError, "structured_outputs.json_object"),
        ({"structured_outputs": {"structural_tag": {"type": "structural_tag", "format": 3}}}, InvalidGrammarError, "structured_outputs.structural_tag"),
        ({"tools": {"a": 1}}, InvalidParameterError, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, InvalidParameterError, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"minimum": "x"}}}]}, InvalidSchemaError, "tools[0].function.parameters"),
        ({"tools": TOOLS * 2}, InvalidParameterError, "tools"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, InvalidParameterError, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, InvalidParameterError, "tool_choice.function.name"),
        ({"tool_choice": "required"}, InvalidParameterError, "tool_choice"),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, InvalidParameterError, "parallel_tool_calls"),
    ],
)
def test_bad_requests_name_the_field(body, error, field):
    with pytest.raises(error) as raised:
        spec_from_request(body, tool_format="llama3_json")
    assert field in str(raised.value)


def test_tools_need_a_tool_format():
    with pytest.raises(InvalidParameterError, match="tool_format"):
        spec_from_request({"tools": TOOLS})
