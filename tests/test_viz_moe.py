"""Notebook 06's pictures, driven headless: the routing map, its capacity-factor explorer, and
the expert-load curves. Routings are written out by hand, no processes."""
import pytest
import torch

from nanoparallel.lessons.viz.moe import expert_loads, plot_expert_load, plot_routing, routing_explorer

pytestmark = pytest.mark.usefixtures("quiet_pictures")
EXPERTS = torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0], [3, 0]])
WEIGHTS = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.9, 0.1], [0.5, 0.5], [0.8, 0.2]])


def keep_first(experts, n_experts, capacity):
    keep, used = torch.zeros_like(experts, dtype=torch.bool), [0] * n_experts
    for j in range(experts.shape[1]):
        for t in range(experts.shape[0]):
            e = int(experts[t, j])
            keep[t, j], used[e] = used[e] < capacity, used[e] + (used[e] < capacity)
    return keep


def gids(fig, name):
    return [a for ax in fig.axes for a in (*ax.patches, *ax.lines) if a.get_gid() == name]


def test_loads_count_all_or_only_kept_assignments():
    keep = keep_first(EXPERTS, 4, 2)
    assert expert_loads(EXPERTS, 4) == [5, 3, 1, 1]
    assert expert_loads(EXPERTS, 4, keep) == [2, 2, 1, 1]


def test_routing_map_has_a_cell_per_kept_and_a_cross_per_dropped_assignment():
    keep = keep_first(EXPERTS, 4, 2)
    fig = plot_routing(WEIGHTS, EXPERTS, keep, 4, capacity=2)
    assert len(gids(fig, "kept")) == int(keep.sum()) == 6
    assert len(gids(fig, "dropped")) == 4
    capacity_line = gids(fig, "capacity")[0]
    assert list(capacity_line.get_ydata()) == [2, 2]
    assert "dropped 4 of 10" in fig.axes[1].get_title()
    # Each assignment says which of its token's choices it was, kept or dropped.
    choices = [(t.get_text(), t.get_position()) for t in fig.axes[0].texts if t.get_gid() == "choice"]
    assert sorted(text for text, _ in choices) == ["1"] * 5 + ["2"] * 5
    assert ("2", (0.88, 3.5)) in choices  # token 3's second choice, expert 0
    one_choice = plot_routing(WEIGHTS[:, :1], EXPERTS[:, :1], keep[:, :1], 4, capacity=2)
    assert not [t for t in one_choice.axes[0].texts if t.get_gid() == "choice"]


def test_explorer_redraws_for_each_capacity_factor_and_shows_failures():
    calls = []

    def route(factor):
        calls.append(factor)
        capacity = int(factor * 10 / 4 + 0.999)
        return WEIGHTS, EXPERTS, keep_first(EXPERTS, 4, capacity), 4, capacity

    box = routing_explorer(route)
    first = box.figure
    assert calls == [1.0] and "2 of 10 assignments dropped" in box.text.value
    box.capacity_factor.value = 2.0
    assert calls[-1] == 2.0 and box.figure is not first and "0 of 10" in box.text.value

    box = routing_explorer(lambda factor: 1 / 0)
    assert box.figure is None and box.error is not None and "ZeroDivisionError" in box.text.value


def test_expert_load_curves_one_line_per_expert_per_run():
    runs = {"no aux": [[4, 0], [3, 1], [4, 0]], "aux": [[3, 1], [2, 2], [2, 2]]}
    fig = plot_expert_load(runs, even=2)
    assert len(fig.axes) == 2
    line = gids(fig, "aux/expert1")[0]
    assert list(line.get_ydata()) == [1, 2, 2]
    assert len(gids(fig, "no aux/expert0")) == 1
