"""What code running on a rank can ask of the engine: the current tracer, and compute regions."""
from __future__ import annotations

from contextlib import contextmanager

_tracer = None  # set once per worker process; None in the notebook's own process


def set_current_tracer(tracer) -> None:
    global _tracer
    _tracer = tracer


def current_tracer():
    return _tracer


@contextmanager
def region(name: str):
    """Mark a block of compute (e.g. ``"backward"``) so it shows in the run's trace timeline.

    Outside a cluster it does nothing, so the same code runs in a single process.
    """
    if _tracer is None:
        yield
        return
    from nanoparallel.tracing import region as traced_region
    with traced_region(_tracer, name):
        yield
