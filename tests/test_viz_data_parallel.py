"""Pictures of notebook 02: the memory calculator and the DDP timelines, read back from their
artists, and the widgets driven headless. Traces are built by hand, no processes."""
import io
import math

import pytest
from matplotlib.figure import Figure

from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.lessons.viz.ddp_timeline import (bucket_labels, ddp_overlap, ddp_timeline_widget, overlapped_step,
                                           plot_ddp_comparison, plot_ddp_timeline, plot_step_overlap)
from nanoparallel.lessons.viz.memory_calculator import MODEL_PRESETS, default_accelerators, memory_widget, plot_memory
from nanoparallel.runtime.units import human_bytes
from nanoparallel.lessons.viz.widgets import CUSTOM

MIXED = {"parameters": 2, "gradients": 2, "master weights": 4, "optimizer states": 8}


pytestmark = pytest.mark.usefixtures("quiet_pictures")


def render(fig: Figure) -> None:
    fig.savefig(io.BytesIO(), format="png")


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [fig.axes[0].get_title()]


def patches(fig, gid, ax=0):
    return [p for p in fig.axes[ax].patches if p.get_gid() == gid]


def ev(rank, op, start, end, kind="comm", is_async=False, world=2, sent=0):
    return TraceEvent(rank, op, None, tuple(range(world)), sent, sent, start, end, is_async, kind)


def overlapped_trace() -> Trace:
    """Two ranks, two steps each: backward 0-10 ms, buckets launched at 4 and 8 ms, waited at 12
    and 14 ms; the second step from 20 ms, with its last bucket launched after backward."""
    events = []
    for r in range(2):
        events += [ev(r, "backward", 0.000, 0.010, kind="compute"),
                   ev(r, "all_reduce", 0.004, 0.012, is_async=True, sent=100),
                   ev(r, "all_reduce", 0.008, 0.014, is_async=True, sent=100),
                   ev(r, "backward", 0.020, 0.030, kind="compute"),
                   ev(r, "all_reduce", 0.025, 0.031, is_async=True, sent=100),
                   ev(r, "all_reduce", 0.032, 0.036, is_async=True, sent=100)]
    return Trace(events, world_size=2)


def naive_trace() -> Trace:
    return Trace([ev(r, op, s, e, kind=k) for r in range(2) for op, s, e, k in (
        ("backward", 0.0, 0.010, "compute"), ("all_reduce", 0.010, 0.013, "comm"), ("all_reduce", 0.013, 0.016, "comm"))],
        world_size=2)


# ---- memory --------------------------------------------------------------------------------

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MOMENTS = {"adam": 2, "momentum": 1, "sgd": 0}


def reference_memory_breakdown(param_dtype="bf16", grad_dtype="bf16", master_weights=True,
                               optimizer="adam", moments_dtype="fp32"):
    """A stand-in for the learner's function (the answer itself lives only in solutions/)."""
    return {"parameters": DTYPE_BYTES[param_dtype], "gradients": DTYPE_BYTES[grad_dtype],
            "master weights": 4 if master_weights and param_dtype != "fp32" else 0,
            "optimizer states": MOMENTS[optimizer] * DTYPE_BYTES[moments_dtype]}


def test_memory_bar_segments_are_bytes_per_parameter_times_params():
    fig = plot_memory(7e9, MIXED)
    render(fig)
    segments = patches(fig, "component")
    assert [p.get_width() for p in segments] == pytest.approx([14, 14, 28, 56])  # GB
    assert [p.get_x() for p in segments] == pytest.approx([0, 14, 28, 56])      # stacked
    lines = [line for line in fig.axes[0].lines if line.get_gid() == "accelerator"]
    assert sorted(line.get_xdata()[0] for line in lines) == pytest.approx([80, 141, 192])
    title = fig.axes[0].get_title()
    assert "112 GB" in title and "16 B/param" in title and "H200" in title
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["parameters: 2 B/param", "gradients: 2 B/param", "master weights: 4 B/param",
                      "optimizer states: 8 B/param"]


def test_memory_says_when_no_gpu_holds_the_model():
    fig = plot_memory(65e9, MIXED)
    render(fig)
    assert "does not fit" in fig.axes[0].get_title() and "6 × B200" in fig.axes[0].get_title()
    assert fig.axes[0].get_xlim()[1] > 1040
    fig = plot_memory(1e9, {"a": 1.0, "b": 2.0}, accelerators={"tiny": 2e9}, title="custom")
    render(fig)
    assert fig.axes[0].get_title() == "custom"
    assert [p.get_width() for p in patches(fig, "component")] == pytest.approx([1, 2])


def test_default_accelerators_merge_equal_memories():
    acc = default_accelerators()
    assert sorted(acc.values()) == [80e9, 141e9, 192e9]
    assert any("A100" in k and "H100" in k for k in acc)


