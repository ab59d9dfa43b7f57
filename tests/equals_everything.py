"""Mutants that fit every notebook: an answer that returns values equal to everything.

`unittest.mock.ANY` equals whatever it is compared with, and it was made before the kernel
started, so neither the guard's originals nor its look at the notebook's classes can tell it from
an honest value: only a check that reads the answer's type before it compares (the engine's
`assert_close` and `assert_equal`) refuses it. A check that compared with a bare `==` would take it.

One mutant per function that an answer cell defines and a graded cell calls: the solution's
function, wrapped so that what it returns has its leaves (numbers, strings, tensors) replaced by
`unittest.mock.ANY`, recursively through lists, tuples and dicts. Only the outermost call is
changed (a wrapped function that another answer function calls gives it the real value), so each
check sees the replaced value of the function it called. Like every mutant, its graded cell must
fail (tests/test_course.py). `answers_wrong` replaces each leaf with a wrong value of its own type
instead (n + 1, x * 1.5 + 1, s + "?", t + 1, ~mask): the control that showed, when these mutants
were written, that every replaced function's value is checked at all."""
from __future__ import annotations

import ast
import re
import sys

import nbformat

from background import ROOT

sys.path.insert(0, str(ROOT / "autograder"))
from guarded_execute import cell_kind  # noqa: E402  (which cell is which, as the grader decides)

HELPERS = '''
import functools as _functools
import unittest.mock as _mock
import torch as _torch

_calls_in_progress = [0]


def _replaced(value):
    if type(value) in (list, tuple):
        return type(value)(_replaced(v) for v in value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_replaced(v) for v in value))
    if type(value) is dict:
        return {k: _replaced(v) for k, v in value.items()}
    if isinstance(value, (bool, int, float, str, _torch.Tensor)):
        return _leaf(value)
    return value


def _outermost_replaced(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _calls_in_progress[0] += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            _calls_in_progress[0] -= 1
        return result if _calls_in_progress[0] else _replaced(result)
    return wrapper
'''

LEAVES = {
    "answers_equal_anything": '''
def _leaf(value):
    return _mock.ANY
''',
    "answers_wrong": '''
def _leaf(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1
    if isinstance(value, str):
        return value + "?"
    if value.dtype == _torch.bool:
        return ~value
    return value + 1
''',
}


def mutants(assignment: str, leaf: str = "answers_equal_anything", returns_nothing: tuple = ()) -> dict:
    """{"<function> equal anything": {grade_id: source}}: one mutant per function that an answer
    cell defines and a graded cell calls, its answer cell changed so that the function returns
    values that equal everything (with `leaf="answers_wrong"`, wrong values: the control).
    `returns_nothing` names functions whose result holds no value to replace (they return None)."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    called = set(re.findall(r"\b\w+\b", " ".join(c.source for c in nb.cells if cell_kind(c) == "graded")))
    found = {}
    for cell in nb.cells:
        if cell_kind(cell) != "solution":
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in called and node.name not in returns_nothing:
                found[f"{node.name} {leaf.removeprefix('answers_').replace('_', ' ')}"] = {
                    grade_id: HELPERS + LEAVES[leaf] + cell.source + f"\n\n{node.name} = _outermost_replaced({node.name})\n"}
    assert found, f"{assignment}: no answer function that a graded cell calls"
    return found
