"""Notebook 04's pictures: Gantt charts of simulated and measured schedules, and the schedule
explorer driven headless (set ``.value``). Schedules are written out by hand, no processes."""
import io

import pytest
from matplotlib.figure import Figure

from nanoparallel.lessons.pipeline.schedule import Timeline, parse_op, simulate
from nanoparallel.lessons.viz.pipeline import KIND_COLORS, plot_schedule, plot_schedules, schedule_explorer

pytestmark = pytest.mark.usefixtures("quiet_pictures")


def ops(text):
    return [parse_op(word) for word in text.split()]


def gpipe(p, m):
    return [ops(" ".join([f"F{i}" for i in range(m)] + [f"BW{i}" for i in range(m)]))] * p


def split(p, m):  # a valid B/W schedule: all forwards, then B and W in turn
    return [ops(" ".join([f"F{i}" for i in range(m)] + [f"B{i} W{i}" for i in range(m)]))] * p


def bars(fig, kind):
    return [patch for ax in fig.axes for patch in ax.patches if patch.get_gid() == kind]


def render(fig: Figure) -> None:
    fig.savefig(io.BytesIO(), format="png")


def test_one_bar_per_op_coloured_by_kind_with_the_bubble_in_the_title():
    fig = plot_schedule(simulate(gpipe(3, 4), 1, 1, 1), title="GPipe")
    render(fig)
    assert len(bars(fig, "F")) == 12 and len(bars(fig, "BW")) == 12 and bars(fig, "W") == []
    assert all(b.get_facecolor()[:3] == pytest.approx(tuple(int(KIND_COLORS["F"][i:i + 2], 16) / 255 for i in (1, 3, 5)))
               for b in bars(fig, "F"))
    title = fig.axes[0].get_title()
    assert "GPipe" in title and "bubble 6 units = 50.0% of compute" in title and "[4, 4, 4]" in title


def test_bars_sit_where_the_simulator_put_them():
    t = simulate(split(2, 2), 1, 2, 1)
    fig = plot_schedule(t)
    (b0,) = [b for b in bars(fig, "B") if b.get_y() < 0.5 and b.get_x() == t.ops[0][2][1]]
    assert b0.get_width() == 2


def test_a_measured_timeline_is_drawn_in_ms_with_its_messages():
    measured = Timeline([[(parse_op("F0"), 0.10, 0.12), (parse_op("BW0"), 0.20, 0.24)],
                         [(parse_op("F0"), 0.13, 0.15), (parse_op("BW0"), 0.15, 0.19)]],
                        source="measured", comm=[[(0.12, 0.125)], [(0.19, 0.195)]])
    fig = plot_schedule(measured)
    render(fig)
    assert fig.axes[0].get_xlabel() == "time (ms)"
    assert len(bars(fig, "comm")) == 2
    assert bars(fig, "F")[0].get_x() == pytest.approx(0.0)  # measured times start at the first op


def test_several_schedules_share_one_axis_and_one_legend():
    fig = plot_schedules({"GPipe": simulate(gpipe(2, 2)), "split": simulate(split(2, 2))})
    render(fig)
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[0].get_legend() is None
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["F: forward", "B: input gradient", "W: weight gradient", "BW: full backward"]


def test_a_run_and_its_simulation_in_seconds_share_one_axis_when_given_a_unit():
    measured = Timeline([[(parse_op("F0"), 0.0, 0.02), (parse_op("BW0"), 0.03, 0.07)]], source="measured")  # 10 ms waiting
    simulated = simulate([[parse_op("F0"), parse_op("BW0")]], 0.02, 0.02, 0.02)
    fig = plot_schedules({"measured": measured, "simulated": simulated}, unit="ms")
    render(fig)
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[0].get_xlim()[1] == pytest.approx(70 * 1.01)
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "time (ms)"]
    apart = plot_schedules({"measured": measured, "simulated": simulate([[parse_op("F0"), parse_op("BW0")]])})
    render(apart)  # seconds and unit op times are no common clock
    assert apart.axes[0].get_xlim() != apart.axes[1].get_xlim()


def test_explorer_redraws_on_every_control_and_shows_the_last_run():
    calls = []

    def my_gpipe(p, m):
        calls.append((p, m))
        return gpipe(p, m)

    last = Timeline([[(parse_op("F0"), 0.0, 0.01), (parse_op("BW0"), 0.01, 0.03)]], source="measured")
    box = schedule_explorer({"GPipe": my_gpipe, "split": split}, last_run=lambda: last, p=2, m=3)
    assert calls == [] and box.schedule.value == "split"
    assert box.timeline.bubble_time == pytest.approx(2.0) and len(box.figure.axes) == 2  # the W at the end fills a slot
    box.schedule.value = "GPipe"
    box.p.value, box.m.value = 3, 5
    assert calls[-1] == (3, 5) and box.timeline.p == 3 and box.timeline.m == 5
    box.t_w.value = 2.0
    assert box.timeline.bubble_time == pytest.approx(2 * (1 + 1 + 2))
    assert box.error is None and "bubble" in box.summary.value


def test_explorer_shows_a_broken_generator_in_place():
    box = schedule_explorer({"mine": lambda p, m: [ops("F0")] * p})
    assert box.figure is None and "BW0 is missing" in box.error
    assert "mine(4, 8) failed" in box.summary.value
    with pytest.raises(ValueError, match="at least one"):
        schedule_explorer({})
