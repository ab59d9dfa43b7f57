"""Tracing torch's functional collectives: DTensor and the tensor-parallel styles are traced
like a learner's own torch.distributed calls (same op names, same byte convention, async)."""
import torch
import torch.distributed as dist

from nanoparallel.runtime.trace import collective_bytes


def functional_calls():
    import torch.distributed._functional_collectives as funcol
    r, p = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    x = torch.full((p * 2, 3), float(r))                                 # 24p bytes
    total = funcol.all_reduce(x, "sum", group).wait()
    gathered = funcol.all_gather_tensor(x, 0, group).wait()
    scattered = funcol.reduce_scatter_tensor(x, "sum", 0, group).wait()
    # uneven all-to-all: rank r sends r + 1 rows to every peer
    splits_in = [r + 1] * p
    splits_out = [q + 1 for q in range(p)]
    a2a = funcol.all_to_all_single(torch.ones(sum(splits_in), 3), splits_out, splits_in, group).wait()
    root = funcol.broadcast(torch.full((5,), float(r)), 1, group).wait()
    return total[0, 0].item(), gathered.shape[0], scattered[0, 0].item(), a2a.shape[0], root[0].item()


def test_functional_collectives_are_traced_with_the_course_convention(cluster):
    cluster.resize(3)
    out = cluster.run(functional_calls)
    assert out == [(3.0, 18, 3.0, 6, 1.0)] * 3           # the math is untouched
    trace = out.trace
    for r in range(3):
        events = trace.comm(r)
        assert [e.op for e in events] == ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                                          "all_to_all_single", "broadcast"]
        assert all(e.is_async and e.completed and e.group == (0, 1, 2) for e in events)
        n = 6 * 3 * 4                                     # bytes of x
        want = [collective_bytes("all_reduce", r, 3, None, n, 0),
                collective_bytes("all_gather_into_tensor", r, 3, None, n, 0),
                collective_bytes("reduce_scatter_tensor", r, 3, None, n, n // 3),
                collective_bytes("all_to_all_single", r, 3, None, 0, 0,
                                 [(r + 1) * 12] * 3, [(q + 1) * 12 for q in range(3)]),
                collective_bytes("broadcast", r, 3, 1, 20, 0)]
        assert [(e.bytes_sent, e.bytes_recv) for e in events] == want
        assert events[-1].peer == 1                       # the broadcast's root
    cluster.resize(4)


def test_functional_bytes_count_only_once_waited(cluster4):
    def never_waits():
        import torch.distributed._functional_collectives as funcol
        result = funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD)  # no wait, no use
        dist.barrier()
        return type(result).__name__

    out = cluster4.run(never_waits)
    assert [e.op for e in out.trace.incomplete()] == ["all_reduce"] * 4
    assert out.trace.bytes_sent() == [0] * 4
    again = cluster4.run(functional_calls)                # nothing left over from the last run
    assert len(again.trace.comm(0)) == 5 and not again.trace.incomplete()


def sequence_parallel_block():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    from nanoparallel.lessons.models import Block, GPTConfig
    p = dist.get_world_size()
    mesh = init_device_mesh("cpu", (p,))
    block = Block(GPTConfig(n_head=4))
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    parallelize_module(block, mesh, {
        "ln_1": SequenceParallel(), "attn": gather,
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "ln_2": SequenceParallel(), "mlp": gather,
        "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel(output_layouts=Shard(1)),
    })
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    dist.barrier()  # the trace's events after this are the block's
    with CommDebugMode() as counted:
        block(x.chunk(p, dim=1)[dist.get_rank()]).sum().backward()
    return {str(k).split(".")[-1]: v for k, v in counted.get_comm_counts().items()}


def test_tensor_parallel_styles_are_traced_as_commdebugmode_counts_them(cluster):
    cluster.resize(2)
    out = cluster.run(sequence_parallel_block)
    assert out[0] == {"all_gather_into_tensor": 4, "reduce_scatter_tensor": 4}  # torch's own count
    for r in range(2):
        events = out.trace.comm(r)
        barrier = [e.op for e in events].index("barrier")
        block_ops = [e for e in events[barrier + 1:]]
        # forward: gather before attention, reduce-scatter after it, the same for the MLP; backward mirrors
        assert [e.op for e in block_ops] == ["all_gather_into_tensor", "reduce_scatter_tensor"] * 4
        # each moves one (2, 8, 32) fp32 sequence shard to the other rank
        assert all(e.completed and e.bytes_sent == e.bytes_recv == 2 * 8 * 32 * 4 for e in block_ops)
    cluster.resize(4)
