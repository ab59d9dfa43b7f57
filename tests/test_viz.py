"""The picture layer: pure plot functions read back from their artists, and the widgets
driven headless (set ``.value``, call ``.click()``). Traces are built by hand, no processes.
"""
import io
import math

import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.lessons.viz import bandwidth_widget, human_bytes, human_seconds, plot_link_times, plot_trace, trace_widget
from nanoparallel.runtime.timeline import match_messages, op_color
from nanoparallel.runtime.units import human_rate
from nanoparallel.lessons.viz.widgets import CUSTOM, SIZE_PRESETS, log_slider_shows

BAR_GIDS = ("event", "compute", "never-waited")


pytestmark = pytest.mark.usefixtures("quiet_pictures")


def ev(rank, op, peer=None, start=0.0, end=1.0, sent=0, recv=0, world=2, **kw):
    return TraceEvent(rank, op, peer, tuple(range(world)), sent, recv, start, end, **kw)


def render(fig: Figure) -> None:
    """Draw for real (Agg, in memory): text layout, glyphs and transforms all run."""
    fig.savefig(io.BytesIO(), format="png")


def bars(fig, gids=BAR_GIDS):
    return [p for p in fig.axes[0].patches if p.get_gid() in gids]


def arrows(fig):
    return [p for p in fig.axes[0].patches if p.get_gid() == "message"]


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def row_of(patch) -> int:
    return round(patch.get_y() + patch.get_height() / 2)


def ping_pong() -> Trace:
    """Rank 0 sends 4 kB to 1, 1 answers; rank 1 computes in between."""
    return Trace([
        ev(0, "send", 1, 0.001, 0.002, sent=4000),
        ev(1, "recv", 0, 0.0005, 0.0021, recv=4000),
        ev(1, "matmul", None, 0.0022, 0.0029, kind="compute"),
        ev(1, "send", 0, 0.003, 0.004, sent=4000),
        ev(0, "recv", 1, 0.0025, 0.0041, recv=4000),
    ], world_size=2)


# ---- timeline ----------------------------------------------------------------------------

def test_one_bar_per_event_in_its_rank_row():
    trace = Trace([
        ev(0, "all_reduce", None, 0.000, 0.004, 12, 12, world=3),
        ev(1, "all_reduce", None, 0.001, 0.004, 12, 12, world=3),
        ev(2, "all_reduce", None, 0.000, 0.005, 12, 12, world=3),
        ev(0, "forward", None, 0.0045, 0.008, world=3, kind="compute"),
        ev(2, "isend", 0, 0.006, 0.007, 8, 0, world=3, is_async=True),
        ev(2, "irecv", 0, 0.006, 0.007, 0, 8, world=3, is_async=True),  # overlaps: its own lane
        ev(0, "irecv", 2, 0.0055, 0.0075, 0, 8, world=3, is_async=True),
    ], world_size=3)
    fig = plot_trace(trace)
    render(fig)
    assert isinstance(fig, Figure)
    for r in range(3):
        assert sum(row_of(p) == r for p in bars(fig)) == sum(e.rank == r for e in trace.events)
    for p in bars(fig):  # bars span start..end in ms
        e = next(e for e in trace.events if abs(e.start * 1e3 - p.get_x()) < 1e-9 and e.rank == row_of(p))
        assert p.get_width() == pytest.approx((e.end - e.start) * 1e3)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # inverted: rank 0 on top
    # the two overlapping async ops of rank 2 do not cover each other
    r2 = sorted((p for p in bars(fig) if row_of(p) == 2 and p.get_x() == pytest.approx(6.0)), key=lambda p: p.get_y())
    assert len(r2) == 2 and r2[0].get_y() + r2[0].get_height() <= r2[1].get_y()


def test_labels_inside_bars_that_fit():
    fig = plot_trace(ping_pong())
    render(fig)
    shown = texts(fig)
    for label in ("send→1", "recv←0", "send→0", "recv←1", "matmul"):
        assert label in shown
    fig = plot_trace(Trace([ev(0, "all_reduce", None, 0, 0.001), ev(1, "all_reduce", None, 0, 1.0)], 2))
    assert texts(fig).count("all_reduce") == 1  # the 1 ms bar of a 1 s run has no room


