"""Workers that grade submissions side by side, each in a workspace of its own.

A worker is a process with its own nbgrader (`Course`) pointed at a workspace folder: its own
gradebook (a copy of the run's, so the assignments are known), its own `autograded/` and
`integrity/`, reading `submitted/` and the source notebooks from the course. It grades one
submission at a time, writes its feedback, moves the autograded notebook, the feedback and the
guard's verdict into the course folder, and answers with the submission's grades as data (`gradebook_copy.read_submission`);
the run writes them into the course's gradebook, one writer for the whole class.

Stopping: every worker is a session of its own, so a Ctrl-C reaches the run alone, which then
stops the workers (SIGTERM, then SIGKILL after a grace period). A worker's submission runs in a
sandbox that dies with it (bubblewrap's --die-with-parent and its pid namespace); a worker also
dies with the run (PR_SET_PDEATHSIG), so a killed run leaves no worker grading on.

Run as a script, this file is one worker: `python grading_pool.py CONFIG_JSON RESULT_FD`, tasks
as JSON lines on stdin, results as JSON lines on RESULT_FD.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GRACE_SECONDS = 10  # for a stopped worker to shut its kernel down before it is killed


class Pool:
    """`jobs` workers; `submit` hands a submission to an idle one, `next_result` waits for the
    next to finish. `close` stops the workers, at once if `now`."""

    def __init__(self, jobs: int, root: str, book: str, sandbox: bool, folder: str):
        """Workspaces go in `folder`, which one run at a time uses (grade.py's run_lock)."""
        self.root, self.book, self.sandbox, self.folder = root, book, sandbox, folder
        self.workers, self.idle, self.busy = [], [], {}
        for i in range(jobs):
            self._start(i + 1)

    def _start(self, number: int) -> None:
        workspace = os.path.join(self.folder, "workers", f"worker-{number}")
        shutil.rmtree(workspace, ignore_errors=True)
        os.makedirs(workspace)
        shutil.copy(self.book, os.path.join(workspace, "gradebook.db"))
        read, write = os.pipe()
        config = json.dumps({"root": self.root, "workspace": workspace, "sandbox": self.sandbox})
        with open(os.path.join(workspace, "worker.log"), "w") as log:
            process = subprocess.Popen([sys.executable, os.path.join(HERE, "grading_pool.py"), config, str(write)],
                                       stdin=subprocess.PIPE, stdout=log, stderr=log, text=True,
                                       pass_fds=(write,), start_new_session=True)
        os.close(write)
        worker = {"process": process, "results": os.fdopen(read), "workspace": workspace, "number": number}
        self.workers.append(worker)
        self.idle.append(worker)

    def submit(self, student: str, assignment: str) -> None:
        worker = self.idle.pop()
        worker["process"].stdin.write(json.dumps({"student": student, "assignment": assignment}) + "\n")
        worker["process"].stdin.flush()
        self.busy[worker["results"].fileno()] = (worker, student, assignment, time.monotonic())

    def next_result(self) -> dict:
        """The next submission to finish (blocks). A worker that died answers with why, and a
        new worker takes its place."""
        import select
        ready, _, _ = select.select(list(self.busy), [], [])
        worker, student, assignment, since = self.busy.pop(ready[0])
        line = worker["results"].readline()
        if line:
            self.idle.append(worker)
            return json.loads(line)
        code = worker["process"].wait()
        worker["results"].close()
        with open(os.path.join(worker["workspace"], "worker.log")) as f:
            tail = f.read()[-1000:]
        self.workers.remove(worker)
        self._start(worker["number"])
        return {"student": student, "assignment": assignment, "data": None, "seconds": time.monotonic() - since,
                "error": f"its grading worker exited with code {code}; the end of its log:\n{tail}"}

    @property
    def has_idle(self) -> bool:
        return bool(self.idle)

    @property
    def running(self) -> int:
        return len(self.busy)

    def close(self, now: bool = False) -> None:
        for worker in self.workers:
            process = worker["process"]
            if process.poll() is None:
                if now:
                    process.send_signal(signal.SIGTERM)
                else:
                    process.stdin.close()  # end of tasks: it exits
        deadline = time.monotonic() + GRACE_SECONDS
        for worker in self.workers:
            process = worker["process"]
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            if not worker["results"].closed:
                worker["results"].close()
            shutil.rmtree(worker["workspace"], ignore_errors=True)
        with_workers = os.path.dirname(self.workers[0]["workspace"]) if self.workers else None
        if with_workers and not os.listdir(with_workers):
            os.rmdir(with_workers)


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel sends this process SIGTERM when the run that started it dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the closed stdin still ends the worker after its submission
    if os.getppid() == 1:
        sys.exit("the grading run that started this worker has already exited")


def _move(source: str, target: str) -> None:
    shutil.rmtree(target, ignore_errors=True)
    if os.path.isdir(source):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(source, target)


def _grade_one(course, root: str, workspace: str, student: str, assignment: str) -> dict:
    from gradebook_copy import read_submission
    from grade import GradingError
    from nbgrader.api import Gradebook
    start = time.monotonic()
    shutil.rmtree(os.path.join(workspace, "integrity", student, assignment), ignore_errors=True)
    error, data = None, None
    try:
        course.autograde(student, assignment)
        course.feedback(assignment, student)  # from this gradebook, which holds what the course's will
        with Gradebook("sqlite:///" + os.path.join(workspace, "gradebook.db")) as gb:
            data = read_submission(gb, assignment, student)
    except GradingError as exc:
        error = str(exc)
    for part in ("autograded", "integrity", "feedback"):
        _move(os.path.join(workspace, part, student, assignment), os.path.join(root, part, student, assignment))
    return {"student": student, "assignment": assignment, "error": error, "data": data,
            "seconds": time.monotonic() - start}


def _stop(signum, frame):
    raise KeyboardInterrupt  # unwinds through nbclient, which shuts the kernel down


def main(argv: list[str]) -> int:
    config, result_fd = json.loads(argv[0]), int(argv[1])
    _die_with_parent()
    signal.signal(signal.SIGTERM, _stop)  # the run stopping (a Ctrl-C there)
    sys.path.insert(0, HERE)
    from grade import Course
    course = Course(config["root"], sandbox=config["sandbox"], workspace=config["workspace"])
    with os.fdopen(result_fd, "w") as results:
        for line in sys.stdin:
            task = json.loads(line)
            answer = _grade_one(course, config["root"], config["workspace"], task["student"], task["assignment"])
            results.write(json.dumps(answer) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
