"""Filling one bitmask from many matchers, on a shared thread pool.

xgrammar (and any matcher whose fill runs in native code) releases the GIL while it fills a row, so
threads give real parallelism. One pool is shared by every call (it only grows, when a call asks for
more workers than it has); threads pull matchers from a shared counter, so a slow matcher does not
hold up a fixed share of the batch. The calling thread works too. Few matchers are filled inline,
where a thread hand-off would cost more than it saves.

Each matcher writes only its own row, and rows must be distinct, so concurrent fills never touch the
same words.
"""

from __future__ import annotations

import operator
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, Sequence

import torch

from grammask.errors import InvalidParameterError
from grammask.grammars.base import Matcher
from grammask.masking.bitmask import check_fillable

INLINE_MAX_MATCHERS = 4
"""Batches of at most this many matchers are filled in the calling thread. Measured with xgrammar
matchers on Llama-3.2 (a small JSON schema): one fill takes 10-30 us and handing work to a thread
costs about as much, so threads only pay off from a few matchers on (or for slower grammars)."""



class _Filler(Protocol):
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int) -> None: ...


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def default_max_workers() -> int:
    """Threads used when ``max_workers`` is not given: the number of CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def fill_next_token_bitmask(
    matchers: Sequence[Matcher],
    bitmask: torch.Tensor,
    rows: Sequence[int] | torch.Tensor | None = None,
    *,
    max_workers: int | None = None,
) -> None:
    """Fill ``bitmask[rows[i]]`` from ``matchers[i]`` for every ``i``, using up to ``max_workers`` threads.

    Rows of the bitmask that no matcher names are left untouched; the matchers' states do not change.

    Args:
        matchers: the matchers, each with ``fill_next_token_bitmask(bitmask, row)``.
        bitmask: ``(batch, ceil(vocab_size / 32))``, int32, contiguous, on the CPU (see
            :mod:`grammask.masking.bitmask`).
        rows: ``(len(matchers),)`` distinct ints in ``[0, batch)``, a sequence or an int tensor;
            ``None``: matcher ``i`` fills row ``i``.
        max_workers: the most threads to use, the calling thread included (default:
            :func:`default_max_workers`); ``1`` fills sequentially in the calling thread.

    Raises:
        InvalidParameterError: ``matchers`` not a sequence of matchers, a bitmask that is not a contiguous
            2-D int32 CPU tensor (or of another width than a matcher's vocabulary needs), a ``rows`` of the
            wrong length, with a row out of range or named twice, or ``max_workers < 1``.
        Exception: the first error a matcher raised, after every other matcher has stopped.
    """
    check_matchers(matchers)
    row_list = _check_rows(rows, len(matchers), bitmask)
    fill_rows(matchers, bitmask, row_list, max_workers=max_workers)


def fill_rows(fillers: Sequence[_Filler], bitmask: torch.Tensor, rows: list[int], *, max_workers: int | None) -> None:
    """:func:`fill_next_token_bitmask` after its checks of ``fillers`` and ``rows`` (the caller's): each
    filler is anything with ``fill_next_token_bitmask(bitmask, row)``, such as the draft walks of
    :mod:`grammask.masking.draft`, which fill several rows from ``row`` on."""
    workers = min(_check_workers(max_workers), len(fillers))
    if workers <= 1 or len(fillers) <= INLINE_MAX_MATCHERS:
        for filler, row in zip(fillers, rows):
            filler.fill_next_token_bitmask(bitmask, row)
        return
    _fill_in_parallel(fillers, bitmask, rows, workers)


class _WorkQueue:
    """Hands out matcher positions to threads; remembers the first error and then hands out nothing."""

    def __init__(self, size: int) -> None:
        self._next = 0
        self._size = size
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def take(self) -> int | None:
        with self._lock:
            if self.error is not None or self._next >= self._size:
                return None
            position = self._next
            self._next += 1
            return position

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error


def _fill_in_parallel(matchers: Sequence[_Filler], bitmask: torch.Tensor, rows: list[int], workers: int) -> None:
    queue = _WorkQueue(len(matchers))

    def work() -> None:
        while (position := queue.take()) is not None:
            try:
                matchers[position].fill_next_token_bitmask(bitmask, rows[position])
            except BaseException as error:  # re-raised in the calling thread below
                queue.fail(error)

    pool = _shared_pool(workers - 1)
    helpers: list[Future[None]] = [pool.submit(work) for _ in range(workers - 1)]
    work()
    for helper in helpers:
        helper.result()
    if queue.error is not None:
        raise queue.error


def _shared_pool(min_threads: int) -> ThreadPoolExecutor:
    """The process-wide pool, replaced by a bigger one when a call needs more threads than it has.

    A replaced pool is not shut down (a concurrent call may still be submitting to it); once unreferenced,
    its idle threads exit.
    """
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < min_threads:
            _pool_size = max(min_threads, default_max_workers())
            _pool = ThreadPoolExecutor(max_workers=_pool_size, thread_name_prefix="grammask-fill")
        return _pool


def check_matchers(matchers: Sequence[Matcher]) -> None:
    """Raise :class:`InvalidParameterError` unless ``matchers`` is a list or tuple of grammask matchers."""
    if not isinstance(matchers, Sequence) or isinstance(matchers, (str, bytes)):
        raise InvalidParameterError("matchers", type(matchers).__name__, "a list or tuple of matchers")
    for position, matcher in enumerate(matchers):
        if not isinstance(matcher, Matcher):
            raise InvalidParameterError(f"matchers[{position}]", type(matcher).__name__, "a grammask Matcher")


def _check_workers(max_workers: int | None) -> int:
    if max_workers is None:
        return default_max_workers()
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise InvalidParameterError("max_workers", max_workers, "None or an int >= 1")
    return max_workers


def _as_int_list(rows: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(rows, torch.Tensor):
        if rows.dtype.is_floating_point or rows.dtype.is_complex or rows.dtype == torch.bool or rows.dim() != 1:
            raise InvalidParameterError("rows", f"<tensor {rows.dtype} {tuple(rows.shape)}>", "a 1-D int tensor")
        return rows.tolist()
    try:
        return [operator.index(row) for row in rows]
    except TypeError:
        raise InvalidParameterError("rows", rows, "a sequence of ints") from None


def _check_rows(rows: Sequence[int] | torch.Tensor | None, num_matchers: int, bitmask: torch.Tensor) -> list[int]:
    check_fillable(bitmask)
    batch = bitmask.shape[0]
    if rows is None:
        if num_matchers > batch:
            raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), f"at least {num_matchers} rows, one per matcher")
        return list(range(num_matchers))
    row_list = _as_int_list(rows)
    if len(row_list) != num_matchers:
        raise InvalidParameterError("rows", f"<{len(row_list)} rows>", f"one row per matcher ({num_matchers})")
    out_of_range = [row for row in row_list if not 0 <= row < batch]
    if out_of_range:
        raise InvalidParameterError("rows", out_of_range[:8], f"rows in [0, {batch}) of the bitmask")
    if len(set(row_list)) != len(row_list):
        repeated = sorted({row for row in row_list if row_list.count(row) > 1})
        raise InvalidParameterError("rows", repeated[:8], "distinct rows (each named at most once)")
    return row_list
