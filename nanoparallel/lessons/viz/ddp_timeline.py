"""DDP timelines of notebook 02: backward compute against the gradient all-reduces, per rank.

    plot_ddp_timeline(result.trace)   # per rank: backward against the gradient all-reduces
    ddp_timeline_widget(run_fn)       # naive DDP above bucketed DDP, pick a bucket size
    plot_step_overlap(0.33, 0.16)     # the course text's ResNet-50 example, with and without overlap

DDP overlaps communication with backward by all-reducing gradients in buckets as soon as they
are ready (PyTorch DDP paper, Li et al. 2020, section 3.2). A rank function that wraps its
backward in ``with region("backward"):`` lets these plots and `ddp_overlap` measure how much
of the all-reduce time was hidden under it. An async all-reduce spans from its launch to the
end of its ``wait()``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import blended_transform_factory

from nanoparallel.runtime.trace import Trace
from nanoparallel.runtime.timeline import COMPUTE_COLOR, op_color, style_rank_axes
from nanoparallel.runtime.units import human_bytes, human_seconds
from nanoparallel.lessons.viz.widgets import pre_html, show_failure, show_figure, trace_of

# -- DDP timelines ------------------------------------------------------------------------

@dataclass(frozen=True)
class Overlap:
    """One rank's communication against its backward regions, in seconds."""
    backward: float   # time inside backward regions
    comm: float       # time with at least one all-reduce in flight (launch to end of wait)
    hidden: float     # the part of `comm` inside backward

    @property
    def exposed(self) -> float:
        """Communication time not hidden under backward."""
        return self.comm - self.hidden

    @property
    def fraction(self) -> float:
        """Share of the communication time hidden under backward (0 when there is none)."""
        return self.hidden / self.comm if self.comm > 0 else 0.0


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _intersection(xs, ys) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in xs for c, d in ys)


def _t_end(trace: Trace) -> float:
    return max([e.end for e in trace.events if e.end is not None] + [e.start for e in trace.events] + [0.0])


def _t_start(trace: Trace) -> float:
    return min([e.start for e in trace.events], default=0.0)


def ddp_overlap(trace: Trace, region: str = "backward", op: str = "all_reduce") -> list[Overlap]:
    """Per rank: how much of the ``op`` time was hidden under the compute regions named ``region``.

    An op never waited on counts until the end of the trace.
    """
    end = _t_end(trace)
    stats = []
    for rank in range(trace.world_size):
        bw = _union([(e.start, e.end) for e in trace.regions(rank) if e.op == region])
        comm = _union([(e.start, end if e.end is None else e.end) for e in trace.comm(rank) if e.op == op])
        stats.append(Overlap(_length(bw), _length(comm), _intersection(comm, bw)))
    return stats


def bucket_labels(trace: Trace, rank: int, region: str = "backward", op: str = "all_reduce") -> dict[int, str]:
    """``"b0"``, ``"b1"``, ... for each all-reduce of ``rank`` by launch order within its step.

    A step begins where a ``region`` begins; keys are ``id(event)``.
    """
    starts = sorted(e.start for e in trace.regions(rank) if e.op == region)
    labels, counts = {}, {}
    for e in sorted((e for e in trace.comm(rank) if e.op == op), key=lambda e: e.start):
        step = sum(s <= e.start for s in starts)
        labels[id(e)] = f"b{counts.get(step, 0)}"
        counts[step] = counts.get(step, 0) + 1
    return labels


