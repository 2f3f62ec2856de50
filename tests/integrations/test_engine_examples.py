"""The vLLM and SGLang examples' CPU paths run: vLLM's real manager / SGLang's grammar calls over grammask,
and their outputs obey the requests (jsonschema, the regex module)."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest
import regex

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_vllm_example_cpu_path(tmp_path, monkeypatch):
    pytest.importorskip("vllm.v1.structured_output", reason="vLLM 0.33")
    example = _load("vllm_backend")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    texts = example.cpu_demo(verbose=False)
    jsonschema.validate(json.loads(texts["json"]), example.SCHEMA)
    assert regex.fullmatch(r"(sun|rain)-[0-9]", texts["regex"])
    assert not any(tmp_path.iterdir()), "the example left its model folder (a 17 MB tokenizer) behind"


def test_sglang_example_cpu_path():
    pytest.importorskip("sglang.srt.constrained.base_grammar_backend", reason="SGLang 0.5.23")
    example = _load("sglang_backend")
    texts = example.cpu_demo(verbose=False)
    jsonschema.validate(json.loads(texts["json"]), example.SCHEMA)
    assert regex.fullmatch(r"(cat|dog)-[0-9]", texts["regex"])
