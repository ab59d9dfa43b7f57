"""Pictures for notebook 03 (ZeRO): memory per GPU against the data-parallel degree, and the
timeline of a ZeRO-3 step.

    fig = plot_memory_per_gpu(zero_memory_bytes, psi=7.5e9, k=12, gpu_memory=80e9)
    memory_widget(zero_memory_bytes)            # Ψ, K and GPU-memory sliders
    fig = plot_zero3_timeline(result.trace)     # gathers, frees, reduce-scatters, compute
    zero3_timeline_widget(lambda n, variant: run(n, variant))

``formula`` is the learner's ``formula(psi, k, n_d, stage) -> bytes per GPU`` for stage 0 (DDP)
to 3 (Rajbhandari et al., 2020, "ZeRO", section 5 and Figure 1). The timeline reads a `Trace`:
compute regions named ``"forward layer i"`` / ``"backward layer i"``, regions named
``"free ..."`` (a gathered layer released), ``all_gather*`` and ``reduce_scatter*`` calls.
Pure ``plot_*`` functions return a `Figure` built without pyplot; the widgets expose their
controls and last figure as attributes, so tests drive them without a browser.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from nanoparallel.runtime.trace import Trace, TraceEvent
from nanoparallel.runtime.timeline import COMPUTE_COLOR, op_color
from nanoparallel.runtime.units import human_bytes
from nanoparallel.lessons.viz.widgets import log_slider_shows, pre_html, show_failure, show_figure, trace_of

STAGES = (0, 1, 2, 3)
STAGE_NAMES = {0: "DDP (stage 0)", 1: "ZeRO-1 (P_os)", 2: "ZeRO-2 (P_os+g)", 3: "ZeRO-3 (P_os+g+p)"}
STAGE_COLORS = {0: "#7f7f7f", 1: "#1f77b4", 2: "#ff7f0e", 3: "#2ca02c"}
DEFAULT_N = tuple(2 ** i for i in range(11))  # 1 .. 1024 data-parallel ranks


# -- memory per GPU ---------------------------------------------------------------------------

def memory_curves(formula: Callable, psi: float, k: float,
                  n_values: Sequence[int] = DEFAULT_N) -> dict[int, list[float]]:
    """``{stage: [formula(psi, k, n, stage) for n in n_values]}`` for stages 0 to 3."""
    return {stage: [float(formula(psi, k, n, stage)) for n in n_values] for stage in STAGES}


def smallest_fitting_n(values: Sequence[float], n_values: Sequence[int], gpu_memory: float) -> int | None:
    """The first n whose bytes fit in ``gpu_memory`` (values follow ``n_values``), or None."""
    for n, v in zip(n_values, values):
        if v <= gpu_memory:
            return n
    return None


def plot_memory_per_gpu(formula: Callable, psi: float, k: float = 12, gpu_memory: float | None = None,
                        n_values: Sequence[int] = DEFAULT_N, ax=None) -> Figure:
    """Model-state bytes per GPU against the data-parallel degree N_d, one line per stage.

    Both axes are logarithmic. With ``gpu_memory`` (bytes) a dashed line marks the GPU's
    memory and each stage's legend entry says from which N_d it fits. Lines carry the gid
    ``"stage-<s>"``, the memory line ``"gpu-memory"``.
    """
    n_values = list(n_values)
    if not n_values:
        raise ValueError("plot_memory_per_gpu needs at least one data-parallel degree in n_values.")
    curves = memory_curves(formula, psi, k, n_values)
    if ax is None:
        fig = Figure(figsize=(8, 4.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    for stage, values in curves.items():
        label = STAGE_NAMES[stage]
        if gpu_memory is not None:
            n_fit = smallest_fitting_n(values, n_values, gpu_memory)
            label += (" — never fits" if n_fit is None else
                      " — fits on 1 GPU" if n_fit == n_values[0] == 1 else f" — fits from N_d = {n_fit}")
        ax.plot(n_values, values, marker="o", markersize=3.5, linewidth=1.8,
                color=STAGE_COLORS[stage], label=label, gid=f"stage-{stage}")
    if gpu_memory is not None:
        ax.axhline(gpu_memory, color="#c0392b", linestyle="--", linewidth=1.2, gid="gpu-memory")
        ax.annotate(f"GPU memory {human_bytes(gpu_memory)}", (n_values[-1], gpu_memory), xytext=(0, 3),
                    textcoords="offset points", fontsize=8, color="#c0392b", va="bottom", ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator(n_values))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: human_bytes(y).replace(".0 ", " ")))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    ax.set_xlabel("data-parallel degree N_d (GPUs), log scale")
    ax.set_ylabel("model states per GPU")
    ax.set_title(f"Ψ = {_count(psi)} parameters, K = {k:g}: parameters + gradients + optimizer states")
    ax.legend(fontsize=8, loc="lower left", frameon=False)
    return fig


def _count(n: float) -> str:
    """7.5e9 -> '7.5B', 1.2e12 -> '1.2T', 350e6 -> '350M'."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


