"""The command line: fast help, ``--version``, help on every option, names and inputs checked before
any heavy work (the model loaders are made to fail, so a test passes only if they were never
reached), errors naming the flag typed, ``generate`` for every spec kind with a local tiny model,
and the demo (part 1 in-process; the whole demo is slow-marked)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import regex

import grammask
from grammask.cli import build_parser, main
from grammask import Ebnf, JsonSchema, Regex, StructuralTag, Tag
from grammask.generate_cli import Progress, read_spec
from grammask.schemas.bundled import example_schema_names
from tests.tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "jsonschema", "transformers", "xgrammar", "numpy")
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"],
          "additionalProperties": False}


def test_help_imports_nothing_heavy():
    code = (
        "import sys, contextlib, io\n"
        "from grammask.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for argv in (['--help'], ['generate', '--help'], ['demo', '--help'], ['conformance', '--help']):\n"
        "        try: main(argv)\n"
        "        except SystemExit: pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_version_is_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert capsys.readouterr().out.strip() == f"grammask {grammask.__version__}"
    assert grammask.__version__ == project.get("version", grammask.__version__)


def test_every_option_has_help():
    _, parsers = build_parser()
    for name, parser in parsers.items():
        for action in parser._actions:
            assert action.help and action.help.strip(), f"grammask {name} {action.option_strings or action.dest}"


@pytest.fixture
def no_model_loading(monkeypatch):
    """Loading a tokenizer or a model fails the test: the error had to come before."""
    from grammask.integrations import transformers as hf

    def forbidden(name):
        raise AssertionError(f"loaded {name!r} before the error")

    monkeypatch.setattr(hf, "load_pretrained_tokenizer", forbidden)
    monkeypatch.setattr(hf, "load_pretrained_model", forbidden)


def _error(capsys, argv: list[str]) -> str:
    """The error line (the last line on stderr; progress notes may come before it)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"grammask {argv[0]}: error: "), err
    assert all(line.startswith(f"grammask {argv[0]}: ") for line in lines), err  # no traceback, no foreign log
    return lines[-1]


@pytest.mark.usefixtures("no_model_loading")
def test_names_and_inputs_fail_fast_naming_the_flag(tmp_path, capsys):
    err = _error(capsys, ["generate", "--regex", "a+", "--model", "m", "--backend", "xgramar"])
    assert err == ("grammask generate: error: invalid --backend='xgramar': expected one of 'auto', 'fsm', "
                   "'xgrammar'; did you mean 'xgrammar'?")
    err = _error(capsys, ["generate", "--schema", str(tmp_path / "missing.json"), "--model", "m"])
    assert "invalid --schema=" in err and "(no such file)" in err and "JSON Schema at" not in err
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"type": ')
    assert "bad.json is not JSON" in _error(capsys, ["generate", "--schema", str(bad_json), "--model", "m"])
    assert "(no such file)" in _error(capsys, ["generate", "--ebnf", "grammar.ebnf", "--model", "m"])
    err = _error(capsys, ["generate", "--structural-tag", '{"structures": [], "triggers": []}', "--model", "m"])
    assert "invalid --structural-tag.structures=[]" in err
    err = _error(capsys, ["generate", "--regex", "a", "--model", "m", "--seed", "-1"])
    assert "invalid --seed=-1" in err


def test_argparse_checks_numbers_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["generate", "--regex", "a", "--model", "m", "--max-new-tokens", "0"])
    assert done.value.code == 2
    assert "argument --max-new-tokens: expected an int >= 1, got '0'" in capsys.readouterr().err


def test_conformance_peer_typo_fails_before_any_work(tmp_path, capsys, monkeypatch):
    from grammask.conformance import runner

    monkeypatch.setattr(runner, "load_cases", lambda *a, **k: pytest.fail("read the corpus before the error"))
    err = _error(capsys, ["conformance", str(tmp_path / "x.jsonl"), "--peer", "llguidence"])
    assert err.endswith("invalid --peer='llguidence': expected one of 'llguidance', 'outlines-core', 'xgrammar'; "
                        "did you mean 'llguidance'?")
    err = _error(capsys, ["conformance", str(tmp_path / "x.jsonl"), "--backend", "fsn"])
    assert "invalid --backend='fsn'" in err and "did you mean 'fsm'?" in err


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, llama_hf):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(seed=2).save_pretrained(path)
    llama_hf.save_pretrained(path)
    return path


@pytest.fixture
def no_weights(monkeypatch, llama_hf):
    """The tokenizer loads (the session's copy of the one in the model folder, to save time); the
    model's weights must not."""
    from grammask.integrations import transformers as hf

    monkeypatch.setattr(hf, "load_pretrained_tokenizer", lambda name: (llama_hf, 128256))
    monkeypatch.setattr(hf, "load_pretrained_model", lambda name: pytest.fail("loaded the weights before the error"))


