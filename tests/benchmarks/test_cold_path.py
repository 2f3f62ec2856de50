"""``benchmarks/cold_path.py`` keeps working: its core function on two tiny schemas (``fsm``, the tiny
byte tokenizer), its selection rule, its pool (forked workers, a timeout) and its report."""

from __future__ import annotations

import importlib.util
import json
import pickle
import sys
import time
from pathlib import Path

import pytest

from grammask.conformance.corpus import Case, Instance

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "cold_path.py"

INTEGERS = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}
TWO_BOOLEANS = {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
# Labelled valid on purpose though it breaks maxItems: the benchmark must report it as rejected.
WRONG = [True, False, True]


@pytest.fixture(scope="module")
def cold_path():
    spec = importlib.util.spec_from_file_location("cold_path", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cold_path"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tasks(cold_path, tiny_info):
    cases = [
        Case("ints", "tiny", INTEGERS, [Instance("bad", {"a": "x"}, False), Instance("good", {"b": "xy", "a": 12}, True)]),
        Case("bools", "tiny", TWO_BOOLEANS, [Instance("wrong", WRONG, True)]),
    ]
    return cold_path.make_tasks(cases, ["fsm"], lambda text: list(text.encode()), tiny_info.eos_ids[0])


@pytest.fixture(scope="module")
def results(cold_path, tasks, tiny_info):
    return [{"engine": t["engine"], "dataset": t["dataset"], "id": t["id"], **cold_path.run_task(t, tiny_info)} for t in tasks]


def test_tasks_carry_the_first_valid_instance_in_declared_order(tasks):
    assert [t["id"] for t in tasks] == ["ints", "bools"]
    assert tasks[0]["texts"] == {"declared": '{"a":12,"b":"xy"}', "fsm": '{"a":12,"b":"xy"}'}
    assert tasks[0]["tokens"]["declared"] == list(b'{"a":12,"b":"xy"}')


def test_an_accepted_instance_gives_every_figure(results):
    ok = results[0]
    assert ok["outcome"] == "ok" and ok["backend"] == "fsm" and ok["order"] == "fsm"
    tokens = len('{"a":12,"b":"xy"}') + 1  # and EOS
    assert ok["tokens"] == ok["accepted"] == tokens
    assert len(ok["fills_us"]) == len(ok["warm_us"]) == len(ok["accepts_us"]) == tokens and min(ok["accepts_us"]) > 0
    assert ok["first_mask_ms"] >= ok["compile_ms"] > 0 and ok["first_mask_ms"] * 1e3 >= ok["fills_us"][0]
    assert ok["peak_mb"] >= 0 and ok["setup_s"] > 0 and ok["refused_by_mask"] == []
    json.dumps(ok)  # what --json writes


def test_a_wrong_instance_is_reported_as_rejected_where_it_breaks(results):
    rejected = results[1]
    assert rejected["outcome"] == "rejected"
    assert json.dumps(WRONG, separators=(",", ":"))[: rejected["accepted"]] == "[true,false"  # then "," is refused
    assert len(rejected["fills_us"]) == len(rejected["warm_us"]) == len(rejected["accepts_us"]) == rejected["accepted"] + 1


def test_summary_and_report_count_outcomes(cold_path, results):
    summary = cold_path.summarize(results)["fsm"]
    assert (summary["schemas"], summary["compiled"], summary["ok"]) == (2, 2, 1)
    assert len(summary["rejected"]) == 1 and summary["rejected"][0].startswith("bools: token 11 ")
    assert summary["fills"] == len(results[0]["fills_us"]) + len(results[1]["fills_us"])
    assert summary["accept_total_s"] * 1e6 == pytest.approx(sum(results[0]["accepts_us"]) + sum(results[1]["accepts_us"]))
    text = cold_path.report(cold_path.summarize(results), cold_path.common_subset(results))
    assert "fsm rejected: bools" in text
    assert "on the 1 schemas every engine accepted to EOS" in text and "cold accept_token p50 (µs)" in text
    row = next(line for line in text.splitlines() if line.startswith("valid instance rejected"))
    assert row.split() == ["valid", "instance", "rejected", "1"]


def test_selection_takes_only_schemas_with_a_valid_instance(cold_path, tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "instances").mkdir()
    lines = [{"id": f"s{i}", "schema": {"type": "integer"}} for i in range(6)]
    tests = [{"id": f"s{i}", "tests": [{"data": i, "valid": i % 2 == 0}]} for i in range(6)]
    for folder, rows in (("schemas", lines), ("instances", tests)):
        for name in ("A.dev.jsonl", "B.dev.jsonl"):
            (tmp_path / folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    chosen = cold_path.select_cases(tmp_path / "schemas", 2, ["B"], seed=3)
    assert [c.corpus for c in chosen] == ["B", "B"]
    assert {c.id for c in chosen} <= {"s0", "s2", "s4"}
    assert chosen == cold_path.select_cases(tmp_path / "schemas", 2, ["B"], seed=3)
    with pytest.raises(SystemExit, match="unknown dataset"):
        cold_path.select_cases(tmp_path / "schemas", 2, ["C"])


def test_pool_runs_each_task_in_a_new_process_and_times_out(cold_path, tasks, results, tiny_info, tmp_path, monkeypatch):
    info_path = tmp_path / "info.pickle"
    info_path.write_bytes(pickle.dumps(tiny_info))
    pooled = dict(cold_path.run_isolated(tasks, str(info_path), timeout=30, start_method="fork"))
    assert [pooled[i]["outcome"] for i in range(2)] == [r["outcome"] for r in results]
    assert pooled[1]["accepted"] == results[1]["accepted"]

    def stuck(engine, task, vocab_size, notify):
        notify("first_mask", {"first_mask_ms": 1.5})
        notify("fills", [2.0, 3.0])
        time.sleep(60)

    monkeypatch.setattr(cold_path, "timed_run", stuck)  # forked workers inherit it
    start = time.monotonic()
    (index, result), = cold_path.run_isolated(tasks[:1], str(info_path), timeout=0.5, start_method="fork")
    assert time.monotonic() - start < 20
    assert result["outcome"] == "timeout" and result["first_mask_ms"] == 1.5 and result["fills_us"] == [2.0, 3.0]
    assert "walking: 2 fills measured, then nothing for" in result["detail"]
    assert cold_path.summarize([{"engine": "fsm", "dataset": "tiny", "id": "ints", **result}])["fsm"]["timeouts"]


class _AllowsOnlyOne:
    """A matcher whose mask allows token 1 alone and which accepts whatever ``accepts`` says."""

    def __init__(self, accepts):
        self.accepts = accepts

    def fill_next_token_bitmask(self, bitmask, row=0):
        bitmask[row] = 0
        bitmask[row, 0] = 1 << 1

    def accept_token(self, token):
        return self.accepts(token)


def test_walk_counts_a_token_accepted_against_the_mask_but_not_a_rejected_one(cold_path):
    from grammask import allocate_token_bitmask

    bitmask = allocate_token_bitmask(1, 64)
    matcher = _AllowsOnlyOne(lambda token: True)
    matcher.fill_next_token_bitmask(bitmask)
    walk = cold_path.cold_walk(matcher, bitmask, [1, 2, 1], 1.0, lambda kind, payload: None)
    assert (walk["outcome"], walk["accepted"], walk["refused_by_mask"], len(walk["fills_us"])) == ("ok", 3, [1], 3)
    walk = cold_path.cold_walk(_AllowsOnlyOne(lambda token: token == 1), bitmask, [1, 2, 1], 1.0, lambda kind, payload: None)
    assert (walk["outcome"], walk["accepted"], walk["refused_by_mask"]) == ("rejected", 1, [])


def _pid_run(engine, task, vocab_size, notify):
    """A timed part that reports the worker it ran in (and hangs on the schema ``ints`` when told)."""
    import os

    if task["id"] == "ints" and os.environ.get("COLD_PATH_TEST_HANG"):
        time.sleep(60)
    return {"outcome": "ok", "pid": os.getpid()}


def test_the_server_view_runs_each_engines_schemas_in_turn_in_one_worker(cold_path, tasks, tiny_info, tmp_path, monkeypatch):
    info_path = tmp_path / "info.pickle"
    info_path.write_bytes(pickle.dumps(tiny_info))
    monkeypatch.setattr(cold_path, "timed_run", _pid_run)  # forked workers inherit it
    fresh = dict(cold_path.run_isolated(tasks, str(info_path), timeout=30, start_method="fork"))
    served = dict(cold_path.run_isolated(tasks, str(info_path), timeout=30, start_method="fork", server=True))
    assert fresh[0]["pid"] != fresh[1]["pid"] and "setup_s" in fresh[0] and "setup_s" in fresh[1]
    assert served[0]["pid"] == served[1]["pid"]
    assert served[0]["setup_s"] > 0 and "setup_s" not in served[1]  # set up once, before the first


def test_the_server_view_moves_the_schemas_left_to_a_new_worker_after_a_timeout(cold_path, tasks, tiny_info, tmp_path, monkeypatch):
    info_path = tmp_path / "info.pickle"
    info_path.write_bytes(pickle.dumps(tiny_info))
    monkeypatch.setattr(cold_path, "timed_run", _pid_run)
    monkeypatch.setenv("COLD_PATH_TEST_HANG", "1")
    start = time.monotonic()
    served = dict(cold_path.run_isolated(tasks, str(info_path), timeout=1.0, start_method="fork", server=True))
    assert time.monotonic() - start < 30
    assert served[0]["outcome"] == "timeout" and "before the first mask" in served[0]["detail"]
    assert served[1]["outcome"] == "ok" and served[1]["setup_s"] > 0  # a new worker, set up anew
