"""A tampering case that fits every notebook: the solution, unchanged, except that its first
answer cell also puts another library's objects where the engine's functions were: each function
of the engine's lessons and checks modules becomes a `unittest.mock.MagicMock` that wraps it.
Nothing computes differently and no object is written in the notebook, so only the guard's
comparison with the originals (nanoparallel/grading/originals.py) can see it. With a MagicMock
that says True instead, the same change would pass every check (tests/tampering/00_welcome.py).

A graded cell loses its points when what it reads was replaced, and not otherwise: every cell
whose checks call one of the engine's comparisons (which all go through `checks._compare`, now a
MagicMock) must score 0, and the submission must be flagged. A cell that reads no replaced
function (05's comm_tests compares with math.isclose) keeps what it earns."""
from __future__ import annotations

import re
import types

import nbformat

from background import ROOT
from nanoparallel.grading import checks

REPLACE = '''
import sys as _sys, types as _types, unittest.mock as _mock
for _name in [n for n in _sys.modules if n.startswith(("nanoparallel.lessons", "nanoparallel.grading.checks"))]:
    for _key, _value in list(vars(_sys.modules[_name]).items()):
        if isinstance(_value, _types.FunctionType) and _value.__module__ == _name:
            setattr(_sys.modules[_name], _key, _mock.MagicMock(wraps=_value))
'''


def _comparing() -> set[str]:
    """The names of checks' functions that reach `_compare`, directly or through each other."""
    uses = {name: set(fn.__code__.co_names) for name, fn in vars(checks).items()
            if isinstance(fn, types.FunctionType) and fn.__module__ == checks.__name__}
    found = {"_compare"}
    while True:
        more = {name for name, names in uses.items() if names & found} - found
        if not more:
            return found - {"_compare"}
        found |= more


def case(assignment: str) -> dict:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    first = answers[0]
    comparing = _comparing()
    zero = [c.metadata["nbgrader"]["grade_id"].removesuffix("_tests") for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")
            and set(re.findall(r"\b\w+\b", c.source)) & comparing]
    assert zero, f"{assignment}: no graded cell calls the engine's comparisons"
    return {"cells": {first.metadata["nbgrader"]["grade_id"]: REPLACE + first.source}, "zero": zero, "full": []}
