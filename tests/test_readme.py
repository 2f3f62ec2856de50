"""The README runs as written.

Its python blocks run in order in one namespace, verbatim; the only thing replaced is loading from
the Hugging Face hub: the model the README names comes back as a small random-weight Llama (same
vocabulary width) and its tokenizer as the Llama-3.2 tokenizer from its PyPI package. After the
blocks under a heading have run, the outputs they produced are checked independently (jsonschema,
the regex module). Shell blocks run line by line (``grammask`` is this checkout's), except the
commands listed in :data:`NOT_RUN`, each with the reason it is not run here.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import regex

from tests.tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
STAND_IN_FOR = "meta-llama/Llama-3.2-1B-Instruct"

NOT_RUN = {
    "pip install": "installs packages: .ci/run runs the test set-up command itself (checked equal below)",
    "python -m grammask demo": "about 1.5 min on this machine: tests/test_cli.py::test_demo_whole (slow) runs it, "
    "test_demo_part_one_walks_every_bundled_schema_cold_then_warm runs its first part",
    "grammask conformance": "minutes to hours over the corpora: tests/conformance runs the same runner on small corpora",
    "grammask generate": "loads a model from the hub: tests/test_cli.py runs generate on a local tiny model",
    "python examples/": "tests/test_examples.py runs every example",
    "python -m sphinx": "tests/test_docs.py runs the same strict build",
    "GRAMMASK_CORPORA=../shared/corpora python benchmarks/cold_path.py": "about 15 minutes over 117 schemas: "
    "tests/benchmarks/test_cold_path.py runs the same benchmark on two tiny schemas",
}

_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def readme_blocks(language: str) -> list[tuple[str, str]]:
    """``(heading, code)`` of every fenced block in ``language``, in order."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for found in _BLOCK.finditer(text):
        if found.group(1) == language:
            headings = re.findall(r"^## (.+)$", text[: found.start()], re.M)
            blocks.append((headings[-1] if headings else "", found.group(2)))
    return blocks


PYTHON_BLOCKS = readme_blocks("python")


def _last_block_of_its_heading(index: int) -> bool:
    return index + 1 == len(PYTHON_BLOCKS) or PYTHON_BLOCKS[index + 1][0] != PYTHON_BLOCKS[index][0]


@pytest.fixture(scope="module")
def namespace(llama_hf):
    """One namespace for every block, with hub loading replaced for the model the README names."""
    transformers = pytest.importorskip("transformers")
    model = tiny_llama(seed=0)

    def stand_in(value):
        def from_pretrained(name, *args, **kwargs):
            if name != STAND_IN_FOR:
                raise AssertionError(f"the README names {name!r}; tests/test_readme.py stands in only for {STAND_IN_FOR}")
            return value

        return staticmethod(from_pretrained)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", stand_in(model))
        patch.setattr(transformers.AutoTokenizer, "from_pretrained", stand_in(llama_hf))
        yield {"__name__": "readme"}


def _valid(value, schema) -> bool:
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(value)


def check_generate_json(ns: dict) -> None:
    assert _valid(ns["product"], ns["schema"]), ns["product"]
    result = ns["result"]
    assert result.valid and isinstance(result.instance, ns["Product"]), result
    assert regex.fullmatch(r"[A-Z]{3}-[0-9]{4}", result.instance.sku) and result.instance.price >= 0
    samples, scored = ns["samples"], ns["scored"]
    assert isinstance(samples, list) and len(samples) == 2 and all(_valid(s.value, ns["schema"]) for s in samples)
    assert samples[0].cumulative_logprob >= samples[1].cumulative_logprob  # best_of: best first
    assert scored.valid and len(scored.logprobs) == len(scored.token_ids) and scored.prompt_logprobs[0] is None


def check_other_specs(ns: dict) -> None:
    assert ns["date"].valid and regex.fullmatch(r"20\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", ns["date"].value)
    assert ns["reply"].valid and regex.fullmatch(r"(yes|no) because [a-z ]{1,30}", ns["reply"].text), ns["reply"]
    for call in regex.findall(r"<function=get_weather>(.*?)</function>", ns["call"].text, flags=regex.S):
        assert _valid(json.loads(call), ns["weather"].content.schema), call


def check_logits_processor(ns: dict) -> None:
    text = ns["tokenizer"].decode(ns["out"][0, ns["input_ids"].shape[1] :], skip_special_tokens=True)
    assert _valid(json.loads(text), ns["schema"]), text


def check_engine_loop(ns: dict) -> None:
    assert len(ns["outputs"]) == 2
    for text in ns["outputs"]:
        assert _valid(json.loads(text), ns["schema"]), text
    emitted, drafts = ns["emitted"], ns["drafts"]  # speculative decoding: accepted drafts, then one token
    assert 1 <= len(emitted) <= len(drafts) + 1 and emitted[:-1] == drafts[: len(emitted) - 1], (emitted, drafts)
    assert ns["grammar"].matcher().accept_tokens(emitted) == len(emitted)  # nothing outside the grammar


CHECKS = {
    "Generate JSON in one call": check_generate_json,
    "Regexes, EBNF grammars and structural tags": check_other_specs,
    "With transformers' `generate`: the logits processor": check_logits_processor,
    "The engine loop": check_engine_loop,
}


def test_every_checked_heading_has_python_blocks():
    assert set(CHECKS) <= {heading for heading, _ in PYTHON_BLOCKS}


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)), ids=[f"{i}-{h}" for i, (h, _) in enumerate(PYTHON_BLOCKS)])
def test_python_block_runs(index, namespace, capsys):
    heading, code = PYTHON_BLOCKS[index]
    if namespace.get("failed"):
        pytest.skip(f"an earlier block failed: {namespace['failed']}")
    namespace["failed"] = f"block {index} under '{heading}'"
    exec(compile(code, f"README.md block {index} ({heading})", "exec"), namespace)
    if _last_block_of_its_heading(index) and heading in CHECKS:
        CHECKS[heading](namespace)
    namespace.pop("failed")


def _shell_commands() -> list[tuple[str, str]]:
    commands = []
    for heading, code in readme_blocks("bash"):
        commands += [(heading, line.strip()) for line in code.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def _reason_not_run(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


@pytest.fixture(scope="module")
def checkout_on_path(tmp_path_factory) -> dict[str, str]:
    """An environment whose ``grammask`` command is this checkout's (not another installed copy)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "grammask"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m grammask \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("heading,command", _shell_commands(), ids=[c for _, c in _shell_commands()])
def test_shell_command_runs(heading, command, checkout_on_path):
    why = _reason_not_run(command)
    if why is not None:
        pytest.skip(f"not run: {why}")
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=checkout_on_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{command} printed nothing"


def test_readme_test_command_is_what_ci_runs():
    setup = [code.strip() for heading, code in readme_blocks("bash") if heading == "Set up on a fresh machine"]
    assert len(setup) == 2, "two set-up commands: the demo and the tests"
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [setup[1]]
