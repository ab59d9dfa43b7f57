"""Autograde every submission, then write feedback HTML and grades.csv.

Put submissions at ``autograder/submitted/<student>/<assignment>/<assignment>.ipynb`` and run
``make autograde``. One progress line per student and notebook shows how far grading got:

    [2/6] alice 00_welcome: 5.0 / 7.0 points (16 s)  lost: pass_right_tests 0/3

Options: ``--student S`` / ``--assignment A`` grade a subset; ``--feedback-only`` skips
autograding; ``--root DIR`` grades a course folder other than this one (the tests use it);
``--no-sandbox`` grades without the sandbox of sandbox.py, which is then said on every progress
line and in grades.csv (its `sandbox` column). Without that opt-out, grading stops before the first
submission when no sandbox can start, and says how to get one.
The assignments are registered in the gradebook from ../solutions on every run, without
touching the committed ../course notebooks.

nbgrader's commands run in this process (`Course`), not as one `nbgrader` process per
submission: importing nbgrader costs about 2 s of CPU, which a class of submissions paid each
time (README, Tests and benchmarks).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class GradingError(RuntimeError):
    """An nbgrader command failed; the message ends with the last lines it logged."""


class Course:
    """nbgrader's commands on the course folder `root` (where nbgrader_config.py is)."""

    def __init__(self, root: str, sandbox: bool = True):
        from nbgrader.apps import NbGraderAPI
        from traitlets.config.loader import PyFileConfigLoader
        self.root = os.path.abspath(root)
        # nbgrader runs `alembic` from PATH when it creates a gradebook: this environment's.
        bin_dir = os.path.dirname(sys.executable)
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        config = PyFileConfigLoader("nbgrader_config.py", path=self.root).load_config()
        config.CourseDirectory.root = self.root
        config.GuardedExecute.sandbox = sandbox
        self.api = NbGraderAPI(config=config)
        self.api.log.setLevel("WARN")

    def release(self, assignment: str, into: str | None = None) -> None:
        """generate_assignment: the student version, into ../course or the folder `into`."""
        coursedir = self.api.coursedir
        default = coursedir.release_directory
        coursedir.release_directory = into or default
        try:
            self._check(f"generate_assignment {assignment}", self.api.generate_assignment(assignment))
        finally:
            coursedir.release_directory = default

    def autograde(self, student: str, assignment: str) -> None:
        # A kernel writes to the inherited stderr (its start-up warnings, or why it died):
        # kept out of the progress lines, and the end of it is in the error if grading fails.
        with _stderr_captured() as stderr:
            result = self.api.autograde(assignment, student, force=True, create=True)
        self._check(f"autograde {assignment} --student {student}", result, "".join(stderr))

    def feedback(self, assignment: str) -> None:
        with _stderr_captured():
            self._check(f"generate_feedback {assignment}", self.api.generate_feedback(assignment, force=True))

    def export(self, path: str) -> None:
        """grades.csv, as `nbgrader export --to path` writes it."""
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin
        with Gradebook(self.api.coursedir.db_url) as gb:
            CsvExportPlugin(to=path).export(gb)

    @staticmethod
    def _check(what: str, result: dict, stderr: str = "") -> None:
        if not result["success"]:
            raise GradingError(f"nbgrader {what} failed:\n{result.get('log') or ''}\n"
                               f"{result.get('error') or ''}\n{stderr}")


@contextlib.contextmanager
def _stderr_captured():
    """Point file descriptor 2 (ours and what our children inherit) at a temporary file;
    yields a list that holds what was written there once the block ends."""
    text: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text.append(capture.read())


def submissions(root: str, student: str | None, assignment: str | None) -> list[tuple[str, str]]:
    base = os.path.join(root, "submitted")
    found = []
    for s in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for a in sorted(os.listdir(os.path.join(base, s))):
            if os.path.isdir(os.path.join(base, s, a)) and student in (None, s) and assignment in (None, a):
                found.append((s, a))
    return found


def score(root: str, student: str, assignment: str) -> tuple[float, float, list[str]]:
    """(score, max score, the graded cells that lost points) of one submission."""
    from nbgrader.api import Gradebook
    with Gradebook("sqlite:///" + os.path.join(root, "gradebook.db")) as gb:
        submission = gb.find_submission(assignment, student)
        lost = [f"{g.name} {g.score:g}/{g.max_score:g}"
                for nb in submission.notebooks for g in nb.grades
                if g.max_score and g.score < g.max_score]
        return submission.score, submission.max_score, lost