@pytest.mark.usefixtures("no_weights")
def test_spec_and_budget_errors_come_before_the_weights(tmp_path, model_dir, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(PERSON))
    err = _error(capsys, ["generate", "--schema", str(schema), "--model", str(model_dir), "--max-new-tokens", "3"])
    assert "invalid --max-new-tokens=3: expected at least" in err
    err = _error(capsys, ["generate", "--ebnf", "root ::= foo", "--model", str(model_dir)])
    assert 'invalid grammar at line 1, column 10: EBNF parser error: Rule "foo" is not defined' in err
    assert ".cc:" not in err
    err = _error(capsys, ["generate", "--regex", "(?=a)a", "--model", str(model_dir)])
    assert "backend 'auto' cannot enforce 'lookahead'" in err and "fsm: " in err and "xgrammar: " in err


def _generate(capsys, argv: list[str]) -> tuple[str, dict]:
    code = main(["generate", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.err.strip().splitlines()[-1])
    assert summary["valid"] is True
    assert "\r" not in captured.err  # not a terminal: no progress line redrawn
    return captured.out.removesuffix("\n"), summary


def test_generate_a_schema_and_a_regex(tmp_path, model_dir, capsys):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(PERSON))
    out, summary = _generate(capsys, ["--schema", str(schema), "--model", str(model_dir), "--max-new-tokens", "24"])
    assert set(json.loads(out)) == {"name"} and summary["backend"] == "fsm"
    out, _ = _generate(capsys, ["--regex", r"(yes|no), [a-z]{1,5}", "--model", str(model_dir), "--max-new-tokens", "12",
                                "--temperature", "0.9", "--seed", "3", "--backend", "xgrammar"])
    assert regex.fullmatch(r"(yes|no), [a-z]{1,5}", out)


def test_every_structure_option_reads_its_spec(tmp_path):
    parser, _ = build_parser()
    grammar = tmp_path / "kv.ebnf"
    grammar.write_text('root ::= "k=" [0-9]\n')
    tag = {"structures": [{"begin": "<n>", "schema": {"enum": [1, 2]}, "end": "</n>"}], "triggers": ["<n>"]}
    tag_file = tmp_path / "tag.json"
    tag_file.write_text(json.dumps(tag))
    expected_tag = StructuralTag([Tag("<n>", JsonSchema({"enum": [1, 2]}), "</n>")], ["<n>"])
    cases = {
        ("--schema", json.dumps(PERSON)): JsonSchema(PERSON),
        ("--regex", "a|b"): Regex("a|b"),
        ("--ebnf", str(grammar)): Ebnf('root ::= "k=" [0-9]\n'),
        ("--ebnf", 'root ::= "x"'): Ebnf('root ::= "x"'),
        ("--structural-tag", str(tag_file)): expected_tag,
        ("--structural-tag", json.dumps(tag)): expected_tag,
    }
    for (option, value), spec in cases.items():
        assert read_spec(parser.parse_args(["generate", option, value, "--model", "m"])) == spec, option


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal_and_erases_it():
    stream = _Terminal()
    progress = Progress(stream, 8)
    progress.note("loading")
    progress.step(1)
    progress.step(2)
    progress.close()
    assert stream.getvalue() == "grammask generate: loading\n\rgenerating: 1/8 tokens\rgenerating: 2/8 tokens\r\x1b[K"
    quiet = _Terminal()
    Progress(quiet, 8, enabled=False).step(1)
    assert quiet.getvalue() == ""


def test_unloadable_model_is_one_line(tmp_path, capsys):
    err = _error(capsys, ["generate", "--regex", "a", "--model", str(tmp_path / "no-model")])
    assert "cannot load the tokenizer of" in err


def test_demo_part_one_walks_every_bundled_schema_cold_then_warm(capsys):
    assert main(["demo", "--skip-generation", "--backend", "xgrammar"]) == 0
    out = capsys.readouterr().out
    assert "cold = a state's first visit" in out and "warm = a state visited before" in out
    for name in example_schema_names():
        assert f"-- {name}: backend 'xgrammar'" in out
    assert len(regex.findall(r"cold median [0-9.]+ µs \(max \d+ µs\), warm median [0-9.]+ µs", out)) == len(
        example_schema_names())
    assert "rejected token \"'42'\"" in out
    assert "why: at '/name': 42 is not of type 'string'" in out
    assert "NOT enforced" in out or "every keyword is enforced" in out


def test_demo_part_one_on_fsm_takes_every_bundled_instance(capsys):
    # The instances are written as the grammar expects them (canonical numbers: 950.0 as 950).
    assert main(["demo", "--skip-generation", "--backend", "fsm"]) == 0
    out = capsys.readouterr().out
    assert out.count("ended terminated=True") == len(example_schema_names())
    assert "rejected this valid instance" not in out


@pytest.mark.slow
def test_demo_whole(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "RANDOMLY INITIALISED" in out and "--model" in out
    assert "valid (jsonschema, formats checked)" in out
