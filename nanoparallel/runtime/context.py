"""What code running on a rank can ask of the engine: the current tracer, and compute regions."""
from __future__ import annotations

import time
from contextlib import contextmanager

_tracer = None  # set once per worker process; None in the notebook's own process


def set_current_tracer(tracer) -> None:
    global _tracer
    _tracer = tracer


def current_tracer():
    return _tracer


@contextmanager
def region(name: str, device_time: float = 0.0):
    """Mark a block of compute (e.g. ``"backward"``) so it shows in the run's trace timeline.

    ``device_time`` (seconds) makes the block last at least that long, by sleeping after the
    real work. Four ranks on two CPU cores share the processor, so real compute blurs a
    schedule; an accelerator would run each rank's op on its own device. The sleep stands in
    for that device time without burning CPU, so timelines show the schedule's own shape.
    Outside a cluster the region records nothing, but still lasts ``device_time``.
    """
    if device_time < 0:
        raise ValueError(f"device_time is a duration in seconds, >= 0; got {device_time}")
    if _tracer is None:
        start = time.perf_counter()
        yield
        _occupy_until(start + device_time)
        return
    from nanoparallel.runtime.tracing import region as traced_region
    with traced_region(_tracer, name):
        start = time.perf_counter()  # after the region's own start: it never looks shorter
        yield
        _occupy_until(start + device_time)


def _occupy_until(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)
