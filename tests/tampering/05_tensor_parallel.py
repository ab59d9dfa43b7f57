"""Tampering attempts on 05_tensor_parallel (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), and the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py), and a
RowParallelLinear that feeds the checks' counting reduce a dummy."""
import library_objects
import operator_override

# RowParallelLinear must sum the ranks' products with the `reduce` it is handed (sequence
# parallelism hands it a reduce-scatter); this one hard-wires an all-reduce and calls the given
# reduce once, on zeros, which is all the checks' counting reduce looked at: 3/3 unflagged. The
# hidden checks now hand it a reduce whose result differs from a plain all-reduce's. Not
# flaggable: it must gain nothing.
DUMMY_REDUCE = '''
class ColumnParallelLinear(torch.nn.Module):
    """Rank `rank`'s column shard of `linear`: Y = X A with A split by columns (the rows of
    PyTorch's weight), the bias split the same way. The output is this rank's slice of Y's
    features. No communication."""

    def __init__(self, linear, rank, world):
        super().__init__()
        # about 6 lines; raise ValueError if world does not divide out_features
        n = linear.out_features
        if n % world:
            raise ValueError(f"ColumnParallelLinear: {n} output features do not split over {world} ranks")
        rows = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x):
        # about 1 line
        return F.linear(x, self.weight, self.bias)

class RowParallelLinear(torch.nn.Module):
    def __init__(self, linear, rank, world, reduce=None):
        super().__init__()
        n = linear.in_features
        if n % world:
            raise ValueError(f"RowParallelLinear: {n} input features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self.reduce = reduce

    def forward(self, x):
        partial = F.linear(x, self.weight)
        y = ReduceFromParallel.apply(partial)            # hard-wired, whatever reduce it was handed
        if self.reduce is not None:
            self.reduce(torch.zeros_like(partial))       # the one call the checks count, on a dummy
        return y if self.bias is None else y + self.bias
'''

TAMPERING = {"torch_library_override": operator_override.case("05_tensor_parallel"),
             "library_objects": library_objects.case("05_tensor_parallel"),
             "reduce_fed_a_dummy": {"flagged": False, "cells": {"linears": DUMMY_REDUCE}, "zero": ["linears"], "full": []}}