def test_one_arrow_per_matched_send_recv_pair():
    trace = Trace([
        ev(0, "send", 1, 0.001, 0.002, sent=8),
        ev(0, "isend", 1, 0.003, 0.004, sent=8, is_async=True),
        ev(0, "send", 1, 0.005, 0.006, sent=8),   # never received: no arrow
        ev(1, "recv", 0, 0.000, 0.0025, recv=8),
        ev(1, "irecv", 0, 0.0035, 0.0045, recv=8, is_async=True),
        ev(1, "send", 0, 0.007, 0.008, sent=8),
        ev(0, "recv", 1, 0.0065, 0.0085, recv=8),
        ev(0, "recv", None, 0.009, 0.0095),          # any-source recv: nothing to match
    ], world_size=2)
    pairs = match_messages(trace)
    assert [(s.rank, s.start, r.rank, r.start) for s, r in pairs] == [
        (0, 0.001, 1, 0.000), (0, 0.003, 1, 0.0035), (1, 0.007, 0, 0.0065)]
    fig = plot_trace(trace)
    render(fig)
    drawn = arrows(fig)
    assert len(drawn) == len(pairs) == 3
    # arrows leave the sender's row and end on the receiver's row, at the recv's end
    (x0, y0), (x1, y1) = drawn[0]._posA_posB
    assert (round(y0), round(y1)) == (0, 1)
    assert (x0, x1) == pytest.approx((1.0, 2.5))
    (x0, y0), (x1, y1) = drawn[2]._posA_posB
    assert (round(y0), round(y1)) == (1, 0)


def test_never_waited_async_op_runs_off_the_right_edge():
    trace = Trace([
        ev(0, "isend", 1, 0.001, None, sent=4000, is_async=True),
        ev(1, "recv", 0, 0.001, 0.003, recv=4000),
        ev(0, "barrier", None, 0.002, 0.004),
        ev(1, "barrier", None, 0.0035, 0.004),
    ], world_size=2)
    fig = plot_trace(trace)
    render(fig)
    [open_bar] = bars(fig, ("never-waited",))
    assert row_of(open_bar) == 0
    assert open_bar.get_x() + open_bar.get_width() == pytest.approx(fig.axes[0].get_xlim()[1])
    assert open_bar.get_facecolor()[:3] == (1.0, 1.0, 1.0)               # outlined, not filled
    assert to_hex(open_bar.get_edgecolor()) == op_color("isend")
    assert any("never waited" in t for t in texts(fig))
    assert "never waited" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(arrows(fig)) == 1                       # the message still arrived on rank 1
    # an unwaited isend counts no bytes (Trace's rule), and the row annotation agrees
    assert "↑0 B ↓0 B" in texts(fig)


def test_empty_trace_says_so():
    fig = plot_trace(Trace([], world_size=4))
    render(fig)
    assert "no communication recorded" in texts(fig)
    assert bars(fig) == [] and arrows(fig) == []


def test_compute_only_trace_draws_regions_and_says_no_communication():
    fig = plot_trace(Trace([ev(0, "forward", None, 0, 0.002, kind="compute")], world_size=2))
    render(fig)
    [region] = bars(fig, ("compute",))
    assert region.get_hatch() == "///"
    assert "no communication recorded" in texts(fig)


def test_colours_are_fixed_per_op_across_figures():
    first = Trace([ev(0, "all_reduce", None, 0, 1), ev(1, "send", 0, 0, 1, sent=4), ev(0, "recv", 1, 1, 2, recv=4)], 2)
    second = Trace([ev(0, "broadcast", None, 0, 1), ev(1, "all_reduce", None, 1, 2)], 2)
    for trace in (first, second):
        fig = plot_trace(trace)
        by_start = {(e.rank, e.start * 1e3): e.op for e in trace.events}
        for p in bars(fig):
            assert to_hex(p.get_facecolor()) == op_color(by_start[row_of(p), p.get_x()])
        legend = fig.axes[0].get_legend()
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            assert to_hex(handle.get_facecolor()) == op_color(text.get_text())
    assert len({op_color(op) for op in ("send", "recv", "all_reduce", "broadcast", "all_gather")}) == 5
    assert op_color("my_custom_op") == op_color("my_custom_op")  # unknown ops: stable hash
    fig = plot_trace(Trace([ev(0, "forward", kind="compute"), ev(1, "backward", kind="compute")], 2))
    assert {to_hex(p.get_facecolor()) for p in bars(fig)} == {"#c8c8c8"}  # compute is grey


