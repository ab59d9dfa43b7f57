"""Autograde every submission, then write feedback HTML and grades.csv.

Put submissions at ``autograder/submitted/<student>/<assignment>/<assignment>.ipynb`` and run
``make autograde``. One progress line per student and notebook shows how far grading got, and
how far the class has:

    [2/6] alice 00_welcome: 5 / 7 points (16 s)  lost: pass_right_tests 0/3  [2/6 done, 0:31 elapsed, about 1:02 left]

Options: ``--jobs N`` grades N submissions at a time (grading_pool.py; default: one more than the
cores, as far as memory allows);
``--student S`` / ``--assignment A`` grade a subset; ``--force`` regrades what was graded before
and has not changed since (otherwise kept); ``--shard K/N`` grades shard K of N of the class into
a gradebook of its own and ``--merge`` folds the shards into the course's (docs/grading.md, Grading a
class); ``--feedback-only`` skips autograding; ``--root DIR`` grades a course folder other than
this one (the tests use it); ``--no-sandbox`` grades without the sandbox of sandbox.py, which is
then said on every progress line and in grades.csv (its `sandbox` column). Without that opt-out,
grading stops before the first submission when no sandbox can start, and says how to get one.
The assignments are registered in the gradebook from ../solutions on every run, without
touching the committed ../course notebooks.

A submission folder that cannot be graded as it is (no notebook of the assignment's name, a
notebook that is not JSON, a folder named after no assignment) is named with what to do, the
rest of the class is graded, and the run exits 1.

nbgrader's commands run in long-lived processes (`Course`), not as one `nbgrader` process per
submission: importing nbgrader costs about 2 s of CPU, which a class of submissions paid each
time (docs/testing.md).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# jsonschema imports rfc3987_syntax when it is installed (Jupyter's packages install it) to check
# the "iri" format, and that module compiles a Lark grammar as it is imported: 2.5 s of CPU in
# the run and in every worker. Notebooks' JSON schema has no "iri" field, so the grader goes without.
sys.modules.setdefault("rfc3987_syntax", None)
from grading_records import graded_before, save_record  # noqa: E402
from shards import RunLocked, merge, parse_shard, shard_folder, shard_of, run_lock  # noqa: E402


class GradingError(RuntimeError):
    """An nbgrader command failed; the message ends with the last lines it logged."""


def alembic_head() -> str:
    """The revision a new gradebook is stamped with, as nbgrader's get_alembic_version finds it
    (the first word `alembic heads` prints), read in this process: nbgrader starts an `alembic`
    process for it, which imports nbgrader again, 4.6 s of CPU for each gradebook a run makes."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR
    return ScriptDirectory(ALEMBIC_DIR).get_current_head()


class Course:
    """nbgrader's commands on the course folder `root` (where nbgrader_config.py is)."""

    def __init__(self, root: str, sandbox: bool = True, book: str | None = None, workspace: str | None = None):
        """`book`: the gradebook to use instead of the course's. `workspace`: a grading worker's
        folder (grading_pool.py), which gets the gradebook, autograded/ and integrity/, while
        the submissions and source notebooks are read from the course."""
        import nbgrader.api
        from nbgrader.apps import NbGraderAPI
        from traitlets.config.loader import PyFileConfigLoader
        self.root = os.path.abspath(root)
        # nbgrader runs `alembic` from PATH when it creates a gradebook: this environment's.
        bin_dir = os.path.dirname(sys.executable)
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        nbgrader.api.get_alembic_version = alembic_head
        config = PyFileConfigLoader("nbgrader_config.py", path=self.root).load_config()
        config.CourseDirectory.root = self.root
        self.source = os.path.normpath(os.path.join(self.root, config.CourseDirectory.source_directory))
        self.submitted = os.path.join(self.root, config.CourseDirectory.submitted_directory)
        if workspace:
            config.CourseDirectory.source_directory = self.source
            config.CourseDirectory.submitted_directory = self.submitted
            config.CourseDirectory.root = workspace
            book = os.path.join(workspace, "gradebook.db")
        self.book = book or os.path.join(self.root, "gradebook.db")
        config.CourseDirectory.db_url = "sqlite:///" + self.book
        config.GuardedExecute.sandbox = sandbox
        self.api = NbGraderAPI(config=config)
        self.api.log.setLevel("WARN")

    def assignments(self) -> list[str]:
        """The assignments the course grades: the folders of its source notebooks."""
        return sorted(a for a in os.listdir(self.source) if self.notebooks(a))

    def notebooks(self, assignment: str) -> list[str]:
        folder = os.path.join(self.source, assignment)
        return sorted(n for n in os.listdir(folder) if n.endswith(".ipynb")) if os.path.isdir(folder) else []

    def gradebook(self):
        from nbgrader.api import Gradebook
        return Gradebook("sqlite:///" + self.book)

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

    def feedback(self, assignment: str, student: str | None = None) -> None:
        with _stderr_captured():
            self._check(f"generate_feedback {assignment}", self.api.generate_feedback(assignment, student, force=True))

    def export(self, path: str) -> None:
        """grades.csv, as `nbgrader export --to path` writes it."""
        from nbgrader.plugins import CsvExportPlugin
        with self.gradebook() as gb:
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
        for a in sorted(os.listdir(os.path.join(base, s))) if os.path.isdir(os.path.join(base, s)) else []:
            if os.path.isdir(os.path.join(base, s, a)) and student in (None, s) and assignment in (None, a):
                found.append((s, a))
    return found


