"""An exercise of a notebook on torchrun's ranks (`nanoparallel.grading.launch`, `TorchrunCluster`).

The pure tests read notebooks (which cells and checks run, on how many ranks, what needs the
local cluster) and refuse bad input without a process. The `notebooks`-marked tests start
torchrun on CPUs (gloo): 2 and 4 processes on one machine and a two-"node" rendezvous on
127.0.0.1 pass with the solution; a wrong answer fails with the message the notebook's own
cluster gives; a script written against `cluster.run` gets every rank's values and trace."""
import ast
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nanoparallel import Cluster
from nanoparallel.grading import launch
from nanoparallel.runtime import race
from nanoparallel.grading.notebook_exercise import ExerciseError, Notebook
from nanoparallel.runtime.torchrun_cluster import in_torchrun
from ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_01 = ROOT / "solutions" / "01_collectives" / "01_collectives.ipynb"
COURSE_01 = ROOT / "course" / "01_collectives" / "01_collectives.ipynb"
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
TIMEOUT = 120  # seconds for one torchrun job; each takes 5-15 s on 2 cores


def solution(assignment: str) -> Path:
    return ROOT / "solutions" / assignment / f"{assignment}.ipynb"


def checks_of(plan) -> list[str]:
    return [s.label for s in plan.steps if s.kind == "check"]


# -- which cells and checks (pure) -----------------------------------------------------------

def test_an_exercise_runs_its_cells_and_the_checks_of_one_world_size():
    exercise = Notebook(SOLUTION_01).exercise("ring_all_reduce")
    assert exercise.world_sizes == [1, 2, 3, 4, 5, 8]
    plan = exercise.plan(4)
    cells = [s.label for s in plan.steps if s.kind == "setup"]
    assert cells == ["setup", "start_cluster", "helpers", "naive_all_reduce", "tree_broadcast",
                     "ring_reduce_scatter", "ring_all_gather", "ring_all_reduce", "ring_all_reduce_tests"]
    code = "\n".join(ast.unparse(node) for step in plan.steps for node in step.nodes)
    assert "Cluster(world_size=4)" not in code      # the caller binds `cluster`
    assert "def holdings" not in code               # a demonstration cell
    setup = exercise.sources()["01_collectives.ipynb:setup"]
    assert setup.startswith("\nimport math\n")     # %matplotlib blanked: line numbers stay the notebook's
    assert checks_of(plan) == ["_check_ring_all_reduce(4)", "_check_ring_all_reduce(4, shape=(2, 5))",
                               "_check_ring_all_reduce(4, shape=(37,), dtype=torch.int32, seed=4)",
                               "_check_ring_all_reduce(4, shape=(3, 3), dtype=torch.float64, seed=5)"]
    assert plan.left_out == ["6 checks on other world sizes (1, 2, 3, 5 or 8 ranks)"]
    assert checks_of(Notebook(SOLUTION_01).exercise("ring_all_reduce_tests").plan(2)) == [
        "_check_ring_all_reduce(2, shape=(9,), dtype=torch.float64, seed=1)"]
    assert Notebook(COURSE_01).exercise("ring_all_reduce").world_sizes == [4]  # the visible checks only


def test_the_world_size_is_what_the_check_resizes_the_cluster_to():
    assert Notebook(solution("07_3d_parallelism")).exercise("mesh").world_sizes == [8]  # math.prod((2, 2, 2))
    assert Notebook(solution("03_zero")).exercise("prefetch").world_sizes == [1, 2, 3, 4]  # resized in a helper


def test_demonstration_code_in_a_setup_cell_is_left_out():
    plan = Notebook(solution("02_data_parallel")).exercise("comm_bytes").plan(2)
    (server,) = [s for s in plan.steps if s.label == "parameter_server"]
    assert [type(n).__name__ for n in server.nodes] == ["ClassDef"]  # its demo run needs `model`, `batches`
    assert plan.left_out[-1].startswith("1 statement of the test cell that drive the notebook's cluster")


def test_what_needs_the_local_cluster_is_found_by_rule(tmp_path):
    halving = Notebook(SOLUTION_01).exercise("halving_doubling")
    assert halving.world_sizes == [1, 2, 4, 8]
    assert "_check_not_power_of_two(3) recovers from a DeadlockError" in halving.needs_local()[0]
    assert "_check_not_power_of_two(3), which needs the notebook's local cluster" in halving.plan(4).left_out
    pids = tiny_notebook(tmp_path, "def _check_pids(world_size):\n    cluster.resize(world_size)\n"
                                   "    assert len(cluster.pids) == world_size\n\n"
                                   "try:\n    _check_pids(2)\nfinally:\n    cluster.resize(2)\n")
    with pytest.raises(ExerciseError, match=r"needs the notebook's local cluster: _check_pids\(2\) uses cluster.pids"):
        Notebook(pids).exercise("answer").validate(2)


