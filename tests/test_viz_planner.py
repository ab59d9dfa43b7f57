"""Notebook 07's planner pictures and widget, driven headless with stand-in formulas."""
import math

import pytest

from nanoparallel.lessons.planner import NEOX_20B, NEOX_CLUSTER, NEOX_PLAN, Ranked, candidate_plans, search
from nanoparallel.lessons.viz.planner import plot_feasible, plot_plans, planner_widget

pytestmark = pytest.mark.usefixtures("quiet_pictures")


def memory(model, plan):
    states = 16 * model.params / (plan.tp * plan.pp) / (plan.dp if plan.zero >= 1 else 1)
    act = 2e9 * plan.micro_batch / plan.tp * (1 if plan.recompute else 10)
    return {"parameters": states / 8, "gradients": states / 8, "optimizer": states * 6 / 8, "activations": act}


def time(model, cluster, plan):
    return {"compute": 30.0, "bubble": (plan.pp - 1) / plan.n_micro * 30, "tp": 0.1 * plan.tp if plan.tp <= 8 else 50.0,
            "pp": 0.0, "dp": 1.0}


def segments(fig, part):
    return [p for ax in fig.axes for p in ax.patches if (p.get_gid() or "").startswith(part + "/")]


def test_plans_are_stacked_bars_of_each_part():
    ranked = [Ranked(NEOX_PLAN, memory(NEOX_20B, NEOX_PLAN), time(NEOX_20B, NEOX_CLUSTER, NEOX_PLAN))]
    fig = plot_plans(ranked, 40e9)
    bar = segments(fig, "activations")[0]
    assert math.isclose(bar.get_height(), memory(NEOX_20B, NEOX_PLAN)["activations"] / 1e9)
    assert len(segments(fig, "bubble")) == 1 and len(fig.axes) == 2


def test_feasible_map_holds_the_best_time_per_tp_and_pp():
    candidates = candidate_plans(NEOX_20B, NEOX_CLUSTER, 1536)
    ranked = search(NEOX_20B, NEOX_CLUSTER, 1536, memory, time)
    fig = plot_feasible(ranked, candidates)
    tps, pps = sorted({p.tp for p in candidates}), sorted({p.pp for p in candidates})
    best = min(r.seconds for r in ranked if (r.plan.tp, r.plan.pp) == (2, 4))
    assert fig.grid[tps.index(2), pps.index(4)] == pytest.approx(best)
    assert fig.grid.shape == (len(tps), len(pps))


def test_widget_redraws_for_each_control_and_shows_failures():
    box = planner_widget(memory, time)
    assert box.figure is not None and box.heatmap is not None and "plans fit" in box.text.value
    first = box.figure
    assert box.ranked and all(r.bytes <= NEOX_CLUSTER.memory for r in box.ranked)
    box.batch.value = 768
    assert box.figure is not first
    box.model.value = "GPT-3 175B"
    assert box.error is None and box.figure is not None
    broken = planner_widget(lambda m, p: {}["missing"], time)
    assert broken.figure is None and "KeyError" in broken.text.value


def test_no_plan_that_fits_is_said_not_drawn():
    fig = plot_plans([], 40e9)
    assert any("no plan fits" in t.get_text() for ax in fig.axes for t in ax.texts)
