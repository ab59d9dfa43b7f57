"""The sandbox a submission runs in (autograder/sandbox.py), tested on what runs inside it:
what it can read and write, the network, the environment, the limits, and what outlives it.
(The whole grading round trip through it: tests/test_integrity.py's hostile submissions.)"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from background import ROOT
from ports import free_port

sys.path.insert(0, str(ROOT / "autograder"))
import sandbox  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap is not installed")


@pytest.fixture
def box(tmp_path):
    made = sandbox.Sandbox(str(tmp_path / "private"), sandbox.check())
    yield made
    made.close()


def run_inside(box, code: str, env=None, timeout=60) -> dict:
    """Run Python `code` in the sandbox; it prints one JSON value, returned here."""
    argv = box.command([sys.executable, "-c", code], dict(os.environ, **(env or {})))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sees_the_engine_and_its_own_scratch_but_not_the_course(box, tmp_path):
    secret = tmp_path / "gradebook.db"
    secret.write_text("marks")
    seen = run_inside(box, f"""
import json, os
import nanoparallel, torch
def can(path):
    return os.path.exists(path)
def writes(path):
    try:
        open(path, "w").write("x")
        return True
    except OSError:
        return False
print(json.dumps({{"course": [can(p) for p in {[str(ROOT / d) for d in ("autograder", "solutions", "tests", "course")]!r}],
                  "secret": can({str(secret)!r}), "home": os.path.expanduser("~"), "cwd": os.getcwd(),
                  "cwd_files": os.listdir("."), "scratch": writes("answer.txt"),
                  "engine": writes(os.path.join(os.path.dirname(nanoparallel.__file__), "x.py")),
                  "usr": writes("/usr/x"), "path0": __import__("sys").path[0]}}))
""")
    assert seen["course"] == [False] * 4, "the sandbox sees the course folder"
    assert not seen["secret"], "the sandbox sees the grader's files"
    assert seen["cwd"] == box.scratch and seen["home"] == box.home and seen["cwd_files"] == []
    assert seen["scratch"] and not seen["engine"] and not seen["usr"]
    assert seen["path0"] != "", "the working folder is on sys.path"


def test_no_network_beyond_its_own_loopback(box):
    port = free_port()
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    try:
        seen = run_inside(box, f"""
import json, socket
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False
inner = socket.create_server(("127.0.0.1", 0))
print(json.dumps({{"host": reach({port}), "own": reach(inner.getsockname()[1])}}))
""")
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    assert not seen["host"], "the sandbox reached a server on the grading machine"
    assert seen["own"], "the ranks need the sandbox's own loopback"


def test_environment_says_nothing_of_grading(box):
    seen = run_inside(box, "import json, os; print(json.dumps(sorted(os.environ)))",
                      env={"NBGRADER_EXECUTION": "autograde", "JUPYTER_TOKEN": "t", "NANOPARALLEL_TIMEOUT": "30"})
    assert "NBGRADER_EXECUTION" not in seen and "JUPYTER_TOKEN" not in seen
    assert "NANOPARALLEL_TIMEOUT" in seen  # the course's own settings pass


def test_nothing_outlives_the_sandbox(box):
    marker = f"sandbox-orphan-{os.getpid()}"
    argv = box.command([sys.executable, "-c", f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{marker}"], start_new_session=True)
print("[]")
"""], dict(os.environ))
    subprocess.run(argv, capture_output=True, timeout=60, check=True)
    time.sleep(0.5)
    alive = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
             if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read()]
    assert not alive, f"a process started in the sandbox outlived it: {alive}"


def test_limits_hold(tmp_path):
    small = sandbox.Sandbox(str(tmp_path / "small"), sandbox.check(), memory=256 * 2**20, tasks=64)
    try:
        memory = subprocess.run(small.command([sys.executable, "-c", "block = b'x' * (512 * 2**20); print('allocated')"],
                                              dict(os.environ)), capture_output=True, text=True, timeout=60)
        threads = subprocess.run(small.command([sys.executable, "-c", """
import threading, time
started = 0
try:
    for _ in range(200):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started)
"""], dict(os.environ)), capture_output=True, text=True, timeout=60)
    finally:
        small.close()
    assert "allocated" not in memory.stdout, "the sandbox used more memory than its limit"
    if sandbox.cgroups_writable() or os.getuid() != 0:  # root is exempt from the per-process fallback
        assert threads.returncode == 0 and int(threads.stdout) < 64, f"started {threads.stdout.strip()} threads of 64 allowed"


