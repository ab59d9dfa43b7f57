"""A synthetic class graded with `grade.py --jobs J` for several J, one after the other in one run:
wall time, speed-up over J = 1, cost per submission, and whether every run's grades equal the
first's cell by cell. Not part of `make bench` (a full class takes hours on 2 cores):

    python benchmarks/grade_a_class.py [--students 24] [--jobs 1,2,3] [--assignments 00_welcome,...] [--no-sandbox]

Each student submits every assignment; the submissions cycle through the solution, the blank
release and the course's mutants (tests/mutants/), and student 1's 00_welcome deadlocks (a
mutant where every rank sends first). Figures: docs/grading.md, Grading a class.
"""
import argparse
import csv
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "autograder")]

from background import new_course_folder  # noqa: E402
from test_course import ASSIGNMENTS, load_mutants, solution_notebook, with_cells_replaced  # noqa: E402
from test_grading_class import state  # noqa: E402


def synthetic_class(root: Path, students: int, assignments: list[str]) -> int:
    count = 0
    for a in assignments:
        solution = solution_notebook(a)
        variants = [solution, nbformat.read(ROOT / "course" / a / f"{a}.ipynb", as_version=4)]
        variants += [with_cells_replaced(solution, cells) for name, cells in sorted(load_mutants(a).items())
                     if "deadlock" not in name]
        for i in range(students):
            nb = variants[i % len(variants)]
            if a == "00_welcome" and i == 0:
                nb = with_cells_replaced(solution, load_mutants(a)["days_no_latency_deadlock"])
            folder = root / "submitted" / f"student{i + 1:03d}" / a
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{a}.ipynb")
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=24)
    parser.add_argument("--jobs", default="1,2,3")
    parser.add_argument("--assignments", default=",".join(ASSIGNMENTS))
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without the sandbox (a machine where bubblewrap cannot start; said in the output)")
    args = parser.parse_args()
    assignments = args.assignments.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        template = new_course_folder(Path(scratch) / "template") / "autograder"
        n = synthetic_class(template, args.students, assignments)
        print(f"{args.students} students x {len(assignments)} notebooks = {n} submissions"
              f"{', no sandbox' if args.no_sandbox else ', each in its sandbox'}", flush=True)
        csv.field_size_limit(sys.maxsize)  # the rows named above are read whole
        results, reference = [], None
        for jobs in (int(j) for j in args.jobs.split(",")):
            run_root = Path(scratch) / f"jobs{jobs}"
            shutil.copytree(template.parent, run_root, symlinks=True)
            start = time.monotonic()
            done = subprocess.run([sys.executable, str(ROOT / "autograder" / "grade.py"), "--root",
                                   str(run_root / "autograder"), "--jobs", str(jobs)]
                                  + (["--no-sandbox"] if args.no_sandbox else []),
                                  capture_output=True, text=True)
            wall = time.monotonic() - start
            if done.returncode != 0:
                sys.exit(f"--jobs {jobs} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            with open(run_root / "autograder" / "grades.csv") as f:   # an oversized field is a finding
                for line in f:
                    if len(line) > 2000:
                        print(f"--jobs {jobs}: a grades.csv row of {len(line):,} characters: {line[:600]!r} ... {line[-300:]!r}", flush=True)
            got = state(run_root / "autograder")
            grades = {k: [[g["auto_score"] for g in nb["grades"]] for nb in v] for k, v in got["grades"].items()}
            same = reference is None or grades == reference
            reference = reference or grades
            slowest = [line for line in done.stdout.splitlines() if "slowest so far" in line][-1].strip()
            results.append((jobs, wall, same))
            # A class that scored nothing measured a broken set-up, not grading: say what it scored.
            scores = re.findall(r": ([\d.]+) / ([\d.]+) points \(", done.stdout)
            full = sum(got == total for got, total in scores)
            print(f"--jobs {jobs}: {wall:.0f} s, {wall / n:.1f} s per submission, grades equal the first run's: "
                  f"{same}, {full} of {n} at full marks; {slowest}", flush=True)
        base = results[0][1]
        for jobs, wall, _ in results:
            print(f"--jobs {jobs}: speed-up {base / wall:.2f}x over --jobs {results[0][0]}")


if __name__ == "__main__":
    main()
