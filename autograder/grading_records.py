"""What a grading run leaves to resume from: a record per graded submission, with what its grade
depends on (its fingerprint) and the gradebook that holds it.

A submission is graded again when it has no record, when its fingerprint changed (the submitted
files, the assignment's source notebook, the sandbox setting) or when the gradebook the run
writes does not hold it. The record is written after the grade is committed, so a run stopped
between the two grades that submission again: nothing is ever half-written, at worst done twice.
`course` is grade.py's Course (its root, submitted and source folders, and its gradebook `book`).
"""
from __future__ import annotations

import hashlib
import json
import os


def fingerprint(course, student: str, assignment: str, sandbox: bool) -> str:
    """What a grade depends on: the submitted files, the assignment's source notebooks (its
    checks) and whether it ran in the sandbox. A change to any of them makes the grade stale."""
    digest = hashlib.sha256(f"sandbox={sandbox}".encode())
    for label, folder in (("submitted", os.path.join(course.submitted, student, assignment)),
                          ("source", os.path.join(course.source, assignment))):
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                digest.update(f"{label}/{os.path.relpath(path, folder)}\0".encode())
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def record_path(root: str, student: str, assignment: str) -> str:
    """Where a finished grading is recorded, with the fingerprint it was graded at."""
    return os.path.join(root, ".grading", "records", student, f"{assignment}.json")


def graded_before(course, gb, student: str, assignment: str, sandbox: bool) -> bool:
    """Graded into this run's gradebook, and unchanged since."""
    from nbgrader.api import MissingEntry
    try:
        with open(record_path(course.root, student, assignment)) as f:
            record = json.load(f)
        gb.find_submission(assignment, student)
    except (OSError, ValueError, MissingEntry):
        return False
    return (record.get("fingerprint") == fingerprint(course, student, assignment, sandbox)
            and record.get("book") == _book(course))


def _write(path: str, record: dict) -> None:
    """Whole (a rename) or not at all."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".new", "w") as f:
        json.dump(record, f)
    os.replace(path + ".new", path)


def _book(course) -> str:
    return os.path.relpath(course.book, course.root)


def save_record(course, student: str, assignment: str, sandbox: bool, seconds: float) -> None:
    """Written once the grade is in the gradebook."""
    _write(record_path(course.root, student, assignment),
           {"fingerprint": fingerprint(course, student, assignment, sandbox), "book": _book(course),
            "seconds": round(seconds, 1)})


def move_to(course, student: str, assignment: str) -> None:
    """The record now names `course`'s gradebook (grade.py --merge moved the grade there)."""
    path = record_path(course.root, student, assignment)
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        _write(path, dict(saved, book=_book(course)))