def test_per_rank_byte_totals_at_the_right():
    fig = plot_trace(ping_pong())
    assert texts(fig).count("↑4.0 kB ↓4.0 kB") == 2
    fig = plot_trace(ping_pong(), show_bytes=False, title="ping-pong")
    assert not any("↑" in t for t in texts(fig))
    assert fig.axes[0].get_title() == "ping-pong"


def test_draws_into_a_given_axes_and_trace_plot_delegates():
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    assert plot_trace(ping_pong(), ax=ax2) is fig
    assert ax2.patches and not ax1.patches
    assert len(ping_pong().plot().axes[0].patches) == 5 + 2   # 5 bars, 2 arrows
    render(fig)


# ---- link times ----------------------------------------------------------------------------

def test_link_times_bars_in_order_with_link_time_widths():
    from nanoparallel.lessons.cost import LINKS
    nbytes = 14e9
    fig = plot_link_times(nbytes)
    render(fig)
    ax = fig.axes[0]
    drawn = [p for p in ax.patches if p.get_gid() == "link"]
    assert len(drawn) == len(LINKS)
    drawn.sort(key=lambda p: p.get_y())
    assert [round(p.get_y() + p.get_height() / 2) for p in drawn] == list(range(len(LINKS)))
    assert ax.get_ylim()[0] > ax.get_ylim()[1]               # first link on top
    for p, link in zip(drawn, LINKS.values()):
        assert p.get_x() + p.get_width() == pytest.approx(link.time(nbytes))
        assert human_seconds(link.time(nbytes)) in texts(fig)
        assert any(t.startswith(human_rate(link.bandwidth)) for t in texts(fig))
    assert ax.get_xscale() == "log"
    assert "14 GB" in ax.get_title()


def test_link_times_with_custom_links_and_axes():
    from nanoparallel.lessons.cost import Link
    links = {"slow": Link("slow", 1e9, 1e-5), "fast": Link("fast", 1e11, 1e-6)}
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_link_times(4, links, ax=ax) is fig
    assert [t.get_text() for t in ax.get_yticklabels()] == ["slow", "fast"]
    widths = [p.get_width() for p in sorted(ax.patches, key=lambda p: p.get_y())]
    assert widths == pytest.approx([links["slow"].time(4), links["fast"].time(4)])
    assert ax.get_title() == "Moving 4 B over one link"
    render(fig)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (4, "4 B"), (999, "999 B"), (4000, "4.0 kB"),
                                     (4096, "4.1 kB"), (999_960, "1.0 MB"), (2**20, "1.0 MB"),
                                     (14e9, "14 GB"), (400e9, "400 GB"), (84e9, "84 GB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("s, text", [(0, "0 s"), (2e-6, "2.0 µs"), (9e-7, "900 ns"), (3.5e-3, "3.5 ms"),
                                     (0.438, "438 ms"), (0.99996, "1.0 s"), (12, "12 s"),
                                     (90, "1.5 min"), (7200, "2.0 h")])
def test_human_seconds(s, text):
    assert human_seconds(s) == text
    assert human_rate(400e9) == "400 GB/s"


# ---- widgets ---------------------------------------------------------------------------------

def test_bandwidth_widget_redraws_on_slider_and_preset():
    box = bandwidth_widget()
    first = box.figure
    assert isinstance(first, Figure) and "1.0 MB" in first.axes[0].get_title()
    box.size_slider.value = 1e9
    assert box.figure is not first and box.figure.axes[0].get_title() == "Moving 1.0 GB over one link"
    assert box.size_label.value == "1.0 GB"
    before = box.figure
    labels = [label for label, _ in box.preset.options]
    box.preset.value = dict(box.preset.options)["7B-parameter gradients in bf16 (14 GB)"]
    assert box.size_slider.value == 14e9 and box.preset.value == 14e9
    assert box.figure is not before and "14 GB" in box.figure.axes[0].get_title()
    box.preset.value = dict(box.preset.options)["one fp32 value (4 B)"]
    assert box.size_slider.value == 4 and box.figure.axes[0].get_title() == "Moving 4 B over one link"
    box.size_slider.value = 1e5                  # dragging away from a preset clears it
    assert box.preset.value == CUSTOM and "100 kB" in box.figure.axes[0].get_title()
    assert "1 MiB bucket" in labels