def integrity(root: str, student: str, assignment: str) -> dict:
    """The guard's verdict on one submission (guarded_execute.py writes it while grading)."""
    folder = os.path.join(root, "integrity", student, assignment)
    verdict = {"flagged": False, "reasons": [], "sandbox": set()}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name)) as f:
            found = json.load(f)
        verdict["flagged"] |= found["flagged"]
        verdict["reasons"] += found["reasons"]
        verdict["sandbox"].add(found.get("sandbox", "unknown"))
    return verdict


def save_ungraded(root: str, student: str, assignment: str, why: str, sandbox: str) -> None:
    folder = os.path.join(root, "integrity", student, assignment)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "not_graded.json"), "w") as f:
        json.dump({"flagged": True, "reasons": [why], "cells": {}, "sandbox": sandbox}, f, indent=1)


def add_integrity_column(root: str, path: str) -> None:
    """grades.csv gains `integrity` (empty, or why the guard flagged that submission) and `sandbox`
    (what the submission ran in: bubblewrap, or none when the instructor opted out)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    for row in rows:
        verdict = integrity(root, row["student_id"], row["assignment"])
        row["integrity"] = "FLAGGED: " + " | ".join(verdict["reasons"]) if verdict["flagged"] else ""
        row["sandbox"] = " + ".join(sorted(verdict["sandbox"])) or "not graded"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=HERE)
    parser.add_argument("--student")
    parser.add_argument("--assignment")
    parser.add_argument("--feedback-only", action="store_true")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without a sandbox (recorded in the progress lines and grades.csv)")
    args = parser.parse_args(argv)
    todo = submissions(args.root, args.student, args.assignment)
    if not todo:
        print(f"No submissions found under {os.path.join(args.root, 'submitted')}/<student>/<assignment>/")
        return 1
    failed: list[str] = []
    unsandboxed = "  UNSANDBOXED (--no-sandbox)" if args.no_sandbox else ""
    if not args.no_sandbox and not args.feedback_only:
        sys.path.insert(0, HERE)
        from sandbox import SandboxUnavailable, check
        try:
            check()
        except SandboxUnavailable as exc:
            print(exc, file=sys.stderr)
            return 2
    course = Course(args.root, sandbox=not args.no_sandbox)
    if not args.feedback_only:
        # Each assignment's graded cells go into the gradebook (a release into a scratch folder).
        with tempfile.TemporaryDirectory() as scratch:
            for assignment in sorted({a for _, a in todo}):
                course.release(assignment, into=scratch)
        for i, (student, assignment) in enumerate(todo, 1):
            start = time.monotonic()
            # A verdict left by an earlier grading of this submission is not this one's.
            shutil.rmtree(os.path.join(args.root, "integrity", student, assignment), ignore_errors=True)
            try:
                course.autograde(student, assignment)
            except GradingError as exc:
                # One submission that breaks its kernel must not stop the class's grading.
                last = [line for line in str(exc).splitlines() if line.strip()][-3:]
                why = f"nbgrader could not grade it ({' / '.join(last)})"
                save_ungraded(args.root, student, assignment, why,
                              "none (--no-sandbox)" if args.no_sandbox else "bubblewrap")
                failed.append(f"{student} {assignment}")
                print(f"[{i}/{len(todo)}] {student} {assignment}: NOT GRADED, FLAGGED: {why[:300]}{unsandboxed}",
                      flush=True)
                continue
            got, total, lost = score(args.root, student, assignment)
            detail = f"  lost: {', '.join(lost)}" if lost else ""
            verdict = integrity(args.root, student, assignment)
            if verdict["flagged"]:
                detail += "  FLAGGED (tampering): " + " | ".join(verdict["reasons"])[:400]
            print(f"[{i}/{len(todo)}] {student} {assignment}: {got:g} / {total:g} points "
                  f"({time.monotonic() - start:.0f} s){detail}{unsandboxed}", flush=True)
    for assignment in sorted({a for _, a in todo}):
        course.feedback(assignment)
    course.export(os.path.join(args.root, "grades.csv"))
    add_integrity_column(args.root, os.path.join(args.root, "grades.csv"))
    print(f"Grades: {os.path.join(args.root, 'grades.csv')}; feedback: {os.path.join(args.root, 'feedback')}/")
    if failed:
        print(f"Not graded (see above; they have no score and are flagged in grades.csv): {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