def test_grading_without_a_sandbox_stops_and_says_how(tmp_path):
    root = tmp_path / "autograder"
    (root / "submitted" / "alice" / "00_welcome").mkdir(parents=True)
    env = dict(os.environ, PATH="/nonexistent")  # no system bwrap; the bundled one is hidden below
    code = ("import sys; sys.path.insert(0, %r); import sandbox; sandbox.bwrap_path = lambda: None; "
            "import grade; sys.exit(grade.main(['--root', %r]))" % (str(ROOT / "autograder"), str(root)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert "bubblewrap" in done.stderr and "--no-sandbox" in done.stderr and "apt-get install bubblewrap" in done.stderr


def test_a_package_the_kernel_imports_from_outside_the_sandbox_is_named_before_grading(tmp_path, monkeypatch):
    """torch under ~/.local (`pip install --user`) is hidden by the sandbox's private $HOME: every
    submission would score 0 with an ImportError. check() names it and what to do instead."""
    assert sandbox.hidden_packages() == []  # this environment: all of it is shown
    user_site = tmp_path / "home" / ".local" / "lib" / "site-packages"
    (user_site / "kernel_dependency").mkdir(parents=True)
    (user_site / "kernel_dependency" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(user_site))
    assert sandbox.hidden_packages(("kernel_dependency", "json", "nanoparallel")) == [f"kernel_dependency ({user_site})"]
    monkeypatch.setattr(sandbox, "KERNEL_PACKAGES", ("kernel_dependency",))
    with pytest.raises(sandbox.SandboxUnavailable, match=r"(?s)kernel_dependency \(.*pip install --user.*SANDBOX=off"):
        sandbox.check()


@pytest.fixture(scope="module")
def layered_python(tmp_path_factory):
    """A venv that takes torch and the rest from this environment's site-packages through a .pth
    file, as a machine whose torch lives in another environment is set up; the engine comes from
    the repository the same way. Returns its python."""
    import site
    import sysconfig
    folder = tmp_path_factory.mktemp("layered") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    inner = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    ours = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert os.path.basename(ours) == "site-packages" and ours in map(os.path.realpath, site.getsitepackages())
    with open(os.path.join(inner, "layered.pth"), "w") as f:
        f.write(f"# torch from another environment, and the course's engine\n{ours}\n{ROOT}\n")
    return python


def test_a_venv_that_takes_torch_from_another_environment_grades_as_this_one(layered_python, tmp_path):
    """The sandbox shows the package folders the environment's .pth files add (read-only), and the
    witness counts their code as the course's, not the notebook's: every honest submission was
    flagged on such a machine before."""
    code = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "autograder")!r})
import sandbox
box = sandbox.Sandbox({str(tmp_path / "private")!r}, sandbox.check())
inside = '''
import json, os, torch
import torch.nn.functional as F
from nanoparallel.grading import provenance
print(json.dumps({{"library": provenance.is_library_file(F.__file__), "softmax": provenance.is_library_file(F.softmax.__code__.co_filename),
                  "writes": os.access(os.path.dirname(torch.__file__), os.W_OK)}}))
'''
import subprocess
done = subprocess.run(box.command([sys.executable, "-c", inside], {{}}), capture_output=True, text=True)
box.close()
print(done.stdout.strip().splitlines()[-1] if done.returncode == 0 else json.dumps({{"error": done.stderr[-2000:]}}))
"""
    done = subprocess.run([layered_python, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in seen, f"torch did not import inside the sandbox of a layered venv:\n{seen.get('error')}"
    assert seen == {"library": True, "softmax": True, "writes": False}, seen
