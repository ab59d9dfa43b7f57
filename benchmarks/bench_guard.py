"""What the grader's guard costs: one solution notebook executed the way `make autograde` runs it,
with nbgrader's plain Execute and with GuardedExecute, interleaved, in one process; medians and
their ratio. Usage: python benchmarks/bench_guard.py [assignment] [repeats]"""
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))

from guarded_execute import GuardedExecute  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402


def run(kind, path: Path, scratch: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(path.parent)},
                 "nbgrader": {"student": "bench", "assignment": path.stem, "notebook": path.stem}}
    start = time.perf_counter()
    kind(timeout=120).preprocess(nb, resources)
    return time.perf_counter() - start


def main() -> None:
    assignment = sys.argv[1] if len(sys.argv) > 1 else "01_collectives"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "nanoparallel-bench-guard"
    scratch.mkdir(exist_ok=True)
    os.chdir(scratch)  # GuardedExecute writes its verdict under ./integrity
    times = {"Execute": [], "GuardedExecute": []}
    for _ in range(repeats):
        for name, kind in (("Execute", Execute), ("GuardedExecute", GuardedExecute)):
            times[name].append(run(kind, path, scratch))
    plain, guarded = statistics.median(times["Execute"]), statistics.median(times["GuardedExecute"])
    print(f"{assignment}, solution executed {repeats}x each, interleaved:")
    print(f"  nbgrader Execute:  median {plain:.1f} s  {[round(t, 1) for t in times['Execute']]}")
    print(f"  GuardedExecute:    median {guarded:.1f} s  {[round(t, 1) for t in times['GuardedExecute']]}")
    print(f"  guarded / plain:   {guarded / plain:.2f}x")


if __name__ == "__main__":
    main()
