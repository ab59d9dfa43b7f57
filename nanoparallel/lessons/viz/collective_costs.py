"""A collective's time against message size for each algorithm, in the alpha-beta model.

    fig = plot_collective_costs("all_reduce", world_size=8, link=cost.LINKS["nvlink"])
    cost_widget()          # alpha and beta sliders, hardware presets, P, the collective

Each curve is `nanoparallel.lessons.cost.collective_time`: steps·alpha + bytes on the busiest rank /
beta (Thakur, Rabenseifner & Gropp 2005). On log-log axes a latency-bound algorithm is flat
at small sizes and every curve becomes a line of slope 1 once bandwidth dominates; where two
curves cross (`crossovers`), the cheaper algorithm changes. Pure: returns a `Figure`.
"""
from __future__ import annotations

import itertools
import math

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from nanoparallel.lessons import cost
from nanoparallel.runtime.units import human_bytes, human_rate, human_seconds
from nanoparallel.lessons.viz.widgets import CUSTOM, log_slider_shows, show_figure

ALGORITHM_COLORS = {"naive": "#7f7f7f", "tree": "#d62728", "ring": "#1f77b4", "halving_doubling": "#2ca02c"}
# Curves of different algorithms coincide where their alpha terms match: styles keep both visible.
ALGORITHM_STYLES = {"naive": ":", "tree": "--", "ring": "-", "halving_doubling": "-."}
ALGORITHM_LABELS = {"naive": "naive (one root)", "tree": "binomial tree", "ring": "ring",
                    "halving_doubling": "recursive halving-doubling"}
# (label, link key, P): one node of 8 GPUs, and 8 nodes of 8 talking across InfiniBand.
PRESETS = (
    ("NVLink inside a node (8 GPUs)", "nvlink", 8),
    ("InfiniBand across nodes (64 GPUs)", "infiniband", 64),
    ("PCIe Gen5 (8 GPUs)", "pcie", 8),
    ("InfiniBand HDR across nodes (64 GPUs)", "infiniband_hdr", 64),
)


def crossovers(op: str, world_size: int, link: cost.Link, algorithms=cost.ALGORITHMS,
               lo: float = 1.0, hi: float = 1e11) -> list[tuple[float, str, str]]:
    """Sizes in [lo, hi] where two algorithms cost the same: ``(bytes, cheaper below, cheaper above)``."""
    found = []
    for a, b in itertools.combinations(algorithms, 2):
        n = cost.crossover_size(op, world_size, link, a, b, lo=lo, hi=hi)
        if n is None or not lo < n < hi:
            continue
        below_a = cost.collective_time(op, n / 2, world_size, link, a) < cost.collective_time(op, n / 2, world_size, link, b)
        found.append((n, a, b) if below_a else (n, b, a))
    return sorted(found)


def _short(algorithm: str) -> str:
    return ALGORITHM_LABELS[algorithm].split(" (")[0]


def fastest(op: str, nbytes: float, world_size: int, link: cost.Link, algorithms=cost.ALGORITHMS) -> str:
    """The algorithm with the smallest modelled time for one message size."""
    return min(algorithms, key=lambda a: float(cost.collective_time(op, nbytes, world_size, link, a)))


