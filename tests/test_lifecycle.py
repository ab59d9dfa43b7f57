"""No worker outlives its cluster: close, garbage collection, an interrupt, a killed parent,
or a Jupyter kernel that is shut down or restarted."""
import gc
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nanoparallel import Cluster

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def alive(pid: int) -> bool:
    """Running (zombies waiting for a reaper count as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, seconds=10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_close_stops_every_worker():
    c = Cluster(world_size=3)
    pids = c.pids
    assert len(pids) == 3 and all(alive(p) for p in pids)
    c.close()
    assert wait_gone(pids) == []


def test_garbage_collection_stops_every_worker():
    c = Cluster(world_size=2)
    pids = c.pids
    del c
    gc.collect()
    assert wait_gone(pids) == []


def run_script(body: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
@pytest.mark.parametrize("hung", [False, True], ids=["idle", "hung"])
def test_workers_die_with_a_killed_parent(start_method, hung):
    """Idle ranks would see their pipe close; a rank hung in gloo must be killed all the same."""
    proc = run_script(f"""
        import threading, time
        import torch, torch.distributed as dist
        from nanoparallel import Cluster

        def hang():
            if dist.get_rank() == 0:
                dist.recv(torch.zeros(1), src=1)

        if __name__ == "__main__":
            c = Cluster(world_size=2, timeout=120, start_method={start_method!r})
            if {hung}:
                threading.Thread(target=c.run, args=(hang,), daemon=True).start()
                time.sleep(1.0)  # rank 0 is now blocked in recv
            print(*c.pids, flush=True)
            time.sleep(120)
    """)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.kill()  # SIGKILL: no atexit, no finalizers
    proc.wait()
    assert wait_gone(pids) == []


def test_interrupt_during_a_hung_run_kills_the_stuck_workers():
    proc = run_script("""
        import os, signal, threading, time
        import torch, torch.distributed as dist
        from nanoparallel import Cluster

        def hang():
            if dist.get_rank() == 0:
                dist.recv(torch.zeros(1), src=1)

        if __name__ == "__main__":
            # A shell's background job inherits SIGINT ignored; Python then never raises it.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            c = Cluster(world_size=2, timeout=120)
            print(*c.pids, flush=True)
            threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            try:
                c.run(hang)
            except KeyboardInterrupt:
                print("interrupted", *c.pids, flush=True)
                print(c.run(lambda: dist.get_rank()), flush=True)
    """)
    out, err = proc.communicate(timeout=120)
    lines = out.splitlines()
    old = [int(p) for p in lines[0].split()]
    assert lines[1].startswith("interrupted"), (out, err)
    assert not set(old) & {int(p) for p in lines[1].split()[1:]}
    assert lines[2] == "[0, 1]"  # the cluster works after the interrupt
    assert wait_gone(old) == []


@pytest.mark.parametrize("how", ["shutdown", "restart"])
def test_kernel_shutdown_or_restart_leaves_no_workers(how):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograder"))
    from kernel_sockets import IpcKernelManager  # not TCP: the background jobs' ranks take ports
    km = IpcKernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    try:
        outputs = []
        kc.execute_interactive("from nanoparallel import Cluster\ncluster = Cluster(world_size=2)\n"
                               "print(*cluster.pids)", timeout=120,
                               output_hook=lambda msg: outputs.append(msg))
        text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
        pids = [int(p) for p in text.split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        if how == "shutdown":
            km.shutdown_kernel(now=False)
        else:
            km.restart_kernel(now=False)
        assert wait_gone(pids) == []
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)
