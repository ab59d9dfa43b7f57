"""Pieces a pipeline stage needs that are plumbing, not the lesson: deferred weight gradients
and a count of the activations autograd keeps for backward.

    store = WeightGradStore()
    store.put(lambda: ...)      # from a layer's backward: a weight-gradient computation, deferred
    store.flush(3)              # after B(3): what was put belongs to micro-batch 3
    store.pop(3)                # W(3): run them now

    with saved_activations() as saved:
        loss = stage(x).sum()   # autograd saves tensors for backward ...
    saved.peak                  # ... the most bytes of them alive at once, parameters excluded

`WeightGradStore` follows the zero-bubble repository's class of the same name (Qi et al. 2024),
keyed by micro-batch so that W ops may run in any order a schedule chooses.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Callable

import torch


class WeightGradStore:
    """Weight-gradient computations postponed from B(i) to W(i), per micro-batch."""

    def __init__(self):
        self._open: list[Callable[[], None]] = []
        self._queued: dict[int, list[Callable[[], None]]] = {}

    def put(self, compute: Callable[[], None]) -> None:
        """Called from backward: ``compute()`` will add a weight gradient into ``.grad``."""
        self._open.append(compute)

    def flush(self, mb: int) -> None:
        """The backward of micro-batch ``mb`` is done: what was put since belongs to it."""
        if mb in self._queued:
            raise RuntimeError(f"micro-batch {mb} already has deferred weight gradients: B{mb} ran twice?")
        self._queued[mb], self._open = self._open, []

    def pop(self, mb: int) -> int:
        """Run micro-batch ``mb``'s deferred weight gradients (W(mb)); returns how many ran."""
        if self._open:
            raise RuntimeError(f"W{mb}: {len(self._open)} deferred weight gradient(s) were put but never "
                               f"flushed; call flush(mb) right after each B")
        todo = self._queued.pop(mb, [])
        for compute in todo:
            compute()
        return len(todo)

    def pending(self) -> list[int]:
        """Micro-batches whose W has not run yet."""
        return sorted(self._queued)


class SavedActivations:
    """Bytes of the tensors autograd saved for backward that are still alive (``current``) and
    the most at any time (``peak``). Memory is counted once per storage, however many ops save
    it (q, k and v of an attention all save the same input) or views of it. Weights are not
    activations: a Parameter is left out, and so is any tensor sharing storage with one in
    ``exclude`` (autograd often saves a view of a weight, such as its transpose)."""

    def __init__(self, exclude=()):
        self.current = 0
        self.peak = 0
        self._exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self._holders: dict[int, int] = {}  # storage address -> saved tensors alive that use it

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        holder = _Saved(t)
        if isinstance(t, torch.nn.Parameter) or ptr in self._exclude:
            return holder
        if self._holders.get(ptr, 0) == 0:
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        self._holders[ptr] = self._holders.get(ptr, 0) + 1
        # When autograd drops the saved tensor (after backward, or with its graph), so does this.
        weakref.finalize(holder, self._release, ptr, storage.nbytes())
        return holder

    def _release(self, ptr: int, nbytes: int) -> None:
        self._holders[ptr] -= 1
        if self._holders[ptr] == 0:
            del self._holders[ptr]
            self.current -= nbytes

    @staticmethod
    def _unpack(x):
        return x.tensor if isinstance(x, _Saved) else x


class _Saved:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


@contextmanager
def saved_activations(exclude=()):
    """Count what autograd keeps for backward inside the block (see `SavedActivations`).

    ``exclude``: tensors (e.g. the stage's parameters) whose storage is not an activation.
    Tensors saved inside the block keep being counted until freed, even after it ends.

    Under saved-tensor hooks ``ctx.saved_tensors`` of a custom autograd Function hands back new
    tensor objects, even for a parameter: code that sets ``.grad`` on a saved parameter then
    misses the real one. Measure such layers some other way.
    """
    counter = SavedActivations(exclude)
    with torch.autograd.graph.saved_tensors_hooks(counter._pack, counter._unpack):
        yield counter
