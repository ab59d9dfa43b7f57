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
import importlib

from nanoparallel import _old_names
from nanoparallel.runtime.cluster import in_torchrun

# The public names load on first use (PEP 562), so that what needs none of them does not import
# torch: the grader imports the witness's constants and digests from `grading/`, and torch would
# cost it 2-3 s of CPU per process (docs/testing.md). `from nanoparallel import Cluster` and
# `nanoparallel.Cluster` work as before.
_PUBLIC = {
    "Cluster": "nanoparallel.runtime.cluster", "RunResult": "nanoparallel.runtime.cluster",
    "region": "nanoparallel.runtime.context",
    "ClusterError": "nanoparallel.runtime.errors", "DeadlockError": "nanoparallel.runtime.errors",
    "RankError": "nanoparallel.runtime.errors",
    "Trace": "nanoparallel.runtime.trace", "TraceEvent": "nanoparallel.runtime.trace",
}

_old_names.install()  # the module names from before the re-layout keep working, with a warning

if in_torchrun():
    # Cluster.from_env returns TorchrunCluster, which registers itself as its module is imported:
    # on torchrun's ranks, import it with the package, as before, however the engine is imported.
    importlib.import_module("nanoparallel.runtime.torchrun_cluster")

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'nanoparallel' has no attribute {name!r}")
    importlib.import_module("nanoparallel.runtime.torchrun_cluster")  # Cluster.from_env's torchrun side
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
