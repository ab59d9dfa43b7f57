"""What one submission costs `make autograde`: an `nbgrader autograde` process per submission
(how grade.py graded until it ran nbgrader in its own process) against grade.py's `Course`,
interleaved on the same submission, in one run; medians and their ratio.

    python benchmarks/bench_grading.py [assignment] [repeats]     (default 00_welcome, 3)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))
sys.path.insert(0, str(ROOT / "tests"))

from background import new_course_folder  # noqa: E402
from grade import Course  # noqa: E402


def as_a_process(root: Path, assignment: str) -> None:
    nbgrader = os.path.join(os.path.dirname(sys.executable), "nbgrader")
    subprocess.run([nbgrader, "autograde", assignment, "--student", "solution", "--create", "--force",
                    "--log-level=WARN"], cwd=root, check=True, capture_output=True)


def main() -> None:
    assignment = sys.argv[1] if len(sys.argv) > 1 else "00_welcome"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as scratch:
        root = new_course_folder(Path(scratch)) / "autograder"
        folder = root / "submitted" / "solution" / assignment
        folder.mkdir(parents=True)
        nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
        course = Course(str(root))
        course.release(assignment, into=scratch + "/release")
        ways = {"nbgrader process": lambda: as_a_process(root, assignment),
                "in grade.py": lambda: course.autograde("solution", assignment)}
        times = {name: [] for name in ways}
        for i in range(repeats):
            for name in (list(ways) if i % 2 == 0 else list(reversed(ways))):
                start = time.perf_counter()
                ways[name]()
                times[name].append(time.perf_counter() - start)
    process, inside = (statistics.median(times[name]) for name in ways)
    print(f"{assignment}'s solution autograded {repeats}x each way, interleaved:")
    for name, seconds in times.items():
        print(f"  {name:17s} median {statistics.median(seconds):5.1f} s   ({', '.join(f'{s:.1f}' for s in seconds)})")
    print(f"  saved per submission: {process - inside:.1f} s ({process / inside:.2f}x)")


if __name__ == "__main__":
    main()
