"""The course as a whole: course/ is a fresh release of solutions/, the autograder gives 0 to
blank notebooks and full marks to solutions, plausible wrong answers (tests/mutants/) fail the
checks of the exercise they get wrong, and no cell of a solution notebook raises.

The blank and the solution of each notebook are graded by `make autograde`'s own run; every
mutant is tried in one kernel per notebook (tests/mutation_run.py). Both run in the background
from the session's start (tests/background.py). One mutant per notebook also goes through the
grader, in `make test-grader` (tests/test_wrong_answer_graded.py). Budget and measurements:
docs/testing.md."""
import csv
import json
import sys
from pathlib import Path

import nbformat
import pytest

from background import ASSIGNMENTS, ROOT, new_course_folder
from mutation_run import CONTROL, load_equivalents, load_mutants

sys.path.insert(0, str(ROOT / "autograder"))
import grade  # noqa: E402


def cells_by_grade_id(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def comparable(nb) -> list:
    """What a student receives: cell types, sources and nbgrader metadata."""
    return [(c.cell_type, c.source, json.dumps(c.metadata.get("nbgrader", {}), sort_keys=True))
            for c in nb.cells]


def solution_notebook(assignment: str):
    return nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)


def submissions(assignment: str) -> dict:
    """What this module adds to `assignment`'s class: the blank release and the solution."""
    return {
        "blank": nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4),
        "solution": solution_notebook(assignment),
    }


def with_cells_replaced(nb, replacements: dict):
    """A copy of `nb` whose cells with the grade_ids in `replacements` hold the given sources."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cells = cells_by_grade_id(nb)
    for grade_id, source in replacements.items():
        cells[grade_id].source = source.strip("\n")
    return nb


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory):
    """nbgrader's commands on a throwaway course folder (tests/background.py)."""
    return grade.Course(str(new_course_folder(tmp_path_factory.mktemp("course")) / "autograder"))


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_course_is_a_fresh_release_of_solutions(course_copy, assignment):
    course_copy.release(assignment)
    fresh = nbformat.read(Path(course_copy.root).parent / "course" / assignment / f"{assignment}.ipynb",
                          as_version=4)
    committed = nbformat.read(ROOT / "course" / assignment / f"{assignment}.ipynb", as_version=4)
    assert comparable(committed) == comparable(fresh), f"course/{assignment} is stale: run `make release`"
    text = (ROOT / "course" / assignment / f"{assignment}.ipynb").read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    # With its hidden tests taken out, every cell a student runs must still be Python (a `try:`
    # whose checks were all hidden is not).
    from IPython.core.inputtransformer2 import TransformerManager
    for i, cell in enumerate(committed.cells):
        if cell.cell_type == "code":
            try:
                compile(TransformerManager().transform_cell(cell.source), f"cell {i}", "exec")
            except SyntaxError as exc:
                pytest.fail(f"course/{assignment}, cell {i}: the student's copy does not compile: {exc}")


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_autograder_gives_blank_zero_and_solution_full_marks(graded, assignment):
    root = graded(assignment).root
    blank, full = scores(root, assignment, "blank"), scores(root, assignment, "solution")
    assert blank and all(score == 0 for score, _ in blank.values()), f"blank notebook scored: {blank}"
    assert all(score == top for score, top in full.values()), f"solution lost points: {full}"
    assert_graded_unflagged(root, assignment, {"blank", "solution"})
    assert (root / "feedback" / "solution" / assignment / f"{assignment}.html").exists()


def scores(root: Path, assignment: str, student: str) -> dict:
    """{graded cell: (score, max score)} of `student`'s submission, from the class's gradebook."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission(assignment, student)
        return {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades if g.max_score}


def assert_graded_unflagged(root: Path, assignment: str, honest: set) -> None:
    """Each of the `honest` students has a row in grades.csv, and the guard flagged none."""
    with open(root / "grades.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["assignment"] == assignment]
    graded_students = {row["student_id"] for row in rows if row["raw_score"] != ""}
    false_alarms = {row["student_id"]: row["integrity"] for row in rows if row["integrity"] and row["student_id"] in honest}
    assert not false_alarms, f"the grader's guard flagged honest submissions: {false_alarms}"
    assert honest <= graded_students, f"grades.csv lacks {honest - graded_students} for {assignment}"


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_mutant_fails_the_checks_of_what_it_gets_wrong(mutated, assignment):
    """Each mutant, tried in the kernel that runs the solution (tests/mutation_run.py): the graded
    cell of every exercise it replaces raises, while the control trial and the solution's own run
    raise nowhere."""
    outcome = mutated(assignment)
    assert not outcome["solution_errors"], f"solution cells raised around the mutants' trials: {outcome['solution_errors']}"
    tried = outcome["mutants"]
    control = tried.pop(CONTROL)
    assert control and not any(control.values()), f"a trial of the solution's own cells failed its checks: {control}"
    for name, replaced in load_mutants(assignment).items():
        for grade_id in replaced:
            error = tried[name][f"{grade_id}_tests"]
            assert error, f"mutant {name!r}: {grade_id}_tests passed; a check must catch this wrong answer"
            print(f"{name}, {grade_id}_tests: {error.splitlines()[0][:200]}")


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if load_equivalents(a)])
def test_every_right_answer_written_another_way_keeps_its_points(mutated, assignment):
    """Each equivalent (a right answer that gathers rows or sums in another order the spec allows),
    tried as the mutants are: every graded cell of what it replaces passes."""
    tried = mutated(assignment)["equivalents"]
    for name, replaced in load_equivalents(assignment).items():
        failed = {f"{g}_tests": tried[name][f"{g}_tests"] for g in replaced if tried[name][f"{g}_tests"]}
        assert not failed, f"equivalent {name!r}, a right answer, lost points: {failed}"


@pytest.mark.notebooks
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_notebook_runs_without_error(graded, assignment):
    """What nbval checked in a run of its own: every cell of the solution notebook executes and
    none raises. The autograder's run of the solution executed exactly the source notebook's
    cells (hidden tests included), so its saved outputs are read instead of running it again."""
    root = graded(assignment).root
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