def memory_widget(formula: Callable, psi: float = 7.5e9, k: int = 12, gpu_memory: float = 80e9,
                  n_values: Sequence[int] = DEFAULT_N) -> widgets.VBox:
    """Sliders for Ψ (log), K and the GPU's memory around `plot_memory_per_gpu`.

    Attributes: ``psi_slider``, ``psi_label``, ``k_slider``, ``gpu_slider`` (GB), ``output``,
    ``fits`` (an HTML table: bytes per GPU at the largest N_d and where each stage starts to
    fit), ``figure`` (the last figure, None after an error) and ``error`` (the formula's last
    error, or None).
    While the Ψ slider sits on ``psi`` the widget uses ``psi`` itself, not the browser's rounding
    of it (7.5e9 would come back as 7.59e9 and 120 GB as 121 GB).
    """
    psi_slider = widgets.FloatLogSlider(value=psi, base=10, min=8, max=12, step=0.01, description="Ψ params",
                                        readout=False, layout=widgets.Layout(width="380px"))
    psi_label = widgets.Label()
    k_slider = widgets.IntSlider(value=k, min=2, max=24, description="K bytes")
    gpu_slider = widgets.IntSlider(value=round(gpu_memory / 1e9), min=8, max=288, step=8,
                                   description="GPU GB")
    out = widgets.Output()
    fits = widgets.HTML()
    box = widgets.VBox([widgets.HBox([psi_slider, psi_label]), widgets.HBox([k_slider, gpu_slider]), out, fits])
    box.psi_slider, box.k_slider, box.gpu_slider, box.output, box.fits = psi_slider, k_slider, gpu_slider, out, fits
    box.psi_label, box.figure, box.error = psi_label, None, None
    n_values = list(n_values)

    def redraw(change=None):
        psi_now = psi if log_slider_shows(psi_slider, psi) else psi_slider.value
        psi_label.value = f"{_count(psi_now)} parameters"
        memory = gpu_slider.value * 1e9
        try:
            curves = memory_curves(formula, psi_now, k_slider.value, n_values)
            box.figure = plot_memory_per_gpu(formula, psi_now, k_slider.value, memory, n_values)
            box.error = None
        except Exception as exc:  # the learner's formula failed: say so in place
            show_failure(box, out, fits, "formula(psi, k, n_d, stage)", exc)
            return
        show_figure(out, box.figure)
        lines = [f"{'stage':<20}{'1 GPU':>10}{f'{n_values[-1]} GPUs':>12}   fits from"]
        for stage, values in curves.items():
            n_fit = smallest_fitting_n(values, n_values, memory)
            lines.append(f"{STAGE_NAMES[stage]:<20}{human_bytes(values[0]):>10}{human_bytes(values[-1]):>12}   "
                         f"{'never' if n_fit is None else f'N_d = {n_fit}'}")
        fits.value = pre_html("\n".join(lines))

    for control in (psi_slider, k_slider, gpu_slider):
        control.observe(redraw, names="value")
    redraw()
    return box


