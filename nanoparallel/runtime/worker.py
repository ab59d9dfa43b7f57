"""The loop each rank runs in its own spawned process.

It answers the parent's messages on a pipe: ``init`` (join a process group), ``run`` (call a
function sent by value and send back its result, trace and printed output) and ``exit``.
Nothing it does reaches the notebook's stderr: file descriptors 1 and 2 go to a log file, and
what the learner's function prints is captured and shown by the parent, prefixed by rank.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
import traceback
import warnings


def _die_with_parent(owner: int) -> None:
    """A worker must never outlive the cluster's process (`owner`), even one killed with SIGKILL.

    Spawned, the owner is our parent. Started by a fork server, our parent is the server: we
    let go of our copy of its "alive" pipe, so that the server exits as soon as the owner does,
    and PR_SET_PDEATHSIG (bound to the parent) then takes us with it.
    """
    parent = os.getppid()
    if parent != owner:
        from multiprocessing import forkserver
        server = forkserver._forkserver
        if getattr(server, "_forkserver_alive_fd", None) is not None:
            os.close(server._forkserver_alive_fd)
            server._forkserver_alive_fd = None
    die_with_parent_process()

    def watch():  # a portable fallback for systems without PR_SET_PDEATHSIG
        while os.getppid() == parent and _exists(owner):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def die_with_parent_process() -> None:
    """Ask Linux to SIGKILL this process when its parent process dies (PR_SET_PDEATHSIG);
    elsewhere, nothing."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _silence(log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    warnings.simplefilter("ignore")


def _error_info(exc: BaseException) -> dict:
    import cloudpickle
    frames = traceback.extract_tb(exc.__traceback__)
    # Drop this module's own frames so the learner sees their code first.
    frames = [f for f in frames if f.filename != __file__]
    try:
        pickled = cloudpickle.dumps(exc)
    except Exception:
        pickled = None
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "frames": [(f.filename, f.lineno, f.name, f.line) for f in frames],
        "text": "".join(traceback.format_exception(exc)),
        "pickled": pickled,
    }


def worker_main(rank: int, conn, board, log_path: str, env: dict, owner: int) -> None:
    # A fork server's environment is the one it started with: set ours (GLOO_SOCKET_IFNAME...).
    os.environ.update(env)
    _die_with_parent(owner)
    _silence(log_path)
    import cloudpickle
    import torch
    import torch.distributed as dist

    from nanoparallel.grading import rank_guard
    from nanoparallel.runtime import tracing, tracing_functional
    from nanoparallel.runtime.board import DONE, RUNNING
    from nanoparallel.runtime.context import set_current_tracer

    torch.set_num_threads(1)
    tracer = tracing.Tracer(rank, board)
    tracing.install(tracer)
    tracing_functional.install(tracer)
    set_current_tracer(tracer)
    # Guarded grading: a local, not a module attribute, so notebook code cannot swap it.
    check_untouched = rank_guard.install() if rank_guard.enabled() else None
    # The kernel's guard sends a key first (the engine an empty one where there is no guard), and
    # every message back is signed with it (held in C: no notebook code on this rank can sign what
    # it writes into the channel). Unpickling stops before the signature, so a reader that does
    # not check it (outside grading) reads the message as if it had none.
    send = _signed_sender(conn, conn.recv_bytes())
    send(("hello", os.getpid()))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        kind = message[0]
        if kind == "exit":
            break
        if kind == "init":
            _, store_path, world_size, backend, timeout_s = message
            try:
                _join_group(dist, torch, rank, store_path, world_size, backend, timeout_s)
                send(("ready", None))
            except Exception as exc:
                send(("error", _error_info(exc), [], ""))
            continue
        # kind == "run"
        _, payload, t0, own = message  # own: this rank's input alone (Cluster.run_each), or None
        out = io.StringIO()
        tracer.begin(t0)
        if check_untouched is not None:
            check_untouched.begin()
        board.post(rank, RUNNING)
        try:
            fn, args, kwargs = _unpack_run(cloudpickle.loads, payload, own)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                result = fn(*args, **kwargs)
        except BaseException as exc:
            if check_untouched is not None:
                check_untouched()
            board.post(rank, DONE)
            send(("error", _error_info(exc), tracer.finish(), out.getvalue()))
            continue
        # The trace is taken before the guard compares it with what the backend did, and before the
        # result is pickled, which runs code the answer chose (a __reduce__) that could otherwise
        # rewrite the events after the comparison.
        events = tuple(tracer.finish())
        if check_untouched is not None:
            check_untouched(_traced_calls(events))
        board.post(rank, DONE)
        try:
            data = cloudpickle.dumps(result)
        except Exception as exc:
            exc = TypeError(f"rank {rank} returned a value that cannot be sent back to the notebook "
                            f"({type(exc).__name__}: {exc}). Return tensors, numbers, strings, "
                            "or lists/dicts of them.")
            send(("error", _error_info(exc), list(events), out.getvalue()))
            continue
        send(("ok", data, list(events), out.getvalue()))

    if dist.is_initialized():
        dist.destroy_process_group()


def _unpack_run(loads, payload: bytes, own: bytes | None) -> tuple:
    """(fn, args, kwargs) of a run, this rank's own input first in args when it has one."""
    fn, args, kwargs = loads(payload)
    return fn, (args if own is None else (loads(own), *args)), kwargs


def _signed_sender(conn, key: bytes):
    """`conn.send`, each message followed by its HMAC-SHA256 under `key` (the kernel's guard checks it,
    grading/guard.py `on_rank_channel`): a reply that code on the rank wrote into the channel itself,
    past the rank's guard and its check of the trace, carries no valid signature. The functions are
    taken now, before any notebook code runs here; the HMAC is one C call."""
    import _hashlib
    from multiprocessing.reduction import ForkingPickler

    from nanoparallel.grading.sealed import opaque
    dumps, digest, send_bytes = ForkingPickler.dumps, _hashlib.hmac_digest, conn.send_bytes

    def send(message) -> None:
        body = bytes(dumps(message))
        send_bytes(body + digest(key, body, "sha256"))
    return opaque(send)


def _traced_calls(events) -> list[tuple[str, int]]:
    """(op, group size) of every communication call in a run's finished trace, waited on or not."""
    return [(e.op, len(e.group)) for e in events if e.kind == "comm"]


def _join_group(dist, torch, rank, store_path, world_size, backend, timeout_s) -> None:
    import datetime
    if dist.is_initialized():
        dist.destroy_process_group()
    if store_path is None or rank >= world_size:
        return  # parked: a larger cluster shrunk to fewer ranks
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
