"""Plausible wrong answers for 07_3d_parallelism. Each mutant replaces whole solution cells (keyed by
grade_id); the graded cell ``<grade_id>_tests`` of every replaced cell must then lose points.

The first three replace every exercise: TP as the outermost mesh axis; DP gradients synchronised
after every micro-batch (right values, m times the bytes); gradients synchronised across the wrong
group; a planner that ignores pipeline in-flight activations, or lets TP cross machines without
paying InfiniBand; PP and DP groups swapped, no ValueError for bad shapes, the DP average without
its 1/d, TP bytes of the forward only, DP bytes of half an all-reduce, both directions counted on
end stages, ZeRO-1 sharding gradients, recomputation ignored in memory or in time, GPipe's bubble
convention (p-1)/(m+p-1) where the course uses (p-1)/m.

The rest replace one exercise each, for checks that once passed them: a product of the degrees
smaller than the world size accepted; the mesh laid out with DP outermost; a loss scaled
wrongly; gradients m times too large (Adam hides the scale, SGD does not);
the replica's rows run as one micro-batch (the same mean gradient, the wrong schedule), or its
micro-batches one at a time, each forward and back before the next; and the
planner's physics: recomputation without the recomputed layer's working set or without its TP
all-reduces, ZeRO-2/3 charged once per step instead of per micro-batch, links priced from a
DP-outermost layout.
"""
import equals_everything
from mutation_run import solution_with


def _solution_with(grade_id: str, *changes: str) -> str:
    return solution_with("07_3d_parallelism", grade_id, *changes)