# -- the timeline of a ZeRO-3 step ------------------------------------------------------------

_LAYER_REGION = re.compile(r"^(forward|backward) layer (\d+)$")
LANES = ("compute", "all-gather", "reduce-scatter", "other comm")
FREE_COLOR = "#c0392b"


def is_gather(e: TraceEvent) -> bool:
    return e.kind == "comm" and e.op.startswith("all_gather")


def is_reduce_scatter(e: TraceEvent) -> bool:
    return e.kind == "comm" and e.op.startswith("reduce_scatter")


def is_free(e: TraceEvent) -> bool:
    return e.kind == "compute" and e.op.startswith("free")


def layer_label(name: str) -> str | None:
    """``"forward layer 3" -> "F3"``, ``"backward layer 0" -> "B0"``; None for other names."""
    m = _LAYER_REGION.match(name)
    return None if m is None else m.group(1)[0].upper() + m.group(2)


def gathered_layers_held(trace: Trace, rank: int) -> list[tuple[float, int]]:
    """Steps ``(time, count)``: gathered layers held by ``rank`` over the run.

    Each all-gather allocates one full layer when it is issued (+1) and each ``free ...``
    region releases one (-1). Read from the trace, so it is only as honest as the frees the
    code marks: a gathered layer dropped without ``free(...)`` keeps counting.
    """
    changes = [(e.start, +1) for e in trace.events if e.rank == rank and is_gather(e)]
    changes += [(e.start, -1) for e in trace.events if e.rank == rank and is_free(e)]
    changes.sort(key=lambda c: (c[0], -c[1]))  # a gather and a free at the same instant: gather first
    held, steps = 0, [(0.0, 0)]
    for t, delta in changes:
        held += delta
        steps.append((t, held))
    return steps


def _lane_of(e: TraceEvent) -> int | None:
    if e.kind == "compute":
        return 0 if layer_label(e.op) is not None else None  # phases are shaded, frees are marks
    if is_gather(e):
        return 1
    if is_reduce_scatter(e):
        return 2
    return 3


