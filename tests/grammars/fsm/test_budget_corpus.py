"""Budget-aware closing on real schemas: for dev-corpus (JSONSchemaBench) schemas the fsm backend
compiles, random-logits decoding with ``max_tokens`` = the shortest output plus a few tokens always
ends on EOS with JSON that ``jsonschema`` (formats checked) validates."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from grammask.errors import GrammaskError
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.spec import JsonSchema
from grammask.schemas.validate import validator_class
from tests.conftest import read_jsonl
from tests.grammars.fsm.helpers import random_logits_decode


def _sample(corpora, per_file: int) -> list[dict]:
    rows = []
    for path in sorted((corpora / "jsonschemabench" / "schemas").glob("*.dev.jsonl")):
        ranked = sorted(read_jsonl(path), key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())
        rows += ranked[:per_file]
    return rows


@pytest.mark.parametrize("per_file", [1, pytest.param(6, marks=pytest.mark.slow)])
def test_tight_budget_ends_valid_on_corpus_schemas(corpora, llama_info, per_file):
    backend = FsmBackend(llama_info)
    rng = np.random.default_rng(7)
    compiled = 0
    for row in _sample(corpora, per_file):
        try:
            grammar = backend.compile(JsonSchema(row["schema"]))
            for extra in (0, 3):
                budget = grammar.min_tokens + extra
                tokens, terminated = random_logits_decode(grammar, llama_info, budget, rng)
                assert terminated and len(tokens) <= budget, row["id"]
                value = json.loads(llama_info.decode(tokens[:-1]).decode("utf-8"))
                cls = validator_class(row["schema"])
                assert cls(row["schema"], format_checker=cls.FORMAT_CHECKER).is_valid(value), (row["id"], value)
        except GrammaskError:
            continue  # outside the fsm backend (auto would take xgrammar)
        compiled += 1
    assert compiled >= 0.7 * len(_sample(corpora, per_file))