def refusal(course: Course, student: str, assignment: str) -> str | None:
    """Why a submission folder cannot be graded as it is, and what to do; None when it can."""
    folder = os.path.join(course.submitted, student, assignment)
    shown = os.path.relpath(folder, course.root)
    known = course.assignments()
    if assignment not in known:
        return (f"{shown}/ is not an assignment of this course (they are {', '.join(known)}): "
                f"rename the folder to the assignment the student submitted")
    for name in course.notebooks(assignment):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            held = sorted(n for n in os.listdir(folder) if n.endswith(".ipynb"))
            return (f"{shown}/ has no {name}" + (f" (it holds {', '.join(held)})" if held else " (it holds no notebook)") +
                    ": put the student's notebook there under that name")
        try:
            with open(path, encoding="utf-8") as f:
                json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            return (f"{shown}/{name} is not a notebook (not JSON: {str(exc)[:80]}): ask the student for the "
                    f".ipynb file Jupyter saved, or remove the folder")
    return None


def score(gb, student: str, assignment: str) -> tuple[float, float, list[str]]:
    """(score, max score, the graded cells that lost points) of one submission."""
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


def summary(reasons: list[str], limit: int) -> str:
    """The guard's reasons, each once and in order, joined and cut at a reason's end to about
    `limit` characters: a submission stopped on every rank in every cell repeats one reason
    thousands of times (a 500 KB grades.csv field, measured), and the whole list stays in the
    integrity records (autograder/integrity/<student>/<assignment>/)."""
    unique = list(dict.fromkeys(reasons))
    shown, size = [], 0
    for reason in unique:
        if shown and size + len(reason) > limit:
            break
        shown.append(reason[:limit])
        size += len(reason) + 3
    more = len(unique) - len(shown)
    return " | ".join(shown) + (f" | and {more} more (see the integrity records)" if more else "")


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
        row["integrity"] = "FLAGGED: " + summary(verdict["reasons"], 2000) if verdict["flagged"] else ""
        row["sandbox"] = " + ".join(sorted(verdict["sandbox"])) or "not graded"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


MEMORY_PER_SUBMISSION = 3 * 2**30  # bytes: 07 trains on 8 ranks (about 3 GiB at its peak)


