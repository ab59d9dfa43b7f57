"""Tracing of torch's functional collectives: what DTensor and the tensor-parallel styles send.

DTensor, `torch.distributed.tensor.parallel` and `torch.distributed._functional_collectives`
do not call the ``torch.distributed`` functions that `tracing.install` wraps. They call the
operators of the ``torch.ops._c10d_functional`` namespace (and its ``_autograd`` twin), which
return at once; the work completes when ``wait_tensor`` is called on the output (DTensor's
AsyncCollectiveTensor does that at the output's first use).

`install(tracer)` puts a recording stand-in in front of each of those operators, so the trace
shows torch's communication exactly as it shows a learner's: the same op names
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``all_to_all_single``,
``broadcast``), bytes in the same convention (`trace.collective_bytes`), and, like every async
op, counted when the output is waited on.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from nanoparallel.runtime.board import COMM, RUNNING
from nanoparallel.runtime.trace import collective_bytes, describe_op
from nanoparallel.runtime.tracing import Tracer, TracedWork

# operator name -> the torch.distributed name the trace records it under
TRACED_FUNCTIONAL_OPS = {
    "all_reduce": "all_reduce", "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "all_to_all_single": "all_to_all_single",
    "broadcast": "broadcast", "broadcast_": "broadcast",
}
_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")


class _TracedOperator:
    """Stands in for one operator packet. It compares and hashes as the packet it wraps, and
    forwards attributes (``.default`` and the other overloads), so code that looks operators
    up in a table (e.g. torch's CommDebugMode) still finds them."""

    def __init__(self, packet, call):
        self.__wrapped_by_nanoparallel__ = packet
        self._call = call

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.__wrapped_by_nanoparallel__, name)

    def __eq__(self, other):
        return other is self or other is self.__wrapped_by_nanoparallel__

    def __hash__(self):
        return hash(self.__wrapped_by_nanoparallel__)


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    return sum(_nbytes(t) for t in x) if isinstance(x, (list, tuple)) else 0


def _describe(op: str, args: tuple, kwargs: dict):
    """(trace op name, group ranks, bytes sent, bytes received, root) of one operator call."""
    values = list(args) + list(kwargs.values())  # every operator takes its group name last
    group = tuple(dist.get_process_group_ranks(c10d._resolve_process_group(values[-1])))
    me, p = group.index(dist.get_rank()), len(group)
    name, first = TRACED_FUNCTIONAL_OPS[op], values[0]
    in_bytes, out_bytes, splits, root = _nbytes(first), 0, (None, None), None
    if name == "reduce_scatter_tensor":
        out_bytes = in_bytes // p
    elif name == "all_to_all_single":  # (input, output_split_sizes, input_split_sizes, group)
        row = in_bytes // max(first.shape[0], 1) if first.dim() else 0
        splits = ([s * row for s in values[2]], [s * row for s in values[1]])
    elif name == "broadcast":
        root = values[1]
    sent, recv = collective_bytes(name, me, p, None if root is None else group.index(root),
                                  in_bytes, out_bytes, *splits)
    return name, group, sent, recv, root


def _outputs(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _storage(t: torch.Tensor) -> int:
    # torch may wait on a view of the output (AsyncCollectiveTensor defers views), so outputs
    # are matched by the memory they live in, not by tensor object
    return t.untyped_storage().data_ptr()


def _traced_collective(op: str, packet, tracer: Tracer, waiting: dict):
    def call(*args, **kwargs):
        if tracer.depth > 0:
            return packet(*args, **kwargs)
        try:
            name, group, sent, recv, root = _describe(op, args, kwargs)
        except Exception:  # malformed arguments: let torch raise its own, clearer error
            return packet(*args, **kwargs)
        start = tracer.now()
        tracer.depth += 1
        try:
            result = packet(*args, **kwargs)
        finally:
            tracer.depth -= 1
        work = TracedWork(None, tracer, dict(rank=tracer.rank, op=name, peer=root, group=group,
                                             bytes_sent=sent, bytes_recv=recv, start=start,
                                             is_async=True))
        tracer.pending.append(work)
        for out in _outputs(result):  # waiting on any output completes the whole call
            waiting[_storage(out)] = (out, work)  # holding `out` keeps its memory from reuse
        return result
    return call


def _traced_wait(packet, tracer: Tracer, waiting: dict):
    def call(tensor, *args, **kwargs):
        entry = waiting.pop(_storage(tensor), None) if isinstance(tensor, torch.Tensor) else None
        if entry is None:
            return packet(tensor, *args, **kwargs)
        work = entry[1]
        f = work._fields
        tracer.board.post(tracer.rank, COMM, "wait on " + describe_op(f["op"], f["peer"], len(f["group"])))
        try:
            return packet(tensor, *args, **kwargs)
        finally:
            work._complete()
            for key in [k for k, (_, w) in waiting.items() if w is work]:
                del waiting[key]
            tracer.board.post(tracer.rank, RUNNING)
    return call


def install(tracer: Tracer) -> None:
    """Route torch's functional collectives through `tracer` (idempotent per process)."""
    waiting = tracer.awaited_outputs
    for space_name in _NAMESPACES:
        space = getattr(torch.ops, space_name)
        for op in list(TRACED_FUNCTIONAL_OPS) + ["wait_tensor"]:
            try:
                packet = getattr(space, op)
            except (AttributeError, RuntimeError):
                continue  # not every operator exists in both namespaces
            packet = getattr(packet, "__wrapped_by_nanoparallel__", packet)
            if op == "wait_tensor":
                call = _traced_wait(packet, tracer, waiting)
            else:
                call = _traced_collective(op, packet, tracer, waiting)
            setattr(space, op, _TracedOperator(packet, call))

