"""Structural-tag format trees with special tokens (Llama-3.2 tokenizer): a special token is allowed
exactly where a ``token`` element names it, never through a text or token wildcard."""

from __future__ import annotations

import pytest

from grammask import GrammarCompiler, InvalidGrammarError, JsonSchema, StructuralTag, allocate_token_bitmask, bitmask_to_bool
from tests.helpers import walk

PYTHON_TAG = 128010


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info)


def _allowed_specials(compiler, tree) -> set[int]:
    info = compiler.tokenizer_info
    matcher = compiler.compile(StructuralTag.from_format(tree)).matcher()
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    allowed = bitmask_to_bool(bitmask[0], info.vocab_size)
    return {i for i in sorted(info.special_ids) if allowed[i]}


@pytest.mark.parametrize(
    "wildcard",
    [
        {"type": "any_text"},
        {"type": "any_text", "excludes": ["abc"]},
        {"type": "triggered_tags", "triggers": ["<f"], "tags": [{"type": "tag", "begin": "<f>", "content": {"type": "const_string", "value": "x"}, "end": "</f>"}]},
        {"type": "any_tokens"},
    ],
)
def test_wildcards_never_match_special_tokens(compiler, llama_info, wildcard):
    tree = {"type": "sequence", "elements": [{"type": "optional", "content": {"type": "token", "token": "<|python_tag|>"}}, wildcard]}
    assert _allowed_specials(compiler, tree) == {PYTHON_TAG, *llama_info.eos_ids}


def test_token_elements_by_text_or_id_and_schema_content(compiler, llama_info, llama_hf):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    tree = {"type": "sequence", "elements": [{"type": "token", "token": PYTHON_TAG}, {"type": "json_schema", "json_schema": schema}]}
    tag = StructuralTag.from_format(tree)
    assert tag.uses_tokens and tag.contents == (JsonSchema(schema),)
    grammar = compiler.compile(tag)
    result = walk(grammar.matcher(), [PYTHON_TAG, *llama_hf.encode('{"a":12}', add_special_tokens=False)], llama_info)
    assert result.terminated and result.special_allowed == [(0, PYTHON_TAG)]
    assert not walk(grammar.matcher(), llama_hf.encode('{"a":12}', add_special_tokens=False), llama_info).terminated
    with pytest.raises(InvalidGrammarError, match="'<tool_call>' is not a single token"):
        compiler.compile(StructuralTag.from_format({"type": "token", "token": "<tool_call>"}))
    with pytest.raises(InvalidGrammarError, match="reserved"):
        StructuralTag.from_format({"type": "spec", "index": 0})
