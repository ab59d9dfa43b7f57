"""Tracing: every torch.distributed call is recorded with the right peer and bytes."""
import warnings

import pytest
import torch
import torch.distributed as dist

import nanoparallel
from nanoparallel.runtime.trace import collective_bytes


def p2p_ring():
    r, p = dist.get_rank(), dist.get_world_size()
    got = torch.zeros(250)                       # 1000 bytes
    work = dist.isend(torch.full((250,), float(r)), dst=(r + 1) % p)
    dist.recv(got, src=(r - 1) % p)
    work.wait()
    return got[0].item()


def test_p2p_events_have_exact_peers_and_bytes(cluster4):
    out = cluster4.run(p2p_ring)
    assert out == [3.0, 0.0, 1.0, 2.0]
    trace = out.trace
    assert trace.bytes_sent() == [1000] * 4 and trace.bytes_received() == [1000] * 4
    for r in range(4):
        assert trace.ops(r) == {"isend", "recv"}  # send is built on isend inside torch: not counted twice
        assert trace.peers(r) == {(r + 1) % 4, (r - 1) % 4}
    sends = [e for e in trace.comm() if e.op == "isend"]
    assert all(e.is_async and e.end >= e.start >= 0 for e in sends)


def test_p2p_events_name_the_storage_sent_or_received_into(cluster4):
    def pair():
        buffer = torch.zeros(8)
        if dist.get_rank() == 0:
            dist.isend(buffer[2:], dst=1).wait()   # a view: its storage is the buffer's
        elif dist.get_rank() == 1:
            dist.recv(buffer, src=0)
        return buffer.untyped_storage().data_ptr()

    out = cluster4.run(pair)
    assert sorted((e.rank, e.storage) for e in out.trace.comm()) == [(0, out[0]), (1, out[1])]


def test_blocking_send_is_one_event(cluster4):
    def pair():
        if dist.get_rank() == 0:
            dist.send(torch.ones(8), dst=1)
        elif dist.get_rank() == 1:
            dist.recv(torch.zeros(8), src=0)

    trace = cluster4.run(pair).trace
    assert [(e.rank, e.op, e.peer, e.bytes_sent, e.bytes_recv) for e in trace.comm()
            if e.rank == 0] == [(0, "send", 1, 32, 0)]
    assert trace.op_counts(1) == {"recv": 1}


def test_async_bytes_count_only_once_waited(cluster4):
    def never_waits():
        if dist.get_rank() == 0:
            dist.isend(torch.ones(4), dst=1)   # never waited on; the barrier keeps it in flight
        elif dist.get_rank() == 1:
            dist.recv(torch.zeros(4), src=0)
        dist.barrier()

    trace = cluster4.run(never_waits).trace
    assert [e.op for e in trace.incomplete()] == ["isend"]
    assert trace.bytes_sent()[0] == 0 and trace.bytes_received()[1] == 16


def test_batch_isend_irecv_records_its_sends_and_receives(cluster4):
    def batched():
        r, p = dist.get_rank(), dist.get_world_size()
        ops = [dist.P2POp(dist.isend, torch.ones(10), (r + 1) % p),
               dist.P2POp(dist.irecv, torch.zeros(10), (r - 1) % p)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    trace = cluster4.run(batched).trace
    assert trace.op_counts() == {"isend": 4, "irecv": 4}
    assert trace.bytes_sent() == [40] * 4 and not trace.incomplete()
    assert trace.peers(0) == {1, 3}


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_collectives_are_charged_the_ring_algorithm_bytes(cluster, world_size):
    cluster.resize(world_size)

    def collectives():
        p = dist.get_world_size()
        x = torch.ones(1024)                                   # N = 4096 bytes
        dist.all_reduce(x)
        dist.all_gather([torch.zeros(256) for _ in range(p)], torch.ones(256))
        dist.reduce_scatter_tensor(torch.zeros(256), torch.ones(256 * p))
        dist.broadcast(x, src=0)
        w = dist.all_reduce(x, async_op=True)
        w.wait()

    trace = cluster.run(collectives).trace
    p = world_size
    per_rank = 2 * 2 * (p - 1) * 4096 // p + 2 * (p - 1) * 1024
    broadcast = [4096 if (r < p - 1) else 0 for r in range(p)]
    assert trace.bytes_sent() == [per_rank + b for b in broadcast]
    assert trace.op_counts(0) == {"all_reduce": 2, "all_gather": 1, "reduce_scatter_tensor": 1, "broadcast": 1}


def test_object_collectives_are_one_event_not_their_internals(cluster4):
    def objects():
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, {"rank": dist.get_rank()})
        return out

    result = cluster4.run(objects)
    assert result[0] == [{"rank": r} for r in range(4)]
    assert result.trace.op_counts() == {"all_gather_object": 4}