def plot_ddp_timeline(trace: Trace, ax=None, title: str | None = None, region: str = "backward",
                      x_max_ms: float | None = None) -> Figure:
    """Per rank, two lanes: compute regions on top, communication below, on one time axis.

    Backward regions are shaded down through the communication lane, so an all-reduce that
    runs while backward is still going sits inside the shade. All-reduces are labelled b0,
    b1, ... in launch order within each step; the right margin gives each rank's hidden share.
    Time runs from the first event of the trace (the run's start-up before it is cut off).
    Bars carry gid "compute", "comm" or "never-waited".
    """
    ms = 1e3
    t0, end = _t_start(trace), _t_end(trace)
    right = (x_max_ms / ms if x_max_ms else (end - t0) * 1.02) or 1e-3
    n = trace.world_size
    if ax is None:
        fig = Figure(figsize=(10, 1.3 + 0.85 * n), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    stats = ddp_overlap(trace, region)
    lane_h = 0.36
    for rank in range(n):
        y_compute, y_comm = rank - 0.2, rank + 0.2
        for e in trace.regions(rank):
            x0, w = (e.start - t0) * ms, max(e.duration, 0) * ms
            ax.add_patch(Rectangle((x0, y_compute - lane_h / 2), w, lane_h, facecolor=COMPUTE_COLOR, edgecolor="#8a8a8a",
                                   hatch="///", linewidth=0.6, zorder=2, gid="compute"))
            if e.op == region:  # shade the backward through the comm lane
                ax.add_patch(Rectangle((x0, y_comm - lane_h / 2), w, lane_h, facecolor="#fff3c4", edgecolor="none",
                                       zorder=1, gid="shade"))
        labels = bucket_labels(trace, rank, region)
        comm = sorted(trace.comm(rank), key=lambda e: e.start)
        lanes, lane_end = {}, []  # async all-reduces in flight together get lanes of their own
        for e in comm:
            stop = end if e.end is None else e.end
            free = next((i for i, t in enumerate(lane_end) if t <= e.start), None)
            if free is None:
                free = len(lane_end)
                lane_end.append(stop)
            lane_end[free] = stop
            lanes[id(e)] = free
        sub_h = lane_h / max(len(lane_end), 1)
        for e in comm:
            x0 = (e.start - t0) * ms
            w = ((end if e.end is None else e.end) - e.start) * ms
            y = y_comm - lane_h / 2 + lanes[id(e)] * sub_h
            color = op_color(e.op)
            if e.end is None:
                patch = Rectangle((x0, y), w, sub_h, facecolor="white", edgecolor=color,
                                  linestyle="--", linewidth=1.2, zorder=3, gid="never-waited")
            else:
                patch = Rectangle((x0, y), max(w, right * ms * 0.002), sub_h, facecolor=color,
                                  edgecolor="white", linewidth=0.5, zorder=3, gid="comm")
            ax.add_patch(patch)
            label = labels.get(id(e))
            if label and w > right * ms * 0.025 and sub_h >= 0.09:
                ax.text(x0 + w / 2, y + sub_h / 2, label, ha="center", va="center", fontsize=7 if sub_h >= 0.17 else 5.5,
                        color="white", fontweight="bold", zorder=4, clip_on=True)
    at_right = blended_transform_factory(ax.transAxes, ax.transData)
    for rank, s in enumerate(stats):
        ax.text(1.01, rank, f"hidden {s.fraction:.0%}\nexposed {human_seconds(s.exposed)}", transform=at_right,
                ha="left", va="center", fontsize=8, color="#333333")
    ax.set_xlim(0, right * ms)
    style_rank_axes(ax, n, "time since the first event (ms)")
    if title:
        ax.set_title(title, fontsize=10)
    handles = [Patch(facecolor=COMPUTE_COLOR, edgecolor="#8a8a8a", hatch="///", label="compute region (top lane)"),
               Patch(facecolor=op_color("all_reduce"), label="all_reduce bk, the k-th of its step: launch → end of wait (bottom lane)"),
               Patch(facecolor="#fff3c4", label=f"while {region} runs")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / max(n, 1) - 0.12), ncols=3,
              frameon=False, fontsize=8)
    if not trace.comm():
        ax.text(0.5, 1.0, "no communication recorded", transform=ax.transAxes, ha="center", va="bottom",
                fontsize=9, color="#666666")
    return fig


def plot_ddp_comparison(traces: Mapping[str, Trace], region: str = "backward") -> Figure:
    """`plot_ddp_timeline` of several runs stacked, on one shared time axis (title -> trace)."""
    traces = dict(traces)
    if not traces:
        raise ValueError("plot_ddp_comparison needs at least one trace.")
    rows = [t.world_size for t in traces.values()]
    fig = Figure(figsize=(10, 0.6 + sum(1.2 + 0.85 * r for r in rows)), layout="constrained")
    axes = fig.subplots(len(traces), 1, gridspec_kw={"height_ratios": [0.5 + r for r in rows]}, squeeze=False)[:, 0]
    x_max = max(_t_end(t) - _t_start(t) for t in traces.values()) * 1.02e3
    for ax, (title, trace) in zip(axes, traces.items()):
        plot_ddp_timeline(trace, ax=ax, title=title, region=region, x_max_ms=x_max)
    for ax in axes[:-1]:  # one legend, at the bottom
        ax.get_legend().remove()
    return fig


