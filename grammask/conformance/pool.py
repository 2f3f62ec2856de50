"""Isolated worker processes: a crash, hang or out-of-memory in one task never stops the run.

Each worker is a spawned process with an address-space limit (``RLIMIT_AS``); it loads the tokenizer
and whatever the targets need once, then runs tasks one at a time. The parent gives each task a
wall-time limit from the moment the worker starts it; a worker that overruns is killed and
replaced, as is one that dies. Such tasks come back as ``timeout``, ``crash`` or ``oom`` outcomes.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import resource
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

# A worker that has not started a task this long after being handed it is considered hung in setup.
_SETUP_SECONDS = 300.0


def _worker_main(conn: Any, memory_bytes: int | None, targets: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    from grammask.conformance.targets import WorkerContext

    context = WorkerContext()
    context.phase_hook = lambda phase: conn.send(("phase", None, phase))
    try:
        context.warm_up(targets)
    except Exception:  # reported by the first task that needs the broken part
        pass
    conn.send(("ready", None, None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        index, task = message
        _default_fatal_signals()
        conn.send(("started", index, None))
        try:
            result = context.run(
                task["target"], task["schema"], task["instances"], task["format_asserted"], task.get("any_order", False)
            )
        except MemoryError:
            result = {"outcome": "oom", "detail": "MemoryError in the worker"}
        except Exception as exc:  # a bug in one target must not take the worker down
            result = {"outcome": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
        try:
            conn.send(("done", index, result))
        except MemoryError:
            conn.send(("done", index, {"outcome": "oom", "detail": "MemoryError sending the result"}))


def _default_fatal_signals() -> None:
    """Let a segfault kill the worker at once: a native library loaded earlier may have installed a
    handler (a backtrace printer) that leaves the process hanging instead, which would be counted
    as a timeout rather than a crash."""
    for number in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
        signal.signal(number, signal.SIG_DFL)


@dataclass
class _Worker:
    process: Any
    conn: Any
    ready: bool = False
    task: int | None = None
    since: float = field(default_factory=time.monotonic)
    started: bool = False
    timeout: float = 0.0
    phase: str = "starting"


class IsolatedPool:
    """Runs tasks (dicts with ``target``, ``schema``, ``instances``, ``format_asserted``) in ``jobs``
    worker processes.

    Args:
        jobs: number of worker processes.
        timeout: wall seconds per task (compile and every instance of one schema on one target);
            a task's own ``timeout`` key overrides it.
        memory_mb: address-space limit of each worker, in MiB (``None``: no limit).
        targets: the targets the tasks use (loaded once per worker, outside task time).
    """

    def __init__(self, jobs: int, timeout: float, memory_mb: int | None, targets: list[str]) -> None:
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.memory_bytes = memory_mb * 2**20 if memory_mb else None
        self.targets = targets
        self._context = mp.get_context("spawn")
        self.restarts = 0
        self._setup_deaths = 0

    def _spawn(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main, args=(child, self.memory_bytes, self.targets), daemon=True
        )
        process.start()
        child.close()
        return _Worker(process, parent)

    def run(self, tasks: list[dict]) -> Iterator[tuple[int, dict]]:
        """Yield ``(task index, result)`` as tasks finish (in completion order)."""
        pending = list(range(len(tasks)))[::-1]
        workers = [self._spawn() for _ in range(min(self.jobs, len(tasks)))]
        try:
            while pending or any(w.task is not None for w in workers):
                for worker in workers:
                    if worker.ready and worker.task is None and pending:
                        worker.task = pending.pop()
                        worker.started, worker.since, worker.phase = False, time.monotonic(), "starting"
                        worker.conn.send((worker.task, tasks[worker.task]))
                        worker.timeout = float(tasks[worker.task].get("timeout") or self.timeout)
                ready = mpc.wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout=0.5)
                for i, worker in enumerate(workers):
                    result = self._poll(worker, ready)
                    if result is not None:
                        yield result
                    if not worker.process.is_alive() or result is not None and result[1].get("_restart"):
                        if result is not None:
                            result[1].pop("_restart", None)
                        if worker.task is not None:
                            # It died after _poll looked (the pipe closes before the process is
                            # reaped): its task still gets its answer.
                            worker.process.join(5)
                            yield worker.task, _dead(worker.process.exitcode, self.memory_bytes is not None)
                        workers[i] = self._replace(worker)
        finally:
            for worker in workers:
                self._stop(worker)

    def _poll(self, worker: _Worker, ready: list) -> tuple[int, dict] | None:
        while worker.conn in ready or worker.conn.poll():
            try:
                kind, index, result = worker.conn.recv()
            except (EOFError, OSError):
                break
            if kind == "ready":
                worker.ready = True
            elif kind == "started":
                worker.started, worker.since, worker.phase = True, time.monotonic(), "compiling"
            elif kind == "phase":
                worker.phase = result
            elif kind == "done":
                worker.task = None
                return index, result
            ready = []
        if worker.task is None:
            if not worker.process.is_alive():
                worker.process.join(1)
            return None
        if not worker.process.is_alive():
            worker.process.join(1)
            code = worker.process.exitcode
            index, worker.task = worker.task, None
            return index, _dead(code, self.memory_bytes is not None)
        timeout = worker.timeout
        limit = timeout if worker.started else timeout + _SETUP_SECONDS
        if time.monotonic() - worker.since > limit:
            index, worker.task = worker.task, None
            worker.process.kill()
            worker.process.join(5)
            return index, {"outcome": "timeout", "detail": f"no answer within {timeout:g} s (while {worker.phase})", "_restart": True}
        return None

    def _replace(self, worker: _Worker) -> _Worker:
        self._stop(worker)
        self.restarts += 1
        self._setup_deaths = 0 if worker.ready else self._setup_deaths + 1
        if self._setup_deaths >= 3:
            raise RuntimeError(f"conformance workers die before their first task (exit code {worker.process.exitcode})")
        return self._spawn()

    @staticmethod
    def _stop(worker: _Worker) -> None:
        if worker.process.is_alive():
            try:
                worker.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            worker.process.join(0.5)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(5)
        worker.conn.close()


def _dead(exitcode: int | None, memory_limited: bool) -> dict:
    """The outcome of a task whose worker died: ``oom`` when the allocator aborted under the memory
    limit (SIGABRT from std::bad_alloc, SIGKILL from the kernel's OOM killer), else ``crash``."""
    signal_number = -exitcode if exitcode is not None and exitcode < 0 else None
    name = signal.Signals(signal_number).name if signal_number else f"exit code {exitcode}"
    if signal_number == signal.SIGKILL:
        return {"outcome": "oom", "detail": f"worker killed by {name} (the kernel's OOM killer, most likely)"}
    maybe = " (an allocation failing under the memory limit aborts this way)" if memory_limited and signal_number == signal.SIGABRT else ""
    return {"outcome": "crash", "detail": f"worker died: {name}{maybe}"}
