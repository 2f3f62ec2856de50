"""generate_json's decoding features against independent references: n / best_of (seed derivation,
ranking), logprobs and prompt logprobs (a direct forward pass of the model and torch's log_softmax),
and jump-forward (canonical tokens; the same outputs as sampling every token where the forced text
has one token path)."""

from __future__ import annotations

import json

import pytest
import regex
import torch

from grammask import GrammarCompiler, JsonSchema, Reasoning, Regex, TokenizerInfo
from grammask.generate import generate_json, generate_json_batch, generate_structured
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.masking.jump_forward import accept_forced_tokens, plain_encoder
from grammask.sampler import SamplingParams
from grammask.validation import output_validator
from tests.tiny_models import byte_tokenizer, tiny_llama

PET = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "kind": {"enum": ["cat", "dog", "owl"]}},
    "required": ["name", "kind"],
    "additionalProperties": False,
}

ANIMAL = {"enum": ["cat", "dog", "owl", "emu", "yak", "gnu"]}
PAIR = {"type": "object", "properties": {"kind": ANIMAL, "legs": {"enum": [2, 4]}}, "required": ["kind", "legs"],
        "additionalProperties": False}


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=11)


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info, backend="fsm")


def _valid(schema, text: str) -> bool:
    return output_validator(schema).is_valid(json.loads(text))


def _direct_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log_softmax of the model's logits over ``ids`` in one forward pass: row j predicts ``ids[j + 1]``."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)


# ------------------------------------------------------------------------------------------ n / best_of


def test_n_samples_are_independent_with_seed_plus_index(llama, llama_hf, compiler):
    params = SamplingParams(n=3, temperature=1.0, seed=40)
    results = generate_json(PAIR, llama, llama_hf, prompt="pet:", sampling=params, max_new_tokens=40, compiler=compiler)
    assert [r.index for r in results] == [0, 1, 2]
    assert all(r.valid and _valid(PAIR, r.text) for r in results), [r.errors for r in results]
    assert len({r.token_ids for r in results}) > 1
    alone = generate_json(PAIR, llama, llama_hf, prompt="pet:", max_new_tokens=40, compiler=compiler,
                          sampling=SamplingParams(temperature=1.0, seed=42))
    assert alone.token_ids == results[2].token_ids  # sample i is seed + i


def test_best_of_returns_the_n_highest_cumulative_logprobs(llama, llama_hf, compiler):
    best = generate_json(ANIMAL, llama, llama_hf, prompt="pet:", max_new_tokens=40, compiler=compiler,
                         sampling=SamplingParams(n=2, best_of=4, temperature=1.0, seed=5))
    every = generate_json(ANIMAL, llama, llama_hf, prompt="pet:", max_new_tokens=40, compiler=compiler,
                          sampling=SamplingParams(n=4, temperature=1.0, seed=5, logprobs=0))
    ranked = sorted(every, key=lambda r: -r.cumulative_logprob)
    assert len({r.text for r in every}) > 1
    assert [r.token_ids for r in best] == [r.token_ids for r in ranked[:2]]
    assert best[0].cumulative_logprob >= best[1].cumulative_logprob >= ranked[2].cumulative_logprob
    prompt = llama_hf.encode("pet:")
    for r in every:  # raw logprobs (the default mode) are the model's own: one forward pass says so
        direct = _direct_logprobs(llama, prompt + list(r.token_ids))
        expected = [direct[len(prompt) - 1 + j, t].item() for j, t in enumerate(r.token_ids)]
        assert [entry[t].logprob for entry, t in zip(r.logprobs, r.token_ids)] == pytest.approx(expected, abs=2e-4)
        assert r.cumulative_logprob == pytest.approx(sum(expected), abs=2e-3)


def test_batch_returns_n_results_per_request_in_order(llama, llama_hf, compiler):
    sampling = [SamplingParams(temperature=0), SamplingParams(n=2, temperature=1.0, seed=1)]
    results = generate_json_batch([PET, {"enum": ["x", "y"]}], llama, llama_hf, prompts=["a", "b"],
                                  sampling=sampling, max_new_tokens=40, compiler=compiler)
    assert [r.index for r in results] == [0, 0, 1]
    assert _valid(PET, results[0].text) and {r.value for r in results[1:]} <= {"x", "y"}


