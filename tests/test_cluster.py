"""The runtime: results in rank order, failures explained, recovery, bad input."""
import os
import pickle
import threading

import pytest
import torch
import torch.distributed as dist

from nanoparallel import Cluster, ClusterError, DeadlockError, RankError
from nanoparallel.runtime import board
from nanoparallel.runtime.board import COMM


def rank_and_size():
    return dist.get_rank(), dist.get_world_size()


def summed(x):
    t = torch.tensor([float(dist.get_rank()) + x])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_results_come_back_in_rank_order(cluster, world_size):
    cluster.resize(world_size)
    assert cluster.run(rank_and_size) == [(r, world_size) for r in range(world_size)]
    expected = sum(range(world_size)) + world_size * 0.5
    assert cluster.run(summed, 0.5) == [expected] * world_size


def test_kwargs_and_closures_travel_by_value(cluster4):
    offset = torch.arange(3.0)  # captured by the lambda, sent by value
    out = cluster4.run(lambda scale=1.0: offset * scale + dist.get_rank(), scale=2.0)
    assert [t.tolist() for t in out] == [[r, r + 2.0, r + 4.0] for r in range(4)]


def test_run_each_sends_every_rank_its_own_input_only(cluster4):
    secrets = [torch.full((2,), float(10 * r)) for r in range(4)]

    def what_reached_me(x, scale):
        import gc
        seen = {float(t.sum()) for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.numel() == 2}
        return float(x[0]) * scale, seen

    out = cluster4.run_each(what_reached_me, secrets, 0.5)
    assert [value for value, _ in out] == [5.0 * r for r in range(4)]
    for r, (_, seen) in enumerate(out):
        assert {20.0 * q for q in range(4) if q != r}.isdisjoint(seen), f"rank {r} holds another rank's input"


def test_run_each_sends_a_view_without_the_storage_behind_it(cluster4):
    whole = torch.arange(8.0)
    out = cluster4.run_each(lambda part: (part.tolist(), part.untyped_storage().nbytes()), whole.tensor_split(4))
    assert out == [([2.0 * r, 2.0 * r + 1], 8) for r in range(4)]
    nested = cluster4.run_each(lambda inp: inp["part"][0].untyped_storage().nbytes(),
                               [{"part": (p,)} for p in whole.tensor_split(4)])
    assert nested == [8] * 4
    leaf = torch.arange(8.0, requires_grad=True)
    assert cluster4.run_each(lambda part: (part.requires_grad, part.is_leaf), leaf.tensor_split(4)) == [(True, True)] * 4


@pytest.mark.parametrize("inputs, says", [([1, 2, 3], "one input per rank: got 3 for 4 ranks"),
                                          (7, "a list with one input per rank")])
def test_run_each_refuses_anything_but_one_input_per_rank(cluster4, inputs, says):
    with pytest.raises((ValueError, TypeError), match=says):
        cluster4.run_each(lambda x: x, inputs)
    assert cluster4.run(rank_and_size)[3] == (3, 4)


def test_printed_output_is_shown_by_rank_on_stdout(cluster4, capfd):
    cluster4.run(lambda: print(f"hello from {dist.get_rank()}"))
    out, err = capfd.readouterr()
    assert out.splitlines() == [f"[rank {r}] hello from {r}" for r in range(4)]
    assert err == ""


def test_exception_names_rank_and_cluster_recovers(cluster4):
    def fails_on_two():
        if dist.get_rank() == 2:
            raise ValueError("bad shard")
        return dist.get_rank()

    with pytest.raises(RankError) as info:
        cluster4.run(fails_on_two)
    err = info.value
    assert err.rank == 2 and err.failed_ranks == [2]
    assert isinstance(err.exception, ValueError)
    assert "rank 2 raised ValueError: bad shard" in str(err)
    assert "fails_on_two" in str(err)  # the traceback points at the learner's function
    assert cluster4.run(summed, 0.0) == [6.0] * 4


def test_exception_while_others_wait_restarts_them(cluster4):
    def two_fails_others_wait():
        if dist.get_rank() == 2:
            raise RuntimeError("gave up")
        dist.barrier()

    with pytest.raises(RankError) as info:
        cluster4.run(two_fails_others_wait)
    assert "rank 0: barrier(4 ranks) pending" in str(info.value)
    assert cluster4.run(summed, 1.0) == [10.0] * 4


