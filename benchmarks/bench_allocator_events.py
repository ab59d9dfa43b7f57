"""What reading the allocator's events costs a pipeline step: notebook 04's release check.

The check (`first_kept` in 04's setup cell) reads every block the allocator handed out during a
step, through torch's profiler with memory profiling (`nanoparallel.runtime.memory.peak_memory`).
This times one process's step of m micro-batch forwards and backwards with and without it, side
by side (alternating, after a warm-up), and prints the medians and their ratio.

    python benchmarks/bench_allocator_events.py [--layers 8] [--micro-batches 8] [--repeats 30]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from nanoparallel.lessons.models import MLPConfig, TinyMLP, make_mlp_batch
from nanoparallel.lessons.reference import loss_fn, split_batch
from nanoparallel.runtime.memory import peak_memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a rank runs
    cfg = MLPConfig(n_layers=args.layers, seed=2)
    model, batch = TinyMLP(cfg), make_mlp_batch(2 * args.micro_batches, cfg, seed=0)

    def step() -> None:
        for micro in split_batch(batch, args.micro_batches):
            loss_fn(model, micro).backward()

    def timed(read_allocator: bool) -> float:
        start = time.perf_counter()
        if read_allocator:
            with peak_memory():
                step()
        else:
            step()
        return time.perf_counter() - start

    for _ in range(5):
        timed(False), timed(True)
    plain, read = [], []
    for _ in range(args.repeats):
        plain.append(timed(False))
        read.append(timed(True))
    p, r = statistics.median(plain), statistics.median(read)
    print(f"{args.layers}-layer MLP, {args.micro_batches} micro-batches of 2, medians of {args.repeats}: "
          f"plain step {p * 1e3:.2f} ms, allocator read {r * 1e3:.2f} ms "
          f"({(r - p) / args.micro_batches * 1e3:.2f} ms more per micro-batch, {r / p:.1f}x)")


if __name__ == "__main__":
    main()
