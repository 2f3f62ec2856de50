"""``apply_mask`` refuses malformed logits and bitmasks with a named error on the torch path and the Triton
dispatcher alike, leaving the logits untouched; what it accepts it applies exactly."""

from __future__ import annotations

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.kernels import apply_mask
from grammask.kernels.apply_mask import triton_available, triton_interpreting
from grammask.masking.bitmask import bitmask_to_bool, bool_to_bitmask

NEEDS_INTERPRETED_TRITON = pytest.mark.skipif(
    not (triton_available() and triton_interpreting()),
    reason="the Triton kernel on CPU tensors needs triton and TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)",
)
IMPLS = ["torch", pytest.param("triton", marks=NEEDS_INTERPRETED_TRITON)]
BATCH, VOCAB = 4, 70


def logits() -> torch.Tensor:
    return torch.randn(BATCH, VOCAB, generator=torch.Generator().manual_seed(1))


def bitmask() -> torch.Tensor:
    allowed = torch.rand(BATCH, VOCAB, generator=torch.Generator().manual_seed(2)) < 0.5
    return bool_to_bitmask(allowed)


def expected_after(values: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    allowed = bitmask_to_bool(words.contiguous(), VOCAB)
    return values.masked_fill(~allowed, float("-inf"))


MALFORMED = {
    "logits list": (lambda: logits().tolist(), bitmask, r"invalid logits='list': expected a torch.Tensor"),
    "bitmask numpy": (logits, lambda: bitmask().numpy(), r"invalid bitmask='ndarray': expected a torch.Tensor"),
    "sparse logits": (lambda: logits().to_sparse(), bitmask, r"logits.layout=torch.sparse_coo: expected torch.strided"),
    "sparse bitmask": (logits, lambda: bitmask().to_sparse(), r"bitmask.layout=torch.sparse_coo"),
    "3-D logits": (lambda: logits()[None], bitmask, r"logits.shape=\(1, 4, 70\): expected 2 dimensions"),
    "int logits": (lambda: logits().to(torch.int32), bitmask, r"logits.dtype=torch.int32"),
    "uint8 bitmask": (logits, lambda: bitmask().to(torch.uint8), r"bitmask.dtype=torch.uint8: expected torch.int32"),
    "int64 bitmask": (logits, lambda: bitmask().to(torch.int64), r"bitmask.dtype=torch.int64: expected torch.int32"),
    "bool bitmask": (logits, lambda: torch.ones(BATCH, VOCAB, dtype=torch.bool), r"bitmask.dtype=torch.bool"),
    "1-D bitmask": (logits, lambda: bitmask()[0], r"bitmask.shape=\(3,\): expected 2 dimensions"),
    "missing rows": (logits, lambda: bitmask()[:3], r"bitmask.shape=\(3, 3\): expected 4 rows"),
    "meta bitmask": (logits, lambda: bitmask().to("meta"), r"bitmask.device=device\(type='meta'\)"),
    "expanded logits": (
        lambda: torch.randn(1, VOCAB).expand(BATCH, -1), bitmask, r"logits.stride=\(0, 1\): expected logits whose elements"
    ),
    "interleaved rows": (
        lambda: torch.randn(BATCH * VOCAB).as_strided((BATCH, VOCAB), (3, 1)), bitmask, r"logits.stride=\(3, 1\)"
    ),
    "leaf requiring grad": (lambda: logits().requires_grad_(), bitmask, r"logits.requires_grad=True"),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_input_is_refused_by_name(impl, case):
    make_logits, make_bitmask, message = MALFORMED[case]
    values, words = make_logits(), make_bitmask()
    before = values.detach().clone() if isinstance(values, torch.Tensor) and values.layout is torch.strided else None
    with pytest.raises(InvalidParameterError, match=message):
        apply_mask(values, words, impl=impl)
    if before is not None:
        assert torch.equal(values.detach(), before)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "layout",
    ["expanded", "every other row", "column-major", "transposed logits"],
)
def test_read_only_views_of_the_bitmask_and_strided_logits_are_applied_exactly(impl, layout):
    values, words = logits(), bitmask()
    if layout == "expanded":  # one mask for every row: reading a stride-0 bitmask is well defined
        words = words[:1].expand(BATCH, -1)
    elif layout == "every other row":
        words = torch.stack([words, torch.zeros_like(words)], dim=1).reshape(2 * BATCH, -1)[::2]
    elif layout == "column-major":
        words = words.t().contiguous().t()
    else:
        values = values.t().contiguous().t()
    expected = expected_after(values, words)
    apply_mask(values, words, impl=impl)
    assert torch.equal(values, expected)


@pytest.mark.parametrize("impl", IMPLS)
def test_indices_out_of_range_are_refused_before_anything_is_written(impl):
    values = logits()
    before = values.clone()
    with pytest.raises(InvalidParameterError, match=r"invalid indices=\[4\]: expected values in \[0, 4\)"):
        apply_mask(values, bitmask()[:2], indices=torch.tensor([1, 4]), impl=impl)
    assert torch.equal(values, before)


@NEEDS_INTERPRETED_TRITON
def test_triton_kernel_writes_nothing_for_an_index_the_host_did_not_check():
    """On CUDA the dispatcher does not read indices on the host; the kernel bounds the row itself."""
    from grammask.kernels.apply_mask_triton import apply_mask_triton

    wide = torch.randn(3 * BATCH, VOCAB)
    values = wide[BATCH : 2 * BATCH]  # rows before and after it are other memory
    before = wide.clone()
    apply_mask_triton(values, torch.zeros(2, 3, dtype=torch.int32), torch.tensor([-1, BATCH]))
    assert torch.equal(wide, before)
