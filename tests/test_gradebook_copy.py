"""One submission's grades copied between nbgrader gradebooks (autograder/gradebook_copy.py):
whole, or not at all."""
from __future__ import annotations

import os
import sys
import warnings

import pytest

from background import ROOT

sys.path.insert(0, str(ROOT / "autograder"))
from gradebook_copy import read_submission, submissions_in, write_submission  # noqa: E402


@pytest.fixture(autouse=True)
def alembic_on_path(monkeypatch):
    """nbgrader runs `alembic` from PATH to create a gradebook: this environment's (as grade.py does)."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def test_the_grader_stamps_a_new_gradebook_as_nbgrader_would():
    """grade.py reads alembic's head revision in its own process instead of nbgrader's `alembic
    heads` subprocess (autograder/grade.py: alembic_head): the same revision."""
    import subprocess
    from nbgrader.dbutil import _temp_alembic_ini
    from grade import alembic_head
    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:  # what nbgrader.api.get_alembic_version runs
        printed = subprocess.check_output(["alembic", "-c", ini, "heads"], text=True)
    assert alembic_head() == printed.split("\n")[0].split(" ")[0] != ""


def gradebook(path):
    from nbgrader.api import Gradebook
    gb = Gradebook(f"sqlite:///{path}")
    gb.add_assignment("a1")
    gb.add_notebook("nb", "a1")
    for cell in ("c1", "c2"):
        gb.add_grade_cell(cell, "nb", "a1", max_score=2, cell_type="code")
    return gb


def graded(gb, student, scores):
    gb.add_student(student)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbgrader's add_submission warns on every call (gradebook_copy.py)
        gb.add_submission("a1", student)
    for cell, score in scores.items():
        gb.find_grade(cell, "nb", "a1", student).auto_score = score
    gb.db.commit()


def scores(gb, student):
    return {g.name: g.score for g in gb.find_submission("a1", student).notebooks[0].grades}


def test_a_submission_is_copied_whole_and_replaces_what_was_there(tmp_path):
    with gradebook(tmp_path / "worker.db") as worker, gradebook(tmp_path / "course.db") as course:
        graded(worker, "ada", {"c1": 2, "c2": 0})
        graded(course, "ada", {"c1": 0, "c2": 0})
        graded(course, "bo", {"c1": 1, "c2": 1})
        write_submission(course, read_submission(worker, "a1", "ada"))
        assert scores(course, "ada") == {"c1": 2, "c2": 0}
        assert scores(course, "bo") == {"c1": 1, "c2": 1}
        assert submissions_in(course) == [("ada", "a1"), ("bo", "a1")]


def test_a_copy_that_fails_half_way_leaves_the_gradebook_as_it_was(tmp_path):
    with gradebook(tmp_path / "worker.db") as worker, gradebook(tmp_path / "course.db") as course:
        graded(worker, "ada", {"c1": 2, "c2": 2})
        graded(course, "ada", {"c1": 1, "c2": 0})
        data = read_submission(worker, "a1", "ada")
        data["notebooks"][0]["grades"][1]["name"] = "no such cell"  # fails after c1 was written
        with pytest.raises(Exception):
            write_submission(course, data)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{tmp_path / 'course.db'}") as reopened:
        assert scores(reopened, "ada") == {"c1": 1, "c2": 0}
