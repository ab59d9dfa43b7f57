"""Widgets around the pure pictures: a message-size explorer and a run-and-draw button.

    bandwidth_widget()                                  # drag the size, watch the links
    trace_widget(lambda n: Cluster(n).run(step).trace)  # pick a world size, press Run

Each returns an `ipywidgets.VBox` whose controls and last figure are attributes (``box.figure``,
``box.size_slider``, ``box.run_button``, ...), so a test can set ``.value`` or call
``.click()`` without a browser: callbacks are plain `observe`/`on_click` handlers and run
synchronously (`interactive` would swallow their exceptions).

Two things the browser does that a test without one does not see: ipywidgets 8 shows a
dropdown whose value is None as an empty box (so "custom" entries carry `CUSTOM`, not None),
and a `FloatLogSlider` snaps its value to its step in log space and sends the snapped value
back (so widgets compare slider and preset with `log_slider_shows` and draw the exact preset).
"""
from __future__ import annotations

import html
import io
import math
from collections.abc import Callable, Mapping

import ipywidgets as widgets

from nanoparallel.runtime.trace import Trace
from nanoparallel.lessons.viz.bandwidth import plot_link_times
from nanoparallel.runtime.timeline import plot_trace
from nanoparallel.runtime.units import human_bytes

# Message sizes worth comparing, smallest first: latency-bound to bandwidth-bound.
SIZE_PRESETS = (
    ("one fp32 value (4 B)", 4),
    ("one 4096-wide bf16 activation row (8.2 kB)", 4096 * 2),
    ("1 MiB bucket", 2**20),
    ("PyTorch DDP's default 25 MiB bucket (26 MB)", 25 * 2**20),
    ("GPT-2 small gradients in fp32 (124M params, 496 MB)", 124_000_000 * 4),
    ("7B-parameter gradients in bf16 (14 GB)", 7_000_000_000 * 2),
    ("7B-parameter Adam state in fp32 (84 GB)", 7_000_000_000 * 12),
)
_CUSTOM = "custom size"
# A preset dropdown's "no preset" value. Not None: ipywidgets 8 draws a None value as an empty box.
CUSTOM = "custom"


def _in_kernel() -> bool:
    """Displaying only makes sense inside IPython; elsewhere `display` would print reprs."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def log_slider_shows(slider: widgets.FloatLogSlider, exact: float) -> bool:
    """Whether ``slider`` sits on ``exact``, up to the rounding its front end does.

    The browser snaps log_base(value) to the slider's grid (min + k·step) and sends the snapped
    value back to the kernel: with step 0.01, 8192 B comes back as 8128 B and 7.5e9 as 7.59e9.
    A value within half a step of ``exact`` in log space is on the grid point ``exact`` snaps
    to, so the widget keeps the preset and draws ``exact``, not the rounded value.
    """
    if exact <= 0 or slider.value <= 0:
        return False
    return abs(math.log(slider.value / exact, slider.base)) <= slider.step / 2 + 1e-9


def show_figure(out: widgets.Output, fig) -> None:
    """Replace ``out``'s content by ``fig`` rendered as a PNG.

    A PNG rather than ``display(fig)``: a bare `Figure` has a rich display only once pyplot's
    inline backend is loaded, which a learner who never imports pyplot does not have.
    """
    if not _in_kernel():
        return
    from IPython.display import Image, display
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    with out:
        out.clear_output(wait=True)
        display(Image(data=buf.getvalue(), format="png"))


def clear_output(out: widgets.Output) -> None:
    if _in_kernel():
        out.clear_output()


def pre_html(text: str, color: str = "inherit") -> str:
    return f'<pre style="color:{color}; font-size:12px; line-height:1.3">{html.escape(text)}</pre>'


def trace_of(result) -> Trace:
    """The trace of what a widget's run_fn returned: a Trace, or a RunResult carrying one."""
    trace = result if isinstance(result, Trace) else getattr(result, "trace", result)
    if not isinstance(trace, Trace):
        raise TypeError(f"run_fn should return a Trace (or a RunResult), got {type(result).__name__}.")
    return trace


