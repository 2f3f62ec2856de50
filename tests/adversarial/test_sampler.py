"""The sampler never returns a token the mask forbids, and returns one whenever one is allowed, whatever
the parameters and logits: the reproducers of issue #12, then a seeded fuzz over extreme parameters and
logits (10,000 rows on the torch path, more through the Triton Gumbel kernel), checked against the
bitmask itself."""

from __future__ import annotations

import functools
import os
import random

import pytest
import torch

import grammask as gm
from grammask.kernels import gumbel_sample
from grammask.sampler import NO_TOKEN

FLOAT32_MAX = torch.finfo(torch.float32).max
EOS = 0


def only_allowed(vocab: int, ids: list[int]) -> torch.Tensor:
    allowed = torch.zeros(1, vocab, dtype=torch.bool)
    allowed[0, ids] = True
    return allowed


def draw(logits, params, allowed, **build):
    batch = gm.SamplingBatch.build(params, vocab_size=logits.shape[1], **build)
    return gm.Sampler(generator=torch.Generator().manual_seed(0))(logits, batch, gm.bool_to_bitmask(allowed))


# ----------------------------------------------------------------------------------- the reproducers


def issue_logits(vocab: int = 1000) -> torch.Tensor:
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(12))
    logits[0, 5] = 5.0
    return logits


@pytest.mark.parametrize(
    "hot, params",
    [
        # 5 / 1e-35 = 5e35, then / 1e-3 overflows: the weights were NaN and the last column (999) won
        (5.0, dict(repetition_penalty=1e-35, temperature=1e-3)),
        (float("inf"), dict(repetition_penalty=1e-9)),
        (3e38, dict(temperature=1e-6)),
        (3e38, dict(temperature=1e-6, top_k=50)),  # returned 915
        (3e38, dict(temperature=1e-6, top_p=0.9)),
        (3e38, dict(temperature=1e-6, min_p=0.1, seed=3)),
        (5.0, dict(repetition_penalty=1e-35, temperature=1e-3, seed=1)),
        (5.0, dict(repetition_penalty=1e-35, temperature=0.0)),
    ],
)
def test_issue_reproducers_return_an_allowed_token(hot, params):
    logits = issue_logits()
    logits[0, 5] = hot
    out = draw(logits, [gm.SamplingParams(**params)], only_allowed(1000, [5, 7]), prompt_token_ids=[[5]])
    assert out.token_ids.tolist() == [5]


def test_a_huge_allowed_logit_beats_a_large_one_at_a_tiny_temperature():
    """Both overflow when divided by 1e-6; shifting by the row's maximum first keeps 3e38 the sure winner."""
    logits = torch.zeros(1, 64)
    logits[0, 3], logits[0, 9] = 2e38, 3e38
    for seed in (None, 4):
        out = draw(logits.clone(), [gm.SamplingParams(temperature=1e-6, seed=seed)], only_allowed(64, [3, 9]))
        assert out.token_ids.tolist() == [9]


@pytest.mark.parametrize("penalty", [1e38, 3e38])
def test_negative_logits_times_a_huge_penalty_stay_allowed(penalty):
    """-5 * 1e38 overflowed to -inf: every allowed token looked excluded and the row ended."""
    logits = torch.full((1, 64), -5.0)
    out = draw(logits, [gm.SamplingParams(repetition_penalty=penalty)], only_allowed(64, [2, 3]),
               prompt_token_ids=[[2, 3]])
    assert out.token_ids.item() in (2, 3)


@pytest.mark.parametrize("value", [float("nan"), float("-inf")])
@pytest.mark.parametrize("params", [dict(temperature=0.0), dict(), dict(top_k=2, seed=1), dict(top_p=0.5)])
def test_broken_logits_rank_last_but_never_end_a_structure(value, params):
    logits = torch.full((1, 64), value)
    logits[0, 50] = 1.0  # the only sane logit is masked
    out = draw(logits, [gm.SamplingParams(**params)], only_allowed(64, [6, 7]))
    assert out.token_ids.item() in (6, 7)
    assert not out.no_allowed_token.any()


