"""Wall time of ``grammask --help`` (the target: under 0.5 s), beside a bare interpreter start.

Each command runs as a fresh subprocess; the commands take turns within every repetition (so a
noisy machine slows them alike) and the median per command is reported, with the ratio to the
bare ``python -c pass`` start measured in the same run. The package is this checkout (PYTHONPATH).

- ``python -m grammask --help``: the command line as ``python -m``;
- ``grammask --help``: the installed console script, run by this interpreter directly (a version
  manager's shim in front of it, e.g. pyenv's, adds its own start-up, which is not grammask's);
- ``import grammask``: the library's import alone;
- ``grammask generate --help``: a subcommand's help.

    python benchmarks/cli_startup.py [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5


def commands() -> dict[str, list[str]]:
    py = sys.executable
    found = {
        "python -c pass (baseline)": [py, "-c", "pass"],
        "import grammask": [py, "-c", "import grammask"],
        "python -m grammask --help": [py, "-m", "grammask", "--help"],
        "python -m grammask generate --help": [py, "-m", "grammask", "generate", "--help"],
    }
    script = Path(sys.executable).parent / "grammask"
    if not script.is_file():
        located = shutil.which("grammask")
        script = Path(located) if located else script
    if script.is_file() and script.read_bytes().startswith(b"#!") and b"python" in script.read_bytes()[:200]:
        found["grammask --help (console script)"] = [py, str(script), "--help"]
    return found


def timed_s(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="runs of each command (default 15)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = commands()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, argv in runs.items():  # warm the file cache once
        timed_s(argv, env)
    for _ in range(args.reps):
        for name, argv in runs.items():
            times[name].append(timed_s(argv, env))
    base = statistics.median(times["python -c pass (baseline)"])
    print(f"{'command':<40} {'median s':>9} {'min s':>7} {'x bare python':>14}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<40} {median:9.3f} {min(values):7.3f} {median / base:14.2f}")
    help_median = statistics.median(times["python -m grammask --help"])
    verdict = "under" if help_median < TARGET_S else "OVER"
    print(f"\ngrammask --help: median {help_median:.3f} s, {verdict} the {TARGET_S} s target "
          f"({args.reps} runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