def plot_collective_costs(op: str = "all_reduce", world_size: int = 8, link: cost.Link | None = None,
                          algorithms=cost.ALGORITHMS, lo: float = 1.0, hi: float = 1e11,
                          ax=None) -> Figure:
    """Time against message size, one line per algorithm, crossovers marked, log-log axes."""
    link = cost.LINKS["nvlink"] if link is None else link
    algorithms = [a for a in cost.ALGORITHMS if a in set(algorithms)]
    if not algorithms:
        raise ValueError("plot_collective_costs needs at least one algorithm.")
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
    sizes = np.logspace(math.log10(lo), math.log10(hi), 400)
    if ax is None:
        fig = Figure(figsize=(9, 5.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    for a in algorithms:
        times = cost.collective_time(op, sizes, world_size, link, a)
        steps = cost.collective_steps(op, world_size, a)
        share = float(cost.busiest_rank_bytes(op, 1.0, world_size, a))
        ax.plot(sizes, times, color=ALGORITHM_COLORS[a], linestyle=ALGORITHM_STYLES[a], linewidth=2,
                gid=f"curve:{a}",
                label=f"{ALGORITHM_LABELS[a]}: {steps}·α + {share:.3g}·N/β")
    notes = []
    for i, (n, below, above) in enumerate(crossovers(op, world_size, link, algorithms, lo, hi), 1):
        t = float(cost.collective_time(op, n, world_size, link, below))
        ax.plot([n], [t], "o", markersize=7, markerfacecolor="white", markeredgecolor="black",
                markeredgewidth=1.5, zorder=5, gid="crossover")
        ax.annotate(str(i), (n, t), xytext=(-4, 5), textcoords="offset points", fontsize=8,
                    fontweight="bold", ha="right", va="bottom")
        notes.append(f"{i}  {_short(below)} → {_short(above)} at {human_bytes(n)}")
    if notes:  # below the rising curves, the lower right corner is empty
        ax.text(0.98, 0.03, "cheaper algorithm changes:\n" + "\n".join(notes), transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8, color="#333333", gid="crossover-notes",
                bbox=dict(boxstyle="round,pad=0.4", fc="white", ec="#cccccc"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    for axis, fmt in ((ax.xaxis, lambda x, _: human_bytes(x)), (ax.yaxis, lambda y, _: human_seconds(y))):
        axis.set_major_locator(LogLocator(base=10, numticks=12))
        axis.set_major_formatter(FuncFormatter(fmt))
        axis.set_minor_formatter(NullFormatter())
    ax.grid(which="major", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    ax.set_xlabel("message size N (for all_gather: the gathered output)")
    ax.set_ylabel("time (alpha-beta model)")
    ax.set_title(f"{op} on P = {world_size} ranks over {link.name}: "
                 f"α = {human_seconds(link.latency)}, β = {human_rate(link.bandwidth)}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    return fig


def cost_widget(op: str = "all_reduce", world_size: int = 8) -> widgets.VBox:
    """Sliders for alpha, beta and P, a hardware preset and the collective, over `plot_collective_costs`.

    A preset sets alpha, beta and P; moving a slider afterwards makes it "custom". While a preset
    is chosen, labels, figure and summary use its exact link, not the sliders' rounding of it
    (3 µs and 400 GB/s would come back from the browser as 3.2 µs and 398 GB/s). Attributes:
    ``preset`` (an index into `PRESETS`, or `CUSTOM`), ``op``, ``alpha_slider`` (s),
    ``beta_slider`` (bytes/s), ``world_size``, ``algorithms`` (a dict of checkboxes), ``summary``
    (HTML), ``output`` and ``figure``.
    """
    first = cost.LINKS[PRESETS[0][1]]
    preset = widgets.Dropdown(options=[("custom", CUSTOM)] + [(label, i) for i, (label, _, _) in enumerate(PRESETS)],
                              value=0, description="hardware", layout=widgets.Layout(width="380px"))
    op_box = widgets.Dropdown(options=list(cost.COLLECTIVES), value=op, description="collective",
                              layout=widgets.Layout(width="260px"))
    alpha = widgets.FloatLogSlider(value=first.latency, base=10, min=-7, max=-3, step=0.05,
                                   description="α latency", readout=False, layout=widgets.Layout(width="360px"))
    beta = widgets.FloatLogSlider(value=first.bandwidth, base=10, min=9, max=12.5, step=0.05,
                                  description="β bandwidth", readout=False, layout=widgets.Layout(width="360px"))
    alpha_label, beta_label = widgets.Label(), widgets.Label()
    size = widgets.IntSlider(value=world_size, min=2, max=1024, description="P ranks",
                             layout=widgets.Layout(width="360px"))
    checks = {a: widgets.Checkbox(value=True, description=ALGORITHM_LABELS[a], indent=False,
                                  layout=widgets.Layout(width="auto")) for a in cost.ALGORITHMS}
    summary, out = widgets.HTML(), widgets.Output()
    box = widgets.VBox([widgets.HBox([preset, op_box]), widgets.HBox([alpha, alpha_label]),
                        widgets.HBox([beta, beta_label]), size, widgets.HBox(list(checks.values())),
                        out, summary])
    box.preset, box.op, box.alpha_slider, box.beta_slider, box.world_size = preset, op_box, alpha, beta, size
    box.algorithms, box.summary, box.output, box.figure = checks, summary, out, None
    syncing = [False]  # a preset moves three sliders: draw once, after the last

    def on_preset(i: int) -> bool:
        _, key, P = PRESETS[i]
        link = cost.LINKS[key]
        return log_slider_shows(alpha, link.latency) and log_slider_shows(beta, link.bandwidth) and size.value == P

    def redraw(change=None):
        if syncing[0]:
            return
        if preset.value != CUSTOM and not on_preset(preset.value):
            preset.value = CUSTOM  # the learner moved away from the preset; use_preset redraws
            return
        if preset.value == CUSTOM:
            link = cost.Link("custom link", bandwidth=beta.value, latency=alpha.value)
        else:
            link = cost.LINKS[PRESETS[preset.value][1]]  # the preset exactly
        alpha_label.value, beta_label.value = human_seconds(link.latency), human_rate(link.bandwidth)
        shown = [a for a, c in checks.items() if c.value] or ["ring"]
        box.figure = plot_collective_costs(op_box.value, size.value, link, shown)
        show_figure(out, box.figure)
        points = crossovers(op_box.value, size.value, link, shown)
        lines = [f"{ALGORITHM_LABELS[b]} is cheaper below {human_bytes(n)}, {ALGORITHM_LABELS[a]} above"
                 for n, b, a in points] or ["no crossover between the algorithms shown: one is never slower"]
        best = [f"{human_bytes(n)}: {ALGORITHM_LABELS[fastest(op_box.value, n, size.value, link, shown)]}"
                for n in (1e3, 1e6, 1e9)]
        summary.value = ("<br>".join(lines) + "<br><b>fastest</b> at " + ", ".join(best))

    def use_preset(change):
        if change["new"] != CUSTOM and not on_preset(change["new"]):
            _, key, P = PRESETS[change["new"]]
            link = cost.LINKS[key]
            syncing[0] = True
            try:
                alpha.value, beta.value, size.value = link.latency, link.bandwidth, P
            finally:
                syncing[0] = False
        redraw()

    for w in (alpha, beta, size, op_box, *checks.values()):
        w.observe(redraw, names="value")
    preset.observe(use_preset, names="value")
    redraw()
    return box
