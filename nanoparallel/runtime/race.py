"""Racing an all-reduce against the backend's own, on the same ranks, the way nccl-tests reports it.

    per_rank = cluster.run(time_both, ring_all_reduce, 1 << 20, repeats_for(1 << 20))
    yours, builtin = slowest_median(per_rank, "yours"), slowest_median(per_rank, "builtin")
    print(busbw(1 << 20, yours, cluster.world_size))

`time_both` runs on every rank; the rest is arithmetic on what it returns. Both contenders
run on the same tensor, interleaved (the order alternates every repetition), after a barrier,
so that neither always profits from a warm cache or a quiet moment. A collective is done when
its slowest rank is, so each repetition counts its slowest rank's time, and a figure is the
median over repetitions. Used by `benchmarks/bench_collectives.py` and `nanoparallel.grading.launch --bench`.
"""
from __future__ import annotations

import re
import statistics
import time

import torch
import torch.distributed as dist

SIZES = [1 << k for k in range(10, 27, 2)]  # message bytes: 1 KiB, 4 KiB, ..., 64 MiB
CONTENDERS = ("yours", "builtin")


def time_both(all_reduce, nbytes: int, repeats: int, warmup: int = 2, device: str = "cpu") -> dict:
    """Runs on every rank: seconds per repetition of `all_reduce(x)` ("yours") and of
    `dist.all_reduce(x)` ("builtin") on a float32 tensor `x` of `nbytes` bytes on `device`."""
    x = torch.ones(nbytes // 4, device=device)
    contenders = {"yours": all_reduce, "builtin": dist.all_reduce}
    times = {name: [] for name in CONTENDERS}
    for i in range(warmup + repeats):
        for name in (CONTENDERS if i % 2 else CONTENDERS[::-1]):
            x.fill_(1.0)  # keeps the sums finite, however many repetitions
            _synchronize(x)
            dist.barrier()
            start = time.perf_counter()
            contenders[name](x)
            _synchronize(x)  # a CUDA collective returns before it is done
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def _synchronize(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


def slowest_median(per_rank: list[dict], name: str) -> float:
    """Median over repetitions of the slowest rank's seconds, from every rank's `time_both`."""
    return statistics.median(max(run) for run in zip(*(times[name] for times in per_rank)))


def repeats_for(nbytes: int) -> int:
    """More repetitions for small messages, whose times are short and noisy."""
    return 40 if nbytes <= 1 << 20 else 15 if nbytes <= 16 << 20 else 7


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth: message bytes per second."""
    return nbytes / seconds


def busbw(nbytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth of an all-reduce, nccl-tests' convention: algbw · 2(P-1)/P, the rate each
    rank's link needs for the bandwidth-optimal (ring) algorithm; comparable across P."""
    return algbw(nbytes, seconds) * 2 * (world_size - 1) / world_size


def fmt_bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB" if n % 1024 == 0 else f"{n} B"


def parse_size(text: str) -> int:
    """``"64KiB"`` -> 65536; also ``"1 MiB"``, ``"4096"`` (bytes). Sizes are multiples of 4 bytes
    (float32 elements)."""
    match = re.fullmatch(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*", text)
    if not match:
        raise ValueError(f"message size {text!r}: write a number of bytes, e.g. 4096, 64KiB or 16MiB")
    n = int(match[1]) << {None: 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[match[2]]
    if n < 4 or n % 4:
        raise ValueError(f"message size {text!r}: needs a positive multiple of 4 bytes (float32 elements)")
    return n