def ddp_timeline_widget(run_fn: Callable[[int | None], Trace], bucket_sizes=(2**12, 2**16, 2**18, 2**20),
                        run: bool = True) -> widgets.VBox:
    """Pick a bucket size, press Run: ``run_fn(None)`` (naive DDP) and ``run_fn(bucket_bytes)``
    (bucketed DDP) run, and their timelines are drawn one above the other.

    ``run_fn`` returns a `Trace` or a `RunResult`. Errors show in the widget, never raise.
    With ``run=True`` it runs once right away. Attributes: ``bucket_size``, ``run_button``,
    ``output``, ``summary``, ``figure``, ``traces`` (title -> Trace) and ``error``.
    """
    sizes = list(bucket_sizes)
    if not sizes:
        raise ValueError("ddp_timeline_widget needs at least one bucket size.")
    bucket = widgets.Dropdown(options=[(human_bytes(s), s) for s in sizes], value=sizes[len(sizes) // 2],
                              description="bucket size")
    button = widgets.Button(description="Run", icon="play", button_style="primary")
    out, summary = widgets.Output(), widgets.HTML()
    box = widgets.VBox([widgets.HBox([bucket, button]), out, summary])
    box.bucket_size, box.run_button, box.output, box.summary = bucket, button, out, summary
    box.figure = box.error = None
    box.traces = {}

    def go(_button=None):
        size = bucket.value
        button.disabled, button.description = True, "Running…"
        try:
            box.traces = {"naive DDP: all-reduce after backward": trace_of(run_fn(None)),
                          f"bucketed DDP, {human_bytes(size)} buckets": trace_of(run_fn(size))}
            box.figure, box.error = plot_ddp_comparison(box.traces), None
            show_figure(out, box.figure)
            lines = []
            for title, trace in box.traces.items():
                s = ddp_overlap(trace)[0]
                n = trace.op_counts(0)["all_reduce"]
                lines.append(f"{title}\n  rank 0: {n} all-reduces, {human_seconds(s.comm)} communicating, "
                             f"{s.fraction:.0%} of it under backward, {human_seconds(s.exposed)} exposed")
            summary.value = pre_html("\n".join(lines))
        except Exception as exc:
            show_failure(box, out, summary, "run_fn", exc)
        finally:
            button.disabled, button.description = False, "Run"

    button.on_click(go)
    if run:
        go()
    return box


# -- the overlap lesson, as a schedule -----------------------------------------------------

def overlapped_step(compute_s: float, comm_s: float, n_buckets: int = 4,
                    forward_fraction: float = 1 / 3) -> dict[str, float]:
    """Step time with and without overlap, for a backward that frees ``n_buckets`` equal buckets.

    Forward takes ``forward_fraction`` of ``compute_s``, backward the rest; bucket k is ready
    when the k-th slice of backward ends, and the network sends buckets one at a time, each
    taking ``comm_s / n_buckets``. Returns ``sequential`` (compute + comm), ``overlapped``
    (when the last bucket lands) and ``bound`` (max(compute, comm): perfect overlap).
    """
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    forward = compute_s * forward_fraction
    backward = compute_s - forward
    t = 0.0
    for k in range(n_buckets):
        ready = forward + backward * (k + 1) / n_buckets
        t = max(t, ready) + comm_s / n_buckets
    return {"sequential": compute_s + comm_s, "overlapped": t, "bound": max(compute_s, comm_s)}


def plot_step_overlap(compute_s: float, comm_s: float, n_buckets: int = 4, forward_fraction: float = 1 / 3,
                      ax=None) -> Figure:
    """Two schedules of one step: all-reduce after backward, and bucketed all-reduce during it."""
    times = overlapped_step(compute_s, comm_s, n_buckets, forward_fraction)
    forward, backward = compute_s * forward_fraction, compute_s * (1 - forward_fraction)
    if ax is None:
        fig = Figure(figsize=(10, 2.8), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    green = op_color("all_reduce")

    def compute_row(y):
        ax.barh(y, forward, left=0, height=0.35, color="#9ecae1", edgecolor="white", gid="forward")
        ax.barh(y, backward, left=forward, height=0.35, color="#3182bd", edgecolor="white", gid="backward")

    compute_row(0)
    ax.barh(0.4, comm_s, left=compute_s, height=0.35, color=green, edgecolor="white", gid="comm")
    compute_row(1.2)
    t = 0.0
    for k in range(n_buckets):
        ready = forward + backward * (k + 1) / n_buckets
        start = max(t, ready)
        t = start + comm_s / n_buckets
        ax.barh(1.6, comm_s / n_buckets, left=start, height=0.35, color=green, edgecolor="white", gid="comm")
    for y, total in ((0.2, times["sequential"]), (1.4, times["overlapped"])):
        ax.axvline(total, ymin=0, ymax=1, color="#999999", linewidth=0.6, linestyle=":")
        ax.text(total, y, f"  step {human_seconds(total)}", va="center", ha="left", fontsize=9, fontweight="bold")
    ax.set_yticks([0, 0.4, 1.2, 1.6], ["compute", "all-reduce after backward", "compute",
                                       f"all-reduce in {n_buckets} buckets"])
    ax.set_ylim(1.95, -0.35)
    ax.set_xlim(0, times["sequential"] * 1.22)
    ax.set_xlabel("seconds")
    ax.set_title(f"compute {human_seconds(compute_s)}, communication {human_seconds(comm_s)}: "
                 f"{human_seconds(times['sequential'])} one after the other (top), "
                 f"{human_seconds(times['overlapped'])} overlapped (bottom)", fontsize=10)
    ax.legend(handles=[Patch(color="#9ecae1", label="forward"), Patch(color="#3182bd", label="backward"),
                       Patch(color=green, label="gradient all-reduce")], loc="upper center",
              bbox_to_anchor=(0.5, -0.3), ncols=3, frameon=False, fontsize=8)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    return fig
