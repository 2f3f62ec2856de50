"""The conformance run: corpora × targets through the isolated pool, then per-instance classification.

:func:`run_conformance` returns a JSON-able dict (what ``results.json`` holds); :func:`classify`
turns one case's results into verdict categories; :mod:`grammask.conformance.report` summarises.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterable

from grammask.conformance import PEER_MODULES
from grammask.conformance.corpus import Case, keywords, read_corpus, sample
from grammask.conformance.pool import IsolatedPool
from grammask.conformance.targets import REFERENCE
from grammask.errors import InvalidParameterError
from grammask.grammars.registry import check_backend_name

TEST_SUITE = "test-suite"


def load_cases(
    paths: Iterable[str | Path], limit: int | None = None, seed: int = 0, suite_limit: int | None = None
) -> list[Case]:
    """Every case of every corpus file, at most ``limit`` per JSONSchemaBench / schema-only file and
    ``suite_limit`` per test-suite file (deterministic samples)."""
    cases: list[Case] = []
    for path in paths:
        read = read_corpus(path)
        is_suite = bool(read) and read[0].corpus == TEST_SUITE
        cases.extend(sample(read, suite_limit if is_suite else limit, seed))
    return cases


def resolve_targets(backends: list[str], peers: list[str]) -> tuple[list[str], list[str]]:
    """Target names for the requested backends and peers, and notes on peers skipped as missing.

    A peer is a name in :data:`PEER_MODULES` or ``"module:Class"`` (a test's fake peer).

    Raises:
        InvalidParameterError: (field ``backend`` or ``peer``) an unknown name, with the closest known one.
    """
    for backend in backends:
        check_backend_name(backend)
    for peer in peers:
        if ":" not in peer and peer not in PEER_MODULES:
            raise InvalidParameterError.unknown_name("peer", peer, PEER_MODULES)
    targets = [f"grammask:{b}" for b in backends]
    notes = []
    for peer in peers:
        module = PEER_MODULES.get(peer)
        if module is not None and importlib.util.find_spec(module) is None:
            notes.append(f"peer '{peer}' skipped: the '{module}' package is not installed")
            continue
        targets.append(f"peer:{peer}")
    return targets, notes


def run_conformance(
    cases: list[Case],
    targets: list[str],
    *,
    jobs: int = 1,
    timeout: float = 60.0,
    peer_timeout: float | None = None,
    any_order: bool = False,
    memory_mb: int | None = 8192,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every case through every target (and the ``jsonschema`` reference) in isolated workers.

    ``peer_timeout`` (default ``timeout``) bounds peer tasks; ``any_order`` adds the any-property-order
    view (a second compile per schema and target).

    Returns:
        a dict, ``{"targets": [...], "cases": [...], "restarts": int}``, each case
        ``{"id", "corpus", "keywords", "labels", "descriptions", "format_asserted", "results": {target: result}}``.
    """
    all_targets = [REFERENCE, *targets]
    tasks = []
    for case_index, case in enumerate(cases):
        data = [inst.data for inst in case.instances]
        for target in all_targets:
            tasks.append(
                {
                    "case": case_index,
                    "target": target,
                    "schema": case.schema,
                    "instances": data,
                    "format_asserted": case.format_asserted,
                    "any_order": any_order,
                    "timeout": peer_timeout if peer_timeout and target.startswith("peer:") else timeout,
                }
            )
    records = [
        {
            "id": case.id,
            "corpus": case.corpus,
            "keywords": sorted(keywords(case.schema)),
            "labels": [inst.valid for inst in case.instances],
            "descriptions": [inst.description for inst in case.instances],
            "format_asserted": case.format_asserted,
            "results": {},
        }
        for case in cases
    ]
    pool = IsolatedPool(jobs, timeout, memory_mb, targets)
    bar = _progress(len(tasks), progress)
    for index, result in pool.run(tasks):
        task = tasks[index]
        records[task["case"]]["results"][task["target"]] = result
        bar.update(1)
    bar.close()
    return {"targets": targets, "cases": records, "restarts": pool.restarts}


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if not enabled:
        class _Silent:
            def update(self, n: int) -> None: ...
            def close(self) -> None: ...

        return _Silent()
    return tqdm(total=total, unit="task", desc="conformance", smoothing=0.05)


# Instance categories (the reference's disagreements with labels are kept apart as "disputed").
AGREE, FALSE_REJECT, FALSE_ACCEPT, NOT_COVERED, DISPUTED = "agree", "false_reject", "false_accept", "not_covered", "disputed"


def classify(record: dict, target: str, view: str = "policy") -> list[str]:
    """The category of each instance of one case for one target.

    ``view``: ``"given"`` (keys as in the corpus), ``"policy"`` (accepted as given or in the schema's
    declared order: a rejection of the given order that the declared order passes is the grammar's
    documented order policy, not a false reject) or ``"any"`` (compiled with any property order;
    targets without that option count as not covered).
    """
    labels = record["labels"]
    reference = record["results"].get(REFERENCE, {}).get("verdicts", {}).get("given") or [None] * len(labels)
    result = record["results"].get(target, {})
    verdicts = result.get("verdicts", {}) if result.get("outcome") == "ok" else {}
    categories = []
    for i, label in enumerate(labels):
        if reference[i] is not None and reference[i] != label:
            categories.append(DISPUTED)
            continue
        accepted = _accepted(verdicts, i, view)
        if accepted is None:
            categories.append(NOT_COVERED)
        elif accepted == label:
            categories.append(AGREE)
        else:
            categories.append(FALSE_REJECT if label else FALSE_ACCEPT)
    return categories


def _accepted(verdicts: dict, i: int, view: str) -> bool | None:
    if not verdicts:
        return None
    if view == "policy":
        given, declared = verdicts["given"][i], verdicts["declared"][i]
        if given is None or declared is None:
            return given or declared or None
        return given or declared
    values = verdicts.get(view)
    return None if values is None else values[i]


def order_policy_rejections(record: dict, target: str) -> int:
    """Valid instances rejected as given but accepted in the schema's declared order."""
    verdicts = record["results"].get(target, {}).get("verdicts")
    if not verdicts:
        return 0
    return sum(
        1
        for i, label in enumerate(record["labels"])
        if label and verdicts["given"][i] is False and verdicts["declared"][i] is True
    )
