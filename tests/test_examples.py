"""Every example runs offline, uses grammask's public top-level API only, and does what it says:
outputs are checked independently (jsonschema, the regex module), not against the example's own
report."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import jsonschema
import pytest
import regex

import grammask

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _obeys(spec, text: str) -> bool:
    if isinstance(spec, grammask.Regex):
        return regex.fullmatch(spec.pattern, text) is not None
    return jsonschema.Draft202012Validator(spec.schema).is_valid(json.loads(text))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_examples_use_the_public_api_and_are_tested(path):
    """Only ``import grammask`` / ``from grammask import ...`` (integrations are public faces too),
    and some test names the file."""
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if name.startswith("grammask."):
                assert name.startswith("grammask.integrations."), f"{path.name} imports {name}"
    tests = Path(__file__).resolve().parent
    assert any(path.name in t.read_text() or path.stem in t.read_text() for t in tests.rglob("test_*.py")), path.name


def test_engine_loop_requests_join_leave_and_obey_their_specs():
    done = load("engine_loop").run(verbose=False)
    assert sorted(r.name for r in done) == ["answer", "date", "flags", "person"]
    for r in done:
        assert r.finish_reason == "stop", (r.name, r.text)
        assert _obeys(r.spec, r.text), (r.name, r.text)
        assert r.backend == "fsm"  # auto's first choice for JSON Schemas and regexes
        assert r.steps[0] == r.arrives_at  # joined the running batch when it arrived
    spans = {r.name: (r.steps[0], r.steps[-1]) for r in done}
    # the batch really was continuous: a late request overlapped with earlier ones still running
    assert spans["flags"][0] < max(spans["person"][1], spans["date"][1])
    assert spans["answer"][1] > spans["date"][1]  # and requests left while others stayed


def test_engine_loop_is_deterministic_under_its_seed():
    example = load("engine_loop")
    first = [(r.name, r.text) for r in example.run(verbose=False)]
    second = [(r.name, r.text) for r in example.run(verbose=False)]
    assert first == second


def test_hf_logits_processor_outputs_follow_their_grammars(capsys):
    example = load("hf_logits_processor")
    outputs = example.main()
    product = grammask.JsonSchema(example.PRODUCT)
    date = grammask.Regex(example.DATE)
    assert all(_obeys(product, text) for text in outputs["one grammar"])
    assert _obeys(product, outputs["one per row"][0]) and _obeys(date, outputs["one per row"][1])
    assert "one per row:" in capsys.readouterr().out


def test_structural_tags_accept_exactly_the_calls_that_follow_their_schemas():
    example = load("structural_tags")
    accepted = example.main()
    info, tokenizer = example.llama32_tokenizer()
    weather = example.WEATHER.content.schema
    good = json.loads('{"city":"Paris","days":3}')
    bad = json.loads('{"city":"Paris","days":"three"}')
    assert jsonschema.Draft202012Validator(weather).is_valid(good)
    assert not jsonschema.Draft202012Validator(weather).is_valid(bad)
    length = {name: len(tokenizer.encode(text, add_special_tokens=False).ids) for name, text in {
        "good call": 'Let me check. <function=get_weather>{"city":"Paris","days":3}</function> Done.',
        "second tool": "It is <function=get_time>Europe/Paris</function> there.",
    }.items()}
    assert accepted["good call"] == length["good call"] and accepted["second tool"] == length["second tool"]
    assert accepted["bad argument"] < len(tokenizer.encode('<function=get_weather>{"city":"Paris","days"').ids) + 2
    assert accepted["unknown tool"] <= len(tokenizer.encode("<function=", add_special_tokens=False).ids)


def test_validate_tokens_draft_rollback_and_budget():
    example = load("validate_tokens")
    out = example.main()
    info, tokenizer = example.llama32_tokenizer()
    valid_part = tokenizer.encode('42,"note":"ok"}', add_special_tokens=False).ids
    assert out["draft"][: len(valid_part)] == valid_part
    assert out["valid_prefix"] == len(valid_part)  # the rest ("garbage") cannot follow a closed object
    closing = out["closing"]
    assert closing.is_terminated() and closing.num_accepted <= out["budget"]
