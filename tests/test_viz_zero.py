"""Notebook 03's pictures: memory per GPU against N_d, and the ZeRO-3 timeline. Pure plot
functions are read back from their artists; widgets are driven headless (set ``.value``,
call ``.click()``). Traces are built by hand, no processes."""
import io
import math

import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.runtime.timeline import op_color
from nanoparallel.lessons.viz.zero import (DEFAULT_N, gathered_layers_held, layer_label, memory_curves, memory_widget,
                                   plot_memory_per_gpu, plot_zero3_timeline, smallest_fitting_n,
                                   zero3_timeline_widget)


pytestmark = pytest.mark.usefixtures("quiet_pictures")


def zero_memory_bytes(psi, k, n_d, stage, param_bytes=2, grad_bytes=2):
    """The ZeRO paper's formulas (section 5), as a learner writes them."""
    p, g, o = param_bytes * psi, grad_bytes * psi, k * psi
    return [p + g + o, p + g + o / n_d, p + (g + o) / n_d, (p + g + o) / n_d][stage]


def render(fig: Figure) -> None:
    fig.savefig(io.BytesIO(), format="png")


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def lines(fig, gid):
    return [line for ax in fig.axes for line in ax.lines if line.get_gid() == gid]


def patches(fig, gid):
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


# ---- memory per GPU ------------------------------------------------------------------------

def test_memory_curves_call_the_formula_per_stage_and_n():
    curves = memory_curves(zero_memory_bytes, 7.5e9, 12, [1, 64])
    assert curves[0] == [120e9, 120e9]
    assert curves[1][1] == pytest.approx(31.40625e9)
    assert curves[2][1] == pytest.approx(16.640625e9)
    assert curves[3][1] == pytest.approx(1.875e9)
    assert all(curves[s][0] == pytest.approx(120e9) for s in range(4))  # one GPU: nothing shared


def test_smallest_fitting_n():
    assert smallest_fitting_n([100, 50, 20], [1, 2, 4], 60) == 2
    assert smallest_fitting_n([100, 50, 20], [1, 2, 4], 10) is None
    assert smallest_fitting_n([100, 50, 20], [1, 2, 4], 100) == 1


def test_memory_plot_draws_each_stage_from_the_formula():
    fig = plot_memory_per_gpu(zero_memory_bytes, 7.5e9, 12, gpu_memory=80e9)
    render(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    for stage in range(4):
        [line] = lines(fig, f"stage-{stage}")
        assert list(line.get_xdata()) == list(DEFAULT_N)
        assert list(line.get_ydata()) == pytest.approx([zero_memory_bytes(7.5e9, 12, n, stage) for n in DEFAULT_N])
    [gpu] = lines(fig, "gpu-memory")
    assert list(gpu.get_ydata()) == [80e9, 80e9]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].endswith("never fits")              # DDP: 120 GB on every GPU
    assert labels[1].endswith("fits from N_d = 2")       # 60 + 45 GB
    assert "GPU memory 80 GB" in texts(fig)
    assert "7.5B" in ax.get_title() and "K = 12" in ax.get_title()


def test_memory_plot_without_gpu_memory_and_on_given_axes():
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    assert plot_memory_per_gpu(zero_memory_bytes, 1e9, 8, n_values=[1, 2, 4], ax=ax2) is fig
    assert lines(fig, "gpu-memory") == [] and not ax1.lines
    assert all(not t.get_text().endswith("fits") for t in ax2.get_legend().get_texts())
    render(fig)
    with pytest.raises(ValueError, match="at least one"):
        plot_memory_per_gpu(zero_memory_bytes, 1e9, n_values=[])


def test_memory_widget_redraws_on_every_slider():
    box = memory_widget(zero_memory_bytes)
    assert box.error is None and isinstance(box.figure, Figure)
    assert "never" in box.fits.value and "N_d = 2" in box.fits.value
    first = box.figure
    box.psi_slider.value = 1e12
    assert box.figure is not first
    assert "1T" in box.figure.axes[0].get_title()
    box.gpu_slider.value = 16
    [gpu] = lines(box.figure, "gpu-memory")
    assert gpu.get_ydata()[0] == 16e9
    box.k_slider.value = 8
    [line] = lines(box.figure, "stage-0")
    assert line.get_ydata()[0] == pytest.approx((2 + 2 + 8) * 1e12)


def sent_back(slider) -> float:
    """What a FloatLogSlider's front end sends the kernel: log10(value) rounded to the step."""
    k = round((math.log10(slider.value) - slider.min) / slider.step)
    return 10 ** (k * slider.step + slider.min)