def test_every_rank_raising_reports_all(cluster4):
    def stub():
        raise NotImplementedError()

    with pytest.raises(RankError) as info:
        cluster4.run(stub)
    assert info.value.failed_ranks == [0, 1, 2, 3]
    assert cluster4.run(rank_and_size)[3] == (3, 4)


def lonely_recv():
    """Rank 0 waits for a message rank 1 never sends."""
    if dist.get_rank() == 0:
        dist.recv(torch.zeros(1), src=1)


def test_mismatched_recv_is_a_deadlock_naming_the_op(cluster4):
    with pytest.raises(DeadlockError) as info:
        cluster4.run(lonely_recv)
    assert info.value.waiting[0].startswith("recv(src=1) pending")
    assert info.value.waiting[1] == "finished"
    assert "rank 0: recv(src=1) pending 5.0 s" in str(info.value)
    assert cluster4.run(summed, 0.0) == [6.0] * 4


def test_skipped_collective_is_a_deadlock(cluster4):
    def three_skips():
        if dist.get_rank() != 3:
            dist.all_reduce(torch.ones(4))

    with pytest.raises(DeadlockError) as info:
        cluster4.run(three_skips)
    waiting = info.value.waiting
    assert all(waiting[r].startswith("all_reduce(4 ranks) pending") for r in range(3))
    assert waiting[3] == "finished"
    assert cluster4.run(summed, 0.0) == [6.0] * 4


def test_async_wait_is_named_in_a_deadlock(cluster4):
    def unmatched_irecv():
        if dist.get_rank() == 1:
            dist.irecv(torch.zeros(2), src=3).wait()

    with pytest.raises(DeadlockError) as info:
        cluster4.run(unmatched_irecv)
    assert info.value.waiting[1].startswith("wait on irecv(src=3) pending")


@pytest.fixture
def stall_after_1s(cluster4):
    """The session cluster, calling a run that waits 1 s in calls, using almost no CPU, a deadlock."""
    cluster4.stall_timeout, cluster4.timeout = 1.0, 30.0
    yield cluster4
    cluster4.stall_timeout, cluster4.timeout = 0, 5.0


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_stall_is_a_deadlock_long_before_the_deadline(stall_after_1s):
    with pytest.raises(DeadlockError) as info:
        stall_after_1s.run(lonely_recv)
    assert info.value.waiting[0].startswith("recv(src=1) pending")
    assert info.value.waiting[1] == "finished"
    seconds = float(str(info.value).split("within ")[1].split(" s")[0])
    assert 1.0 <= seconds < 10.0, str(info.value)  # the deadline is 30 s
    assert stall_after_1s.run(summed, 0.0) == [6.0] * 4


def test_slow_work_is_not_a_stall(stall_after_1s):
    """A peer sleeping (emulated device time) or computing is outside any call, and a large
    transfer uses CPU: none of them is called a deadlock, however long the others wait."""
    def late_sender(busy):
        import time
        if dist.get_rank() == 1:
            end = time.perf_counter() + 2.5
            while busy and time.perf_counter() < end:
                pass
            time.sleep(0 if busy else 2.5)
            dist.send(torch.ones(1), dst=0)
        if dist.get_rank() == 0:
            dist.recv(torch.zeros(1), src=1)
        for _ in range(3):
            dist.all_reduce(torch.ones(4 << 20))  # 16 MiB
        return dist.get_rank()

    assert stall_after_1s.run(late_sender, False) == [0, 1, 2, 3]
    assert stall_after_1s.run(late_sender, True) == [0, 1, 2, 3]


class _Calls:
    """A status board on which every rank has sat in the same call since time 0."""

    def read(self, rank):
        return COMM, 0.0, f"recv(src={rank - 1})"


def _watch(monkeypatch, ticks_at):
    """StallWatch(1 s) on 8 ranks, polled every 0.25 s of a fake clock for 4 s; `ticks_at(rank,
    poll)` is the CPU a rank has used so far. Returns the first poll that says stalled."""
    clock = [0.0]
    monkeypatch.setattr(board.time, "monotonic", lambda: clock[0])
    poll = [0]
    monkeypatch.setattr(board, "cpu_ticks", lambda pid: ticks_at(pid - 100, poll[0]))
    watch = board.StallWatch(_Calls(), 1.0)
    for poll[0] in range(17):
        clock[0] = poll[0] * 0.25
        if watch.stalled({rank: 100 + rank for rank in range(8)}):
            return poll[0]
    return None


