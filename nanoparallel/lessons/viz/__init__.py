"""Pictures of runs and costs: pure ``plot_*`` functions that return a matplotlib `Figure`,
and ipywidgets around them for the notebooks.

    from nanoparallel.lessons.viz import plot_trace, plot_link_times, trace_widget, bandwidth_widget
    plot_trace(result.trace)          # who talked to whom, when (also: result.trace.plot())
    plot_link_times(14e9)             # 14 GB over NVLink, PCIe, InfiniBand
    bandwidth_widget()                # the same, with a message-size slider

Figures are built without pyplot: nothing is shown, printed or left open until a notebook
displays the returned figure.
"""
from nanoparallel.lessons.viz.bandwidth import plot_link_times
from nanoparallel.runtime.timeline import plot_trace
from nanoparallel.runtime.units import human_bytes, human_seconds
from nanoparallel.lessons.viz.widgets import bandwidth_widget, trace_widget

__all__ = ["plot_trace", "plot_link_times", "trace_widget", "bandwidth_widget",
           "human_bytes", "human_seconds"]
