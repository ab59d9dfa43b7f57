"""Signal handlers under the witness.

Python runs a signal handler between any two bytecodes of the main thread, and hands it the frame
that was running. From there `f_back` and `f_locals` lead, with no audit event, to every frame
below: a rank's worker loop (what it signs its replies with), the checks' values, the kernel's
engine. So no handler but the ones the process had when its witness started may be installed.

Every Python-level handler is installed through `_signal.signal` (`signal.signal` calls it), on
the `_signal` module or on a fresh instance of it, which `_imp.create_builtin` makes with no audit
event. Both are wrapped here. Installing a handler the process did not have, or making a second
`_signal`, raises `EVENT` first, before anything is installed: the kernel's guard then destroys its
key (and the gate in front of it, `_gate.c`, closes at its next event), a rank's guard stops the
rank. Each side also compares every handler with what it had (`unchanged`), which catches what
no wrapper saw.
"""
from __future__ import annotations

import _imp
import _signal
import signal
import sys
from importlib.machinery import ModuleSpec

from nanoparallel.grading.sealed import opaque

EVENT = "nanoparallel.signal_handler"


def snapshot() -> dict:
    """Each signal's handler now, as `_signal` holds it (SIG_DFL and SIG_IGN as its own ints)."""
    return {int(number): _signal.getsignal(number) for number in signal.valid_signals()}


def interrupt_handlers(before: dict) -> tuple:
    """SIGINT's allowed handlers: the process's own in `before`, and the two ipykernel swaps in
    around each request (the C gate checks the same, `_gate.c`)."""
    return before.get(int(signal.SIGINT)), _signal.default_int_handler, _signal.SIG_IGN


def rules(before: dict):
    """(allowed(number, handler), first_changed()) for the handlers in `before`: a handler is
    allowed if it is the same object the process had (never ==, which would run the notebook's
    __eq__), or for SIGINT one of `interrupt_handlers`. Everything they read is taken now, into
    their closures: a module attribute could be rebound by then."""
    interrupt, on_interrupt, getsignal = int(signal.SIGINT), interrupt_handlers(before), _signal.getsignal

    def allowed(number, handler) -> bool:
        if type(number) is not int:
            return False
        if handler is before.get(number):
            return True
        return number == interrupt and any(handler is allowed_one for allowed_one in on_interrupt)

    def first_changed() -> int | None:
        for number in before:
            if not allowed(number, getsignal(number)):
                return number
        return None
    return allowed, first_changed


def watch(allowed) -> list:
    """Wrap `_signal.signal` and `_imp.create_builtin` (see the module docstring) with `allowed`
    from `rules`; return (namespace, key, wrapper) for the guard's after-checks."""
    audit, install, create = sys.audit, _signal.signal, _imp.create_builtin

    def signal_(signalnum, handler):
        # Exact types only: a notebook's number could compare equal to SIGINT here (__eq__) and
        # name another signal to _signal (__index__).
        if type(signalnum) is not int or not allowed(signalnum, handler):
            audit(EVENT, f"a handler for signal {signalnum}" if type(signalnum) is int else "a handler for a signal")
        return install(signalnum, handler)

    def create_builtin(spec):
        # What create_builtin reads is the spec's name: anything but a plain spec with a plain
        # name could say one name here and another there.
        name = vars(spec).get("name") if type(spec) is ModuleSpec else None
        if type(name) is not str or name == "_signal":
            audit(EVENT, "a second _signal module, whose signal() installs handlers past the wrapped one")
        return create(spec)

    wrapped = []
    for module, key, fn in ((_signal, "signal", signal_), (_imp, "create_builtin", create_builtin)):
        guarded = opaque(fn)  # held in C: no __closure__ leads to the originals
        setattr(module, key, guarded)
        wrapped.append((vars(module), key, guarded))
    return wrapped
