"""``apply_mask``: every implementation against a plain reference, over awkward shapes, dtypes, strides and masks.

The Triton kernel runs on CPU tensors through the interpreter (``TRITON_INTERPRET=1``, see conftest.py).
The interpreter's cost is per program, so its big-vocabulary cases use small batches.
"""

from __future__ import annotations

import threading

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.kernels import apply_mask
from grammask.kernels.apply_mask import ApplyMaskImpl, _resolve_impl, triton_available, triton_interpreting
from grammask.masking.bitmask import bool_to_bitmask

NEEDS_TRITON = pytest.mark.skipif(
    not (triton_available() and triton_interpreting()),
    reason="the Triton kernel on CPU tensors needs triton and TRITON_INTERPRET=1 (tests/gpu runs it on CUDA)",
)
IMPLS = ["torch", pytest.param("triton", marks=NEEDS_TRITON)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NEG_INF = float("-inf")


def apply_mask_reference(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None) -> None:
    """The specification, written plainly: bitmask row i masks logits row indices[i] (or i)."""
    vocab = logits.shape[1]
    num_words = bitmask.shape[1]
    targets = range(bitmask.shape[0]) if indices is None else indices.tolist()
    columns = torch.arange(vocab)
    word_of_column = columns // 32
    inside_bitmask = word_of_column < num_words
    for bitmask_row, logits_row in enumerate(targets):
        words = bitmask[bitmask_row].to(torch.int64) & 0xFFFFFFFF  # the 32 bits, unsigned
        bit = (words[word_of_column.clamp(max=num_words - 1)] >> (columns % 32)) & 1
        allowed = inside_bitmask & (bit == 1)
        logits[logits_row].masked_fill_(~allowed, NEG_INF)


def random_bitmask(rows: int, words: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(-(2**31), 2**31, (rows, words), dtype=torch.int32, generator=generator)


def make_logits(batch: int, vocab: int, dtype: torch.dtype, layout: str, generator: torch.Generator) -> torch.Tensor:
    """``(batch, vocab)`` logits with the given memory layout; the views share storage with a wider tensor."""
    if layout == "contiguous":
        return torch.randn(batch, vocab, generator=generator).to(dtype)
    if layout == "column_slice":  # e.g. the real vocabulary of a padded LM head
        return torch.randn(batch, vocab + 37, generator=generator).to(dtype)[:, 5 : vocab + 5]
    if layout == "row_strided":  # every other row of a bigger batch
        return torch.randn(2 * batch, vocab, generator=generator).to(dtype)[::2]
    if layout == "column_major":
        return torch.randn(vocab, batch, generator=generator).to(dtype).t()
    raise ValueError(layout)


def run_both(impl: str, logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None = None):
    """Apply ``impl`` and the reference to copies of ``logits`` (same strides); return both results."""
    expected = logits.clone()
    apply_mask_reference(expected, bitmask, indices)
    base = logits._base if logits._base is not None else logits
    before = base.clone()
    apply_mask(logits, bitmask, indices=indices, impl=impl)
    return logits, expected, base, before


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    assert torch.equal(actual, expected), f"{(actual != expected).sum().item()} of {actual.numel()} logits differ"


# (batch, vocab): big vocabularies only with small batches under the interpreter.
SHAPES_ALL = [(1, 31), (7, 32), (7, 33), (64, 33), (7, 32001), (1, 128256), (1, 151936)]
SHAPES_TORCH_ONLY = [(64, 32001), (7, 128256), (7, 151936)]  # (64, 151936): test_largest_case
LAYOUTS = ["contiguous", "column_slice", "row_strided", "column_major"]


def shape_cases():
    for impl in ("torch", "triton"):
        marks = [NEEDS_TRITON] if impl == "triton" else []
        for shape in SHAPES_ALL + (SHAPES_TORCH_ONLY if impl == "torch" else []):
            yield pytest.param(impl, shape, id=f"{impl}-{shape[0]}x{shape[1]}", marks=marks)


@pytest.mark.parametrize("impl, shape", list(shape_cases()))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout_index", range(len(LAYOUTS)))
def test_matches_reference(impl: str, shape: tuple[int, int], dtype: torch.dtype, layout_index: int) -> None:
    batch, vocab = shape
    # Each (shape, dtype) sees two layouts, one with indices and one without: all layouts and both
    # index modes are covered for every shape without the full product.
    layout = LAYOUTS[(layout_index + DTYPES.index(dtype)) % len(LAYOUTS)]
    use_indices = layout_index % 2 == 1
    generator = torch.Generator().manual_seed(batch * 1_000_003 + vocab + layout_index)
    logits = make_logits(batch, vocab, dtype, layout, generator)
    words = (vocab + 31) // 32
    if use_indices:  # a random subset of the rows, in random order
        rows = max(1, batch - batch // 3)
        indices = torch.randperm(batch, generator=generator)[:rows]
    else:
        rows, indices = batch, None
    bitmask = random_bitmask(rows, words, generator)
    if layout_index == 2:  # a column-major bitmask: its words are not adjacent
        bitmask = bitmask.t().contiguous().t()
    actual, expected, base, before = run_both(impl, logits, bitmask, indices)
    assert_same(actual, expected)
    assert (actual == NEG_INF).any() and (actual != NEG_INF).any()
    if base is not actual:  # the storage around the view is untouched
        outside = torch.ones_like(base, dtype=torch.bool)
        if layout == "column_major":
            outside.t()[...] = False
        elif layout == "column_slice":
            outside[:, 5 : vocab + 5] = False
        else:
            outside[::2] = False
        assert torch.equal(base[outside], before[outside])


@pytest.mark.parametrize("use_indices", [False, True])
def test_largest_case(use_indices: bool) -> None:
    """Batch 64 at Qwen's 151,936 logits (torch only: the interpreter would take long), bf16, strided rows."""
    generator = torch.Generator().manual_seed(64)
    logits = make_logits(64, 151936, torch.bfloat16, "row_strided", generator)
    indices = torch.randperm(64, generator=generator)[:50] if use_indices else None
    bitmask = random_bitmask(64 if indices is None else 50, 4748, generator)
    actual, expected, _, _ = run_both("torch", logits, bitmask, indices)
    assert_same(actual, expected)


PATTERNS = {
    "all_allowed": -1,
    "none_allowed": 0,
    "bit31_only": -(2**31),  # the sign bit: only token 32 * w + 31 is allowed
    "all_but_bit31": 2**31 - 1,
    "bit0_and_bit31": -(2**31) + 1,
}
WIDTHS = {"narrower": -1, "exact": 0, "wider": 3}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("vocab", [33, 1000, 32001])
def test_patterns_and_widths(impl: str, pattern: str, width: str, vocab: int) -> None:
    """Constant words (sign bit included) with a bitmask narrower than, equal to and wider than the vocabulary."""
    batch = 3
    words = (vocab + 31) // 32 + WIDTHS[width]
    bitmask = torch.full((batch, words), PATTERNS[pattern], dtype=torch.int32)
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(vocab))
    actual, expected, _, _ = run_both(impl, logits, bitmask)
    assert_same(actual, expected)
    covered = min(vocab, 32 * words)
    assert (actual[:, covered:] == NEG_INF).all()
    if pattern == "all_allowed":
        assert (actual[:, :covered] != NEG_INF).all()
    if pattern == "bit31_only":
        allowed_columns = (actual[0] != NEG_INF).nonzero().flatten()
        assert torch.equal(allowed_columns, torch.arange(31, covered, 32))


@pytest.mark.parametrize("impl", IMPLS)
def test_padding_bits_past_vocab_are_ignored(impl: str) -> None:
    """Bits for tokens >= vocab (in the last word and in extra words) must not be written anywhere."""
    vocab, batch = 40, 2
    wide = torch.zeros(batch, 64)
    logits = wide[:, :vocab]
    bitmask = torch.tensor([[0, -1, -1], [-1, 0, -1]], dtype=torch.int32)
    apply_mask(logits, bitmask, impl=impl)
    assert (wide[:, vocab:] == 0).all()
    assert (logits[0, :32] == NEG_INF).all() and (logits[0, 32:] == 0).all()
    assert (logits[1, :32] == 0).all() and (logits[1, 32:] == NEG_INF).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_duplicate_indices_intersect_and_other_rows_untouched(impl: str) -> None:
    logits = torch.zeros(4, 64)
    bitmask = torch.tensor([[0x0000FFFF, -1], [-1, 0x0000FFFF]], dtype=torch.int32)
    apply_mask(logits, bitmask, indices=torch.tensor([2, 2]), impl=impl)
    allowed = logits[2] == 0
    assert torch.equal(allowed.nonzero().flatten(), torch.cat([torch.arange(16), torch.arange(32, 48)]))
    assert (logits[[0, 1, 3]] == 0).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_int32_indices_and_no_rows(impl: str) -> None:
    logits = torch.randn(5, 100)
    bitmask = random_bitmask(2, 4, torch.Generator().manual_seed(1))
    indices = torch.tensor([4, 0], dtype=torch.int32)
    actual, expected, _, _ = run_both(impl, logits, bitmask, indices)
    assert_same(actual, expected)
    before = logits.clone()
    apply_mask(logits, bitmask[:0], indices=indices[:0], impl=impl)
    assert torch.equal(logits, before)


@pytest.mark.parametrize("impl", IMPLS)
def test_masked_infinities_become_minus_inf(impl: str) -> None:
    logits = torch.tensor([[float("inf"), float("-inf"), 1.0, float("inf")] + [0.0] * 28])
    bitmask = torch.tensor([[0b1010]], dtype=torch.int32)  # tokens 1 and 3 allowed
    apply_mask(logits, bitmask, impl=impl)
    assert logits[0, :4].tolist() == [NEG_INF, NEG_INF, NEG_INF, float("inf")]


def test_torch_path_agrees_with_xgrammar() -> None:
    xgrammar = pytest.importorskip("xgrammar")
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(4, 32001, generator=generator)
    bitmask = random_bitmask(4, 1001, generator)
    theirs = logits.clone()
    xgrammar.apply_token_bitmask_inplace(theirs, bitmask)
    apply_mask(logits, bitmask, impl="torch")
    assert torch.equal(logits, theirs)


@NEEDS_TRITON
def test_triton_small_blocks_match_reference() -> None:
    """Several programs per row (the GPU configuration), which the interpreter's default one-block rows skip."""
    from grammask.kernels.apply_mask_triton import apply_mask_triton

    generator = torch.Generator().manual_seed(3)
    for block_size, vocab in [(32, 100), (64, 1000), (1024, 3000)]:
        logits = make_logits(3, vocab, torch.float16, "column_slice", generator)
        bitmask = random_bitmask(2, (vocab + 31) // 32 - 1, generator)
        indices = torch.tensor([2, 0])
        expected = logits.clone()
        apply_mask_reference(expected, bitmask, indices)
        apply_mask_triton(logits, bitmask, indices, block_size=block_size)
        assert_same(logits, expected)


# --- dispatch and errors ---------------------------------------------------------------------------------


def test_auto_picks_triton_for_cuda_and_torch_for_cpu() -> None:
    assert _resolve_impl("auto", torch.device("cpu")) is ApplyMaskImpl.TORCH
    expected = ApplyMaskImpl.TRITON if triton_available() else ApplyMaskImpl.TORCH
    assert _resolve_impl("auto", torch.device("cuda")) is expected


def test_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InvalidParameterError, match=r"impl='triton'.*CUDA tensors.*got cpu.*TRITON_INTERPRET=1"):
        apply_mask(torch.zeros(1, 32), torch.zeros(1, 1, dtype=torch.int32), impl="triton")


def _args(**changes):
    args = {
        "logits": torch.zeros(4, 64),
        "bitmask": torch.zeros(4, 2, dtype=torch.int32),
        "indices": None,
        "impl": "torch",
    }
    args.update(changes)
    return args


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"impl": "cuda"}, r"invalid impl='cuda': expected 'auto' or 'torch' or 'triton'"),
        ({"logits": torch.zeros(4, 64, dtype=torch.float64)}, r"logits.dtype=torch.float64: expected torch.float32"),
        ({"logits": torch.zeros(64)}, r"logits.shape=\(64,\): expected 2 dimensions"),
        ({"bitmask": torch.zeros(4, 2, dtype=torch.int64)}, r"bitmask.dtype=torch.int64: expected torch.int32"),
        ({"bitmask": torch.zeros(2, dtype=torch.int32)}, r"bitmask.shape=\(2,\): expected 2 dimensions"),
        ({"bitmask": torch.zeros(3, 2, dtype=torch.int32)}, r"bitmask.shape=\(3, 2\): expected 4 rows"),
        (
            {"bitmask": torch.zeros(4, 2, dtype=torch.int32, device="meta")},
            r"bitmask.device=device\(type='meta'\): expected the logits' device cpu",
        ),
        ({"indices": torch.tensor([0, 4, 1, -1])}, r"invalid indices=\[4, -1\]: expected values in \[0, 4\)"),
        ({"indices": torch.tensor([0, 1])}, r"indices.shape=\(2,\): expected \(4,\), one per bitmask row"),
        ({"indices": torch.tensor([0.0, 1, 2, 3])}, r"indices.dtype=torch.float32: expected torch.int32 or torch.int64"),
        ({"indices": [0, 1, 2, 3]}, r"invalid indices='list': expected a torch.Tensor"),
        (
            {"indices": torch.tensor([0, 1, 2, 3], device="meta")},
            r"indices.device=device\(type='meta'\): expected the logits' device cpu",
        ),
    ],
)
def test_errors_name_the_argument(changes: dict, message: str) -> None:
    args = _args(**changes)
    logits, bitmask = args.pop("logits"), args.pop("bitmask")
    before = logits.clone()
    with pytest.raises(InvalidParameterError, match=message):
        apply_mask(logits, bitmask, **args)
    assert torch.equal(logits, before)