def test_blocked_ranks_whose_network_thread_ticks_now_and_then_are_a_stall(monkeypatch):
    """gloo's network thread wakes now and then, so a blocked rank is charged a clock tick every
    few seconds: with eight ranks, one of them does in most seconds."""
    first = _watch(monkeypatch, lambda rank, poll: (poll + rank) // 8)  # some rank ticks every 0.25 s
    assert first == 4  # 1 s after the calls began


def test_ranks_moving_data_are_never_a_stall(monkeypatch):
    assert _watch(monkeypatch, lambda rank, poll: 3 * poll) is None  # 12 ticks/s: 12 % of a core
    assert _watch(monkeypatch, lambda rank, poll: 3 * poll * (rank == 5)) is None  # one rank is enough


def test_a_dying_rank_is_reported_and_replaced(cluster4):
    def exit_on_one():
        if dist.get_rank() == 1:
            os._exit(3)
        return "ok"

    old = cluster4.pids
    with pytest.raises(RankError) as info:
        cluster4.run(exit_on_one)
    assert "rank 1 died (exit code 3)" in str(info.value)
    assert cluster4.run(lambda: "ok") == ["ok"] * 4
    assert not set(old) & set(cluster4.pids)


def test_unpicklable_function_fails_before_reaching_the_ranks(cluster4):
    lock = threading.Lock()
    with pytest.raises(ClusterError, match="Functions travel by value"):
        cluster4.run(lambda: lock.locked())
    assert cluster4.run(rank_and_size)[0] == (0, 4)


def test_unpicklable_return_value_is_a_clear_rank_error(cluster4):
    with pytest.raises(RankError, match="returned a value that cannot be sent back"):
        cluster4.run(lambda: (i for i in range(3)))
    assert cluster4.run(summed, 0.0) == [6.0] * 4


def test_not_a_function(cluster4):
    with pytest.raises(TypeError, match="needs a function"):
        cluster4.run(42)


@pytest.mark.parametrize("bad", [0, -1, 33, 2.0, "4", True])
def test_bad_world_sizes_are_refused(bad):
    with pytest.raises(ClusterError, match="world_size"):
        Cluster(world_size=bad)


def test_bad_resize_leaves_the_cluster_working(cluster4):
    with pytest.raises(ClusterError, match="between 1 and 32"):
        cluster4.resize(0)
    assert cluster4.world_size == 4
    assert cluster4.run(summed, 0.0) == [6.0] * 4


def test_nccl_without_gpus_is_refused():
    if torch.cuda.is_available():
        pytest.skip("this machine has GPUs; the refusal is for CPU-only machines")
    with pytest.raises(ClusterError, match="one GPU per rank"):
        Cluster(world_size=2, backend="nccl")


def test_cluster_cannot_be_sent_to_its_ranks(cluster4):
    with pytest.raises(TypeError, match="cannot be sent to its ranks"):
        pickle.dumps(cluster4)


def test_growing_past_the_spawned_ranks_spawns_more():
    with Cluster(world_size=1) as c:
        assert c.run(rank_and_size) == [(0, 1)]
        c.resize(3)
        assert c.run(rank_and_size) == [(0, 3), (1, 3), (2, 3)]
        assert len(c.pids) == 3


def test_run_after_close_is_refused():
    c = Cluster(world_size=2)
    c.close()
    c.close()  # idempotent
    with pytest.raises(ClusterError, match="closed"):
        c.run(rank_and_size)


def test_a_function_naming_an_attribute_config_travels(cluster):
    """`dist` plus an attribute called `config` made cloudpickle copy torch.distributed.config,
    a module subclass it cannot pickle; such modules now travel by name."""
    class Holder:
        config = 3

    def uses_config(holder):
        return holder.config + dist.get_rank()

    assert list(cluster.run(uses_config, Holder())) == [3 + r for r in range(cluster.world_size)]
