"""Grading integrity: tampering submissions score 0 where they tampered and are flagged.

Each file in tests/tampering/ holds submissions that pair wrong answers with a way around the
checks (rebinding names, patching the engine, sys.modules and builtins, IPython's transformers
and exception handler, Cluster.run and the trace, a trace function, changes inside the ranks).
They are graded by `autograder/grade.py` like any class; solutions, blank notebooks and every
mutant must never be flagged (tests/test_course.py checks that on its own round trips).
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys

import nbformat
import pytest

from test_course import ROOT, STALL_ENV, STALL_SECONDS, cells_by_grade_id, new_course_folder

CASES = sorted(p.stem for p in (ROOT / "tests" / "tampering").glob("*.py"))


def load_tampering(assignment: str) -> dict:
    spec = importlib.util.spec_from_file_location(f"tampering_{assignment}",
                                                  ROOT / "tests" / "tampering" / f"{assignment}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TAMPERING


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", CASES)
def test_tampering_scores_zero_and_is_flagged(tmp_path, assignment):
    root = new_course_folder(tmp_path)
    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    cases = load_tampering(assignment)
    for name, case in cases.items():
        nb = nbformat.from_dict(json.loads(json.dumps(solution)))
        cells = cells_by_grade_id(nb)
        for grade_id, source in case["cells"].items():
            cells[grade_id].source = source.strip("\n")
        folder = root / "autograder" / "submitted" / name / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    env = dict(os.environ, **{STALL_ENV: STALL_SECONDS})
    done = subprocess.run([sys.executable, str(ROOT / "autograder" / "grade.py"), "--root",
                           str(root / "autograder"), "--assignment", assignment],
                          env=env, capture_output=True, text=True)
    print(done.stdout)
    assert done.returncode == 0, f"grading failed:\n{done.stdout}\n{done.stderr}"

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'autograder' / 'gradebook.db'}") as gb:
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
    with open(root / "autograder" / "grades.csv", newline="") as f:
        flags = {row["student_id"]: row["integrity"] for row in csv.DictReader(f)}
    for name in cases:
        assert "FLAGGED" in progress[name], f"{name} was not flagged in the progress line: {progress[name]}"
        assert flags[name].startswith("FLAGGED"), f"{name} was not flagged in grades.csv"
        html = (root / "autograder" / "feedback" / name / assignment / f"{assignment}.html").read_text()
        assert "IntegrityError" in html, f"{name}: the feedback does not say why the cells scored 0"
