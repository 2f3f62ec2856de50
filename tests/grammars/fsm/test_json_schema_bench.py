"""JSONSchemaBench dev schemas: instances joined on id; valid ones accepted, invalid ones rejected.

Python ``jsonschema`` with format checking (each schema's declared draft) is the reference: instances
whose label it disputes are label noise and are skipped. Schemas the lowering refuses are counted,
not failed, and so are instances whose matching passes a limit, at most 2% (Github_trivial's
o25731 and o25761, an ``oneOf`` over an optional member and an array, reach ``max_states``). On schemas that list nothing unenforced but
``max_depth`` (a cut that only rejects), no invalid instance may be accepted.

Each reference walk runs under the compile caps a request gets (:data:`WALK_SECONDS`,
:data:`WALK_BYTES`), and a schema whose walk passes the clock is not walked again: Github_ultra/o359's
walks (a complement's liveness searched through a product) took 156 s and 8.3 GB without them.
"""

from __future__ import annotations

import pytest

from grammask.errors import CompileLimitError, GrammaskError
from grammask.grammars.fsm.expr import BuildBudget
from grammask.grammars.fsm.pushdown import matches
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance
from grammask.grammars.spec import JsonSchema
from grammask.validation import output_validator
from tests.conftest import read_jsonl

WALK_SECONDS = 10.0
WALK_BYTES = 1 << 30
DATASETS = ["Github_easy", "Github_medium", "Github_hard", "Github_trivial", "Github_ultra", "Glaiveai2K",
            "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost", "Handwritten", "Synthesized"]


def run_bench(corpora, dataset: str, every: int) -> dict:
    schemas = {r["id"]: r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / f"{dataset}.dev.jsonl")}
    rows = read_jsonl(corpora / "jsonschemabench" / "instances" / f"{dataset}.dev.jsonl")[::every]
    figures = {"schemas": 0, "lowered": 0, "instances": 0, "agree": 0, "false_accepts": [], "limited": []}
    for row in rows:
        schema = schemas[row["id"]]
        figures["schemas"] += 1
        spec = JsonSchema(schema)
        try:
            expr, unenforced, _ = lower_json_schema(spec)
        except GrammaskError:
            continue
        figures["lowered"] += 1
        exact = not unenforced
        validator = output_validator(schema)
        out_of_time = False
        for test in row["tests"]:
            if validator.is_valid(test["data"]) != test["valid"]:
                continue  # label noise
            try:
                if out_of_time:
                    raise CompileLimitError("compile_seconds", "an earlier walk", WALK_SECONDS)
                with BuildBudget(seconds=WALK_SECONDS, max_bytes=WALK_BYTES):
                    verdict = matches(expr, spec.serialize(order_instance(spec, test["data"])))
            except GrammaskError as exc:  # a limit while exploring (a request would move to the fallback)
                figures["limited"].append((row["id"], test["description"]))
                out_of_time |= getattr(exc, "limit", None) == "compile_seconds"
                continue
            figures["instances"] += 1
            figures["agree"] += verdict == test["valid"]
            if verdict and not test["valid"] and exact:
                figures["false_accepts"].append((row["id"], test["description"]))
    return figures


@pytest.mark.parametrize("dataset", ["Github_easy", "Glaiveai2K", "Snowplow", "Kubernetes"])
def test_bench_sample(corpora, dataset):
    figures = run_bench(corpora, dataset, every=40)
    assert figures["false_accepts"] == []
    assert figures["lowered"] >= 0.8 * figures["schemas"], figures
    assert figures["agree"] >= 0.9 * figures["instances"], figures


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASETS)
def test_bench_full(corpora, dataset):
    figures = run_bench(corpora, dataset, every=1)
    assert figures["false_accepts"] == []
    assert figures["agree"] >= 0.9 * figures["instances"], figures
    assert len(figures["limited"]) <= 0.02 * figures["instances"], figures["limited"]