def test_memory_widget_keeps_the_papers_psi_through_the_browsers_rounding():
    """ZeRO paper, Figure 1: Ψ = 7.5B, K = 12 is 120 GB per GPU under DDP. The browser sends the
    slider back as 10**9.88 = 7.59e9; the widget must still say 7.5B and 120 GB, not 121 GB."""
    box = memory_widget(zero_memory_bytes, psi=7.5e9, k=12, gpu_memory=80e9)
    box.psi_slider.value = sent_back(box.psi_slider)
    assert box.psi_slider.value == pytest.approx(7.59e9, rel=1e-3)
    assert box.psi_label.value == "7.5B parameters"
    assert box.figure.axes[0].get_title().startswith("Ψ = 7.5B parameters, K = 12")
    [line] = lines(box.figure, "stage-0")
    assert line.get_ydata()[0] == 120e9
    [ddp] = [row for row in box.fits.value.splitlines() if row.startswith("DDP (stage 0)")]
    assert ddp.split()[3:5] == ["120", "GB"] and "121 GB" not in box.fits.value
    box.k_slider.value = 16                          # other controls keep the exact Ψ too
    assert lines(box.figure, "stage-0")[0].get_ydata()[0] == 7.5e9 * 20
    box.psi_slider.value = 1e10                      # a Ψ of the learner's own is drawn as is
    assert box.figure.axes[0].get_title().startswith("Ψ = 10B parameters")


def test_memory_widget_shows_the_formulas_error():
    def broken(psi, k, n_d, stage):
        raise NotImplementedError("not yet")

    box = memory_widget(broken)
    assert box.figure is None
    assert "NotImplementedError: not yet" in box.error
    assert "failed" in box.fits.value


# ---- the ZeRO-3 timeline -------------------------------------------------------------------

def ev(rank, op, start, end, kind="comm", world=2, is_async=False, sent=0):
    return TraceEvent(rank, op, None, tuple(range(world)), sent, sent, start, end, is_async, kind)


def zero3_step(prefetch: bool, rank: int = 0) -> list[TraceEvent]:
    """Two layers, forward then backward, one rank: gathers, computes, frees, reduce-scatters."""
    e = [ev(rank, "forward", 0.000, 0.010, "compute")]
    if prefetch:
        e += [ev(rank, "all_gather_single", 0.000, 0.002, is_async=True, sent=8),
              ev(rank, "all_gather_single", 0.002, 0.006, is_async=True, sent=8),  # issued before F0
              ev(rank, "forward layer 0", 0.003, 0.005, "compute"),
              ev(rank, "free layer 0", 0.005, 0.005, "compute"),
              ev(rank, "forward layer 1", 0.006, 0.008, "compute"),
              ev(rank, "free layer 1", 0.008, 0.008, "compute")]
    else:
        e += [ev(rank, "all_gather_single", 0.000, 0.002, sent=8),
              ev(rank, "forward layer 0", 0.002, 0.003, "compute"),
              ev(rank, "free layer 0", 0.003, 0.003, "compute"),
              ev(rank, "all_gather_single", 0.004, 0.006, sent=8),
              ev(rank, "forward layer 1", 0.006, 0.008, "compute"),
              ev(rank, "free layer 1", 0.008, 0.008, "compute")]
    e += [ev(rank, "backward", 0.010, 0.020, "compute"),
          ev(rank, "all_gather_single", 0.010, 0.011, sent=8),
          ev(rank, "backward layer 1", 0.011, 0.013, "compute"),
          ev(rank, "free layer 1", 0.013, 0.013, "compute"),
          ev(rank, "reduce_scatter_single", 0.013, 0.015, sent=8)]
    return e


def test_layer_label():
    assert layer_label("forward layer 3") == "F3"
    assert layer_label("backward layer 10") == "B10"
    assert layer_label("forward") is None and layer_label("free layer 1") is None


def test_gathered_layers_held_counts_gathers_and_frees():
    held = gathered_layers_held(Trace(zero3_step(prefetch=False), 2), rank=0)
    assert [c for _, c in held] == [0, 1, 0, 1, 0, 1, 0]
    held = gathered_layers_held(Trace(zero3_step(prefetch=True), 2), rank=0)
    assert max(c for _, c in held) == 2           # prefetching holds the next layer too
    assert held[-1][1] == 0
    assert gathered_layers_held(Trace(zero3_step(prefetch=True), 2), rank=1) == [(0.0, 0)]
    # a gather and a free at the same instant: the gather counts first (no dip below zero)
    same = Trace([ev(0, "all_gather_single", 0.001, 0.002), ev(0, "free x", 0.001, 0.001, "compute")], 1)
    assert [c for _, c in gathered_layers_held(same, 0)] == [0, 1, 0]


