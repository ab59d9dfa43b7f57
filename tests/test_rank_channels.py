"""Which audit events a guarded rank treats as a channel to another process
(nanoparallel/grading/rank_channels.py): pure rules, no process started."""
from __future__ import annotations

import os

import pytest

from nanoparallel.grading.rank_channels import channel, private_roots

LIBRARY = "/opt/python/lib/site-packages/"


def library(path) -> bool:
    return str(path).startswith(LIBRARY)


@pytest.mark.parametrize("event, args", [
    ("open", ("/tmp/x.pt", "wb", 0)),                      # writing, anywhere
    ("open", (LIBRARY + "torch/x.py", "a", 0)),
    ("open", ("/tmp/x.pt", "rb", 0)),                      # reading what another rank can write
    ("open", ("/dev/shm/segment", "r", 0)),
    ("open", ("relative.pt", "r", 0)),                     # the working folder
    ("open", ("/proc/1/environ", "r", 0)),                 # another process
    ("open", (5, "r", 0)),                                 # a file descriptor
    ("open", ("/tmp/x", None, os.O_WRONLY | os.O_CREAT)),  # os.open's flags
    ("os.listdir", ("/tmp",)), ("os.scandir", (None,)),
    ("os.mkdir", ("/tmp/bit", 0o777, -1)), ("os.rename", ("a", "b", -1, -1)), ("os.utime", ("a", None, None, -1)),
    ("socket.__new__", (None, 2, 2, 0)), ("socket.connect", (None, ("127.0.0.1", 1))),
    ("socket.sendto", (None, ("127.0.0.1", 1))), ("mmap.__new__", (-1, 4096, 1, 3, 0)),
    ("subprocess.Popen", ("sh", ["sh"], None, None)), ("os.kill", (1, 10)), ("fcntl.flock", (3, 2)),
    ("sqlite3.connect", ("/tmp/db",)),
])
def test_a_way_to_another_process_is_a_channel(event, args):
    assert channel(event, args, library)


@pytest.mark.parametrize("event, args", [
    ("open", (LIBRARY + "torch/x.py", "r", 0)),            # installed files: nobody writes them
    ("open", ("/etc/passwd", "r", 0)),
    ("open", (f"/proc/{os.getpid()}/status", "r", 0)),    # this process's own entries
    ("open", ("/proc/self/status", "r", 0)),
    ("os.listdir", (LIBRARY + "torch",)),
    ("socket.gethostname", ()), ("socket.getaddrinfo", ("localhost", 0, 0, 0, 0)),
    ("exec", (None,)), ("import", ("torch", None, [], [], [])),
])
def test_reading_what_no_rank_can_write_is_not(event, args):
    assert channel(event, args, library) is None


def test_home_and_the_working_folder_stay_refused_when_notebook_code_moves_them(tmp_path, monkeypatch):
    """The ranks' guard reads them once, as the rank starts: a rank whose notebook code then
    points $HOME or its working folder elsewhere still may not read the ones it started with."""
    home, work, elsewhere = (tmp_path / name for name in ("home", "work", "elsewhere"))
    for folder in (home, work, elsewhere):
        folder.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    started = private_roots()
    monkeypatch.setenv("HOME", str(elsewhere))
    monkeypatch.chdir(elsewhere)
    for path in (home / "answer.pt", work / "answer.pt"):
        assert channel("open", (str(path), "rb", 0), library, started), path
    assert private_roots() != started  # what reading them at each event would have refused instead
