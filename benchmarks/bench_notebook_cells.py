"""Where a notebook's time goes: each solution notebook executed once (nbclient, as nbval and the
autograder run it), its total with the kernel's start, the sum of its cells and its slowest cells.

    python benchmarks/bench_notebook_cells.py [NN_topic ...]     (default: every notebook)
"""
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SHOWN = 4  # slowest cells printed per notebook
sys.path.insert(0, str(ROOT / "autograder"))
from guarded_execute import SlicedNotebookClient as Client  # noqa: E402  (a lost wake-up would add 600 s to a cell)


def seconds(cell) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    return (datetime.fromisoformat(end.replace("Z", "+00:00"))
            - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def profile(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    Client(nb, timeout=600, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    total = time.perf_counter() - start
    cells = [(seconds(c), i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    print(f"{path.stem}: {total:.1f} s with the kernel's start, {sum(s for s, _, _ in cells):.1f} s in "
          f"{len(cells)} code cells; slowest:")
    for s, i, cell in sorted(cells, key=lambda x: -x[0])[:SHOWN]:
        label = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.source.splitlines()[0][:50]
        print(f"  {s:5.2f} s  cell {i:2d}  {label}")


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.name[:2].isdigit())
    for name in names:
        profile(ROOT / "solutions" / name / f"{name}.ipynb")
