"""A `Trace` as a timeline: one row per rank, one bar per call, one arrow per message.

    fig = plot_trace(result.trace)      # or result.trace.plot()

Pure: returns a matplotlib `Figure` built without pyplot, so nothing is shown, printed or
left open; a notebook displays the returned figure, a test reads its artists. Bars carry a
gid ("event", "compute", "never-waited", "message") so tests can count them.
"""
from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle
from matplotlib.transforms import ScaledTranslation, blended_transform_factory

from nanoparallel.runtime.units import human_bytes

if TYPE_CHECKING:  # a Trace draws itself with this module (Trace.plot): no import back at run time
    from nanoparallel.runtime.trace import Trace, TraceEvent

# A fixed colour per op, so a colour means the same call in every figure of the course.
# Aliases of one collective share its colour; blocking and async p2p differ in lightness.
OP_COLORS = {
    "send": "#1f77b4", "isend": "#6fa8dc",
    "recv": "#e6730b", "irecv": "#f6b26b",
    "all_reduce": "#2ca02c",
    "all_gather": "#9467bd", "all_gather_single": "#9467bd", "all_gather_into_tensor": "#9467bd",
    "all_gather_object": "#9467bd",
    "reduce_scatter": "#8c564b", "reduce_scatter_single": "#8c564b", "reduce_scatter_tensor": "#8c564b",
    "broadcast": "#d62728", "broadcast_object_list": "#d62728",
    "reduce": "#e377c2",
    "scatter": "#bcbd22", "gather": "#17becf",
    "all_to_all": "#b45f06", "all_to_all_single": "#b45f06",
    "barrier": "#3d3d8f", "monitored_barrier": "#3d3d8f",
}
# Unknown ops hash into this palette (stable across processes, unlike hash()).
_FALLBACK = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f")
COMPUTE_COLOR = "#c8c8c8"
ARROW_COLOR = "#333333"


def op_color(op: str) -> str:
    """The colour of ``op`` in every timeline."""
    return OP_COLORS.get(op) or _FALLBACK[zlib.crc32(op.encode()) % len(_FALLBACK)]


def _text_on(color: str) -> str:
    """Black on light bars, white on dark ones (relative luminance, WCAG weights)."""
    r, g, b = to_rgb(color)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "white"


def event_label(e: TraceEvent) -> str:
    """``send→2``, ``recv←1``, ``all_reduce``, or the region name for compute."""
    if e.kind == "comm" and e.op in ("send", "isend"):
        return f"{e.op}→{e.peer}"
    if e.kind == "comm" and e.op in ("recv", "irecv"):
        return f"{e.op}←{'any' if e.peer is None else e.peer}"
    return e.op


def match_messages(trace: Trace) -> list[tuple[TraceEvent, TraceEvent]]:
    """Pairs (send, recv): the k-th send from a to b with the k-th recv on b from a."""
    sends: dict[tuple[int, int], list[TraceEvent]] = {}
    recvs: dict[tuple[int, int], list[TraceEvent]] = {}
    for e in trace.comm():  # already sorted by start time
        if e.peer is None:
            continue
        if e.op in ("send", "isend"):
            sends.setdefault((e.rank, e.peer), []).append(e)
        elif e.op in ("recv", "irecv"):
            recvs.setdefault((e.peer, e.rank), []).append(e)
    return [pair for key, ss in sends.items() for pair in zip(ss, recvs.get(key, []))]


def _assign_lanes(events: list[TraceEvent], t_open: float) -> tuple[dict[int, int], int]:
    """Lane per event (by id) so that overlapping bars of one rank never cover each other."""
    lane_end: list[float] = []
    lanes = {}
    for e in sorted(events, key=lambda e: (e.start, -(e.end or t_open))):
        end = t_open if e.end is None else e.end
        for i, last in enumerate(lane_end):
            if last <= e.start:
                break
        else:
            i = len(lane_end)
            lane_end.append(0.0)
        lane_end[i] = end
        lanes[id(e)] = i
    return lanes, max(1, len(lane_end))


def _empty_figure(ax, title: str | None) -> Figure:
    fig = Figure(figsize=(8, 2), layout="constrained") if ax is None else ax.figure
    ax = ax if ax is not None else fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, "no communication recorded", ha="center", va="center",
            fontsize=12, color="#666666", transform=ax.transAxes)
    if title:
        ax.set_title(title)
    return fig


def style_rank_axes(ax, n_rows: int, xlabel: str) -> None:
    """The look every per-rank timeline shares: one row per rank, rank 0 at the top, a light grid."""
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_yticks(range(n_rows), [f"rank {r}" for r in range(n_rows)])
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", length=0)
    for spine in ("top", "right", "left"):
        ax.spines[spine].set_visible(False)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)


