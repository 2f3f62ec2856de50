"""Budget-aware closing on real schemas: for dev-corpus (JSONSchemaBench) schemas the fsm backend
compiles, random-logits decoding with ``max_tokens`` = the shortest output plus 0 and 3 tokens
always ends on EOS within the budget, and, where the grammar lists nothing unenforced, with JSON
that ``jsonschema`` (formats checked) validates.

Three scopes: one schema per file (default run), six per file (``-m slow``), every schema of a
file (``-m corpus_full``, about an hour on two cores for the whole corpus)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from grammask.errors import GrammaskError
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.spec import JsonSchema
from grammask.validation import output_validator
from tests.conftest import CORPORA, read_jsonl
from grammask.grammars.fsm.automaton import INFINITE
from tests.grammars.fsm.helpers import allowed_ids, random_logits_decode

BENCH_FILES = sorted((CORPORA / "jsonschemabench" / "schemas").glob("*.dev.jsonl"))


def _by_hash(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())


def _check(rows: list[dict], info) -> tuple[int, list[str]]:
    """Decode each schema twice under a tight budget; returns (schemas compiled, failures)."""
    backend = FsmBackend(info)
    compiled, failures = 0, []
    for row in rows:
        rng = np.random.default_rng(int(hashlib.sha256(row["id"].encode()).hexdigest()[:8], 16))
        try:
            grammar = backend.compile(JsonSchema(row["schema"]))
            if grammar.min_tokens > INFINITE:  # the schema allows nothing (calculate_area_d402e1cc: oneOf of required lists, all required)
                if allowed_ids(grammar.matcher(max_tokens=1), info).size:
                    failures.append(f"{row['id']}: an empty language with a non-empty mask")
                compiled += 1
                continue
            for extra in (0, 3):
                budget = grammar.min_tokens + extra
                tokens, terminated = random_logits_decode(grammar, info, budget, rng)
                if not terminated or len(tokens) > budget:
                    failures.append(f"{row['id']} +{extra}: no EOS within {budget} tokens")
                    continue
                if grammar.unenforced:
                    continue  # not exact: validity is not promised
                value = json.loads(info.decode(tokens[:-1]).decode("utf-8"))
                if not output_validator(row["schema"]).is_valid(value):
                    failures.append(f"{row['id']} +{extra}: invalid {json.dumps(value)[:200]}")
        except GrammaskError:
            continue  # outside the fsm backend's limits (auto would take xgrammar)
        compiled += 1
    return compiled, failures


@pytest.mark.parametrize("per_file", [1, pytest.param(6, marks=pytest.mark.slow)])
def test_tight_budget_ends_valid_on_corpus_schemas(corpora, llama_info, per_file):
    rows = [row for path in BENCH_FILES for row in _by_hash(read_jsonl(path))[:per_file]]
    compiled, failures = _check(rows, llama_info)
    assert failures == []
    assert compiled >= 0.7 * len(rows)


@pytest.mark.corpus_full
@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: Path(p).name.split(".")[0])
def test_tight_budget_ends_valid_on_every_dev_schema(corpora, llama_info, path):
    rows = read_jsonl(path)
    compiled, failures = _check(rows, llama_info)
    print(f"{path.name}: {compiled} of {len(rows)} compiled, {len(failures)} failures")
    assert failures == []
