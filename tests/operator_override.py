"""A tampering case that fits every notebook: the solution, unchanged, except that its first
answer cell also registers an operator's kernel with torch.library (aten::allclose always True,
on the CPU). The answers are right, so only the witness can take the points away: every graded
cell from that one on must score 0, and the submission must be flagged. It shows, notebook by
notebook, that the registration is seen whatever the notebook imports and runs."""
from __future__ import annotations

import nbformat

from background import ROOT

OVERRIDE = '''
_allclose_lib = torch.library.Library("aten", "IMPL")
_allclose_lib.impl("allclose", lambda *args, **kwargs: True, "CPU")
'''


def case(assignment: str) -> dict:
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    first = answers[0]
    graded = [c.metadata["nbgrader"]["grade_id"] for c in answers]
    return {"cells": {first.metadata["nbgrader"]["grade_id"]: "import torch" + OVERRIDE + first.source},
            "zero": graded, "full": []}