def test_timeline_lanes_bars_frees_and_held_panel():
    trace = Trace(zero3_step(prefetch=True), 2)
    fig = plot_zero3_timeline(trace, title="prefetch")
    render(fig)
    top, bottom = fig.axes
    assert [t.get_text() for t in top.get_yticklabels()] == ["compute", "all-gather", "reduce-scatter"]
    compute, gathers, scatters = patches(fig, "compute"), patches(fig, "all-gather"), patches(fig, "reduce-scatter")
    assert len(compute) == 3 and len(gathers) == 3 and len(scatters) == 1
    assert {round(p.get_y() + p.get_height() / 2) for p in compute} == {0}
    assert {round(p.get_y() + p.get_height() / 2) for p in gathers} == {1}
    assert {round(p.get_y() + p.get_height() / 2) for p in scatters} == {2}
    assert sorted(p.get_hatch() for p in gathers if p.get_hatch()) == ["////", "////"]   # the two async ones
    assert {to_hex(p.get_facecolor()) for p in gathers} == {op_color("all_gather_single")}
    wide = max(gathers, key=lambda p: p.get_width())  # the prefetched gather spans issue to wait
    assert wide.get_x() == pytest.approx(2.0) and wide.get_width() == pytest.approx(4.0)
    assert len(lines(fig, "free")) == 3
    phases = patches(fig, "phase")
    assert len(phases) == 2
    edges = sorted(line.get_xdata()[0] for line in lines(fig, "phase-edge"))  # where each phase begins and ends
    assert edges == pytest.approx(sorted(x for p in phases for x in (p.get_x(), p.get_x() + p.get_width())))
    assert {"F0", "F1", "B1"} <= set(texts(fig))
    [held] = lines(fig, "held")
    assert max(held.get_ydata()) == 2
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert "async all-gather (issue → wait)" in legend and "free" in legend
    assert top.get_title() == "prefetch"


def test_timeline_without_layer_regions_or_held_panel():
    # what PyTorch's FSDP leaves in a trace: collectives and phases, no layers, no frees
    trace = Trace([ev(0, "forward", 0, 0.004, "compute"), ev(0, "all_gather_single", 0.001, 0.002),
                   ev(0, "reduce_scatter_single", 0.005, 0.006), ev(0, "all_reduce", 0.006, 0.007)], 1)
    fig = plot_zero3_timeline(trace, held=False)
    render(fig)
    [ax] = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["all-gather", "reduce-scatter", "other comm"]
    assert len(patches(fig, "other")) == 1 and patches(fig, "compute") == []
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "free" not in legend and not any("async" in t for t in legend)


def test_timeline_of_two_ranks_and_of_nothing():
    trace = Trace(zero3_step(prefetch=False, rank=0) + zero3_step(prefetch=True, rank=1), 2)
    fig = plot_zero3_timeline(trace, ranks=[0, 1])
    render(fig)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "rank 0 · compute" and labels[-1] == "rank 1 · reduce-scatter"
    assert len(lines(fig, "held")) == 2
    assert len(patches(fig, "all-gather")) == 6
    fig = plot_zero3_timeline(Trace([], 4))
    render(fig)
    assert "no communication recorded" in texts(fig)


def test_timeline_widget_runs_and_draws():
    calls = []

    def run_fn(world_size, variant):
        calls.append((world_size, variant))
        return Trace(zero3_step(prefetch=variant == "prefetch"), world_size)

    box = zero3_timeline_widget(run_fn, world_sizes=(2, 4))
    assert box.figure is None  # nothing runs until Run
    box.run_button.click()
    assert calls == [(4, "prefetch")] and box.error is None
    assert isinstance(box.figure, Figure)
    assert "most gathered layers held at once on rank 0: 2" in box.summary.value
    box.variant.value = "no prefetch"
    box.world_size.value = 2
    box.run_button.click()
    assert calls[-1] == (2, "no prefetch")
    assert "most gathered layers held at once on rank 0: 1" in box.summary.value
    assert box.run_button.description == "Run" and not box.run_button.disabled


def test_timeline_widget_reports_errors_in_place():
    def failing(world_size, variant):
        raise RuntimeError("rank 1 raised")

    box = zero3_timeline_widget(failing)
    box.run_button.click()
    assert box.figure is None and "RuntimeError: rank 1 raised" in box.error
    assert "failed" in box.summary.value
    box = zero3_timeline_widget(lambda n, v: 42)
    box.run_button.click()
    assert "should return a Trace" in box.error
    with pytest.raises(ValueError):
        zero3_timeline_widget(lambda n, v: None, variants=())