def test_nothing_allowed_is_the_only_way_to_no_token():
    out = draw(torch.full((1, 64), float("nan")), [gm.SamplingParams()], torch.zeros(1, 64, dtype=torch.bool))
    assert out.token_ids.tolist() == [NO_TOKEN] and out.no_allowed_token.tolist() == [True]


@gm.register_processor("adversarial_revive_everything")
class ReviveEverything:
    """A processor that writes over every logit, masked ones included."""

    def __init__(self, value: float) -> None:
        self.value = value

    @classmethod
    def from_params(cls, params, context):
        return cls(float(params["value"]))

    def apply(self, logits, output_ids):
        logits.fill_(self.value)


@pytest.mark.parametrize("value", [1.0, float("inf"), float("nan")])
def test_a_processor_cannot_revive_a_masked_token(value):
    params = gm.SamplingParams(logits_processors=[{"name": "adversarial_revive_everything", "params": {"value": value}}])
    for seed in range(20):
        batch = gm.SamplingBatch.build([params], vocab_size=64)
        out = gm.Sampler(generator=torch.Generator().manual_seed(seed))(
            torch.randn(1, 64), batch, gm.bool_to_bitmask(only_allowed(64, [11, 12]))
        )
        assert out.token_ids.item() in (11, 12)


def test_inverse_cdf_never_lands_on_a_zero_weight_tail():
    """u * total can round up to total; the draw then fell past the last positive column."""
    from grammask.sampler import ops

    weights = torch.zeros(1, 8)
    weights[0, 2] = 3.0
    largest_uniform = torch.tensor([1.0 - 2.0**-24])
    assert ops.inverse_cdf_sample(weights, largest_uniform).tolist() == [2]


# ------------------------------------------------------------------------------------------ the fuzz

TEMPERATURES = [0.0, 1e-6, 1.5e-6, 1e-3, 0.7, 1.0, 50.0, 1e30]
TOP_K = [-1, -1, 1, 2, 7, 300, 10**9]
TOP_P = [1.0, 1.0, 1e-9, 0.3, 0.9, 0.999999]
MIN_P = [0.0, 0.0, 1e-9, 0.5, 1.0]
REPETITION = [1.0, 1.0, 1e-35, 1e-9, 0.5, 2.0, 1e9, 3e38]
LINEAR = [0.0, 0.0, -2.0, 2.0]
SPECIAL_LOGITS = torch.tensor(
    [float("inf"), float("-inf"), float("nan"), 3e38, -3e38, FLOAT32_MAX, -FLOAT32_MAX, 1e30, 1e-40, 0.0]
)
ROW_SCALES = torch.tensor([1.0, 1.0, 30.0, 1e4, 1e37, 0.0])
VOCABS = [33, 64, 100, 257]


def random_params(rng: random.Random, vocab: int) -> gm.SamplingParams:
    return gm.SamplingParams(
        temperature=rng.choice(TEMPERATURES), top_k=rng.choice(TOP_K), top_p=rng.choice(TOP_P),
        min_p=rng.choice(MIN_P), repetition_penalty=rng.choice(REPETITION),
        frequency_penalty=rng.choice(LINEAR), presence_penalty=rng.choice(LINEAR),
        min_new_tokens=rng.choice([0, 0, 5]), seed=rng.choice([None, rng.randrange(2**63)]),
        logprobs=rng.choice([None, None, 0, 3]),
        logit_bias={rng.randrange(vocab): rng.choice([-100.0, 100.0]) for _ in range(rng.randrange(3))},
    )