def tiny_notebook(tmp_path: Path, test_source: str) -> Path:
    """A course notebook with a setup cell, a solution cell `answer` and its test cell."""
    def cell(grade_id, source, **flags):
        meta = {"grade_id": grade_id, "locked": flags.get("locked", False), "solution": flags.get("solution", False),
                "grade": flags.get("grade", False), "points": 1 if flags.get("grade") else None}
        return {"cell_type": "code", "metadata": {"nbgrader": meta}, "source": source, "outputs": [],
                "execution_count": None}
    cells = [cell("setup", "from nanoparallel import Cluster\ncluster = Cluster(world_size=2)", locked=True),
             cell("answer", "def answer():\n    return 1", solution=True),
             cell("answer_tests", test_source, locked=True, grade=True)]
    path = tmp_path / "tiny.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


# -- bad input, refused before any process starts --------------------------------------------

@pytest.fixture
def no_torchrun(monkeypatch):
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("args, says", [
    (["missing.ipynb", "--exercise", "x"], "no such notebook"),
    ([str(ROOT / "pyproject.toml"), "--exercise", "x"], "is not a Jupyter notebook"),
    ([str(SOLUTION_01), "--exercise", "nope"], "has no exercise 'nope'. Its exercises: naive_all_reduce, tree_broadcast"),
    ([str(solution("00_welcome")), "--exercise", "training_time"], "is checked in one process"),
    ([str(solution("02_data_parallel")), "--exercise", "memory"], "needs the notebook's local cluster"),
    ([str(SOLUTION_01), "--exercise", "ring_all_reduce", "--world-size", "6"],
     "is checked on 1, 2, 3, 4, 5 or 8 ranks in this notebook, not on 6"),
    ([str(COURSE_01), "--exercise", "ring_all_reduce", "--world-size", "2"],
     "(course/ has the visible checks only; the solution notebook adds hidden ones)"),
    ([str(SOLUTION_01), "--exercise", "tree_broadcast", "--bench"],
     "can race: naive_all_reduce, ring_all_reduce and halving_doubling"),
    ([str(SOLUTION_01), "--exercise", "ring_all_reduce", "--bench", "--sizes", "3B"], "multiple of 4 bytes"),
])
def test_bad_input_says_what_to_do(args, says, no_torchrun, capsys):
    assert launch.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("error: ") == 1


def test_not_a_course_notebook(tmp_path):
    plain = tmp_path / "plain.ipynb"
    plain.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": "1"}]}))
    with pytest.raises(ExerciseError, match="not a course notebook"):
        Notebook(plain)


def test_torchrun_is_recognised_by_its_environment():
    assert in_torchrun({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert in_torchrun({"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"})
    assert not in_torchrun({"RANK": "0"}) and not in_torchrun({})


def test_bandwidths_follow_nccl_tests():
    assert race.busbw(1 << 20, 1.0, 4) == race.algbw(1 << 20, 1.0) * 1.5
    assert race.slowest_median([{"yours": [1, 5, 3]}, {"yours": [2, 4, 4]}], "yours") == 4  # max per rep: 2, 5, 4
    assert [race.parse_size(s) for s in ("4096", "64KiB", "1 MiB")] == [4096, 65536, 1 << 20]


# -- processes: torchrun on CPUs ---------------------------------------------------------------

def torchrun(*args, nproc: int, rendezvous: tuple[str, str] | None = None, cwd: Path = ROOT) -> subprocess.Popen:
    """One torchrun job: on its own (--standalone, a free port of its choosing), or one of two
    "nodes" meeting at rendezvous = (endpoint, id)."""
    how = ["--standalone"] if rendezvous is None else [
        "--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={rendezvous[0]}", f"--rdzv-id={rendezvous[1]}"]
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *how, f"--nproc-per-node={nproc}",
                             *map(str, args)], cwd=cwd, env=env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(job: subprocess.Popen) -> tuple[int, str, str]:
    """(exit status, stdout, stderr); a job past its time is stopped the way torchrun stops its
    ranks (SIGTERM), then killed."""
    try:
        out, err = job.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        job.send_signal(signal.SIGTERM)
        try:
            out, err = job.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)  # its ranks die with it (PR_SET_PDEATHSIG)
            out, err = job.communicate()
        pytest.fail(f"torchrun ran over {TIMEOUT} s:\n{out}\n{err}")
    return job.returncode, out, err


def launcher(notebook: Path, exercise: str, *more) -> list:
    return ["-m", "nanoparallel.grading.launch", notebook, "--exercise", exercise, *more]


def failures(out: str) -> str:
    """The FAIL lines and the messages under them."""
    return out[out.index("FAIL"):out.rindex("\n0 passed")]


