"""Interleaved 1F1B (Narayanan et al., SC 2021, section 2.2.2): each device holds v model chunks.

With p devices and v chunks per device, the model is cut into p·v virtual stages; device d holds
virtual stages d, d + p, d + 2p, ... A micro-batch therefore crosses every device v times, and each
op does 1/v of a stage's work. The warm-up and the flush still take p - 1 hops, but each hop is v
times shorter, so the bubble shrinks by v: (p - 1)/(v m) of the compute in the course's convention
(schedule.py), for the price of v times as many point-to-point messages.

    schedule = interleaved_1f1b_schedule(p=4, v=2, m=8)   # per device: ChunkOp(kind, mb, chunk)
    t = simulate_interleaved(schedule, v=2, t_f=1, t_b=1, t_w=1)
    t.bubble_time                                        # (p - 1)(t_f + t_b + t_w) / v
    t.peak_in_flight[0] / v                              # stage 0's peak: 1 + (p - 1)/(p v) M_B

Stage 0 holds more micro-batches than under 1F1B, each of 1/v of a stage: 1 + (p - 1)/(p v)
times 1F1B's peak (Korthikanti et al. 2022, section 4.2.3, whose "m" there counts the chunks).

The order is Megatron-LM's (`forward_backward_pipelining_with_interleaving`): micro-batches go
through the chunks in groups of p, each device starts (p - d - 1)·2 + (v - 1)·p forwards before
its first backward, then alternates one forward and one backward.
"""
from __future__ import annotations

from typing import NamedTuple

from nanoparallel.lessons.pipeline.schedule import ScheduleError, Timeline, _run


class ChunkOp(NamedTuple):
    kind: str   # "F" or "BW"
    mb: int     # micro-batch
    chunk: int  # which of the device's v model chunks

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}" + "'" * self.chunk  # F3, F3', F3'' ...


def interleaved_1f1b_schedule(p: int, v: int, m: int) -> list[list[ChunkOp]]:
    """Megatron-LM's interleaved 1F1B order, per device. Needs m to be a multiple of p."""
    if p < 1 or v < 1 or m < 1:
        raise ValueError(f"p, v and m must be at least 1; got p={p}, v={v}, m={m}")
    if m % p:
        raise ValueError(f"interleaved 1F1B takes micro-batches in groups of p: m={m} is not a multiple of p={p}")
    total = m * v  # (micro-batch, chunk) pairs per device

    def pair(k: int, forward: bool) -> tuple[int, int]:
        group, within = divmod(k, p * v)
        chunk = within // p
        return group * p + within % p, chunk if forward else v - 1 - chunk

    schedule = []
    for d in range(p):
        # v = 1 is plain 1F1B; Megatron's interleaved warm-up adds a second pass of p - d - 1
        warmup = min(p - d - 1 if v == 1 else (p - d - 1) * 2 + (v - 1) * p, total)
        ops = [ChunkOp("F", *pair(k, True)) for k in range(warmup)]
        for k in range(total - warmup):  # steady state: one forward, one backward
            ops.append(ChunkOp("F", *pair(warmup + k, True)))
            ops.append(ChunkOp("BW", *pair(k, False)))
        ops += [ChunkOp("BW", *pair(k, False)) for k in range(total - warmup, total)]
        schedule.append(ops)
    return schedule


def simulate_interleaved(schedule, v: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0,
                         t_comm: float = 0.0) -> Timeline:
    """Run an interleaved schedule on paper. t_f, t_b, t_w are a whole stage's op times (a device's
    share of the model), so each chunk's op takes 1/v of them.

    Virtual stage c·p + d (chunk c on device d) takes its forward input from the virtual stage
    before it, and its output gradient from the one after it."""
    p = len(schedule)
    for d, ops in enumerate(schedule):
        for op in ops:
            if not (isinstance(op, ChunkOp) and op.kind in ("F", "BW") and 0 <= op.chunk < v):
                raise ScheduleError(f"device {d}: {op!r} is not a ChunkOp('F' or 'BW', mb, chunk < {v})")

    def needs(d: int, op: ChunkOp):
        k = op.chunk * p + d
        if op.kind == "F" and k > 0:
            return (k - 1) % p, f"F{op.mb}@{k - 1}"
        if op.kind == "BW" and k < p * v - 1:
            return (k + 1) % p, f"B{op.mb}@{k + 1}"
        return None

    def makes(d: int, op: ChunkOp) -> str:
        return f"{'F' if op.kind == 'F' else 'B'}{op.mb}@{op.chunk * p + d}"

    cost = {"F": t_f / v, "BW": (t_b + t_w) / v}
    return Timeline(_run(schedule, lambda op: cost[op.kind], t_comm, needs=needs, makes=makes,
                         as_op=lambda op: op))
