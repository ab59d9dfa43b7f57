"""An honest wrong answer through the grader: it loses the points of each exercise it gets wrong,
and the guard does not flag it.

Per notebook, the mutant that gets the most exercises wrong (tests/mutants/) is graded by
`autograder/grade.py`, in its sandbox, in its notebook's class. That each mutant fails the checks
of what it gets wrong is shown for every mutant in `make test` (tests/test_course.py, by
tests/mutation_run.py): a graded cell scores only when it runs to its end without an error, the
same rule in either place. What only a grading shows is the guard's side, no false alarm on a wrong
answer written in good faith, so it runs with the grader's other hard cases (marker `grader`,
`make test-grader`; docs/testing.md, "Two tiers").
"""
from __future__ import annotations

import pytest

from mutation_run import load_mutants
from test_course import ASSIGNMENTS, assert_graded_unflagged, scores, solution_notebook, with_cells_replaced


def graded_mutant(assignment: str) -> str:
    """The mutant that gets the most exercises wrong."""
    mutants = load_mutants(assignment)
    return max(mutants, key=lambda name: len(mutants[name]))


def submissions(assignment: str) -> dict:
    """What this module adds to `assignment`'s class: one mutant."""
    mutant = graded_mutant(assignment)
    return {f"mutant_{mutant}": with_cells_replaced(solution_notebook(assignment), load_mutants(assignment)[mutant])}


@pytest.mark.notebooks
@pytest.mark.grader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_wrong_answer_loses_its_exercises_points_unflagged(graded, assignment):
    root = graded(assignment).root
    mutant = graded_mutant(assignment)
    wrong = scores(root, assignment, f"mutant_{mutant}")
    for grade_id in load_mutants(assignment)[mutant]:
        score, top = wrong[f"{grade_id}_tests"]
        assert score < top, f"mutant {mutant!r}: {grade_id}_tests kept {score}/{top} points"
    assert_graded_unflagged(root, assignment, {f"mutant_{mutant}"})
