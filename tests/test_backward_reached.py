"""What a check reads of where backward was when a rank communicated
(nanoparallel/grading/backward_reached.py): the group's count of operations when backward first
reached the watched parameters, from hooks the model does not carry."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from nanoparallel.grading.backward_reached import BackwardReached


def _two_layers():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def _steps(launch_from_hook: bool):
    """Two steps: the second layer's gradients all-reduced from its hook (during backward, before
    the first layer's) or after backward; then a step where the hooks are called by hand."""
    model = _two_layers()
    reached = BackwardReached(model[0].parameters())
    works = []
    if launch_from_hook:
        model[1].weight.register_post_accumulate_grad_hook(
            lambda p: works.append(dist.all_reduce(p.grad.clone(), async_op=True)))
    seen = []
    for _ in range(2):
        reached.begin_step()
        model(torch.ones(5, 3)).sum().backward()
        if not launch_from_hook:
            works.append(dist.all_reduce(model[1].weight.grad.clone(), async_op=True))
        for w in works:
            w.wait()
        seen.append(reached.ops_before())
    # Nothing the model carries holds the watch, and calling the accumulator by hand records nothing.
    hooks = [m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in model.modules()]
    hooks += [p._backward_hooks for p in model.parameters()]
    reached.begin_step()
    accumulator = model[0].weight.view_as(model[0].weight).grad_fn.next_functions[0][0]
    accumulator(torch.ones(4, 3))
    return seen, any(hooks), reached.ops_before()


@pytest.mark.parametrize("launch_from_hook,expected", [(True, 1), (False, 0)])
def test_counts_what_was_launched_before_backward_reached_the_layer(cluster, launch_from_hook, expected):
    cluster.resize(2)
    for seen, carried, by_hand in cluster.run(_steps, launch_from_hook):
        assert seen == [expected, expected]
        assert not carried
        assert by_hand is None


def test_no_backward_reads_none_and_non_leaves_are_refused(cluster):
    cluster.resize(2)

    def run():
        model = _two_layers()
        reached = BackwardReached(model.parameters())
        reached.begin_step()
        with pytest.raises(ValueError, match="leaf"):
            BackwardReached([model[0].weight * 2])
        return reached.ops_before()

    assert list(cluster.run(run)) == [None, None]


def test_reads_when_backward_reached_the_layer_and_nothing_before_a_backward(cluster):
    """The time lies between the step's start and its end: a check asks which works were still
    in flight then (02's bucketed DDP)."""
    import time
    cluster.resize(1)

    def run():
        model = _two_layers()
        reached = BackwardReached(model[0].parameters())
        reached.begin_step()
        before = reached.time_reached()
        start = time.perf_counter()
        model(torch.ones(5, 3)).sum().backward()
        return before, start, reached.time_reached(), time.perf_counter()

    before, start, when, end = cluster.run(run)[0]
    assert before is None
    assert start < when < end
