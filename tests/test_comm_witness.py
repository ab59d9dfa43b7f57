"""The ranks' witness of communication the trace did not see (nanoparallel/grading/comm_witness.py): its
pure rules, and guarded ranks that communicate past the trace (stopped) or through it (not)."""
from __future__ import annotations

import functools
import os

import pytest
import torch
import torch.distributed as dist

from nanoparallel import Cluster, RankError
from nanoparallel.grading import rank_guard
from nanoparallel.runtime.cluster import environment
from nanoparallel.grading.comm_witness import FLIGHT_RECORDER_ENTRIES, collective_entries, origin, point_to_point_ops

TORCH = os.path.dirname(torch.__file__) + os.sep
ENGINE = os.path.dirname(os.path.abspath(rank_guard.__file__)) + os.sep


def frames(*files):
    return [{"filename": f, "name": name, "line": 1} for f, name in files]


def test_origin_reads_the_stack_past_torch():
    c10d = (TORCH + "distributed/distributed_c10d.py", "all_reduce")
    ops = (TORCH + "_ops.py", "__call__")
    traced = (ENGINE + "tracing.py", "traced")
    cell = ("<dynamic-code>", "my_all_reduce")
    assert origin(frames(c10d, traced, cell), TORCH, ENGINE)[0] == "traced"
    assert origin(frames(c10d, cell), TORCH, ENGINE)[0] == "notebook"     # the function a wrapper wraps
    assert origin(frames(cell), TORCH, ENGINE)[0] == "notebook"           # a process group's own method
    assert origin(frames(ops, (TORCH + "_library/autograd.py", "forward"), cell), TORCH, ENGINE)[0] == "notebook"
    assert origin(frames(("/usr/lib/python3.11/threading.py", "run"), cell), TORCH, ENGINE)[0] == "notebook"
    # torch's frames only: torch's function hung as a gradient hook, or run by a thread
    backward = (TORCH + "autograd/graph.py", "_engine_run_backward")
    assert origin(frames(c10d, backward, (TORCH + "_tensor.py", "backward"), cell), TORCH, ENGINE)[0] == "notebook"
    assert origin(frames(c10d), TORCH, ENGINE)[0] == "notebook"
    assert origin([], TORCH, ENGINE)[0] == "notebook"
    assert origin(frames(c10d, (ENGINE + "worker.py", "_join_group")), TORCH, ENGINE)[0] == "engine"
    # MatmulLog, a dispatch mode around code that communicates, passes torch's calls through
    dispatch = (ENGINE + os.path.join("runtime", "flops.py"), "__torch_dispatch__")
    assert origin(frames(c10d, dispatch, c10d, traced, cell), TORCH, ENGINE)[0] == "traced"
    assert origin(frames(c10d, dispatch, cell), TORCH, ENGINE)[0] == "notebook"
    # a traced call inside a traced one: torch's own nesting, or code that ran inside the outer call
    gather = (TORCH + "distributed/distributed_c10d.py", "all_gather_object")
    assert origin(frames(c10d, traced, gather, traced, cell), TORCH, ENGINE)[0] == "traced"
    torch_function = (TORCH + "overrides.py", "handle_torch_function")
    inside = ("<dynamic-code>", "__torch_function__")
    assert origin(frames(c10d, traced, inside, torch_function, c10d, traced, cell), TORCH, ENGINE) == (
        "nested", frames(inside)[0])


@pytest.mark.parametrize("op, n, entries", [("all_reduce", 4, 1), ("all_gather_object", 2, 2), ("scatter_object_list", 4, 3),
                                            ("reduce_scatter", 4, 4), ("send", 2, 0), ("monitored_barrier", 8, 0)])
def test_collective_entries_per_traced_call(op, n, entries):
    assert collective_entries(op, n) == entries


@pytest.mark.parametrize("op, n, ops", [("send", 4, 1), ("irecv", 8, 1), ("send_object_list", 2, 2),
                                         ("monitored_barrier", 8, 14), ("all_reduce", 8, 0), ("barrier", 4, 0)])
def test_point_to_point_ops_per_traced_call(op, n, ops):
    assert point_to_point_ops(op, n) == ops