def test_generate_structured_draws_n_samples_through_the_same_loop(llama, llama_hf, compiler):
    spec = Regex(r"(cat|dog|owl|emu), [a-z]{2,5}\.")
    common = dict(prompt="pet:", max_new_tokens=20, compiler=compiler)
    results = generate_structured(spec, llama, llama_hf, sampling=SamplingParams(n=2, temperature=1.0, seed=7), **common)
    assert isinstance(results, list) and [r.index for r in results] == [0, 1]
    assert all(r.valid and regex.fullmatch(spec.pattern, r.text) for r in results), [r.errors for r in results]
    alone = generate_structured(spec, llama, llama_hf, sampling=SamplingParams(temperature=1.0, seed=8), **common)
    assert alone.token_ids == results[1].token_ids  # sample i is seed + i, as for generate_json


# ------------------------------------------------------------------------------------------ logprobs


def test_top_and_prompt_logprobs_equal_log_softmax_of_a_direct_forward(llama, llama_hf, compiler):
    params = SamplingParams(temperature=0, logprobs=3, prompt_logprobs=2)
    result = generate_json(PET, llama, llama_hf, prompt="name a pet:", sampling=params, max_new_tokens=40,
                           compiler=compiler)
    prompt = llama_hf.encode("name a pet:")
    direct = _direct_logprobs(llama, prompt + list(result.token_ids))
    assert result.forced_tokens == 0  # rows that return logprobs sample every token
    assert result.prompt_logprobs[0] is None and len(result.prompt_logprobs) == len(prompt)
    for j, entry in enumerate(result.prompt_logprobs[1:]):
        row = direct[j]
        assert entry[prompt[j + 1]].logprob == pytest.approx(row[prompt[j + 1]].item(), abs=2e-4)
        value = row[prompt[j + 1]]  # the rank, up to float32 ties
        assert int((row > value + 1e-4).sum()) < entry[prompt[j + 1]].rank <= int((row > value - 1e-4).sum()) + 1
        top = torch.topk(row, 2)
        for rank, (value, token) in enumerate(zip(top.values.tolist(), top.indices.tolist()), start=1):
            assert entry[token].logprob == pytest.approx(value, abs=2e-4) and entry[token].rank in (rank, 1)
    for j, (entry, token) in enumerate(zip(result.logprobs, result.token_ids)):
        row = direct[len(prompt) - 1 + j]
        assert entry[token].logprob == pytest.approx(row[token].item(), abs=2e-4)
        assert set(entry) >= set(torch.topk(row, 3).indices.tolist())  # raw: the model's own top 3


def test_processed_logprobs_are_the_masked_distribution(llama, llama_hf, compiler, llama_info):
    params = SamplingParams(temperature=0, logprobs=2, logprobs_mode="processed_logprobs")
    result = generate_json(PET, llama, llama_hf, prompt="pet:", sampling=params, max_new_tokens=40, compiler=compiler)
    prompt = llama_hf.encode("pet:")
    direct = _direct_logprobs(llama, prompt + list(result.token_ids))
    matcher = compiler.compile(JsonSchema(PET)).matcher(max_tokens=40)
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    for j, (entry, token) in enumerate(zip(result.logprobs, result.token_ids)):
        matcher.fill_next_token_bitmask(bitmask, 0)
        allowed = bitmask_to_bool(bitmask[0], llama_info.vocab_size)
        masked = direct[len(prompt) - 1 + j].masked_fill(~allowed, float("-inf"))
        reference = torch.log_softmax(masked, dim=0)
        assert entry[token].logprob == pytest.approx(reference[token].item(), abs=2e-4)
        assert all(allowed[t] for t in entry)  # top tokens of the processed distribution are allowed ones
        assert matcher.accept_token(token)


# ------------------------------------------------------------------------------------------ jump-forward