MUTANTS = {
    'wrong_axes': {
        'mesh': _solution_with(
            'mesh',
            '    rank = lambda d, p, t: (p * dp + d) * tp + t\n',
            '    rank = lambda d, p, t: (t * pp + p) * dp + d  # TP outermost\n'),
        'step_3d': '''
def train_step_3d(stage, batch, mesh, n_micro):
    """One step of GPipe over `n_micro` micro-batches on this rank's stage, then the gradients
    averaged over the DP group once. Returns the replica's mean loss on the last stage, else None."""
    d, dp = mesh.get_local_rank("dp"), mesh["dp"].size()
    p, pp = mesh.get_local_rank("pp"), mesh["pp"].size()
    idx, targets = (t.chunk(dp)[d] for t in batch)
    inputs, outputs = [], []
    for x, y in zip(idx.chunk(n_micro), targets.chunk(n_micro)):
        inp = x if p == 0 else recv_forward((*x.shape, CFG.n_embd), mesh)
        out = stage(inp)
        if p == pp - 1:
            out = F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro
        else:
            send_forward(out, mesh)
        inputs.append(inp)
        outputs.append(out)
    group = mesh["dp"].get_group()
    for inp, out in zip(reversed(inputs), reversed(outputs)):
        before = [q.grad.clone() if q.grad is not None else torch.zeros_like(q) for q in stage.parameters()]
        if p == pp - 1:
            out.backward()
        else:
            out.backward(recv_backward(out.shape, mesh))
        if p > 0:
            send_backward(inp.grad, mesh)
        for q, old in zip(stage.parameters(), before):   # sync each micro-batch's share: right values, m times the bytes
            new = q.grad - old
            dist.all_reduce(new, group=group)
            q.grad = old + new / dp
    return sum(out.item() for out in outputs) if p == pp - 1 else None
    ### END SOLUTION
''',
        'bytes': _solution_with(
            'bytes',
            '    return layers * n_micro * 4 * 2 * (tp - 1) / tp * b * s * h * bytes_per_value\n',
            '    return layers * n_micro * 2 * 2 * (tp - 1) / tp * b * s * h * bytes_per_value  # forward only\n'),
        'memory': _solution_with(
            'memory',
            '    held = model.n_layer / plan.pp * min(plan.pp, plan.n_micro)   # layers x micro-batches in flight\n',
            '    held = model.n_layer / plan.pp   # one micro-batch in flight\n'),
        'time': _solution_with(
            'time',
            '        if span <= cluster.gpus_per_machine:\n'
            '            return cluster.nvlink, cluster.nvlink_latency\n'
            '        return cluster.ib_per_gpu, cluster.ib_latency\n',
            '        return cluster.nvlink, cluster.nvlink_latency  # everything on NVLink\n'),
    },
    'wrong_groups': {
        'mesh': _solution_with(
            'mesh',
            '                                         "pp": [rank(d, j, t) for j in range(pp)],\n'
            '                                         "dp": [rank(j, p, t) for j in range(dp)]}\n',
            '                                         "pp": [rank(j, p, t) for j in range(dp)],\n'
            '                                         "dp": [rank(d, j, t) for j in range(pp)]}\n'),
        'step_3d': _solution_with(
            'step_3d',
            '    group = mesh["dp"].get_group()\n',
            '    group = mesh["tp"].get_group()  # the wrong axis\n'),
        'bytes': _solution_with(
            'bytes',
            '    return 2 * (dp - 1) / dp * n_params * bytes_per_value\n',
            '    return (dp - 1) / dp * n_params * bytes_per_value\n'),
        'memory': _solution_with(
            'memory',
            '    gradients = 2 * psi / (dp if plan.zero >= 2 else 1)\n',
            '    gradients = 2 * psi / (dp if plan.zero >= 1 else 1)\n'),
        'time': _solution_with(
            'time',
            '            "bubble": (pp - 1) / m * compute,\n',
            '            "bubble": (pp - 1) / (m + pp - 1) * compute,\n'),
    },
    'lazy': {
        'mesh': '''
def mesh_groups(world_size, dp, pp, tp):
    """{rank: {"coords": (i_d, i_p, i_t), "tp": [...], "pp": [...], "dp": [...]}} on a (pp, dp, tp)
    grid: PP outermost, TP innermost."""
    rank = lambda d, p, t: (p * dp + d) * tp + t
    groups = {}
    for d in range(dp):
        for p in range(pp):
            for t in range(tp):
                groups[rank(d, p, t)] = {"coords": (d, p, t),
                                         "tp": [rank(d, p, j) for j in range(tp)],
                                         "pp": [rank(d, j, t) for j in range(pp)],
                                         "dp": [rank(j, p, t) for j in range(dp)]}
    return groups
    ### END SOLUTION
''',
        'step_3d': _solution_with(
            'step_3d',
            '        param.grad /= dp\n',
            ''),
        'bytes': _solution_with(
            'bytes',
            '    neighbours = (stage > 0) + (stage < pp - 1)\n',
            '    neighbours = 2 if pp > 1 else 0\n'),
        'memory': _solution_with(
            'memory',
            "    if plan.recompute:   # each layer's input kept, plus one layer's working set while it is recomputed\n",
            "    if False:   # each layer's input kept, plus one layer's working set while it is recomputed\n"),
        'time': _solution_with(
            'time',
            '    compute = (8 if plan.recompute else 6) * model.params * tokens / (tp * pp * dp * cluster.flops * cluster.hfu)\n',
            '    compute = 6 * model.params * tokens / (tp * pp * dp * cluster.flops * cluster.hfu)\n'),
    },
    'mesh_smaller_product_accepted': {
        'mesh': _solution_with(
            'mesh',
            '    if dp * pp * tp != world_size:\n',
            '    if dp * pp * tp > world_size:\n'),
    },
    'mesh_dp_outermost': {
        'mesh': _solution_with(
            'mesh',
            '    rank = lambda d, p, t: (p * dp + d) * tp + t\n',
            '    rank = lambda d, p, t: (d * pp + p) * tp + t  # DP outermost\n'),
    },
    'loss_mean_of_scaled': {
        'step_3d': _solution_with(
            'step_3d',
            '    return sum(out.item() for out in outputs) if p == pp - 1 else None\n',
            '    return sum(out.item() for out in outputs) / n_micro if p == pp - 1 else None  # divided twice\n'),
    },
    'grads_not_divided_by_m': {
        'step_3d': _solution_with(
            'step_3d',
            '            out = F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro\n',
            '            out = F.cross_entropy(out.flatten(0, 1), y.flatten())  # m times the gradient; Adam hides it\n',
            '    return sum(out.item() for out in outputs) if p == pp - 1 else None\n',
            '    return sum(out.item() for out in outputs) / n_micro if p == pp - 1 else None\n'),
    },
    'one_micro_batch': {
        'step_3d': _solution_with(
            'step_3d',
            '    inputs, outputs = [], []\n',
            '    inputs, outputs = [], []\n'
            "    n_micro = 1   # the whole replica's rows at once: the same mean gradient\n"),
    },
    'recompute_without_working_set': {
        'memory': _solution_with(
            'memory',
            '        activations = held * 2 * s * b * h / t + whole_layer\n',
            '        activations = held * 2 * s * b * h / t\n'),
    },
    'recompute_without_tp_all_reduces': {
        'time': _solution_with(
            'time',
            "    all_reduces = 6 if plan.recompute else 4   # recomputation runs the forward's two again\n",
            '    all_reduces = 4\n'),
    },
    'zero_once_per_step': {
        'time': _solution_with(
            'time',
            '    collectives = {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[plan.zero]   # ZeRO-2: a reduce-scatter per micro-batch, one all-gather;\n',
            '    collectives = {0: 2, 1: 2, 2: 2, 3: 3}[plan.zero]   # ZeRO-2: a reduce-scatter per micro-batch, one all-gather;\n'),
    },
    'links_dp_outermost': {
        'time': _solution_with(
            'time',
            '    tp_link, dp_link, pp_link = link(tp), link(tp * dp), link(tp * dp * pp)\n',
            '    tp_link, dp_link, pp_link = link(tp), link(tp * dp * pp), link(tp * pp)  # DP outermost\n'),
    },
    # Each micro-batch all the way forward and back before the next: plain model parallelism with
    # accumulation, the stages never at work together (every number the same as GPipe's).
    'micro_batches_one_at_a_time': {
        'step_3d': _solution_with(
            'step_3d',
            """        inputs.append(inp)
        outputs.append(out)
    for inp, out in zip(reversed(inputs), reversed(outputs)):
        if p == pp - 1:""",
            """        inputs.append(inp)
        outputs.append(out)
        if p == pp - 1:"""),
    },
    # Every micro-batch taken in before any is passed on, each way: all receives, all forwards, all
    # sends; one backward through every micro-batch, then all the gradients sent. Every message in
    # GPipe's order and every number GPipe's, but each stage waits for the one before to finish.
    'stages_take_turns': {
        'step_3d': '''
def train_step_3d(stage, batch, mesh, n_micro):
    d, dp = mesh.get_local_rank("dp"), mesh["dp"].size()
    p, pp = mesh.get_local_rank("pp"), mesh["pp"].size()
    idx, targets = (t.chunk(dp)[d] for t in batch)
    xs, ys = idx.chunk(n_micro), targets.chunk(n_micro)
    inputs = [x if p == 0 else recv_forward((*x.shape, CFG.n_embd), mesh) for x in xs]
    outputs = [stage(inp) for inp in inputs]
    if p == pp - 1:
        outputs = [F.cross_entropy(o.flatten(0, 1), y.flatten()) / n_micro for o, y in zip(outputs, ys)]
        torch.autograd.backward(outputs[::-1])
    else:
        for o in outputs:
            send_forward(o, mesh)
        grads = [recv_backward(o.shape, mesh) for o in reversed(outputs)]
        torch.autograd.backward(outputs[::-1], grads)
    if p > 0:
        for inp in reversed(inputs):
            send_backward(inp.grad, mesh)
    group = mesh["dp"].get_group()
    for param in stage.parameters():
        dist.all_reduce(param.grad, group=group)
        param.grad /= dp
    return sum(out.item() for out in outputs) if p == pp - 1 else None
''',
    },
}


# Right answers written another way than the solution, where the spec allows it: each must keep
# every point (tests/mutation_run.py). The gradients divided by d before the DP all-reduce
# instead of after, and the replica's loss summed as one tensor: other roundings of the same sums.
EQUIVALENTS = {
    'step_3d_divide_before_the_all_reduce': {
        'step_3d': _solution_with(
            'step_3d',
            "        dist.all_reduce(param.grad, group=group)\n        param.grad /= dp\n",
            "        param.grad /= dp\n        dist.all_reduce(param.grad, group=group)\n",
            "    return sum(out.item() for out in outputs) if p == pp - 1 else None",
            "    return torch.stack([out.detach() for out in outputs]).sum().item() if p == pp - 1 else None"),
    },
}

# Each answer function returning values that equal everything (tests/equals_everything.py).
MUTANTS.update(equals_everything.mutants("07_3d_parallelism"))
