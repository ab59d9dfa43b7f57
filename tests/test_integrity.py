"""Grading integrity: a hostile submission per notebook gains nothing and is flagged.

Every notebook's class holds `hostile` (tests/hostile.py): stubs plus every route outside the
cells (the gradebook, the grader's files, other submissions, the network, a process that outlives
the kernel, files shipped next to the notebook), nbgrader's partial-credit rule, forged cell
metadata and a look at the environment. It is graded by `autograder/grade.py`, in its sandbox,
like any class. The tampering corpus, wrong answers that pair with a way around the checks inside
the kernel and its ranks, is tests/test_tampering.py; solutions, blank notebooks and mutants
must never be flagged (tests/test_course.py and tests/test_wrong_answer_graded.py check that on
their own round trips).

Marked `grader` (`make test-grader`, with the tampering corpus): the sandbox's walls one by one are
in `make test` (tests/test_sandbox.py), and this is the grader's own hard case, every route at once
on every notebook (docs/testing.md, "Two tiers").
"""
from __future__ import annotations

import csv
import json
import os
import socket
import threading

import nbformat
import pytest

import hostile
from background import ROOT
from ports import free_port
from test_course import ASSIGNMENTS


class Listener:
    """A TCP server on the grading machine's loopback that keeps whatever reaches it."""

    def __init__(self):
        self.port = free_port()
        self.received: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            connection, _ = self.server.accept()
            with connection:
                self.received.append(connection.recv(65536))


LISTENER = Listener()


def submissions(assignment: str) -> dict:
    """The hostile submission, graded in `assignment`'s class."""
    return {"hostile": hostile.submission(assignment, LISTENER.port)}


def _marked_processes(assignment: str) -> list[str]:
    """This class's writers still running, each with what says where it lives."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if hostile.marker(assignment).encode() in argv:
            found.append(f"{pid} ({_where(pid)})")
    return found


def _where(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cgroup") as f:
            cgroup = f.read().strip().replace("\n", " ")
    except OSError:
        return "gone"
    return f"ppid {status['PPid'].strip()}, pids by namespace {status.get('NSpid', '?').strip()}, cgroup {cgroup}"


@pytest.mark.notebooks
@pytest.mark.grader
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hostile_submission_gains_nothing(graded, assignment):
    done = graded(assignment)
    root = done.root
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        sub = gb.find_submission(assignment, "hostile")
        got = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades if g.max_score}
    earned = {name: score for name, (score, _) in got.items() if score}
    assert got and not earned, f"the hostile submission (stubs) earned points: {earned}"
    # Nothing it started is still running, and nothing reached the grading machine's network.
    left = _marked_processes(assignment)
    assert not left, f"processes the hostile submission started outlived its grading: pids {left}"
    assert not LISTENER.received, f"a submission reached the grading machine's network: {LISTENER.received[:3]}"
    # The grader's files and the submitted notebooks are as the test wrote them.
    for path in sorted((root / "submitted").rglob("*")) + sorted(root.glob("*.py")):
        if path.is_file():
            assert "hostile-submission-was-here" not in path.read_text(errors="replace"), f"{path} was written to"
    for path in (ROOT / "autograder").glob("*.py"):
        assert (root / path.name).read_text() == path.read_text(), f"the grader's {path.name} changed"
    # It was flagged (the forged metadata, the value shown for nbgrader's partial credit), and ran sandboxed.
    progress = next(line for line in done.stdout.splitlines() if line.startswith("[") and " hostile " in line)
    assert "FLAGGED" in progress and "UNSANDBOXED" not in progress, progress
    with open(root / "grades.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["student_id"] == "hostile")
    assert row["integrity"].startswith("FLAGGED") and row["sandbox"] == "bubblewrap", row
    # What it could see of its environment: nothing that says nbgrader runs it, none of the files
    # shipped next to the notebook, and not the grader's home.
    nb = nbformat.read(root / "autograded" / "hostile" / assignment / f"{assignment}.ipynb", as_version=4)
    probe = next(o["text"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if o.get("output_type") == "stream" and hostile.PROBE in o.get("text", ""))
    seen = json.loads(probe.split(hostile.PROBE, 1)[1])
    assert not [k for k in seen["env"] if k.startswith(("NBGRADER", "JUPYTER"))], seen["env"]
    assert seen["files"] == [], f"the kernel's folder holds files: {seen['files']}"
