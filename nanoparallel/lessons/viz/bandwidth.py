"""How long one message takes on each kind of link: the alpha-beta model as a bar chart.

    fig = plot_link_times(14e9)         # 7B parameters of bf16 gradients

Each bar is ``link.time(nbytes)`` = latency + nbytes / bandwidth (`nanoparallel.lessons.cost`), on a
log axis because the links differ by orders of magnitude and so do message sizes. Small
messages show the latency floor, large ones the bandwidth. Pure: returns a `Figure`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from nanoparallel.runtime.units import human_bytes, human_rate, human_seconds

# One colour per link kind, fixed across figures; other links take the next free colour.
LINK_COLORS = {"nvlink": "#76b900", "pcie": "#4e79a7", "infiniband": "#f28e2b", "infiniband_hdr": "#e15759"}
_OTHER = ("#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")


def plot_link_times(nbytes: float, links: Mapping | None = None, ax=None) -> Figure:
    """Bar per link (first link on top): the time to move ``nbytes`` over it, log x axis.

    ``links`` maps a key to a `cost.Link` (default `cost.LINKS`). Bars start at 0 and have
    width ``link.time(nbytes)`` in seconds; the tick labels turn seconds into "1 ms".
    """
    if links is None:
        from nanoparallel.lessons.cost import LINKS as links
    if not isinstance(links, Mapping):  # a list of Link objects also works
        links = {link.name: link for link in links}
    if not links:
        raise ValueError("plot_link_times needs at least one link.")
    keys = list(links)
    times = [float(links[k].time(nbytes)) for k in keys]

    if ax is None:
        fig = Figure(figsize=(9, 1.3 + 0.55 * len(keys)), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    others = iter(_OTHER * (len(keys) // len(_OTHER) + 1))
    colors = [LINK_COLORS.get(k) or next(others) for k in keys]
    ax.barh(range(len(keys)), times, left=0, height=0.6, color=colors, gid="link")
    ax.set_xscale("log")
    # From the decade below the shortest bar, with 1.6 decades of room for the labels on the right.
    lo, hi = min(times), max(times)
    left = 10.0 ** math.floor(math.log10(lo))
    ax.set_xlim(left / 10 if lo < 2 * left else left, hi * 10 ** 1.6)
    ax.set_ylim(len(keys) - 0.5, -0.5)  # first link on top
    ax.set_yticks(range(len(keys)), [str(getattr(links[k], "name", k)) for k in keys])
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_seconds(x).replace(".0 ", " ")))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="y", length=0)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    for i, (k, t) in enumerate(zip(keys, times)):
        ax.annotate(f"{human_seconds(t)}", (t, i), xytext=(4, 0), textcoords="offset points",
                    ha="left", va="center", fontsize=9, fontweight="bold")
        link = links[k]
        ax.annotate(f"{human_rate(link.bandwidth)}, {human_seconds(link.latency)} latency", (t, i), xytext=(4, -9),
                    textcoords="offset points", ha="left", va="top", fontsize=7.5, color="#555555")
    ax.set_xlabel("time for one message (latency + size / bandwidth), log scale")
    ax.set_title(f"Moving {human_bytes(nbytes)} over one link")
    return fig
