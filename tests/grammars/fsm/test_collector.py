"""The cold path pauses the cyclic garbage collector while it builds, and gives it back as it was."""

from __future__ import annotations

import contextlib
import gc
import threading

import pytest

from grammask.grammars.fsm import pushdown
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.collector import PAUSE_GC
from grammask.grammars.spec import JsonSchema
from grammask.masking.bitmask import allocate_token_bitmask


@pytest.fixture
def collections_seen():
    """Every collection that starts while the test runs, with a threshold that makes one start
    every few allocations; the collector's settings are restored afterwards."""
    seen: list[int] = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.enable()
    gc.set_threshold(10, 2, 2)
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.set_threshold(*thresholds)
    (gc.enable if enabled else gc.disable)()


def _force(llama_info, llama_hf, name: str) -> None:
    """Compile a schema with properties named after ``name`` and force an instance through it."""
    properties = {f"{name}_{i}": {"type": "string", "maxLength": 20 + i} for i in range(12)}
    grammar = FsmBackend(llama_info).compile(JsonSchema({"type": "object", "properties": properties}))
    matcher = grammar.matcher()
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    for token in llama_hf.encode(f'{{"{name}_3":"abc","{name}_7":"' + "x" * 25 + '"}', add_special_tokens=False):
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token)


def test_compiling_starts_no_collection(llama_info, collections_seen):
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string", "maxLength": 20 + i} for i in range(12)}}
    backend, spec = FsmBackend(llama_info), JsonSchema(schema)
    collections_seen.clear()
    backend.compile(spec)
    assert len(collections_seen) <= 1  # the young pass over what was built, as the pause ends
    _ = [[] for _ in range(100)]  # outside a build, collections start again
    assert collections_seen


def test_cold_fills_start_few_collections(llama_info, llama_hf, collections_seen, monkeypatch):
    # The same work on fresh names, with the pause and without it: the pause leaves only what
    # the matcher's warm steps allocate between builds.
    _force(llama_info, llama_hf, "warmup")
    collections_seen.clear()
    _force(llama_info, llama_hf, "paused")
    paused = len(collections_seen)
    monkeypatch.setattr(pushdown, "PAUSE_GC", contextlib.nullcontext())
    collections_seen.clear()
    _force(llama_info, llama_hf, "running")
    assert paused * 4 < len(collections_seen), (paused, len(collections_seen))


def test_the_pause_is_reentrant_and_restores_a_disabled_collector():
    enabled = gc.isenabled()
    try:
        gc.enable()
        with PAUSE_GC:
            assert not gc.isenabled()
            with PAUSE_GC:
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled()
        gc.disable()
        with PAUSE_GC:
            pass
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        (gc.enable if enabled else gc.disable)()


def test_overlapping_builders_resume_the_collector_when_the_last_is_done():
    enabled = gc.isenabled()
    gc.enable()
    entered, release = threading.Event(), threading.Event()

    def builder():
        with PAUSE_GC:
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=builder)
    try:
        worker.start()
        assert entered.wait(10)
        with PAUSE_GC:
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other builder is still at work
        release.set()
        worker.join(10)
        assert gc.isenabled()
    finally:
        release.set()
        worker.join(10)
        (gc.enable if enabled else gc.disable)()