@pytest.mark.notebooks
@pytest.mark.parametrize("nproc, passes", [(2, 1), (4, 4)])
def test_the_solution_passes_under_torchrun(nproc, passes):
    status, out, err = finish(torchrun(*launcher(SOLUTION_01, "ring_all_reduce"), nproc=nproc))
    assert status == 0, out + err
    assert out.startswith(f"ring_all_reduce (01_collectives.ipynb) on {nproc} ranks (torchrun, gloo)\n")
    assert out.count("PASS _check_ring_all_reduce(") == passes and "FAIL" not in out
    assert f"{passes} passed, 0 failed." in out


@pytest.mark.notebooks
def test_a_wrong_answer_fails_with_the_notebooks_message(tmp_path, no_torchrun):
    """The mutant that calls dist.all_reduce: its FAIL lines are the local cluster's, word for word."""
    import test_course
    nb = test_course.with_cells_replaced(test_course.solution_notebook("01_collectives"),
                                         test_course.load_mutants("01_collectives")["forgot_sum_flat_off_by_one_not_a_ring_builtin"])
    path = tmp_path / "01_collectives.ipynb"
    path.write_text(json.dumps(nb))
    status, out, err = finish(torchrun(*launcher(path, "ring_all_reduce"), nproc=4))
    assert status != 0, out + err
    local = subprocess.run([sys.executable, *map(str, launcher(path, "ring_all_reduce", "--world-size", "4"))],
                           cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert local.returncode == 1, local.stdout + local.stderr
    assert failures(out) == failures(local.stdout)
    assert ("FAIL _check_ring_all_reduce(4)\nAssertionError: rank 0 called all_reduce, which this exercise "
            "does not allow; use only irecv, isend, recv, send.") in out


@pytest.mark.notebooks
def test_two_nodes_rendezvous_on_one_address():
    rendezvous = (f"127.0.0.1:{free_port()}", uuid.uuid4().hex)
    jobs = [torchrun(*launcher(SOLUTION_01, "ring_all_reduce"), nproc=2, rendezvous=rendezvous) for _ in range(2)]
    results = [finish(job) for job in jobs]
    assert [status for status, _, _ in results] == [0, 0], results
    out = "".join(out for _, out, _ in results)
    assert out.count("on 4 ranks (torchrun, gloo)") == 1 and "4 passed, 0 failed." in out  # rank 0 speaks


@pytest.mark.notebooks
def test_bad_input_under_torchrun_is_said_once_and_fails():
    status, out, err = finish(torchrun(*launcher(COURSE_01, "ring_all_reduce"), nproc=2))
    assert status != 0 and "PASS" not in out
    assert err.count("error: ring_all_reduce (01_collectives.ipynb) is checked on 4 ranks in this notebook "
                     "(course/ has the visible checks only; the solution notebook adds hidden ones), not on 2.") == 1


@pytest.mark.notebooks
def test_from_env_without_torchrun_is_a_local_cluster(no_torchrun):
    with Cluster.from_env(world_size=1) as cluster:
        assert type(cluster) is Cluster and cluster.is_main
        assert cluster.run(lambda: 7) == [7]


SCRIPT = '''
import torch
import torch.distributed as dist
from nanoparallel import Cluster, RankError

def total():
    t = torch.full((256,), dist.get_rank() + 1.0)
    dist.all_reduce(t)
    return t[0].item()

def refuse():
    if dist.get_rank() == 1:
        raise ValueError("rank one refuses")

def stuck():
    if dist.get_rank() == 0:
        dist.recv(torch.zeros(1), src=1)

cluster = Cluster.from_env(timeout=3)
out = cluster.run(total)
print(f"rank {cluster.rank}: {type(cluster).__name__} values {list(out)} sent {out.trace.bytes_sent()}", flush=True)
try:
    cluster.run(refuse)
except RankError as err:
    print(f"rank {cluster.rank}: RankError from rank {err.rank}: {err.exception}", flush=True)
cluster.run(stuck)
print("never printed")
'''


@pytest.mark.notebooks
def test_a_script_runs_unchanged_under_torchrun(tmp_path):
    """cluster.run(fn): every rank gets every value and the trace; an exception on one rank is a
    RankError on all; a deadlock ends the job after `timeout`, naming what each rank waits for."""
    (tmp_path / "script.py").write_text(SCRIPT)
    status, out, err = finish(torchrun("script.py", nproc=2, cwd=tmp_path))
    for rank in (0, 1):
        # all_reduce of 1 KiB on 2 ranks: each sends 2(P-1)/P x 1024 bytes
        assert f"rank {rank}: TorchrunCluster values [3.0, 3.0] sent [1024, 1024]" in out
        assert f"rank {rank}: RankError from rank 1: rank one refuses" in out
    assert status != 0 and "never printed" not in out
    assert "rank 0 did not finish its run within 3 s: recv(src=1) pending" in err
