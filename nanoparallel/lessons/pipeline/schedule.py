"""Pipeline schedules as data: validate them, simulate them, measure them.

A schedule lists, for every pipeline stage, the operations that stage runs, in order:

    schedule = [[Op("F", 0), Op("F", 1), Op("BW", 0), Op("BW", 1)],   # stage 0
                [Op("F", 0), Op("BW", 0), Op("F", 1), Op("BW", 1)]]   # stage 1
    validate(schedule, m=2)                 # ScheduleError in words a learner can act on
    t = simulate(schedule, t_f=1, t_b=1, t_w=1)
    t.step_time, t.bubble_time, t.bubble_fraction, t.peak_in_flight, t.peak_memory(m_w=0.3)

Operations (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2):
- ``F``: forward of one micro-batch through the stage;
- ``B``: backward for the *input* gradient only (what the previous stage waits for);
- ``W``: backward for the *weight* gradients (no other stage waits for it);
- ``BW``: a full backward, B and W together, as GPipe and 1F1B do it.

Dependencies: F(i) on stage s needs F(i) on s-1 (its input activation); B(i) (or BW(i)) on s
needs the backward of i on s+1 (its output gradient) and F(i) on s; W(i) needs B(i) on s.
An executor sends without blocking and receives just before the op that needs the data, so a
schedule runs without deadlock exactly when these dependencies and each stage's own order
leave no cycle; `validate` finds the cycle and says what each stage waits for.

Convention used everywhere in the course: the **bubble** of a step is its idle time,
``step_time - busy``, where busy is a stage's compute time (the same on every stage when the
stages are balanced: m (T_F + T_B + T_W)). The **bubble fraction** is bubble over that ideal
compute, (p-1)/m for GPipe and 1F1B (Megatron-LM; Narayanan et al. 2021; the zero-bubble
repository's README too, with (p-1)/3m for ZB-H1 when T_F = T_B = T_W). The GPipe paper divides
by the total time instead, (p-1)/(m+p-1): same bubble, other denominator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

KINDS = ("F", "B", "W", "BW")
_REGION = re.compile(r"^(F|BW|B|W)(\d+)$")


class Op(NamedTuple):
    kind: str   # "F", "B", "W" or "BW"
    mb: int     # micro-batch index, 0 .. m-1

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}"

    def __repr__(self) -> str:
        return f"Op({self.kind!r}, {self.mb})"


class ScheduleError(ValueError):
    """A schedule that cannot run: a missing or repeated op, an order, or a deadlock."""


def parse_op(name: str) -> Op | None:
    """``"BW3" -> Op("BW", 3)``; None for a name that is not an op (e.g. a region "loss")."""
    found = _REGION.match(name)
    return Op(found.group(1), int(found.group(2))) if found else None


# -- checking ------------------------------------------------------------------------------

def _check_shape(schedule, m: int | None) -> int:
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ScheduleError(f"a schedule is a list with one list of ops per stage; got {type(schedule).__name__}")
    seen_mb = set()
    for s, ops in enumerate(schedule):
        if not isinstance(ops, (list, tuple)):
            raise ScheduleError(f"stage {s}: expected a list of ops, got {type(ops).__name__}")
        for k, op in enumerate(ops):
            if not (isinstance(op, tuple) and len(op) == 2 and op[0] in KINDS
                    and isinstance(op[1], int) and not isinstance(op[1], bool) and op[1] >= 0):
                raise ScheduleError(f"stage {s}, position {k}: {op!r} is not an op; write Op(kind, mb) with "
                                    f"kind in {KINDS} and mb a micro-batch index >= 0")
            seen_mb.add(op[1])
    if m is None:
        m = max(seen_mb) + 1 if seen_mb else 0
    return m


def _check_stage(s: int, ops, m: int) -> None:
    position: dict[Op, int] = {}
    for k, op in enumerate(ops):
        op = Op(*op)
        if op.mb >= m:
            raise ScheduleError(f"stage {s}, position {k}: {op} names micro-batch {op.mb}, but there are only "
                                f"m={m} (0..{m - 1})")
        if op in position:
            raise ScheduleError(f"stage {s}: {op} appears twice (positions {position[op]} and {k}); "
                                f"every op runs exactly once")
        position[op] = k
    for i in range(m):
        if Op("F", i) not in position:
            raise ScheduleError(f"stage {s}: F{i} is missing; every micro-batch needs a forward on every stage")
        full, b, w = Op("BW", i) in position, Op("B", i) in position, Op("W", i) in position
        if full and (b or w):
            raise ScheduleError(f"stage {s}: micro-batch {i} has BW{i} and also {'B' if b else 'W'}{i}; "
                                f"use either BW{i} (a full backward) or B{i} and W{i}")
        if not full and not (b and w):
            missing = "W" if b else "B" if w else "BW"
            raise ScheduleError(f"stage {s}: {missing}{i} is missing; micro-batch {i} needs a full backward "
                                f"BW{i}, or B{i} followed by W{i}")
        back = Op("BW", i) if full else Op("B", i)
        if position[back] < position[Op("F", i)]:
            raise ScheduleError(f"stage {s}: {back} at position {position[back]} comes before F{i} at position "
                                f"{position[Op('F', i)]}; a backward needs its forward's activations")
        if not full and position[Op("W", i)] < position[Op("B", i)]:
            raise ScheduleError(f"stage {s}: W{i} at position {position[Op('W', i)]} comes before B{i} at "
                                f"position {position[Op('B', i)]}; the weight gradient needs B's output gradient")


def _dependency(schedule, s: int, op: Op) -> tuple[int, str] | None:
    """(stage, what) that op on stage s waits for from another stage, or None."""
    p = len(schedule)
    if op.kind == "F" and s > 0:
        return s - 1, f"F{op.mb}"
    if op.kind in ("B", "BW") and s < p - 1:
        return s + 1, f"B{op.mb}"  # the backward for the input gradient: B or BW
    return None


def _makes(s: int, op) -> str | None:
    """What op on stage s hands to a neighbour: its forward's output or its input gradient."""
    return f"F{op.mb}" if op.kind == "F" else f"B{op.mb}" if op.kind in ("B", "BW") else None


