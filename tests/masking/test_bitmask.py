"""The bitmask layout helpers against a plain Python packing of bits into 32-bit words."""

from __future__ import annotations

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.masking import (
    BITMASK_DTYPE,
    allocate_token_bitmask,
    bitmask_shape,
    bitmask_to_bool,
    bitmask_width,
    bool_to_bitmask,
    reset_token_bitmask,
)

VOCABS = [1, 31, 32, 33, 63, 64, 65, 1000, 32001]


def pack_reference(allowed: list[bool]) -> list[int]:
    """Bit j of word w is token 32 * w + j; words as signed int32 values."""
    words = []
    for start in range(0, len(allowed), 32):
        value = sum(1 << j for j, bit in enumerate(allowed[start : start + 32]) if bit)
        words.append(value - (1 << 32) if value >= 1 << 31 else value)
    return words


def random_bools(rows: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.rand(rows, vocab, generator=torch.Generator().manual_seed(seed)) < 0.5


@pytest.mark.parametrize("vocab", VOCABS)
def test_bool_to_bitmask_matches_python_packing(vocab: int) -> None:
    allowed = random_bools(3, vocab, vocab)
    packed = bool_to_bitmask(allowed)
    assert packed.dtype == BITMASK_DTYPE and packed.shape == bitmask_shape(3, vocab)
    for row in range(3):
        assert packed[row].tolist() == pack_reference(allowed[row].tolist())


@pytest.mark.parametrize("vocab", VOCABS)
def test_round_trip_and_padding_bits_are_zero(vocab: int) -> None:
    allowed = random_bools(4, vocab, 7 * vocab)
    packed = bool_to_bitmask(allowed)
    assert torch.equal(bitmask_to_bool(packed, vocab), allowed)
    padded = bitmask_to_bool(packed)
    assert padded.shape == (4, 32 * bitmask_width(vocab))
    assert not padded[:, vocab:].any()  # padding tokens are never allowed


def test_all_allowed_row_sets_the_sign_bit_and_padding_stays_clear() -> None:
    packed = bool_to_bitmask(torch.ones(1, 40, dtype=torch.bool))
    assert packed.tolist() == [[-1, 0xFF]]


def test_sign_bit_is_token_31() -> None:
    allowed = torch.zeros(64, dtype=torch.bool)
    allowed[31] = allowed[63] = True
    assert bool_to_bitmask(allowed).tolist() == [-(2**31), -(2**31)]
    unpacked = bitmask_to_bool(torch.tensor([-(2**31)], dtype=torch.int32))
    assert unpacked.nonzero().flatten().tolist() == [31]


def test_bitmask_to_bool_unpacks_python_packed_words() -> None:
    words = [0, -1, 1, -(2**31), 0x12345678, -0x12345678]
    unpacked = bitmask_to_bool(torch.tensor(words, dtype=torch.int32))
    for w, value in enumerate(words):
        unsigned = value & 0xFFFFFFFF
        assert unpacked[32 * w : 32 * w + 32].tolist() == [bool(unsigned >> j & 1) for j in range(32)]


def test_one_dimensional_input_gives_one_dimensional_output() -> None:
    allowed = random_bools(1, 70, 3)[0]
    packed = bool_to_bitmask(allowed)
    assert packed.shape == (3,)
    assert torch.equal(bitmask_to_bool(packed, 70), allowed)


def test_non_contiguous_bool_input() -> None:
    wide = random_bools(6, 200, 5)
    view = wide[::2, 3:103]
    assert torch.equal(bool_to_bitmask(view), bool_to_bitmask(view.contiguous()))


@pytest.mark.parametrize("vocab, words", [(1, 1), (32, 1), (33, 2), (128256, 4008), (151936, 4748), (32001, 1001)])
def test_width_and_shape(vocab: int, words: int) -> None:
    assert bitmask_width(vocab) == words
    assert bitmask_shape(5, vocab) == (5, words)


def test_allocate_allows_everything_and_reset_restores_it() -> None:
    bitmask = allocate_token_bitmask(3, 100)
    assert bitmask.dtype == torch.int32 and bitmask.shape == (3, 4) and bitmask.device.type == "cpu"
    assert bitmask_to_bool(bitmask, 100).all()
    bitmask[1].zero_()
    reset_token_bitmask(bitmask)
    assert (bitmask == -1).all()


def test_matches_xgrammar_layout() -> None:
    xgrammar = pytest.importorskip("xgrammar")
    theirs = xgrammar.allocate_token_bitmask(2, 1000)
    assert theirs.dtype == BITMASK_DTYPE and tuple(theirs.shape) == bitmask_shape(2, 1000)
    assert torch.equal(theirs, allocate_token_bitmask(2, 1000))


def test_bool_to_bitmask_refuses_non_bool() -> None:
    with pytest.raises(InvalidParameterError, match=r"allowed.dtype=torch.float32: expected torch.bool"):
        bool_to_bitmask(torch.ones(3, 40))


def test_bitmask_to_bool_refuses_non_int32() -> None:
    with pytest.raises(InvalidParameterError, match=r"bitmask.dtype=torch.int64: expected torch.int32"):
        bitmask_to_bool(torch.ones(3, 4, dtype=torch.int64))


def test_host_words_is_a_shared_view_of_the_tensor():
    import gc

    from grammask.masking import bitmask as module

    mask = torch.zeros((2, 3), dtype=torch.int32)
    words = module.host_words(mask)
    words[1, 2] = 7
    assert mask[1, 2].item() == 7  # writes land in the tensor
    assert module.host_words(mask) is words  # one view per tensor
    key = id(mask)
    del mask, words
    gc.collect()
    assert key not in module._VIEWS  # dropped with its tensor
    with pytest.raises(InvalidParameterError, match="bitmask"):
        module.host_words(torch.zeros((2, 3), dtype=torch.int64))


def test_host_row_keeps_one_view_per_row_and_checks_the_row_each_time():
    from grammask.masking import bitmask as module

    mask = torch.zeros((3, 4), dtype=torch.int32)
    for row in range(3):
        module.host_row(mask, row, 4)[:] = row + 1
    assert mask.tolist() == [[1] * 4, [2] * 4, [3] * 4]  # each write landed in its own row
    assert module.host_row(mask, 2, 4) is module.host_row(mask, 2, 4)  # the kept view
    for bad_row in (-1, 3):
        with pytest.raises(InvalidParameterError, match=rf"row={bad_row}: expected a row in \[0, 3\)"):
            module.host_row(mask, bad_row, 4)
    with pytest.raises(InvalidParameterError, match=r"bitmask.shape=\(3, 4\): expected \(batch, 5\)"):
        module.host_row(mask, 0, 5)


def test_host_row_sees_a_tensor_resized_in_place_after_its_first_fill():
    """The warm path reuses the view made on a tensor's first fill: a ``resize_`` that keeps the
    memory (same address, fewer rows, or the same words in another width) must still be checked."""
    from grammask.masking import bitmask as module

    mask = torch.zeros((2, 4), dtype=torch.int32)
    module.host_row(mask, 1, 4)[:] = 5
    address = mask.data_ptr()
    mask.resize_(1, 4)
    assert mask.data_ptr() == address  # the case under test: the storage did not move
    with pytest.raises(InvalidParameterError, match=r"row=1: expected a row in \[0, 1\)"):
        module.host_row(mask, 1, 4)
    mask.resize_(1, 8)
    assert mask.data_ptr() == address
    with pytest.raises(InvalidParameterError, match=r"bitmask.shape=\(1, 8\): expected \(batch, 4\)"):
        module.host_row(mask, 0, 4)
    module.host_row(mask, 0, 8)[:] = 3
    assert mask.tolist() == [[3] * 8]
