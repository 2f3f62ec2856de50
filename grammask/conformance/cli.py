"""``grammask conformance``: run schema corpora through backends and peers, write a report."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from grammask.cli_types import positive_float, positive_int
from grammask.conformance import PEER_MODULES
from grammask.errors import InvalidParameterError
from grammask.grammars.registry import backend_names

HELP = "run JSON Schema corpora through grammask backends and peer libraries; write results.json, report.md, plots"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="+", help="JSON Lines corpus files (test-suite groups, JSONSchemaBench schemas)")
    parser.add_argument("--backend", action="append", default=None, metavar="NAME",
                        help=f"grammask backend to run (repeatable): {', '.join(backend_names())} (default: auto)")
    parser.add_argument("--peer", action="append", default=[], metavar="NAME",
                        help=f"peer library to run beside grammask (repeatable): {', '.join(sorted(PEER_MODULES))}")
    parser.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="worker processes (default 1)")
    parser.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                        help="seconds per schema and target (default 60)")
    parser.add_argument("--peer-timeout", type=positive_float, default=None, metavar="SECONDS",
                        help="seconds per schema for peers (default: --timeout)")
    parser.add_argument("--any-order", action="store_true",
                        help="also compile each schema with property_order='any' (a third verdict view; slower)")
    parser.add_argument("--memory-mb", type=int, default=8192, metavar="MIB",
                        help="address-space limit per worker in MiB (0: none; default 8192)")
    parser.add_argument("--out", type=Path, default=Path("conformance-out"), metavar="DIR",
                        help="output folder (default: conformance-out)")
    parser.add_argument("--limit", type=positive_int, default=None, metavar="N",
                        help="at most N schemas per JSONSchemaBench / schema-only file (deterministic sample; "
                             "test-suite files run whole)")
    parser.add_argument("--suite-limit", type=positive_int, default=None, metavar="N",
                        help="at most N groups per test-suite file (default: all)")
    parser.add_argument("--sample-seed", type=int, default=0, metavar="N", help="seed of the --limit sample (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from grammask.conformance.runner import load_cases, resolve_targets

    backends = args.backend or ["auto"]
    targets, notes = resolve_targets(backends, args.peer)  # unknown names fail here, before any work
    for path in args.corpus:
        if not Path(path).is_file():
            raise InvalidParameterError("corpus", path, "a JSON Lines file (no such file)")
    cases = load_cases(args.corpus, args.limit, args.sample_seed, args.suite_limit)

    from grammask.conformance.report import headline, headline_markdown, write_report
    from grammask.conformance.runner import run_conformance

    if not any(case.instances for case in cases):
        notes.append("no labelled instances: compile outcomes only")
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
