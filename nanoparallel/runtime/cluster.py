"""`Cluster`: persistent ranks that run your functions with real torch.distributed.

    from nanoparallel import Cluster
    import torch, torch.distributed as dist

    def hello():
        t = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(t)
        return t.item()

    with Cluster(world_size=4) as cluster:
        out = cluster.run(hello)      # [10.0, 10.0, 10.0, 10.0]
        print(out.trace.summary())    # who sent what to whom

Each rank is a process with one thread and a gloo (or NCCL) process group, forked from a server
that has imported torch once (or spawned, where there is no fork server). Functions, including
ones defined in a notebook cell, travel by value (cloudpickle). A failing rank raises
`RankError`; a run that misses its deadline raises `DeadlockError` naming what each rank waits
for. Either way the cluster is usable again for the next call.
"""
from __future__ import annotations

import importlib
import io
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import threading
import time
import types
import weakref
from contextlib import contextmanager

import cloudpickle

from nanoparallel.grading import rank_guard
from nanoparallel.grading.comm_witness import FLIGHT_RECORDER_ENV
from nanoparallel.runtime import rank_data
from nanoparallel.runtime.board import StallWatch, StatusBoard
from nanoparallel.runtime.errors import ClusterError, DeadlockError, deadlock_message, rank_error
from nanoparallel.runtime.trace import Trace
from nanoparallel.runtime.worker import worker_main

