"""Notebook 05's pictures: who holds which block of each weight, and activation memory per layer.

    plot_sharding(full, shards)                      # shards[r] = {name: shape} of rank r's block
    sharding_explorer(make_shards, full)             # t and sequence parallelism as controls
    plot_activation_memory(formula, s, b, h, a, t)   # bars: none / TP / TP+SP, per layer
    activation_memory_calculator(formula)            # presets, b, s, h, a, t, recomputation

Pure ``plot_*`` functions return a matplotlib `Figure` built without pyplot. Weight matrices are
drawn as A in Y = X A (rows: input features, columns: output features); each rank's block is a
rectangle with gid ``"rank<r>"``, so tests can count and measure them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from nanoparallel.runtime.units import human_bytes
from nanoparallel.lessons.viz.widgets import pre_html, show_failure, show_figure

RANK_COLORS = ["#4a86c5", "#e6730b", "#2bb0a6", "#c0504d", "#8e6bbf", "#8cc63f", "#d4a017", "#7f7f7f"]
MATRICES = [("attention", ("attn.q", "attn.k", "attn.v", "attn.proj")), ("MLP", ("mlp.fc", "mlp.proj"))]


def _split(full: tuple[int, int], local: tuple[int, int]) -> str:
    """How an (out, in) weight was split, from its full and local shapes."""
    if local[0] < full[0]:
        return "column"
    if local[1] < full[1]:
        return "row"
    return "replicated"


def plot_sharding(full: Mapping[str, tuple], shards: list[Mapping[str, tuple]],
                  sequence_parallel: bool = False, title: str | None = None) -> Figure:
    """Each weight matrix of a tensor-parallel block, coloured by the rank holding each part.

    ``full`` maps parameter names (``attn.q.weight``, ...) to the whole block's shapes,
    ``shards[r]`` to the shapes rank r holds. Matrices are drawn to scale as A (in × out), and
    arrows name the communication at each sublayer's entry and exit: Megatron's f and f̄, or
    sequence parallelism's g (all-gather) and ḡ (reduce-scatter), as Korthikanti et al. (2022) name them.
    """
    t = len(shards)
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    ax = fig.subplots()
    enter, leave = ("g\nall-gather", "ḡ\nreduce-\nscatter") if sequence_parallel else ("f", "f̄")
    unit = full["attn.q.weight"][1]  # h: q's input features
    x0, tallest = 0.0, 0.0
    for label, modules in MATRICES:
        ax.annotate("", xy=(x0 + 0.55, 0.5), xytext=(x0, 0.5), arrowprops=dict(arrowstyle="->"))
        ax.text(x0 + 0.27, 0.62, enter, ha="center", fontsize=9)
        x0 += 0.75
        first = x0
        for module in modules:
            out_f, in_f = full[f"{module}.weight"]
            w, h = out_f / unit, in_f / unit
            tallest = max(tallest, h)
            offset = 0.0
            for r, shard in enumerate(shards):
                local = tuple(shard[f"{module}.weight"])
                split = _split((out_f, in_f), local)
                color = RANK_COLORS[r % len(RANK_COLORS)]
                if split == "column":
                    part = local[0] / unit
                    box = ((x0 + offset, 0), part, h)
                elif split == "row":
                    part = local[1] / unit
                    box = ((x0, h - offset - part), w, part)
                else:
                    part, box = 0.0, ((x0, 0), w, h)
                ax.add_patch(Rectangle(*box, facecolor=color, edgecolor="white", linewidth=1.5, gid=f"rank{r}",
                                       alpha=1.0 if split != "replicated" else 1.0 / t))
                offset += part
            name = module.split(".")[1]
            ax.text(x0 + w / 2, -0.12, f"{name}\n{split if t > 1 else ''}\n{in_f}×{out_f}", ha="center", va="top", fontsize=8)
            x0 += w + 0.3
        ax.text((first + x0 - 0.3) / 2, -0.75, label, ha="center", va="top", fontsize=10, weight="bold")
        ax.annotate("", xy=(x0 + 0.45, 0.5), xytext=(x0 - 0.25, 0.5), arrowprops=dict(arrowstyle="->"))
        ax.text(x0 + 0.15, 0.62, leave, ha="center", va="bottom", fontsize=9)
        x0 += 1.1
    ax.set_xlim(-0.1, x0)
    ax.set_ylim(-1.1, tallest + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, facecolor=RANK_COLORS[r % len(RANK_COLORS)]) for r in range(t)]
    fig.legend(handles, [f"rank {r}" for r in range(t)], loc="outside lower center", ncols=t, frameon=False, fontsize=8)
    layer = "sequence shards (s/t tokens)" if sequence_parallel else "the whole sequence, replicated"
    fig.suptitle(title or f"t = {t}: weights to scale as A in Y = XA (rows: in, columns: out); "
                          f"LayerNorms run on {layer}", fontsize=10)
    return fig


def sharding_explorer(make_shards: Callable[[int], list[Mapping[str, tuple]]], full: Mapping[str, tuple],
                      world_sizes=(1, 2, 4, 8)) -> widgets.VBox:
    """`plot_sharding` of ``make_shards(t)`` for a chosen t, with or without sequence parallelism.
    The notebook passes a function building the learner's block for every rank, and the full
    block's shapes. Errors show in the widget. Attributes: ``t``, ``sequence_parallel``,
    ``output``, ``text``, ``figure``, ``error``."""
    t = widgets.SelectionSlider(options=list(world_sizes), value=world_sizes[min(2, len(world_sizes) - 1)],
                                description="t (ranks)")
    sp = widgets.Checkbox(value=False, description="sequence parallelism")
    out, text = widgets.Output(), widgets.HTML()
    box = widgets.VBox([widgets.HBox([t, sp]), out, text])
    box.t, box.sequence_parallel, box.output, box.text = t, sp, out, text
    box.figure = box.error = None

    def redraw(change=None):
        try:
            shards = make_shards(t.value)
            box.figure = plot_sharding(full, shards, sequence_parallel=sp.value)
            box.error = None
        except Exception as exc:  # the learner's layers failed: say so, keep the kernel calm
            show_failure(box, out, text, f"make_shards({t.value})", exc)
            return
        show_figure(out, box.figure)
        rows = [f"rank {r}: " + ", ".join(f"{n.rsplit('.', 1)[0]} {tuple(s)}" for n, s in shard.items()
                                          if n.endswith("weight") and "ln_" not in n)
                for r, shard in enumerate(shards)]
        text.value = pre_html("\n".join(rows))

    t.observe(redraw, names="value")
    sp.observe(redraw, names="value")
    redraw()
    return box


# Korthikanti et al. 2022, Table 3 (s = 2048; t = 8 in their runs), and GPT-3 175B's sizes.
MODEL_PRESETS = {
    "22B (h=6144, a=64)": dict(s=2048, h=6144, a=64),
    "GPT-3 175B (h=12288, a=96)": dict(s=2048, h=12288, a=96),
    "530B (h=20480, a=128)": dict(s=2048, h=20480, a=128),
    "1T (h=25600, a=160)": dict(s=2048, h=25600, a=160),
}
RECOMPUTE = ("none", "selective", "full")


def layer_bytes(formula: Callable[..., float], s, b, h, a, t, sequence_parallel, recompute="none") -> float:
    """One layer's activation bytes per rank from ``formula(s, b, h, a, t=, sequence_parallel=)``.

    Selective recomputation (Korthikanti et al. section 5) recomputes the attention core instead
    of storing it: the formula with a = 0, i.e. without its 5as/h term. Full recomputation keeps
    only the layer's input, 2sbh bytes (their Table 2; 2 bytes a value)."""
    if recompute == "full":
        return 2 * s * b * h
    if recompute == "selective":
        a = 0
    return formula(s, b, h, a, t=t, sequence_parallel=sequence_parallel)


