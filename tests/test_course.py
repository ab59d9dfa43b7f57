"""The course as a whole: course/ is a fresh release of solutions/, the autograder gives 0 to
blank notebooks, full marks to solutions and fewer points to plausible wrong answers, and no
cell of a solution notebook raises.

Each submission executes once (`make autograde`'s own run); each assignment is graded in a
course folder of its own, two at a time. Budget and measurements: README, Tests and benchmarks."""
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
sys.path.insert(0, str(ROOT / "autograder"))
import grade  # noqa: E402
from nanoparallel.cluster import STALL_ENV  # noqa: E402

# Assignments autograded side by side (measured on 2 cores: README, Tests and benchmarks).
GRADE_JOBS = int(os.environ.get("NANOPARALLEL_GRADE_JOBS", "2"))
STALL_SECONDS = "2"


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


def submissions_of(assignment: str) -> dict:
    """The blank release, the solution, and each mutant (the solution with some cells replaced)."""
    solution = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    found = {
        "blank": nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4),
        "solution": solution,
    }
    for name, replacements in load_mutants(assignment).items():
        nb = nbformat.from_dict(json.loads(json.dumps(solution)))
        cells = cells_by_grade_id(nb)
        for grade_id, source in replacements.items():
            cells[grade_id].source = source.strip("\n")
        found[name] = nb
    return found


def new_course_folder(root: Path) -> Path:
    """A throwaway course folder: our nbgrader setup, the real solutions, a scratch gradebook."""
    (root / "autograder").mkdir(parents=True)
    for path in (ROOT / "autograder").glob("*.py"):
        shutil.copy(path, root / "autograder")
    (root / "solutions").symlink_to(ROOT / "solutions")
    (root / "course").mkdir()
    return root


def grade_in_own_folder(root: Path, assignment: str) -> subprocess.CompletedProcess:
    """`make autograde` of every submission of one assignment, in a course folder of its own."""
    new_course_folder(root)
    for student, nb in submissions_of(assignment).items():
        folder = root / "autograder" / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    env = dict(os.environ, **{STALL_ENV: STALL_SECONDS})
    return subprocess.run([sys.executable, str(ROOT / "autograder" / "grade.py"),
                           "--root", str(root / "autograder"), "--assignment", assignment],
                          env=env, capture_output=True, text=True)


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory):
    return new_course_folder(tmp_path_factory.mktemp("course"))


@pytest.fixture(scope="session")
def autograded(request, tmp_path_factory):
    """autograded(assignment) -> the autograder folder where every submission of that assignment
    (blank, solution, mutants) was graded, once per session; the tests below read that one run.

    Assignments are graded GRADE_JOBS at a time, each in a folder (and gradebook) of its own: a
    round trip leaves most of the cores idle (nbgrader and kernels starting, ranks waiting).
    Grading starts at the first test that asks, for every assignment the session will ask for.
    The kernels get NANOPARALLEL_STALL_TIMEOUT: a run whose unfinished ranks all sit in
    torch.distributed calls using no CPU for 2 s is a deadlock then, not after the full 10 s
    deadline, so a deadlocking mutant still loses its points but in seconds (the engine's own
    tests check both ways of stopping, tests/test_cluster.py)."""
    wanted = sorted({item.callspec.params["assignment"] for item in request.session.items
                     if "autograded" in getattr(item, "fixturenames", ()) and hasattr(item, "callspec")})
    base = tmp_path_factory.mktemp("graded")
    pool = ThreadPoolExecutor(max_workers=GRADE_JOBS)
    runs = {}

    def grade_once(assignment: str) -> Path:
        if not runs:
            runs.update({a: pool.submit(grade_in_own_folder, base / a, a) for a in wanted or [assignment]})
        done = runs[assignment].result()
        if done.returncode != 0:
            pytest.fail(f"autograding {assignment} failed:\n{done.stdout}\n{done.stderr}")
        print(done.stdout)
        return base / assignment / "autograder"

    yield grade_once
    pool.shutdown(cancel_futures=True)


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
def test_autograder_blank_zero_solution_full_mutants_lose(autograded, assignment):
    root = autograded(assignment)
    mutants = load_mutants(assignment)
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
        rows = [row for row in csv.DictReader(f) if row["assignment"] == assignment]
    graded = {row["student_id"] for row in rows if row["raw_score"] != ""}
    false_alarms = {row["student_id"]: row["integrity"] for row in rows if row["integrity"]}
    assert not false_alarms, f"the grader's guard flagged honest submissions: {false_alarms}"
    students = {"blank", "solution", *mutants}
    assert students <= graded, f"grades.csv lacks {students - graded} for {assignment}"
    assert (root / "feedback" / "solution" / assignment / f"{assignment}.html").exists()


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_notebook_runs_without_error(autograded, assignment):
    """What nbval checked in a run of its own: every cell of the solution notebook executes and
    none raises. The autograder's run of the solution executed exactly the source notebook's
    cells (hidden tests included), so its saved outputs are read instead of running it again."""
    root = autograded(assignment)
    nb = nbformat.read(root / "autograded" / "solution" / assignment / f"{assignment}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [c.source for c in source.cells if c.cell_type == "code"], (
        "the autograded solution did not execute the source notebook's cells")
    not_run = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()
               and c.execution_count is None]
    assert not not_run, f"cells {not_run} of solutions/{assignment} never ran"
    errors = {i: "\n".join(o.get("traceback", [])) or f"{o.get('ename')}: {o.get('evalue')}"
              for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"}
    assert not errors, "solution cells raised:\n" + "\n\n".join(f"cell {i}:\n{e}" for i, e in errors.items())
