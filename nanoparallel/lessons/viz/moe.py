"""Notebook 06's pictures: where a router sends each token, and how even the experts' load is.

    plot_routing(weights, experts, keep, n_experts, capacity)   # tokens x experts, capacity, drops
    routing_explorer(route)                                     # the same, capacity factor as a slider
    plot_expert_load({"no aux loss": loads, "aux loss": loads2}, tokens_per_expert)

Pure ``plot_*`` functions return a matplotlib `Figure` built without pyplot. In the routing map a
kept assignment is a coloured cell (gid ``"kept"``, darker for a larger gate weight) and a dropped
one a red cross (gid ``"dropped"``), so tests can count them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from nanoparallel.lessons.viz.widgets import pre_html, show_failure, show_figure


def expert_loads(experts: torch.Tensor, n_experts: int, keep: torch.Tensor | None = None) -> list[int]:
    """Assignments per expert: all of them, or only the kept ones when `keep` is given."""
    chosen = experts[keep] if keep is not None else experts.reshape(-1)
    return torch.bincount(chosen.reshape(-1), minlength=n_experts).tolist()


def plot_routing(weights: torch.Tensor, experts: torch.Tensor, keep: torch.Tensor, n_experts: int,
                 capacity: int, title: str | None = None) -> Figure:
    """Left: one row per token, one column per expert; a cell for every (token, expert) the
    router chose, shaded by its gate weight, a red cross where the expert was full, and (k > 1,
    rows tall enough to read) which of the token's choices it was: 1 first, 2 second. Right: each
    expert's load, kept and dropped, against the capacity."""
    weights, experts, keep = weights.detach().float(), experts.detach(), keep.detach().bool()
    n_tokens, k = experts.shape
    fig = Figure(figsize=(9, max(3.0, min(8.0, 0.18 * n_tokens + 1.2))))
    grid, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(n_experts, 2), 3]})
    top = float(weights.max()) if weights.numel() else 1.0
    # Which choice a cell was shows who goes first when an expert fills up: every first choice
    # is served before any second choice (keep_mask's rule).
    numbered = k > 1 and n_tokens <= 48
    for t in range(n_tokens):
        for j in range(k):
            e, w = int(experts[t, j]), float(weights[t, j])
            if keep[t, j]:
                shade = 0.25 + 0.75 * w / max(top, 1e-12)
                grid.add_patch(Rectangle((e, t), 1, 1, color=(0.16, 0.45, 0.75, shade), gid="kept"))
                ink = "white" if shade > 0.6 else "#1b3a5c"
            else:
                grid.plot([e + 0.2, e + 0.8], [t + 0.2, t + 0.8], color="#c0392b", lw=1.5, gid="dropped")
                grid.plot([e + 0.2, e + 0.8], [t + 0.8, t + 0.2], color="#c0392b", lw=1.5)
                ink = "#7b241c"
            if numbered:
                grid.text(e + 0.88, t + 0.5, str(j + 1), ha="right", va="center", fontsize=6.5, color=ink,
                          gid="choice")
    grid.set_xlim(0, n_experts)
    grid.set_ylim(n_tokens, 0)
    grid.set_xticks(np.arange(n_experts) + 0.5, [str(e) for e in range(n_experts)])
    grid.set_xlabel("expert")
    grid.set_ylabel("token (arrival order)")
    grid.set_title(title or f"top-{k} routing of {n_tokens} tokens\n(darker: larger gate weight"
                   + ("; 1, 2: which choice)" if numbered else ")"), fontsize=10)
    for e in range(1, n_experts):
        grid.axvline(e, color="#dddddd", lw=0.5)

    kept, chosen = expert_loads(experts, n_experts, keep), expert_loads(experts, n_experts)
    xs = np.arange(n_experts)
    bars.bar(xs, kept, color="#2a73bf", label="kept", gid="load_kept")
    bars.bar(xs, [c - kk for c, kk in zip(chosen, kept)], bottom=kept, color="#e8a09a", label="dropped",
             gid="load_dropped")
    bars.axhline(capacity, color="#333333", ls="--", lw=1.2, label=f"capacity {capacity}", gid="capacity")
    bars.set_xticks(xs, [str(e) for e in range(n_experts)])
    bars.set_xlabel("expert")
    bars.set_ylabel("assignments (token, expert)")
    bars.yaxis.set_major_locator(MaxNLocator(integer=True))
    bars.set_title(f"dropped {sum(chosen) - sum(kept)} of {sum(chosen)} assignments")
    bars.set_ylim(0, 1.25 * max(max(chosen, default=0), capacity) + 1)  # headroom: the legend sits above the bars
    bars.legend(fontsize=8, loc="upper left", ncol=3)
    fig.tight_layout()
    return fig


def routing_explorer(route: Callable[[float], tuple], factors=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0),
                     value: float = 1.0) -> widgets.VBox:
    """`plot_routing` of ``route(capacity_factor)``, which returns ``(weights, experts, keep,
    n_experts, capacity)`` from the learner's gating and capacity. Errors show in the widget.
    Attributes: ``capacity_factor``, ``output``, ``text``, ``figure``, ``error``."""
    factor = widgets.SelectionSlider(options=list(factors), value=value, description="capacity factor",
                                     style={"description_width": "initial"})
    out, text = widgets.Output(), widgets.HTML()
    box = widgets.VBox([factor, out, text])
    box.capacity_factor, box.output, box.text = factor, out, text
    box.figure = box.error = None

    def redraw(change=None):
        try:
            weights, experts, keep, n_experts, capacity = route(factor.value)
            box.figure = plot_routing(weights, experts, keep, n_experts, capacity)
            box.error = None
        except Exception as exc:  # the learner's functions failed: say so, keep the kernel calm
            show_failure(box, out, text, f"route({factor.value})", exc)
            return
        show_figure(out, box.figure)
        chosen, kept = expert_loads(experts, n_experts), expert_loads(experts, n_experts, keep)
        text.value = pre_html(f"capacity {capacity} per expert; chosen {chosen}, kept {kept}; "
                              f"{sum(chosen) - sum(kept)} of {sum(chosen)} assignments dropped")

    factor.observe(redraw, names="value")
    redraw()
    return box


def plot_expert_load(runs: Mapping[str, list[list[int]]], even: float | None = None,
                     title: str = "tokens per expert, per training step") -> Figure:
    """One panel per run: each expert's load (assignments per step) over the steps, with the
    even share ``even`` as a dashed line. Each line has gid ``"<run>/expert<e>"``."""
    fig = Figure(figsize=(4.2 * len(runs) + 0.9, 3.2))
    axes = fig.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    for ax, (name, loads) in zip(axes, runs.items()):
        loads = np.asarray(loads)
        for e in range(loads.shape[1]):
            ax.plot(np.arange(len(loads)), loads[:, e], marker=".", label=f"expert {e}", gid=f"{name}/expert{e}")
        if even is not None:
            ax.axhline(even, color="#333333", ls="--", lw=1, label="even share")
        ax.set_title(name)
        ax.set_xlabel("step")
    axes[0].set_ylabel("assignments")
    fig.suptitle(title)
    handles, labels = axes[-1].get_legend_handles_labels()  # beside the panels, never over a line
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return fig
