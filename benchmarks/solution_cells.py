"""Run a solution notebook's cells in a fresh namespace, so a benchmark measures the course's own code.

    ns = run_cells("04_pipeline", ("setup", "executor"), {"__name__": "solution_04_pipeline"})
"""
from __future__ import annotations

import json
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def run_cells(assignment: str, grade_ids: tuple[str, ...], namespace: dict) -> dict:
    """Execute the cells named `grade_ids` of solutions/<assignment>, in notebook order, into
    `namespace`; IPython magics (lines starting with %) are skipped. Raises if a cell is missing."""
    path = SOLUTIONS / assignment / f"{assignment}.ipynb"
    found = set()
    for cell in json.loads(path.read_text())["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in grade_ids:
            source = "".join(line for line in cell["source"] if not line.startswith("%"))
            exec(compile(source, f"{path.name}:{grade_id}", "exec"), namespace)
            found.add(grade_id)
    missing = set(grade_ids) - found
    if missing:
        raise RuntimeError(f"{path} has no cell(s) {sorted(missing)}")
    return namespace