# Long: one figure drawn top to bottom (lanes per rank, bars, frees, the held-layers panel,
# the legend), each part using the time axis and lane rows the part before it laid out.
def plot_zero3_timeline(trace: Trace, ranks: Sequence[int] | None = None, title: str | None = None,
                        held: bool = True) -> Figure:
    """A ZeRO-3 step, rank by rank: compute, all-gathers, reduce-scatters, frees, and below it the
    number of gathered layers each rank holds over time.

    Per rank, lanes from the top: layer compute (``F3`` / ``B3`` bars, gid ``"compute"``),
    all-gathers (gid ``"all-gather"``; an async one spans from its issue to its wait and is
    hatched), reduce-scatters (gid ``"reduce-scatter"``), other collectives (gid ``"other"``,
    only when there are any). Red ticks (gid ``"free"``) mark ``free ...`` regions. Other compute
    regions ("forward", "backward", "step") shade the background as phases (gid ``"phase"``),
    each edged by dashed lines (gid ``"phase-edge"``).
    ``ranks`` defaults to rank 0 only. ``held=False`` leaves out the lower panel (for code that
    does not mark its frees, such as PyTorch's FSDP).
    """
    ranks = [0] if ranks is None else list(ranks)
    ms = 1e3
    events = [e for e in trace.events if e.rank in ranks]
    ends = [e.end for e in events if e.end is not None] + [e.start for e in events]
    t_right = max(ends, default=0.0) * 1.02 or 1e-3
    min_width = 0.003 * t_right
    # lanes in this figure: compute only if layers are marked, "other comm" only if there is any
    shown = [j for j in range(len(LANES))
             if j in (1, 2) or any(_lane_of(e) == j for e in events)]
    lanes = [LANES[j] for j in shown]
    lane_row = {j: i for i, j in enumerate(shown)}  # lane kind -> row within a rank
    n = len(lanes)

    fig = Figure(figsize=(10, 1.2 + 0.55 * n * len(ranks) + (1.3 if held else 0.3)), layout="constrained")
    if held:
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[n * len(ranks), 2.2])
    else:
        top, bottom = fig.add_subplot(), None
    rows = {}  # (rank, lane) -> y
    for i, r in enumerate(ranks):
        for j in range(n):
            rows[r, j] = i * (n + 0.6) + j

    for e in events:
        if e.kind == "compute" and layer_label(e.op) is None and not is_free(e):
            y0 = rows[e.rank, 0] - 0.75
            top.add_patch(Rectangle((e.start * ms, y0), ((e.end or t_right) - e.start) * ms, n - 1 + 1.3,
                                    facecolor="#f2f2f2", edgecolor="none", zorder=0, gid="phase"))
            for x in (e.start, e.end or t_right):  # phases meet edge to edge: a line tells them apart
                top.plot([x * ms] * 2, [y0, y0 + n - 1 + 1.3], color="#9a9a9a", linewidth=0.8, linestyle=(0, (4, 3)),
                         zorder=1, gid="phase-edge")
            y_label = rows[e.rank, 0] - 0.62
            top.text((e.start + (e.end or t_right)) / 2 * ms, y_label, e.op, ha="center", va="bottom",
                     fontsize=7.5, color="#777777", clip_on=True)
    for e in events:
        lane = _lane_of(e)
        if is_free(e):
            y = rows[e.rank, lane_row[1]]
            top.plot([e.start * ms] * 2, [y - 0.45, y + 0.45], color=FREE_COLOR, linewidth=1.6,
                     zorder=5, gid="free")
            continue
        if lane is None or lane not in lane_row:
            continue
        y = rows[e.rank, lane_row[lane]]
        end = t_right if e.end is None else e.end
        width = max(end - e.start, min_width) * ms
        if lane == 0:
            color, gid, label = COMPUTE_COLOR, "compute", layer_label(e.op)
            bar = Rectangle((e.start * ms, y - 0.35), width, 0.7, facecolor=color, edgecolor="#8a8a8a",
                            linewidth=0.6, zorder=2, gid=gid)
        else:
            gid = ("all-gather", "reduce-scatter", "other")[lane - 1]
            color = op_color(e.op)
            bar = Rectangle((e.start * ms, y - 0.35), width, 0.7, facecolor=color, edgecolor="white",
                            linewidth=0.5, zorder=2, gid=gid, alpha=0.55 if e.is_async else 1.0,
                            hatch="////" if e.is_async else None)
            label = None
        top.add_patch(bar)
        if label and width > 0.025 * t_right * ms:
            top.text(e.start * ms + width / 2, y, label, ha="center", va="center", fontsize=7.5, zorder=4,
                     clip_on=True)

    yticks, ylabels = [], []
    for r in ranks:
        for j, name in enumerate(lanes):
            yticks.append(rows[r, j])
            ylabels.append(f"rank {r} · {name}" if len(ranks) > 1 else name)
    top.set_yticks(yticks, ylabels)
    top.set_ylim(max(yticks) + 0.6, -0.9)
    top.tick_params(axis="y", length=0)
    for spine in ("top", "right", "left"):
        top.spines[spine].set_visible(False)
    top.grid(axis="x", color="#e5e5e5", linewidth=0.6, zorder=0)
    handles = []
    if 0 in lane_row:
        handles.append(Patch(facecolor=COMPUTE_COLOR, edgecolor="#8a8a8a", label="layer compute (F forward, B backward)"))
    handles.append(Patch(facecolor=op_color("all_gather"), label="all-gather"))
    if any(is_gather(e) and e.is_async for e in events):
        handles.append(Patch(facecolor=op_color("all_gather"), alpha=0.55, hatch="////",
                             label="async all-gather (issue → wait)"))
    handles.append(Patch(facecolor=op_color("reduce_scatter"), label="reduce-scatter"))
    if any(is_free(e) for e in events):
        handles.append(Patch(facecolor=FREE_COLOR, label="free"))
    top.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=len(handles), fontsize=7.5,
               frameon=False, handlelength=1.4)
    if title:
        top.set_title(title, pad=22)

    if not trace.comm():
        top.text(0.5, 0.5, "no communication recorded", transform=top.transAxes, ha="center",
                 va="center", fontsize=10, color="#666666")
    if bottom is None:
        top.set_xlim(0, t_right * ms)
        top.set_xlabel("time since the run began (ms)")
        return fig
    peak = 0
    for r in ranks:
        steps = gathered_layers_held(trace, r)
        xs = [t * ms for t, _ in steps] + [t_right * ms]
        ys = [c for _, c in steps] + [steps[-1][1]]
        peak = max([peak] + ys)
        bottom.step(xs, ys, where="post", linewidth=1.6, label=f"rank {r}", gid="held")
    bottom.set_ylim(-0.2, max(peak, 1) + 0.6)
    bottom.yaxis.set_major_locator(FixedLocator(range(0, max(peak, 1) + 1)))
    bottom.set_ylabel("gathered\nlayers held", fontsize=8)
    bottom.set_xlabel("time since the run began (ms)")
    bottom.set_xlim(0, t_right * ms)
    bottom.grid(color="#e5e5e5", linewidth=0.6)
    for spine in ("top", "right"):
        bottom.spines[spine].set_visible(False)
    if len(ranks) > 1:
        bottom.legend(fontsize=7.5, frameon=False, loc="upper right")
    return fig


