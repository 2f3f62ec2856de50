"""The filter and penalty stages against transformers' warpers / processors and hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from grammask.sampler import ops
from grammask.sampler.penalties import MinTokensBlock, PenaltyState, apply_repetition_penalty

VOCAB = 1000
NO_IDS = torch.zeros(1, 0, dtype=torch.int64)


def random_logits(rows: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def hf_filter(row: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """transformers' warpers in generate()'s order: temperature → top-k → top-p → min-p."""
    scores = row.unsqueeze(0)
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(NO_IDS, scores)
    if top_k != -1:
        scores = TopKLogitsWarper(top_k)(NO_IDS, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(NO_IDS, scores)
    if min_p > 0:
        scores = MinPLogitsWarper(min_p)(NO_IDS, scores)
    return scores[0]


CASES = [
    (1.0, 50, 1.0, 0.0),
    (1.0, -1, 0.9, 0.0),
    (0.7, -1, 0.5, 0.0),
    (1.3, 40, 0.95, 0.0),
    (1.0, -1, 1.0, 0.1),
    (0.8, 100, 0.8, 0.05),
    (2.0, 1, 1.0, 0.0),
    (1.0, -1, 0.999, 0.0),
]


@pytest.mark.parametrize("temperature,top_k,top_p,min_p", CASES)
def test_full_row_filters_match_transformers(temperature, top_k, top_p, min_p):
    logits = random_logits(4, seed=int(temperature * 100) + top_k)
    ours = ops.apply_temperature(logits.clone(), torch.full((4,), temperature))
    if top_k != -1:
        ours = ops.apply_top_k(ours, torch.full((4,), top_k))
    if top_p < 1.0:
        ours = ops.apply_top_p(ours, torch.full((4,), top_p))
    if min_p > 0:
        ours = ops.apply_min_p(ours, torch.full((4,), min_p))
    for i in range(4):
        expected = hf_filter(logits[i], temperature, top_k, top_p, min_p)
        assert torch.equal(torch.isfinite(ours[i]), torch.isfinite(expected))
        kept = torch.isfinite(expected)
        # ours is shifted so that each row's best logit is 0 (the same softmax)
        torch.testing.assert_close(ours[i][kept], expected[kept] - expected.max())


@pytest.mark.parametrize("cap", [16, 64, 256, VOCAB])
def test_sorted_candidates_agree_with_transformers_when_covered(cap):
    """filter_sorted on topk candidates keeps exactly transformers' set for every row it calls covered."""
    rows = len(CASES)
    logits = random_logits(rows, seed=cap)
    temperature = torch.tensor([c[0] for c in CASES])
    scaled = logits / temperature.unsqueeze(1)
    top_k = torch.tensor([VOCAB if c[1] == -1 else c[1] for c in CASES])
    top_p = torch.tensor([c[2] for c in CASES])
    min_p = torch.tensor([c[3] for c in CASES])
    values, ids = torch.topk(scaled, cap, dim=1)
    keep, covered = ops.filter_sorted(values, top_k, top_p, min_p, torch.logsumexp(scaled, 1, keepdim=True), VOCAB)
    assert covered.any()
    if cap == VOCAB:
        assert covered.all()
    for i, case in enumerate(CASES):
        expected = torch.isfinite(hf_filter(logits[i], *case))
        if covered[i]:
            got = torch.zeros(VOCAB, dtype=torch.bool)
            got[ids[i][keep[i]]] = True
            assert torch.equal(got, expected), case
        else:  # not covered: the kept set does not fit, or top-p's normaliser needs a top-k beyond the view
            assert expected.sum() >= cap or (case[1] > cap and case[2] < 1.0)


@pytest.mark.parametrize("scale", [0.5, 1.5, 4.0])
def test_threshold_top_p_matches_transformers(scale):
    logits = random_logits(6, seed=int(scale * 10), scale=scale)
    logits[1, ::3] = float("-inf")
    top_p = torch.tensor([0.9, 0.5, 0.99, 0.3, 0.75, 1.0])
    keep = ops.top_p_keep_threshold(logits, top_p)
    for i in range(6):
        expected = torch.isfinite(TopPLogitsWarper(top_p[i].item())(NO_IDS, logits[i : i + 1]))[0]
        if top_p[i] == 1.0:
            expected = torch.isfinite(logits[i])
        assert torch.equal(keep[i], expected), i


