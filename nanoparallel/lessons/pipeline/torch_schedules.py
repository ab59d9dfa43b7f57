"""torch's own pipeline schedules (``torch.distributed.pipelining``) seen as course schedules.

    ops = torch_schedule("1F1B", p=4, m=8)    # [[Op("F", 0), ...], ...] or raises TorchScheduleUnavailable

torch lists a schedule's actions without a process group only through a private helper
(``torch.distributed.pipelining._schedule_visualizer.get_schedule_ops``, torch 2.6+). Private
means it may move in any release, so every failure to reach it becomes
`TorchScheduleUnavailable`, with the reason, and a notebook prints that instead of breaking.
"""
from __future__ import annotations

from nanoparallel.lessons.pipeline.schedule import Op

# torch's computation types -> ours. torch's "B" is a full backward (our BW), its "I" the
# input-gradient backward (our B).
_KINDS = {"F": "F", "B": "BW", "I": "B", "W": "W"}


class TorchScheduleUnavailable(RuntimeError):
    """This torch cannot list its schedules' ops (the private helper moved or failed)."""


def torch_schedule(name: str, p: int, m: int) -> list[list[Op]]:
    """The compute ops of torch's schedule ``name`` ("GPipe", "1F1B", ...) for p ranks, m micro-batches.

    Only single-stage-per-rank schedules map onto the course's one-stage-per-rank ops.
    Communication and gradient-reduction actions are left out.
    """
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
        actions = get_schedule_ops(name, p, m)
    except Exception as exc:  # ImportError, a changed signature, a refused (p, m): all "unavailable"
        raise TorchScheduleUnavailable(f"torch cannot list the ops of {name!r} here "
                                       f"({type(exc).__name__}: {exc})") from None
    ops = []
    for row in actions:
        stage = []
        for action in row:
            kind = getattr(getattr(action, "computation_type", None), "value", None)
            if kind in _KINDS and action.microbatch_index is not None:
                stage.append(Op(_KINDS[kind], int(action.microbatch_index)))
        ops.append(stage)
    return ops
