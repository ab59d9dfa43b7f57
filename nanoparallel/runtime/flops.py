"""Matrix-multiply FLOPs, each with when it ran: work read against the time of a trace's regions.

torch's `FlopCounterMode` sums FLOPs per module; a check that asks "did this op's region do its
own work, no more and no less" needs each product's time too. `MatmulLog` counts with the same
formulas (`torch.utils.flop_counter.flop_registry`) and notes `time.perf_counter()` as each
product returns, the clock the trace's regions are on (`Tracer.t0 + event.start`).

    with MatmulLog() as products:
        loss.backward()
    done = sum(n for when, n in products.log if start <= when <= end)

It sees the calling thread and autograd's work for it (the CPU backward runs there); like
`FlopCounterMode`, it counts no FLOPs inside `scaled_dot_product_attention` on the CPU.
"""
from __future__ import annotations

import time

from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode


class MatmulLog(TorchDispatchMode):
    """While entered, `log` gains (time.perf_counter() at its end, FLOPs) for every matrix multiply."""

    def __init__(self):
        super().__init__()
        self.log: list[tuple[float, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_counter.flop_registry.get(func._overloadpacket)
        if count is not None:
            self.log.append((time.perf_counter(), count(*args, **kwargs, out_val=out)))
        return out
