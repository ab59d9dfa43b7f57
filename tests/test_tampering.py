"""The tampering corpus: wrong answers paired with a way around the checks score 0 where they
tampered, and are flagged.

Each file in tests/tampering/ holds submissions that pair wrong answers with a way around the
checks inside the kernel and its ranks (rebinding names, patching the engine, sys.modules and
builtins, IPython's transformers and exception handler, Cluster.run and the trace, a trace
function, changes inside the ranks, registries, the checks' instruments). They are graded by
`autograder/grade.py`, in its sandbox, in their notebook's class.

Marked `grader`: `make test` leaves the corpus out to stay within its 15 minutes, and
`make test-grader` runs it; CI (`.ci/run`) runs both. The corpus grows with every route
closed, a grading each (docs/testing.md, "Two tiers").
"""
from __future__ import annotations

import csv

import pytest

from background import ROOT
from mutation_run import load_table
from test_course import solution_notebook, with_cells_replaced

CASES = sorted(p.stem for p in (ROOT / "tests" / "tampering").glob("*.py"))


def load_tampering(assignment: str) -> dict:
    return load_table("tampering", assignment, "TAMPERING")


def submissions(assignment: str) -> dict:
    """The solution with each case's cells replaced, graded in `assignment`'s class."""
    solution = solution_notebook(assignment)
    return {name: with_cells_replaced(solution, case["cells"]) for name, case in load_tampering(assignment).items()}


@pytest.mark.notebooks
@pytest.mark.grader
@pytest.mark.parametrize("assignment", CASES)
def test_tampering_scores_zero_and_is_flagged(graded, assignment):
    done = graded(assignment)
    root = done.root
    cases = load_tampering(assignment)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for name, case in cases.items():
            sub = gb.find_submission(assignment, name)
            got = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades if g.max_score}
            for grade_id in case["zero"]:
                score, top = got[f"{grade_id}_tests"]
                assert score == 0, f"{name}: {grade_id}_tests scored {score}/{top} despite the tampering"
            for grade_id in case["full"]:
                score, top = got[f"{grade_id}_tests"]
                assert score == top, f"{name}: {grade_id}_tests, before the tampering, lost points ({score}/{top})"
    progress = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("[")}
    with open(root / "grades.csv", newline="") as f:
        flags = {row["student_id"]: row["integrity"] for row in csv.DictReader(f)}
    for name in (n for n, case in cases.items() if case.get("flagged", True)):
        assert "FLAGGED" in progress[name], f"{name} was not flagged in the progress line: {progress[name]}"
        assert flags[name].startswith("FLAGGED"), f"{name} was not flagged in grades.csv"
        html = (root / "feedback" / name / assignment / f"{assignment}.html").read_text()
        assert "IntegrityError" in html, f"{name}: the feedback does not say why the cells scored 0"
