"""The errors a `Cluster` raises, and the reports in them: what happened, on which rank, and
what to do next."""
from __future__ import annotations

import linecache

from nanoparallel.runtime import rank_data


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


# -- reports built from what the ranks sent back ----------------------------------------

def format_remote(info: dict) -> str:
    """The rank's traceback, with source lines looked up here (where notebook cells live)."""
    if not info["frames"]:
        return info["text"]
    lines = ["Traceback (most recent call last):"]
    for filename, lineno, name, line in info["frames"]:
        lines.append(f'  File "{filename}", line {lineno}, in {name}')
        source = line or linecache.getline(filename, lineno).strip()
        if source:
            lines.append(f"    {source}")
    lines.append(f"{info['type']}: {info['message']}")
    return "\n".join(lines)


def rank_error(errors: dict[int, dict], waiting: dict[int, str]) -> RankError:
    rank = min(errors)
    info = errors[rank]
    text = format_remote(info)
    others = f" (ranks {', '.join(map(str, errors))} raised; showing rank {rank})" if len(errors) > 1 else ""
    if info["type"] == "WorkerDied":
        message = f"{info['message']} while running your function{others}\n\n{info['text']}".rstrip()
    else:
        message = f"rank {rank} raised {info['type']}: {info['message']}{others}\n\n{text}"
    stuck = {r: what for r, what in waiting.items() if r not in errors and what != "finished"}
    if stuck:
        message += "\n\nOther ranks were left waiting (the cluster restarted them):\n" + "\n".join(
            f"  rank {r}: {what}" for r, what in sorted(stuck.items()))
    exception = None
    if info["pickled"] is not None:
        try:
            exception = rank_data.decode(info["pickled"])
        except Exception:
            pass
    return RankError(message, rank, sorted(errors), text, exception)


BLOCKED_HINT = ("A rank blocked in a call waits for a peer that never answers: every send needs a "
                "matching recv on the peer, and every rank must call each collective, in the same order.")


def deadlock_message(waiting: dict[int, str], timeout: float) -> str:
    lines = [f"The ranks did not all finish within {timeout:g} s. At the deadline:"]
    lines += [f"  rank {r}: {what}" for r, what in sorted(waiting.items())]
    blocked = any("pending" in what for what in waiting.values())
    if blocked:
        lines.append(BLOCKED_HINT)
    lines.append("The cluster restarted its ranks and is ready for the next run. If the work is "
                 "just slow, raise the deadline: cluster.timeout = 60")
    return "\n".join(lines)


def torchrun_deadline_message(rank: int, waiting: str, timeout: float) -> str:
    """What a rank under torchrun says when its run misses the deadline: it knows only itself,
    and cannot be restarted, so it says what it waits for and that it stops."""
    return "\n".join([
        f"rank {rank} did not finish its run within {timeout:g} s: {waiting}.", BLOCKED_HINT,
        "Under torchrun a rank cannot be restarted: this process exits with status 1 and torchrun "
        "stops the others. If the work is just slow, raise the deadline (cluster.timeout, or "
        "--timeout of nanoparallel.grading.launch)."])
