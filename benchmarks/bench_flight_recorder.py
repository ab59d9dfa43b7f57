"""What reading torch's flight recorder costs a guarded rank after each run, by recorder size.

The witness (nanoparallel/grading/comm_witness.py) dumps the whole recorder after every run, and
refuses a run with more collectives than the recorder keeps. A bigger recorder would let a run
make more, at this price per run once the recorder is full. Each size runs in a process of its
own (the size is read when the process group starts): one rank on gloo makes as many
all-reduces as the recorder keeps, each from a stack ten frames deep, then the dump is timed.

    python benchmarks/bench_flight_recorder.py [sizes...]      (default: 512 2048 8192)
"""
from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

from nanoparallel.grading.comm_witness import FLIGHT_RECORDER_ENTRIES

REPEATS = 5


def one_size(size: int) -> None:
    import torch
    import torch.distributed as dist
    store = tempfile.NamedTemporaryFile(prefix="bench-fr-", delete=False).name
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{store}")
    tensor = torch.ones(4)

    def nested(depth: int) -> None:
        if depth:
            return nested(depth - 1)
        dist.all_reduce(tensor)

    for _ in range(size):
        nested(10)
    dump = torch._C._distributed_c10d._dump_fr_trace
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        entries = pickle.loads(dump(includeCollectives=True, includeStackTraces=True, onlyActive=False))["entries"]
        seconds.append(time.perf_counter() - start)
    print(f"{size:>6} entries kept ({len(entries)} read): median dump {statistics.median(seconds) * 1e3:7.1f} ms per run",
          flush=True)
    dist.destroy_process_group()
    os.unlink(store)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        return one_size(int(sys.argv[2]))
    sizes = [int(a) for a in sys.argv[1:]] or [FLIGHT_RECORDER_ENTRIES, 2048, 8192]
    print(f"the witness keeps {FLIGHT_RECORDER_ENTRIES}; medians of {REPEATS} dumps")
    for size in sizes:
        subprocess.run([sys.executable, __file__, "--one", str(size)], check=True,
                       env=dict(os.environ, TORCH_FR_BUFFER_SIZE=str(size)))


if __name__ == "__main__":
    main()
