"""Summaries of a conformance run: headline per target and corpus family, per-keyword table, worst
cases, and ``report.md`` / ``results.json`` / PNG plots in an output folder."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from grammask.conformance.runner import (
    AGREE,
    DISPUTED,
    FALSE_ACCEPT,
    FALSE_REJECT,
    NOT_COVERED,
    TEST_SUITE,
    classify,
    order_policy_rejections,
)
from grammask.conformance.targets import REFERENCE

COUNTED = (AGREE, FALSE_REJECT, FALSE_ACCEPT, NOT_COVERED)
FAILURES = ("unsupported", "invalid", "limit", "error", "timeout", "crash", "oom")


def family(record: dict) -> str:
    """The corpus family a case belongs to in headline tables."""
    return TEST_SUITE if record["corpus"] == TEST_SUITE else "JSONSchemaBench"


def headline(results: dict) -> list[dict]:
    """One row per (family, target): schema outcomes and instance categories (policy view)."""
    rows = []
    families = sorted({family(r) for r in results["cases"]}, key=lambda f: f != TEST_SUITE)
    for fam in families:
        records = [r for r in results["cases"] if family(r) == fam]
        for target in results["targets"]:
            rows.append(_row(fam, target, records))
    return rows


def _row(fam: str, target: str, records: list[dict]) -> dict:
    outcomes = Counter(r["results"].get(target, {}).get("outcome", "missing") for r in records)
    policy, given, any_view = Counter(), Counter(), Counter()
    exact, order = Counter(), 0
    exact_schemas = exact_false_accepts = 0
    for record in records:
        cats = classify(record, target, "policy")
        policy.update(cats)
        given.update(classify(record, target, "given"))
        any_view.update(classify(record, target, "any"))
        order += order_policy_rejections(record, target)
        result = record["results"].get(target, {})
        if enforces_all(target, result):
            exact_false_accepts += cats.count(FALSE_ACCEPT)
            if _narrowed_only_in_depth(result):
                exact_schemas += 1
                exact.update(cats)
    counted = sum(policy[c] for c in COUNTED)
    return {
        "family": fam,
        "target": target,
        "schemas": len(records),
        "compiled": outcomes["ok"],
        **{f"schemas_{o}": outcomes[o] for o in FAILURES},
        "instances": counted,
        "disputed": policy[DISPUTED],
        "agree": policy[AGREE],
        "agree_given": given[AGREE],
        "agree_any": any_view[AGREE] if _has_any_view(records, target) else None,
        "false_accept": policy[FALSE_ACCEPT],
        "false_reject": policy[FALSE_REJECT],
        "not_covered": policy[NOT_COVERED],
        "order_policy": order,
        "exact_schemas": exact_schemas,
        "exact_instances": sum(exact[c] for c in COUNTED),
        "exact_agree": exact[AGREE],
        "false_accept_exact": exact_false_accepts,
    }


def enforces_all(target: str, result: dict) -> bool:
    """A grammask grammar that compiled and lists nothing as unenforced: it promises no false
    accepts. (With nothing narrowed either, it promises no false rejects: its verdicts are exact.)"""
    return target.startswith("grammask:") and result.get("outcome") == "ok" and not result.get("unenforced")


def _narrowed_only_in_depth(result: dict) -> bool:
    """Nothing narrowed but the depth of nesting (``max_depth``); an instance nested deeper would
    still count against the grammar."""
    if not result.get("narrowed"):
        return True
    return set(result.get("narrowed_keywords", ["?"])) <= {"max_depth"}


def _has_any_view(records: list[dict], target: str) -> bool:
    return any(
        v is not None
        for r in records
        for v in r["results"].get(target, {}).get("verdicts", {}).get("any") or []
    )


def _pct(part: int | None, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole and part is not None else "–"


def headline_markdown(rows: list[dict]) -> str:
    lines = [
        "| corpus | target | schemas compiled | instances | agree (policy view) | agree as given | agree any-order "
        "| false accepts | false rejects | order-policy rejections | not covered | crash / timeout / oom "
        "| exact grammars (nothing unenforced, narrowed at most in depth): schemas / agree | false accepts, nothing unenforced |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        n = r["instances"]
        lines.append(
            f"| {r['family']} | {r['target']} | {r['compiled']}/{r['schemas']} | {n} | "
            f"{r['agree']} ({_pct(r['agree'], n)}) | {_pct(r['agree_given'], n)} | {_pct(r['agree_any'], n)} | "
            f"{r['false_accept']} | {r['false_reject']} | {r['order_policy']} | {r['not_covered']} | "
            f"{r['schemas_crash']} / {r['schemas_timeout']} / {r['schemas_oom']} | "
            + (
                f"{r['exact_schemas']} / {r['exact_agree']} of {r['exact_instances']} ({_pct(r['exact_agree'], r['exact_instances'])}) | "
                f"{r['false_accept_exact']} |"
                if r["target"].startswith("grammask:")
                else "– | – |"
            )
        )
    return "\n".join(lines)


def keyword_table(results: dict, top: int = 40) -> tuple[list[str], dict[str, dict[str, tuple[int, int, int]]]]:
    """Per keyword (most frequent first): per target (schemas compiled, instances agreeing, instances counted)."""
    schemas_with = Counter(k for r in results["cases"] for k in r["keywords"])
    chosen = [k for k, _ in schemas_with.most_common(top)]
    table: dict[str, dict[str, list[int]]] = {k: defaultdict(lambda: [0, 0, 0]) for k in chosen}
    for record in results["cases"]:
        present = [k for k in record["keywords"] if k in table]
        if not present:
            continue
        for target in results["targets"]:
            cats = classify(record, target)
            compiled = record["results"].get(target, {}).get("outcome") == "ok"
            agree = cats.count(AGREE)
            counted = len(cats) - cats.count(DISPUTED)
            for k in present:
                cell = table[k][target]
                cell[0] += compiled
                cell[1] += agree
                cell[2] += counted
    return chosen, {k: {t: tuple(v) for t, v in cells.items()} for k, cells in table.items()}


def keyword_markdown(results: dict, top: int = 40) -> str:
    chosen, table = keyword_table(results, top)
    schemas_with = Counter(k for r in results["cases"] for k in r["keywords"])
    targets = results["targets"]
    head = "| keyword | schemas | " + " | ".join(f"{t} compiled / agree" for t in targets) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(targets)]
    for k in chosen:
        cells = []
        for t in targets:
            compiled, agree, counted = table[k].get(t, (0, 0, 0))
            cells.append(f"{_pct(compiled, schemas_with[k])} / {_pct(agree, counted)}")
        lines.append(f"| `{k}` | {schemas_with[k]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def worst_cases(results: dict, limit: int = 25) -> list[str]:
    """One line per worst case: false accepts of exact grammars first, then crashes / hangs, then
    false rejects not explained by order, then other false accepts."""
    sections: dict[int, list[str]] = defaultdict(list)
    for record in results["cases"]:
        ref = record["results"].get(REFERENCE, {})
        reasons = ref.get("reasons") or [""] * len(record["labels"])
        for target in results["targets"]:
            result = record["results"].get(target, {})
            where = f"`{record['id']}` [{target}]"
            if result.get("outcome") in ("crash", "timeout", "oom", "error"):
                sections[1].append(f"{where}: {result['outcome']} — {result.get('detail', '')[:160]}")
                continue
            exact = enforces_all(target, result)
            verdicts = result.get("verdicts", {})
            for i, cat in enumerate(classify(record, target)):
                desc = record["descriptions"][i][:60]
                if cat == FALSE_ACCEPT:
                    why = f"{where}: accepts invalid #{i} ({desc!r}) — jsonschema: {reasons[i][:120]}"
                    if not exact:
                        why += f"; unenforced: {', '.join(result.get('unenforced_keywords', [])) or 'nothing listed'}"
                    sections[0 if exact else 3].append(why)
                elif cat == FALSE_REJECT and verdicts.get("any", [None] * (i + 1))[i] is not True:
                    stop = (result.get("stops") or [""] * (i + 1))[i]
                    sections[2].append(f"{where}: rejects valid #{i} ({desc!r}) at {stop[:120]}")
    titles = {
        0: "False accepts of grammars that list nothing as unenforced (goal: none)",
        1: "Crashes, hangs, out-of-memory and errors",
        2: "False rejects (also rejected with any property order)",
        3: "False accepts with unenforced keywords listed",
    }
    lines = []
    for key in sorted(titles):
        found = sections.get(key, [])
        lines.append(f"\n### {titles[key]} ({len(found)})\n")
        lines.extend(f"- {line}" for line in found[:limit])
        if len(found) > limit:
            lines.append(f"- … and {len(found) - limit} more (see results.json)")
    return lines


def label_noise_markdown(results: dict) -> str:
    """How often the ``jsonschema`` reference disagrees with the labels, per corpus family."""
    lines = ["| corpus | instances | jsonschema disagrees with label | reference failed |", "|---|---:|---:|---:|"]
    by_family: dict[str, Counter] = defaultdict(Counter)
    for record in results["cases"]:
        verdicts = record["results"].get(REFERENCE, {}).get("verdicts", {}).get("given") or [None] * len(record["labels"])
        c = by_family[family(record)]
        for label, verdict in zip(record["labels"], verdicts):
            c["n"] += 1
            c["disputed"] += verdict is not None and verdict != label
            c["failed"] += verdict is None
    for fam, c in by_family.items():
        lines.append(f"| {fam} | {c['n']} | {c['disputed']} | {c['failed']} |")
    return "\n".join(lines)


def compile_outcomes_markdown(results: dict) -> str:
    targets = [REFERENCE, *results["targets"]]
    lines = ["| target | " + " | ".join(("ok", *FAILURES)) + " | median compile s | p95 compile s |",
             "|---|" + "---:|" * (len(FAILURES) + 3)]
    for t in targets:
        outcomes = Counter(r["results"].get(t, {}).get("outcome", "missing") for r in results["cases"])
        times = sorted(r["results"][t]["compile_seconds"] for r in results["cases"]
                       if r["results"].get(t, {}).get("outcome") == "ok")
        med = f"{times[len(times) // 2]:.3f}" if times else "–"
        p95 = f"{times[int(len(times) * 0.95)]:.3f}" if times else "–"
        lines.append(f"| {t} | {outcomes['ok']} | " + " | ".join(str(outcomes[o]) for o in FAILURES) + f" | {med} | {p95} |")
    return "\n".join(lines)


def unsupported_keywords(results: dict, top: int = 15) -> str:
    lines = []
    for t in results["targets"]:
        c = Counter(_refusal(r["results"][t]) for r in results["cases"]
                    if r["results"].get(t, {}).get("outcome") == "unsupported")
        if c:
            lines.append(f"- {t}: " + ", ".join(f"`{k}` {n}" for k, n in c.most_common(top)))
    return "\n".join(lines) or "- none"


def _refusal(result: dict) -> str:
    """The keyword a compile refused, or the start of the message when the library names none."""
    if result.get("keyword") not in (None, "", "schema"):  # "schema": the library named no keyword
        return result["keyword"]
    text = result.get("detail", "?")
    text = text.split("': ", 1)[1] if "': " in text else text.split(": ", 1)[-1]
    text = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", text.strip())  # xgrammar's "[time] file.cc:line: "
    return text.removeprefix("llguidance refused the grammar: ")[:60]


def write_report(results: dict, out: Path, command: str = "") -> list[Path]:
    """Write ``results.json``, ``report.md`` and (when matplotlib is installed) PNG plots into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "report.md"]
    (out / "results.json").write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
    plots = _plots(results, out)
    written.extend(plots)
    parts = [
        "# Conformance report\n",
        f"Command: `{command}`\n" if command else "",
        *(f"> {note}\n" for note in results.get("notes", [])),
        "Each instance is serialised as compact JSON, tokenized with Llama-3.2 and forced through a fresh matcher, "
        "then EOS. *Policy view*: accepted as given or reordered into the schema's declared property order "
        "(a grammar that fixes declared order rejecting another order is its documented policy). "
        "Instances where Python `jsonschema` disagrees with the label are left out of the counts "
        "(\"disputed\", see label noise).\n",
        "## Headline\n",
        headline_markdown(headline(results)),
        "\n## Compile outcomes (all schemas)\n",
        compile_outcomes_markdown(results),
        "\nUnsupported, by keyword:\n",
        unsupported_keywords(results),
        "\n## Label noise (jsonschema vs labels)\n",
        label_noise_markdown(results),
        "\n## Per keyword (schemas containing the keyword anywhere; compiled % of those schemas / agreeing % of their instances)\n",
        keyword_markdown(results),
        "\n## Worst cases\n",
        *worst_cases(results),
    ]
    if plots:
        parts += ["\n## Plots\n", *(f"![{p.stem}]({p.name})\n" for p in plots)]
    (out / "report.md").write_text("\n".join(parts) + "\n", encoding="utf-8")
    return written


def _plots(results: dict, out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        results.setdefault("notes", []).append("plots skipped: matplotlib is not installed")
        return []
    targets = results["targets"]
    chosen, table = keyword_table(results, top=25)
    paths = []
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(chosen) * max(1, len(targets)) / 2 + 2))
    height = 0.8 / max(1, len(targets))
    for j, t in enumerate(targets):
        values = [100 * table[k].get(t, (0, 0, 0))[1] / max(1, table[k].get(t, (0, 0, 1))[2]) for k in chosen]
        ax.barh([i + j * height for i in range(len(chosen))], values, height=height, label=t)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(chosen))], chosen, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("instances agreeing with the label (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "agreement_per_keyword.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for t in targets:
        times = sorted(r["results"][t]["compile_seconds"] for r in results["cases"]
                       if r["results"].get(t, {}).get("outcome") == "ok" and r["results"][t].get("compile_seconds"))
        if times:
            ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=t)
    ax.set_xscale("log")
    ax.set_xlabel("compile seconds (compiled schemas)")
    ax.set_ylabel("fraction of compiled schemas")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "compile_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