MAX_WORLD_SIZE = 32       # each rank is a process with its own copy of torch (~0.3 GB)
DEFAULT_TIMEOUT = 10.0    # seconds; well below nbgrader's 60 s cell timeout
TIMEOUT_ENV = "NANOPARALLEL_TIMEOUT"      # overrides DEFAULT_TIMEOUT (the test suite's busy machine)
STALL_ENV = "NANOPARALLEL_STALL_TIMEOUT"  # the default of `stall_timeout` (the test suite sets it)
ERROR_GRACE = 1.0         # after one rank fails, how long the others get to finish
GLOO_TIMEOUT = 600.0      # the parent's deadline always fires first; this only bounds strays
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
# What a fork server imports once, so that a new rank does not: importing torch takes a second
# or more of CPU per rank, paid at a kernel's first Cluster and again after every deadlock; so
# does torch._dynamo (with sympy), which torch imports when a rank makes its first optimizer.
_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "cloudpickle", "nanoparallel.runtime.worker",
            "nanoparallel.runtime.tracing"]


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, except that module objects of a module subclass travel by name. cloudpickle
    copies the submodules of a module a function uses when one of their names appears in the
    function's code: `dist` and `shard.config` bring in `torch.distributed.config`, a
    module subclass that cannot be pickled, although every rank can simply import it."""

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType:
            return importlib.import_module, (obj.__name__,)
        return super().reducer_override(obj)


def _dumps(obj) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()


def pack_run(fn, args: tuple, kwargs: dict) -> bytes:
    """``fn`` and its arguments, pickled by value for the ranks (also `TorchrunCluster`'s copy)."""
    if not callable(fn):
        raise TypeError(f"cluster.run needs a function to run on each rank, got {type(fn).__name__}.")
    try:
        return _dumps((fn, args, kwargs))
    except Exception as exc:
        raise ClusterError(
            f"Could not send {getattr(fn, '__name__', fn)!r} and its arguments to the ranks "
            f"({type(exc).__name__}: {exc}). Functions travel by value: they must not capture "
            "open files, locks, generators or the cluster itself.") from None


def pack_input(x) -> bytes:
    """One rank's input for `Cluster.run_each`, pickled by value, views copied (`own_storage`)."""
    try:
        return _dumps(own_storage(x))
    except Exception as exc:
        raise ClusterError(f"Could not send a rank's input to it ({type(exc).__name__}: {exc}). Inputs travel by "
                           "value: they must not hold open files, locks, generators or the cluster itself.") from None


def one_input_per_rank(inputs, world_size: int) -> list:
    """`inputs` as a list of one input per rank, or a clear error (`Cluster.run_each`)."""
    try:
        inputs = list(inputs)
    except TypeError:
        raise TypeError(f"run_each needs a list with one input per rank, got {type(inputs).__name__}.") from None
    if len(inputs) != world_size:
        raise ValueError(f"run_each needs one input per rank: got {len(inputs)} for {world_size} ranks. "
                         f"Make the list as long as the cluster (cluster.world_size), or resize the cluster first.")
    return inputs


def own_storage(x):
    """`x` with every tensor in it (in lists, tuples and dicts too) that shows only part of its
    storage replaced by a copy of that part."""
    import torch  # here, not at the top: the grader imports this module and pays for no torch
    if isinstance(x, torch.Tensor):
        shows = x.numel() * x.element_size()
        if not x.storage_offset() and x.untyped_storage().nbytes() == shows:
            return x
        # detached: a clone of a view of a leaf that requires grad would be a non-leaf, which
        # torch refuses to pickle; the copy is a leaf that requires grad as the view did
        return x.detach().clone().requires_grad_(x.requires_grad)
    if type(x) in (list, tuple):
        return type(x)(own_storage(v) for v in x)
    if type(x) is dict:
        return {k: own_storage(v) for k, v in x.items()}
    return x


class RunResult(list):
    """The per-rank return values of one run, in rank order, plus its `trace`."""

    def __init__(self, values, trace: Trace, seconds: float):
        super().__init__(values)
        self.trace = trace
        self.seconds = seconds


class _Worker:
    def __init__(self, rank: int, process, conn):
        self.rank, self.process, self.conn = rank, process, conn
        self.pid: int | None = None  # known once the worker says hello


class Cluster:
    """Persistent ranks on this machine. See the module docstring.

    world_size     ranks to run on (1 to 32); `resize` changes it later
    backend        "gloo" (CPU, the default) or "nccl" (one GPU per rank)
    timeout        seconds a run may take before it raises `DeadlockError`; settable later;
                   default: $NANOPARALLEL_TIMEOUT or 10
    stall_timeout  if set (Linux), a run also raises `DeadlockError` once every unfinished rank
                   has waited this many seconds inside a torch.distributed call using at most
                   2 % of a core, which no run that is making progress does; default: $NANOPARALLEL_STALL_TIMEOUT
                   or off, so a deadlock costs the whole `timeout`
    start_timeout  seconds to wait for new workers to import torch and join the group
    start_method   "forkserver" (the default where available: ranks fork from a server that
                   imported torch once) or "spawn" (each rank imports torch itself)
    """

    def __init__(self, world_size: int = 4, *, backend: str = "gloo",
                 timeout: float | None = None, start_timeout: float = 180.0,
                 start_method: str | None = None, stall_timeout: float | None = None):
        self._world_size = _check_world_size(world_size, backend)
        self.backend = backend
        self.timeout = timeout if timeout is not None else _env_seconds(TIMEOUT_ENV) or DEFAULT_TIMEOUT
        self.start_timeout = start_timeout
        self.stall_timeout = stall_timeout if stall_timeout is not None else _env_seconds(STALL_ENV)
        self.start_method = start_method or default_start_method()
        if self.start_method not in ("forkserver", "spawn"):
            raise ClusterError(f"start_method must be 'forkserver' or 'spawn', got {self.start_method!r}.")
        # Never plain fork: the parent may already run torch's thread pool, and a forked
        # child can then hang on its first parallel op. The fork server is a clean process.
        self._ctx = mp.get_context(self.start_method)
        if self.start_method == "forkserver":
            self._ctx.set_forkserver_preload(_PRELOAD)
        self._tmpdir = tempfile.mkdtemp(prefix="nanoparallel-")
        self.log_path = os.path.join(self._tmpdir, "workers.log")
        self._board = StatusBoard(MAX_WORLD_SIZE)
        self._workers: list[_Worker] = []
        self._group_ready = False
        self._epoch = 0
        self._lock = threading.Lock()
        self._closed = False
        # Kills the workers when the cluster is garbage collected or the interpreter exits.
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._tmpdir)
        self._spawn(self._world_size)
        self._ensure_ready()

    # What `from_env` returns under torchrun: `TorchrunCluster`, which sets itself here when its
    # module is imported (nanoparallel/__init__.py imports it on torchrun's ranks, and with the
    # package's public names elsewhere). That module imports this one, so
    # this one does not import it back.
    on_torchrun_ranks = None

    @classmethod
    def from_env(cls, world_size: int = 4, **kwargs):
        """The cluster this process should use: under torchrun (its RANK, WORLD_SIZE and
        MASTER_ADDR or TORCHELASTIC_RUN_ID are set) a `TorchrunCluster` on torchrun's ranks,
        which runs ``fn`` in place on each of them; otherwise ``Cluster(world_size, **kwargs)``.
        So one script runs with ``python script.py`` and with ``torchrun --nproc-per-node=4
        script.py``. Under torchrun the world size is torchrun's and only ``timeout`` of the
        keyword arguments applies (the others describe local ranks)."""
        if in_torchrun():
            return Cluster.on_torchrun_ranks(timeout=kwargs.get("timeout", DEFAULT_TIMEOUT))
        return cls(world_size, **kwargs)

    # -- public API ------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def is_main(self) -> bool:
        """Whether this process should print a script's results: always, here (the notebook's
        process holds every result); under torchrun, rank 0 only (`TorchrunCluster`)."""
        return True

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and the curious)."""
        return [w.pid or w.process.pid for w in self._workers if w.process.is_alive()]

    def run(self, fn, *args, **kwargs) -> RunResult:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order."""
        self._check_open()
        return self._run_payload(pack_run(fn, args, kwargs))

    def run_each(self, fn, inputs, *args, **kwargs) -> RunResult:
        """Run ``fn(inputs[r], *args, **kwargs)`` on each rank r; return the results in rank order.
        Each rank is sent its own input only: what the other ranks start from never reaches it
        (with ``run``, a closure over every rank's input travels to every rank). A tensor in an
        input that is a view of a larger one (a slice, a ``tensor_split`` part) travels as a copy
        of what it shows: pickled as it is, it would carry the whole storage behind it."""
        self._check_open()
        inputs = one_input_per_rank(inputs, self._world_size)
        payload = pack_run(fn, args, kwargs)  # pickled once, as for run: only the inputs differ
        return self._run_payload(payload, [pack_input(x) for x in inputs])

    def _run_payload(self, payload: bytes, inputs: list[bytes] | None = None) -> RunResult:
        if not self._lock.acquire(blocking=False):
            raise ClusterError("This cluster is already running a function; runs cannot overlap.")
        try:
            self._ensure_ready()
            return self._run(payload, inputs)
        finally:
            self._lock.release()
            sys.audit("nanoparallel.engine_look")  # under grading, the guard looks again (grading/guard.py)

    def resize(self, world_size: int) -> None:
        """Use ``world_size`` ranks from now on: a fresh process group, more workers if needed."""
        self._check_open()
        self._world_size = _check_world_size(world_size, self.backend)
        if world_size > len(self._workers):
            self._spawn(world_size)
        self._group_ready = False
        self._ensure_ready()

    def close(self) -> None:
        """Stop every worker. Idempotent; the context manager calls it for you."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError("A Cluster cannot be sent to its ranks: call cluster.run from the notebook, "
                        "not from inside a function running on a rank.")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "ready"
        return f"<Cluster: {self._world_size} ranks ({self.backend}), {state}>"

    # -- running ---------------------------------------------------------------------------

    def _run(self, payload: bytes, inputs: list[bytes] | None = None) -> RunResult:
        """Every rank runs `payload` (`pack_run`), rank r with inputs[r] (`pack_input`) first if given."""
        active = self._workers[: self._world_size]
        for w in active:
            self._board.post(w.rank, "idle")
        t0 = time.perf_counter()
        for w in active:
            w.conn.send(("run", payload, t0, None if inputs is None else inputs[w.rank]))
        try:
            replies, stuck, waited = self._collect(active, t0)
        except KeyboardInterrupt:
            self._restart()
            raise
        sys.audit("nanoparallel.engine_look")  # and before the replies are read
        events = [e for reply in replies.values() for e in reply[2]]
        trace = Trace(events, self._world_size)
        errors = {r: reply[1] for r, reply in sorted(replies.items()) if reply[0] == "error"}
        values = [rank_data.decode(replies[r][1]) for r in range(self._world_size)] if not errors and not stuck else None
        # Printed once the values are read: printing calls whatever the kernel's sys.stdout is.
        _print_outputs(replies)
        if values is not None:
            return RunResult(values, trace, time.perf_counter() - t0)
        if stuck or any(not w.process.is_alive() for w in active):
            waiting = {r: ("finished" if r in replies and r not in errors else
                           "raised an exception" if r in errors else self._board.describe(r))
                       for r in range(self._world_size)}
            self._restart()  # a rank blocked in gloo only stops when killed
        else:
            waiting = {}
            self._group_ready = False  # unmatched messages may linger: start a fresh group
        if errors:
            raise rank_error(errors, waiting) from None
        raise DeadlockError(deadlock_message(waiting, min(waited, self.timeout)), waiting) from None

    def _collect(self, active, t0):
        """Wait for every active rank's reply; return (replies, ranks still running, seconds
        waited before giving up on them)."""
        replies: dict[int, tuple] = {}
        deadline = t0 + self.timeout
        pending = {w.rank: w for w in active}
        stall = StallWatch(self._board, self.stall_timeout) if self.stall_timeout else None
        while pending:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or (stall and stall.stalled({r: w.pid for r, w in pending.items()})):
                break
            handles = {w.conn: w for w in pending.values()}
            handles.update({w.process.sentinel: w for w in pending.values()})
            step = min(remaining, StallWatch.POLL) if stall else remaining
            for ready in mp.connection.wait(list(handles), timeout=step):
                w = handles[ready]
                rank = w.rank  # read once: the label the reply is filed under is the one the guard hears
                if rank not in pending:
                    continue
                try:
                    replies[rank] = rank_data.receive(w.conn, rank)
                except (EOFError, OSError):
                    replies[rank] = ("error", _died_info(w, self.log_path), [], "")
                except rank_data.NotData as refused:  # under grading: the rank's error, as if it raised
                    replies[rank] = ("error", {"type": "NotData", "message": str(refused), "frames": [],
                                               "text": str(refused), "pickled": None}, [], "")
                del pending[rank]
                if replies[rank][0] == "error":
                    deadline = min(deadline, time.perf_counter() + ERROR_GRACE)
        return replies, sorted(pending), time.perf_counter() - t0

    # -- process management ----------------------------------------------------------------

    @staticmethod
    def start_fork_server() -> None:
        """Start the fork server that ranks fork from, now, from the engine's own preload list,
        environment and sys.path. The grader calls this before any cell; under grading, ranks
        start only from this server."""
        from multiprocessing import forkserver
        mp.get_context("forkserver").set_forkserver_preload(_PRELOAD)
        with environment(dict(_WORKER_ENV)), _clean_preparation(True):
            forkserver.ensure_running()
        server = forkserver._forkserver
        _fork_server.update(pid=server._forkserver_pid, address=server._forkserver_address)

    def _spawn(self, count: int) -> None:
        """Start workers for ranks len(workers)..count-1 (without waiting for them)."""
        env = dict(_WORKER_ENV)
        # A fork server keeps the environment it started with: pass guarded grading on explicitly.
        guarded = rank_guard.enabled()
        env[rank_guard.ENV] = "1" if guarded else ""
        if guarded:  # the flight recorder that comm_witness reads
            env.update(FLIGHT_RECORDER_ENV)
            _check_fork_server(self._ctx)
        if sys.platform.startswith("linux") and self.backend == "gloo":
            env.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
        with environment(env), _clean_preparation(guarded):
            for rank in range(len(self._workers), count):
                parent_conn, child_conn = self._ctx.Pipe()
                slot = self._board.slot(rank)
                process = self._ctx.Process(
                    target=worker_main,
                    args=(rank, child_conn, slot, self.log_path, env, os.getpid()),
                    name=f"nanoparallel-rank{rank}", daemon=True)
                process.start()
                child_conn.close()
                worker = _Worker(rank, process, parent_conn)
                # Under grading, the guard remembers the channels the engine opened, and the
                # objects it made for the rank, and sends the rank the key it signs its messages
                # with (grading/guard.py). With no guard here, the rank gets an empty key.
                keyed: list = []
                sys.audit("nanoparallel.rank_channel", parent_conn, rank, worker, slot, keyed)
                if not keyed:
                    parent_conn.send_bytes(b"")
                self._workers.append(worker)
        self._group_ready = False

    def _ensure_ready(self) -> None:
        """Wait for new workers to start, then (re)build the process group if needed."""
        for w in self._workers:
            if w.pid is None:
                kind, pid = self._expect(w, "hello")
                w.pid = pid
        if self._group_ready:
            return
        self._epoch += 1
        store = os.path.join(self._tmpdir, f"store-{self._epoch}")
        for w in self._workers:
            active = w.rank < self._world_size
            w.conn.send(("init", store if active else None, self._world_size, self.backend, GLOO_TIMEOUT))
        for w in self._workers:
            self._expect(w, "ready")
        self._group_ready = True

    def _expect(self, w: _Worker, kind: str):
        if not w.conn.poll(self.start_timeout):
            self._restart()
            raise ClusterError(f"rank {w.rank} did not start within {self.start_timeout:.0f} s. "
                               f"Worker log: {self.log_path}")
        try:
            reply = rank_data.receive(w.conn, w.rank)
        except rank_data.NotData as refused:
            self._restart()
            raise ClusterError(f"rank {w.rank} could not start: {refused}") from None
        except (EOFError, OSError):
            info = _died_info(w, self.log_path)
            self._restart()
            raise ClusterError(f"rank {w.rank} could not start: {info['message']}") from None
        if reply[0] == "error":
            self._restart()
            raise ClusterError(f"rank {w.rank} could not join the process group:\n{reply[1]['text']}")
        return reply

    def _restart(self) -> None:
        """Kill every worker and start fresh ones in the background (ready by the next run)."""
        count = len(self._workers)
        _kill(self._workers)
        self._workers.clear()
        self._spawn(count)

    def _check_open(self) -> None:
        if self._closed:
            raise ClusterError("This cluster is closed. Start a new one: cluster = Cluster(world_size=4)")


# -- helpers (no cluster state) -----------------------------------------------------------

def _env_seconds(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    return float(value) if value else None


# multiprocessing prepares a new process, before the target it was given runs, from what the
# parent hands it: the parent's sys.path, and a way to run the parent's __main__ again (its
# __spec__'s name, or its __file__). In a kernel __main__ is the notebook's namespace, so
# `__file__ = "/tmp/x.py"` in a cell ran /tmp/x.py in every new rank before the rank's guard
# was installed. New ranks get a bare __main__ and, under grading, the sys.path the engine was
# imported with (a learner's own additions to sys.path stay, for functions shipped by reference).
_BARE_MAIN = types.ModuleType("__main__")
_SYS_PATH = tuple(sys.path)
# Under grading the fork server is started before any cell (Cluster.start_fork_server), with the
# engine's preload list and environment; new ranks must come from that server.
_fork_server: dict = {}


@contextmanager
def _clean_preparation(guarded: bool):
    main, path = sys.modules.get("__main__"), list(sys.path)
    sys.modules["__main__"] = _BARE_MAIN
    if guarded:
        sys.path[:] = _SYS_PATH
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        sys.path[:] = path


def _check_fork_server(ctx) -> None:
    """Under grading: the fork server is the one started before any cell, or no rank starts (a
    server the notebook started, or a context that forks the kernel itself, could run its code
    in every rank before the rank's guard)."""
    if not _fork_server:
        return  # not started by the guard (the engine's own tests)
    from multiprocessing import forkserver
    server = forkserver._forkserver
    if type(ctx) is not mp.context.ForkServerContext or server._forkserver_pid != _fork_server["pid"] or \
            server._forkserver_address != _fork_server["address"]:
        sys.audit("nanoparallel.rank_tamper", "no rank started: the fork server the grader started before "
                  "any cell was stopped or replaced, or the cluster was set to start ranks another way")
        raise ClusterError("Under grading, ranks start only from the fork server the grader started "
                           "before any cell, and it was stopped or replaced, or the cluster was set to "
                           "start ranks another way. Leave multiprocessing's fork server, its start "
                           "methods and the cluster's context as they are.")


def default_start_method() -> str:
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _check_world_size(world_size, backend: str) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise ClusterError(f"world_size must be an int, got {world_size!r}.")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ClusterError(f"world_size must be between 1 and {MAX_WORLD_SIZE} (each rank is a "
                           f"process with its own copy of torch); got {world_size}.")
    if backend not in ("gloo", "nccl"):
        raise ClusterError(f"backend must be 'gloo' (CPU) or 'nccl' (one GPU per rank), got {backend!r}.")
    if backend == "nccl":
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if world_size > gpus:
            raise ClusterError(f"backend='nccl' needs one GPU per rank: {world_size} ranks, {gpus} GPUs "
                               "visible. Use backend='gloo' to run on the CPU.")
    return world_size


@contextmanager
def environment(values: dict):
    """Set environment variables for the children spawned inside the block (the autograder uses it
    for the kernels it starts, too)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _kill(workers: list[_Worker]) -> None:
    for w in workers:
        if w.process.is_alive():
            w.process.kill()  # SIGKILL: a rank blocked in gloo ignores SIGINT and SIGTERM
    for w in workers:
        w.process.join(timeout=10)
        w.conn.close()


def _shutdown(workers: list[_Worker], tmpdir: str) -> None:
    for w in workers:
        try:
            w.conn.send(("exit",))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 2.0
    for w in workers:
        w.process.join(timeout=max(0.0, deadline - time.monotonic()))
    _kill(workers)
    workers.clear()
    shutil.rmtree(tmpdir, ignore_errors=True)


def _died_info(w: _Worker, log_path: str) -> dict:
    # Its pipe has closed, so it is exiting; a forked rank's exit code comes through the fork
    # server, which a busy machine may schedule late: wait for it rather than guess (a short wait
    # here once lost the guard's verdict on a loaded machine).
    w.process.join(timeout=10)
    tail = ""
    if os.path.exists(log_path):
        with open(log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-15:])
    message = f"rank {w.rank} died (exit code {w.process.exitcode})"
    if w.process.exitcode == rank_guard.TAMPERED or rank_guard.STOP_MARK in tail:
        message = (f"rank {w.rank} was stopped by the grader's guard: notebook code changed what the "
                   "checks rely on inside the rank, or communicated where the trace does not see "
                   "(the log lines below say which)")
        sys.audit("nanoparallel.rank_tamper", f"rank {w.rank}: {tail.strip().splitlines()[-1] if tail.strip() else ''}")
    return {"type": "WorkerDied", "message": message, "frames": [], "pickled": None,
            "text": f"Last lines of the worker log:\n{tail}" if tail else ""}


def _print_outputs(replies: dict[int, tuple]) -> None:
    """Show what each rank printed, in rank order, on the notebook's stdout (never stderr)."""
    for rank in sorted(replies):
        text = replies[rank][3]
        if text:
            for line in text.rstrip("\n").split("\n"):
                print(f"[rank {rank}] {line}")


def in_torchrun(environ=None) -> bool:
    """Whether this process is a rank that torchrun (or a launcher like it) started."""
    env = os.environ if environ is None else environ
    return "RANK" in env and "WORLD_SIZE" in env and ("MASTER_ADDR" in env or "TORCHELASTIC_RUN_ID" in env)
