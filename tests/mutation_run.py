"""Every mutant of one assignment, tried in one kernel.

A mutant is the solution with some exercise cells replaced by a plausible wrong answer
(tests/mutants/); the graded cell `<grade_id>_tests` of each replaced cell must then fail. Grading
each mutant as a submission of its own would pay a kernel, a cluster and nbgrader per mutant, for
checks that are the same code either way: the autograder awards a graded cell its points only when
that cell runs to its end without an error (autograder/guarded_execute.py), and that is what is
observed here, in a kernel with the grading environment.

The solution notebook runs from top to bottom. Just before it runs a mutant's first replaced cell,
the mutant's notebook runs from that cell to the last graded cell of the exercises it replaces, every
cell in between included, so each check sees what it would see in that mutant's own submission.
The solution then runs on from the same cell, restoring the solution's state, and its own graded
cells must pass: a trial that left anything behind shows up there, as an error of the solution.

Right answers written another way than the solution, where the spec allows it (rows gathered in
another order, sums made in another order: tests/mutants/<assignment>.py's EQUIVALENTS), are tried
the same way, and their graded cells must pass: a check that compared one way of rounding rather
than what the algorithm defines would fail them.

Run as a script: `python tests/mutation_run.py ASSIGNMENT`; the last line printed is the outcome as
JSON: {"mutants": {name: {graded cell: error or null}}, "equivalents": {the same}, "solution_errors":
{cell: error}, "seconds": {name: how long its trial took}}; the
mutant named "(solution)" is the control, a trial of the solution's own cells.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CELL_TIMEOUT = 120  # seconds, as the suite's nbval run allows a cell
RESULT = "MUTATION RESULT "
CONTROL = "(solution)"  # the control trial's name among the mutants


def load_table(folder: str, assignment: str, name: str) -> dict:
    """The table `name` (MUTANTS, TAMPERING) of tests/<folder>/<assignment>.py."""
    path = ROOT / "tests" / folder / f"{assignment}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def load_mutants(assignment: str) -> dict:
    """{mutant: {grade_id: source}} from tests/mutants/<assignment>.py."""
    return load_table("mutants", assignment, "MUTANTS")


def solution_with(assignment: str, cell: str, *changes: str) -> str:
    """The solution's cell whose grade_id is `cell`, with `changes` (old, new, old, new, ...) made,
    each old text found exactly once: a one-line mistake in a long answer, or a right answer
    written another way."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if grade_id(c) == cell)
    for old, new in zip(changes[::2], changes[1::2]):
        assert source.count(old) == 1, f"the solution's {cell} cell no longer holds {old!r} once"
        source = source.replace(old, new)
    return source


def load_equivalents(assignment: str) -> dict:
    """{name: {grade_id: source}}: right answers written another way the spec allows (none when
    tests/mutants/<assignment>.py defines no EQUIVALENTS)."""
    try:
        return load_table("mutants", assignment, "EQUIVALENTS")
    except AttributeError:
        return {}


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def trial_span(nb, replaced) -> tuple[int, int]:
    """(first, last) cell index of a mutant's trial: its first replaced cell, and the last graded
    cell of the exercises it replaces."""
    where = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
    missing = [g for g in replaced if g not in where or f"{g}_tests" not in where]
    if missing:
        raise KeyError(f"no solution cell or no graded cell <grade_id>_tests for {missing}")
    return min(where[g] for g in replaced), max(where[f"{g}_tests"] for g in replaced)


def error_of(cell) -> str | None:
    """The error a cell showed when it ran ("Name: message"), or None."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {out.get('evalue')}"[:500]
    return None


def run(assignment: str) -> dict:
    folder = ROOT / "solutions" / assignment
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    mutants = load_mutants(assignment)
    spans = {name: trial_span(nb, replaced) for name, replaced in mutants.items()}
    # The control: a trial of the solution's own cells, which must pass its checks (a trial that
    # failed whatever it ran would make every mutant look caught). The shortest span, for time.
    shortest = min(spans, key=lambda name: spans[name][1] - spans[name][0])
    sources = {grade_id(c): c.source for c in nb.cells if grade_id(c)}
    mutants = {CONTROL: {g: sources[g] for g in mutants[shortest]}, **mutants}
    spans[CONTROL] = spans[shortest]
    equivalents = load_equivalents(assignment)
    spans.update({name: trial_span(nb, replaced) for name, replaced in equivalents.items()})
    tables = {**{name: "mutants" for name in mutants}, **{name: "equivalents" for name in equivalents}}
    assert len(tables) == len(mutants) + len(equivalents), "a name is both a mutant and an equivalent"
    replacing = {**mutants, **equivalents}
    starting: dict[int, list[str]] = {}
    for name in replacing:
        starting.setdefault(spans[name][0], []).append(name)
    client = _client_class()(nb, timeout=CELL_TIMEOUT, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    outcome = {"mutants": {}, "equivalents": {}, "solution_errors": {}, "seconds": {}}
    solution = [_copy(cell) for cell in nb.cells]  # nbclient stores each cell it runs into nb.cells
    with client.setup_kernel():
        for index, cell in enumerate(solution):
            for name in starting.get(index, []):
                start = time.monotonic()
                outcome[tables[name]][name] = _trial(client, solution, replacing[name], *spans[name])
                outcome["seconds"][name] = round(time.monotonic() - start, 1)
            if cell.cell_type == "code":
                error = error_of(client.execute_cell(_copy(cell), index))
                if error:
                    outcome["solution_errors"][index] = error
    return outcome


def _client_class():
    """nbclient, polling in slices as the grader does: pyzmq can lose a reply's wake-up, and plain
    nbclient then holds the cell for the whole CELL_TIMEOUT (trials of 5 s took 124 s on a busy
    machine)."""
    sys.path.insert(0, str(ROOT / "autograder"))
    from guarded_execute import SlicedNotebookClient
    return SlicedNotebookClient


def _copy(cell):
    return nbformat.from_dict(json.loads(json.dumps(cell)))


def _trial(client, solution: list, replaced: dict, first: int, last: int) -> dict:
    """Runs cells first..last with the mutant's sources; {graded cell: its error or None}."""
    checks = {f"{g}_tests" for g in replaced}
    seen = {}
    for index in range(first, last + 1):
        cell = _copy(solution[index])
        if cell.cell_type != "code":
            continue
        if grade_id(cell) in replaced:
            cell.source = replaced[grade_id(cell)].strip("\n")
        ran = client.execute_cell(cell, index)
        if grade_id(cell) in checks:
            seen[grade_id(cell)] = error_of(ran)
    return seen


if __name__ == "__main__":
    print(RESULT + json.dumps(run(sys.argv[1])), flush=True)
