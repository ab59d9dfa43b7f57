"""One submission's grades, taken out of one nbgrader gradebook and written into another.

Parallel grading gives each worker a gradebook of its own (SQLite has one writer at a time, and
nbgrader commits after every cell), and each shard of a class graded across machines has one
too. What a submission's grading leaves in its gradebook is copied into the course's gradebook
by one writer, the grading run itself (`grade.py`), as one transaction: a run stopped at any
moment leaves each submission either as it was or wholly graded, never half-written.
"""
from __future__ import annotations

import contextlib
import warnings

STUDENT_FIELDS = ("first_name", "last_name", "email", "lms_user_id")


def read_submission(gb, assignment: str, student: str) -> dict:
    """Everything grading wrote for one submission, as plain data (it travels between processes)."""
    sub = gb.find_submission(assignment, student)
    who = gb.find_student(student)
    return {
        "assignment": assignment,
        "student": student,
        "student_fields": {f: getattr(who, f) for f in STUDENT_FIELDS},
        "timestamp": sub.timestamp.isoformat() if sub.timestamp else None,
        "extension": sub.extension.total_seconds() if sub.extension else None,
        "notebooks": [{
            "name": nb.name,
            "flagged": nb.flagged,
            "late_submission_penalty": nb.late_submission_penalty,
            "grades": [{"name": g.name, "auto_score": g.auto_score, "manual_score": g.manual_score,
                        "extra_credit": g.extra_credit, "needs_manual_grade": g.needs_manual_grade}
                       for g in nb.grades],
            "comments": [{"name": c.name, "auto_comment": c.auto_comment, "manual_comment": c.manual_comment}
                         for c in nb.comments],
        } for nb in sub.notebooks],
    }


@contextlib.contextmanager
def one_transaction(gb):
    """nbgrader's Gradebook commits inside each method; within this block those commits only
    flush (and expire what they would have expired, so that relationships are read again), and
    the block commits once at its end (or rolls everything back)."""
    session = gb.db

    def flush():
        session.flush()
        session.expire_all()
    session.commit = flush
    try:
        yield gb
    except BaseException:
        del session.commit
        session.rollback()
        raise
    del session.commit
    session.commit()


def write_submission(gb, data: dict) -> None:
    """Replace whatever `gb` holds for this submission by `data` (from `read_submission`)."""
    import datetime

    from nbgrader.api import MissingEntry
    assignment, student = data["assignment"], data["student"]
    with one_transaction(gb):
        gb.update_or_create_student(student, **data["student_fields"])
        with contextlib.suppress(MissingEntry):
            gb.remove_submission(assignment, student)
        timestamp = datetime.datetime.fromisoformat(data["timestamp"]) if data["timestamp"] else None
        extension = datetime.timedelta(seconds=data["extension"]) if data["extension"] is not None else None
        with warnings.catch_warnings():
            # nbgrader's add_submission reads relationships before adding the new row, which
            # SQLAlchemy warns about (SAWarning) on every call, inside nbgrader's autograde too.
            warnings.simplefilter("ignore")
            gb.add_submission(assignment, student, timestamp=timestamp, extension=extension)
        for nb in data["notebooks"]:
            submitted = gb.find_submission_notebook(nb["name"], assignment, student)
            submitted.flagged = nb["flagged"]
            submitted.late_submission_penalty = nb["late_submission_penalty"]
            for g in nb["grades"]:
                grade = gb.find_grade(g["name"], nb["name"], assignment, student)
                for field in ("auto_score", "manual_score", "extra_credit", "needs_manual_grade"):
                    setattr(grade, field, g[field])
            for c in nb["comments"]:
                comment = gb.find_comment(c["name"], nb["name"], assignment, student)
                comment.auto_comment, comment.manual_comment = c["auto_comment"], c["manual_comment"]


def remove_submission(gb, assignment: str, student: str) -> None:
    """What an earlier grading left for a submission that could not be graded this time."""
    from nbgrader.api import MissingEntry
    with contextlib.suppress(MissingEntry), one_transaction(gb):
        gb.remove_submission(assignment, student)


def submissions_in(gb) -> list[tuple[str, str]]:
    """(student, assignment) of every submission a gradebook holds."""
    return sorted((sub.student_id, assignment.name) for assignment in gb.assignments for sub in assignment.submissions)
