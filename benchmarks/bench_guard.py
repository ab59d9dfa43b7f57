"""What the grader's witness and its sandbox cost: one solution notebook executed the way
`make autograde` runs it, with nbgrader's plain Execute, with GuardedExecute without a sandbox
(`--no-sandbox`) and with GuardedExecute in its sandbox (the default), interleaved, in one
process; medians and ratios. Usage: python benchmarks/bench_guard.py [assignment] [repeats]"""
import functools
import os
import statistics
import sys
import time
from pathlib import Path

import nbformat
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "autograder"))

from guarded_execute import GuardedExecute  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402


def run(kind, path: Path, config: Config) -> float:
    nb = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(path.parent)},
                 "nbgrader": {"student": "bench", "assignment": path.stem, "notebook": path.stem}}
    start = time.perf_counter()
    kind(timeout=120, config=config).preprocess(nb, resources)
    return time.perf_counter() - start


def main() -> None:
    assignment = sys.argv[1] if len(sys.argv) > 1 else "01_collectives"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "nanoparallel-bench-guard"
    scratch.mkdir(exist_ok=True)
    config = Config()
    config.CourseDirectory.root = str(scratch)  # verdicts go under its integrity/
    config.CourseDirectory.source_directory = str(ROOT / "solutions")
    ways = {"nbgrader Execute": Execute,
            "witness, no sandbox": functools.partial(GuardedExecute, sandbox=False),
            "witness in sandbox": GuardedExecute}
    times = {name: [] for name in ways}
    for i in range(repeats):
        for name in (list(ways) if i % 2 == 0 else list(reversed(ways))):
            times[name].append(run(ways[name], path, config))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{assignment}, solution executed {repeats}x each way, interleaved:")
    for name, t in times.items():
        print(f"  {name:20s} median {medians[name]:5.1f} s  {[round(x, 1) for x in t]}")
    plain, witness, sandboxed = medians.values()
    print(f"  witness / plain: {witness / plain:.2f}x; sandbox: {sandboxed - witness:+.1f} s a notebook "
          f"({sandboxed / witness:.2f}x)")


if __name__ == "__main__":
    main()
