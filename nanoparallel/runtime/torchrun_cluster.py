"""`TorchrunCluster`: the `Cluster` API on the ranks torchrun started, one process per rank.

    cluster = Cluster.from_env()     # under torchrun: a TorchrunCluster; with plain python: Cluster(4)
    out = cluster.run(fn)            # on every rank: all ranks' values in rank order, out.trace
    if cluster.is_main:
        print(out.trace.summary())

    torchrun --nproc-per-node=4 script.py

In a notebook a `Cluster` owns its ranks and sends them your function. Under torchrun every
process *is* a rank and runs the whole script, so `run(fn)` calls ``fn`` here, in this process,
then gathers every rank's outcome (value or error, and trace events), and every process gets
the `RunResult` the notebook would: values in rank order, ``.trace``, ``.seconds``. Code
written against ``cluster.run(fn)`` runs unchanged in both places.

As on the local cluster: ``fn`` and its arguments travel by value (they are copied, so ``fn``
cannot change the caller's objects, which the checks' references are computed from); a rank
that raises makes every rank raise the same `RankError`; the trace records ``fn``'s own
torch.distributed calls only (the engine's barrier and gather use a gloo group of their own
and are never recorded); a run that misses its deadline (``timeout``) is an error that names
what this rank waits for.

What differs, and why: a stuck rank cannot be restarted (torchrun owns the processes), so at
the deadline this process says what it waits for and exits with status 1, and torchrun stops
the others. The world size is torchrun's: ``resize`` to another size is an error. What ``fn``
prints goes to the process's own output (torchrun's ``--local-ranks-filter`` picks ranks), not
prefixed ``[rank r]``. Trace times count from this rank's start of the run, after a barrier, on
each machine's own clock. ``fn`` draws random numbers from a fork of this process's generator,
so the check code around it draws the same numbers on every rank, as the notebook's one
process would.

Backends: gloo on CPUs; where CUDA is available, ``"cpu:gloo,cuda:nccl"`` with one GPU per
process (``LOCAL_RANK``): CPU tensors go through gloo, CUDA tensors through NCCL.
"""
from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from contextlib import contextmanager

import cloudpickle
import torch
import torch.distributed as dist

from nanoparallel.runtime import tracing, tracing_functional
from nanoparallel.runtime.board import COMM, DONE, RUNNING, StatusBoard
from nanoparallel.runtime.cluster import (DEFAULT_TIMEOUT, GLOO_TIMEOUT, Cluster, RunResult, _dumps,  # noqa: F401
                                          in_torchrun, one_input_per_rank, pack_run)  # in_torchrun: also this module's
from nanoparallel.runtime.context import set_current_tracer
from nanoparallel.runtime.errors import ClusterError, rank_error, torchrun_deadline_message
from nanoparallel.runtime.trace import Trace
from nanoparallel.runtime.worker import _error_info, die_with_parent_process

WORKS_HERE = "run, run_each, resize (to the same size), world_size, rank, is_main, timeout and close"
LOCAL_SETTINGS = ("backend", "stall_timeout", "start_timeout", "start_method", "log_path")
REPORT_GRACE = 2.0  # seconds a rank past its deadline waits, once it has reported, before it exits


