"""Pausing Python's cyclic garbage collector while the cold path builds.

Compiling a grammar and filling a row for the first time create tens of thousands of expression
nodes, automaton states and rows that live as long as the grammar. Each few hundred allocations
start a young collection, and every tenth of those may start a full one, which walks every object
of the process: 100-250 ms in a process that has torch and a tokenizer loaded, spent on objects
grammask did not make, in the middle of one fill. With the collector paused while grammask builds
and resumed when it is done, what it built is examined once, as one young generation.

Reference counting frees everything else as usual meanwhile; only cyclic garbage made during a
pause (by any thread) waits for the collector to resume. The pause is re-entrant and shared by
threads: the collector resumes when the last builder is done, and only if it was enabled before.

The collection a pause puts off runs as soon as it ends, inside the compile or fill that built
the objects: a build counts it against its deadline (:func:`pending_collection_seconds`).
"""

from __future__ import annotations

import gc
import threading


class _Pause:
    """``with PAUSE_GC:`` around a build (re-entrant, thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builders = 0
        self._resume = False
        self._count_at_start = 0

    def __enter__(self) -> None:
        with self._lock:
            if self._builders == 0:
                self._resume = gc.isenabled()
                gc.disable()
                self._count_at_start = gc.get_count()[0]
            self._builders += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._builders -= 1
            if self._builders == 0 and self._resume:
                gc.enable()

    def put_off(self) -> int:
        """The objects allocated since the pause began (by any thread) that the collection at its
        end will examine: none outside a pause, and none when the collector was off before it
        (it stays off; a process that keeps it off never pays that collection)."""
        with self._lock:
            if not self._builders or not self._resume:
                return 0
            return max(0, gc.get_count()[0] - self._count_at_start)


PAUSE_GC = _Pause()
"""The one pause all builders share."""

SECONDS_PER_PENDING_OBJECT = 0.3e-6
"""About what the young collection costs per object allocated since the last one: 0.32 µs here
after a 1.8-million-object build (an enum of 50,000 values: expression nodes, their tuples and
the interning table's weak references), 0.57 s in all."""


def pending_collection_seconds(since: int = 0) -> float:
    """About how long the collection the pause has put off will take when it ends, for the
    objects past the first ``since`` of them (a build's count when it began: what another
    thread's build had put off by then is not its own), :data:`SECONDS_PER_PENDING_OBJECT` each."""
    return max(0, PAUSE_GC.put_off() - since) * SECONDS_PER_PENDING_OBJECT


__all__ = ["PAUSE_GC", "pending_collection_seconds"]
