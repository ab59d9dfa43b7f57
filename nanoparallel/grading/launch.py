"""Run an exercise of a course notebook on the ranks torchrun started: your code, the notebook's checks.

    torchrun --nproc-per-node=4 -m nanoparallel.grading.launch course/01_collectives/01_collectives.ipynb --exercise ring_all_reduce
    torchrun --nproc-per-node=4 -m nanoparallel.grading.launch NOTEBOOK --exercise ring_all_reduce --bench
    python -m nanoparallel.grading.launch NOTEBOOK --exercise ring_all_reduce --world-size 4   # no torchrun: a local Cluster
    python -m nanoparallel.grading.launch NOTEBOOK --list                                      # what runs on ranks

Every rank loads the exercise (`nanoparallel.grading.notebook_exercise` says which cells and checks),
binds the notebook's ``cluster`` to `Cluster.from_env()` and runs the checks for its world size:
each check runs on every rank, on the same gathered results, so every rank reaches the same
verdict; rank 0 prints it in the notebook's words. Bad input is refused before any rank joins
the process group, so torchrun never waits for it.

Exit status: 0 every check passed; 1 a check failed, a cell raised or a run missed its deadline;
2 bad input (under torchrun, torchrun itself then exits with 1).
"""
from __future__ import annotations

import argparse
import linecache
import os
import sys
import time
import traceback

import torch

from nanoparallel.runtime import race
from nanoparallel.runtime.cluster import DEFAULT_TIMEOUT, Cluster
from nanoparallel.runtime.errors import ClusterError, RankError
from nanoparallel.grading.notebook_exercise import ExerciseError, Notebook
from nanoparallel.runtime.torchrun_cluster import in_torchrun
from nanoparallel.runtime.units import human_rate

BENCH_TIMEOUT = 300.0  # seconds per message size: 64 MiB on slow links, many repetitions
SPEAKER_GRACE = 5.0    # seconds a silent process waits before failing on bad input


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.list and not args.exercise:
        parser.error("give --exercise NAME (or --list to see the notebook's exercises)")
    torchrun = in_torchrun()
    rank = int(os.environ.get("RANK", "0")) if torchrun else 0
    world_size = int(os.environ["WORLD_SIZE"]) if torchrun else (args.world_size or 4)
    try:
        notebook = Notebook(args.notebook)
        if args.list:
            if rank == 0:
                for name in notebook.exercises:
                    print(f"{name}: {_verdict(notebook, name)}")
            return 0
        if torchrun and args.world_size not in (None, world_size):
            raise ExerciseError(f"--world-size {args.world_size}, but torchrun started {world_size} processes: "
                                "under torchrun the world size is torchrun's; leave out --world-size.")
        exercise = notebook.exercise(args.exercise)
        if args.bench:
            function = exercise.all_reduce_function()
            sizes = [race.parse_size(s) for s in args.sizes.split(",")] if args.sizes else race.SIZES
        else:
            exercise.validate(world_size)
    except (ExerciseError, ValueError) as err:
        # Every machine reads its own copy of the notebook: its first process speaks for it. The
        # others wait a moment before failing: torchrun stops every process once one exits, which
        # on a busy machine came before the speaker had said anything.
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            print(f"error: {err}", file=sys.stderr, flush=True)
        else:
            time.sleep(SPEAKER_GRACE)
        return 2

    plan = exercise.plan(world_size, checks=not args.bench)
    linecache.cache.update({name: (len(src), None, src.splitlines(True), name)
                            for name, src in exercise.sources().items()})
    say = print if rank == 0 else (lambda *a, **k: None)
    timeout = args.timeout or (BENCH_TIMEOUT if args.bench else DEFAULT_TIMEOUT)
    try:
        cluster = Cluster.from_env(world_size, timeout=timeout)
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    with cluster:
        where = f"{'torchrun' if torchrun else 'a local cluster'}, {cluster.backend}"
        namespace = {"__name__": "<notebook>", "cluster": cluster}  # no module: functions travel by value
        if args.bench:
            say(f"{exercise.name} ({notebook.path.name}): your {function} against the backend's all_reduce "
                f"on {world_size} ranks ({where})")
            # CUDA tensors under torchrun, so that the backend's all_reduce is NCCL's; the local
            # Cluster's ranks are gloo's.
            device = "cuda" if torchrun and torch.cuda.is_available() else "cpu"
            return _bench(plan, namespace, function, cluster, sizes, device, say)
        say(f"{exercise.name} ({notebook.path.name}) on {world_size} ranks ({where})")
        return _check(plan, namespace, say)


