"""``grammask conformance`` through the real dispatcher on a schema-only corpus: compile outcomes only."""

from __future__ import annotations

import json

from grammask.cli import main


def test_schema_only_corpus_reports_compile_outcomes(tmp_path, capsys):
    corpus = tmp_path / "schemas" / "Tiny.dev.jsonl"
    corpus.parent.mkdir()
    corpus.write_text(
        json.dumps({"id": "Tiny/int", "dataset": "Tiny", "schema": {"type": "integer"}}) + "\n"
        + json.dumps({"id": "Tiny/bad", "dataset": "Tiny", "schema": {"type": 12}}) + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    code = main(["conformance", str(corpus), "--backend", "xgrammar", "--out", str(out), "--no-progress"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    outcomes = {c["id"]: c["results"]["grammask:xgrammar"]["outcome"] for c in results["cases"]}
    assert outcomes == {"Tiny/int": "ok", "Tiny/bad": "invalid"}  # 12 is not a type name (meta-schema)
    assert "no labelled instances: compile outcomes only" in results["notes"]
    report = (out / "report.md").read_text()
    assert "| grammask:xgrammar | 1 | 0 | 1 |" in report  # ok, unsupported, invalid


def test_unknown_backend_is_a_one_line_error(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "x", "schema": {}}) + "\n")
    assert main(["conformance", str(corpus), "--backend", "nope"]) == 2
    assert "invalid --backend='nope'" in capsys.readouterr().err
