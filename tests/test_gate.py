"""The C gate in front of the kernel's witness (nanoparallel/grading/_gate.c).

A gate, once installed, stays for the life of its process: each test installs one in a fresh
Python process and reads what it printed."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nanoparallel.grading.guard import GATE_CLOSED

_SETUP = '''
import os, signal, sys, threading, time
from nanoparallel.grading import signal_handlers
from nanoparallel.grading import _gate
import _signal
seen, secrets, dropped, graveyard, handed = [], {"key": b"secret"}, [], [], []
read_end, write_end = os.pipe()

def hook(event, args):
    seen.append(event)
    if event == "nanoparallel.interrupt":
        raise KeyboardInterrupt
    if event == "nanoparallel.fails":
        raise ValueError("inside the hook")
    if event == "nanoparallel.drop":
        dropped.pop()  # the last reference to the notebook's object: its __del__ runs in here
    if event == "nanoparallel.bury":
        graveyard.append(dropped.pop())  # let go of the proper way: dropped after the hook returns
    if event == "nanoparallel.show":
        str(handed[0])  # a notebook object's method, run by the hook
    if event == "nanoparallel.own_frames":
        sys._getframe()  # the hook's own code may
    if event == "nanoparallel.slow":
        time.sleep(0.5)
        seen.append("slow done")

before = signal_handlers.snapshot()
_gate.install(hook, ("nanoparallel.", "sys."), "nanoparallel.resume", _signal.getsignal, tuple(before),
              tuple(before.values()), int(signal.SIGINT),
              (before[signal.SIGINT], _signal.default_int_handler, _signal.SIG_IGN), write_end, (secrets,),
              frozenset({id(hook.__code__)}), graveyard)
_gate.seal_frame_readers()
'''


def run(body: str) -> str:
    script = _SETUP + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_gate_lets_in_only_the_events_the_hook_reads():
    out = run('''
        sys.audit("nanoparallel.marker"); sys.audit("unheard.event"); sys.audit("sys._getframe")
        locals(); vars(); dir()  # outside the hook, a read of the calling frame is no event of the hook's
        sys.audit("nanoparallel.resume", None, "call"); sys.audit("nanoparallel.resume", None, "return")
        print(seen)
    ''')
    assert out.strip() == "['nanoparallel.marker', 'sys._getframe', 'nanoparallel.resume']"


def test_no_exception_leaves_the_hook_with_its_frames():
    out = run('''
        try:
            sys.audit("nanoparallel.interrupt")
        except KeyboardInterrupt as interrupt:
            # raised afresh by the gate: its traceback starts in this frame, none of the hook's
            print("interrupted", interrupt.__traceback__.tb_next is None)
        sys.audit("nanoparallel.fails")
        print("swallowed")
        sys.addaudithook(lambda event, args: print("a second hook heard", event))
        sys.audit("nanoparallel.after")
        print(seen[-1])
    ''')
    assert out.split() == ["interrupted", "True", "swallowed", "nanoparallel.after"]


@pytest.mark.parametrize("install", ["signal.signal(signal.SIGUSR1, lambda number, frame: None)",
                                     "signal.signal(signal.SIGUSR1, print)",  # a C callable has no frame
                                     "_signal.signal(signal.SIGTERM, _signal.SIG_IGN)"])
def test_a_handler_the_process_did_not_have_closes_the_gate_for_good(install):
    out = run(f'''
        signal.signal(signal.SIGINT, signal.default_int_handler)  # ipykernel's swap is allowed
        sys.audit("nanoparallel.before")
        {install}
        sys.audit("nanoparallel.after")
        signal.signal(signal.SIGUSR1, signal.SIG_DFL); signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.audit("nanoparallel.restored")
        print(seen, secrets)
        print(os.read(read_end, 1000).decode().strip())
    ''')
    hooked, line = out.strip().splitlines()
    assert hooked == "['nanoparallel.before'] {}"  # the key cleared, the hook never called again
    assert line.startswith(GATE_CLOSED) and "signal handler" in line


def test_another_threads_event_waits_for_the_hook():
    out = run('''
        def beside():
            time.sleep(0.1)
            sys.audit("nanoparallel.from_a_thread")
        thread = threading.Thread(target=beside)
        thread.start()
        sys.audit("nanoparallel.slow")  # 0.5 s inside the hook, the thread's event raised meanwhile
        thread.join()
        print(seen)
    ''')
    assert out.strip() == "['nanoparallel.slow', 'slow done', 'nanoparallel.from_a_thread']"


def test_the_gate_installs_once():
    out = run('''
        try:
            _gate.install(hook, (), "x", _signal.getsignal, (), (), 2, (), write_end, (), frozenset(), [])
        except RuntimeError as refused:
            print(refused)
    ''')
    assert "already installed" in out


def test_code_the_hook_runs_without_meaning_to_cannot_reach_its_frames():
    out = run('''
        class Dies:
            def __del__(self):
                try:
                    frame = sys._getframe(1)  # below: the hook's frame, its closure, the key
                    print("read", "secrets" in frame.f_globals)
                except RuntimeError as refused:
                    print("refused")
        sys.audit("nanoparallel.own_frames")
        dropped.append(Dies())
        sys.audit("nanoparallel.drop")
        sys.audit("nanoparallel.after")
        print(seen[-1], secrets)
        print(os.read(read_end, 1000).decode().strip())
    ''')
    refused, hooked, line = out.strip().splitlines()
    assert refused == "refused" and hooked == "nanoparallel.drop {}"
    assert line.startswith(GATE_CLOSED) and "reached for frames" in line


@pytest.mark.parametrize("method", [
    "partial(eval, 'print(\"read\", sorted(locals()))')",  # eval and exec read the caller's frame
    "partial(stolen.extend, itertools.starmap(vars, [()]))",  # vars() with no object, from C
    "partial(stolen.extend, itertools.starmap(locals, [()]))",
])
def test_nothing_called_from_c_reads_the_hooks_own_frame(method):
    out = run(f'''
        import itertools
        from functools import partial
        stolen = []
        class Shown:
            __str__ = staticmethod({method})
        handed.append(Shown())
        sys.audit("nanoparallel.show")
        print(stolen, secrets)
        print(os.read(read_end, 1000).decode().strip())
    ''')
    hooked, line = out.strip().splitlines()
    assert hooked == "[] {}" and line.startswith(GATE_CLOSED)


def test_what_the_hook_lets_go_of_dies_after_it_returns():
    out = run('''
        class Dies:
            def __del__(self):
                frame = sys._getframe(1)  # outside the hook now: the frame that raised the event
                print("died below", frame.f_code.co_name)
        def raise_it():
            sys.audit("nanoparallel.bury")
        dropped.append(Dies())
        raise_it()
        print(secrets)
    ''')
    assert out.split() == ["died", "below", "raise_it", "{'key':", "b'secret'}"]
