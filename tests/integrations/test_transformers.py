"""GrammaskLogitsProcessor inside transformers' model.generate: same tokens as generate_json under
greedy decoding, valid under sampling, one grammar per batch row."""

from __future__ import annotations

import inspect
import json

import jsonschema
import pytest
import torch
from transformers import LogitsProcessorList

from grammask import GrammarCompiler, JsonSchema, Regex, bundled
from grammask.errors import InvalidParameterError
from grammask.generate import generate_json
from grammask.integrations.transformers import GrammaskLogitsProcessor, jump_forward_decoding
from grammask.schemas.bundled import example_schema
from tests.tiny_models import tiny_llama

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 22, 333]}},
          "required": ["ok", "n"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=3)


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info, backend="xgrammar")


@pytest.fixture(scope="module")
def left_padding_tok():
    """Its own tokenizer object, so the shared session fixture keeps its settings."""
    tok = bundled.llama32_hf_tokenizer()
    tok.padding_side = "left"
    tok.pad_token = tok.eos_token
    return tok


def _generate(model, tok, info, processor, prompts, **kwargs):
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, logits_processor=LogitsProcessorList([processor]), eos_token_id=list(info.eos_ids),
                         pad_token_id=tok.pad_token_id, **kwargs)
    return [row[enc["input_ids"].shape[1]:].tolist() for row in out]


def _trim(ids, eos_ids):
    for i, t in enumerate(ids):
        if t in eos_ids:
            return ids[: i + 1]
    return ids


def test_greedy_tokens_equal_generate_json(llama, llama_hf, left_padding_tok, llama_info, compiler):
    compiled = compiler.compile(JsonSchema(SCHEMA))
    processor = GrammaskLogitsProcessor(compiled, max_new_tokens=30)
    [ids] = _generate(llama, left_padding_tok, llama_info, processor, ["Give JSON:"], do_sample=False, max_new_tokens=30)
    ours = generate_json(SCHEMA, llama, llama_hf, prompt="Give JSON:", max_new_tokens=30, compiler=compiler,
                         jump_forward=False)
    assert ours.valid
    assert tuple(_trim(ids, llama_info.eos_ids)) == ours.token_ids


def test_budget_aware_greedy_equal_generate_json(llama, llama_hf, left_padding_tok, llama_info):
    fsm = GrammarCompiler(llama_info, backend="fsm")
    schema = {"type": "string", "pattern": "^[a-z]{3,40}$"}
    compiled = fsm.compile(JsonSchema(schema))
    assert compiled.supports_budget
    processor = GrammaskLogitsProcessor(compiled, max_new_tokens=8)
    [ids] = _generate(llama, left_padding_tok, llama_info, processor, ["word:"], do_sample=False, max_new_tokens=8)
    ours = generate_json(schema, llama, llama_hf, prompt="word:", max_new_tokens=8, compiler=fsm, jump_forward=False)
    assert ours.valid and tuple(_trim(ids, llama_info.eos_ids)) == ours.token_ids


def test_sampling_batch_one_grammar_per_row(llama, llama_hf, left_padding_tok, llama_info, compiler):
    specs = [JsonSchema(SCHEMA), Regex(r"[0-9]{2}-[ab]"), JsonSchema({"type": "array", "items": {"type": "integer"}, "maxItems": 2})]
    processor = GrammaskLogitsProcessor([compiler.compile(s) for s in specs])
    torch.manual_seed(0)
    rows = _generate(llama, left_padding_tok, llama_info, processor, ["a", "a much longer prompt here", "b c"],
                     do_sample=True, temperature=1.0, max_new_tokens=40)
    texts = [b"".join(llama_info.token_bytes[t] for t in _trim(r, llama_info.eos_ids) if t not in llama_info.eos_ids).decode()
             for r in rows]
    ended = [any(t in llama_info.eos_ids for t in r) for r in rows]
    if ended[0]:
        jsonschema.validate(json.loads(texts[0]), SCHEMA)
    import regex
    if ended[1]:
        assert regex.fullmatch(r"[0-9]{2}-[ab]", texts[1])
    if ended[2]:
        value = json.loads(texts[2])
        assert isinstance(value, list) and len(value) <= 2
    assert any(ended)