def test_torch_path_byte_order_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shift-based byte extraction (used on big-endian machines) gives the same result as the view."""
    from grammask.kernels import apply_mask_torch as torch_module

    monkeypatch.setattr(torch_module, "_LITTLE_ENDIAN", False)
    generator = torch.Generator().manual_seed(11)
    logits = make_logits(3, 1000, torch.float16, "column_slice", generator)
    bitmask = random_bitmask(3, 30, generator).t().contiguous().t()
    actual, expected, _, _ = run_both("torch", logits, bitmask)
    assert_same(actual, expected)


@pytest.mark.parametrize("use_indices", [False, True])
def test_torch_path_in_several_row_chunks(monkeypatch: pytest.MonkeyPatch, use_indices: bool) -> None:
    """Rows are processed in chunks through a reused workspace; chunk edges and reuse must not leak."""
    from grammask.kernels import apply_mask_torch as torch_module

    monkeypatch.setattr(torch_module, "_WORKSPACE_ELEMENTS", 3 * 1024)
    generator = torch.Generator().manual_seed(5)
    for vocab in (1000, 200, 5000):  # 3, 15 and 1 rows per chunk
        logits = make_logits(8, vocab, torch.float32, "row_strided", generator)
        indices = torch.randperm(8, generator=generator)[:7] if use_indices else None
        bitmask = random_bitmask(8 if indices is None else 7, (vocab + 31) // 32, generator)
        actual, expected, _, _ = run_both("torch", logits, bitmask, indices)
        assert_same(actual, expected)


def test_torch_path_from_several_threads_at_once() -> None:
    """Each thread has its own workspace: concurrent calls must not see each other's bounds."""
    import threading

    failures: list[int] = []

    def worker(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        for _ in range(5):
            logits = torch.randn(4, 3000, generator=generator)
            bitmask = random_bitmask(4, 94, generator)
            actual, expected, _, _ = run_both("torch", logits, bitmask)
            if not torch.equal(actual, expected):
                failures.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_workspace_first_made_under_inference_mode_serves_later_calls():
    """The per-thread workspace is created on a thread's first call; if that call runs under
    inference_mode, later calls outside it must still be able to write it."""
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for mode in (True, False):
                with torch.inference_mode(mode):
                    logits = torch.randn(3, 5000)
                    allowed = torch.rand(3, 5000) > 0.5
                    apply_mask(logits, bool_to_bitmask(allowed), impl="torch")
                    assert torch.equal(torch.isinf(logits), ~allowed)
        except BaseException as exc:  # re-raised on the test's thread
            errors.append(exc)

    worker = threading.Thread(target=calls)
    worker.start()
    worker.join()
    assert not errors, errors