def traced_everything():
    t = torch.ones(4)
    r, p = dist.get_rank(), dist.get_rank() ^ 1
    dist.all_reduce(t)
    dist.all_gather_object([None] * dist.get_world_size(), r)
    dist.send(t, p) if r % 2 == 0 else dist.recv(t, p)
    dist.send_object_list([1], p) if r % 2 == 0 else dist.recv_object_list([None], p)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, p), dist.P2POp(dist.irecv, torch.empty(4), p)])
    [w.wait() for w in works]
    dist.monitored_barrier()
    dist.reduce_scatter(torch.empty(1), [torch.ones(1)] * dist.get_world_size())
    return t.sum().item()


def wrapped_original():
    t = torch.ones(4)
    dist.all_reduce.__wrapped__(t)
    return t.sum().item()


def process_group_messages():
    t, r = torch.ones(4), dist.get_rank()
    group = dist.distributed_c10d._get_default_group()
    (group.send([t], r ^ 1, 0) if r % 2 == 0 else group.recv([t], r ^ 1, 0)).wait()
    return 0


def torch_function_as_a_gradient_hook():
    """Autograd calls torch's untraced all_reduce: no notebook frame on the collective's stack."""
    bump = torch.zeros((), requires_grad=True)
    bump.register_hook(functools.partial(dist.all_reduce.__wrapped__))
    (2 * bump).backward()
    return 0


def inside_a_traced_call():
    """A tensor subclass made on the rank runs another all_reduce from its __torch_function__,
    inside the traced one, where the tracer records nothing."""
    class Carrier(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "all_reduce":
                dist.all_reduce(torch.ones(2))
            return super().__torch_function__(func, types, args, kwargs or {})

    dist.all_reduce(torch.ones(4).as_subclass(Carrier))
    return 0


def code_named_after_the_tracer():
    """Code compiled on the rank under the tracer's file name: its frame would read as the tracer's."""
    tracer_file = os.path.join(os.path.dirname(os.path.dirname(rank_guard.__file__)), "runtime", "tracing.py")
    namespace = {"torch": torch, "dist": dist}
    exec(compile("def traced(t):\n    return dist.all_reduce.__wrapped__(t)\n", tracer_file, "exec"), namespace)
    namespace["traced"](torch.ones(4))
    return 0


def a_tracer_of_its_own():
    """The tracer's own wrapper, built around torch's all_reduce with a tracer the notebook made:
    its frames are the tracer's, and the rank's trace records nothing."""
    import copy
    from nanoparallel.runtime import tracing
    from nanoparallel.runtime.context import current_tracer
    mine = copy.copy(current_tracer())
    mine.events, mine.pending = [], []
    tracing._wrap("all_reduce", dist.all_reduce.__wrapped__, mine)(torch.ones(4))
    return 0


def through_an_engine_caller():
    """The engine's weight-gradient store runs what it was handed: torch's untraced all_reduce."""
    from nanoparallel.lessons.pipeline.stage import WeightGradStore
    store = WeightGradStore()
    store.put(functools.partial(dist.all_reduce.__wrapped__, torch.ones(4)))
    store.flush(0)
    store.pop(0)
    return 0


def raw_functional_operator():
    t = torch.ones(4)
    name = dist.distributed_c10d._get_default_group().group_name
    out = torch.ops._c10d_functional.all_reduce.__wrapped_by_nanoparallel__(t, "sum", name)
    torch.ops._c10d_functional.wait_tensor.__wrapped_by_nanoparallel__(out)
    return 0


def through_a_file():
    # (torch.save to a path opens it in C++, where Python raises no audit event: docs/grading.md)
    with open(f"/tmp/rank-{dist.get_rank()}.bin", "wb") as f:
        f.write(b"1")
    return 0


def through_the_store():
    dist.distributed_c10d._get_default_store().set(f"rank-{dist.get_rank()}", b"1")
    return 0


def through_a_socket():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"1", ("127.0.0.1", 47999))
    return 0


def through_torch_save():
    torch.save(torch.ones(2), f"/tmp/rank-{dist.get_rank()}.pt")  # torch writes the file in C++
    return 0