def zero3_timeline_widget(run_fn: Callable[[int, str], Trace], variants: Sequence[str] = ("no prefetch", "prefetch"),
                          world_sizes: Sequence[int] = (2, 4)) -> widgets.VBox:
    """Pick a variant and a world size, press Run: ``run_fn(world_size, variant)`` runs and rank 0's
    timeline is drawn with `plot_zero3_timeline`.

    ``run_fn`` returns a `Trace` (or a `RunResult`). Errors are shown in the widget, never
    raised. Attributes: ``variant``, ``world_size`` (toggles), ``run_button``, ``output``,
    ``summary`` (HTML: bytes per rank, most gathered layers held), ``figure`` and ``error``.
    """
    variants, sizes = list(variants), list(world_sizes)
    if not variants or not sizes:
        raise ValueError("zero3_timeline_widget needs at least one variant and one world size.")
    variant = widgets.ToggleButtons(options=variants, value=variants[-1], description="variant")
    world_size = widgets.ToggleButtons(options=[(f"{n} ranks", n) for n in sizes], value=sizes[-1],
                                       description="world size")
    run_button = widgets.Button(description="Run", icon="play", button_style="primary")
    out = widgets.Output()
    summary = widgets.HTML()
    box = widgets.VBox([variant, widgets.HBox([world_size, run_button]), out, summary])
    box.variant, box.world_size, box.run_button, box.output, box.summary = variant, world_size, run_button, out, summary
    box.figure, box.error = None, None

    def run(_button=None):
        n, v = world_size.value, variant.value
        run_button.disabled, run_button.description = True, "Running…"
        try:
            result = run_fn(n, v)
            trace = trace_of(result)
            box.figure = plot_zero3_timeline(trace, title=f"{v}, {n} ranks: rank 0")
            box.error = None
            show_figure(out, box.figure)
            held = max(c for _, c in gathered_layers_held(trace, 0))
            summary.value = pre_html(f"{trace.summary()}\nmost gathered layers held at once on rank 0: {held}")
        except Exception as exc:  # the learner's code failed: say so in place
            show_failure(box, out, summary, f"run_fn({n}, {v!r})", exc)
        finally:
            run_button.disabled, run_button.description = False, "Run"

    run_button.on_click(run)
    return box
