"""What a rank communicated that its trace did not see (guarded grading only; `rank_guard`).

The trace is recorded in Python, by wrappers around torch.distributed's functions, in the same
process as the notebook's code. That code can reach the backend without them: a process group's
own methods (`group.allreduce`, `_get_backend(...).send`), torch's operators
(`torch.ops.c10d.allreduce_`), the function a wrapper wraps (`dist.all_reduce.__wrapped__`).
Two counters kept in C++, which notebook code can raise but not lower or rewrite, tell on it:

- torch's flight recorder keeps every collective of every process group, with the Python stack
  that issued it. A collective with no tracing wrapper between the backend and the first code
  outside torch is communication the trace did not see. So is one whose stack holds torch's
  frames only: torch's own code, reached without notebook code on the stack, sends nothing in
  the course (every solution's collectives are traced, FSDP2's and DTensor's included), but
  notebook code can reach it that way, with torch's function hung as a gradient hook (the
  autograd engine calls it) or run by a thread started on a C callable.
- a stack shows which code ran, not which tracer recorded it: more collectives through the
  tracer's code than the trace's calls make (`collective_entries`) were recorded by a tracer the
  notebook made, around the tracer's own wrapper.
- each registered process group counts the operations it ran, point-to-point ones included (the
  flight recorder keeps no point-to-point operations on gloo). More than the traced calls and
  the collectives can explain is point-to-point traffic the trace did not see.

A run with more collectives than the recorder keeps (FLIGHT_RECORDER_ENTRIES) is refused: its
oldest entries are gone, and with them who issued them (an untraced collective followed by
enough traced ones would otherwise slip out of sight). The course's runs make at most 176 (every
solution and mutant of 00 to 07 on guarded ranks, measured with torch 2.13).

What this does not see: point-to-point messages on a process group the notebook built for itself
and never registered; events the notebook writes into the tracer itself. docs/grading.md
("Grading integrity") lists these.
"""
from __future__ import annotations

import os
import pickle

from nanoparallel.grading.provenance import is_library_file

FLIGHT_RECORDER_ENTRIES = 512
# (torch before 2.8 records only NCCL collectives: there only the counts are checked)
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES)}
_TRACERS = ("tracing.py", "tracing_functional.py")
# Engine code that only passes torch's own calls through, as torch's frames do: MatmulLog, a
# dispatch mode the checks enter around code that communicates, calls every op it is handed.
_PASS_THROUGH = (os.path.join("runtime", "flops.py"),)


def point_to_point_ops(op: str, group_size: int) -> int:
    """How many point-to-point backend operations one traced call makes on gloo, at most
    (measured on torch 2.13: the object variants send a size, then the bytes; a monitored barrier
    is a send and a receive per other rank on rank 0, one of each on the others)."""
    if op in ("send", "recv", "isend", "irecv"):
        return 1
    if op in ("send_object_list", "recv_object_list"):
        return 2
    if op == "monitored_barrier":
        return 2 * max(group_size - 1, 1)
    return 0


def collective_entries(op: str, group_size: int) -> int:
    """How many collectives one traced call makes in torch's flight recorder on gloo, at most
    (measured on torch 2.13: the object variants exchange sizes first; a list reduce_scatter is
    one reduce per rank; point-to-point calls and a monitored barrier, none)."""
    if point_to_point_ops(op, group_size):  # made of sends and receives only
        return 0
    if op == "reduce_scatter":
        return max(group_size, 1)
    return {"all_gather_object": 2, "broadcast_object_list": 2, "gather_object": 2, "scatter_object_list": 3}.get(op, 1)


def origin(frames: list[dict], torch_dir: str, engine_dir: str) -> tuple[str, dict | None]:
    """Who issued a recorded collective, from its Python stack (innermost frame first). Past
    torch's own frames, the first other frame decides: the engine's tracing ("traced"), the
    engine itself ("engine"), or anything else, notebook code or a standard-library helper that
    called the backend for it ("notebook"). A stack of torch's frames only is the notebook's too:
    torch's code run by the autograd engine or a thread, handed to them by the notebook.

    The engine's pass-through frames (MatmulLog's dispatch) are read past as torch's are.

    A traced call made inside another traced call is recorded by neither (the tracer records the
    outermost call only, as torch's own calls nest: `all_gather_object` calls `all_gather`).
    Between the two only library frames belong; notebook code there ran inside a traced call (a
    tensor subclass's or a mode's `__torch_function__`): "nested"."""
    tracer = inside = None
    for frame in frames:
        filename = frame.get("filename", "")
        real = os.path.realpath(filename) if filename and not filename.startswith("<") else filename
        if real.startswith(torch_dir) or (real.startswith(engine_dir) and real[len(engine_dir):] in _PASS_THROUGH):
            continue
        is_tracer = real.startswith(engine_dir) and os.path.basename(real) in _TRACERS
        if tracer is None:
            if not is_tracer:
                return ("engine" if real.startswith(engine_dir) else "notebook"), frame
            tracer = frame
        elif is_tracer and inside is not None:
            return "nested", inside
        elif not is_tracer and inside is None and not is_library_file(filename):
            inside = frame  # (a library's decorator, such as typing_extensions' @deprecated, is not)
    return ("traced", tracer) if tracer is not None else ("notebook", frames[0] if frames else None)