def _run(schedule, duration, t_comm: float = 0.0, needs=None, makes=_makes, as_op=lambda x: Op(*x)):
    """Play the schedule: each stage runs its ops in order, each op as soon as its input exists.

    ``needs(s, op)`` is the (stage, what) that op waits for, or None (default: `_dependency`);
    ``makes(s, op)`` what it produces for others. Returns per-stage lists of (op, start, end),
    or raises ScheduleError on a deadlock.
    """
    needs = needs or (lambda s, op: _dependency(schedule, s, op))
    p = len(schedule)
    nxt = [0] * p
    free_at = [0.0] * p
    done: dict[tuple[int, str], float] = {}  # (stage, "F3"/"B3") -> end time
    out: list[list[tuple[Op, float, float]]] = [[] for _ in range(p)]
    remaining = sum(len(ops) for ops in schedule)
    while remaining:
        progressed = False
        for s in range(p):
            while nxt[s] < len(schedule[s]):
                op = as_op(schedule[s][nxt[s]])
                dep = needs(s, op)
                if dep is not None and dep not in done:
                    break
                ready = free_at[s] if dep is None else max(free_at[s], done[dep] + t_comm)
                end = ready + duration(op)
                out[s].append((op, ready, end))
                free_at[s] = end
                made = makes(s, op)
                if made is not None:
                    done[(s, made)] = end
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            waits = []
            for s in range(p):
                if nxt[s] < len(schedule[s]):
                    op = as_op(schedule[s][nxt[s]])
                    dep_stage, what = needs(s, op)
                    waits.append(f"stage {s} waits at {op} (position {nxt[s]}) for {what} from stage {dep_stage}")
            raise ScheduleError("deadlock: no stage can go on.\n  " + "\n  ".join(waits) +
                                "\nEvery stage receives just before the op that needs the data: reorder the ops "
                                "so that each one's input is produced earlier.")
    return out


def validate(schedule, m: int | None = None) -> None:
    """Raise `ScheduleError` unless ``schedule`` runs: every op once, in a possible order, no deadlock.

    ``m`` is the number of micro-batches (default: inferred from the largest index).
    """
    m = _check_shape(schedule, m)
    for s, ops in enumerate(schedule):
        _check_stage(s, ops, m)
    _run(schedule, lambda op: 1.0)


def peak_in_flight(ops) -> int:
    """Most micro-batches between their F and their B (or BW) on one stage at once: the count
    of full activation sets, M_B each, that the stage holds (`peak_memory` with ``m_w=0``)."""
    return int(peak_memory(ops, m_w=0.0))


def peak_held(ops) -> int:
    """Most micro-batches between their F and their W (or BW) on one stage at once: started and
    not yet finished, each holding at least M_W (`peak_memory` with ``m_w=1``)."""
    return int(peak_memory(ops, m_w=1.0))


