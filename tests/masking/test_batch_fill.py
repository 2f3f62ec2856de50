"""``fill_next_token_bitmask``: threaded filling equals sequential filling, rows land where asked, errors are clear."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from grammask.errors import InvalidParameterError
from grammask.grammars.base import Matcher
from grammask.masking import allocate_token_bitmask, fill_next_token_bitmask
from grammask.masking import batch as batch_module

VOCAB = 1000
WORDS = (VOCAB + 31) // 32
SENTINEL = 0x5A5A5A5A


def expected_row(seed: int) -> torch.Tensor:
    """The words a :class:`FakeMatcher` with this seed writes: ``(WORDS,)`` int32."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**31), 2**31, (WORDS,), dtype=torch.int32, generator=generator)


class FakeMatcher(Matcher):
    """Writes a fixed pseudo-random row, in slices with GIL releases between them to invite races."""

    def __init__(self, seed: int, *, barrier: threading.Barrier | None = None, error: Exception | None = None):
        self.seed = seed
        self.words = expected_row(seed)
        self.barrier = barrier
        self.error = error
        self.filled_by: int | None = None

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        self.filled_by = threading.get_ident()
        if self.barrier is not None:
            self.barrier.wait()
        if self.error is not None:
            raise self.error
        for start in range(0, WORDS, 8):
            bitmask[row, start : start + 8] = self.words[start : start + 8]
            time.sleep(0)

    def accept_token(self, token_id: int) -> bool:
        return False

    def rollback(self, num_tokens: int = 1) -> None:
        pass

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass

    def jump_forward_string(self) -> str:
        return ""

    def fork(self) -> "FakeMatcher":
        return FakeMatcher(self.seed)

    @property
    def num_accepted(self) -> int:
        return 0


def sentinel_bitmask(batch: int) -> torch.Tensor:
    return torch.full((batch, WORDS), SENTINEL, dtype=torch.int32)


@pytest.mark.parametrize("count", [1, 2, 3, 17, 64])
@pytest.mark.parametrize("max_workers", [1, 2, 4, 8, None])
@pytest.mark.parametrize("rows_kind", ["none", "permutation", "subset_of_wider"])
def test_threaded_equals_sequential_and_expected(count: int, max_workers: int | None, rows_kind: str) -> None:
    generator = torch.Generator().manual_seed(count)
    matchers = [FakeMatcher(seed=1000 + i) for i in range(count)]
    if rows_kind == "none":
        batch, rows = count, None
    elif rows_kind == "permutation":
        batch, rows = count, torch.randperm(count, generator=generator).tolist()
    else:
        batch = 2 * count + 1
        rows = torch.randperm(batch, generator=generator)[:count].tolist()

    threaded = sentinel_bitmask(batch)
    fill_next_token_bitmask(matchers, threaded, rows, max_workers=max_workers)
    sequential = sentinel_bitmask(batch)
    for i, matcher in enumerate(matchers):
        matcher.fill_next_token_bitmask(sequential, i if rows is None else rows[i])
    assert torch.equal(threaded, sequential)

    targets = list(range(count)) if rows is None else rows
    for i, row in enumerate(targets):
        assert torch.equal(threaded[row], expected_row(1000 + i))
    untouched = sorted(set(range(batch)) - set(targets))
    assert (threaded[untouched] == SENTINEL).all()


@pytest.mark.parametrize("make_rows", [list, tuple, torch.tensor, lambda rows: torch.tensor(rows, dtype=torch.int32)])
def test_rows_as_list_tuple_or_tensor(make_rows) -> None:
    matchers = [FakeMatcher(seed=i) for i in range(5)]
    rows = [4, 0, 3, 1, 2]
    bitmask = sentinel_bitmask(5)
    fill_next_token_bitmask(matchers, bitmask, make_rows(rows), max_workers=3)
    for matcher, row in zip(matchers, rows):
        assert torch.equal(bitmask[row], matcher.words)


