"""Transparent tracing of torch.distributed inside a worker.

`install(tracer)` replaces the communication functions of ``torch.distributed`` (and of
``torch.distributed.distributed_c10d``, where ``from torch.distributed import send`` finds
them) with wrappers that record a `TraceEvent` and post the call on the status board. Learners
write ordinary torch.distributed code; nothing to import, nothing to call.

Calls that torch makes internally (``send`` is built on ``isend``, ``all_gather_object`` on
``all_gather``) are not recorded twice: only the outermost call counts, except inside
``batch_isend_irecv``, whose individual sends and receives are what the trace should show.
Async ops return a `TracedWork`; their bytes count when the work is waited on.
"""
from __future__ import annotations

import inspect
import sys
import threading
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from nanoparallel.runtime.board import COMM, RUNNING
from nanoparallel.runtime.trace import P2P_OPS, TraceEvent, collective_bytes, describe_op

TRACED_OPS = (
    "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "broadcast", "all_reduce", "reduce", "all_gather", "all_gather_single",
    "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_single",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
    "send_object_list", "recv_object_list",
)
_ROOT_ARGS = {"broadcast": "src", "reduce": "dst", "gather": "dst", "scatter": "src"}


class Tracer:
    """Collects the events of one run on one rank."""

    def __init__(self, rank: int, board):
        self.rank = rank
        self.board = board
        self.events: list[TraceEvent] = []
        self.pending: list[TracedWork] = []
        # output storage -> (output, work) of functional collectives not yet waited on
        self.awaited_outputs: dict[int, tuple] = {}
        self.t0 = time.perf_counter()
        self._local = threading.local()

    def begin(self, t0: float) -> None:
        self.events, self.pending, self.t0 = [], [], t0
        self.awaited_outputs.clear()

    def finish(self) -> list[TraceEvent]:
        """Events of the run; async works never waited on are kept with ``end=None``."""
        for work in self.pending:
            self.events.append(work.event(end=None))
        events, self.events, self.pending = self.events, [], []
        self.awaited_outputs.clear()
        return events

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # Reentrancy: only the outermost traced call records (see the module docstring).
    @property
    def depth(self) -> int:
        return getattr(self._local, "depth", 0)

    @depth.setter
    def depth(self, value: int) -> None:
        self._local.depth = value


class TracedWork:
    """Wraps a backend `Work` so that waiting on it completes its trace event."""

    def __init__(self, work, tracer: Tracer, fields: dict):
        self._work, self._tracer, self._fields = work, tracer, fields
        self._done = False

    def event(self, end):
        fields = dict(self._fields, end=end)
        if end is None:
            fields.update(bytes_sent=0, bytes_recv=0)
        return TraceEvent(**fields)

    def _complete(self):
        if not self._done:
            self._done = True
            self._tracer.pending.remove(self)
            self._tracer.events.append(self.event(self._tracer.now()))

    def wait(self, *args, **kwargs):
        f = self._fields
        self._tracer.board.post(self._tracer.rank, COMM,
                                "wait on " + describe_op(f["op"], f["peer"], len(f["group"])))
        result = self._work.wait(*args, **kwargs)
        self._complete()
        self._tracer.board.post(self._tracer.rank, RUNNING)
        return result

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._complete()
        return done

    def __getattr__(self, name):
        return getattr(self._work, name)


def _group_ranks(group) -> tuple[int, ...]:
    if group is None or group is c10d.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    return tuple(dist.get_process_group_ranks(group))


def _nbytes(t) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    return 0


def _storage(t) -> int | None:
    """The address of a tensor's storage (which buffer a message left from or arrived in)."""
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # a tensor subclass without a storage of its own
        return None


