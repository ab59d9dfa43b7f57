"""MatmulLog (nanoparallel/runtime/flops.py): each matrix multiply's FLOPs, as torch's own counter
counts them, with when it ran."""
from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from nanoparallel.runtime.flops import MatmulLog


def test_counts_what_torch_counts_and_when_forward_and_backward():
    torch.manual_seed(0)
    layer = torch.nn.Linear(6, 4)
    x = torch.randn(5, 6, requires_grad=True)
    with FlopCounterMode(display=False) as torch_count:
        layer(x).sum().backward()
    start = time.perf_counter()
    with MatmulLog() as products:
        y = layer(x)
        middle = time.perf_counter()
        y.sum().backward()
    end = time.perf_counter()
    assert sum(n for _, n in products.log) == torch_count.get_total_flops() == 3 * 2 * 5 * 6 * 4
    forward = [n for when, n in products.log if start <= when <= middle]
    backward = [n for when, n in products.log if middle < when <= end]
    assert forward == [2 * 5 * 6 * 4]               # one addmm
    assert sum(backward) == 2 * 2 * 5 * 6 * 4       # the input's and the weight's gradients


def test_counts_nothing_outside_it_and_nothing_but_products():
    x = torch.randn(3, 3)
    with MatmulLog() as products:
        (x + 1).relu().sum()
    x @ x
    assert products.log == []
