"""The course as a whole: course/ is a fresh release of solutions/, and the autograder gives
0 to blank notebooks, full marks to solutions, and fewer points to plausible wrong answers."""
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
sys.path.insert(0, str(ROOT / "autograder"))
import grade  # noqa: E402


def load_mutants(assignment: str) -> dict:
    path = ROOT / "tests" / "mutants" / f"{assignment}.py"
    spec = importlib.util.spec_from_file_location(f"mutants_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MUTANTS


def cells_by_grade_id(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def comparable(nb) -> list:
    """What a student receives: cell types, sources and nbgrader metadata."""
    return [(c.cell_type, c.source, json.dumps(c.metadata.get("nbgrader", {}), sort_keys=True))
            for c in nb.cells]


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory):
    """A throwaway course folder: our nbgrader config, the real solutions, a scratch gradebook."""
    root = tmp_path_factory.mktemp("course")
    (root / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root / "autograder")
    (root / "solutions").symlink_to(ROOT / "solutions")
    (root / "course").mkdir()
    return root


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_course_is_a_fresh_release_of_solutions(course_copy, assignment):
    grade.nbgrader(str(course_copy / "autograder"), "generate_assignment", assignment, "--force")
    fresh = nbformat.read(course_copy / "course" / assignment / f"{assignment}.ipynb", as_version=4)
    committed = nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4)
    assert comparable(committed) == comparable(fresh), f"course/{assignment} is stale: run `make release`"
    text = (ROOT / "course" / assignment / f"{assignment}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_autograder_blank_zero_solution_full_mutants_lose(course_copy, assignment):
    root = course_copy / "autograder"
    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    submissions = {
        "blank": nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4),
        "solution": solution,
    }
    mutants = load_mutants(assignment)
    for name, replacements in mutants.items():
        nb = nbformat.from_dict(json.loads(json.dumps(solution)))
        cells = cells_by_grade_id(nb)
        for grade_id, source in replacements.items():
            cells[grade_id].source = source.strip("\n")
        submissions[name] = nb
    for student, nb in submissions.items():
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")

    assert grade.main(["--root", str(root), "--assignment", assignment]) == 0

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        def scores(student):
            sub = gb.find_submission(assignment, student)
            return {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades if g.max_score}

        blank, full = scores("blank"), scores("solution")
        assert blank and all(score == 0 for score, _ in blank.values()), f"blank notebook scored: {blank}"
        assert all(score == top for score, top in full.values()), f"solution lost points: {full}"
        for name, replacements in mutants.items():
            got = scores(name)
            for grade_id in replacements:
                score, top = got[f"{grade_id}_tests"]
                assert score < top, f"mutant {name!r}: {grade_id}_tests kept {score}/{top} points"
    with open(root / "grades.csv", newline="") as f:
        graded = {row["student_id"] for row in csv.DictReader(f)
                  if row["assignment"] == assignment and row["raw_score"] != ""}
    assert set(submissions) <= graded, f"grades.csv lacks {set(submissions) - graded} for {assignment}"
    assert (root / "feedback" / "solution" / assignment / f"{assignment}.html").exists()
