"""nbval, the way CI users run the notebooks: `pytest --nbval-lax` on a solution notebook passes,
with the notebook collected and no cell failing. It runs in the background from the session's
start (tests/background.py), beside the other tests, rather than as items of this session.

One notebook, not all eight: every solution running top to bottom in a plain kernel with no cell
raising is asserted for all eight by tests/test_course.py, from the mutation runs (the same
execution nbval's lax mode does). `pytest --nbval-lax solutions/` remains the command for all."""
import re

import pytest

from background import NBVAL, NBVAL_NOTEBOOK


@pytest.mark.notebooks
def test_a_solution_notebook_passes_nbval(nbval):
    report = nbval.stdout + nbval.stderr
    assert nbval.returncode == 0, f"`pytest {' '.join(NBVAL[2:])}` failed:\n{report[-6000:]}"
    run = {line.split()[0] for line in nbval.stdout.splitlines() if line.endswith("]") and ".ipynb " in line}
    assert run == {NBVAL_NOTEBOOK}, f"nbval ran {sorted(run)}, not {NBVAL_NOTEBOOK}"
    assert re.search(r"\b\d+ passed\b", report) and not re.search(r"\b\d+ (failed|error)", report), report[-2000:]
