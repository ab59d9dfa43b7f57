"""A shared-memory board where each rank posts what it is doing right now.

Workers write to it on every traced call; the parent reads it only when a run misses its
deadline, to say which rank waits in which op. A rank blocked inside gloo cannot answer a
message, but its last post stays readable here.
"""
from __future__ import annotations

import os
import time
from multiprocessing.heap import Arena

SLOT = 200  # bytes per rank: state, since, description
RUNNING, COMM, DONE, IDLE = "running", "comm", "done", "idle"


class RankSlot:
    """One rank's place on the board: its own page of shared memory, and nothing of the others'.

    A worker is handed only its own slot. One shared array for every rank would be a channel
    between ranks that no trace sees: each rank could read what another wrote there (the board
    is reachable through a rank's tracer). The parent keeps every slot and reads them all."""

    def __init__(self, rank: int):
        self.rank = rank
        self._arena = Arena(SLOT)  # a file in /dev/shm, unlinked at once: only an fd reaches it

    def post(self, rank: int, state: str, what: str = "") -> None:
        """`rank` is this slot's own (the tracer and the worker call every board alike)."""
        # On every traced call, so kept cheap: one slice assignment.
        text = f"{state}|{time.perf_counter():.6f}|{what}".encode()[:SLOT - 1] + b"\0"
        self._arena.buffer[:len(text)] = text

    def text(self) -> str:
        return bytes(self._arena.buffer[:SLOT]).split(b"\0", 1)[0].decode(errors="replace")


class StatusBoard:
    """What every rank is doing, for the parent: one `RankSlot` per rank."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self._slots: dict[int, RankSlot] = {}  # made when a rank first needs one

    def slot(self, rank: int) -> RankSlot:
        """What rank `rank`'s worker gets: its own slot only."""
        if rank not in self._slots:
            self._slots[rank] = RankSlot(rank)
        return self._slots[rank]

    def post(self, rank: int, state: str, what: str = "") -> None:
        self.slot(rank).post(rank, state, what)

    def read(self, rank: int) -> tuple[str, float, str]:
        raw = self._slots[rank].text() if rank in self._slots else ""
        if not raw:
            return IDLE, time.perf_counter(), ""
        state, since, what = raw.split("|", 2)
        return state, float(since), what

    def describe(self, rank: int) -> str:
        """One line for a deadlock report, e.g. ``recv(src=1) pending 10.0 s``."""
        state, since, what = self.read(rank)
        age = time.perf_counter() - since
        if state == COMM:
            return f"{what} pending {age:.1f} s"
        if state == RUNNING:
            return f"running Python code for {age:.1f} s (not inside a torch.distributed call)"
        if state == DONE:
            return "finished"
        return "not started"


def cpu_ticks(pid: int) -> int | None:
    """CPU time a process has used so far (user + system, all threads, in clock ticks); None
    where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


class StallWatch:
    """Tells a deadlock from slow work before the deadline: every unfinished rank is inside a
    torch.distributed call (the board says which), none has moved to another call, and none has
    used more than a trickle of CPU, for `seconds`. A transfer in progress burns CPU, and a rank
    computing or sleeping (emulated device time) is outside a call, so neither looks stalled.

    The trickle: gloo's network thread wakes now and then, so a blocked rank is charged a clock
    tick every few seconds. Demanding no tick at all let eight blocked ranks look busy for
    seconds; a rank that moves data gets far more than IDLE_SHARE of a core."""

    POLL = 0.25         # seconds between looks
    IDLE_SHARE = 0.02   # of one core: what a rank blocked in a call may use and still be stalled
    TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self, board: StatusBoard, seconds: float):
        self.board, self.seconds = board, seconds
        self._calls, self._ticks, self._since = None, {}, time.monotonic()

    def stalled(self, pids: dict[int, int | None]) -> bool:
        """`pids`: rank -> process id of each rank that has not answered yet."""
        now = time.monotonic()
        calls, ticks = [], {}
        for rank, pid in sorted(pids.items()):
            kind, since, what = self.board.read(rank)
            ticks[rank] = cpu_ticks(pid) if pid else None
            if kind != COMM or ticks[rank] is None:
                self._calls = None
                return False
            calls.append((rank, since))
        allowance = 1 + self.IDLE_SHARE * (now - self._since) * self.TICKS_PER_SECOND
        if calls != self._calls or any(ticks[r] - self._ticks[r] > allowance for r in ticks):
            self._calls, self._ticks, self._since = calls, ticks, now
        return now - self._since >= self.seconds
