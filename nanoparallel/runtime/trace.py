"""What the ranks did during one `Cluster.run`: communication events and compute regions.

Pure data, no processes: the worker side (`nanoparallel.runtime.tracing`) fills it in, and tests,
checks and plots read it. Times are seconds since the parent dispatched the run; every rank
reads the same system-wide monotonic clock, so events of different ranks line up.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# Point-to-point ops: their bytes are exact (the tensor the rank sent or received).
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})


@dataclass(frozen=True)
class TraceEvent:
    rank: int                 # global rank that made the call
    op: str                   # torch.distributed function name, or a region name for kind="compute"
    peer: int | None          # global rank of the other side (p2p) or the root (broadcast, reduce, ...)
    group: tuple[int, ...]    # global ranks taking part (the whole world for the default group)
    bytes_sent: int
    bytes_recv: int
    start: float              # seconds since the run began
    end: float | None         # None: an async op whose work was never waited on
    is_async: bool = False
    kind: str = "comm"        # "comm" for torch.distributed calls, "compute" for `region(...)` blocks
    sent_to: tuple[int, ...] = ()  # all-to-all only: bytes addressed to each member of `group`, in order
    storage: int | None = None     # point-to-point only: the address of the storage sent or received into

    @property
    def duration(self) -> float:
        return 0.0 if self.end is None else self.end - self.start

    @property
    def completed(self) -> bool:
        return self.end is not None

    def describe(self) -> str:
        """A short label such as ``recv(src=1)`` or ``all_reduce(4 ranks)``."""
        return describe_op(self.op, self.peer, len(self.group))


def describe_op(op: str, peer: int | None, group_size: int) -> str:
    if op in ("send", "isend"):
        return f"{op}(dst={peer})"
    if op in ("recv", "irecv"):
        return f"{op}(src={'any' if peer is None else peer})"
    root = "" if peer is None else f"root={peer}, "
    return f"{op}({root}{group_size} ranks)"


def collective_bytes(op: str, rank_in_group: int, group_size: int, root_in_group: int | None,
                     in_bytes: int, out_bytes: int, send_split: list[int] | None = None,
                     recv_split: list[int] | None = None) -> tuple[int, int]:
    """Bytes (sent, received) by one rank in a built-in collective.

    A backend's internal algorithm is hidden, so the trace charges each rank what the
    bandwidth-optimal algorithm moves (NCCL's "bus bandwidth" convention, which the course's
    formulas use): ring for all-reduce (2(P-1)/P·N), all-gather and reduce-scatter ((P-1)/P·N),
    a pipelined chain from the root for broadcast and to the root for reduce (N per hop),
    direct transfers for scatter, gather and all-to-all. ``in_bytes``/``out_bytes`` are the
    rank's local input and output; for all-to-all the per-peer splits are given in bytes.
    """
    p, r = group_size, rank_in_group
    if p == 1:
        return 0, 0
    if op == "all_reduce":
        n = 2 * (p - 1) * in_bytes // p
        return n, n
    if op in ("all_gather", "all_gather_single", "all_gather_into_tensor"):
        return (p - 1) * in_bytes, (p - 1) * in_bytes
    if op in ("reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor"):
        return (p - 1) * out_bytes, (p - 1) * out_bytes
    if op == "broadcast":  # chain root -> root+1 -> ... -> root-1
        pos = (r - root_in_group) % p
        return (in_bytes if pos < p - 1 else 0), (in_bytes if pos > 0 else 0)
    if op == "reduce":     # chain root+1 -> ... -> root-1 -> root
        pos = (r - root_in_group) % p
        return (in_bytes if pos != 0 else 0), (in_bytes if pos != 1 else 0)
    if op == "scatter":    # out_bytes: the chunk each rank receives
        return ((p - 1) * out_bytes if r == root_in_group else 0), (0 if r == root_in_group else out_bytes)
    if op == "gather":
        return (0 if r == root_in_group else in_bytes), ((p - 1) * in_bytes if r == root_in_group else 0)
    if op in ("all_to_all", "all_to_all_single"):
        sent = sum(b for i, b in enumerate(send_split) if i != r)
        recv = sum(b for i, b in enumerate(recv_split) if i != r)
        return sent, recv
    return 0, 0  # barrier and object collectives move no tensor payload worth counting


class Trace:
    """The events of one run, sorted by start time, with per-rank queries.

    Byte totals count only completed events (an ``isend`` counts once its work is waited on).
    """

    def __init__(self, events: list[TraceEvent], world_size: int):
        self.events = sorted(events, key=lambda e: (e.start, e.rank))
        self.world_size = world_size

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def __repr__(self) -> str:
        return f"<Trace: {len(self.comm())} comm events on {self.world_size} ranks>"

    def comm(self, rank: int | None = None) -> list[TraceEvent]:
        return [e for e in self.events if e.kind == "comm" and (rank is None or e.rank == rank)]

    def regions(self, rank: int | None = None) -> list[TraceEvent]:
        return [e for e in self.events if e.kind == "compute" and (rank is None or e.rank == rank)]

    def ops(self, rank: int | None = None) -> set[str]:
        """Names of the torch.distributed functions called (by one rank or any)."""
        return {e.op for e in self.comm(rank)}

    def op_counts(self, rank: int | None = None) -> Counter:
        return Counter(e.op for e in self.comm(rank))

    def peers(self, rank: int) -> set[int]:
        """Global ranks this rank exchanged point-to-point messages with."""
        return {e.peer for e in self.comm(rank) if e.op in P2P_OPS and e.peer is not None}

    def bytes_sent(self) -> list[int]:
        """Bytes sent per rank, in rank order."""
        return self._totals("bytes_sent")

    def bytes_to(self, rank: int) -> dict[int, int]:
        """{peer: bytes} that `rank` sent to each other rank in point-to-point sends and all-to-alls
        (the only ops whose bytes have a single addressee); completed events only."""
        out: dict[int, int] = {}
        for e in self.comm(rank):
            if not e.completed:
                continue
            if e.op in ("send", "isend") and e.peer is not None:
                out[e.peer] = out.get(e.peer, 0) + e.bytes_sent
            for peer, n in zip(e.group, e.sent_to):
                if peer != rank:
                    out[peer] = out.get(peer, 0) + n
        return out

    def bytes_received(self) -> list[int]:
        return self._totals("bytes_recv")

    def _totals(self, field: str) -> list[int]:
        totals = [0] * self.world_size
        for e in self.comm():
            if e.completed:
                totals[e.rank] += getattr(e, field)
        return totals

    def incomplete(self) -> list[TraceEvent]:
        """Async ops whose work was never waited on."""
        return [e for e in self.comm() if not e.completed]

    def summary(self) -> str:
        """A table: per rank, the calls made and bytes moved."""
        sent, recv = self.bytes_sent(), self.bytes_received()
        lines = [f"{'rank':>4}  {'bytes sent':>12}  {'bytes recv':>12}  calls"]
        for r in range(self.world_size):
            calls = ", ".join(f"{op}×{n}" for op, n in sorted(self.op_counts(r).items())) or "-"
            lines.append(f"{r:>4}  {sent[r]:>12,}  {recv[r]:>12,}  {calls}")
        return "\n".join(lines)

    def plot(self, ax=None, **kwargs):
        """Draw the run as a timeline, one row per rank (see `nanoparallel.runtime.timeline.plot_trace`)."""
        from nanoparallel.runtime.timeline import plot_trace  # here: matplotlib only when drawing
        return plot_trace(self, ax=ax, **kwargs)
