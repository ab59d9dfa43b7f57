"""The suite's slowest work, run in the background from the session's first test.

That work is subprocesses that each keep about half a core busy (kernels and ranks start,
ranks wait on each other, demonstrations sleep):
- autograde round trips: `make autograde` (`autograder/grade.py`) of each assignment's class
  of submissions, in a course folder (and gradebook) of its own;
- each assignment's mutants, tried in one kernel (tests/mutation_run.py);
- nbval over one solution notebook, the way CI users run the notebooks.
The session starts them all at once, BACKGROUND_JOBS at a time, biggest first, and the engine
and browser tests run meanwhile; a test blocks only on the job it reads. Measurements:
docs/testing.md.

A test module takes part in grading by defining ``submissions(assignment) -> {student:
notebook or (notebook, {file name: text shipped next to it})}`` and tests that are parametrized
by ``assignment`` and take the ``graded`` fixture; every module's students of one assignment are
graded as one class. A test that takes the ``mutated`` fixture gets the mutants' trials, and one
that takes ``nbval`` gets nbval's run (conftest.py).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
sys.path.insert(0, str(ROOT / "autograder"))
from grade import usable_cores  # noqa: E402


def default_jobs(cores: int) -> int:
    """Background jobs at a time: one per core but the one the foreground's tests keep busy (each
    job keeps about one core busy: benchmarks/suite_budget.py), and never fewer than two, which
    measured best on two cores (three: processes whose ranks hand work to each other every few
    milliseconds slow down far more than their CPU share; docs/testing.md)."""
    return max(2, cores - 1)


BACKGROUND_JOBS = int(os.environ.get("NANOPARALLEL_BACKGROUND_JOBS", default_jobs(usable_cores())))
# The suite keeps both cores busy, so a run may take longer than a learner's 10 s deadline
# without being stuck: the suite's kernels (background jobs, the browser's JupyterLab) get 30 s.
# A deadlock is still stopped in seconds: grading kernels call a run a deadlock once every
# unfinished rank has waited 2 s in a torch.distributed call using almost no CPU (the engine's tests
# check both ways of stopping).
BUSY_MACHINE = {"NANOPARALLEL_TIMEOUT": "30"}
STALL_SECONDS = "2"
# nbval over one notebook shows that the plugin runs the course's notebooks as CI users run them;
# that every solution runs top to bottom in a plain kernel, with no cell raising, is what each
# notebook's mutation run shows (tests/mutation_run.py: the same execution, plus the mutants'
# trials), so nbval over all eight would run each solution a fourth time for nothing new.
NBVAL_NOTEBOOK = "solutions/00_welcome/00_welcome.ipynb"
NBVAL = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.nbval_over_ipc", "--nbval-lax", "--nbval-current-env",
         "--nbval-cell-timeout=120", NBVAL_NOTEBOOK]


def new_course_folder(root: Path) -> Path:
    """A throwaway course folder: our nbgrader setup, the real solutions, a scratch gradebook."""
    (root / "autograder").mkdir(parents=True)
    for path in (ROOT / "autograder").glob("*.py"):
        shutil.copy(path, root / "autograder")
    (root / "solutions").symlink_to(ROOT / "solutions")
    (root / "course").mkdir()
    return root


def write_class(root: Path, assignment: str, students: dict) -> Path:
    """A course folder at `root` (new_course_folder) holding each student's submission: a notebook,
    or (notebook, {file name: text}) for files that travel next to it. Returns its autograder folder."""
    new_course_folder(root)
    for student, submitted in students.items():
        nb, files = submitted if isinstance(submitted, tuple) else (submitted, {})
        folder = root / "autograder" / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
        for name, text in files.items():
            (folder / name).write_text(text)
    return root / "autograder"


def grade_command(autograder: Path, assignment: str, *options: str) -> list[str]:
    """`autograder/grade.py` on one assignment of the course folder `autograder`, one at a time."""
    return [sys.executable, str(ROOT / "autograder" / "grade.py"), "--root", str(autograder),
            "--assignment", assignment, "--jobs", "1", *options]


class Finished:
    """A job's outcome: `root` (for a round trip, the autograder folder it graded in), the
    command's exit code and what it printed."""

    def __init__(self, root: Path | None, returncode: int, stdout: str, stderr: str, seconds: float = 0.0):
        self.root, self.returncode, self.stdout, self.stderr = root, returncode, stdout, stderr
        self.seconds = seconds


class Background:
    """Jobs keyed by name, run `jobs` at a time; `base` holds the round trips' course folders."""

    def __init__(self, base: Path, jobs: int = BACKGROUND_JOBS):
        from nanoparallel.runtime.cluster import STALL_ENV
        self.base = base
        self.grading_env = dict(os.environ, **BUSY_MACHINE, **{STALL_ENV: STALL_SECONDS})
        self.pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="background")
        self.runs: dict[tuple, object] = {}
        self.running: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.closed = False

    def start(self, classes: dict[str, dict], mutated: list[str], nbval: bool) -> None:
        """Queue nbval (if asked), the mutants of each assignment in `mutated`
        (tests/mutation_run.py), and one round trip per assignment -> {student: notebook}; the
        longest first, so that the last to finish is a short one."""
        if nbval:
            self.runs["nbval"] = self.pool.submit(self._run, [sys.executable, *NBVAL], None, dict(os.environ, **BUSY_MACHINE))
        for assignment, students in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            self.runs["class", assignment] = self.pool.submit(self._grade, assignment, students)
        for assignment in mutated:
            self.runs["mutants", assignment] = self.pool.submit(
                self._run, [sys.executable, str(ROOT / "tests" / "mutation_run.py"), assignment], None, self.grading_env)

    def result(self, key) -> Finished:
        return self.runs[key].result()

    def close(self) -> None:
        """Drop what has not started and stop what has (an interrupted session orphans nothing)."""
        with self.lock:
            self.closed = True
            for process in self.running:
                os.killpg(process.pid, signal.SIGKILL)
        self.pool.shutdown(cancel_futures=True)

    def _grade(self, assignment: str, students: dict) -> Finished:
        autograder = write_class(self.base / assignment, assignment, students)
        return self._run(grade_command(autograder, assignment), autograder, self.grading_env)

    def _run(self, command: list[str], root: Path | None, env: dict) -> Finished:
        start = time.monotonic()
        with self.lock:
            if self.closed:
                return Finished(root, -1, "", "the session ended before this job started")
            # A process group of its own, so that close() can stop it and what it started.
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
            self.running.add(process)
        stdout, stderr = process.communicate()
        with self.lock:
            self.running.discard(process)
        return Finished(root, process.returncode, stdout, stderr, time.monotonic() - start)

    def timings(self) -> list[str]:
        """Each finished job and how long it ran (tests only show how long they waited for it)."""
        done = [(key, run.result()) for key, run in self.runs.items() if run.done() and not run.cancelled()]
        return [f"{' '.join(key) if isinstance(key, tuple) else key}: {job.seconds:.0f} s"
                for key, job in sorted(done, key=lambda kv: -kv[1].seconds)]
