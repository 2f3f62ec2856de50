"""The Sampler end to end: exact one-hot checks, statistics against transformers' renormalised
distributions, masks and filters never violated, seeded determinism, logprobs, penalties over steps."""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from transformers.generation.logits_process import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from grammask.errors import InvalidParameterError
from grammask.masking.bitmask import bool_to_bitmask
from grammask.sampler import NO_TOKEN, Sampler, SamplingBatch, SamplingParams

NO_IDS = torch.zeros(1, 0, dtype=torch.int64)
EOS = 0


def build(params, vocab, **kwargs):
    return SamplingBatch.build(params, vocab_size=vocab, eos_ids=[EOS], **kwargs)


def peaked_logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2.5


MODES = [
    SamplingParams(temperature=0),
    SamplingParams(),
    SamplingParams(seed=1),
    SamplingParams(top_k=3, top_p=0.8),
    SamplingParams(top_p=0.9, min_p=0.05, seed=5),
]


@pytest.mark.parametrize("cap", [4, None])
def test_one_hot_logits_pick_the_hot_token_in_every_mode(cap):
    vocab = 300
    hot = torch.tensor([17, 299, 0, 150, 42])
    logits = torch.full((len(MODES), vocab), float("-inf"))
    logits[torch.arange(len(MODES)), hot] = 1.5
    out = Sampler(candidate_cap=cap)(logits, build(MODES, vocab))
    assert out.token_ids.tolist() == hot.tolist()
    assert not out.no_allowed_token.any()


def test_greedy_matches_argmax_and_all_greedy_fast_path():
    logits = peaked_logits(6, 500, seed=1)
    expected = logits.argmax(dim=1)
    out = Sampler()(logits.clone(), build([SamplingParams(temperature=0)] * 6, 500))
    assert torch.equal(out.token_ids, expected)
    mixed = [SamplingParams(temperature=0), SamplingParams(seed=3)] * 3
    out = Sampler()(logits.clone(), build(mixed, 500))
    assert torch.equal(out.token_ids[::2], expected[::2])


def test_row_with_nothing_allowed_finishes_instead_of_sampling():
    vocab = 64
    allowed = torch.ones(len(MODES), vocab, dtype=torch.bool)
    allowed[1] = False
    allowed[3] = False
    allowed[4] = False
    allowed[4, [7, 40]] = True
    logits = peaked_logits(len(MODES), vocab, seed=2)
    logits[4] = float("nan")  # a broken row ranks its tokens last; the mask still allows two of them
    out = Sampler()(logits, build(MODES, vocab), bool_to_bitmask(allowed))
    assert out.no_allowed_token.tolist() == [False, True, False, True, False]
    assert out.token_ids[out.no_allowed_token].tolist() == [NO_TOKEN] * 2
    assert out.token_ids[4].item() in (7, 40)


def test_bitmask_rows_apply_through_indices_only():
    vocab = 64
    allowed = torch.zeros(2, vocab, dtype=torch.bool)
    allowed[0, 5] = True
    allowed[1, 9] = True
    logits = peaked_logits(4, vocab, seed=4)
    expected = logits.argmax(dim=1)
    out = Sampler()(logits, build([SamplingParams(temperature=0)] * 4, vocab), bool_to_bitmask(allowed),
                    indices=torch.tensor([3, 1]))
    assert out.token_ids.tolist() == [expected[0].item(), 9, expected[2].item(), 5]


def test_nan_logits_are_never_sampled():
    vocab = 32
    logits = torch.full((2000, vocab), float("nan"))
    logits[:, [3, 9]] = 0.0
    params = [SamplingParams(seed=i) if i % 2 else SamplingParams(top_p=0.99) for i in range(2000)]
    out = Sampler()(logits, build(params, vocab))
    assert set(out.token_ids.tolist()) == {3, 9}


def test_half_precision_logits_are_accepted_and_left_alone():
    logits = peaked_logits(2, 100, seed=3).to(torch.bfloat16)
    before = logits.clone()
    out = Sampler()(logits, build([SamplingParams(temperature=0)] * 2, 100))
    assert torch.equal(out.token_ids, before.float().argmax(1)) and torch.equal(logits, before)


def test_non_contiguous_logits_are_sampled_in_place():
    padded = peaked_logits(3, 140, seed=6)
    logits = padded[:, 5:133]  # a strided view, as a slice of a padded LM head
    expected = logits.argmax(dim=1)
    batch = build([SamplingParams(temperature=0, logit_bias={0: 50.0}), SamplingParams(temperature=0),
                   SamplingParams(top_k=1)], 128)
    out = Sampler()(logits, batch)
    assert out.token_ids.tolist() == [0, expected[1].item(), expected[2].item()]
    assert padded[0, 5] > 40  # the bias landed in the caller's tensor (float32 is edited in place)


