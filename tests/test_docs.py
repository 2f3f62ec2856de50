"""The API reference builds strictly: Sphinx with -W (a warning is an error) and -n (every cross
reference must resolve). The tools are in the ``test`` extra; without them the test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOOLS = ("sphinx", "furo", "myst_parser")


@pytest.fixture(scope="module", autouse=True)
def docs_tools():
    for module in TOOLS:
        pytest.importorskip(module, reason=f"the API reference needs {module}: pip install -e '.[test]'")


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html", "-d", str(out / "doctrees"),
               "-c", str(DOCS), str(source), str(out / "html")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_api_reference_builds_strictly(tmp_path):
    done = build(DOCS, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    html = tmp_path / "html" / "api"
    pages = {
        "specs": "grammask.grammars.spec.StructuralTag.from_dict",
        "compiler": "grammask.grammars.base.Matcher.fill_next_token_bitmask",
        "bitmask": "grammask.masking.bitmask.allocate_token_bitmask",
        "kernels": "grammask.kernels.apply_mask.apply_mask",
        "sampler": "grammask.sampler.sampler.Sampler",
        "generation": "grammask.generate.GenerationResult",
        "integrations": "grammask.integrations.transformers.GrammaskLogitsProcessor",
        "conformance": "grammask.conformance.runner.run_conformance",
        "errors": "grammask.errors.InvalidParameterError",
    }
    for page, anchor in pages.items():
        assert f'id="{anchor}"' in (html / f"{page}.html").read_text(encoding="utf-8"), (page, anchor)


def test_a_broken_reference_fails_the_build_and_a_short_one_resolves(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "errors.rst").write_text("Errors\n======\n\n.. autoclass:: grammask.errors.InvalidParameterError\n   :no-show-inheritance:\n")
    page = "Index\n=====\n\nSee :class:`InvalidParameterError`{}.\n\n.. toctree::\n\n   errors\n"
    (source / "index.rst").write_text(page.format(" and :class:`grammask.errors.NoSuchError`"))
    done = build(source, tmp_path / "broken")
    assert done.returncode != 0 and "grammask.errors.NoSuchError" in done.stderr, done.stderr[-2000:]
    (source / "index.rst").write_text(page.format(""))
    done = build(source, tmp_path / "fixed")
    assert done.returncode == 0, done.stderr[-2000:]  # the short name resolved to the documented class
