"""One exercise of a course notebook as a program to run outside Jupyter: which cells, which
checks, on how many ranks. Pure: it reads the notebook's JSON and the syntax tree of its code,
and runs nothing (`nanoparallel.grading.launch` runs what it plans).

    exercise = Notebook("course/01_collectives/01_collectives.ipynb").exercise("ring_all_reduce")
    plan = exercise.plan(world_size=4)     # ExerciseError if its checks cannot run on 4 ranks
    for step in plan.steps:
        exec(step.code, namespace)         # namespace["cluster"]: the caller's cluster

What runs: the setup cells (nbgrader ``locked``, not graded) and the solution cells, in notebook
order up to the exercise's test cell, never a demonstration cell (no nbgrader metadata); then
the test cell's definitions and constants, and its check calls ``_check_x(...)`` (the ``try``
body's, hidden ones included where the notebook has them) whose world size is the caller's, in
order. IPython magics (``%...``, ``!...``) are dropped. The statement that starts the notebook's
cluster (``cluster = Cluster(...)``) is left out: the caller binds ``cluster`` itself.

The rules, one for every notebook:

- A statement that reads a name only demonstration code defines (a setup cell's own demo at
  its end) is left out, and so is what reads the names it would have made.
- A check's world size is the argument of the ``cluster.resize(...)`` its function makes,
  evaluated from the call's literal arguments: ``_check_ring_all_reduce(4)`` runs on 4 ranks,
  ``_check_3d((2, 2, 2))`` (``world = math.prod(shape)``) on 8.
- A check runs on ranks if its function, or a function it names, uses the notebook's
  ``cluster``; otherwise it runs in one process.
- A check needs the notebook's local cluster if its function (or one it names) uses a cluster
  feature other than run, resize, world_size and timeout, or recovers from a ``DeadlockError``:
  after a deadlock only the local cluster can restart its ranks.
- A statement of the test cell that drives the cluster itself, outside a check function
  (``cluster.resize(1)``, a run expected to raise), is left out.
"""
from __future__ import annotations

import ast
import builtins
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

from nanoparallel.grading.check_code import (admit, free_loads, function_facts, is_assertion, is_check_call,
                                     makes_cluster, resized_world_size)

_BUILTINS = frozenset(dir(builtins)) | {"__name__"}


class ExerciseError(ValueError):
    """The notebook or the exercise cannot run as asked; the message says what to do instead."""


@dataclass(frozen=True)
class Cell:
    index: int
    grade_id: str | None
    role: str | None        # "setup" (locked, not graded), "solution", "test" (graded); None: demonstration
    source: str             # IPython magics blanked out, so that line numbers stay the notebook's
    released: bool = False  # carries nbgrader's checksum: a student's copy, its hidden checks taken out


@dataclass(frozen=True)
class Check:
    """One check call of a test cell, e.g. ``_check_ring_all_reduce(4, shape=(2, 5))``."""
    label: str              # the call as the notebook writes it
    node: ast.stmt
    on_ranks: bool          # its function uses the cluster (else it runs in one process)
    world_size: int | None  # what it resizes the cluster to; None: cannot tell
    needs_local: str        # why only the notebook's local cluster can run it; "" if it need not


@dataclass(frozen=True)
class Step:
    kind: str               # "setup" (a cell's code, a test cell's definitions) or "check"
    label: str              # the cell's grade_id, or the check as written
    nodes: tuple            # the statements (ast.stmt) that run
    code: CodeType


@dataclass(frozen=True)
class Plan:
    steps: list[Step]
    left_out: list[str]     # sentences: the test cell's checks and statements that do not run here


class Notebook:
    """A course notebook (nbgrader source or release) and its exercises."""

    def __init__(self, path):
        self.path = Path(path)
        self.cells = _read_cells(self.path)
        self.is_release = any(c.released for c in self.cells)

    @property
    def exercises(self) -> list[str]:
        return [_exercise_name(c.grade_id) for c in self.cells if c.role == "test"]

    def exercise(self, name: str) -> "Exercise":
        """By the solution cell's grade_id (``ring_all_reduce``) or the test cell's (``..._tests``)."""
        tests = [c for c in self.cells if c.role == "test"]
        for test in tests:
            if name in (test.grade_id, _exercise_name(test.grade_id)):
                return Exercise(self, test)
        solution = next((c for c in self.cells if c.role == "solution" and c.grade_id == name), None)
        test = solution and next((t for t in tests if t.index > solution.index), None)
        if test is None:
            raise ExerciseError(f"{self.path} has no exercise {name!r}. Its exercises: "
                                f"{', '.join(self.exercises)}. Pass one of them to --exercise.")
        return Exercise(self, test)