def peak_memory(ops, m_w: float, m_b: float = 1.0) -> float:
    """The most activation memory one stage holds at once, running ``ops`` in order.

    Qi et al. 2024, Table 1: F(i) leaves M_B behind (per transformer layer sb(34h + 5as) bytes
    in 16-bit with dropout masks, Korthikanti et al.'s count); B(i) frees all but the M_W that
    W(i) still needs (the layers' inputs and the output gradients, 32sbh); W(i) frees that;
    BW(i) frees all of M_B at once. ``m_w`` and ``m_b`` are in any unit (M_W/M_B with m_b=1).
    """
    if not 0 <= m_w <= m_b:
        raise ValueError(f"m_w={m_w} must lie between 0 and m_b={m_b}: W needs part of what B needs")
    held = peak = 0.0
    for op in ops:
        kind = op[0]
        held += {"F": m_b, "B": m_w - m_b, "W": -m_w, "BW": -m_b}[kind]
        peak = max(peak, held)
    return peak


# -- timelines ------------------------------------------------------------------------------

@dataclass
class Timeline:
    """When each op of each stage ran: simulated by `simulate`, or measured by `timeline_from_trace`."""
    ops: list[list[tuple[Op, float, float]]]           # per stage: (op, start, end)
    source: str = "simulated"
    comm: list[list[tuple[float, float]]] = field(default_factory=list)  # measured waits for a message

    @property
    def p(self) -> int:
        return len(self.ops)

    @property
    def m(self) -> int:
        return 1 + max((op.mb for stage in self.ops for op, _, _ in stage), default=-1)

    @property
    def start(self) -> float:
        return min((a for stage in self.ops for _, a, _ in stage), default=0.0)

    @property
    def step_time(self) -> float:
        return max((b for stage in self.ops for _, _, b in stage), default=0.0) - self.start

    def busy(self, stage: int) -> float:
        return sum(b - a for _, a, b in self.ops[stage])

    @property
    def bubble_time(self) -> float:
        """Idle time of the step: step time minus the busiest stage's compute."""
        return self.step_time - max((self.busy(s) for s in range(self.p)), default=0.0)

    @property
    def bubble_fraction(self) -> float:
        """Bubble over ideal compute: (p-1)/m for GPipe and 1F1B with balanced stages."""
        busy = max((self.busy(s) for s in range(self.p)), default=0.0)
        return self.bubble_time / busy if busy else 0.0

    @property
    def peak_in_flight(self) -> list[int]:
        """Per stage, the most micro-batches between their F and their B: M_B each."""
        return [peak_in_flight(ops) for ops in self.order()]

    @property
    def peak_held(self) -> list[int]:
        """Per stage, the most micro-batches between their F and their W: M_W each at least."""
        return [peak_held(ops) for ops in self.order()]

    def peak_memory(self, m_w: float, m_b: float = 1.0) -> list[float]:
        """Per stage, the most activation memory held at once (see `peak_memory`)."""
        return [peak_memory(ops, m_w, m_b) for ops in self.order()]

    def order(self) -> list[list[Op]]:
        """The schedule that ran: each stage's ops by start time."""
        return [[op for op, _, _ in sorted(stage, key=lambda x: x[1])] for stage in self.ops]


def simulate(schedule, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0, t_comm: float = 0.0,
             m: int | None = None) -> Timeline:
    """Run ``schedule`` on paper: F takes t_f, B t_b, W t_w, BW t_b + t_w; a message t_comm."""
    validate(schedule, m)
    cost = {"F": t_f, "B": t_b, "W": t_w, "BW": t_b + t_w}
    return Timeline(_run(schedule, lambda op: cost[op.kind], t_comm))


def timeline_from_trace(trace, ranks=None) -> Timeline:
    """The ops a real run recorded as regions named like ``F3``, ``B3``, ``W3``, ``BW3``.

    Rank r is stage r (or the r-th of ``ranks``). Times are seconds since the run began. The
    spans of receives are kept in ``comm``: the time a stage waited for a message (an isend's
    span would only say when its work was waited on, often the end of the step).
    """
    ranks = list(range(trace.world_size)) if ranks is None else list(ranks)
    ops, comm = [], []
    for r in ranks:
        stage = []
        for e in trace.regions(r):
            op = parse_op(e.op)
            if op is not None:
                stage.append((op, e.start, e.end))
        ops.append(sorted(stage, key=lambda x: x[1]))
        comm.append([(e.start, e.end) for e in trace.comm(r) if e.op in ("recv", "irecv") and e.end is not None])
    return Timeline(ops, source="measured", comm=comm)
