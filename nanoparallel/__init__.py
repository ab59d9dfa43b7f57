"""nanoparallel: the engine behind the course on parallel training.

`Cluster` runs real torch.distributed code on persistent CPU ranks; every run comes back
with a `Trace` of its communication. Around it: memory accounting (`memory`), tiny models and
single-process references (`models`), an alpha-beta cost model (`cost`), checks for graded
cells (`checks`) and pictures and widgets (`viz`).
"""
from nanoparallel.cluster import Cluster, RunResult
from nanoparallel.context import region
from nanoparallel.errors import ClusterError, DeadlockError, RankError
from nanoparallel.trace import Trace, TraceEvent

__all__ = ["Cluster", "RunResult", "region", "ClusterError", "DeadlockError", "RankError",
           "Trace", "TraceEvent"]