class CommWitness:
    """Counts, across one run, what the backend did against what the trace recorded."""

    def __init__(self):
        import torch
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        self._c10d, self._dist = c10d, dist
        self._torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
        # the package's root (this file is in nanoparallel/grading/)
        self._engine_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
        self._dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
        self._last_id = self._entries_after(-1)[1]
        self._groups: dict = {}

    def begin(self) -> None:
        self._groups = {}
        for group in self._registered():
            self._groups[group] = self._count(group)

    def untraced(self, traced_calls: list[tuple[str, int]] | None) -> str | None:
        """Why the run's communication was not all traced (None when it was). `traced_calls`:
        (op, group size) of every call the trace recorded in the run, or None to look at the
        run's collectives only (a run that raised)."""
        entries, newest = self._entries_after(self._last_id)
        made = newest - self._last_id
        lost = max(0, made - len(entries))  # fell out of the recorder's ring
        self._last_id = newest
        if lost:
            return (f"the run made {made} collectives, more than the {FLIGHT_RECORDER_ENTRIES} the grader keeps "
                    "track of, so who issued the oldest cannot be told (no exercise needs that many in one run)")
        through_tracer = 0
        for entry in entries:
            who, frame = origin(entry.get("frames") or [], self._torch_dir, self._engine_dir)
            through_tracer += who == "traced"
            if who == "nested":
                return (f"code ran {entry.get('profiling_name', 'a collective')} inside a traced call, where the "
                        f"trace records nothing ({frame.get('filename')}:{frame.get('line')})")
            if who == "engine":  # no engine code calls torch's collectives past its tracer under grading
                return (f"{entry.get('profiling_name', 'a collective')} ran untraced from the engine's own code "
                        f"({frame.get('filename')}:{frame.get('line')}), which only calls what notebook code handed it")
            if who == "notebook":
                where = f"{frame.get('filename')}:{frame.get('line')}" if frame else "no Python frame"
                if frame and os.path.realpath(frame.get("filename", "")).startswith(self._torch_dir):
                    where = f"torch's code only, run for it by autograd or a thread: {where}"
                return (f"notebook code ran {entry.get('profiling_name', 'a collective')} itself, not through "
                        f"the traced torch.distributed functions ({where})")
        if traced_calls is None:
            return None
        recorded = sum(collective_entries(op, n) for op, n in traced_calls)
        if through_tracer > recorded:
            return (f"the backend ran {through_tracer} collectives through the tracer's code, but the trace recorded "
                    f"calls that make {recorded}: notebook code ran the tracer's wrappers with a tracer of its own")
        counted = 0
        for group in set(self._groups) | set(self._registered()):
            try:
                counted += self._count(group) - self._groups.get(group, 0)
            except Exception:  # a group destroyed during the run: it counts nothing more
                continue
        registered = self._registered_names()
        collectives = sum(1 for e in entries if tuple(e.get("process_group") or ("?",))[0] in registered)
        expected = sum(point_to_point_ops(op, n) for op, n in traced_calls)
        if counted - collectives > expected:
            return (f"the rank's process groups ran {counted - collectives - expected} point-to-point "
                    "operation(s) more than its traced calls made: notebook code sent or received outside "
                    "the traced torch.distributed functions")
        # And the other way: each traced send or receive is one backend operation, so a trace that
        # holds more than the groups ran was written by notebook code (events appended for
        # messages that were never sent).
        simple = sum(1 for op, _ in traced_calls if op in ("send", "recv", "isend", "irecv"))
        if counted - collectives < simple:
            return (f"the trace holds {simple} sends and receives, but the rank's process groups ran "
                    f"{max(counted - collectives, 0)}: notebook code wrote events into the trace")
        return None

    def _registered(self) -> list:
        if not self._dist.is_initialized():
            return []
        return [g for g in list(self._c10d._world.pg_map) if g is not None]

    def _registered_names(self) -> set:
        return {getattr(g, "group_name", None) for g in self._registered()}

    @staticmethod
    def _count(group) -> int:
        return group._get_sequence_number_for_group()

    def _entries_after(self, last_id: int) -> tuple[list[dict], int]:
        """The recorder's entries newer than `last_id`, and the newest id (or `last_id`)."""
        if self._dump is None:
            return [], last_id
        try:
            dump = pickle.loads(self._dump(includeCollectives=True, includeStackTraces=True, onlyActive=False))
        except Exception:  # no recorder in this build, or nothing recorded yet
            return [], last_id
        entries = [e for e in dump.get("entries", []) if e.get("record_id", -1) > last_id]
        return entries, max([last_id] + [e["record_id"] for e in entries])