def test_grammar_count_must_match_batch(llama, llama_hf, left_padding_tok, llama_info, compiler):
    compiled = compiler.compile(JsonSchema(SCHEMA))
    processor = GrammaskLogitsProcessor([compiled, compiled])
    with pytest.raises(InvalidParameterError, match="1 or one per prompt"):
        _generate(llama, left_padding_tok, llama_info, processor, ["a", "b", "c"], do_sample=False, max_new_tokens=3)


@pytest.mark.parametrize("num_beams", [3])
def test_beam_search_outputs_are_valid(llama, left_padding_tok, llama_info, compiler, num_beams):
    """transformers' own beam search reorders, duplicates and drops beams; every returned sequence must
    still be valid by jsonschema (matchers forked and reordered with the beams)."""
    schema = {"type": "object", "properties": {"n": {"enum": [1, 22, 333]}, "s": {"type": "string", "maxLength": 4}},
              "required": ["n", "s"], "additionalProperties": False}
    processor = GrammaskLogitsProcessor([compiler.compile(JsonSchema(schema)), compiler.compile(Regex(r"(ab|cd)+e"))],
                                        num_beams=num_beams)
    rows = _generate(llama, left_padding_tok, llama_info, processor, ["beams:", "two prompts, two grammars"],
                     num_beams=num_beams, num_return_sequences=num_beams, do_sample=False, max_new_tokens=24)
    texts = [b"".join(llama_info.token_bytes[t] for t in _trim(r, llama_info.eos_ids) if t not in llama_info.eos_ids).decode()
             for r in rows]
    ended = [any(t in llama_info.eos_ids for t in r) for r in rows]
    import regex
    for i, (text, done) in enumerate(zip(texts, ended)):
        if not done:
            continue
        if i < num_beams:
            jsonschema.validate(json.loads(text), schema)
        else:
            assert regex.fullmatch(r"(ab|cd)+e", text), text
    assert sum(ended[:num_beams]) >= 1 and sum(ended[num_beams:]) >= 1
    assert len(set(texts[:num_beams])) > 1  # distinct beams, each followed by its own matcher


def test_processor_follows_histories_cut_back_and_regrown(llama_info, compiler):
    """Rows whose history is cut back (as assisted decoding does after a rejection) roll their matcher back."""
    grammar = compiler.compile(Regex(r"[0-9]{3}"))
    processor = GrammaskLogitsProcessor(grammar)
    digit = [llama_info.token_bytes.index(str(d).encode()) for d in range(3)]
    scores = torch.zeros(1, llama_info.vocab_size)
    processor(torch.tensor([[7]]), scores.clone())
    processor(torch.tensor([[7, digit[0]]]), scores.clone())
    processor(torch.tensor([[7, digit[0], digit[1]]]), scores.clone())
    out = processor(torch.tensor([[7, digit[2]]]), scores.clone())  # cut back to one digit, a different one
    assert processor.matchers[0].num_accepted == 1
    assert torch.isfinite(out[0, digit]).all()


def _jump_generate(model, tok, info, processor, prompts, **kwargs):
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, logits_processor=LogitsProcessorList([processor]), custom_generate=jump_forward_decoding,
                         eos_token_id=list(info.eos_ids), pad_token_id=tok.pad_token_id, **kwargs)
    return [row[enc["input_ids"].shape[1]:].tolist() for row in out]


def _count_forward_passes(model):
    calls = []
    handle = model.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls, handle


def test_jump_forward_greedy_equals_generate_json_in_fewer_passes(llama, llama_hf, left_padding_tok, llama_info):
    """The custom_generate loop appends the same canonical forced tokens as generate_json's loop
    (same greedy output, token for token) and feeds them without a forward pass each."""
    fsm = GrammarCompiler(llama_info, backend="fsm")
    schema = example_schema("invoice")
    processor = GrammaskLogitsProcessor(fsm.compile(JsonSchema(schema)), tokenizer=left_padding_tok, max_new_tokens=160)
    calls, handle = _count_forward_passes(llama)
    try:
        [ids] = _jump_generate(llama, left_padding_tok, llama_info, processor, ["Invoice:"], do_sample=False, max_new_tokens=160)
    finally:
        handle.remove()
    ours = generate_json(schema, llama, llama_hf, prompt="Invoice:", max_new_tokens=160, compiler=fsm, jump_forward=True)
    assert ours.forced_tokens > 0
    assert tuple(_trim(ids, llama_info.eos_ids)) == ours.token_ids
    assert len(calls) <= len(ours.token_ids) - ours.forced_tokens + 1  # prefill + one pass per sampled token


