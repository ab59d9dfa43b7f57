"""How many operations a rank's process group had run when backward reached some parameters.

A check that hands an answer a model cannot trust what the model carries: a hook on one of its
layers, or a region the hook writes into the trace, can be taken off, called by hand or written
by the answer itself. `BackwardReached` holds its evidence where the answer does not reach:

- its hooks sit on the parameters' gradient accumulators, autograd's nodes that add a
  gradient into `.grad`, which Python lists nowhere (only the garbage collector or a frame finds
  them, and a guarded rank stops the notebook code that uses either), and which autograd calls
  only while it runs a backward pass (calling the node by hand runs no hook);
- what a hook records is the default process group's count of the operations it has run: a
  counter in C++ that code can raise but not lower, and raising it without a traced call is what
  the ranks' witness flags (`comm_witness`).

So "an all-reduce was launched before backward reached the first layer" is read as: when the first
layer's first accumulator ran in this step, the group's count had grown since the step began.
`hook_accumulators` is the part that hangs a hook where the answer does not reach (03's checks
read the gradient bytes held during backward through it).

    reached = BackwardReached(model.layers[0].parameters())   # before the answer gets the model
    reached.begin_step()
    ddp.train_step(optimizer, batch)
    reached.ops_before()   # operations the group had run when backward got there; None: it never did
    reached.time_reached() # when it got there (time.perf_counter), to ask what was in flight then
"""
from __future__ import annotations

import time

import torch.distributed as dist


def hook_accumulators(params, hook) -> list:
    """Registers `hook(grads)` (returning None) as a pre-hook on the gradient accumulator of each
    of `params` (leaf tensors that require grad), and returns the accumulators. Keep them for as
    long as the hooks must run: a leaf keeps its accumulator only weakly, and the same node must
    serve every backward to come."""
    accumulators = []
    for p in params:
        if not (p.is_leaf and p.requires_grad):
            raise ValueError("gradient accumulators belong to leaf tensors that require grad (a model's parameters)")
        accumulator = p.view_as(p).grad_fn.next_functions[0][0]
        accumulator.register_prehook(hook)
        accumulators.append(accumulator)
    return accumulators


class BackwardReached:
    """Watches the gradient accumulators of `params` (leaf tensors that require grad) in this process."""

    def __init__(self, params):
        count = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group
        seen: list[tuple[int, float]] = []  # (operations run, time.perf_counter()) at each accumulator
        self._accumulators = hook_accumulators(params, lambda grads: seen.append((count(), time.perf_counter())))
        self._seen, self._count, self._start = seen, count, count()

    def begin_step(self) -> None:
        """Forget what was seen so far; count the group's operations from now."""
        self._seen.clear()
        self._start = self._count()

    def ops_before(self) -> int | None:
        """How many operations the group had run since `begin_step` when backward first reached
        one of the parameters (None: no backward reached them)."""
        return self._seen[0][0] - self._start if self._seen else None

    def time_reached(self) -> float | None:
        """When (time.perf_counter) backward first reached one of the parameters since
        `begin_step` (None: it never did)."""
        return self._seen[0][1] if self._seen else None
