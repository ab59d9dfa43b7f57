"""The engine's old module names, from before it was laid out in runtime/, grading/ and lessons/.

A notebook or script written against them keeps working: `import nanoparallel.models` gives the
module that now lives at `nanoparallel.lessons.models` (the same module object, not a copy) and
warns once, naming the new place; `python -m nanoparallel.launch` still runs torchrun's launcher.
A FutureWarning rather than an ImportError, because an instructor may grade a notebook that a
student started before the move: the old import must not cost the student their marks.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old name (after "nanoparallel.") -> new name (after "nanoparallel.")
MOVED = {
    "cluster": "runtime.cluster",
    "worker": "runtime.worker",
    "board": "runtime.board",
    "context": "runtime.context",
    "errors": "runtime.errors",
    "race": "runtime.race",
    "tracing": "runtime.tracing",
    "tracing_functional": "runtime.tracing_functional",
    "trace": "runtime.trace",
    "memory": "runtime.memory",
    "torchrun_cluster": "runtime.torchrun_cluster",
    "viz.timeline": "runtime.timeline",
    "viz.units": "runtime.units",
    "guard": "grading.guard",
    "rank_guard": "grading.rank_guard",
    "provenance": "grading.provenance",
    "comm_witness": "grading.comm_witness",
    "check_code": "grading.check_code",
    "notebook_exercise": "grading.notebook_exercise",
    "launch": "grading.launch",
    "checks": "grading.checks",
    "models": "lessons.models",
    "reference": "lessons.reference",
    "cost": "lessons.cost",
    "tensor_parallel": "lessons.tensor_parallel",
    "moe": "lessons.moe",
    "planner": "lessons.planner",
    "schedule": "lessons.pipeline.schedule",
    "pipeline": "lessons.pipeline.stage",
    "interleaved": "lessons.pipeline.interleaved",
    "torch_schedules": "lessons.pipeline.torch_schedules",
    "viz.bandwidth": "lessons.viz.bandwidth",
    "viz.collective_costs": "lessons.viz.collective_costs",
    "viz.ddp_timeline": "lessons.viz.ddp_timeline",
    "viz.memory_calculator": "lessons.viz.memory_calculator",
    "viz.moe": "lessons.viz.moe",
    "viz.pipeline": "lessons.viz.pipeline",
    "viz.planner": "lessons.viz.planner",
    "viz.ring": "lessons.viz.ring",
    "viz.tensor_parallel": "lessons.viz.tensor_parallel",
    "viz.widgets": "lessons.viz.widgets",
    "viz.zero": "lessons.viz.zero",
    "viz": "lessons.viz",
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `nanoparallel.<old>` and loads it as the module at its new name."""

    def __init__(self):
        self._specs = {}

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.removeprefix("nanoparallel.")
        if fullname == old or old not in MOVED:
            return None
        new = importlib.util.find_spec(f"nanoparallel.{MOVED[old]}")
        return importlib.util.spec_from_loader(fullname, self, origin=new.origin,
                                               is_package=new.submodule_search_locations is not None)

    def create_module(self, spec):
        new = f"nanoparallel.{MOVED[spec.name.removeprefix('nanoparallel.')]}"
        warnings.warn(f"{spec.name} is now {new}: import it from there (the old name still works, "
                      "for notebooks written before the engine's re-layout; see docs/architecture.md)",
                      FutureWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__  # the import system sets the old name's: undone below
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs.pop(module.__spec__.name)  # executed under its new name: keep that spec

    def get_code(self, fullname):
        """For `python -m nanoparallel.<old>` (runpy): the new module's code."""
        new = f"nanoparallel.{MOVED[fullname.removeprefix('nanoparallel.')]}"
        return importlib.util.find_spec(new).loader.get_code(new)


def install() -> None:
    if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldNames())