def random_logits(gen: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Rows of N(0, s) for a random scale s (0 gives ties), with special values sprinkled on ~1/3 of the rows."""
    scale = ROW_SCALES[torch.randint(len(ROW_SCALES), (rows, 1), generator=gen)]
    logits = torch.randn(rows, vocab, generator=gen) * scale
    sprinkled = (torch.rand(rows, vocab, generator=gen) < 0.02) & (torch.rand(rows, 1, generator=gen) < 0.35)
    special = SPECIAL_LOGITS[torch.randint(len(SPECIAL_LOGITS), (rows, vocab), generator=gen)]
    return torch.where(sprinkled, special, logits)


def random_allowed(gen: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Per row: nothing, the last token only, a few tokens, or dense masks."""
    density = torch.tensor([0.0, 0.0, 0.01, 0.05, 0.5, 1.0])[torch.randint(6, (rows, 1), generator=gen)]
    allowed = torch.rand(rows, vocab, generator=gen) < density
    last_only = torch.rand(rows, generator=gen) < 0.1
    allowed[last_only] = False
    allowed[last_only, vocab - 1] = True
    return allowed


def fuzz_step(rng: random.Random, gen: torch.Generator, rows: int) -> tuple[int, int, int]:
    """One batch; returns (rows, masked tokens returned, NO_TOKEN rows with a token allowed)."""
    vocab = rng.choice(VOCABS)
    params = [random_params(rng, vocab) for _ in range(rows)]
    allowed = random_allowed(gen, rows, vocab)
    logits = random_logits(gen, rows, vocab).to(rng.choice([torch.float32, torch.float32, torch.float16]))
    # the prompts repeat allowed tokens, so the repetition penalty lands on them
    prompts = [allowed[i].nonzero().flatten()[:3].tolist() + [rng.randrange(vocab)] for i in range(rows)]
    outputs = [[rng.randrange(vocab) for _ in range(rng.randrange(3))] for _ in range(rows)]
    batch = gm.SamplingBatch.build(params, vocab_size=vocab, eos_ids=[EOS], prompt_token_ids=prompts,
                                   output_token_ids=outputs)
    sampler = gm.Sampler(candidate_cap=rng.choice(["auto", None, 4]), generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    out = sampler(logits, batch, gm.bool_to_bitmask(allowed))
    # min_new_tokens blocks EOS while fewer tokens were generated
    blocked = torch.tensor([p.min_new_tokens > len(o) for p, o in zip(params, outputs)])
    allowed[:, EOS] &= ~blocked
    ids = out.token_ids
    chosen = ids >= 0
    masked = chosen & ~allowed[torch.arange(rows), ids.clamp(min=0)]
    stalled = ~chosen & allowed.any(dim=1)
    assert torch.equal(out.no_allowed_token, ~chosen)
    return rows, int(masked.sum()), int(stalled.sum())


def run_fuzz(seed: int, steps: int, rows: int) -> tuple[int, int, int]:
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    totals = [0, 0, 0]
    for _ in range(steps):
        totals = [a + b for a, b in zip(totals, fuzz_step(rng, gen, rows))]
    return tuple(totals)


def test_fuzz_never_returns_a_masked_token_nor_stalls():
    rows, masked, stalled = run_fuzz(seed=12, steps=40, rows=250)
    assert rows >= 10_000
    assert (masked, stalled) == (0, 0)


def test_fuzz_through_the_triton_gumbel_kernel(monkeypatch):
    """The seeded rows' draw through the Triton kernel (interpreted on CPU) instead of torch."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernel on CPU tensors needs TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)")
    from grammask.sampler import sampler as sampler_module

    monkeypatch.setattr(sampler_module, "gumbel_argmax", functools.partial(gumbel_sample.gumbel_argmax, impl="triton"))
    rows, masked, stalled = run_fuzz(seed=13, steps=4, rows=60)
    assert (masked, stalled) == (0, 0)


# --------------------------------------------------------------------------------- the Gumbel kernels


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_gumbel_argmax_never_picks_an_excluded_column(impl):
    if impl == "triton":
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the Triton kernel on CPU tensors needs TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)")
    gen = torch.Generator().manual_seed(5)
    rows, cols = 64, 300
    scores = random_logits(gen, rows, cols)
    excluded = torch.rand(rows, cols, generator=gen) < 0.7
    scores = scores.masked_fill(excluded, float("-inf"))
    nan_rows = torch.arange(rows) % 4 == 0
    scores[nan_rows] = scores[nan_rows].masked_fill(excluded[nan_rows], float("nan"))  # NaN excludes too
    excluded |= scores.isnan()
    state = gumbel_sample.seeded_row_state(torch.arange(rows), torch.zeros(rows, dtype=torch.int64))
    column = gumbel_sample.gumbel_argmax(scores, state, impl=impl)
    picked_excluded = excluded[torch.arange(rows), column]
    has_choice = (~excluded).any(dim=1)
    assert not (picked_excluded & has_choice).any()
    reference = gumbel_sample.gumbel_argmax(scores, state, impl="torch")
    assert torch.equal(column, reference)
