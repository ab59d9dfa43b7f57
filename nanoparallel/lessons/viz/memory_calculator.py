"""The memory calculator of notebook 02: model-state bytes per GPU under plain data parallelism.

    plot_memory(7e9, {"parameters": 2, "gradients": 2, "master weights": 4, "optimizer states": 8})
    memory_widget(memory_breakdown)   # the learner's bytes-per-parameter function, with controls

With plain data parallelism every rank holds all model states (parameters, gradients,
optimizer states; ZeRO paper, Rajbhandari et al. 2020, section 3.1), so bytes per GPU are
bytes per parameter times the parameter count, whatever the number of GPUs.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import ipywidgets as widgets
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from nanoparallel.runtime.units import human_bytes
from nanoparallel.lessons.viz.widgets import CUSTOM, log_slider_shows, pre_html, show_failure, show_figure

# Model sizes the course text talks about (parameters).
MODEL_PRESETS = (
    ("GPT-2 XL (1.5B)", 1.5e9),
    ("LLaMA 7B", 7e9),
    ("LLaMA 13B", 13e9),
    ("LLaMA 65B", 65e9),
    ("GPT-3 175B", 175e9),
)
COMPONENT_COLORS = {"parameters": "#4e79a7", "gradients": "#f28e2b",
                    "master weights": "#59a14f", "optimizer states": "#b07aa1"}
_SHORT = {"parameters": "params", "gradients": "grads", "master weights": "master", "optimizer states": "optimizer"}
_OTHER = ("#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#e15759")


def _billions(n_params: float) -> str:
    """``7e9 -> "7B"``, ``7.0795e9 -> "7.08B"``, ``1.5e9 -> "1.5B"``: two decimals at most."""
    return f"{round(n_params / 1e9, 2):g}B"


def default_accelerators() -> dict[str, float]:
    """GPU memory lines to draw: label -> bytes, from `cost.ACCELERATORS` (same sizes merged)."""
    from nanoparallel.lessons.cost import ACCELERATORS
    by_size: dict[float, list[str]] = {}
    for key, acc in ACCELERATORS.items():
        by_size.setdefault(acc.memory, []).append(key)
    return {f"{'/'.join(sorted(keys))} {human_bytes(size)}": size for size, keys in sorted(by_size.items())}


def plot_memory(n_params: float, breakdown: Mapping[str, float], accelerators: Mapping[str, float] | None = None,
                ax=None, title: str | None = None) -> Figure:
    """One stacked bar: the bytes every data-parallel rank holds, by model state, against GPUs.

    ``breakdown`` maps a component ("parameters", "gradients", ...) to bytes per parameter;
    each segment is ``n_params * bytes`` wide (decimal GB on the x axis). Dashed lines mark
    the memory of ``accelerators`` (label -> bytes; default `default_accelerators`). Segments
    carry gid "component", GPU lines gid "accelerator".
    """
    if accelerators is None:
        accelerators = default_accelerators()
    per_param = sum(breakdown.values())
    total = n_params * per_param
    GB = 1e9
    right = max([total] + list(accelerators.values())) / GB * 1.12 or 1.0
    xs = sorted(accelerators.values())
    crowded = any(b - a < 0.16 * right * GB for a, b in zip(xs, xs[1:]))  # labels would collide
    if ax is None:
        fig = Figure(figsize=(10, 3.3 if crowded else 2.9), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    others = iter(_OTHER * (len(breakdown) // len(_OTHER) + 1))
    left = 0.0
    for name, b in breakdown.items():
        width = n_params * b / GB
        color = COMPONENT_COLORS.get(name) or next(others)
        ax.barh(0, width, left=left, height=0.5, color=color, edgecolor="white", label=f"{name}: {b:g} B/param",
                gid="component")
        short = _SHORT.get(name, name)
        if b and width / right > 0.0085 * max(len(short), 6):  # room for the label inside the segment
            ax.text(left + width / 2, 0, f"{short}\n{human_bytes(n_params * b)}", ha="center", va="center",
                    fontsize=8, color="white", fontweight="bold")
        left += width
    at_top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, (label, size) in enumerate(sorted(accelerators.items(), key=lambda kv: kv[1])):
        ax.axvline(size / GB, color="#333333", linestyle="--", linewidth=1, gid="accelerator")
        ax.text(size / GB, 1.0 + (0.11 * (i % 3) if crowded else 0), label, transform=at_top, ha="center",
                va="bottom", fontsize=8)
    ax.set_xlim(0, right if right > 0 else 1)
    ax.set_ylim(-0.6, 0.6)
    ax.set_yticks([])
    ax.set_xlabel("GB per GPU (model states only, no activations)")
    for spine in ("top", "right", "left"):
        ax.spines[spine].set_visible(False)
    biggest_label, biggest = max(accelerators.items(), key=lambda kv: kv[1]) if accelerators else ("", 0)
    fits = [label for label, size in sorted(accelerators.items(), key=lambda kv: kv[1]) if total <= size]
    if fits:
        verdict = f"fits on one {fits[0].split()[0]}, before activations"
    elif biggest:
        verdict = f"does not fit on any one GPU: needs the memory of {math.ceil(total / biggest)} × {biggest_label}"
    else:
        verdict = ""
    ax.set_title(title or f"{_billions(n_params)} parameters × {per_param:g} B/param = {human_bytes(total)} per GPU"
                 + (f" — {verdict}" if verdict else ""), fontsize=10, pad=44 if crowded else 16)
    fig.legend(handles=ax.get_legend_handles_labels()[0], loc="outside lower center", ncols=max(len(breakdown), 1),
               frameon=False, fontsize=8)
    return fig


def memory_widget(breakdown_fn: Callable[..., Mapping[str, float]],
                  presets=MODEL_PRESETS) -> widgets.VBox:
    """Model size, precision and optimizer -> bytes per GPU, drawn with `plot_memory`.

    ``breakdown_fn(param_dtype=, grad_dtype=, master_weights=, optimizer=, moments_dtype=)``
    returns bytes per parameter by component: the notebook passes the learner's own. Its errors
    show in the widget, never raise. Attributes: ``preset`` (parameters, or `CUSTOM`),
    ``n_params`` (a log slider), ``n_label``, ``param_dtype``, ``grad_dtype``,
    ``master_weights``, ``optimizer``, ``moments_dtype``, ``output``, ``table`` (HTML),
    ``figure``, ``breakdown`` (the last dict drawn) and ``error`` (None when fine). While a preset
    is chosen, label, figure and table use its exact parameter count, not the slider's rounding.
    """
    fn = breakdown_fn
    start = 7e9
    preset = widgets.Dropdown(options=[("custom", CUSTOM)] + list(presets),
                              value=start if start in [v for _, v in presets] else CUSTOM,
                              description="model", layout=widgets.Layout(width="340px"))
    # No readout: it would show the browser's rounding of a preset (7.08e+9 for 7e9); the label does not.
    n_params = widgets.FloatLogSlider(value=start, base=10, min=8, max=12, step=0.01, description="parameters",
                                      readout=False, layout=widgets.Layout(width="300px"))
    n_label = widgets.Label()
    param_dtype = widgets.Dropdown(options=["bf16", "fp16", "fp32"], value="bf16", description="params")
    grad_dtype = widgets.Dropdown(options=["bf16", "fp16", "fp32"], value="bf16", description="grads")
    master = widgets.Checkbox(value=True, description="fp32 master weights")
    optimizer = widgets.Dropdown(options=["adam", "momentum", "sgd"], value="adam", description="optimizer")
    moments = widgets.Dropdown(options=["fp32", "bf16"], value="fp32", description="moments")
    out, table = widgets.Output(), widgets.HTML()
    box = widgets.VBox([widgets.HBox([preset, n_params, n_label]), widgets.HBox([param_dtype, grad_dtype, master]),
                        widgets.HBox([optimizer, moments]), out, table])
    box.preset, box.n_params, box.n_label = preset, n_params, n_label
    box.param_dtype, box.grad_dtype = param_dtype, grad_dtype
    box.master_weights, box.optimizer, box.moments_dtype, box.output, box.table = master, optimizer, moments, out, table
    box.figure = box.breakdown = box.error = None

    def redraw(change=None):
        if preset.value != CUSTOM and not log_slider_shows(n_params, preset.value):
            preset.value = CUSTOM  # the learner moved the slider away from the preset; use_preset redraws
            return
        n = n_params.value if preset.value == CUSTOM else preset.value  # a preset exactly
        n_label.value = f"{_billions(n)} parameters"
        options = dict(param_dtype=param_dtype.value, grad_dtype=grad_dtype.value, master_weights=master.value,
                       optimizer=optimizer.value, moments_dtype=moments.value)
        try:
            breakdown = dict(fn(**options))
            box.figure = plot_memory(n, breakdown)
            box.breakdown, box.error = breakdown, None
        except Exception as exc:  # the learner's function failed: say so, keep the kernel calm
            box.breakdown = None
            show_failure(box, out, table, f"{getattr(fn, '__name__', 'breakdown_fn')}(...)", exc)
            return
        show_figure(out, box.figure)
        rows = [f"{name:<17}{b:>5g} B/param {human_bytes(n * b):>9}" for name, b in breakdown.items()]
        rows.append(f"{'total':<17}{sum(breakdown.values()):>5g} B/param {human_bytes(n * sum(breakdown.values())):>9}")
        table.value = pre_html("\n".join(rows))

    def use_preset(change):
        if change["new"] != CUSTOM and not log_slider_shows(n_params, change["new"]):
            n_params.value = change["new"]  # observe(redraw) draws
        else:
            redraw()  # "custom", or the slider is on the preset already (up to the browser's rounding)

    for w in (n_params, param_dtype, grad_dtype, master, optimizer, moments):
        w.observe(redraw, names="value")
    preset.observe(use_preset, names="value")
    redraw()
    return box