def test_logits_shape_is_checked():
    with pytest.raises(InvalidParameterError, match=r"invalid logits=\(2, 10\): expected \(batch=1, vocab=10\)"):
        Sampler()(torch.zeros(2, 10), build([SamplingParams()], 10))


# ------------------------------------------------------------------------------------- statistics


def hf_probs(row: torch.Tensor, top_k: int, top_p: float, min_p: float = 0.0) -> torch.Tensor:
    scores = row.unsqueeze(0)
    if top_k != -1:
        scores = TopKLogitsWarper(top_k)(NO_IDS, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(NO_IDS, scores)
    if min_p > 0.0:
        scores = MinPLogitsWarper(min_p)(NO_IDS, scores)
    return torch.softmax(scores[0], dim=0)


def chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    support = probs > 0
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    assert counts[~support].sum() == 0, "sampled outside the kept set"
    expected = probs[support].double() * len(tokens)
    return stats.chisquare(counts[support].numpy(), expected.numpy() * counts.sum().item() / expected.sum().item()).pvalue


@pytest.mark.parametrize(
    "seeded,top_k,top_p,temperature,min_p",
    [
        (True, -1, 1.0, 1.0, 0.0),
        (True, 8, 1.0, 0.7, 0.0),
        (True, -1, 0.8, 1.0, 0.0),
        (True, 12, 0.9, 1.5, 0.0),
        (True, -1, 1.0, 1.0, 0.05),
        (False, -1, 1.0, 1.0, 0.0),
        (False, 12, 0.9, 1.5, 0.05),
    ],
)
def test_draws_match_renormalised_probabilities(seeded, top_k, top_p, temperature, min_p):
    """12,000 draws from one row (in a batch of copies): chi-square vs transformers' filtered softmax."""
    vocab, draws = 40, 12000
    row = torch.randn(vocab, generator=torch.Generator().manual_seed(top_k + 100)) * 1.5
    allowed = torch.rand(vocab, generator=torch.Generator().manual_seed(9)) < 0.7
    probs = hf_probs((row / temperature).masked_fill(~allowed, float("-inf")), top_k, top_p, min_p)
    params = [
        SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=i if seeded else None)
        for i in range(draws)
    ]
    sampler = Sampler(generator=torch.Generator().manual_seed(1234), candidate_cap=16)
    bitmask = bool_to_bitmask(allowed).expand(draws, -1).contiguous()
    out = sampler(row.expand(draws, -1).clone(), build(params, vocab), bitmask)
    assert chi_square_pvalue(out.token_ids, probs) > 1e-3


def test_never_samples_outside_mask_or_top_p_set_on_a_large_vocab():
    vocab, rows = 4096, 64
    logits = peaked_logits(rows, vocab, seed=11)
    allowed = torch.rand(rows, vocab, generator=torch.Generator().manual_seed(12)) < 0.3
    masked = logits.masked_fill(~allowed, float("-inf"))
    params = [SamplingParams(top_p=0.7, seed=i if i % 2 else None) for i in range(rows)]
    batch = build(params, vocab)
    sampler = Sampler(candidate_cap=8)  # most rows need widening
    for step in range(5):
        out = sampler(logits.clone(), batch, bool_to_bitmask(allowed))
        for i, token in enumerate(out.token_ids.tolist()):
            assert torch.isfinite(TopPLogitsWarper(0.7)(NO_IDS, masked[i : i + 1]))[0, token]
        batch.update(out.token_ids)


# ------------------------------------------------------------------------------------- seeded determinism


def run_steps(sampler, logits_per_step, params, row, others, steps=6, **kwargs):
    """Put ``params`` at ``row`` among ``others``; return its tokens over ``steps`` steps."""
    batch_params = list(others)
    batch_params.insert(row, params)
    batch = build(batch_params, logits_per_step.shape[-1], **kwargs)
    tokens = []
    for step in range(steps):
        logits = peaked_logits(len(batch_params), logits_per_step.shape[-1], seed=1000 + step)
        logits[row] = logits_per_step[step]
        out = sampler(logits, batch)
        tokens.append(out.token_ids[row].item())
        batch.update(out.token_ids)
    return tokens


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(seed=77, temperature=1.2),
        SamplingParams(seed=77, top_p=0.9),
        SamplingParams(seed=2**62, top_k=20, min_p=0.01, frequency_penalty=0.5),
    ],
)
def test_seeded_request_draws_the_same_tokens_in_any_batch_and_row(params):
    vocab = 2000
    per_step = torch.randn(6, vocab, generator=torch.Generator().manual_seed(5)) * 1.5
    alone = run_steps(Sampler(), per_step, params, 0, [])
    crowd = [SamplingParams(temperature=0), SamplingParams(top_k=5), SamplingParams(seed=3), SamplingParams(top_p=0.5)]
    assert run_steps(Sampler(), per_step, params, 3, crowd) == alone
    assert run_steps(Sampler(candidate_cap=None), per_step, params, 1, crowd[:2]) == alone
    assert run_steps(Sampler(candidate_cap=4), per_step, params, 4, crowd) == alone
    assert len(set(alone)) > 1