def test_top_k_keeps_ties_like_transformers():
    row = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.5]])
    ours = ops.apply_top_k(row, torch.tensor([2]))
    expected = TopKLogitsWarper(2)(NO_IDS, row)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(expected))
    assert torch.isfinite(ours).sum() == 3


def test_top_p_always_keeps_the_best_token():
    row = torch.tensor([[10.0, 0.0, 0.0]])
    assert torch.isfinite(ops.apply_top_p(row, torch.tensor([0.01]))).tolist() == [[True, False, False]]


def test_inverse_cdf_never_picks_zero_weight():
    weights = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0]]).expand(5, -1)
    uniform = torch.tensor([0.0, 1 / 3 - 1e-6, 1 / 3 + 1e-6, 0.999999, 0.5])
    assert ops.inverse_cdf_sample(weights, uniform).tolist() == [1, 1, 3, 3, 3]


def test_gather_logprobs_ranks_and_top_n():
    logprobs = torch.log_softmax(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), dim=1)
    chosen, rank, top_values, top_ids = ops.gather_logprobs(logprobs, torch.tensor([2]), 2)
    assert chosen.item() == pytest.approx(logprobs[0, 2].item())
    assert rank.tolist() == [2]
    assert top_ids.tolist() == [[1, 2]]
    torch.testing.assert_close(top_values, logprobs[:, [1, 2]])


# ----------------------------------------------------------------------------------------- penalties


@pytest.mark.parametrize("penalty", [1.3, 0.7])
def test_repetition_penalty_matches_transformers(penalty):
    logits = random_logits(3, seed=7)
    history = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(8))
    seen = torch.zeros(3, VOCAB, dtype=torch.bool).scatter_(1, history, True)
    ours = apply_repetition_penalty(logits, seen, torch.full((3, 1), penalty))
    expected = RepetitionPenaltyLogitsProcessor(penalty)(history, logits.clone())
    torch.testing.assert_close(ours, expected)


def test_penalty_state_hand_computed():
    """Row 0: repetition 2 over prompt {1} and output; frequency 0.5, presence 1 over output [2, 2, 3]."""
    state = PenaltyState.build(
        rows=[0], repetition=[2.0], frequency=[0.5], presence=[1.0],
        prompt_token_ids=[[1]], output_token_ids=[[2, 2]], vocab_size=6, device=torch.device("cpu"),
    )
    state.update(torch.tensor([3]))
    logits = torch.tensor([[4.0, 4.0, 4.0, -4.0, 4.0, 4.0]])
    state.apply(logits)
    # token 1: prompt → 4/2; token 2: 4/2 - 0.5*2 - 1; token 3: -4*2 - 0.5 - 1; others untouched
    assert logits.tolist() == [[4.0, 2.0, 0.0, -9.5, 4.0, 4.0]]


def test_penalty_state_only_touches_its_rows_and_skips_no_token():
    state = PenaltyState.build([1], [1.0], [1.0], [0.0], [[]], [[]], 4, torch.device("cpu"))
    state.update(torch.tensor([0, -1]))
    state.update(torch.tensor([0, 2]))
    logits = torch.zeros(2, 4)
    state.apply(logits)
    assert logits.tolist() == [[0, 0, 0, 0], [0, 0, -1.0, 0]]


def test_min_tokens_blocks_stop_ids_until_reached():
    block = MinTokensBlock.build([0, 2], [2, 1], [[5], [3, 4]], torch.device("cpu"))
    logits = torch.zeros(3, 6)
    block.apply(logits, torch.tensor([1, 0, 1]))
    assert math.isinf(logits[0, 5]) and torch.isfinite(logits[2]).all() and torch.isfinite(logits[1]).all()
    logits = torch.zeros(3, 6)
    block.apply(logits, torch.tensor([0, 0, 0]))
    assert torch.isinf(logits[2, [3, 4]]).all() and torch.isfinite(logits[2, :3]).all()
