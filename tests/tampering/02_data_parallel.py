"""Tampering attempts on 02_data_parallel (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), a
library's registry changed while the checks run, and wrong answers that feed or write the marks
of the instruments the checks attach to the model they hand over."""
import library_objects
import operator_override

# While the checks ship NaiveDDP (by value, with what its class holds) to the ranks, an object
# in its class swaps two of cloudpickle's reducers for one that zeroes every tensor shipped
# after it: the checks' model and batches, which the reference then trains on in the kernel,
# so a NaiveDDP that never averages nor steps agrees. Two entries out and two in keep the
# table's size, and the reducer puts the table back on the checks' last run, before the
# cell's end. 4/4 unflagged when the looks in the middle of a cell compared sizes only.
SWAPPED_REDUCERS = '''
import typing
import cloudpickle.cloudpickle as _cpk

_table = _cpk.Pickler._dispatch_table
_kept = {}

def _ship_zeroed(t):
    if t.dim() >= 1 and t.shape[0] == 10:          # the checks' last run: put the table back
        del _table[torch.Tensor], _table[torch.nn.Parameter]
        _table.update(_kept)
        return t.__reduce_ex__(2)
    if isinstance(t, torch.nn.Parameter) or t.dim() <= 2:
        with torch.no_grad():
            t.zero_()
    return t.__reduce_ex__(2)

class _Swap:
    def __reduce__(self):
        if torch.Tensor not in _table:             # two entries out, two in: the same size
            _kept.update({k: _table.pop(k) for k in (typing.TypeVar, property)})
            _table[torch.Tensor] = _table[torch.nn.Parameter] = _ship_zeroed
        return (int, ())

class NaiveDDP:
    _swap = _Swap()

    def __init__(self, model):
        self.model = model

    def train_step(self, optimizer, batch):
        # wrong on purpose: no averaging, no optimizer step, all-reduces zeros
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = split_batch(batch, world)[rank]
        loss = loss_fn(self.model, shard)
        with region("backward"):
            loss.backward()
        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(torch.zeros_like(p))
        return loss.item()
'''

# Wrong answers that forge what the checks' instruments on the handed model report. accumulate_step
# takes one step on the whole batch, then calls the checks' forward pre-hook by hand with the
# micro-batch sizes it expects; BucketedDDP launches every bucket after backward, having taken the
# hooks off the model's layers and written the "backward reaches the first layer" region itself,
# after its launches. 3/3 and 5/5 unflagged while the checks trusted those marks. Nothing tells
# this from an honest answer in an in-process look, so it is not flagged: it must gain nothing
# (the hidden accumulate checks use a model whose samples interact; the overlap is read from hooks
# on the first layer's gradient accumulators, which the answer is never handed).
FED_HOOKS = """
def accumulate_step(model, optimizer, batch, micro_batch_size):
    B = batch[0].shape[0]
    hooks = list(model._forward_pre_hooks.values())
    model._forward_pre_hooks.clear()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    for s in range(0, B, micro_batch_size):
        for h in hooks:
            h(model, (batch[0][s:s + micro_batch_size],))
    for i, h in enumerate(hooks):
        model._forward_pre_hooks[i] = h
    return loss.item()
"""
MARK_WRITTEN = """
class BucketedDDP:
    def __init__(self, model, bucket_bytes):
        self.model = model
        for m in model.modules():
            m._forward_hooks.clear()
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets, current, size = [], [], 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if current and size + nbytes > bucket_bytes:
                self.buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            self.buckets.append(current)

    def train_step(self, optimizer, batch):
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = split_batch(batch, world)[rank]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(self.model, shard)
        with region("backward"):
            loss.backward()
        pending = []
        for bucket in self.buckets:
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
            pending.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
        with region("backward reaches the first layer"):
            pass
        for bucket, flat, work in pending:
            work.wait()
            flat /= world
            offset = 0
            for p in bucket:
                if p.grad is not None:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        optimizer.step()
        return loss.item()
"""

# The same late launches, with the count that tells overlap raised before backward reaches the
# first layer by torch's own untraced all_reduce, hung as a gradient hook on a throwaway leaf
# (a functools.partial: autograd calls it, and no notebook frame sits between the two). 5/5
# unflagged while the ranks' witness took a collective issued from autograd's engine for
# torch's own; now any collective without the tracer on its stack is the notebook's.
TORCH_ALL_REDUCE_AS_A_HOOK = MARK_WRITTEN.replace(
    """        loss = loss_fn(self.model, shard)
""", """        loss = loss_fn(self.model, shard)
        import functools
        bump = torch.zeros((), requires_grad=True)
        bump.register_hook(functools.partial(getattr(dist.all_reduce, "__wrapped__")))
        loss = loss + 0 * bump
""")

# ddp_bytes_per_rank asks the engine's cost model, which the exercise forbids, through names
# assert_derived cannot read in the code: a module imported by a name built at run time, and the
# function kept in a dict another cell filled. 3/3 unflagged while the check only read the code;
# the cost model now raises an audit event the guard counts while the answer runs. A wrong turn,
# not a forgery of the grader, so it is not flagged: it must gain nothing.
LOOKED_UP = """
import importlib as _il
_TABLE = {"bytes": getattr(_il.import_module("nanoparallel.lessons." + "co" + "st"), "busiest_" + "rank_bytes")}

def ddp_bytes_per_rank(n_params, bytes_per_elem, world_size):
    return _TABLE["bytes"]("all_reduce", n_params * bytes_per_elem, world_size, "ring")

def parameter_server_bytes(n_params, bytes_per_elem, world_size):
    n = n_params * bytes_per_elem
    server = (world_size - 1) * n
    return {"server_sent": server, "server_received": server, "worker_sent": n, "worker_received": n}
"""

TAMPERING = {"torch_library_override": operator_override.case("02_data_parallel"),
             "library_objects": library_objects.case("02_data_parallel"),
             "registry_swapped_while_shipping": {"cells": {"naive_ddp": SWAPPED_REDUCERS},
                                                 "zero": ["naive_ddp"], "full": []},
             "the_checks_marks_fed": {"flagged": False, "cells": {"accumulate": FED_HOOKS, "bucketed_ddp": MARK_WRITTEN},
                                      "zero": ["accumulate", "bucketed_ddp"], "full": []},
             "cost_model_reached_by_built_names": {"flagged": False, "cells": {"comm_bytes": LOOKED_UP},
                                                   "zero": ["comm_bytes"], "full": []},
             "torch_all_reduce_as_a_gradient_hook": {"cells": {"bucketed_ddp": TORCH_ALL_REDUCE_AS_A_HOOK},
                                                     "zero": ["bucketed_ddp"], "full": []}}