def plot_activation_memory(formula: Callable[..., float], s: int, b: int, h: int, a: int, t: int,
                           recompute: str = "none", memory: float | None = None, layers: int | None = None,
                           title: str | None = None) -> Figure:
    """Bars of one layer's activation bytes per rank: no parallelism, tensor parallelism over t,
    and tensor + sequence parallelism, from ``formula`` (the learner's). With ``layers`` the bars
    show the whole model's activations, and ``memory`` draws a device's capacity."""
    labels = ["no parallelism", f"TP (t={t})", f"TP + SP (t={t})"]
    values = [layer_bytes(formula, s, b, h, a, 1, False, recompute),
              layer_bytes(formula, s, b, h, a, t, False, recompute),
              layer_bytes(formula, s, b, h, a, t, True, recompute)]
    scale = layers or 1
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.subplots()
    bars = ax.bar(labels, [v * scale for v in values], color=["#7f7f7f", "#4a86c5", "#2bb0a6"])
    for bar, v in zip(bars, values):
        bar.set_gid("activation")
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), human_bytes(v * scale), ha="center", va="bottom", fontsize=9)
    if memory:
        ax.axhline(memory, color="#c0504d", linestyle="--", linewidth=1, label=f"device memory {human_bytes(memory)}")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v) if v else "0"))
    ax.set_ylabel("bytes per rank" + (f" ({layers} layers)" if layers else " per layer"))
    ax.set_ylim(0, max([v * scale for v in values] + [memory or 0]) * 1.18)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or f"activations, s={s}, b={b}, h={h}, a={a}, recomputation: {recompute}", fontsize=10)
    return fig


