"""Nothing of the witness can be reached with no audit event, from a cell, from the checks' calls
into an answer, or from a rank.

Each path found so far to the witness's closures went through attributes Python does not audit
(`object.__subclasses__()` to the hook's class, then `__closure__`; a rank's import rule to its
`stop`, whose writable cells turned every stop into a no-op). Rather than one test per path, the
submissions here run the attacker's whole model (tests/unaudited_reach.py) and print what it
found; a control in a closure of their own shows that the walk does open closures. Graded with
00_welcome's class (`make test-grader`), they keep full marks and are not flagged: walking is not
tampering.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from background import ROOT
from test_course import with_cells_replaced

ASSIGNMENT = "00_welcome"
REPORT = "UNAUDITED-REACH "
CONTROL = "reach-control-4f1c"
WALKER = (Path(__file__).with_name("unaudited_reach.py")).read_text()


def _solution():
    return nbformat.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def _hidden_texts(nb) -> tuple:
    """The first line of each graded cell's hidden tests: text no cell may reach."""
    found = []
    for cell in nb.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            found.append(next(line.strip() for line in hidden.splitlines() if line.strip()))
    return tuple(found)


def _walk(where: str, wanted: tuple) -> str:
    """Source that walks and prints its report, on one line (the line holds the call, so the walk
    skips it: it names what it looks for)."""
    return (f'_reach = unaudited_reach({wanted + (CONTROL,)!r}); '
            f'print({REPORT!r} + __import__("json").dumps({{"where": {where!r}, **_reach}}))')


def submissions(assignment: str) -> dict:
    if assignment != ASSIGNMENT:
        return {}
    solution = _solution()
    wanted = _hidden_texts(solution)
    control = f'\ndef _control():\n    secret = {CONTROL!r}\n    return lambda: secret\n\n_kept = [_control()]\n'
    training = next(c.source for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "training_time")
    pass_right = next(c.source for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "pass_right")
    # Inside the checks' call: training_years walks once, the first time a hidden test calls it.
    in_check = training.replace(
        "def training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):",
        "_walked = []\n\ndef training_years(total_flops, flops_per_second, n_gpus=1, utilization=1.0):\n"
        "    if not _walked and flops_per_second == 312e12:\n        _walked.append(1)\n"
        f"        {_walk('inside a graded cell', wanted)}", 1)
    on_rank = pass_right.replace(
        "def pass_right(tensor):",
        "def pass_right(tensor):\n    if dist.get_rank() == 0 and tensor.dtype == torch.float64:\n"
        f"        _kept[0]; {_walk('on a rank', wanted)}", 1)  # _kept: ships the control with the answer
    assert in_check != training and on_rank != pass_right, "the solution's answers no longer start as expected"
    return {
        "reach_from_a_cell": with_cells_replaced(solution, {
            "training_time": WALKER + control + _walk("in a cell", wanted) + "\n" + training}),
        "reach_inside_the_checks": with_cells_replaced(solution, {"training_time": WALKER + control + in_check}),
        "reach_on_a_rank": with_cells_replaced(solution, {"pass_right": WALKER + control + on_rank}),
    }


@pytest.mark.notebooks
@pytest.mark.grader
@pytest.mark.parametrize("assignment", [ASSIGNMENT])
def test_nothing_of_the_witness_is_reachable_unheard(graded, assignment):
    done = graded(assignment)
    for student in submissions(assignment):
        progress = next(line for line in done.stdout.splitlines() if line.startswith("[") and f" {student} " in line)
        assert "7 / 7" in progress and "FLAGGED" not in progress, progress
        nb = nbformat.read(done.root / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
        texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if o.get("output_type") == "stream"]
        line = next(t for text in texts for t in text.splitlines() if REPORT in t)
        report = json.loads(line.split(REPORT, 1)[1])
        found = report["found"]
        # The walk opens closures: it found the submission's own secret, and a whole interpreter's worth.
        assert any(CONTROL in f and "__closure__" in f for f in found), report
        assert report["walked"] > 100_000, report
        leaks = [f for f in found if CONTROL not in f]
        assert not leaks, f"{report['where']}, notebook code reaches the witness unheard:\n" + "\n".join(leaks)
