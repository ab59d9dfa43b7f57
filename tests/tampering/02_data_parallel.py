"""Tampering attempts on 02_data_parallel (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), and a
library's registry changed while the checks run."""
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

TAMPERING = {"torch_library_override": operator_override.case("02_data_parallel"),
             "library_objects": library_objects.case("02_data_parallel"),
             "registry_swapped_while_shipping": {"cells": {"naive_ddp": SWAPPED_REDUCERS},
                                                 "zero": ["naive_ddp"], "full": []}}
