"""Which audit events (PEP 578) are a rank reaching another process past torch.distributed.

Pure: `channel(event, args)` names the channel or returns None. The ranks' guard (`rank_guard`)
stops a rank whose notebook code raises one, because data that travels that way never shows in
the trace, and filler sent on traced calls would then make the checks' trace assertions pass.

The rule is about places, not patterns: two ranks can only meet where both can write or signal.
In the grading sandbox those are the shared folders (/tmp, /dev/shm, the working folder, home),
other processes (/proc/<pid>, signals, sockets, subprocesses), shared memory, file locks and
databases. Reading what the ranks cannot write (the installed libraries, /proc/self, /etc) is
no channel and stays allowed; so does whatever Python does while it imports a module.
What Python raises no audit event for is out of reach of this rule and listed in
docs/grading.md ("What does not hold yet").
"""
from __future__ import annotations

import os

# Events that change the file system, start or signal processes, or open a way to share memory.
_ALWAYS = frozenset({
    "os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.symlink", "os.link", "os.utime",
    "os.truncate", "os.chmod", "os.chown", "os.chflags", "os.setxattr", "os.removexattr",
    "os.lockf", "os.kill", "os.killpg", "signal.pthread_kill", "mmap.__new__",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "fcntl.flock", "fcntl.lockf", "fcntl.fcntl", "fcntl.ioctl",
    "sqlite3.connect", "shutil.copyfile", "shutil.copytree", "shutil.move", "shutil.rmtree",
})
# Socket events that look up names only (no traffic) stay allowed.
_SOCKET_LOOKUPS = frozenset({"socket.gethostname", "socket.gethostbyname", "socket.gethostbyaddr",
                             "socket.getaddrinfo", "socket.getnameinfo", "socket.getservbyname",
                             "socket.getservbyport", "socket.sethostname"})
# Every event `channel` may name, but sockets: the guard's first look on each audit event.
EVENTS = _ALWAYS | {"open", "os.listdir", "os.scandir"}
# Paths the ranks of one sandbox share and can write; /proc/<pid> of another process.
_SHARED_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def private_roots() -> tuple[str, ...]:
    """The working folder and home of this process, as they are now. The ranks' guard reads them
    once, when the rank starts: notebook code that later changed $HOME or the working folder would
    otherwise move the folders the rule refuses."""
    return os.path.realpath(os.getcwd()), os.path.realpath(os.path.expanduser("~"))


def channel(event: str, args: tuple, library_path=lambda path: False, private=None) -> str | None:
    """What `event` with `args` does that could carry data to another rank, or None.

    `library_path(path)` says whether a path belongs to the installed libraries (always readable);
    `private` is `private_roots()` as the rank started (read now when not given)."""
    private = private_roots() if private is None else private
    if event in _ALWAYS:
        return event
    if event.startswith("socket."):
        return None if event in _SOCKET_LOOKUPS else event
    if event == "open":
        path, mode = args[0], args[1] if len(args) > 1 else None
        if _writing(mode):
            return f"open({_shown(path)}) for writing"
        return None if _readable(path, library_path, private) else f"open({_shown(path)})"
    if event in ("os.listdir", "os.scandir"):
        path = args[0] if args and args[0] is not None else "."
        return None if _readable(path, library_path, private) else f"{event}({_shown(path)})"
    return None


def _shown(path) -> str:
    # Exact types only, here and in _readable: a notebook's object would run its own __repr__ or
    # __class__ inside the guard's hook, while the hook hears nothing.
    return repr(path) if type(path) in (str, bytes, int) else "an object"


def _writing(mode) -> bool:
    if type(mode) is str:
        return any(m in mode for m in "wax+")
    if type(mode) is int:
        return bool(mode & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
    return False


def _readable(path, library_path, private) -> bool:
    """A path whose contents no other rank can have written: not a file descriptor, not a shared
    folder, the working folder or home, not another process's /proc entry."""
    if type(path) is bytes:
        path = os.fsdecode(path)
    if type(path) is not str:
        return False  # a file descriptor: which file it is cannot be told from here
    if library_path(path):
        return True
    real = os.path.realpath(path)
    if any(real == root or real.startswith(root.rstrip("/") + "/") for root in _SHARED_ROOTS + tuple(private)):
        return False
    if real.startswith("/proc/"):
        first = real.split("/")[2]
        return not first.isdigit() or first == str(os.getpid())
    return True
