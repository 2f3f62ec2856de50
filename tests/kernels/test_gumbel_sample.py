"""Seeded Gumbel-max: the hash against a from-the-spec MurmurHash3, Triton (interpreter) == torch bit for bit,
and the draws' distribution."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (the kernel module is imported lazily)

import struct

import pytest
import torch
from scipy import stats

from grammask.errors import InvalidParameterError
from grammask.kernels.gumbel_sample import gumbel_argmax, gumbel_noise, seeded_row_state
from grammask.kernels.gumbel_sample_torch import gumbel_from_hash, hash_tokens

triton = pytest.importorskip("triton")
needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="the Triton kernel on CPU tensors needs TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)",
)


def murmur3_x86_32(key: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 written from Appleby's description (with the tail), independent of the module."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & mask  # noqa: E731
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = rotl((k * c1) & mask, 15) * c2 & mask
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
    tail = key[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= rotl((k * c1) & mask, 15) * c2 & mask
    h ^= len(key)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def test_reference_murmur_matches_published_vectors():
    assert murmur3_x86_32(b"") == 0
    assert murmur3_x86_32(b"", 1) == 0x514E28B7
    assert murmur3_x86_32(b"hello") == 0x248BFA47
    assert murmur3_x86_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


def test_hash_is_murmur3_of_seed_position_token():
    seeds = torch.tensor([0, 1, 2**40 + 7, 2**63 - 1])
    positions = torch.tensor([0, 5, 123456, 2**31 + 3])
    ids = torch.tensor([[0, 1, 128255], [7, 8, 9], [3, 2**31 - 1, 5], [1, 2, 2**32 - 1]])
    hashed = hash_tokens(seeded_row_state(seeds, positions), ids)
    for r in range(4):
        for c in range(3):
            key = struct.pack("<QII", seeds[r].item(), positions[r].item(), ids[r, c].item())
            assert hashed[r, c].item() == murmur3_x86_32(key)


def test_noise_extremes_are_finite():
    noise = gumbel_from_hash(torch.tensor([0, 2**32 - 1, 2**31]))
    assert torch.isfinite(noise).all()
    assert noise[0] < noise[2] < noise[1]


def test_noise_depends_only_on_seed_position_token():
    state = seeded_row_state(torch.tensor([11, 11]), torch.tensor([3, 3]))
    wide = gumbel_noise(state[:1], torch.arange(500).unsqueeze(0), impl="torch")
    picked = gumbel_noise(state, torch.tensor([[499, 7], [7, 0]]), impl="torch")
    assert picked[0, 0] == wide[0, 499] and picked[0, 1] == wide[0, 7] == picked[1, 0]
    assert picked[1, 1] == wide[0, 0]


@needs_interpreter
@pytest.mark.parametrize("n_cols", [1, 17, 1000, 4097])
def test_triton_noise_is_bit_identical(n_cols):
    generator = torch.Generator().manual_seed(n_cols)
    rows = 3
    state = seeded_row_state(torch.randint(0, 2**62, (rows,), generator=generator), torch.tensor([0, 9, 70000]))
    ids = torch.randint(0, 2**31 - 1, (rows, 2 * n_cols), generator=generator)[:, ::2]  # non-contiguous
    expected = gumbel_noise(state, ids, impl="torch")
    got = gumbel_noise(state, ids, impl="triton")
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


@needs_interpreter
@pytest.mark.parametrize("n_cols", [5, 1000, 4097])
@pytest.mark.parametrize("with_ids", [False, True])
def test_triton_argmax_equals_torch(n_cols, with_ids):
    generator = torch.Generator().manual_seed(100 + n_cols)
    rows = 5
    base = torch.randn(rows, n_cols + 8, generator=generator) * 2
    scores = base[:, 3 : 3 + n_cols]  # rows strided, last dim dense
    scores[1, : n_cols // 2] = float("-inf")
    scores[2] = float("-inf")
    ids = torch.randint(0, 128256, (rows, n_cols), generator=generator) if with_ids else None
    state = seeded_row_state(torch.arange(rows) * 977, torch.arange(rows) * 3)
    expected = gumbel_argmax(scores, state, ids, impl="torch")
    got = gumbel_argmax(scores, state, ids, impl="triton")
    assert torch.equal(got, expected)
    assert got[2] == 0


@needs_interpreter
@pytest.mark.parametrize("slices", [2, 3, 7])
def test_triton_argmax_over_row_slices_equals_torch(slices):
    """Rows split over several programs (as on a GPU): the slices' winners reduce to the first maximum,
    also for a tie across two slices, a row excluded but for one column, and a row excluded entirely."""
    from grammask.kernels.gumbel_sample_triton import gumbel_argmax_triton

    generator = torch.Generator().manual_seed(slices)
    rows, n_cols = 6, 1000
    scores = torch.randn(rows, n_cols, generator=generator) * 2
    scores[1] = float("-inf")
    scores[1, 900] = 0.0
    scores[2] = float("-inf")
    state = seeded_row_state(torch.arange(rows) * 31, torch.arange(rows))
    noise = gumbel_noise(state, torch.arange(n_cols).expand(rows, n_cols), impl="torch")
    scores[3] = -noise[3] - 1.0  # score + noise == -1 ...
    scores[3, [200, 700]] = -noise[3, [200, 700]]  # ...but 0 at two columns of different slices (blocks of 64)
    expected = gumbel_argmax(scores, state, impl="torch")
    got = gumbel_argmax_triton(scores, state, block=64, slices=slices)
    assert torch.equal(got, expected)
    assert got[1] == 900 and got[2] == 0 and got[3] == 200


def test_auto_is_torch_on_cpu_and_bad_impl_is_refused():
    state = seeded_row_state(torch.tensor([1]), torch.tensor([0]))
    scores = torch.randn(1, 10)
    assert torch.equal(gumbel_argmax(scores, state), gumbel_argmax(scores, state, impl="torch"))
    with pytest.raises(InvalidParameterError, match="invalid impl='cuda'"):
        gumbel_argmax(scores, state, impl="cuda")


def test_seeded_draws_follow_softmax():
    """20,000 draws (seeds 0..19999) of one distribution: chi-square at p > 1e-3 (deterministic, fixed seeds)."""
    probs = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02])
    draws = 20000
    scores = probs.log().expand(draws, -1)
    state = seeded_row_state(torch.arange(draws), torch.zeros(draws, dtype=torch.int64))
    counts = torch.bincount(gumbel_argmax(scores, state, impl="torch"), minlength=len(probs))
    result = stats.chisquare(counts.numpy(), (probs * draws).numpy())
    assert result.pvalue > 1e-3, (counts, result)


def test_positions_decorrelate_draws_of_one_seed():
    probs = torch.full((8,), 1 / 8)
    steps = 16000
    state = seeded_row_state(torch.full((steps,), 42), torch.arange(steps))
    counts = torch.bincount(gumbel_argmax(probs.log().expand(steps, -1), state), minlength=8)
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3