def test_memory_widget_draws_the_given_function_and_follows_controls():
    calls = []

    def mine(**options):
        calls.append(options)
        return reference_memory_breakdown(**options)

    w = memory_widget(mine)
    assert calls[-1] == dict(param_dtype="bf16", grad_dtype="bf16", master_weights=True, optimizer="adam",
                             moments_dtype="fp32")
    assert w.breakdown == MIXED and w.error is None and isinstance(w.figure, Figure)
    assert w.n_params.value == pytest.approx(7e9)
    w.moments_dtype.value = "bf16"
    assert sum(w.breakdown.values()) == 12
    w.preset.value = dict(MODEL_PRESETS)["LLaMA 65B"]
    assert w.n_params.value == pytest.approx(65e9)
    assert "65B" in w.figure.axes[0].get_title()
    w.n_params.value = 2e9  # away from the preset
    assert w.preset.value == CUSTOM
    w.optimizer.value = "sgd"
    assert w.breakdown["optimizer states"] == 0
    assert "total" in w.table.value


def sent_back(slider) -> float:
    """What a FloatLogSlider's front end sends the kernel: log10(value) rounded to the step."""
    k = round((math.log10(slider.value) - slider.min) / slider.step)
    return 10 ** (k * slider.step + slider.min)


def test_memory_widget_presets_survive_the_browsers_rounding():
    """The browser rounds log10(parameters) to the slider's step and sends that back (7e9
    returns as 7.08e9): the preset must stay chosen, and title, label and table use it exactly."""
    w = memory_widget(reference_memory_breakdown)
    seen = []
    w.preset.observe(lambda change: seen.append(change["new"]), names="value")
    assert w.preset.value == 7e9 and None not in [v for _, v in w.preset.options]
    for name, n in [("LLaMA 7B", 7e9)] + list(MODEL_PRESETS):  # the first: as displayed
        if n != w.preset.value:
            w.preset.value = n
        w.n_params.value = sent_back(w.n_params)
        assert w.n_params.value != n                      # the rounding did happen
        assert w.preset.value == n, name
        billions = f"{n / 1e9:g}B"
        assert w.n_label.value == f"{billions} parameters"
        assert w.figure.axes[0].get_title().startswith(f"{billions} parameters × 16 B/param = {human_bytes(16 * n)}")
        assert f"{human_bytes(16 * n):>9}" in w.table.value.splitlines()[-1]  # the total row
    w.preset.value = 7e9
    w.n_params.value = sent_back(w.n_params)
    assert "112 GB per GPU" in w.figure.axes[0].get_title()   # 7B × 16 B, not 7.08B × 16 = 113 GB
    w.moments_dtype.value = "bf16"                       # other controls keep the exact count
    assert w.preset.value == 7e9 and "7B parameters × 12 B/param = 84 GB" in w.figure.axes[0].get_title()
    w.n_params.value = 10 ** 9.5                         # a size of the learner's own
    assert w.preset.value == CUSTOM and w.n_label.value == "3.16B parameters"
    assert None not in seen


def test_memory_widget_shows_errors_instead_of_raising():
    def unfinished(**options):
        raise NotImplementedError()

    w = memory_widget(unfinished)
    assert w.figure is None and "NotImplementedError" in w.error
    assert "failed" in w.table.value


# ---- DDP timelines ------------------------------------------------------------------------

def test_overlap_counts_comm_hidden_under_backward():
    s = ddp_overlap(overlapped_trace())[0]
    # step 1: comm in flight 4-14 ms, backward until 10 -> 6 hidden; step 2: 25-31 and 32-36, backward until 30 -> 5
    assert s.backward == pytest.approx(0.020)
    assert s.comm == pytest.approx(0.010 + 0.006 + 0.004)
    assert s.hidden == pytest.approx(0.006 + 0.005)
    assert s.exposed == pytest.approx(0.009)
    assert s.fraction == pytest.approx(11 / 20)
    naive = ddp_overlap(naive_trace())
    assert [x.fraction for x in naive] == [0.0, 0.0] and naive[0].exposed == pytest.approx(0.006)
    assert ddp_overlap(Trace([], world_size=1))[0].fraction == 0.0


def test_bucket_labels_restart_each_step():
    trace = overlapped_trace()
    labels = bucket_labels(trace, 0)
    assert [labels[id(e)] for e in trace.comm(0)] == ["b0", "b1", "b0", "b1"]


