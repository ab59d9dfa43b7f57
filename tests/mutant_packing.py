"""Several wrong answers in one graded submission, when no check can mistake one for another.

A mutant (tests/mutants/) replaces the answers of a few exercises; its claim is that each of
those exercises' graded cells loses points. Grading a notebook costs about ten seconds plus its
cells, whatever it holds, so mutants that touch unrelated exercises are graded together, as one
submission: the claims stay the same and are checked one by one.

Two mutants may share a submission only when neither's answers can reach the other's checks.
An exercise *reaches* another when a name its answer binds is read, directly or through the
notebook's other cells (a helper of the set-up cell, a demonstration's result), by the other's
answer or graded cell. Names are read from the code (``ast``), so a dependency the code does
not spell out by name (a function handed around in a dictionary built elsewhere) would be
missed; the course test therefore also asks every exercise that no replaced answer reaches to
keep its full marks in the packed submission, which a wrong answer leaking into it would break.

Pure logic: notebooks in, a packing out. Used by tests/test_course.py.
"""
from __future__ import annotations

import ast


def _statements(source: str) -> list[ast.stmt]:
    """The cell's top-level statements; IPython's magics (`%matplotlib`) are left out."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines)).body
    except SyntaxError:
        return []


def _bound(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = {ast.Assign: lambda s: s.targets, ast.AnnAssign: lambda s: [s.target],
               ast.AugAssign: lambda s: [s.target], ast.For: lambda s: [s.target],
               ast.With: lambda s: [i.optional_vars for i in s.items if i.optional_vars]}
    for kind, get in targets.items():
        if isinstance(stmt, kind):
            return {n.id for t in get(stmt) for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def reach(cells: list[tuple[str | None, bool, str]]) -> dict[str, set[str]]:
    """{exercise: the exercises whose answers its answer or graded cell reads}, from the notebook's
    code cells in order as (grade_id or None, is an answer, source). A graded cell's grade_id is
    its exercise's followed by "_tests"."""
    answers = {gid for gid, is_answer, _ in cells if is_answer}
    made_by: dict[str, set[str]] = {}   # name -> the exercises whose answers it is made from
    reads: dict[str, set[str]] = {gid: set() for gid in answers}
    for gid, is_answer, source in cells:
        exercise = gid if is_answer else (gid[: -len("_tests")] if gid and gid.endswith("_tests") else None)
        for stmt in _statements(source):
            names = _read(stmt)
            sources = set().union(*(made_by.get(n, set()) for n in names))
            if exercise in reads:
                reads[exercise] |= sources
            for name in _bound(stmt):
                made_by[name] = ({gid} if is_answer else set()) | sources
    return {gid: found - {gid} for gid, found in reads.items()}


def compatible(a: set[str], b: set[str], reaches: dict[str, set[str]]) -> bool:
    """Two mutants' replaced exercises can share a submission: none shared, none reaching another."""
    return not (a & b) and not any(y in reaches.get(x, ()) or x in reaches.get(y, ()) for x in a for y in b)


def pack(mutants: dict[str, set[str]], reaches: dict[str, set[str]]) -> list[list[str]]:
    """Mutants ({name: exercises it replaces}) grouped into as few submissions as a first-fit
    packing finds, most exercises first."""
    groups: list[list[str]] = []
    for name in sorted(mutants, key=lambda n: (-len(mutants[n]), n)):
        home = next((g for g in groups if all(compatible(mutants[name], mutants[other], reaches) for other in g)), None)
        if home is None:
            groups.append([name])
        else:
            home.append(name)
    return groups