def test_imported_names_and_subgroups_are_traced(cluster4):
    def subgroup():
        from torch.distributed import all_reduce
        evens = dist.new_group([0, 2])
        odds = dist.new_group([1, 3])
        mine = evens if dist.get_rank() % 2 == 0 else odds
        t = torch.tensor([float(dist.get_rank())])
        all_reduce(t, group=mine)
        return t.item()

    out = cluster4.run(subgroup)
    assert out == [2.0, 4.0, 2.0, 4.0]
    events = out.trace.comm()
    assert {e.group for e in events} == {(0, 2), (1, 3)}
    assert out.trace.bytes_sent() == [4] * 4  # 2(P-1)/P·N with P=2, N=4 bytes


def test_compute_regions_appear_in_the_trace(cluster4):
    def work():
        with nanoparallel.region("forward"):
            torch.ones(100).sum()
        dist.barrier()

    trace = cluster4.run(work).trace
    assert [(e.op, e.kind) for e in trace.regions(0)] == [("forward", "compute")]
    assert trace.ops() == {"barrier"}


def test_region_outside_a_cluster_is_a_no_op():
    with nanoparallel.region("forward"):
        pass


def test_ranks_write_nothing_to_stderr(cluster4, capfd):
    def noisy():
        warnings.warn("a warning nobody should see", UserWarning)
        out = torch.zeros(4 * dist.get_world_size())
        dist.all_gather_into_tensor(out, torch.ones(4))  # deprecated in torch 2.13
        import sys
        print("to stderr", file=sys.stderr)
        return out.sum().item()

    assert cluster4.run(noisy) == [16.0] * 4
    out, err = capfd.readouterr()
    assert err == ""
    assert "[rank 0] to stderr" in out


def test_event_times_line_up_across_ranks(cluster4):
    def barrier_twice():
        dist.barrier()
        dist.barrier()

    out = cluster4.run(barrier_twice)
    second = [e for e in out.trace.comm() if e.op == "barrier"][4:]
    first_end = max(e.end for e in out.trace.comm() if e.op == "barrier" and e not in second)
    assert all(0 <= e.start < out.seconds for e in out.trace.comm())
    assert min(e.end for e in second) >= min(e.start for e in second)
    assert first_end <= out.seconds


@pytest.mark.parametrize("op,rank,expected", [
    ("all_reduce", 0, (6000, 6000)),           # 2(P-1)/P·N with P=4, N=4000
    ("all_gather", 3, (3000, 3000)),           # (P-1)·shard
    ("reduce_scatter", 1, (3000, 3000)),
    ("broadcast", 1, (4000, 0)),               # the root starts the chain: sends N, receives nothing
    ("broadcast", 2, (4000, 4000)),            # a middle link forwards N
    ("broadcast", 0, (0, 4000)),               # the chain's last rank (root - 1) only receives
    ("reduce", 1, (0, 4000)),                  # the root receives the last hop
    ("scatter", 1, (3000, 0)),
    ("gather", 2, (1000, 0)),
])
def test_collective_bytes_model(op, rank, expected):
    sizes = {"all_reduce": (4000, 4000), "all_gather": (1000, 4000), "reduce_scatter": (4000, 1000),
             "broadcast": (4000, 4000), "reduce": (4000, 4000), "scatter": (0, 1000), "gather": (1000, 0)}
    in_b, out_b = sizes[op]
    sent, recv = collective_bytes(op, rank, 4, 1, in_b, out_b)
    assert (sent, recv) == expected


def test_all_to_all_records_the_bytes_addressed_to_each_peer(cluster4):
    """Uneven all_to_all_single and list all_to_all: `sent_to` per group member, `bytes_to` per
    peer (own chunk excluded), and the totals those add up to."""
    def exchange():
        r = dist.get_rank()
        send = [r + q + 1 for q in range(4)]               # rows of 3 float32 for rank q
        recv = [q + r + 1 for q in range(4)]
        out = torch.empty(sum(recv), 3)
        dist.all_to_all_single(out, torch.ones(sum(send), 3), output_split_sizes=recv, input_split_sizes=send)
        parts = [torch.empty(2) for _ in range(4)]
        dist.all_to_all(parts, [torch.ones(2) for _ in range(4)])
        dist.send(torch.ones(5), dst=(r + 1) % 4) if r % 2 == 0 else dist.recv(torch.empty(5), src=(r - 1) % 4)
        if r % 2:
            dist.send(torch.ones(5), dst=(r + 1) % 4)
        else:
            dist.recv(torch.empty(5), src=(r - 1) % 4)
        return None

    trace = cluster4.run(exchange).trace
    for r in range(4):
        single = next(e for e in trace.comm(r) if e.op == "all_to_all_single")
        assert single.sent_to == tuple((r + q + 1) * 12 for q in range(4))
        assert single.bytes_sent == sum((r + q + 1) * 12 for q in range(4) if q != r)
        lists = next(e for e in trace.comm(r) if e.op == "all_to_all")
        assert lists.sent_to == (8, 8, 8, 8) and lists.bytes_sent == 24
        want = {q: (r + q + 1) * 12 + 8 for q in range(4) if q != r}
        want[(r + 1) % 4] += 20                            # the point-to-point send
        assert trace.bytes_to(r) == want
    assert all(e.sent_to == () for e in trace.comm() if e.op not in ("all_to_all", "all_to_all_single"))
