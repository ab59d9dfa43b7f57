"""nanoparallel: the engine behind the course on parallel training.

`Cluster` runs real torch.distributed code on persistent CPU ranks; every run comes back with a
`Trace` of its communication. The package holds three concerns, one folder each
(docs/architecture.md draws them):

- `runtime/`: what a learner's code runs on (the cluster and its ranks, tracing, memory
  accounting, torchrun);
- `lessons/`: what each lesson builds on (models and single-process references, the cost model,
  pipeline schedules, tensor parallelism, MoE, the 3D planner) and their pictures (`lessons.viz`);
- `grading/`: the checks a notebook's graded cells call and the witness behind the autograder,
  which only instructors and CI touch.
"""
from nanoparallel import _old_names
from nanoparallel.runtime.cluster import Cluster, RunResult
from nanoparallel.runtime.context import region
from nanoparallel.runtime.errors import ClusterError, DeadlockError, RankError
from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.runtime import torchrun_cluster  # noqa: F401  (Cluster.from_env's torchrun side)

_old_names.install()  # the module names from before the re-layout keep working, with a warning

__all__ = ["Cluster", "RunResult", "region", "ClusterError", "DeadlockError", "RankError",
           "Trace", "TraceEvent"]
