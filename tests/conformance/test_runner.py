"""The conformance runner end to end on a hand-made corpus with known answers, in real worker
processes: grammask's xgrammar backend, the jsonschema reference, a fake peer that accepts
everything, one that segfaults and one that hangs. The run completes and counts each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grammask.conformance.report import headline, write_report
from grammask.conformance.runner import (
    AGREE, DISPUTED, FALSE_ACCEPT, FALSE_REJECT, NOT_COVERED, classify, load_cases, order_policy_rejections,
    resolve_targets, run_conformance,
)

OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}
GROUPS = [
    # Hand-checked: valid, valid in another key order, wrong type, missing required.
    {"id": "object.json#0", "file": "object.json", "description": "object", "schema": OBJECT, "tests": [
        {"description": "declared order", "data": {"a": 1, "b": "x"}, "valid": True},
        {"description": "other order", "data": {"b": "x", "a": 1}, "valid": True},
        {"description": "wrong type", "data": {"a": "x"}, "valid": False},
        {"description": "missing a", "data": {}, "valid": False},
    ]},
    # format is an annotation outside optional/format/: jsonschema accepts "nope"; the second label is wrong
    # on purpose (jsonschema disagrees with it), so it is disputed, not counted against anyone.
    {"id": "format.json#0", "file": "format.json", "description": "annotation", "schema": {"type": "string", "format": "email"},
     "tests": [
         {"description": "not an email", "data": "nope", "valid": True},
         {"description": "mislabelled", "data": "x@y.org", "valid": False},
         {"description": "not a string", "data": 3, "valid": False},
     ]},
    # xgrammar lists uniqueItems as unenforced: its false accept is declared, so the grammar is not exact.
    {"id": "uniqueItems.json#0", "file": "uniqueItems.json", "description": "unique", "schema": {"type": "array", "uniqueItems": True},
     "tests": [
         {"description": "unique", "data": [1, 2], "valid": True},
         {"description": "repeated", "data": [1, 1], "valid": False},
     ]},
    # xgrammar narrows length-bounded strings (no escapes): a declared false reject, not an exact grammar.
    {"id": "maxLength.json#0", "file": "maxLength.json", "description": "short", "schema": {"type": "string", "maxLength": 3},
     "tests": [
         {"description": "short", "data": "ab", "valid": True},
         {"description": "escaped quote", "data": 'a"', "valid": True},
     ]},
]
FAKES = "tests.conformance.fake_peers"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    path = folder / "suite.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in GROUPS), encoding="utf-8")
    targets, notes = resolve_targets(
        ["xgrammar"], [f"{FAKES}:AcceptAllPeer", f"{FAKES}:CrashingPeer", f"{FAKES}:HangingPeer"]
    )
    assert notes == []
    results = run_conformance(load_cases([path]), targets, jobs=2, timeout=20, peer_timeout=4, progress=False)
    return results, folder


def _record(results, case_id):
    return next(r for r in results["cases"] if r["id"] == case_id)


def test_backend_verdicts_match_hand_checked_answers(run):
    results, _ = run
    obj = _record(results, "object.json#0")
    assert obj["results"]["grammask:xgrammar"]["verdicts"]["given"] == [True, False, False, False]
    assert obj["results"]["grammask:xgrammar"]["verdicts"]["declared"] == [True, True, False, False]
    assert classify(obj, "grammask:xgrammar", "given") == [AGREE, FALSE_REJECT, AGREE, AGREE]
    assert classify(obj, "grammask:xgrammar", "policy") == [AGREE] * 4
    assert order_policy_rejections(obj, "grammask:xgrammar") == 1


def test_reference_follows_the_suite_format_rule_and_disputes_a_wrong_label(run):
    results, _ = run
    fmt = _record(results, "format.json#0")
    assert fmt["results"]["jsonschema"]["verdicts"]["given"] == [True, True, False]
    assert classify(fmt, f"peer:{FAKES}:AcceptAllPeer") == [AGREE, DISPUTED, FALSE_ACCEPT]


def test_accept_all_peer_gives_false_accepts(run):
    results, _ = run
    assert classify(_record(results, "object.json#0"), f"peer:{FAKES}:AcceptAllPeer") == [AGREE, AGREE, FALSE_ACCEPT, FALSE_ACCEPT]


def test_crash_and_hang_are_counted_and_the_run_completes(run):
    results, _ = run
    for record in results["cases"]:
        crash = record["results"][f"peer:{FAKES}:CrashingPeer"]
        hang = record["results"][f"peer:{FAKES}:HangingPeer"]
        assert crash["outcome"] == "crash" and "SIGSEGV" in crash["detail"]
        assert hang["outcome"] == "timeout" and hang["detail"] == "no answer within 4 s (while compiling)"
        assert set(classify(record, f"peer:{FAKES}:HangingPeer")) <= {NOT_COVERED, DISPUTED}
        assert record["results"]["grammask:xgrammar"]["outcome"] == "ok"  # work after a crash still ran
    assert results["restarts"] >= 4


def test_headline_and_report_files(run):
    results, folder = run
    rows = {(r["family"], r["target"]): r for r in headline(results)}
    xg = rows[("test-suite", "grammask:xgrammar")]
    # Outside optional/format/ grammask compiles format as an annotation, so "nope" is accepted:
    # 8 of 10 agree in the policy view, 7 as given (the other key order is the policy rejection).
    # The repeated items (unenforced) and the escaped quote (narrowed) are on grammars that are not exact.
    assert (xg["instances"], xg["disputed"], xg["agree"], xg["agree_given"], xg["order_policy"]) == (10, 1, 8, 7, 1)
    assert (xg["false_accept"], xg["false_reject"], xg["false_accept_exact"]) == (1, 1, 0)
    assert (xg["exact_schemas"], xg["exact_agree"], xg["exact_instances"]) == (2, 6, 6)
    crash = rows[("test-suite", f"peer:{FAKES}:CrashingPeer")]
    assert (crash["schemas_crash"], crash["not_covered"], crash["agree"]) == (4, 10, 0)
    written = write_report(results, folder / "out", "grammask conformance suite.jsonl")
    report = (folder / "out" / "report.md").read_text()
    assert "| test-suite | grammask:xgrammar | 4/4 | 10 | 8 (80.0%) |" in report
    assert "| 2 / 6 of 6 (100.0%) | 0 |" in report
    assert "crash — worker died: SIGSEGV" in report
    assert json.loads((folder / "out" / "results.json").read_text())["targets"] == results["targets"]
    assert all(Path(p).exists() for p in written)


def test_missing_peer_is_skipped_with_a_note(monkeypatch):
    import grammask.conformance.runner as runner

    monkeypatch.setitem(runner.PEER_MODULES, "outlines-core", "no_such_module_here")
    targets, notes = resolve_targets(["auto"], ["outlines-core"])
    assert targets == ["grammask:auto"]
    assert notes == ["peer 'outlines-core' skipped: the 'no_such_module_here' package is not installed"]