def usable_cores() -> int:
    """The cores this process may run on (a container's CPU set, where the OS says)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_jobs() -> int:
    """Submissions graded at a time: one more than the cores, as far as memory allows. A
    submission's ranks mostly wait on each other and on emulated device time, so one graded
    alone leaves part of a core idle: on 2 cores, 3 at a time was the fastest measured (docs/grading.md,
    Grading a class)."""
    cores = usable_cores()
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = (cores + 1) * MEMORY_PER_SUBMISSION
    return max(1, min(cores + 1, memory // MEMORY_PER_SUBMISSION))


def finish(course: Course, feedback: bool = False) -> None:
    """grades.csv with the guard's verdicts; with `feedback`, every submission's feedback written
    again first (the workers write it as they grade)."""
    from gradebook_copy import submissions_in
    if feedback:
        with course.gradebook() as gb:
            for assignment in sorted({a for _, a in submissions_in(gb)}):
                course.feedback(assignment)
    course.export(os.path.join(course.root, "grades.csv"))
    add_integrity_column(course.root, os.path.join(course.root, "grades.csv"))
    print(f"Grades: {os.path.join(course.root, 'grades.csv')}; feedback: {os.path.join(course.root, 'feedback')}/")


def grade_class(course: Course, todo: list[tuple[str, str]], jobs: int, sandbox: bool, folder: str) -> list[str]:
    """Grade `todo`, `jobs` at a time, with workers in `folder`; returns the submissions that
    could not be graded."""
    from class_progress import Progress
    from gradebook_copy import remove_submission, write_submission
    from grading_pool import Pool
    unsandboxed = "" if sandbox else "  UNSANDBOXED (--no-sandbox)"
    failed: list[str] = []
    progress = Progress(len(todo), time.monotonic())
    pool = Pool(min(jobs, len(todo)), course.root, course.book, sandbox, folder)
    waiting = list(reversed(todo))
    try:
        while waiting or pool.running:
            while waiting and pool.has_idle:
                pool.submit(*waiting.pop())
            done = pool.next_result()
            student, assignment, seconds = done["student"], done["assignment"], done["seconds"]
            progress.add(student, assignment, seconds)
            with course.gradebook() as gb:
                if done["error"] is None:
                    write_submission(gb, done["data"])
                    save_record(course, student, assignment, sandbox, seconds)
                    got, total, lost = score(gb, student, assignment)
                    detail = f"  lost: {', '.join(lost)}" if lost else ""
                    verdict = integrity(course.root, student, assignment)
                    if verdict["flagged"]:
                        detail += "  FLAGGED (tampering): " + summary(verdict["reasons"], 400)
                    line = f"{got:g} / {total:g} points ({seconds:.0f} s){detail}"
                else:
                    # One submission that breaks its kernel must not stop the class's grading.
                    remove_submission(gb, assignment, student)
                    last = [text for text in done["error"].splitlines() if text.strip()][-3:]
                    why = f"nbgrader could not grade it ({' / '.join(last)})"
                    save_ungraded(course.root, student, assignment, why, "bubblewrap" if sandbox else "none (--no-sandbox)")
                    failed.append(f"{student} {assignment}")
                    line = f"NOT GRADED, FLAGGED: {why[:300]}"
            n = len(progress.took)
            print(f"[{n}/{len(todo)}] {student} {assignment}: {line}{unsandboxed}  "
                  f"[{progress.status(time.monotonic())}]", flush=True)
            if n % 5 == 0 or n == len(todo):
                print(f"      slowest so far: {progress.slowest()}", flush=True)
    except BaseException:
        pool.close(now=True)
        raise
    pool.close()
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=HERE)
    parser.add_argument("--student")
    parser.add_argument("--assignment")
    parser.add_argument("--feedback-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"submissions graded at a time (default: one more than the cores, as memory allows; here {default_jobs()})")
    parser.add_argument("--force", action="store_true", help="regrade submissions graded before and unchanged since")
    parser.add_argument("--shard", type=parse_shard, metavar="K/N",
                        help="grade only shard K of N of the class, into shards/K-of-N/gradebook.db")
    parser.add_argument("--merge", action="store_true", help="fold the shards' gradebooks into the course's")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without a sandbox (recorded in the progress lines and grades.csv)")
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: grade at least one submission at a time")
    root = os.path.abspath(args.root)
    if args.merge:
        course = Course(root)
        register(course, course.assignments())
        try:
            missing = merge(course)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        finish(course)
        if missing:
            print(f"Shards not graded yet: {', '.join(missing)}; grade each with `grade.py --shard K/N`, then "
                  f"--merge again", file=sys.stderr)
            return 1
        return 0
    if args.feedback_only:
        finish(Course(root), feedback=True)
        return 0
    todo = submissions(root, args.student, args.assignment)
    if not todo:
        print(f"No submissions found under {os.path.join(root, 'submitted')}/<student>/<assignment>/")
        return 1
    try:  # the witness's C gate: there is no opt-out, since without it the witness's key can be read
        from nanoparallel.grading.guard import _gate_module
        _gate_module()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    sandbox = not args.no_sandbox
    if sandbox:
        from sandbox import SandboxUnavailable, check
        try:
            check()
        except SandboxUnavailable as exc:
            print(exc, file=sys.stderr)
            return 2
    folder = shard_folder(root, *args.shard) if args.shard else os.path.join(root, ".grading")
    course = Course(root, sandbox=sandbox, book=os.path.join(folder, "gradebook.db") if args.shard else None)
    try:
        with run_lock(folder, args.shard):
            return grade(course, todo, args, sandbox, folder)
    except RunLocked as exc:
        print(exc, file=sys.stderr)
        return 2


def register(course: Course, assignments) -> None:
    """Each assignment's graded cells go into the gradebook (a release into a scratch folder)."""
    with tempfile.TemporaryDirectory() as scratch:
        for assignment in sorted(assignments):
            course.release(assignment, into=scratch)


def grade(course: Course, todo: list[tuple[str, str]], args, sandbox: bool, folder: str) -> int:
    refused = []
    for student, assignment in todo:
        why = refusal(course, student, assignment)
        if why:
            refused.append((student, assignment))
            print(f"NOT GRADED: {why}", flush=True)
    todo = [t for t in todo if t not in refused]
    if args.shard:
        todo = [(s, a) for s, a in todo if shard_of(s, a, args.shard[1]) == args.shard[0]]
    register(course, {a for _, a in todo})
    if not args.force:
        with course.gradebook() as gb:
            before = [(s, a) for s, a in todo if graded_before(course, gb, s, a, sandbox)]
        if before:
            print(f"{len(before)} of {len(todo)} submissions were graded before and are unchanged since: "
                  f"kept (--force regrades them)", flush=True)
        todo = [t for t in todo if t not in before]
    jobs = args.jobs or default_jobs()
    try:
        failed = grade_class(course, todo, jobs, sandbox, folder) if todo else []
    except KeyboardInterrupt:
        print("Interrupted: every finished submission is saved; run the same command again to grade the rest.",
              file=sys.stderr, flush=True)
        return 130
    if args.shard:
        print(f"Shard {args.shard[0]}/{args.shard[1]} graded into {course.book}; `grade.py --merge` folds the shards "
              f"into the course's gradebook")
    else:
        finish(course)
    if failed:
        print(f"Not graded (see above; they have no score and are flagged in grades.csv): {', '.join(failed)}")
    if refused:
        print(f"Refused (see the NOT GRADED lines above; fix them and run again): "
              f"{', '.join(f'{s}/{a}' for s, a in refused)}")
        return 1
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed run stops its workers too
    sys.exit(main())