def _describe_call(name: str, a: dict):
    """(peer, group, (bytes_sent, bytes_recv), sent_to) of one call, from its bound arguments;
    sent_to: an all-to-all's bytes addressed to each member of the group, else ()."""
    group = _group_ranks(a.get("group"))
    rank = dist.get_rank()  # global rank, cached by torch
    if name in P2P_OPS:
        key = "dst" if name in ("send", "isend") else "src"
        peer = a.get(key)
        if peer is None and a.get("group_" + key) is not None:
            peer = group[a["group_" + key]]
        n = _nbytes(a["tensor"])
        return peer, group, ((n, 0) if key == "dst" else (0, n)), ()
    root = None
    if name in _ROOT_ARGS:
        key = _ROOT_ARGS[name]
        root = a.get(key)
        if root is None and a.get("group_" + key) is not None:
            root = group[a["group_" + key]]
    me = group.index(rank) if rank in group else 0
    root_in_group = group.index(root) if root in group else None
    send_split = recv_split = None
    if name == "all_to_all":
        send_split = [_nbytes(t) for t in a["input_tensor_list"]]
        recv_split = [_nbytes(t) for t in a["output_tensor_list"]]
    elif name == "all_to_all_single":
        send_split = _splits(a["input"], a.get("input_split_sizes"), len(group))
        recv_split = _splits(a["output"], a.get("output_split_sizes"), len(group))
    inputs = {"all_gather": "tensor", "gather": "tensor", "broadcast": "tensor",
              "all_reduce": "tensor", "reduce": "tensor"}
    in_arg = inputs.get(name, "input_tensor" if "input_tensor" in a else "input")
    out_arg = {"scatter": "tensor", "reduce_scatter": "output"}.get(
        name, "output_tensor" if "output_tensor" in a else "output")
    in_bytes, out_bytes = _nbytes(a.get(in_arg)), _nbytes(a.get(out_arg))
    return root, group, collective_bytes(name, me, len(group), root_in_group, in_bytes, out_bytes,
                                         send_split, recv_split), tuple(send_split or ())


def _splits(t, sizes, parts: int) -> list[int]:
    row = _nbytes(t) // max(t.shape[0], 1) if t.dim() else 0
    if not sizes:
        return [_nbytes(t) // parts] * parts
    return [s * row for s in sizes]


def _wrap(name: str, original, tracer: Tracer):
    # Binding by hand: inspect.Signature.bind costs more than the rest of the wrapper together.
    parameters = inspect.signature(original).parameters
    names = list(parameters)
    defaults = {k: p.default for k, p in parameters.items() if p.default is not p.empty}

    def traced(*args, **kwargs):
        local = tracer._local
        if name == "batch_isend_irecv":  # record the sends and receives it is made of instead
            local.in_batch = True
            try:
                return original(*args, **kwargs)
            finally:
                local.in_batch = False
        if tracer.depth > 0 and not getattr(local, "in_batch", False):
            return original(*args, **kwargs)
        a = {**defaults, **dict(zip(names, args)), **kwargs}
        try:
            peer, group, (sent, recv), sent_to = _describe_call(name, a)
        except Exception:  # malformed arguments: let torch raise its own, clearer error
            return original(*args, **kwargs)
        is_async = name in ("isend", "irecv") or bool(a.get("async_op", False))
        tracer.board.post(tracer.rank, COMM, describe_op(name, peer, len(group)))
        start = tracer.now()
        tracer.depth += 1
        try:
            result = original(*args, **kwargs)
        finally:
            tracer.depth -= 1
            tracer.board.post(tracer.rank, RUNNING)
        if name == "recv" and peer is None and isinstance(result, int) and result >= 0:
            peer = result  # a receive from any source: torch returns the sender
        fields = dict(rank=tracer.rank, op=name, peer=peer, group=group, bytes_sent=sent,
                      bytes_recv=recv, start=start, is_async=is_async, sent_to=sent_to,
                      storage=_storage(a["tensor"]) if name in P2P_OPS else None)
        if is_async and result is not None:
            work = TracedWork(result, tracer, fields)
            tracer.pending.append(work)
            return work
        tracer.events.append(TraceEvent(end=tracer.now(), **fields))
        return result

    traced.__name__ = traced.__qualname__ = name
    traced.__doc__ = original.__doc__
    traced.__wrapped__ = original
    return traced


def install(tracer: Tracer) -> None:
    """Route every traced torch.distributed function through `tracer` (idempotent per process)."""
    replaced = {}
    for name in TRACED_OPS:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        original = getattr(original, "__wrapped_by_nanoparallel__", original)
        traced = _wrap(name, original, tracer)
        traced.__wrapped_by_nanoparallel__ = original
        setattr(c10d, name, traced)
        if hasattr(dist, name):
            setattr(dist, name, traced)
        replaced[id(original)] = traced
    # torch's own modules that imported a function by name before this ran (DTensor's
    # `_collective_utils` imports scatter and broadcast) would call it untraced; modules imported
    # later import the traced one.
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("torch.") and module is not None and module is not c10d:
            for attr, value in list(vars(module).items()):
                if id(value) in replaced:
                    setattr(module, attr, replaced[id(value)])


@contextmanager
def region(tracer: Tracer | None, name: str):
    """Record a compute region (``kind="compute"``) such as a layer's forward or backward."""
    if tracer is None:
        yield
        return
    start = tracer.now()
    try:
        yield
    finally:
        tracer.events.append(TraceEvent(rank=tracer.rank, op=name, peer=None, group=(tracer.rank,),
                                        bytes_sent=0, bytes_recv=0, start=start,
                                        end=tracer.now(), kind="compute"))
