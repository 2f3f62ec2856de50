"""JSON-Schema-Test-Suite (draft 2020-12): the lowered expression's verdict equals the suite's label.

Lowered groups never accept an instance the suite calls invalid unless a keyword listed as
unenforced explains it, and never reject a valid one unless a listed narrowing does (the
``max_depth`` cut never bites on these shallow instances, so it explains nothing). ``format`` is
asserted only for groups under ``optional/format/``, as the suite prescribes.
"""

from __future__ import annotations

import pytest

from grammask.errors import GrammaskError
from grammask.grammars.fsm.pushdown import matches
from grammask.grammars.fsm.json_schema import lower_json_schema, order_instance
from grammask.grammars.spec import JsonSchema
from tests.conftest import read_jsonl

SUITE = "json-schema-test-suite/draft2020-12.dev.jsonl"


def run_suite(corpora, order: str, every: int = 1) -> dict:
    groups = read_jsonl(corpora / SUITE)[::every]
    figures = {"groups": len(groups), "lowered": 0, "exact_groups": 0, "instances": 0, "agree": 0, "mismatches": []}
    for group in groups:
        spec = JsonSchema(group["schema"], property_order=order)
        try:
            expr, unenforced, narrowed = lower_json_schema(spec, assert_formats=group["file"].startswith("optional/format/"))
        except GrammaskError:
            continue
        figures["lowered"] += 1
        listed = {u.keyword for u in unenforced}
        figures["exact_groups"] += not listed
        for test in group["tests"]:
            verdict = matches(expr, spec.serialize(order_instance(spec, test["data"])))
            figures["instances"] += 1
            figures["agree"] += verdict == test["valid"]
            narrowing = {n.keyword for n in narrowed} - {"max_depth"}  # depth cuts never bite here
            false_accept, false_reject = verdict and not test["valid"], test["valid"] and not verdict
            if (false_accept and not listed) or (false_reject and not narrowing):
                figures["mismatches"].append((group["id"], test["description"], verdict))
    return figures


@pytest.mark.parametrize("order, every", [("declared", 1), ("any", 3)])
def test_suite_verdicts_equal_labels(corpora, order, every):
    figures = run_suite(corpora, order, every)
    assert figures["mismatches"] == []
    assert figures["lowered"] >= 0.8 * figures["groups"], figures
    assert figures["agree"] >= 0.85 * figures["instances"], figures
