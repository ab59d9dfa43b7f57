"""What the ranks' guard finds between runs (nanoparallel/grading/rank_guard.py): notebook code left
in a library's own container, where every later run on that rank would call it."""
from __future__ import annotations

import pytest
import torch

from nanoparallel import Cluster, RankError
from nanoparallel.grading import rank_guard
from nanoparallel.runtime.cluster import environment


# As a notebook's cells define them: code with no file behind it (a function of this file would
# have torch read its source line from the working folder, which the guard stops on its own).
CELL = '''
import copyreg
import weakref

import torch


def plain_linear():
    # what a check's own reference run on a rank computes
    torch.manual_seed(0)
    return torch.nn.Linear(2, 2)(torch.ones(1, 2)).detach()


def a_global_forward_hook():
    torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: out * 0 + 42)


def a_global_optimizer_hook():
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(lambda opt, args, kwargs: None)


def a_reducer_in_copyreg():
    copyreg.dispatch_table[torch.Size] = lambda size: (tuple, (tuple(size),))


KEPT = []


def a_finalizer_of_a_live_object():
    KEPT.append(torch.ones(1))
    weakref.finalize(KEPT[-1], lambda: None)


def hooks_of_its_own_module():
    # an honest answer's hooks live on its own modules and tensors, not in torch's registries
    layer = torch.nn.Linear(2, 2)
    layer.register_forward_hook(lambda module, args, out: out)
    layer.weight.register_hook(lambda grad: grad)
    layer(torch.ones(1, 2)).sum().backward()
'''
NOTEBOOK = {"__name__": "__main__"}
exec(compile(CELL, "<cell>", "exec"), NOTEBOOK)
plain_linear, hooks_of_its_own_module = NOTEBOOK["plain_linear"], NOTEBOOK["hooks_of_its_own_module"]
PLANTS = [NOTEBOOK[name] for name in ("a_global_forward_hook", "a_global_optimizer_hook", "a_reducer_in_copyreg",
                                      "a_finalizer_of_a_live_object")]


@pytest.fixture(scope="module")
def guarded():
    with environment({rank_guard.ENV: "1"}), Cluster(world_size=2, timeout=30) as cluster:
        yield cluster


def test_an_honest_runs_own_hooks_are_not_stopped(guarded):
    want = plain_linear()
    guarded.run(hooks_of_its_own_module)
    assert all(torch.equal(out, want) for out in guarded.run(plain_linear))


@pytest.mark.parametrize("plant", PLANTS, ids=lambda fn: fn.__name__)
def test_notebook_code_left_in_a_librarys_container_stops_the_rank(guarded, plant):
    want = plain_linear()
    with pytest.raises(RankError, match="stopped by the grader's guard") as stopped:
        guarded.run(plant)
    assert "kept inside a library's own" in str(stopped.value)
    # The stopped ranks are replaced: the next run computes what the course's checks expect.
    assert all(torch.equal(out, want) for out in guarded.run(plain_linear))
