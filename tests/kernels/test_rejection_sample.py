"""The rejection-sampling row kernel: Triton (interpreter on CPU) against the torch reference, on awkward
vocabulary sizes, strided logits, rows that allow nothing, greedy / random / bonus rows, with and
without draft probabilities; and the acceptance walk against hand-built cases."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (the kernel module is imported lazily)

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.kernels.gumbel_sample import seeded_row_state
from grammask.kernels.rejection_sample import accept_walk, rejection_rows
from grammask.masking.bitmask import bool_to_bitmask

pytest.importorskip("triton")
# The interpreter evaluates both sides of every tl.where in numpy (log(0), x / tiny): warnings, not results.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="the Triton kernel on CPU tensors needs TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)",
)


def _case(rows: int, vocab: int, seed: int, with_probs: bool, strided: bool):
    g = torch.Generator().manual_seed(seed)
    wide = torch.randn(rows, vocab + 7, generator=g) * 2
    logits = wide[:, :vocab] if strided else wide[:, :vocab].contiguous()
    allowed = torch.rand(rows, vocab, generator=g) < 0.5
    allowed[0] = False  # nothing allowed
    draft_index = torch.where(torch.arange(rows) % 3 == 2, -1, torch.arange(rows))  # every third row is a bonus row
    draft_token = torch.where(draft_index >= 0, torch.randint(0, vocab, (rows,), generator=g), -1)
    draft_probs = torch.rand(rows, vocab, generator=g) if with_probs else None
    greedy = torch.arange(rows) % 4 == 1
    temperature = torch.where(greedy, 1.0, 0.7 + torch.rand(rows, generator=g))
    state = seeded_row_state(torch.randint(0, 2**62, (rows,), generator=g), torch.arange(rows))
    return logits, bool_to_bitmask(allowed), draft_probs, draft_index, draft_token, temperature, greedy, state


@needs_interpreter
@pytest.mark.parametrize("vocab", [33, 100, 4099])
@pytest.mark.parametrize("with_probs", [True, False])
def test_triton_equals_torch(vocab, with_probs):
    args = _case(rows=13, vocab=vocab, seed=vocab, with_probs=with_probs, strided=vocab == 100)
    ratio_t, token_t = rejection_rows(*args, impl="torch")
    ratio_k, token_k = rejection_rows(*args, impl="triton")
    assert torch.equal(token_k, token_t)
    torch.testing.assert_close(ratio_k, ratio_t, rtol=1e-5, atol=1e-7)
    assert token_t[0] == -1 and (token_t[1:] >= 0).all()


def test_torch_rows_against_hand_computed_values():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]]))
    allowed = torch.tensor([[True, True, True, False], [False, True, True, True]])
    draft_probs = torch.tensor([[0.5, 0.25, 0.25, 0.0], [0.0, 0.0, 1.0, 1.0]])
    ratio, token = rejection_rows(
        logits, bool_to_bitmask(allowed), draft_probs, torch.tensor([0, 1]), torch.tensor([0, 2]),
        torch.ones(2), torch.tensor([False, True]), torch.zeros(2, dtype=torch.int64), impl="torch",
    )
    # row 0: p = (1/6, 2/6, 3/6, 0), q = (.5, .25, .25, 0): p(0)/q(0) = 1/3; the residual (0, 1/12, 1/4, 0)
    # excludes token 0. Row 1 is greedy: the masked argmax is 3; q renormalised = (0, 0, .5, .5), p(2) = 1/3.
    assert ratio.tolist() == pytest.approx([1 / 3, (3 / 9) / 0.5])
    assert token[0] in (1, 2) and token[1] == 3


def test_accept_walk_emits_accepted_drafts_then_one_token():
    # two requests, 2 drafts each: rows 0-2 and 3-5; request 0 rejects at position 1, request 1 accepts all
    ratio = torch.tensor([0.9, 0.1, 0.0, 1.0, 1.0, 0.0])
    token = torch.tensor([7, 8, 9, 4, 5, 6])
    uniform = torch.full((6,), 0.5, dtype=torch.float64)
    draft = torch.tensor([1, 2, -1, 3, 3, -1])
    row_of = torch.tensor([[0, 1, 2], [3, 4, 5]])
    out, n = accept_walk(ratio, token, uniform, torch.zeros(6, dtype=torch.bool), draft, row_of, 2)
    assert out.tolist() == [[1, 8, -1], [3, 3, 6]] and n.tolist() == [2, 3]
    greedy = torch.ones(6, dtype=torch.bool)
    out, n = accept_walk(ratio, torch.tensor([1, 5, 9, 3, 3, -1]), uniform, greedy, draft, row_of, 2)
    assert out.tolist() == [[1, 5, -1], [3, 3, -1]] and n.tolist() == [2, 2]  # a bonus row allowing nothing adds nothing


def test_unknown_impl_is_refused():
    with pytest.raises(InvalidParameterError, match="impl='cuda'"):
        rejection_rows(*_case(3, 8, 0, True, False), impl="cuda")


@needs_interpreter
def test_sampler_outputs_equal_on_both_paths():
    """The torch path draws only each request's used row (accepting first); the Triton kernel draws every
    row: the emitted tokens must be the same."""
    from grammask.sampler import SamplingBatch, SamplingParams, rejection_sample

    g = torch.Generator().manual_seed(11)
    counts = [3, 0, 2, 4]
    rows, drafts = sum(counts) + len(counts), sum(counts)
    logits = torch.randn(rows, 70, generator=g) * 2
    mask = bool_to_bitmask(torch.rand(rows, 70, generator=g) < 0.6)
    probs = torch.softmax(torch.randn(drafts, 70, generator=g), dim=-1)
    draft_ids = torch.multinomial(probs, 1, generator=g).flatten()
    params = [SamplingParams(seed=1), SamplingParams(temperature=0), SamplingParams(seed=2, top_k=5), SamplingParams(seed=3)]
    batch = SamplingBatch.build(params, vocab_size=70)
    outputs = [rejection_sample(logits, draft_ids, counts, mask, batch, draft_probs=probs, impl=impl).to_lists()
               for impl in ("torch", "triton")]
    assert outputs[0] == outputs[1]