def test_different_seeds_draw_differently():
    vocab = 2000
    per_step = torch.zeros(6, vocab)
    assert run_steps(Sampler(), per_step, SamplingParams(seed=1), 0, []) != run_steps(
        Sampler(), per_step, SamplingParams(seed=2), 0, []
    )


# ------------------------------------------------------------------------------------- logprobs


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_logprobs_ranks_and_requested_ids(mode):
    vocab = 50
    logits = peaked_logits(3, vocab, seed=21)
    allowed = torch.ones(3, vocab, dtype=torch.bool)
    allowed[:, :10] = False
    params = [
        SamplingParams(temperature=0, logprobs=3),
        SamplingParams(seed=4, token_ids_logprobs=[1, 20, 30]),
        SamplingParams(temperature=0),
    ]
    out = Sampler(logprobs_mode=mode)(logits.clone(), build(params, vocab), bool_to_bitmask(allowed))
    source = logits if mode == "raw_logprobs" else logits.masked_fill(~allowed, float("-inf"))
    reference = torch.log_softmax(source, dim=1)
    for row in (0, 1):
        token = out.token_ids[row]
        assert out.logprobs[row].item() == pytest.approx(reference[row, token].item(), abs=1e-5)
        assert out.ranks[row].item() == (reference[row] > reference[row, token]).sum().item() + 1
    assert out.top_ids[0].tolist() == torch.topk(reference[0], 3).indices.tolist()
    torch.testing.assert_close(out.top_logprobs[0], torch.topk(reference[0], 3).values)
    torch.testing.assert_close(out.token_ids_logprobs[1], reference[1, [1, 20, 30]])
    assert torch.isnan(out.logprobs[2]) and out.top_ids[1].tolist() == [-1, -1, -1]
    if mode == "processed_logprobs":
        assert out.token_ids_logprobs[1, 0].item() == float("-inf")


def test_logprobs_mode_per_request_against_torch():
    """Four rows, four modes in one batch, each checked against a direct torch computation of what vLLM's
    mode means: raw = the logits as given; processed = the distribution drawn from (mask, penalty,
    temperature, top-k; greedy rows without temperature)."""
    vocab = 40
    logits = peaked_logits(4, vocab, seed=8)
    allowed = torch.ones(4, vocab, dtype=torch.bool)
    allowed[:, 5:15] = False
    params = [
        SamplingParams(temperature=0, logprobs=2, logprobs_mode="raw_logits"),
        SamplingParams(temperature=0.5, top_k=6, seed=1, logprobs=5, logprobs_mode="processed_logprobs"),
        SamplingParams(temperature=0, presence_penalty=1.5, logprobs=3, logprobs_mode="processed_logits"),
        SamplingParams(temperature=2.0, seed=2, logprobs=1),  # the sampler's default
    ]
    batch = build(params, vocab, output_token_ids=[[], [], [20, 21], []])
    out = Sampler(logprobs_mode="raw_logprobs")(logits.clone(), batch, bool_to_bitmask(allowed))
    masked = logits.masked_fill(~allowed, float("-inf"))
    tempered = masked[1] / 0.5
    kth = torch.topk(tempered, 6).values[-1]
    expected = [
        logits[0],
        torch.log_softmax(tempered.masked_fill(tempered < kth, float("-inf")), dim=0),
        masked[2] - 1.5 * torch.isin(torch.arange(vocab), torch.tensor([20, 21])),
        torch.log_softmax(logits[3], dim=0),
    ]
    for row, reference in enumerate(expected):
        token = out.token_ids[row].item()
        assert out.logprobs[row].item() == pytest.approx(reference[token].item(), abs=1e-5), row
        n = params[row].logprobs
        torch.testing.assert_close(out.top_logprobs[row, :n], torch.topk(reference, n).values)
        assert out.top_ids[row, :n].tolist() == torch.topk(reference, n).indices.tolist()
    assert torch.isinf(out.top_logprobs[1, :5]).sum() == 0  # the 6 kept tokens hold the top 5
    with pytest.raises(InvalidParameterError, match="logprobs_mode='processed'"):
        SamplingParams(logprobs_mode="processed")
    with pytest.raises(InvalidParameterError, match="logprobs_mode='raw'"):
        Sampler(logprobs_mode="raw")