def show_failure(box, out: widgets.Output, text: widgets.HTML, call: str, exc: Exception) -> None:
    """The learner's code failed: drop the figure and say so in red, in place; never raise."""
    box.figure, box.error = None, f"{type(exc).__name__}: {exc}"
    clear_output(out)
    text.value = pre_html(f"{call} failed\n{box.error}", color="#c0392b")


def bandwidth_widget(links: Mapping | None = None) -> widgets.VBox:
    """A log slider for the message size (1 B to 100 GB), presets, and `plot_link_times`.

    The returned box has ``size_slider``, ``preset`` (bytes, or `CUSTOM`), ``size_label``,
    ``output`` and ``figure`` (the last figure drawn) as attributes. While a preset is chosen,
    the label and figure use its exact size, not the slider's rounded one.
    """
    slider = widgets.FloatLogSlider(value=2**20, base=10, min=0, max=11, step=0.01,
                                    description="message", readout=False,
                                    layout=widgets.Layout(width="420px"))
    size_label = widgets.Label()
    preset = widgets.Dropdown(options=[(_CUSTOM, CUSTOM)] + list(SIZE_PRESETS), value=2**20,
                              description="preset", layout=widgets.Layout(width="420px"))
    out = widgets.Output()
    box = widgets.VBox([widgets.HBox([slider, size_label]), preset, out])
    box.size_slider, box.preset, box.size_label, box.output, box.figure = slider, preset, size_label, out, None

    def redraw(change=None):
        if preset.value != CUSTOM and not log_slider_shows(slider, preset.value):
            preset.value = CUSTOM  # the learner dragged away from the preset; use_preset redraws
            return
        nbytes = slider.value if preset.value == CUSTOM else preset.value  # a preset exactly
        size_label.value = human_bytes(nbytes)
        box.figure = plot_link_times(nbytes, links)
        show_figure(out, box.figure)

    def use_preset(change):
        if change["new"] != CUSTOM and not log_slider_shows(slider, change["new"]):
            slider.value = change["new"]  # observe(redraw) draws
        else:
            redraw()  # "custom", or the slider is on the preset already (up to the browser's rounding)

    slider.observe(redraw, names="value")
    preset.observe(use_preset, names="value")
    redraw()
    return box


def trace_widget(run_fn: Callable[[int], Trace], world_sizes=(2, 3, 4)) -> widgets.VBox:
    """Pick a world size, press Run: ``run_fn(world_size)`` runs and its trace is drawn.

    ``run_fn`` returns a `Trace` (or a `RunResult`, whose ``.trace`` is used). Its errors are
    shown in the widget, never raised. Attributes: ``world_size`` (the toggle), ``run_button``,
    ``output``, ``summary`` (an HTML widget with `Trace.summary` or the error), ``figure`` (the
    last figure, None after an error) and ``error`` (the last error message, or None).
    """
    sizes = list(world_sizes)
    if not sizes:
        raise ValueError("trace_widget needs at least one world size.")
    world_size = widgets.ToggleButtons(options=[(f"{n} ranks", n) for n in sizes], value=sizes[0],
                                       description="world size")
    run_button = widgets.Button(description="Run", icon="play", button_style="primary")
    out = widgets.Output()
    summary = widgets.HTML()
    box = widgets.VBox([widgets.HBox([world_size, run_button]), out, summary])
    box.world_size, box.run_button, box.output, box.summary = world_size, run_button, out, summary
    box.figure, box.error = None, None

    def run(_button=None):
        n = world_size.value
        run_button.disabled, run_button.description = True, "Running…"
        try:
            result = run_fn(n)
            trace = trace_of(result)
            box.figure = plot_trace(trace, title=f"{n} ranks")
            box.error = None
            show_figure(out, box.figure)
            summary.value = pre_html(trace.summary())
        except Exception as exc:  # the learner's code failed: say so in place, keep the kernel calm
            show_failure(box, out, summary, f"run_fn({n})", exc)
        finally:
            run_button.disabled, run_button.description = False, "Run"

    run_button.on_click(run)
    return box
