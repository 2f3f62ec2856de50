"""``grammask conformance``: run schema corpora through backends and peers, write a report."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import signal
import sys
from pathlib import Path

from grammask.errors import InvalidParameterError

HELP = "run JSON Schema corpora through grammask backends and peer libraries; write results.json, report.md, plots"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="+", help="JSON Lines corpus files (test-suite groups, JSONSchemaBench schemas)")
    parser.add_argument("--backend", action="append", default=None,
                        help="grammask backend to run (repeatable; 'auto', 'xgrammar', 'fsm'; default: auto)")
    parser.add_argument("--peer", action="append", default=[],
                        help="peer library to run beside grammask (repeatable): xgrammar, llguidance, outlines-core")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per schema and target (default 60)")
    parser.add_argument("--peer-timeout", type=float, default=None, help="seconds per schema for peers (default: --timeout)")
    parser.add_argument("--any-order", action="store_true",
                        help="also compile each schema with property_order='any' (a third verdict view; slower)")
    parser.add_argument("--memory-mb", type=int, default=8192, help="address-space limit per worker in MiB (0: none)")
    parser.add_argument("--out", type=Path, default=Path("conformance-out"), help="output folder")
    parser.add_argument("--limit", type=int, default=None, help="at most N schemas per JSONSchemaBench / schema-only file (deterministic sample; test-suite files run whole)")
    parser.add_argument("--suite-limit", type=int, default=None, help="at most N groups per test-suite file (default: all)")
    parser.add_argument("--sample-seed", type=int, default=0, help="seed of the --limit sample")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from grammask.conformance.report import headline, headline_markdown, write_report
    from grammask.conformance.runner import load_cases, resolve_targets, run_conformance
    from grammask.grammars.registry import backend_class

    backends = args.backend or ["auto"]
    for name in backends:
        if name != "auto":
            backend_class(name)
    if args.jobs < 1:
        raise InvalidParameterError("--jobs", args.jobs, "at least 1")
    cases = load_cases(args.corpus, args.limit, args.sample_seed, args.suite_limit)
    targets, notes = resolve_targets(backends, args.peer)
    if not any(case.instances for case in cases):
        notes.append("no labelled instances: compile outcomes only")
    if importlib.util.find_spec("grammask.generate") is None and any(not c.instances for c in cases):
        notes.append("schema-only cases: generation is not run (grammask.generate is not in this build); compile outcomes only")
    for note in notes:
        print(f"grammask conformance: {note}", file=sys.stderr)
    # On SIGTERM unwind like Ctrl-C, so the pool's cleanup stops the worker processes too.
    signal.signal(signal.SIGTERM, _interrupt)
    results = run_conformance(
        cases, targets, jobs=args.jobs, timeout=args.timeout, peer_timeout=args.peer_timeout, any_order=args.any_order,
        memory_mb=args.memory_mb or None, progress=not args.no_progress,
    )
    results["notes"] = notes
    command = "grammask conformance " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else ""
    written = write_report(results, args.out, command)
    print(headline_markdown(headline(results)))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
