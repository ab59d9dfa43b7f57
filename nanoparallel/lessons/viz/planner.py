"""Notebook 07's planner pictures: memory per GPU and step time of the best plans, and where
in (TP, PP) a plan fits at all, all drawn from the learner's memory and time functions.

    plot_plans(ranked, gpu_memory)                 # stacked bars: memory and time per plan
    plot_feasible(ranked, candidates)              # heatmap: best step time per (TP, PP)
    planner_widget(memory_fn, time_fn)             # model, cluster and batch as controls

Pure ``plot_*`` functions return a matplotlib `Figure` built without pyplot. Each bar segment has
gid ``"<part>/<i>"`` (i: the plan's position), each heatmap cell's value is in ``fig.grid``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from nanoparallel.lessons.planner import CLUSTERS, MODELS, NEOX_CLUSTER, NEOX_20B, NEOX_PLAN, Ranked, candidate_plans, search
from nanoparallel.lessons.viz.widgets import pre_html, show_failure, show_figure

MEMORY_PARTS = ("parameters", "gradients", "optimizer", "activations")
TIME_PARTS = ("compute", "bubble", "tp", "pp", "dp")
COLORS = ["#4a86c5", "#e6730b", "#2bb0a6", "#c0504d", "#8e6bbf"]


def _label(r: Ranked) -> str:
    p = r.plan
    return f"{p.tp}x{p.pp}x{p.dp} Z{p.zero} b{p.micro_batch}{' rc' if p.recompute else ''}"


def plot_plans(ranked: Sequence[Ranked], gpu_memory: float, title: str = "") -> Figure:
    """Two panels over the same plans: memory per GPU (GB, stacked by part, the GPU's memory as
    a dashed line) and seconds per step (stacked by part)."""
    fig = Figure(figsize=(11, 3.8))
    mem_ax, time_ax = fig.subplots(1, 2)
    xs = np.arange(len(ranked))
    for ax, parts, field, scale in ((mem_ax, MEMORY_PARTS, "memory", 1e9), (time_ax, TIME_PARTS, "time", 1.0)):
        bottom = np.zeros(len(ranked))
        for part, color in zip(parts, COLORS):
            values = np.array([getattr(r, field).get(part, 0.0) / scale for r in ranked])
            bars = ax.bar(xs, values, bottom=bottom, color=color, label=part)
            for i, bar in enumerate(bars):
                bar.set_gid(f"{part}/{i}")
            bottom += values
        ax.set_xticks(xs, [_label(r) for r in ranked], rotation=35, ha="right", fontsize=7)
        ax.set_xlabel("TP x PP x DP, ZeRO stage, micro-batch (rc: recomputation)", fontsize=7)
        if ranked:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if not ranked:  # nothing fits: say so instead of drawing empty axes
        for ax in (mem_ax, time_ax):
            ax.set_xlim(-0.5, 0.5)
            ax.text(0, 0.5, "no plan fits in memory", ha="center", va="center", transform=ax.get_xaxis_transform())
    mem_ax.axhline(gpu_memory / 1e9, color="#333333", ls="--", lw=1)
    mem_ax.set_ylabel("GB per GPU")
    mem_ax.set_title("memory per GPU")
    time_ax.set_ylabel("seconds per step")
    time_ax.set_title("step time")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_feasible(ranked: Sequence[Ranked], candidates, title: str = "fastest plan that fits, per (TP, PP)") -> Figure:
    """Heatmap over (TP, PP): the best step time among the plans that fit; blank where none
    does. ``fig.grid`` holds the values (NaN: nothing fits), rows TP, columns PP."""
    tps = sorted({p.tp for p in candidates})
    pps = sorted({p.pp for p in candidates})
    grid = np.full((len(tps), len(pps)), np.nan)
    for r in ranked:
        i, j = tps.index(r.plan.tp), pps.index(r.plan.pp)
        grid[i, j] = r.seconds if np.isnan(grid[i, j]) else min(grid[i, j], r.seconds)
    fig = Figure(figsize=(5, 3.6))
    ax = fig.subplots()
    fig.grid = grid
    if not np.isfinite(grid).any():  # nothing fits (or no plan divides the work): say so
        ax.text(0.5, 0.5, "no plan fits in memory" if grid.size else "no plan divides the work evenly",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title, fontsize=10)
        return fig
    low, high = np.nanmin(grid), np.nanmax(grid)
    norm = LogNorm(low * 0.9, high * 1.1) if low == high else LogNorm(low, high)  # one value: a band around it
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis_r", norm=norm, aspect="auto")
    for i in range(len(tps)):
        for j in range(len(pps)):
            value = grid[i, j]
            dark = not np.isnan(value) and norm(value) > 0.5  # dark cells: white text
            ax.text(j, i, "-" if np.isnan(value) else f"{value:.1f}", ha="center", va="center",
                    fontsize=8, color="white" if dark else ("#999999" if np.isnan(value) else "black"))
    ax.set_xticks(range(len(pps)), [str(p) for p in pps])
    ax.set_yticks(range(len(tps)), [str(t) for t in tps])
    ax.set_xlabel("PP (stages)")
    ax.set_ylabel("TP (ranks)")
    ax.set_title(title, fontsize=10)
    bar = fig.colorbar(image, ax=ax, label="seconds per step")
    # plain tick labels: LogNorm's default "3 x 10^1" needs mathtext fonts a fresh install may lack
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ticks = [v for v in (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000) if norm.vmin <= v <= norm.vmax]
    if ticks:
        bar.set_ticks(ticks)
    fig.tight_layout()
    return fig


def planner_widget(memory_fn: Callable, time_fn: Callable, batches=(384, 768, 1536, 3072, 6144),
                   top: int = 6) -> widgets.VBox:
    """The planner over model and cluster presets and a global batch: the `top` fastest plans
    that fit (and the published GPT-NeoX-20B plan when that run is chosen), and the (TP, PP)
    heatmap. Errors in the learner's functions show in the widget. Attributes: ``model``,
    ``cluster``, ``batch``, ``output`` (the bars; the heatmap has its own), ``text``, ``figure``,
    ``heatmap``, ``ranked``, ``error``."""
    model = widgets.Dropdown(options=list(MODELS), value=NEOX_20B.name, description="model")
    cluster = widgets.Dropdown(options=list(CLUSTERS), value=NEOX_CLUSTER.name, description="cluster")
    batch = widgets.SelectionSlider(options=list(batches), value=1536, description="global batch",
                                    style={"description_width": "initial"})
    out, heat, text = widgets.Output(), widgets.Output(), widgets.HTML()
    box = widgets.VBox([widgets.HBox([model, cluster]), batch, out, widgets.HBox([heat, text])])
    box.model, box.cluster, box.batch, box.output, box.text = model, cluster, batch, out, text
    box.figure = box.heatmap = box.error = None
    box.ranked = []

    def redraw(change=None):
        m, c, b = MODELS[model.value], CLUSTERS[cluster.value], batch.value
        try:
            ranked = search(m, c, b, memory_fn, time_fn)
            shown = list(ranked[:top])
            if (m, c, b) == (NEOX_20B, NEOX_CLUSTER, 1536):
                published = Ranked(NEOX_PLAN, memory_fn(m, NEOX_PLAN), time_fn(m, c, NEOX_PLAN))
                if published.plan not in [r.plan for r in shown]:
                    shown.append(published)
            box.figure = plot_plans(shown, c.memory, f"{m.name} on {c.name}, {b} sequences per step")
            box.heatmap = plot_feasible(ranked, candidate_plans(m, c, b))
            box.ranked, box.error = ranked, None
        except Exception as exc:  # the learner's functions failed: say so, keep the kernel calm
            show_failure(box, out, text, "search(...)", exc)
            box.heatmap = None
            heat.clear_output()
            return
        show_figure(out, box.figure)
        show_figure(heat, box.heatmap)
        lines = [f"{len(ranked)} plans fit"] + [f"{i + 1}. {r.plan.describe()}: {r.seconds:.2f} s, {r.bytes / 1e9:.1f} GB"
                                                 for i, r in enumerate(ranked[:3])]
        text.value = pre_html("\n".join(lines))

    for control in (model, cluster, batch):
        control.observe(redraw, names="value")
    redraw()
    return box