def test_forced_tokens_are_the_canonical_encoding_and_accepted(llama_hf, llama_info, compiler):
    encode = plain_encoder(llama_hf)
    matcher = compiler.compile(JsonSchema(PAIR)).matcher()
    forced = accept_forced_tokens(matcher, encode, llama_info, None)
    start = encode('{"kind":"')
    assert forced == start[:-1] and matcher.num_accepted == len(forced)  # the last one is left to the model
    cat = encode("cat")
    assert matcher.accept_tokens(start[-1:] + cat) == 1 + len(cat)
    # in context: 'cat' stays one token before '","legs":', so the text's own tokens follow it
    in_context = encode('cat","legs":')
    assert in_context[: len(cat)] == cat
    forced = accept_forced_tokens(matcher, encode, llama_info, cat[-1])
    assert forced == in_context[len(cat) : -1] and matcher.num_accepted == len(start) + len(cat) + len(forced)
    # where the previous token would merge with the text ('"' + ',"' -> '","'), the text is encoded alone
    matcher = compiler.compile(JsonSchema(PET)).matcher()
    quote = encode('"')
    matcher.accept_tokens(encode('{"name":"Bo') + quote)
    assert encode('","kind":"')[0] != quote[0]
    assert accept_forced_tokens(matcher, encode, llama_info, quote[0]) == encode(',"kind":"')[:-1]


def test_forced_tokens_keep_the_last_token_where_only_the_end_follows(llama_hf, llama_info, compiler):
    encode = plain_encoder(llama_hf)
    matcher = compiler.compile(JsonSchema({"const": {"ab": "xy"}})).matcher()
    forced = accept_forced_tokens(matcher, encode, llama_info, None)
    assert forced == encode('{"ab":"xy"}')
    fill = allocate_token_bitmask(1, llama_info.vocab_size)
    matcher.fill_next_token_bitmask(fill, 0)
    assert bitmask_to_bool(fill[0], llama_info.vocab_size).nonzero().flatten().tolist() == sorted(llama_info.eos_ids)


@pytest.fixture(scope="module")
def byte_model():
    return tiny_llama(seed=2, vocab_size=260).double(), byte_tokenizer()


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0), SamplingParams(temperature=1.0, seed=9)])
def test_one_token_path_jump_forward_changes_nothing_but_the_passes(byte_model, sampling):
    """With a byte-level tokenizer the forced text has one token path: sampled or jumped, the output
    must be the same tokens, seed for seed, with fewer forward passes."""
    model, tok = byte_model
    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tok, vocab_size=260), backend="fsm")
    common = dict(prompts=["x", "yy"], max_new_tokens=60, compiler=compiler, sampling=sampling)
    schemas = [PAIR, {"type": "array", "items": ANIMAL, "minItems": 1, "maxItems": 2}]
    jumped = generate_json_batch(schemas, model, tok, **common)
    stepped = generate_json_batch(schemas, model, tok, jump_forward=False, **common)
    for a, b in zip(jumped, stepped):
        assert a.token_ids == b.token_ids and a.valid and b.forced_tokens == 0
    assert jumped[0].forced_tokens >= len('{"kind":"","legs":}') - 2
    assert jumped[0].timings.steps < stepped[0].timings.steps


def test_generate_structured_thinks_then_follows_a_reasoning_spec_with_jump_forward(byte_model):
    """A Reasoning spec through the shared loop with its default prompt: the section is opened by the
    only allowed token, closed by the (biased) end token, and the content after it is checked whole;
    the content's forced text is jumped once the content has started (``d`` after the sampled ``i``;
    the last forced token, ``-``, is left to the model)."""
    model, tok = byte_model
    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tok, vocab_size=260), backend="fsm")
    spec = Reasoning(Regex(r"id-[0-9]{2}"), start="[", end="]", max_gap=0)
    sampling = SamplingParams(temperature=0, logit_bias={ord("]"): 100.0})
    result = generate_structured(spec, model, tok, compiler=compiler, sampling=sampling, max_new_tokens=12)
    assert result.valid, result.errors
    assert result.reasoning == "[" and regex.fullmatch(r"id-[0-9]{2}", result.value)
    assert result.text == "[]" + result.value and result.forced_tokens == 1