def activation_memory_calculator(formula: Callable[..., float], presets: Mapping[str, dict] = MODEL_PRESETS) -> widgets.VBox:
    """Model preset or custom b, s, h, a; t; recomputation -> `plot_activation_memory` of the
    learner's ``formula``. Errors show in the widget. Attributes: ``preset``, ``b``, ``s``, ``h``,
    ``a``, ``t``, ``recompute``, ``output``, ``table``, ``figure``, ``values``, ``error``."""
    first = next(iter(presets.values()))
    preset = widgets.Dropdown(options=["custom"] + list(presets), value=list(presets)[1] if len(presets) > 1 else "custom",
                              description="model", layout=widgets.Layout(width="330px"))
    b = widgets.IntSlider(value=1, min=1, max=16, description="b")
    s = widgets.IntSlider(value=first["s"], min=128, max=8192, step=128, description="s")
    h = widgets.IntSlider(value=first["h"], min=256, max=32768, step=256, description="h")
    a = widgets.IntSlider(value=first["a"], min=1, max=256, description="a (heads)")
    t = widgets.SelectionSlider(options=[1, 2, 4, 8, 16], value=8, description="t")
    recompute = widgets.Dropdown(options=list(RECOMPUTE), value="none", description="recompute")
    out, table = widgets.Output(), widgets.HTML()
    box = widgets.VBox([widgets.HBox([preset, t, recompute]), widgets.HBox([b, s]), widgets.HBox([h, a]), out, table])
    box.preset, box.b, box.s, box.h, box.a, box.t, box.recompute = preset, b, s, h, a, t, recompute
    box.output, box.table = out, table
    box.figure = box.values = box.error = None
    applying = []

    def redraw(change=None):
        if applying:
            return
        if change is not None and change["owner"] in (s, h, a) and preset.value != "custom":
            preset.value = "custom"  # the learner moved away from the preset
        try:
            dims = dict(s=s.value, b=b.value, h=h.value, a=a.value)
            box.values = {sp: layer_bytes(formula, **dims, t=t.value, sequence_parallel=sp, recompute=recompute.value)
                          for sp in (False, True)}
            box.values["none"] = layer_bytes(formula, **dims, t=1, sequence_parallel=False, recompute=recompute.value)
            box.figure = plot_activation_memory(formula, **dims, t=t.value, recompute=recompute.value)
            box.error = None
        except Exception as exc:  # the learner's formula failed: say so, keep the kernel calm
            show_failure(box, out, table, f"{getattr(formula, '__name__', 'formula')}(...)", exc)
            return
        show_figure(out, box.figure)
        table.value = pre_html(f"per layer and rank: none {human_bytes(box.values['none'])}, "
                               f"TP {human_bytes(box.values[False])}, TP + SP {human_bytes(box.values[True])}")

    def use_preset(change):
        if change["new"] == "custom":
            return
        applying.append(True)
        try:
            for name, value in presets[change["new"]].items():
                getattr(box, name).value = value
        finally:
            applying.clear()
        redraw()

    for w in (b, s, h, a, t, recompute):
        w.observe(redraw, names="value")
    preset.observe(use_preset, names="value")
    use_preset({"new": preset.value}) if preset.value != "custom" else redraw()
    return box
