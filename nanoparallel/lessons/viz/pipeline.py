"""Pipeline schedules as Gantt charts, simulated or measured, and the schedule explorer.

    plot_schedule(simulate(schedule, 1, 1, 1))              # one row per stage, one bar per op
    plot_schedule(timeline_from_trace(result.trace))        # the same for a real run
    schedule_explorer({"1F1B": my_1f1b, "ZB-H1": my_zb_h1}) # p, m, T_F/T_B/T_W sliders

Pure ``plot_*`` functions return a matplotlib `Figure` built without pyplot. Bars carry the
gid of their op kind ("F", "B", "W", "BW"), so tests can count them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from nanoparallel.lessons.pipeline.schedule import Timeline, simulate
from nanoparallel.runtime.timeline import style_rank_axes
from nanoparallel.lessons.viz.widgets import pre_html, show_failure, show_figure

# The zero-bubble paper's colours, roughly: forward blue, input-gradient backward teal,
# weight-gradient backward green; a full backward is the two together, in purple.
KIND_COLORS = {"F": "#4a86c5", "B": "#2bb0a6", "W": "#8cc63f", "BW": "#8e6bbf"}
KIND_NAMES = {"F": "F: forward", "B": "B: input gradient", "W": "W: weight gradient",
              "BW": "BW: full backward"}
COMM_COLOR = "#e6730b"


def _summary(t: Timeline, unit: str, scale: float) -> str:
    return (f"step {t.step_time * scale:.3g} {unit}, bubble {t.bubble_time * scale:.3g} {unit} "
            f"= {t.bubble_fraction:.1%} of compute; most micro-batches between F and B, per stage: "
            f"{t.peak_in_flight}")


def _memory(t: Timeline, m_w: float) -> str:
    """The explorer's memory line: F-to-W lifetimes and the peak per stage for M_W = m_w M_B."""
    peaks = ", ".join(f"{x:.2f}" for x in t.peak_memory(m_w))
    return (f"\nmost micro-batches between F and W, per stage: {t.peak_held}; peak activations with "
            f"M_W = {m_w:.2f} M_B, per stage, in M_B: [{peaks}]")


def _scale(timeline: Timeline, unit: str | None) -> tuple[str, float]:
    unit = unit or ("ms" if timeline.source == "measured" else "units")
    return unit, (1e3 if unit == "ms" else 1.0)


