"""Autograde every submission, then write feedback HTML and grades.csv.

Put submissions at ``autograder/submitted/<student>/<assignment>/<assignment>.ipynb`` and run
``make autograde``. One progress line per student and notebook shows how far grading got:

    [2/6] alice 00_welcome: 5.0 / 7.0 points (16 s)  lost: pass_right_tests 0/3

Options: ``--student S`` / ``--assignment A`` grade a subset; ``--feedback-only`` skips
autograding; ``--root DIR`` grades a course folder other than this one (the tests use it).
The assignments are registered in the gradebook from ../solutions on every run, without
touching the committed ../course notebooks.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def nbgrader(root: str, *args: str) -> None:
    """Run one nbgrader command in `root`; raise with its log if it fails."""
    exe = os.path.join(os.path.dirname(sys.executable), "nbgrader")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run([exe, *args, "--log-level=WARN"], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def submissions(root: str, student: str | None, assignment: str | None) -> list[tuple[str, str]]:
    base = os.path.join(root, "submitted")
    found = []
    for s in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for a in sorted(os.listdir(os.path.join(base, s))):
            if os.path.isdir(os.path.join(base, s, a)) and student in (None, s) and assignment in (None, a):
                found.append((s, a))
    return found


def register(root: str, assignments: set[str]) -> None:
    """Record each assignment's graded cells in the gradebook (a release into a scratch folder)."""
    with tempfile.TemporaryDirectory() as scratch:
        for a in sorted(assignments):
            nbgrader(root, "generate_assignment", a, "--force",
                     f"--CourseDirectory.release_directory={scratch}")


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
    verdict = {"flagged": False, "reasons": []}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name)) as f:
            found = json.load(f)
        verdict["flagged"] |= found["flagged"]
        verdict["reasons"] += found["reasons"]
    return verdict


def save_ungraded(root: str, student: str, assignment: str, why: str) -> None:
    folder = os.path.join(root, "integrity", student, assignment)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "not_graded.json"), "w") as f:
        json.dump({"flagged": True, "reasons": [why], "cells": {}}, f, indent=1)


def add_integrity_column(root: str, path: str) -> None:
    """grades.csv gains `integrity`: empty, or why the guard flagged that submission."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    for row in rows:
        verdict = integrity(root, row["student_id"], row["assignment"])
        row["integrity"] = "FLAGGED: " + " | ".join(verdict["reasons"]) if verdict["flagged"] else ""
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
    args = parser.parse_args(argv)
    todo = submissions(args.root, args.student, args.assignment)
    if not todo:
        print(f"No submissions found under {os.path.join(args.root, 'submitted')}/<student>/<assignment>/")
        return 1
    failed: list[str] = []
    if not args.feedback_only:
        register(args.root, {a for _, a in todo})
        for i, (student, assignment) in enumerate(todo, 1):
            start = time.monotonic()
            try:
                nbgrader(args.root, "autograde", assignment, "--student", student, "--create", "--force")
            except RuntimeError as exc:
                # One submission that breaks its kernel must not stop the class's grading.
                last = [line for line in str(exc).splitlines() if line.strip()][-3:]
                why = f"nbgrader could not grade it ({' / '.join(last)})"
                save_ungraded(args.root, student, assignment, why)
                failed.append(f"{student} {assignment}")
                print(f"[{i}/{len(todo)}] {student} {assignment}: NOT GRADED, FLAGGED: {why[:300]}", flush=True)
                continue
            got, total, lost = score(args.root, student, assignment)
            detail = f"  lost: {', '.join(lost)}" if lost else ""
            verdict = integrity(args.root, student, assignment)
            if verdict["flagged"]:
                detail += "  FLAGGED (tampering): " + " | ".join(verdict["reasons"])[:400]
            print(f"[{i}/{len(todo)}] {student} {assignment}: {got:g} / {total:g} points "
                  f"({time.monotonic() - start:.0f} s){detail}", flush=True)
    for assignment in sorted({a for _, a in todo}):
        nbgrader(args.root, "generate_feedback", assignment, "--force")
    nbgrader(args.root, "export", "--to", os.path.join(args.root, "grades.csv"))
    add_integrity_column(args.root, os.path.join(args.root, "grades.csv"))
    print(f"Grades: {os.path.join(args.root, 'grades.csv')}; feedback: {os.path.join(args.root, 'feedback')}/")
    if failed:
        print(f"Not graded (see above; they have no score and are flagged in grades.csv): {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
