"""nbval, the way CI users run the notebooks: `pytest --nbval-lax solutions/` passes, with every
solution notebook collected and no cell failing. It runs in the background from the session's
start (tests/background.py), beside the other tests, rather than as items of this session."""
import re

import pytest

from background import NBVAL, ROOT

NOTEBOOKS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "solutions").glob("[0-9]*/*.ipynb"))


@pytest.mark.notebooks
def test_every_solution_notebook_passes_nbval(nbval):
    report = nbval.stdout + nbval.stderr
    assert nbval.returncode == 0, f"`pytest {' '.join(NBVAL[2:])}` failed:\n{report[-6000:]}"
    run = {line.split()[0] for line in nbval.stdout.splitlines() if line.endswith("]") and ".ipynb " in line}
    assert run == set(NOTEBOOKS), f"nbval ran {sorted(run)}, not every solution notebook {NOTEBOOKS}"
    assert re.search(r"\b\d+ passed\b", report) and not re.search(r"\b\d+ (failed|error)", report), report[-2000:]
