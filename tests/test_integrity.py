"""Grading integrity: tampering submissions score 0 where they tampered and are flagged.

Each file in tests/tampering/ holds submissions that pair wrong answers with a way around the
checks (rebinding names, patching the engine, sys.modules and builtins, IPython's transformers
and exception handler, Cluster.run and the trace, a trace function, changes inside the ranks).
They are graded by `autograder/grade.py` like any class; solutions, blank notebooks and every
mutant must never be flagged (tests/test_course.py checks that on its own round trips).
"""
from __future__ import annotations

import csv

import nbformat
import pytest

from background import ROOT
from test_course import load_table, with_cells_replaced

CASES = sorted(p.stem for p in (ROOT / "tests" / "tampering").glob("*.py"))


def load_tampering(assignment: str) -> dict:
    return load_table("tampering", assignment, "TAMPERING")


def submissions(assignment: str) -> dict:
    """The class graded for `assignment`: the solution with each case's cells replaced."""
    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    return {name: with_cells_replaced(solution, case["cells"]) for name, case in load_tampering(assignment).items()}


@pytest.mark.notebooks
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
    for name in cases:
        assert "FLAGGED" in progress[name], f"{name} was not flagged in the progress line: {progress[name]}"
        assert flags[name].startswith("FLAGGED"), f"{name} was not flagged in grades.csv"
        html = (root / "feedback" / name / assignment / f"{assignment}.html").read_text()
        assert "IntegrityError" in html, f"{name}: the feedback does not say why the cells scored 0"
