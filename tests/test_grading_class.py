"""Grading a whole class (autograder/grade.py): side by side, resumable, in shards, with bad input
said clearly. On a course of one tiny assignment, so that each grading costs a kernel's start
and little more: what is tested is the grading run, not the notebooks (tests/test_course.py
grades those).

Each test compares with a serial run (`--jobs 1`) of the same class: grades cell by cell,
comments, flags and grades.csv."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
import uuid

import nbformat
import pytest

from background import ROOT, new_course_folder

sys.path.insert(0, str(ROOT / "autograder"))
from shards import run_lock  # noqa: E402
from gradebook_copy import read_submission, submissions_in  # noqa: E402

pytestmark = [pytest.mark.notebooks, pytest.mark.grader]  # make test-grader (docs/testing.md, "Two tiers")

ASSIGNMENT = "tiny"
CHECKS = "assert double(2) == 4\n### BEGIN HIDDEN TESTS\nassert double(-3) == -6\n### END HIDDEN TESTS\n"
ANSWERS = {  # student: the answer cell
    "ada": "def double(x):\n    return 2 * x",
    "bo": "def double(x):\n    return x + x",
    "cy": "def double(x):\n    return x * x",            # right at 2 only: the hidden test catches it
    "di": "def double(x):\n    raise NotImplementedError()",
}


def tiny_notebook(answer: str):
    def cell(source, **meta):
        c = nbformat.v4.new_code_cell(source)
        c.metadata["nbgrader"] = {"schema_version": 3, "locked": True, "solution": False, "grade": False, **meta}
        return c
    return nbformat.v4.new_notebook(cells=[
        cell("import math", grade_id="setup"),
        cell(answer, grade_id="double", locked=False, solution=True),
        cell(CHECKS, grade_id="double_tests", grade=True, points=2),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def make_course(root):
    """A course folder at `root` holding the one assignment and a class of ANSWERS."""
    new_course_folder(root)
    (root / "solutions").unlink()
    source = root / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    solution = tiny_notebook("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION")
    nbformat.write(solution, source / f"{ASSIGNMENT}.ipynb")
    for student, answer in ANSWERS.items():
        folder = root / "autograder" / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(tiny_notebook(answer), folder / f"{ASSIGNMENT}.ipynb")
    return root / "autograder"


@pytest.fixture
def course(tmp_path):
    return make_course(tmp_path / "course")


def run(root, *args, mark: str | None = None, **popen):
    env = dict(os.environ, NANOPARALLEL_TEST_MARK=mark or uuid.uuid4().hex)
    command = [sys.executable, str(ROOT / "autograder" / "grade.py"), "--root", str(root), *args]
    if popen:
        # A shell's background job (`make test &`) inherits SIGINT ignored, and a Python started so
        # never raises KeyboardInterrupt: give the run Ctrl-C as a terminal would deliver it.
        return subprocess.Popen(command, env=env, cwd=ROOT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)
    return subprocess.run(command, env=env, cwd=ROOT, text=True, capture_output=True, timeout=600)


def state(root, book="gradebook.db") -> dict:
    """Every grade, comment and flag the gradebook holds, and grades.csv's rows."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / book}") as gb:
        grades = {}
        for student, assignment in submissions_in(gb):
            data = read_submission(gb, assignment, student)
            grades[student, assignment] = data["notebooks"]
    rows = []
    if (root / "grades.csv").exists():
        with open(root / "grades.csv", newline="") as f:
            rows = sorted(tuple(sorted(row.items())) for row in csv.DictReader(f))
    return {"grades": grades, "csv": rows}