class Exercise:
    """The cells and checks of one exercise; see the module docstring for the rules."""

    def __init__(self, notebook: Notebook, test: Cell):
        self.notebook, self.test = notebook, test
        self.name = _exercise_name(test.grade_id)
        self.cells = [c for c in notebook.cells if c.index < test.index and c.role in ("setup", "solution")]
        self._trees = {c.index: _parse(c, notebook.path) for c in self.cells + [test]}
        self._facts = function_facts([self._trees[c.index] for c in self.cells + [test]])
        self._statements = _test_statements(self._trees[test.index])
        self.checks = [self._check(s) for s in self._statements if is_check_call(s)]

    # -- what this exercise needs --------------------------------------------------------

    @property
    def world_sizes(self) -> list[int]:
        """World sizes of the checks that run under torchrun."""
        return sorted({c.world_size for c in self.checks if c.on_ranks and c.world_size and not c.needs_local})

    def needs_local(self) -> list[str]:
        """Why checks of this exercise need the notebook's local cluster, one sentence each."""
        reasons = [f"{c.label} {c.needs_local}" for c in self.checks if c.on_ranks and c.needs_local]
        reasons += [f"{c.label}: its world size cannot be read from the notebook"
                    for c in self.checks if c.on_ranks and c.world_size is None and not c.needs_local]
        if not any(c.on_ranks for c in self.checks) and any(self._drives_cluster(s) for s in self._statements):
            reasons.append("its checks use the notebook's cluster directly, not through a check function of a given world size")
        return reasons

    def verdict(self) -> str:
        """One line for ``--list``."""
        local = self.needs_local()
        if self.world_sizes:
            note = f"; left out under torchrun: {'; '.join(local)}" if local else ""
            return f"runs under torchrun on {_join(self.world_sizes)} ranks{note}"
        if local:
            return f"needs the notebook's local cluster: {'; '.join(local)}"
        return "one process: its checks start no ranks"

    def validate(self, world_size: int) -> None:
        """Raise `ExerciseError` unless some checks of this exercise run on `world_size` ranks here."""
        where = f"{self.name} ({self.notebook.path.name})"
        if not self.world_sizes and not self.needs_local():
            raise ExerciseError(
                f"{where} is checked in one process: its checks start no ranks, so there is nothing to run on "
                "them. Check it in the notebook (nbgrader's Validate button, or make validate NB=...).")
        if not self.world_sizes:
            raise ExerciseError(
                f"{where} needs the notebook's local cluster: {'; '.join(self.needs_local())}. Check it in the "
                f"notebook. Exercises of this notebook that run on ranks here: {_join(self._portable(), 'and') or 'none'}.")
        if world_size not in self.world_sizes:
            hidden = "" if not self.notebook.is_release else (
                " (course/ has the visible checks only; the solution notebook adds hidden ones)")
            raise ExerciseError(
                f"{where} is checked on {_join(self.world_sizes)} ranks in this notebook{hidden}, not on "
                f"{world_size}. Run it on one of those numbers of ranks in all (torchrun: --nproc-per-node "
                "times --nnodes; without torchrun: --world-size).")

    def all_reduce_function(self) -> str:
        """The name of the all-reduce this exercise's solution defines (for ``--bench``)."""
        names = _all_reduces(self.notebook, self.test)
        if len(names) != 1:
            others = [e for e in self.notebook.exercises if len(_all_reduces(self.notebook, self.notebook.exercise(e).test)) == 1]
            raise ExerciseError(
                f"--bench races an all-reduce against the backend's own, and the solution cell of {self.name} "
                f"defines {'no function' if not names else 'more than one function'} named *all_reduce. "
                f"Exercises of this notebook it can race: {_join(others, 'and') or 'none'}; or leave out --bench "
                "to run the checks.")
        return names[0]

    # -- what runs -----------------------------------------------------------------------

    def plan(self, world_size: int, checks: bool = True) -> Plan:
        """The steps to run on `world_size` ranks: the cells, then (with `checks`) the test cell's
        definitions and the checks for this world size. Call `validate` first."""
        bound = set(_BUILTINS) | {"cluster"}
        steps = []
        for cell in self.cells:
            kept = [s for s in self._trees[cell.index].body if not makes_cluster(s) and admit(s, bound)]
            if kept:
                steps.append(self._step("setup", cell.grade_id, kept, cell))
        if not checks:
            return Plan(steps, [])
        by_node = {id(c.node): c for c in self.checks}
        other_sizes, local, driving = Counter(), [], 0
        for stmt in self._statements:
            check = by_node.get(id(stmt))
            if check and check.on_ranks and (check.needs_local or check.world_size is None):
                local.append(check.label)
            elif check and check.on_ranks and check.world_size != world_size:
                other_sizes[check.world_size] += 1
            elif (not check and self._drives_cluster(stmt)) or not admit(stmt, bound):
                driving += 1
            elif check or is_assertion(stmt):
                label = check.label if check else _one_line(ast.get_source_segment(self.test.source, stmt))
                steps.append(self._step("check", label, [stmt], self.test))
            else:
                steps.append(self._step("setup", self.test.grade_id, [stmt], self.test))
        left_out = []
        if other_sizes:
            left_out.append(f"{_count(sum(other_sizes.values()), 'check')} on other world sizes "
                            f"({_join(sorted(other_sizes))} ranks)")
        left_out += [f"{label}, which needs the notebook's local cluster" for label in local]
        if driving:
            left_out.append(f"{_count(driving, 'statement')} of the test cell that drive the notebook's cluster "
                            "themselves, or use what such statements make")
        return Plan(steps, left_out)

    def sources(self) -> dict[str, str]:
        """{filename: source} of the cells that run, for tracebacks that show the notebook's lines."""
        return {self._filename(c): c.source for c in self.cells + [self.test]}

    # -- helpers -------------------------------------------------------------------------

    def _filename(self, cell: Cell) -> str:
        return f"{self.notebook.path.name}:{cell.grade_id}"

    def _step(self, kind: str, label: str, nodes: list, cell: Cell) -> Step:
        module = ast.Module(body=list(nodes), type_ignores=[])
        return Step(kind, label, tuple(nodes), compile(module, self._filename(cell), "exec"))

    def _check(self, stmt: ast.stmt) -> Check:
        call = stmt.value
        fn, facts = self._facts.get(call.func.id, (None, None))
        label = _one_line(ast.get_source_segment(self.test.source, call))
        if fn is None or not facts["uses_cluster"]:
            return Check(label, stmt, False, None, "")
        needs_local = "; ".join(sorted(facts["needs_local"]))
        return Check(label, stmt, True, resized_world_size(call, fn, self._facts), needs_local)

    def _drives_cluster(self, stmt: ast.stmt) -> bool:
        names = free_loads(stmt)
        return "cluster" in names or any(self._facts[n][1]["uses_cluster"] for n in names if n in self._facts)

    def _portable(self) -> list[str]:
        return [e for e in self.notebook.exercises if self.notebook.exercise(e).world_sizes]