def test_jump_forward_sampling_batch_rows_of_every_length_are_valid(llama, left_padding_tok, llama_info, compiler):
    """Ragged rows (different prompts, grammars and forced text; two samples per prompt) each end
    valid, and finished rows are padded after their end."""
    schemas = [SCHEMA, {"type": "object", "properties": {"tag": {"const": "fixed-text-here"}, "x": {"type": "integer"}},
                        "required": ["tag", "x"], "additionalProperties": False}]
    processor = GrammaskLogitsProcessor([compiler.compile(JsonSchema(s)) for s in schemas], tokenizer=left_padding_tok)
    torch.manual_seed(1)
    rows = _jump_generate(llama, left_padding_tok, llama_info, processor, ["a", "a much longer prompt"], do_sample=True,
                          temperature=0.8, top_k=50, num_return_sequences=2, max_new_tokens=40)
    ended = 0
    for i, row in enumerate(rows):
        body = _trim(row, llama_info.eos_ids)
        assert all(t == left_padding_tok.pad_token_id for t in row[len(body):])
        if body and body[-1] in llama_info.eos_ids:
            ended += 1
            text = b"".join(llama_info.token_bytes[t] for t in body[:-1]).decode()
            jsonschema.validate(json.loads(text), schemas[i // 2])
    assert ended >= 2


def test_jump_forward_keeps_the_token_budget(llama, llama_hf, left_padding_tok, llama_info):
    fsm = GrammarCompiler(llama_info, backend="fsm")
    schema = example_schema("person")
    compiled = fsm.compile(JsonSchema(schema))
    budget = compiled.min_tokens + 2
    processor = GrammaskLogitsProcessor(compiled, tokenizer=left_padding_tok, max_new_tokens=budget)
    torch.manual_seed(2)
    [ids] = _jump_generate(llama, left_padding_tok, llama_info, processor, ["Person:"], do_sample=True,
                           temperature=1.5, max_new_tokens=budget)
    body = _trim(ids, llama_info.eos_ids)
    assert len(body) <= budget and body[-1] in llama_info.eos_ids
    jsonschema.validate(json.loads(b"".join(llama_info.token_bytes[t] for t in body[:-1]).decode()), schema)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_beams": 2}, "num_beams"),
    ({"output_scores": True, "return_dict_in_generate": True}, "output_scores"),
])
def test_jump_forward_refuses_what_it_cannot_do(llama, left_padding_tok, llama_info, compiler, kwargs, match):
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(SCHEMA)), tokenizer=left_padding_tok)
    with pytest.raises(InvalidParameterError, match=match):
        _jump_generate(llama, left_padding_tok, llama_info, processor, ["a"], max_new_tokens=4, **kwargs)


def test_jump_forward_refuses_a_filled_cache(llama, left_padding_tok, llama_info, compiler):
    # Under the cache's name in the installed transformers (``cache`` from 5.24, ``past_key_values``
    # before; generate renames the old keyword itself).
    name = "cache" if "cache" in inspect.signature(llama.forward).parameters else "past_key_values"
    filled = llama(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)[name]
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(SCHEMA)), tokenizer=left_padding_tok)
    with pytest.raises(InvalidParameterError, match=f"invalid {name}='a filled cache'"):
        _jump_generate(llama, left_padding_tok, llama_info, processor, ["a"], max_new_tokens=4, **{name: filled})


def test_jump_forward_needs_the_tokenizer(llama, left_padding_tok, llama_info, compiler):
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(SCHEMA)))
    with pytest.raises(InvalidParameterError, match="tokenizer"):
        _jump_generate(llama, left_padding_tok, llama_info, processor, ["a"], max_new_tokens=4)
