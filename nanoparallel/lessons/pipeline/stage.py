"""Pieces a pipeline stage needs that are plumbing, not the lesson: deferred weight gradients
and a count of the activations autograd keeps for backward.

    store = WeightGradStore()
    store.put(lambda: ...)      # from a layer's backward: a weight-gradient computation, deferred
    store.flush(3)              # after B(3): what was put belongs to micro-batch 3
    store.pop(3)                # W(3): run them now

    with saved_activations() as saved:
        loss = stage(x).sum()   # autograd saves tensors for backward ...
    saved.peak                  # ... the most bytes of them alive at once, parameters excluded

    store.memory = saved        # and what the queued W's keep alive from B(i) to W(i), too

`WeightGradStore` follows the zero-bubble repository's class of the same name (Qi et al. 2024),
keyed by micro-batch so that W ops may run in any order a schedule chooses.
"""
from __future__ import annotations

import functools
import time
import types
import weakref
from contextlib import contextmanager
from typing import Callable

import torch


class WeightGradStore:
    """Weight-gradient computations postponed from B(i) to W(i), per micro-batch."""

    def __init__(self):
        self._open: list[Callable[[], None]] = []
        self._queued: dict[int, list[Callable[[], None]]] = {}
        # A SavedActivations to count, from flush(i) to pop(i), the tensors the queued
        # computations hold (a W's layer inputs and output gradients: M_W), or None.
        self.memory: SavedActivations | None = None
        self._held: dict[int, list[tuple[int, int]]] = {}

    def put(self, compute: Callable[[], None]) -> None:
        """Called from backward: ``compute()`` will add a weight gradient into ``.grad``."""
        self._open.append(compute)

    def flush(self, mb: int) -> None:
        """The backward of micro-batch ``mb`` is done: what was put since belongs to it."""
        if mb in self._queued:
            raise RuntimeError(f"flush({mb}): micro-batch {mb} still has deferred weight gradients: its W "
                               f"(store.pop({mb})) never ran, or B{mb} ran twice")
        self._queued[mb], self._open = self._open, []
        if self.memory is not None:
            self._held[mb] = self.memory.retain(_tensors_held(self._queued[mb]))

    def pop(self, mb: int) -> int:
        """Run micro-batch ``mb``'s deferred weight gradients (W(mb)); returns how many ran."""
        if self._open:
            raise RuntimeError(f"W{mb}: {len(self._open)} deferred weight gradient(s) were put but never "
                               f"flushed; call flush(mb) right after each B")
        todo = self._queued.pop(mb, [])
        for compute in todo:
            compute()
        ran = len(todo)
        todo.clear()  # what the computations held goes now, before it is counted as gone
        if self.memory is not None:
            self.memory.release(self._held.pop(mb, []))
        return ran

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
        # (storage address, time.perf_counter(), requires_grad) of each activation saved: which
        # storage was saved when, for a caller that compares it with the allocator's events
        self.log: list[tuple[int, float, bool]] = []

    def _pack(self, t: torch.Tensor):
        holder = _Saved(t)
        held = self._hold(t)
        if held is not None:
            self.log.append((held[0], time.perf_counter(), t.requires_grad))
            # When autograd drops the saved tensor (after backward, or with its graph), so does this.
            weakref.finalize(holder, self._release, *held)
        return holder

    def _hold(self, t: torch.Tensor) -> tuple[int, int] | None:
        """Count t's storage as held once more: (its address, its bytes), or None for a weight."""
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if isinstance(t, torch.nn.Parameter) or ptr in self._exclude:
            return None
        if self._holders.get(ptr, 0) == 0:
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        self._holders[ptr] = self._holders.get(ptr, 0) + 1
        return ptr, storage.nbytes()

    def _release(self, ptr: int, nbytes: int) -> None:
        self._holders[ptr] -= 1
        if self._holders[ptr] == 0:
            del self._holders[ptr]
            self.current -= nbytes

    def retain(self, tensors) -> list[tuple[int, int]]:
        """Count `tensors` as held (each storage once) until `release` of what this returns."""
        return [held for held in map(self._hold, tensors) if held is not None]

    def release(self, held) -> None:
        for ptr, nbytes in held:
            self._release(ptr, nbytes)

    @staticmethod
    def _unpack(x):
        return x.tensor if isinstance(x, _Saved) else x


def _tensors_held(computations, depth: int = 4) -> list[torch.Tensor]:
    """The tensors that queued computations keep alive: what their closures, a partial's
    arguments, or a bound method's object refer to, looking into lists, tuples and dicts (four
    levels deep: a store may wrap the computations it is handed in a closure of its own)."""
    # A loop, not a recursive closure: a closure that calls itself is a reference cycle, which
    # would keep what it found alive until the garbage collector next runs.
    found: dict[int, torch.Tensor] = {}
    todo = [(compute, depth) for compute in computations]
    while todo:
        value, level = todo.pop()
        if isinstance(value, torch.Tensor):
            found.setdefault(id(value), value)
        elif level <= 0:
            continue
        elif isinstance(value, (list, tuple, set)):
            todo += [(item, level - 1) for item in value]
        elif isinstance(value, dict):
            todo += [(item, level - 1) for item in value.values()]
        elif callable(value):
            for cell in getattr(value, "__closure__", None) or ():
                try:
                    todo.append((cell.cell_contents, level - 1))
                except ValueError:  # a cell not yet filled
                    pass
            if isinstance(value, functools.partial):
                todo += [(value.args, level - 1), (value.keywords, level - 1)]
            if isinstance(value, types.MethodType):
                todo.append((getattr(value.__self__, "__dict__", None), level - 1))
    return list(found.values())


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