class TorchrunCluster:
    """This process's rank of a torchrun job, behind the `Cluster` API. See the module docstring.

    timeout  seconds a run may take before this process reports what it waits for and exits
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout
        # A rank must not outlive the torchrun agent that started it: killed with SIGKILL, the agent
        # cannot stop its ranks, which run in sessions of their own (Linux; elsewhere each run's
        # deadline still ends a stuck rank).
        die_with_parent_process()
        self._owns_group = not dist.is_initialized()
        if self._owns_group:
            _join_group()
        self.rank, self._world_size = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self._gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=GLOO_TIMEOUT))
        self._board = StatusBoard(self._world_size)
        self._tracer = tracing.Tracer(self.rank, self._board)
        tracing.install(self._tracer)
        tracing_functional.install(self._tracer)
        set_current_tracer(self._tracer)
        self._raised = ""  # what this rank's fn raised, for the deadline message
        self._closed = False

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def run(self, fn, *args, **kwargs) -> RunResult:
        """Run ``fn(*args, **kwargs)`` here, on this rank, as every rank does; return every
        rank's result in rank order, with the run's trace (the same on every rank)."""
        self._check_open()
        fn, args, kwargs = cloudpickle.loads(pack_run(fn, args, kwargs))  # by value, as on a Cluster
        with self._deadline():
            self._board.post(self.rank, COMM, "in the barrier that starts the run (another rank has not reached it)")
            self._untraced(dist.barrier, group=self._gloo)
            t0 = time.perf_counter()
            self._tracer.begin(t0)
            self._board.post(self.rank, RUNNING)
            outcome = self._call(fn, args, kwargs)
            events = self._tracer.finish()
            self._board.post(self.rank, COMM, "in the gather of every rank's outcome (another rank has not finished)")
            gathered = [None] * self._world_size
            self._untraced(dist.all_gather_object, gathered, (outcome, events), group=self._gloo)
            self._board.post(self.rank, DONE)
        seconds = time.perf_counter() - t0
        errors = {r: outcome[1] for r, (outcome, _) in enumerate(gathered) if outcome[0] == "error"}
        if errors:
            raise rank_error(errors, {}) from None
        trace = Trace([e for _, events in gathered for e in events], self._world_size)
        return RunResult([cloudpickle.loads(outcome[1]) for outcome, _ in gathered], trace, seconds)

    def run_each(self, fn, inputs, *args, **kwargs) -> RunResult:
        """Run ``fn(inputs[r], *args, **kwargs)`` on rank r, here as every rank does. Every rank
        runs the script under torchrun, so each made every input itself: nothing is kept from it."""
        self._check_open()
        return self.run(fn, one_input_per_rank(inputs, self._world_size)[self.rank], *args, **kwargs)

    def resize(self, world_size: int) -> None:
        """Nothing to do for torchrun's own world size; any other is an error that says how to get it."""
        self._check_open()
        if world_size != self._world_size:
            raise ClusterError(
                f"This run asks for {world_size} ranks, but under torchrun the world size is torchrun's: "
                f"{self._world_size} processes (--nproc-per-node times --nnodes). Start torchrun with "
                f"{world_size} processes in all, or run it in the notebook, whose local cluster resizes.")

    def close(self) -> None:
        """Leave the process group if this cluster joined it. Idempotent."""
        if not self._closed and self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._closed = True

    def __enter__(self) -> "TorchrunCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name):
        if not name.startswith("_") and (hasattr(Cluster, name) or name in LOCAL_SETTINGS):
            raise ClusterError(f"cluster.{name} needs the notebook's local cluster; under torchrun "
                               f"only {WORKS_HERE} work.")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __reduce__(self):
        raise TypeError("A cluster cannot be sent to its ranks: call cluster.run from the script, "
                        "not from inside a function running on a rank.")

    def __repr__(self) -> str:
        return f"<TorchrunCluster: rank {self.rank} of {self._world_size} ({self.backend})>"

    # -- running ---------------------------------------------------------------------------

    def _call(self, fn, args, kwargs) -> tuple:
        """("ok", pickled value) or ("error", what the local cluster's ranks report)."""
        self._raised = ""
        try:
            with torch.random.fork_rng(devices=[]):
                value = fn(*args, **kwargs)
        except Exception as exc:
            self._raised = f"{type(exc).__name__}: {exc}"
            return "error", _error_info(exc.with_traceback(exc.__traceback__.tb_next))  # from fn's frame on
        try:
            return "ok", _dumps(value)
        except Exception as exc:
            return "error", _error_info(TypeError(
                f"rank {self.rank} returned a value that cannot be sent to the other ranks "
                f"({type(exc).__name__}: {exc}). Return tensors, numbers, strings, or lists/dicts of them."))

    def _untraced(self, call, *args, **kwargs):
        # The tracer records only the outermost call: one made "inside" another passes straight
        # through, unrecorded and unposted. The engine's own collectives claim that depth.
        self._tracer.depth += 1
        try:
            return call(*args, **kwargs)
        finally:
            self._tracer.depth -= 1

    @contextmanager
    def _deadline(self):
        timer = threading.Timer(self.timeout, self._give_up, args=(self.timeout,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _give_up(self, timeout: float) -> None:
        # The main thread may be blocked inside gloo, where no exception reaches it: say what
        # this rank waits for and end the process; torchrun then stops the other ranks.
        waiting = self._board.describe(self.rank)
        if self._raised:
            waiting = f"it raised {self._raised}, then waited for the other ranks ({waiting})"
        sys.stdout.flush()
        print(torchrun_deadline_message(self.rank, waiting, timeout), file=sys.stderr, flush=True)
        # Every rank's deadline falls at about the same moment, and torchrun stops the others as
        # soon as one exits: linger, so that each gets to say what it waits for.
        time.sleep(REPORT_GRACE)
        os._exit(1)

    def _check_open(self) -> None:
        if self._closed:
            raise ClusterError("This cluster is closed. Make a new one: cluster = Cluster.from_env()")


def _join_group() -> None:
    """Join the process group torchrun prepared (its MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
    timeout = datetime.timedelta(seconds=GLOO_TIMEOUT)  # finite: a missing rank ends the wait
    if not torch.cuda.is_available():
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
        return
    local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
    if local_rank >= gpus:
        raise ClusterError(f"NCCL needs one GPU per process: this is local rank {local_rank}, and this machine "
                           f"shows {gpus} GPUs. Start at most {gpus} processes per machine "
                           "(--nproc-per-node), or set CUDA_VISIBLE_DEVICES= to run on CPUs with gloo.")
    torch.cuda.set_device(local_rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method="env://", timeout=timeout)


Cluster.on_torchrun_ranks = TorchrunCluster  # what Cluster.from_env returns under torchrun