def test_prompt_logprobs_against_log_softmax():
    from grammask.sampler import prompt_logprobs

    logits = peaked_logits(5, 30, seed=3)
    prompt = torch.tensor([4, 9, 0, 29, 7])
    chosen, rank, top_values, top_ids = prompt_logprobs(logits, prompt, 3)
    reference = torch.log_softmax(logits, dim=1)
    torch.testing.assert_close(chosen, reference[torch.arange(5), prompt])
    assert rank.tolist() == [int((reference[i] > reference[i, t]).sum()) + 1 for i, t in enumerate(prompt.tolist())]
    torch.testing.assert_close(top_values, torch.topk(reference, 3).values)
    assert torch.equal(prompt_logprobs(logits, prompt, 0, "raw_logits")[0], logits[torch.arange(5), prompt])


def test_no_logprobs_requested_returns_none():
    out = Sampler()(peaked_logits(1, 10, 0), build([SamplingParams()], 10))
    assert out.logprobs is None and out.top_ids is None and out.token_ids_logprobs is None


# ------------------------------------------------------------------------------------- penalties & bias over steps


def test_min_new_tokens_blocks_eos_then_allows_it():
    vocab = 10
    logits = torch.zeros(2, vocab)
    logits[:, EOS] = 5.0
    logits[:, 7] = 5.0
    logits[:, 4] = 4.0
    params = [SamplingParams(temperature=0, min_new_tokens=2, stop_token_ids=[7]),
              SamplingParams(temperature=0, min_new_tokens=2, ignore_eos=True)]
    batch = build(params, vocab)
    picks = []
    for _ in range(3):
        out = Sampler()(logits.clone(), batch)
        picks.append(out.token_ids.tolist())
        batch.update(out.token_ids)
    # row 0: EOS and stop id 7 blocked for 2 tokens; row 1: EOS is not a stop (ignore_eos), so never blocked
    assert picks == [[4, 0], [4, 0], [0, 0]]


def test_frequency_and_presence_penalties_change_greedy_choice_as_hand_computed():
    vocab = 5
    logits = torch.tensor([[0.0, 3.0, 2.5, 2.2, 0.0]])
    batch = build([SamplingParams(temperature=0, frequency_penalty=0.4, presence_penalty=0.2)], vocab)
    picks = []
    for _ in range(4):
        out = Sampler()(logits.clone(), batch)
        picks.append(out.token_ids.item())
        batch.update(out.token_ids)
    # 3.0 → 2.4 after one 1 (0.4 + 0.2): 2.5 wins → 1.9; then 2.4 vs 2.2 → 1 (→ 2.0); then 2.2 → 3
    assert picks == [1, 2, 1, 3]


def test_repetition_penalty_counts_the_prompt():
    logits = torch.tensor([[0.0, 3.0, 2.0]])
    out = Sampler()(logits, build([SamplingParams(temperature=0, repetition_penalty=2.0)], 3, prompt_token_ids=[[1]]))
    assert out.token_ids.item() == 2


def test_logit_bias_is_added():
    logits = torch.tensor([[0.0, 3.0, 2.0]])
    out = Sampler()(logits, build([SamplingParams(temperature=0, logit_bias={"2": 1.5})], 3))
    assert out.token_ids.item() == 2


def test_filter_and_merge_keep_penalty_state_and_positions():
    vocab = 30
    params = [SamplingParams(seed=i, frequency_penalty=1.0, temperature=0.5) for i in range(4)]
    batch = build(params, vocab)
    history = [[] for _ in params]
    for step in range(3):
        out = Sampler()(peaked_logits(4, vocab, seed=step), batch)
        batch.update(out.token_ids)
        for row, token in enumerate(out.token_ids.tolist()):
            history[row].append(token)
    kept = batch.filter([3, 1])
    fresh = build([params[3], params[1]], vocab, output_token_ids=[history[3], history[1]])
    merged = kept.merge(build([SamplingParams(temperature=0)], vocab))
    assert torch.equal(kept.output_len, fresh.output_len) and merged.output_len.tolist() == [3, 3, 0]
    torch.testing.assert_close(kept.penalties.counts, fresh.penalties.counts)
    logits = peaked_logits(2, vocab, seed=50)
    assert torch.equal(Sampler()(logits.clone(), kept).token_ids, Sampler()(logits.clone(), fresh).token_ids)
    assert merged.penalties.rows.tolist() == [0, 1] and merged.groups.greedy == [2]