def _check(plan, namespace: dict, say) -> int:
    passed = failed = 0
    for step in plan.steps:
        try:
            exec(step.code, namespace)
        except Exception as exc:
            if step.kind == "setup":
                return _setup_failed(step, exc, say)
            failed += 1
            say(f"FAIL {step.label}\n{_as_notebook_shows(exc)}")
        else:
            if step.kind == "check":
                passed += 1
                say(f"PASS {step.label}")
    not_run = f" Not run here: {'; '.join(plan.left_out)}." if plan.left_out else ""
    say(f"{passed} passed, {failed} failed.{not_run}")
    return 1 if failed else 0


def _bench(plan, namespace: dict, function: str, cluster, sizes: list[int], device: str, say) -> int:
    for step in plan.steps:
        try:
            exec(step.code, namespace)
        except Exception as exc:
            return _setup_failed(step, exc, say)
    all_reduce, builtin = namespace[function], ("nccl" if device == "cuda" else "gloo")
    P = cluster.world_size
    say("float32; median over repetitions of the slowest rank; algbw = bytes / time, busbw = algbw * 2(P-1)/P")
    say(f"{'message':>8}  {'yours':>10}  {builtin:>10}  {'yours/' + builtin:>10}  {'algbw yours':>11}  "
        f"{'algbw ' + builtin:>11}  {'busbw yours':>11}  {'busbw ' + builtin:>11}")
    for nbytes in sizes:
        try:
            per_rank = cluster.run(race.time_both, all_reduce, nbytes, race.repeats_for(nbytes), device=device)
        except RankError as err:
            say(f"FAIL {race.fmt_bytes(nbytes)}\n{_as_notebook_shows(err)}")
            return 1
        yours, theirs = race.slowest_median(per_rank, "yours"), race.slowest_median(per_rank, "builtin")
        say(f"{race.fmt_bytes(nbytes):>8}  {yours * 1e3:7.3f} ms  {theirs * 1e3:7.3f} ms  {yours / theirs:9.2f}x  "
            f"{human_rate(race.algbw(nbytes, yours)):>11}  {human_rate(race.algbw(nbytes, theirs)):>11}  "
            f"{human_rate(race.busbw(nbytes, yours, P)):>11}  {human_rate(race.busbw(nbytes, theirs, P)):>11}")
    return 0


def _verdict(notebook: Notebook, name: str) -> str:
    try:
        return notebook.exercise(name).verdict()
    except ExerciseError as err:  # one unreadable cell spoils its exercise, not the list
        return f"cannot be read: {err}"


def _setup_failed(step, exc: BaseException, say) -> int:
    say(f"ERROR in cell {step.label}, which the checks need:\n{_traceback(exc)}")
    return 1


def _as_notebook_shows(exc: BaseException) -> str:
    """The last line of the notebook's traceback: the exception and its message."""
    return f"{type(exc).__name__}: {exc}"


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nanoparallel.grading.launch",
        description="Run the checks of one exercise of a course notebook on torchrun's ranks "
                    "(or, without torchrun, on a local cluster of --world-size ranks).")
    parser.add_argument("notebook", help="a course notebook, e.g. course/01_collectives/01_collectives.ipynb")
    parser.add_argument("--exercise", help="the exercise's grade_id, e.g. ring_all_reduce (see --list)")
    parser.add_argument("--list", action="store_true", help="list the notebook's exercises and where they run")
    parser.add_argument("--bench", action="store_true",
                        help="race your all-reduce against the backend's (NCCL on GPUs, gloo on CPUs)")
    parser.add_argument("--sizes", help="--bench message sizes, e.g. 1KiB,1MiB,64MiB (default: 1 KiB to 64 MiB)")
    parser.add_argument("--world-size", type=int, help="ranks of the local cluster, without torchrun (default 4)")
    parser.add_argument("--timeout", type=float,
                        help=f"seconds a run may take (default: {DEFAULT_TIMEOUT:g}, the notebook's; "
                             f"{BENCH_TIMEOUT:g} with --bench)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
