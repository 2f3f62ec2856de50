"""The command line: ``demo`` (part 1 in-process; the whole demo is slow-marked), ``generate`` with a
local tiny model directory, and one-line errors."""

from __future__ import annotations

import json

import pytest

from grammask.cli import main
from grammask.schemas.bundled import example_schema_names
from tests.tiny_models import tiny_llama


def test_demo_part_one_walks_every_bundled_schema(capsys):
    assert main(["demo", "--skip-generation", "--backend", "xgrammar"]) == 0
    out = capsys.readouterr().out
    for name in example_schema_names():
        assert f"-- {name}: backend 'xgrammar'" in out
    assert "rejected token \"'42'\"" in out
    assert "why: at '/name': 42 is not of type 'string'" in out
    assert "NOT enforced" in out or "every keyword is enforced" in out


@pytest.mark.slow
def test_demo_whole(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "RANDOMLY INITIALISED" in out and "--model" in out
    assert "valid (jsonschema, formats checked)" in out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, llama_hf):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(seed=2).save_pretrained(path)
    llama_hf.save_pretrained(path)
    return path


def test_generate_with_a_local_model(tmp_path, model_dir, capsys):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    code = main(["generate", "--schema", str(path), "--model", str(model_dir), "--backend", "xgrammar",
                 "--max-new-tokens", "12"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    value = json.loads(captured.out)
    assert set(value) == {"ok"} and isinstance(value["ok"], bool)
    assert '"valid": true' in captured.err


def test_generate_errors_are_one_line(tmp_path, capsys):
    code = main(["generate", "--schema", str(tmp_path / "missing.json"), "--model", "x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "grammask generate: error: invalid JSON Schema" in err and "neither JSON nor an existing file" in err


def test_generate_unloadable_model_is_one_line(tmp_path, capsys):
    path = tmp_path / "schema.json"
    path.write_text('{"type": "boolean"}')
    code = main(["generate", "--schema", str(path), "--model", str(tmp_path / "no-model")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0
    assert "cannot load model" in err
