"""Engine performance, side by side in one run: cold start (spawned ranks against ranks forked
from a server that imported torch once), warm `cluster.run` against `torch.multiprocessing.spawn`
doing the same work, and the cost of tracing.

    python benchmarks/bench_cluster.py        (or: make bench)

Targets (COURSE_DESIGN.md): warm run of a 4-rank tiny all-reduce <= 10 ms median; cold start
<= 5 s on 2 cores; tracing overhead on a >= 1 MiB all-reduce <= 5 %. Medians, because shared
machines are noisy.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nanoparallel import Cluster

WORLD = 4


def tiny_all_reduce():
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _spawned_rank(rank, world, store):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    tiny_all_reduce()
    dist.destroy_process_group()


def spawn_once() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        mp.spawn(_spawned_rank, args=(WORLD, os.path.join(tmp, "store")), nprocs=WORLD)
        return time.perf_counter() - start


# A fresh process per start: the fork server, and what it preloads, is one per process.
FIRST_OPTIMIZER = """
import sys, time
import torch
import nanoparallel.runtime.cluster
nanoparallel.runtime.cluster._PRELOAD = sys.argv[1].split(",")
start = time.perf_counter()
with nanoparallel.runtime.cluster.Cluster(world_size=4) as cluster:
    cluster.run(lambda: torch.optim.Adam(torch.nn.Linear(4, 4).parameters()).step())
print(time.perf_counter() - start)
"""


def first_optimizer_start(preload: list[str]) -> float:
    """Seconds from Cluster() to the end of a first run in which every rank makes an optimizer
    (what the notebooks' warm-up runs do), with a fork server that preloads `preload`."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", FIRST_OPTIMIZER, ",".join(preload)], check=True,
                          capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def traced_vs_raw(nbytes: int, rounds: int):
    """Per-call seconds of all_reduce with tracing (as learners call it) and without, interleaved."""
    import torch.distributed.distributed_c10d as c10d
    traced = c10d.all_reduce
    raw = getattr(traced, "__wrapped_by_nanoparallel__", traced)
    x = torch.ones(nbytes // 4)
    on, off = [], []
    for i in range(rounds):
        for fn, into in ((traced, on), (raw, off)) if i % 2 else ((raw, off), (traced, on)):
            dist.barrier()
            start = time.perf_counter()
            fn(x)
            into.append(time.perf_counter() - start)
    return statistics.median(on), statistics.median(off)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"nanoparallel engine benchmark: {WORLD} ranks, gloo, {os.cpu_count()} CPU cores, torch {torch.__version__}")
    # Cold start both ways, side by side. A fork server imports torch once, at the first
    # Cluster of a process (the first run below), then each rank forks from it; spawn imports
    # torch in every rank, every time (a kernel's first Cluster, and after every deadlock).
    for method in ("spawn", "forkserver"):
        colds = []
        for _ in range(3):
            start = time.perf_counter()
            cluster = Cluster(world_size=WORLD, start_method=method)
            colds.append(time.perf_counter() - start)
            cluster.close()
        print(f"cold start, {method + ':':<11} {WORLD} ranks: median {statistics.median(colds):6.2f} s   "
              f"(target <= 5 s; runs: " + ", ".join(f"{c:.2f}" for c in colds) + ")")

    # The first optimizer a rank makes imports torch._dynamo (and sympy), about a second of
    # CPU, unless the fork server already did; interleaved, three starts each.
    from nanoparallel.runtime.cluster import _PRELOAD
    without = [m for m in _PRELOAD if m != "torch._dynamo"]
    starts = {"torch": [], "torch + torch._dynamo": []}
    for _ in range(3):
        starts["torch"].append(first_optimizer_start(without))
        starts["torch + torch._dynamo"].append(first_optimizer_start(_PRELOAD))
    for name, times in starts.items():
        print(f"start + first run making an optimizer, server preloads {name + ':':<22} median "
              f"{statistics.median(times):5.2f} s (runs: " + ", ".join(f"{t:.2f}" for t in times) + ")")

    with Cluster(world_size=WORLD) as cluster:
        cluster.run(tiny_all_reduce)
        warm = median_time(lambda: cluster.run(tiny_all_reduce), 200)
        spawn = statistics.median(spawn_once() for _ in range(3))
        print(f"warm cluster.run, tiny all_reduce:          median {warm * 1e3:6.2f} ms  (target <= 10 ms)")
        print(f"torch.multiprocessing.spawn, same work:     median {spawn:6.2f} s   ({spawn / warm:,.0f}x the warm run)")
        on, off = map(statistics.median, zip(*cluster.run(traced_vs_raw, 4, 401)))
        print(f"tracing's own cost per call (4-byte all_reduce): {1e6 * (on - off):+6.1f} us "
              f"(median {on * 1e6:.0f} vs {off * 1e6:.0f} us)")
        for nbytes in (1 << 20, 4 << 20):
            on, off = map(statistics.median, zip(*cluster.run(traced_vs_raw, nbytes, 101)))
            print(f"all_reduce of {nbytes >> 20} MiB, tracing on / off:    median {on * 1e3:6.2f} / {off * 1e3:6.2f} ms "
                  f"-> overhead {100 * (on / off - 1):+5.1f} %  (target <= 5 %)")


if __name__ == "__main__":
    main()