def test_fills_run_concurrently_in_several_threads() -> None:
    """Two fills meet at a barrier: this can only pass if they run at the same time, in different threads."""
    barrier = threading.Barrier(2, timeout=10)
    count = 2 * (batch_module.INLINE_MAX_MATCHERS // 2 + 1)  # even, and above the inline limit
    matchers = [FakeMatcher(seed=i, barrier=barrier) for i in range(count)]
    bitmask = sentinel_bitmask(count)
    fill_next_token_bitmask(matchers, bitmask, max_workers=2)
    assert len({matcher.filled_by for matcher in matchers}) == 2
    assert threading.get_ident() in {matcher.filled_by for matcher in matchers}  # the caller works too
    for row, matcher in enumerate(matchers):
        assert torch.equal(bitmask[row], matcher.words)


def test_few_matchers_are_filled_inline() -> None:
    matchers = [FakeMatcher(seed=i) for i in range(batch_module.INLINE_MAX_MATCHERS)]
    fill_next_token_bitmask(matchers, sentinel_bitmask(len(matchers)), max_workers=8)
    assert {matcher.filled_by for matcher in matchers} == {threading.get_ident()}


def test_the_pool_is_reused_and_grows_only_when_asked() -> None:
    matchers = [FakeMatcher(seed=i) for i in range(16)]
    fill_next_token_bitmask(matchers, sentinel_bitmask(16), max_workers=3)
    pool = batch_module._pool
    assert pool is not None
    fill_next_token_bitmask(matchers, sentinel_bitmask(16), max_workers=3)
    fill_next_token_bitmask(matchers, sentinel_bitmask(16), max_workers=2)
    assert batch_module._pool is pool
    bigger = batch_module._pool_size + 2
    fill_next_token_bitmask(matchers, sentinel_bitmask(16), max_workers=bigger)
    assert batch_module._pool is not pool and batch_module._pool_size >= bigger - 1


def test_concurrent_callers_each_get_their_rows() -> None:
    """Several engine threads filling different bitmasks at once through the one shared pool."""
    results: dict[int, torch.Tensor] = {}

    def caller(index: int) -> None:
        matchers = [FakeMatcher(seed=100 * index + i) for i in range(12)]
        bitmask = sentinel_bitmask(12)
        fill_next_token_bitmask(matchers, bitmask, list(reversed(range(12))), max_workers=3)
        results[index] = bitmask

    threads = [threading.Thread(target=caller, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(4):
        for i in range(12):
            assert torch.equal(results[index][11 - i], expected_row(100 * index + i))


@pytest.mark.parametrize("max_workers", [1, 4])
def test_a_matcher_error_reaches_the_caller(max_workers: int) -> None:
    matchers = [FakeMatcher(seed=i) for i in range(10)]
    matchers[6] = FakeMatcher(seed=6, error=RuntimeError("matcher 6 is broken"))
    with pytest.raises(RuntimeError, match="matcher 6 is broken"):
        fill_next_token_bitmask(matchers, sentinel_bitmask(10), max_workers=max_workers)


def test_works_with_the_allocated_bitmask() -> None:
    matchers = [FakeMatcher(seed=i) for i in range(6)]
    bitmask = allocate_token_bitmask(8, VOCAB)
    fill_next_token_bitmask(matchers, bitmask, [7, 6, 5, 4, 3, 2])
    assert (bitmask[:2] == -1).all()
    assert torch.equal(bitmask[7], matchers[0].words)


@pytest.mark.parametrize(
    "batch, rows, kwargs, message",
    [
        (4, [0, 1, 2], {}, r"invalid rows='<3 rows>': expected one row per matcher \(4\)"),
        (4, [0, 1, 2, 4], {}, r"invalid rows=\[4\]: expected rows in \[0, 4\) of the bitmask"),
        (4, [0, -1, 2, 3], {}, r"invalid rows=\[-1\]: expected rows in \[0, 4\)"),
        (4, [0, 1, 1, 3], {}, r"invalid rows=\[1\]: expected distinct rows"),
        (4, [0, 1, 2.0, 3], {}, r"invalid rows=.*expected a sequence of ints"),
        (4, torch.tensor([0.0, 1, 2, 3]), {}, r"invalid rows='<tensor torch.float32 \(4,\)>': expected a 1-D int tensor"),
        (3, None, {}, r"invalid bitmask.shape=\(3, 32\): expected at least 4 rows, one per matcher"),
        (4, None, {"max_workers": 0}, r"invalid max_workers=0: expected None or an int >= 1"),
    ],
)
def test_errors_are_clear(batch: int, rows, kwargs: dict, message: str) -> None:
    matchers = [FakeMatcher(seed=i) for i in range(4)]
    bitmask = sentinel_bitmask(batch)
    with pytest.raises(InvalidParameterError, match=message):
        fill_next_token_bitmask(matchers, bitmask, rows, **kwargs)
    assert (bitmask == SENTINEL).all()


@pytest.mark.parametrize(
    "bitmask, message",
    [
        (torch.zeros(4, WORDS, dtype=torch.int64), r"bitmask.dtype=torch.int64: expected torch.int32"),
        (torch.zeros(4 * WORDS, dtype=torch.int32), r"bitmask.shape=\(128,\): expected 2 dimensions"),
        (torch.zeros(4, WORDS, dtype=torch.int32, device="meta"), r"bitmask.device=.*meta.*expected a CPU tensor"),
    ],
)
def test_bad_bitmask_is_refused(bitmask: torch.Tensor, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        fill_next_token_bitmask([FakeMatcher(seed=i) for i in range(4)], bitmask)


def test_real_xgrammar_matchers_threaded_equals_sequential(llama_info, llama_hf) -> None:
    """xgrammar matchers at different states (GIL released while they fill), threads vs one by one."""
    pytest.importorskip("xgrammar")
    from grammask import GrammarCompiler, JsonSchema, Regex

    compiler = GrammarCompiler(llama_info, backend="xgrammar")
    person = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "age"],
    }
    texts = {
        JsonSchema(person): '{"name":"Ada Lovelace","age":36,"tags":["math","engines"]}',
        JsonSchema({"type": "array", "items": {"type": "number"}}): "[1.5,2,-30000,10]",
        Regex(r"(cat|dog)s? [0-9]{2,4}!"): "dogs 2024!",
    }
    matchers = []
    for spec, text in texts.items():
        grammar = compiler.compile(spec)
        ids = llama_hf.encode(text, add_special_tokens=False)
        for steps in range(len(ids) + 1):
            matcher = grammar.matcher()
            assert matcher.accept_tokens(ids[:steps]) == steps
            matchers.append(matcher)
    rows = torch.randperm(len(matchers) + 3, generator=torch.Generator().manual_seed(0))[: len(matchers)].tolist()

    threaded = torch.zeros((len(matchers) + 3, (llama_info.vocab_size + 31) // 32), dtype=torch.int32)
    sequential = threaded.clone()
    fill_next_token_bitmask(matchers, threaded, rows, max_workers=4)
    fill_next_token_bitmask(matchers, sequential, rows, max_workers=1)
    assert torch.equal(threaded, sequential)
    assert len({tuple(threaded[row].tolist()) for row in rows}) > len(texts)  # states differ, so do masks
    single = torch.zeros((1, threaded.shape[1]), dtype=torch.int32)
    for matcher, row in zip(matchers, rows):
        matcher.fill_next_token_bitmask(single, 0)
        assert torch.equal(threaded[row], single[0])
