"""The engine-loop example runs: requests join and leave, and every finished output obeys its spec
(checked with jsonschema and the regex module)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jsonschema
import regex

from grammask import JsonSchema, Regex

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "engine_loop.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("engine_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _obeys(spec, text: str) -> bool:
    if isinstance(spec, Regex):
        return regex.fullmatch(spec.pattern, text) is not None
    assert isinstance(spec, JsonSchema)
    return jsonschema.Draft202012Validator(json.loads(spec.schema_json)).is_valid(json.loads(text))


def test_engine_loop_requests_join_leave_and_obey_their_specs():
    example = _load_example()
    done = example.run(verbose=False)
    assert sorted(r.name for r in done) == ["answer", "date", "flags", "person"]
    for r in done:
        assert r.finish_reason == "stop", (r.name, r.text)
        assert _obeys(r.spec, r.text), (r.name, r.text)
        assert r.steps[0] == r.arrives_at  # joined the running batch when it arrived
    spans = {r.name: (r.steps[0], r.steps[-1]) for r in done}
    # the batch really was continuous: a late request overlapped with earlier ones still running
    assert spans["flags"][0] < max(spans["person"][1], spans["date"][1])
    assert spans["answer"][1] > spans["date"][1]  # and requests left while others stayed


def test_engine_loop_is_deterministic_under_its_seed():
    example = _load_example()
    first = [(r.name, r.text) for r in example.run(verbose=False)]
    second = [(r.name, r.text) for r in example.run(verbose=False)]
    assert first == second
