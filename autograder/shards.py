"""Grading a class across machines: shard K of N grades its share into a gradebook of its own,
and the merge folds the shards' gradebooks into the course's. Also the lock that lets one run
at a time write a gradebook (a shard's, or the course's)."""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os


class RunLocked(RuntimeError):
    """Another run is writing this gradebook; the message names the lock and what to do."""


def shard_of(student: str, assignment: str, n: int) -> int:
    """The shard (1..n) that grades a submission: from its names alone, so every machine agrees
    and a late submission does not move the others."""
    return int(hashlib.sha256(f"{student}/{assignment}".encode()).hexdigest(), 16) % n + 1


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: write K/N, e.g. --shard 2/8 (shard 2 of 8)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: K must be between 1 and N")
    return k, n


def shard_folder(root: str, k: int, n: int) -> str:
    return os.path.join(root, "shards", f"{k}-of-{n}")


@contextlib.contextmanager
def run_lock(folder: str, shard: tuple[int, int] | None):
    """Held while a run grades into the gradebook of `folder` (a shard's, or the course's
    `.grading/`): a second run on the same gradebook, such as two shards given the same K,
    finds it taken and stops before grading anything."""
    import fcntl
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "lock")
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            what = ("two shards were given the same K; give each shard its own K from 1 to N" if shard
                    else "another grading run is grading this course; wait for it to finish")
            raise RunLocked(f"{path} is held by another grading process ({holder}): {what}") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
        f.flush()
        yield


def merge(course) -> list[str]:
    """Fold every shard's gradebook into the course's (grade.py --merge); returns the shards not
    graded yet, as "K/N". Raises ValueError, saying what to do, when there is nothing to merge."""
    from gradebook_copy import read_submission, submissions_in, write_submission
    from grading_records import move_to
    from nbgrader.api import Gradebook
    base = os.path.join(course.root, "shards")
    found = sorted(name for name in (os.listdir(base) if os.path.isdir(base) else [])
                   if os.path.isfile(os.path.join(base, name, "gradebook.db")))
    if not found:
        raise ValueError(f"No shard gradebooks under {base}/: grade with `grade.py --shard K/N` first")
    sizes = {name.split("-of-")[1] for name in found}
    if len(sizes) > 1:
        raise ValueError(f"Shards of different N under {base}/ ({', '.join(found)}): remove the folders of the "
                         f"stale split, then merge again")
    n = int(sizes.pop())
    merged = 0
    with course.gradebook() as into:
        for name in found:
            with Gradebook("sqlite:///" + os.path.join(base, name, "gradebook.db")) as shard:
                for student, assignment in submissions_in(shard):
                    write_submission(into, read_submission(shard, assignment, student))
                    move_to(course, student, assignment)
                    merged += 1
    print(f"Merged {merged} submissions from {len(found)} of {n} shards into {course.book}")
    return [f"{k}/{n}" for k in range(1, n + 1) if f"{k}-of-{n}" not in found]