def _legend(ax, timelines: list[Timeline]) -> None:
    present = {op.kind for t in timelines for stage in t.ops for op, _, _ in stage}
    handles = [Patch(facecolor=KIND_COLORS[k], label=KIND_NAMES[k]) for k in KIND_COLORS if k in present]
    if any(t.source == "measured" and any(t.comm) for t in timelines):
        handles.append(Patch(facecolor=COMM_COLOR, label="waiting in recv"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncols=max(len(handles), 1),
              frameon=False, fontsize=8)


def plot_schedule(timeline: Timeline, ax=None, title: str | None = None, unit: str | None = None,
                  legend: bool = True) -> Figure:
    """Draw ``timeline`` as a Gantt chart: stages as rows (stage 0 on top), ops as bars.

    White space is the bubble. A measured timeline (from `timeline_from_trace`) is drawn in
    milliseconds, with its waits for messages (receives) as thin orange bars under the ops; a simulated
    one in the units of its op times. The subtitle gives step time, bubble and peak in-flight.
    """
    measured = timeline.source == "measured"
    unit, scale = _scale(timeline, unit)
    p = timeline.p
    if ax is None:
        fig = Figure(figsize=(10, 1.3 + 0.55 * max(p, 1)), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    t0, total = timeline.start, max(timeline.step_time, 1e-9)
    for s, stage in enumerate(timeline.ops):
        for op, a, b in stage:
            x, w = (a - t0) * scale, (b - a) * scale
            ax.add_patch(Rectangle((x, s - 0.38), w, 0.76, facecolor=KIND_COLORS[op.kind],
                                   edgecolor="white", linewidth=0.6, gid=op.kind))
            # "B3" where it fits, else just "3" (or "3'" for a second chunk): the colour tells B from F
            label = str(op) if w > total * scale / 32 else str(op)[len(op.kind):] if w > total * scale / 60 else ""
            ax.text(x + w / 2, s, label, ha="center", va="center", fontsize=7.5,
                    color="white" if op.kind != "W" else "black")
        if measured and s < len(timeline.comm):
            for a, b in timeline.comm[s]:
                ax.add_patch(Rectangle(((a - t0) * scale, s + 0.38), max((b - a) * scale, total * scale / 400),
                                       0.1, facecolor=COMM_COLOR, edgecolor="none", gid="comm"))
    ax.set_xlim(0, total * scale * 1.01)
    style_rank_axes(ax, p, f"time ({unit})")
    ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
    if legend:
        _legend(ax, [timeline])
    head = f"{title}\n" if title else ""
    ax.set_title(head + _summary(timeline, unit, scale), fontsize=9)
    return fig


def plot_schedules(timelines: Mapping[str, Timeline], unit: str | None = None) -> Figure:
    """Several timelines one above the other, for comparison: on one time axis when they share a
    clock, which they do when all come from the same source or when `unit` is given (a unit says
    every timeline is in seconds: a run measured and one simulated with the run's op times)."""
    items = list(timelines.items())
    rows = sum(t.p for _, t in items)
    fig = Figure(figsize=(10, 1.2 * len(items) + 0.45 * rows + 0.6), layout="constrained")
    same_clock = unit is not None or len({t.source for _, t in items}) == 1  # simulated units and ms do not share an axis
    axes = fig.subplots(len(items), 1, sharex=same_clock, squeeze=False,
                        height_ratios=[max(t.p, 1) + 1.2 for _, t in items])[:, 0]
    for ax, (name, t) in zip(axes, items):
        plot_schedule(t, ax=ax, title=name, unit=unit, legend=False)
    if same_clock:
        scale = _scale(items[0][1], unit)[1]
        right = max(t.step_time for _, t in items) * scale * 1.01
        for ax in axes:
            ax.set_xlim(0, right)
        for ax in axes[:-1]:  # one shared axis: its ticks and label only under the last panel
            ax.set_xlabel("")
    _legend(axes[-1], [t for _, t in items])
    return fig


def schedule_explorer(generators: Mapping[str, Callable[[int, int], list]],
                      last_run: Callable[[], Timeline | None] | None = None,
                      p: int = 4, m: int = 8) -> widgets.VBox:
    """Pick a schedule generator (yours), p, m, the op times and M_W/M_B: its Gantt chart, bubble,
    micro-batches between F and B and between F and W, and each stage's peak activations;
    beside it, ``last_run()``'s measured timeline, if given.

    Errors (a generator that raises, a schedule that does not validate) show in red in
    place. Attributes: ``schedule``, ``p``, ``m``, ``t_f``, ``t_b``, ``t_w``, ``output``,
    ``m_w``, ``summary``, ``figure``, ``timeline`` (the last simulated one) and ``error``.
    """
    names = list(generators)
    if not names:
        raise ValueError("schedule_explorer needs at least one schedule generator.")
    schedule = widgets.Dropdown(options=names, value=names[-1], description="schedule")
    wide = {"description_width": "110px"}  # room for "micro-batches m" without truncation
    schedule.style = wide
    p_slider = widgets.IntSlider(value=p, min=1, max=8, description="stages p", style=wide)
    m_slider = widgets.IntSlider(value=m, min=1, max=16, description="micro-batches m", style=wide)
    times = [widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.1, description=label, style=wide)
             for label in ("T_F", "T_B", "T_W")]
    # What a W keeps from B to W, over what B needs (Qi et al. 2024, Table 1): 0.28 for GPT-3
    # 175B, 0.94 with attention recomputed.
    m_w = widgets.FloatSlider(value=0.28, min=0.0, max=1.0, step=0.02, description="M_W / M_B", style=wide)
    out, summary = widgets.Output(), widgets.HTML()
    controls = widgets.VBox([schedule, p_slider, m_slider, *times, m_w])
    box = widgets.VBox([controls, out, summary])
    box.schedule, box.p, box.m, (box.t_f, box.t_b, box.t_w) = schedule, p_slider, m_slider, times
    box.m_w = m_w
    box.output, box.summary = out, summary
    box.figure = box.error = box.timeline = None

    def redraw(change=None):
        name, pp, mm = schedule.value, p_slider.value, m_slider.value
        try:
            box.timeline = simulate(generators[name](pp, mm), *(t.value for t in times), m=mm)
            panels = {f"{name}, p={pp}, m={mm} (simulated)": box.timeline}
            measured = last_run() if last_run is not None else None
            if measured is not None and measured.ops and any(measured.ops):
                panels[f"your last run on the ranks: p={measured.p}, m={measured.m} (measured)"] = measured
            box.figure, box.error = plot_schedules(panels) if len(panels) > 1 else plot_schedule(
                box.timeline, title=next(iter(panels))), None
            show_figure(out, box.figure)
            summary.value = pre_html(_summary(box.timeline, "units", 1.0) + _memory(box.timeline, m_w.value))
        except Exception as exc:  # the learner's generator failed: say so, keep the widget alive
            show_failure(box, out, summary, f"{name}({pp}, {mm})", exc)

    for control in (schedule, p_slider, m_slider, *times, m_w):
        control.observe(redraw, names="value")
    redraw()
    return box
