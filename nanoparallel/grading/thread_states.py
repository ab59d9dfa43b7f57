"""How many of the interpreter's threads are running no Python code: the threads the guard
cannot see any other way.

`sys._current_frames()` and `threading.enumerate()` miss a thread started with
`_thread.start_new_thread` on a C callable (`deque(starmap(...))`, a `functools.partial` of
`setattr`): it has no Python frame and no `threading` object, and Python 3.11 raises no audit
event when a thread starts. It still has a thread state, which the interpreter's C API lists.
"""
from __future__ import annotations

import ctypes


class ThreadStates:
    """Counts the interpreter's thread states through a handle of its own on the C API, so that
    nothing a notebook can reach (ctypes.pythonapi's shared function objects) takes part."""

    def __init__(self):
        api = ctypes.PyDLL(None)
        self._interpreter = api.PyInterpreterState_Get
        self._interpreter.restype = ctypes.c_void_p
        self._head = api.PyInterpreterState_ThreadHead
        self._head.restype, self._head.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        self._next = api.PyThreadState_Next
        self._next.restype, self._next.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

    def count(self) -> int:
        """Every thread state, with the GIL held (a new one is linked in before its thread runs)."""
        n, state = 0, self._head(self._interpreter())
        while state:
            n += 1
            state = self._next(state)
        return n