def left_running(mark: str) -> list[str]:
    """Processes whose environment carries `mark`: the run's workers, kernels and ranks."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"NANOPARALLEL_TEST_MARK={mark}".encode() in f.read():
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        command = c.read().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{pid}: {command[:120]}")
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The class graded one submission at a time, in a course of its own."""
    root = make_course(tmp_path_factory.mktemp("serial") / "course")
    done = run(root, "--jobs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    return state(root)


def test_side_by_side_grades_equal_serial_cell_by_cell_and_bad_input_is_named_with_what_to_do(course, serial):
    submitted = course / "submitted"
    (submitted / "fay" / ASSIGNMENT).mkdir(parents=True)
    (submitted / "fay" / ASSIGNMENT / "Untitled.ipynb").write_text("{}")
    (submitted / "gus" / ASSIGNMENT).mkdir(parents=True)
    (submitted / "gus" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text('{"cells": [')
    (submitted / "hal" / "tiny_v2").mkdir(parents=True)
    done = run(course, "--jobs", "3")
    assert done.returncode == 1, done.stdout + done.stderr  # graded the rest, and says it refused some
    assert f"submitted/fay/{ASSIGNMENT}/ has no {ASSIGNMENT}.ipynb (it holds Untitled.ipynb)" in done.stdout
    assert f"submitted/gus/{ASSIGNMENT}/{ASSIGNMENT}.ipynb is not a notebook (not JSON" in done.stdout
    assert "submitted/hal/tiny_v2/ is not an assignment of this course (they are tiny)" in done.stdout
    assert state(course) == serial
    got = {s: nb[0]["grades"][0]["auto_score"] for (s, _), nb in serial["grades"].items()}
    assert got == {"ada": 2, "bo": 2, "cy": 0, "di": 0}
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == len(ANSWERS) and "4/4 done" in lines[-1] and "elapsed" in lines[-1]
    assert "slowest so far:" in done.stdout
    for student in ANSWERS:
        assert (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists()


def test_an_interrupted_run_keeps_what_it_finished_leaves_nothing_running_and_resumes(course, serial):
    mark = uuid.uuid4().hex
    process = run(course, "--jobs", "1", mark=mark, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    assert first.startswith("[1/4]"), first + process.stderr.read()
    process.send_signal(signal.SIGINT)  # a Ctrl-C, in the middle of the second submission
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "run the same command again" in err, out + err
    deadline = time.monotonic() + 15
    while left_running(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left_running(mark), f"still running after Ctrl-C: {left_running(mark)}"
    finished = {line.split()[1] for line in (first + out).splitlines() if line.startswith("[")}
    assert set(s for s, _ in state(course)["grades"]) == finished  # nothing half-written

    again = run(course, "--jobs", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{len(finished)} of 4 submissions were graded before" in again.stdout
    regraded = {line.split()[1] for line in again.stdout.splitlines() if line.startswith("[")}
    assert regraded == set(ANSWERS) - finished
    assert state(course) == serial

    # A changed submission is graded again; --force regrades everything.
    notebook = course / "submitted" / "cy" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nbformat.write(tiny_notebook(ANSWERS["ada"]), notebook)
    changed = run(course, "--jobs", "2")
    assert [line.split()[1] for line in changed.stdout.splitlines() if line.startswith("[")] == ["cy"]
    assert state(course)["grades"]["cy", ASSIGNMENT][0]["grades"][0]["auto_score"] == 2
    forced = run(course, "--force", "--student", "ada")
    assert [line.split()[1] for line in forced.stdout.splitlines() if line.startswith("[")] == ["ada"]


def test_shards_graded_as_separate_processes_merge_into_what_serial_gives(course, serial):
    shards = [run(course, "--jobs", "1", "--shard", f"{k}/3", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for k in (1, 2, 3)]
    graded = []
    for process in shards:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, out + err
        graded += [line.split()[1] for line in out.splitlines() if line.startswith("[")]
    assert sorted(graded) == sorted(ANSWERS)  # every submission in exactly one shard
    assert not (course / "grades.csv").exists()  # a shard writes its own gradebook only
    merged = run(course, "--merge")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert state(course) == serial


def test_a_second_run_on_the_same_gradebook_stops_before_grading(course):
    with run_lock(str(course / "shards" / "1-of-2"), (1, 2)):  # another process grading shard 1/2
        twice = run(course, "--shard", "1/2")
    assert twice.returncode == 2 and "two shards were given the same K" in twice.stderr
    assert "shards/1-of-2/lock" in twice.stderr and not list(course.glob("autograded/*"))