# Long: one figure drawn top to bottom (rows, lanes, bars, arrows, byte totals, legend),
# each part using the time axis and lane rows the part before it laid out.
def plot_trace(trace: Trace, ax=None, title: str | None = None, show_bytes: bool = True) -> Figure:
    """Draw ``trace`` as a timeline and return the figure (``ax``'s figure if given).

    Rows are ranks (rank 0 at the top), the x axis is milliseconds since the run began.
    Coloured bars are torch.distributed calls (colour by op, see `OP_COLORS`), grey hatched
    bars are `region(...)` compute blocks, arrows join the k-th send from a to b to the k-th
    recv on b from a. An async op that was never waited on is an outlined bar running off
    the right edge. Bars shorter than 0.3% of the run are widened to stay visible.
    """
    events = list(trace.events)
    if not events:
        return _empty_figure(ax, title)
    n_rows = max([trace.world_size] + [e.rank + 1 for e in events])
    ms = 1e3
    t_last = max(max(e.start for e in events), max((e.end for e in events if e.end is not None), default=0.0))
    t_last = t_last if t_last > 0 else 1e-3
    dangling = [e for e in events if e.end is None]
    t_right = t_last * (1.2 if dangling else 1.02)  # room for the bars that never end
    min_width = 0.003 * t_right

    if ax is None:
        fig = Figure(figsize=(10, 1.9 + 0.75 * n_rows), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    # Label fitting needs data units per character; estimate from the axes' width in inches
    # (constrained layout shrinks it a little later, hence the margin of 0.8).
    axes_inches = ax.get_position().width * fig.get_figwidth() * 0.8
    ms_per_inch = t_right * ms / axes_inches
    char_inches = 0.55 * 7.5 / 72  # fontsize 7.5, average glyph width ≈ 0.55 em

    row_h = 0.7
    positions: dict[int, tuple[float, float, float]] = {}  # id(event) -> (x0 in ms, y, height)
    for rank in range(n_rows):
        mine = [e for e in events if e.rank == rank]
        lanes, n_lanes = _assign_lanes(mine, t_right)
        lane_h = row_h / n_lanes
        for e in mine:
            y = rank - row_h / 2 + (lanes[id(e)] + 0.5) * lane_h  # lane 0 on top (y axis inverted)
            x0 = e.start * ms
            width = max((t_right if e.end is None else e.end) - e.start, min_width) * ms
            label = event_label(e)
            h = lane_h * 0.86
            if e.kind == "compute":
                bar = Rectangle((x0, y - h / 2), width, h, facecolor=COMPUTE_COLOR, edgecolor="#8a8a8a",
                                hatch="///", linewidth=0.6, zorder=1, gid="compute")
                text_color = "#333333"
            elif e.end is None:
                bar = Rectangle((x0, y - h / 2), width, h, facecolor="white", edgecolor=op_color(e.op),
                                linestyle="--", linewidth=1.4, zorder=2, gid="never-waited")
                label = f"{label} · never waited"
                text_color = op_color(e.op)
            else:
                bar = Rectangle((x0, y - h / 2), width, h, facecolor=op_color(e.op), edgecolor="white",
                                linewidth=0.5, zorder=2, gid="event")
                text_color = _text_on(op_color(e.op))
            ax.add_patch(bar)
            fits = len(label) * char_inches * ms_per_inch < width * 0.95 and lane_h >= 0.2
            if fits:
                ax.text(x0 + width / 2, y, label, ha="center", va="center", fontsize=7.5,
                        color=text_color, zorder=4, clip_on=True,
                        fontweight="bold" if e.kind == "comm" else "normal",
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85)
                        if e.kind == "compute" else None)
            elif e.end is None:  # the note matters even when the op name does not fit
                ax.text(t_right * ms, y, "never waited ", ha="right", va="center", fontsize=7.5,
                        color=text_color, zorder=4)
            positions[id(e)] = (x0, y, h)

    for send, recv in match_messages(trace):
        sx, sy, sh = positions[id(send)]
        rx, ry, rh = positions[id(recv)]
        r_end = (t_right if recv.end is None else recv.end) * ms
        down = ry > sy  # the y axis is inverted: larger y is lower on the page
        start = (sx, sy + (sh / 2 if down else -sh / 2))
        end = (r_end, ry - (rh / 2 if down else -rh / 2))
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9,
                                     color=ARROW_COLOR, linewidth=0.9, alpha=0.8, zorder=3,
                                     shrinkA=0, shrinkB=0, gid="message"))

    ax.set_xlim(0, t_right * ms)
    style_rank_axes(ax, n_rows, "time since the run began (ms)")
    if title:
        ax.set_title(title)

    if show_bytes:
        at_right = blended_transform_factory(ax.transAxes, ax.transData)
        sent, recv = trace.bytes_sent(), trace.bytes_received()
        for r in range(n_rows):
            s, v = (sent[r], recv[r]) if r < len(sent) else (0, 0)
            ax.text(1.01, r, f"↑{human_bytes(s)} ↓{human_bytes(v)}", transform=at_right,
                    ha="left", va="center", fontsize=8, color="#333333")

    if not trace.comm():
        ax.text(0.5, 1.0, "no communication recorded", transform=ax.transAxes, ha="center",
                va="bottom", fontsize=9, color="#666666")
    _legend(ax, fig, events, dangling)
    return fig


def _legend(ax, fig, events: list[TraceEvent], dangling: list[TraceEvent]) -> None:
    ops = list(dict.fromkeys(e.op for e in events if e.kind == "comm"))  # in order of first call
    handles = [Patch(facecolor=op_color(op), label=op) for op in ops]
    if any(e.kind == "compute" for e in events):
        handles.append(Patch(facecolor=COMPUTE_COLOR, edgecolor="#8a8a8a", hatch="///", label="compute"))
    if dangling:
        handles.append(Patch(facecolor="white", edgecolor="#555555", linestyle="--", label="never waited"))
    # Below the x label, whatever the axes' height: offset in inches from the axes' bottom.
    below = ax.transAxes + ScaledTranslation(0, -0.42, fig.dpi_scale_trans)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below,
              ncols=min(len(handles), 8), frameon=False, fontsize=8, handlelength=1.5)