def through_a_shared_storage():
    torch.UntypedStorage.from_file(f"/tmp/rank-{dist.get_rank()}.bin", True, 8)
    return 0


def through_posix_shared_memory():
    import _posixshmem
    _posixshmem.shm_open(f"/rank-{dist.get_rank()}", os.O_CREAT | os.O_RDWR, 0o600)
    return 0


def through_a_named_pipe():
    # (no audit event for os.mkfifo, nor for the os.stat another rank would read it back with)
    os.mkfifo(f"/tmp/rank-{dist.get_rank()}.fifo")
    return 0


def through_posix_mknod():
    import posix
    posix.mknod(f"/tmp/rank-{dist.get_rank()}.node")
    return 0


def through_zmq():
    import zmq  # noqa: F401 (its sockets are C's)
    return 0


def through_the_status_board():
    """The engine's status board holds this rank's slot only: nothing another rank wrote."""
    from nanoparallel.runtime.context import current_tracer
    board = current_tracer().board
    return sorted(k for k in vars(board) if not k.startswith("__")), board.rank


def overriding_an_operator():
    """Not a channel, but as bad: a kernel registered for an operator the checks use."""
    torch.library.Library("aten", "IMPL").impl("allclose", lambda *args, **kwargs: True, "CPU")
    return 0


def a_group_of_its_own():
    """torch's own use of the store (a new group meets through it) and a library file read (a
    warning's source line) are no channel."""
    import warnings
    group = dist.new_group([0, 1])
    if dist.get_rank() < 2:
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # Attributed to the caller (the engine's worker): its source line is read from a library file.
        warnings.warn("a warning", stacklevel=2)
    return 0


def test_guarded_ranks_stop_on_channels_that_are_not_torch_distributed():
    with environment({rank_guard.ENV: "1"}), Cluster(world_size=4, timeout=30) as cluster:
        assert list(cluster.run(a_group_of_its_own)) == [0] * 4
        assert cluster.run(through_the_status_board) == [(["_arena", "rank"], r) for r in range(4)]
        for channel, named in ((through_a_file, "for writing"), (through_the_store, "store"),
                               (through_a_socket, "socket"), (through_torch_save, "torch.save"),
                               (through_a_shared_storage, "shared by file"),
                               (through_posix_shared_memory, "POSIX shared memory"), (through_zmq, "zmq"),
                               (through_a_named_pipe, r"os\.mkfifo"), (through_posix_mknod, r"os\.mknod"),
                               # torch 2.11's Library reads its caller's source line first: this
                               # file, in the working folder (a notebook's code has no file).
                               (overriding_an_operator, r"torch\.library|open\('.*test_comm_witness\.py'\)")):
            with pytest.raises(RankError, match=named):
                cluster.run(channel)
            assert list(cluster.run(traced_everything)) == [16.0] * 4


def untraced_then_raised():
    """A run that raises is looked at too (its point-to-point counts are not compared)."""
    wrapped_original()
    raise ValueError("the run fails on purpose")


def flushed_out_of_sight():
    """An untraced collective, then enough traced ones to push it out of the flight recorder."""
    wrapped_original()
    for _ in range(FLIGHT_RECORDER_ENTRIES):
        dist.all_reduce(torch.ones(1))
    return 0


def test_guarded_ranks_stop_on_communication_the_trace_missed():
    with environment({rank_guard.ENV: "1"}), Cluster(world_size=4, timeout=30) as cluster:
        assert list(cluster.run(traced_everything)) == [16.0] * 4
        with pytest.raises(RankError, match=f"more than the {FLIGHT_RECORDER_ENTRIES} the grader keeps track of"):
            cluster.run(flushed_out_of_sight)
        assert list(cluster.run(traced_everything)) == [16.0] * 4
        for untraced in (wrapped_original, process_group_messages, raw_functional_operator, untraced_then_raised,
                         torch_function_as_a_gradient_hook, inside_a_traced_call, code_named_after_the_tracer,
                         a_tracer_of_its_own, through_an_engine_caller):
            with pytest.raises(RankError, match="stopped by the grader's guard"):
                cluster.run(untraced)
            assert list(cluster.run(traced_everything)) == [16.0] * 4  # and the ranks are healthy again