# -- reading the notebook ------------------------------------------------------------------

def _read_cells(path: Path) -> list[Cell]:
    if not path.is_file():
        raise ExerciseError(f"{path}: no such notebook. Give the path of a course notebook, "
                            "e.g. course/01_collectives/01_collectives.ipynb.")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ExerciseError(f"{path} is not a Jupyter notebook (no JSON list of cells). Give the path of a "
                            "course notebook, e.g. course/01_collectives/01_collectives.ipynb.") from None
    cells = []
    for index, cell in enumerate(raw):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code":
            continue
        role = ("solution" if meta.get("solution") else "test" if meta.get("grade") else
                "setup" if meta.get("locked") else None)
        source = "".join(cell.get("source", []))
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))
        cells.append(Cell(index, meta.get("grade_id") if role else None, role, source, "checksum" in meta))
    if not any(c.role == "test" for c in cells):
        raise ExerciseError(f"{path} is not a course notebook: no graded test cell (nbgrader metadata). Give "
                            "a notebook from course/ or solutions/.")
    return cells


def _exercise_name(grade_id: str) -> str:
    return grade_id[: -len("_tests")] if grade_id.endswith("_tests") else grade_id


def _parse(cell: Cell, path: Path) -> ast.Module:
    try:
        return ast.parse(cell.source)
    except SyntaxError as err:
        todo = ("Run it in the notebook to see where, fix it and save." if cell.role == "solution" else
                "It is a locked cell of the course, which needs fixing in the course's source.")
        raise ExerciseError(f"cell {cell.grade_id} of {path} does not parse ({err.msg}, line {err.lineno}). "
                            f"{todo}") from None


def _test_statements(tree: ast.Module) -> list[ast.stmt]:
    """The test cell's statements, its `try` bodies inlined (their `finally` only resizes back)."""
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Try):
            out += stmt.body
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):  # the docstring
            out.append(stmt)
    return out


def _all_reduces(notebook: Notebook, test: Cell) -> list[str]:
    solution = next((c for c in reversed(notebook.cells) if c.role == "solution" and c.index < test.index), None)
    if solution is None:
        return []
    tree = _parse(solution, notebook.path)
    return [s.name for s in tree.body if isinstance(s, ast.FunctionDef) and s.name.endswith("all_reduce")]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _one_line(source: str) -> str:
    return " ".join(source.split())


def _join(items, last: str = "or") -> str:
    """``[1, 2, 4]`` -> ``"1, 2 or 4"``."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}" if items else ""
