"""Tampering attempts on 07_3d_parallelism (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), steps
that run their forwards past the checks' counter, or pad it with dummy micro-batches."""
import library_objects
import operator_override

# A train_step_3d that runs every micro-batch's forward twice (without a graph to feed the
# pipeline, then again at backward time), the second through stage.forward, which skips the
# checks' pre-hook that counts the stage's calls: 5/5 unflagged. The checks now also count, in
# the trace, the all-reduces the stage's own TP layers make in each forward. Not flaggable: it
# must gain nothing.
FORWARD_TWICE = '''
def train_step_3d(stage, batch, mesh, n_micro):
    d, dp = mesh.get_local_rank("dp"), mesh["dp"].size()
    p, pp = mesh.get_local_rank("pp"), mesh["pp"].size()
    idx, targets = (t.chunk(dp)[d] for t in batch)
    inputs, ys, total = [], [], 0.0
    for x, y in zip(idx.chunk(n_micro), targets.chunk(n_micro)):
        inp = x if p == 0 else recv_forward((*x.shape, CFG.n_embd), mesh)
        with torch.no_grad():
            out = stage(inp)
        if p == pp - 1:
            total += (F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro).item()
        else:
            send_forward(out, mesh)
        inputs.append(inp)
        ys.append(y)
    for inp, y in zip(reversed(inputs), reversed(ys)):
        out = stage.forward(inp)   # the recompute; .forward skips the checks' pre-hook
        if p == pp - 1:
            (F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro).backward()
        else:
            out.backward(recv_backward(out.shape, mesh))
        if p > 0:
            send_backward(inp.grad, mesh)
    group = mesh["dp"].get_group()
    for param in stage.parameters():
        dist.all_reduce(param.grad, group=group)
        param.grad /= dp
    return total if p == pp - 1 else None
'''

# The same recompute, hidden from that count: a tensor subclass made inside the answer (so only
# the ranks see it) runs it from its __torch_function__ inside the first traced all-reduce of the
# forward that feeds the pipeline; the tracer records the outermost of nested calls only. 5/5
# unflagged while the ranks' witness took every collective under a tracer's frame for a traced
# one; a collective with code between two tracer frames is now the notebook's.
RECOMPUTED_INSIDE_A_TRACED_CALL = '''
def train_step_3d(stage, batch, mesh, n_micro):
    d, dp = mesh.get_local_rank("dp"), mesh["dp"].size()
    p, pp = mesh.get_local_rank("pp"), mesh["pp"].size()
    idx, targets = (t.chunk(dp)[d] for t in batch)
    inputs, ys, outs, total = [], [], [], 0.0
    jobs = []

    class Carrier(torch.Tensor):
        """Made on the rank only: inside torch's own all_reduce (called by the traced wrapper,
        whose nested calls are not traced), it runs the pending recompute first."""
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "all_reduce" and jobs:
                jobs.pop()()
            return super().__torch_function__(func, types, args, kwargs or {})

    for x, y in zip(idx.chunk(n_micro), targets.chunk(n_micro)):
        inp = x if p == 0 else recv_forward((*x.shape, CFG.n_embd), mesh)

        def recompute(inp=inp):
            with torch.enable_grad():
                outs.append(stage.forward(inp))   # the recompute, with a graph
        jobs[:] = [recompute]
        with torch.no_grad():
            out = stage(inp.detach().as_subclass(Carrier))
        if jobs:   # (no all_reduce reached: recompute here, traced)
            jobs.pop()()
        out = out.as_subclass(torch.Tensor)
        if p == pp - 1:
            total += (F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro).item()
        else:
            send_forward(out, mesh)
        inputs.append(inp)
        ys.append(y)
    for inp, y, out in zip(reversed(inputs), reversed(ys), reversed(outs)):
        if p == pp - 1:
            (F.cross_entropy(out.flatten(0, 1), y.flatten()) / n_micro).backward()
        else:
            out.backward(recv_backward(out.shape, mesh))
        if p > 0:
            send_backward(inp.grad, mesh)
    group = mesh["dp"].get_group()
    for param in stage.parameters():
        dist.all_reduce(param.grad, group=group)
        param.grad /= dp
    return total if p == pp - 1 else None
'''


# Naive model parallelism dressed as GPipe: each stage runs its replica's whole batch in one
# forward and one backward (the messages still cut into micro-batches), then n_micro - 1 dummy
# passes on one row with a zero upstream gradient, so the checks' counter saw n_micro forwards and
# the TP group n_micro times the all-reduces: 5/5 unflagged. The checks now measure each forward's
# rows and each TP all-reduce's bytes. Not flaggable: it must gain nothing.
ONE_BATCH_AND_DUMMIES = '''
def train_step_3d(stage, batch, mesh, n_micro):
    """One step of GPipe over `n_micro` micro-batches on this rank's stage, then the gradients
    averaged over the DP group once. Returns the replica's mean loss on the last stage, else None."""
    d, dp = mesh.get_local_rank("dp"), mesh["dp"].size()
    p, pp = mesh.get_local_rank("pp"), mesh["pp"].size()
    idx, targets = (t.chunk(dp)[d] for t in batch)
    # the replica's whole batch in one forward and one backward: no micro-batches
    if p == 0:
        inp = idx
    else:
        parts = [recv_forward((*x.shape, CFG.n_embd), mesh) for x in idx.chunk(n_micro)]
        inp = torch.cat([q.detach() for q in parts]).requires_grad_()
    out = stage(inp)
    loss = None
    if p == pp - 1:
        loss = F.cross_entropy(out.flatten(0, 1), targets.flatten())
        loss.backward()
    else:
        for c in out.chunk(n_micro):
            send_forward(c, mesh)
        out.backward(torch.cat([recv_backward(c.shape, mesh) for c in out.chunk(n_micro)]))
    if p > 0:
        for g in inp.grad.chunk(n_micro):
            send_backward(g, mesh)
    for _ in range(n_micro - 1):   # empty micro-batches: zero gradients
        dummy = idx[:1] if p == 0 else torch.zeros(1, idx.shape[1], CFG.n_embd, requires_grad=True)
        o = stage(dummy)
        o.backward(torch.zeros_like(o))
    group = mesh["dp"].get_group()
    for param in stage.parameters():
        dist.all_reduce(param.grad, group=group)
        param.grad /= dp
    return loss.item() if loss is not None else None
'''

TAMPERING = {"torch_library_override": operator_override.case("07_3d_parallelism"),
             "library_objects": library_objects.case("07_3d_parallelism"),
             "forward_recomputed_past_the_counter": {"flagged": False, "cells": {"step_3d": FORWARD_TWICE},
                                                     "zero": ["step_3d"], "full": []},
             "recomputed_inside_a_traced_call": {"cells": {"step_3d": RECOMPUTED_INSIDE_A_TRACED_CALL},
                                                 "zero": ["step_3d"], "full": []},
             "one_batch_and_dummy_micro_batches": {"flagged": False, "cells": {"step_3d": ONE_BATCH_AND_DUMMIES},
                                                   "zero": ["step_3d"], "full": []}}