def sent_back(slider) -> float:
    """What a FloatLogSlider's front end sends the kernel: log10(value) rounded to the step."""
    k = round((math.log10(slider.value) - slider.min) / slider.step)
    return 10 ** (k * slider.step + slider.min)


def test_log_slider_shows_a_value_up_to_half_a_step():
    box = bandwidth_widget()
    slider = box.size_slider
    slider.value = sent_back(slider)                 # 2**20 comes back as 10**6.02
    assert slider.value != 2**20 and log_slider_shows(slider, 2**20)
    assert not log_slider_shows(slider, 2**20 * 10 ** slider.step)   # the next grid point
    assert not log_slider_shows(slider, 1e6)         # 10**6.00 is another grid point


def test_bandwidth_presets_survive_the_browsers_rounding():
    """The browser rounds log10(size) to the slider's step and sends that back (8192 B returns
    as 8128 B): the preset must stay chosen and the label and figure keep its exact size."""
    box = bandwidth_widget()
    seen = []
    box.preset.observe(lambda change: seen.append(change["new"]), names="value")
    assert box.preset.value == 2**20                 # the slider starts on the 1 MiB preset
    assert None not in [value for _, value in box.preset.options]  # ipywidgets 8 draws None empty
    for label, nbytes in SIZE_PRESETS:
        box.preset.value = nbytes
        box.size_slider.value = sent_back(box.size_slider)
        assert box.size_slider.value != nbytes       # the rounding did happen
        assert box.preset.value == nbytes, label
        assert box.size_label.value == human_bytes(nbytes)
        assert box.figure.axes[0].get_title() == f"Moving {human_bytes(nbytes)} over one link"
    box.preset.value = 4096 * 2
    box.size_slider.value = sent_back(box.size_slider)
    assert box.size_label.value == "8.2 kB"          # not the 8128 B the browser sent: "8.1 kB"
    box.preset.value = CUSTOM                        # "custom" draws the slider's own value
    assert box.size_label.value == "8.1 kB"
    box.preset.value = 4096 * 2                      # back to the preset the slider is already on
    assert box.size_label.value == "8.2 kB" and box.preset.value == 4096 * 2
    assert None not in seen


def test_trace_widget_runs_the_chosen_world_size():
    calls = []

    def run_fn(n):
        calls.append(n)
        return Trace([ev(r, "all_reduce", None, 0, 0.001, 8, 8, world=n) for r in range(n)], n)

    box = trace_widget(run_fn, world_sizes=(2, 3, 4))
    assert box.figure is None and calls == []
    box.world_size.value = 3
    box.run_button.click()
    assert calls == [3]
    assert isinstance(box.figure, Figure) and box.error is None
    assert [t.get_text() for t in box.figure.axes[0].get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert "all_reduce×1" in box.summary.value
    assert not box.run_button.disabled


def test_trace_widget_shows_errors_instead_of_raising():
    def run_fn(n):
        raise RuntimeError(f"rank 1 hung with {n} ranks")

    box = trace_widget(run_fn)
    box.run_button.click()
    assert box.error == "RuntimeError: rank 1 hung with 2 ranks"
    assert box.figure is None and "rank 1 hung" in box.summary.value
    assert not box.run_button.disabled

    class Result(list):  # a RunResult-like value: its .trace is drawn
        trace = ping_pong()

    box = trace_widget(lambda n: Result(), world_sizes=(2,))
    box.run_button.click()
    assert box.error is None and len(bars(box.figure)) == 5
    box = trace_widget(lambda n: 42)
    box.run_button.click()
    assert box.error.startswith("TypeError: run_fn should return a Trace")
