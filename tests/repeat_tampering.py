"""Grade tampering cases again and again, several classes at once, and say whether every run
scored and flagged them as tests/test_tampering.py requires: how a flaky verdict is looked for.

    python tests/repeat_tampering.py 01_collectives tamper_inside_ranks untraced_side_channels \
        --runs 10 --streams 2

Each stream grades the named cases of tests/tampering/<assignment>.py as one class in a course
folder of its own (tests/background.py), `--runs` times with `--force`, with the suite's grading
environment; the streams run side by side, so the machine is as loaded as under the suite's two
background jobs. Prints one line per run and exits 1 if any run missed a zero or a flag.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from background import BUSY_MACHINE, ROOT, STALL_SECONDS, grade_command, write_class
from mutation_run import load_table
from test_course import with_cells_replaced


def verdicts(line: str, case: dict) -> list[str]:
    """What a progress line gets wrong for `case`: a cell in `zero` not lost, one in `full` lost,
    or no flag."""
    wrong = [f"{g}_tests kept points" for g in case["zero"] if f"{g}_tests 0/" not in line]
    wrong += [f"{g}_tests lost points" for g in case["full"] if f"{g}_tests " in line]
    if case.get("flagged", True) and "FLAGGED" not in line:
        wrong.append("not flagged")
    return wrong


def stream(base: Path, assignment: str, names: list[str], runs: int, label: str) -> int:
    from nanoparallel.runtime.cluster import STALL_ENV
    cases = load_table("tampering", assignment, "TAMPERING")
    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    autograder = write_class(base / label, assignment,
                             {name: with_cells_replaced(solution, cases[name]["cells"]) for name in names})
    env = dict(os.environ, **BUSY_MACHINE, **{STALL_ENV: STALL_SECONDS})
    failed = 0
    for run in range(1, runs + 1):
        done = subprocess.run(grade_command(autograder, assignment, "--force"), env=env, capture_output=True, text=True)
        lines = {name: next((ln for ln in done.stdout.splitlines() if ln.startswith("[") and f" {name} " in ln), "")
                 for name in names}
        wrong = {name: verdicts(lines[name], cases[name]) for name in names}
        wrong = {name: why for name, why in wrong.items() if why}
        failed += bool(wrong)
        print(f"{label} run {run}: {'ok' if not wrong else wrong}", flush=True)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment")
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--streams", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="repeat-tampering-") as base, ThreadPoolExecutor(args.streams) as pool:
        failed = sum(pool.map(lambda k: stream(Path(base), args.assignment, args.cases, args.runs, f"stream{k}"),
                              range(args.streams)))
    print(f"{args.runs * args.streams - failed} of {args.runs * args.streams} runs scored and flagged as required")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
