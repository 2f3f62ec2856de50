"""Rejection sampling under a grammar: the emitted tokens follow the target's masked distribution
(chi-square against the renormalised probabilities, with and without draft probabilities), nothing
outside a position's mask is ever emitted, greedy rows match hand-checked argmax walks, seeded rows
emit the same tokens in any batch."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from grammask.errors import InvalidParameterError
from grammask.masking.bitmask import bool_to_bitmask
from grammask.sampler import SamplingBatch, SamplingParams
from grammask.sampler.spec_decode import rejection_sample

VOCAB = 12
SAMPLES = 30000


def _masked_probs(logits: torch.Tensor, allowed: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax((logits / temperature).masked_fill(~allowed, float("-inf")), dim=-1)


def _chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    support = probs > 0
    assert counts[~support].sum() == 0, "a token outside the mask was emitted"
    expected = probs[support].double() / probs[support].double().sum() * counts.sum()
    return stats.chisquare(counts[support].numpy(), expected.numpy()).pvalue


def _setup(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, VOCAB, generator=g) * 1.5  # positions 0, 1 (drafts) and 2 (bonus)
    allowed = torch.rand(3, VOCAB, generator=g) < 0.6
    allowed[:, :3] = True
    draft_probs = torch.softmax(torch.randn(2, VOCAB, generator=g) * 1.5, dim=-1)
    return g, logits, allowed, draft_probs


@pytest.mark.parametrize("with_probs", [True, False])
def test_emitted_tokens_follow_the_masked_target_distribution(with_probs):
    g, logits, allowed, draft_probs = _setup(seed=3 if with_probs else 4)
    temperature = 0.8
    q = _masked_probs(torch.log(draft_probs), allowed[:2], 1.0)
    if with_probs:  # drafts drawn from the masked draft distribution, as the draft model would under the grammar
        drafts = torch.stack([torch.multinomial(q[j], SAMPLES, replacement=True, generator=g) for j in range(2)], 1)
    else:  # n-gram drafts are any tokens, allowed or not
        drafts = torch.randint(0, VOCAB, (SAMPLES, 2), generator=g)
    batch = SamplingBatch.build([SamplingParams(temperature=temperature)] * SAMPLES, vocab_size=VOCAB)
    out = rejection_sample(
        logits.repeat(SAMPLES, 1), drafts.flatten(), [2] * SAMPLES, bool_to_bitmask(allowed.repeat(SAMPLES, 1)), batch,
        draft_probs=draft_probs.repeat(SAMPLES, 1) if with_probs else None, generator=torch.Generator().manual_seed(1),
    )
    tokens, counts = out.token_ids, out.num_tokens
    p = _masked_probs(logits, allowed, temperature)
    assert bool((counts >= 1).all())
    assert _chi_square_pvalue(tokens[:, 0], p[0]) > 1e-3
    first_accepted = (tokens[:, 0] == drafts[:, 0]) & (counts >= 2)
    assert _chi_square_pvalue(tokens[first_accepted, 1], p[1]) > 1e-3
    both = first_accepted & (tokens[:, 1] == drafts[:, 1]) & (counts == 3)
    assert both.sum() > 150 and _chi_square_pvalue(tokens[both, 2], p[2]) > 1e-3
    # a rejected position ends the output: nothing after it
    assert bool((tokens[counts < 3, 2] == -1).all())
    if with_probs:  # acceptance rate at position 0 is sum(min(p, q)), the theory's figure
        rate = (tokens[:, 0] == drafts[:, 0]).double().mean().item()
        overlap = torch.minimum(p[0], q[0]).sum().item()
        assert rate == pytest.approx(overlap, abs=0.015)


def test_greedy_rows_walk_the_masked_argmax():
    logits = torch.tensor([[0.0, 5.0, 4.0, 1.0], [3.0, 0.0, 9.0, 8.0], [1.0, 2.0, 0.0, 0.0]] * 2)
    allowed = torch.ones(6, 4, dtype=torch.bool)
    allowed[1, 2] = False  # position 1's argmax 2 is masked: 3 is the masked argmax
    allowed[4, 2] = False
    bitmask = bool_to_bitmask(allowed)
    batch = SamplingBatch.build([SamplingParams(temperature=0)] * 2, vocab_size=4)
    out = rejection_sample(logits, torch.tensor([1, 3, 1, 2]), [2, 2], bitmask, batch)
    # request 0: 1 == argmax, 3 == masked argmax, bonus argmax 1; request 1: draft 2 is masked -> 3
    assert out.to_lists() == [[1, 3, 1], [1, 3]]


def test_nothing_outside_the_mask_even_with_drafts_the_grammar_rejects():
    g = torch.Generator().manual_seed(0)
    requests = 400
    logits = torch.randn(requests * 4, VOCAB, generator=g) * 3
    allowed = torch.rand(requests * 4, VOCAB, generator=g) < 0.3
    allowed[::7] = False  # some positions allow nothing: the output ends before them
    drafts = torch.randint(0, VOCAB, (requests * 3,), generator=g)
    params = [SamplingParams(temperature=t, seed=s) for t, s in zip([0, 1.3, 0.5, 1.0] * 100, [None, 5, None, 9] * 100)]
    out = rejection_sample(logits, drafts, [3] * requests, bool_to_bitmask(allowed), SamplingBatch.build(params, vocab_size=VOCAB),
                           draft_probs=torch.rand(requests * 3, VOCAB, generator=g))
    for i, tokens in enumerate(out.to_lists()):
        for j, token in enumerate(tokens):
            assert allowed[i * 4 + j, token], (i, j, token)


def test_seeded_requests_emit_the_same_tokens_in_any_batch():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(4, 50, generator=g)
    drafts, probs = torch.randint(0, 50, (3,), generator=g), torch.rand(3, 50, generator=g)
    mask = bool_to_bitmask(torch.rand(4, 50, generator=g) < 0.8)
    seeded = SamplingParams(temperature=1.2, seed=123)
    alone = rejection_sample(logits, drafts, [3], mask, SamplingBatch.build([seeded], vocab_size=50), draft_probs=probs)
    other = torch.randn(3, 50, generator=g)
    crowd = rejection_sample(
        torch.cat([other, logits]), torch.cat([torch.tensor([4, 5]), drafts]), [2, 3],
        torch.cat([bool_to_bitmask(torch.ones(3, 50, dtype=torch.bool)), mask]),
        SamplingBatch.build([SamplingParams(), seeded], vocab_size=50),
        draft_probs=torch.cat([torch.rand(2, 50, generator=g), probs]),
    )
    assert crowd.to_lists()[1] == alone.to_lists()[0]
    draws = {tuple(rejection_sample(logits, drafts, [3], mask, SamplingBatch.build([SamplingParams(temperature=1.2, seed=s)],
                                                                                  vocab_size=50), draft_probs=probs).to_lists()[0])
             for s in range(12)}
    assert len(draws) > 1


def test_shapes_are_checked():
    batch = SamplingBatch.build([SamplingParams()], vocab_size=8)
    mask = bool_to_bitmask(torch.ones(3, 8, dtype=torch.bool))
    with pytest.raises(InvalidParameterError, match=r"target_logits.shape.*sum\(K_i \+ 1\)"):
        rejection_sample(torch.zeros(2, 8), torch.tensor([1, 2]), [2], mask, batch)
    with pytest.raises(InvalidParameterError, match=r"draft_token_ids=\[9\]: expected ids in \[0, 8\)"):
        rejection_sample(torch.zeros(3, 8), torch.tensor([1, 9]), [2], mask, batch)
