"""The errors a `Cluster` raises. Each message says what happened and what to do next."""
from __future__ import annotations


class ClusterError(RuntimeError):
    """A cluster was misused or could not start (bad world size, closed cluster, ...)."""


class RankError(RuntimeError):
    """A rank raised an exception (or died) while running your function.

    ``rank`` is the first failing rank, ``failed_ranks`` all of them, ``remote_traceback`` the
    text of that rank's traceback, and ``exception`` the original exception where it could be
    sent back (``None`` otherwise).
    """

    def __init__(self, message: str, rank: int, failed_ranks: list[int],
                 remote_traceback: str = "", exception: BaseException | None = None):
        super().__init__(message)
        self.rank = rank
        self.failed_ranks = failed_ranks
        self.remote_traceback = remote_traceback
        self.exception = exception


class DeadlockError(TimeoutError):
    """The ranks did not all finish within the deadline.

    ``waiting`` maps each rank to what it was doing at the deadline, e.g.
    ``{0: "recv(src=1) pending 10.0 s", 1: "finished"}``.
    """

    def __init__(self, message: str, waiting: dict[int, str]):
        super().__init__(message)
        self.waiting = waiting
