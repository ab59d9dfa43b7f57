"""How far a class's grading has got: done/total, elapsed, an estimate of what is left, and the
slowest submissions so far. Pure logic; `grade.py` prints it."""
from __future__ import annotations


def clock(seconds: float) -> str:
    """1:02:03, 6:50 or 0:07."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    def __init__(self, total: int, started: float):
        self.total, self.started, self.took = total, started, []

    def add(self, student: str, assignment: str, seconds: float) -> None:
        self.took.append((seconds, student, assignment))

    def status(self, now: float) -> str:
        """'3/24 done, 1:02 elapsed, about 6:50 left': what is left is estimated from the rate so
        far, which already counts how many submissions run side by side."""
        done, elapsed = len(self.took), now - self.started
        line = f"{done}/{self.total} done, {clock(elapsed)} elapsed"
        if 0 < done < self.total:
            line += f", about {clock(elapsed / done * (self.total - done))} left"
        return line

    def slowest(self, n: int = 3) -> str:
        return ", ".join(f"{s} {a} {t:.0f} s" for t, s, a in sorted(self.took, reverse=True)[:n])