def test_timeline_draws_every_event_in_its_rank_and_lane():
    trace = overlapped_trace()
    fig = plot_ddp_timeline(trace, title="bucketed")
    render(fig)
    comm, compute = patches(fig, "comm"), patches(fig, "compute")
    assert len(comm) == 8 and len(compute) == 4 and len(patches(fig, "shade")) == 4
    for p in compute:  # top lane: above the rank's centre (the y axis is inverted)
        assert p.get_y() + p.get_height() <= round(p.get_y() + 0.5) + 1e-9
    for p in comm:     # bottom lane: below it
        assert p.get_y() >= round(p.get_y()) - 1e-9
    # two buckets in flight together get separate sub-lanes
    first_two = sorted((p for p in comm if round(p.get_y()) == 0 and p.get_x() < 10), key=lambda p: p.get_x())
    assert first_two[0].get_y() != first_two[1].get_y()
    assert sorted(p.get_width() for p in first_two) == pytest.approx([6, 8])  # ms: 8-14 and 4-12
    shown = texts(fig)
    assert "hidden 55%\nexposed 9.0 ms" in shown and "bucketed" in shown
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0", "rank 1"]


def test_timeline_starts_at_the_first_event_and_marks_never_waited():
    trace = Trace([ev(0, "backward", 0.5, 0.51, kind="compute"), ev(0, "all_reduce", 0.505, None, is_async=True)],
                  world_size=1)
    fig = plot_ddp_timeline(trace)
    render(fig)
    [bw] = patches(fig, "compute")
    assert bw.get_x() == pytest.approx(0.0)  # the 0.5 s before the first event is cut off
    [open_bar] = patches(fig, "never-waited")
    assert open_bar.get_x() == pytest.approx(5.0)
    fig = plot_ddp_timeline(Trace([], world_size=2))
    render(fig)
    assert "no communication recorded" in texts(fig)


def test_comparison_shares_one_time_axis_and_one_legend():
    fig = plot_ddp_comparison({"naive": naive_trace(), "bucketed": overlapped_trace()})
    render(fig)
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[0].get_legend() is None and fig.axes[1].get_legend() is not None
    assert [ax.get_title() for ax in fig.axes] == ["naive", "bucketed"]
    with pytest.raises(ValueError):
        plot_ddp_comparison({})


def test_timeline_widget_runs_naive_and_bucketed():
    asked = []

    def run_fn(bucket_bytes):
        asked.append(bucket_bytes)
        return naive_trace() if bucket_bytes is None else overlapped_trace()

    w = ddp_timeline_widget(run_fn, bucket_sizes=(1024, 4096), run=False)
    assert asked == [] and w.figure is None
    w.bucket_size.value = 1024
    w.run_button.click()
    assert asked == [None, 1024]
    assert len(w.figure.axes) == 2 and list(w.traces)[1].startswith("bucketed DDP, 1.0 kB")
    assert "2 all-reduces" in w.summary.value and "55% of it under backward" in w.summary.value
    assert w.run_button.description == "Run" and not w.run_button.disabled


def test_timeline_widget_shows_errors_instead_of_raising():
    def broken(bucket_bytes):
        raise NotImplementedError("write BucketedDDP first")

    w = ddp_timeline_widget(broken)
    assert w.figure is None and "NotImplementedError: write BucketedDDP first" in w.error
    assert "failed" in w.summary.value
    w = ddp_timeline_widget(lambda b: 42, run=True)
    assert "TypeError" in w.error
    with pytest.raises(ValueError):
        ddp_timeline_widget(broken, bucket_sizes=())


# ---- the overlap lesson ---------------------------------------------------------------------

def test_overlapped_step_for_the_resnet_example():
    t = overlapped_step(0.33, 0.16, n_buckets=4)
    assert t["sequential"] == pytest.approx(0.49)
    assert t["bound"] == pytest.approx(0.33)
    assert t["overlapped"] == pytest.approx(0.37)  # the last bucket: ready at 0.33, then 0.04 on the wire
    assert overlapped_step(0.33, 0.16, n_buckets=1)["overlapped"] == pytest.approx(0.49)  # nothing to overlap
    assert overlapped_step(0.1, 1.0, n_buckets=10)["overlapped"] == pytest.approx(0.1 / 3 + 0.1 * 2 / 3 / 10 + 1.0)  # first bucket ready, then all on the wire
    with pytest.raises(ValueError):
        overlapped_step(1, 1, n_buckets=0)


def test_step_overlap_plot():
    fig = plot_step_overlap(0.33, 0.16, n_buckets=4)
    render(fig)
    comm = [p for p in fig.axes[0].patches if p.get_gid() == "comm"]
    assert len(comm) == 1 + 4
    assert comm[0].get_width() == pytest.approx(0.16)
    assert max(p.get_x() + p.get_width() for p in comm[1:]) == pytest.approx(0.37)
    shown = texts(fig)
    assert "  step 490 ms" in shown and "  step 370 ms" in shown
