"""A chart that always draws: a complete plotly figure sent in one message, no plotly widget code.

:class:`Chart` is an ``ipywidgets.Output`` holding one ``application/vnd.plotly.v1+json`` output, which
JupyterLab, Notebook 7 and Voilà draw with the plotly renderer that ships with plotly (``jupyterlab-plotly``).
Unlike a ``plotly.graph_objects.FigureWidget`` it is never created empty and filled later (the front-end
receives the complete figure with the widget's first state), an update replaces the whole figure in one
``outputs`` message, and its saved widget state is the figure's JSON, not ~5 MB of widget code per chart.
A chart has no comm of its own; a widget that needs clicks adds a :class:`xlakit.widgets._clicks.ClickBridge`
beside it (CacheTimeline: a click on a miss explains it). ``Chart(fig)`` also shows any plotly figure this way
in a notebook (a static copy comes with it for saved notebooks).

Every chart draws at its figure's ``layout.height`` (:data:`DEFAULT_HEIGHT` when the figure has none) in every
JupyterLab windowing mode and in Voilà, because the figure is not plotly-``responsive``: in that mode plotly.js
sizes the plot's container to ``height: 100%`` once a resize has cleared ``layout.height`` (the renderer
resizes after each redraw; Voilà on each window resize) unless the plot's div was 0 px high at some draw.
Inside an output, whose height is its content, 100% is 0 px: the page's first chart (drawn once plotly.js
had loaded, into an attached output) and, in Voilà, every chart after a window resize collapsed to 0 px.
The width follows the cell wherever the front-end resizes outputs (JupyterLab, Notebook 7: window, sidebar);
in Voilà it is the cell's width when drawn. The output keeps ``min-height`` at the figure's height, so the
cell keeps its place while plotly.js loads.

:func:`on_kernel_thread` runs a function on the kernel's main thread (the IPython kernel's event loop), so
refresh threads never touch widgets themselves.
"""

from __future__ import annotations

import itertools
import json
import threading
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

__all__ = ["Chart", "on_kernel_thread", "kernel_loop", "live_charts", "PLOTLY_MIME", "DEFAULT_HEIGHT"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: A figure's height (px) when its ``layout.height`` is unset (the plotly JupyterLab renderer's own default).
DEFAULT_HEIGHT = 360
_ids = itertools.count(1)
_charts: weakref.WeakValueDictionary[str, Chart] = weakref.WeakValueDictionary()


def kernel_loop() -> Any | None:
    """The IPython kernel's IO loop when called on the kernel's main thread inside a kernel, else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipywidgets needs IPython
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    return getattr(kernel, "io_loop", None)


def on_kernel_thread(loop: Any | None, fn: Callable[[], Any]) -> None:
    """Call ``fn`` on the kernel's main thread: now when already there (or without a kernel, e.g. in a
    script or a test), else queued on ``loop`` (thread-safe; it runs between cells or when the running
    cell yields, never in the middle of the user's code)."""
    if loop is None or threading.current_thread() is threading.main_thread():
        fn()
    else:
        loop.add_callback(fn)


def _trace_summary(trace: Any) -> dict[str, Any]:
    def n(values: Any) -> int:
        return 0 if values is None else len(values)

    points = max(n(getattr(trace, a, None)) for a in ("x", "y", "values", "labels"))
    return {"type": trace.type, "name": trace.name, "points": points}


class Chart(widgets.Output):
    """One plotly figure, drawn by the front-end's plotly renderer; :meth:`show` replaces it.

    Attributes:
      chart_id: a stable id (``"xlakit-chart-<n>"``), also in the figure's ``layout.meta.xlakit_chart`` so a
        browser test finds the drawing of each chart.
      figure: the ``plotly.graph_objects.Figure`` shown now (``data`` and ``layout`` are shortcuts).
    """

    def __init__(self, fig: Any = None, **kwargs: Any) -> None:
        import plotly.graph_objects as go

        kwargs.setdefault("layout", widgets.Layout(width="100%", min_width="0"))
        super().__init__(**kwargs)
        self.add_class("xlakit-chart")
        self.chart_id = f"xlakit-chart-{next(_ids)}"
        self.figure = go.Figure()
        _charts[self.chart_id] = self
        if fig is not None:
            self.show(fig)

    @property
    def data(self) -> Any:
        return self.figure.data

    def show(self, fig: Any) -> None:
        """Replace the figure with ``fig`` (a complete ``go.Figure``) in one ``outputs`` message; it draws
        ``fig.layout.height`` px high (set to :data:`DEFAULT_HEIGHT` when unset) and as wide as its cell."""
        import plotly.io as pio

        meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
        fig.update_layout(meta={**meta, "xlakit_chart": self.chart_id}, height=fig.layout.height or DEFAULT_HEIGHT)
        spec = json.loads(pio.to_json(fig, validate=False, remove_uids=True))
        # Not "responsive": that mode can size the plot to 100% of an output that has no height (0 px).
        spec["config"] = {"displaylogo": False}
        self.layout.min_height = f"{int(fig.layout.height)}px"
        self.figure = fig
        self.outputs = ({"output_type": "display_data", "metadata": {},
                         "data": {PLOTLY_MIME: spec, "text/plain": f"<plotly figure {self.chart_id}: "
                                                                   f"{len(fig.data)} trace(s)>"}},)

    def close(self) -> None:
        _charts.pop(self.chart_id, None)
        super().close()

    def _ipython_display_(self) -> None:
        """Displayed on its own: the live chart, then a static copy (hidden in live front-ends) that a saved
        notebook or ``nbconvert --to html`` draws without a kernel or network."""
        from IPython.display import display

        from xlakit.view.plotly_html import figure_html
        from xlakit.widgets._captured import note_displayed
        from xlakit.widgets._html import static_output

        note_displayed(self)
        live = dict(super()._repr_mimebundle_() or {})
        live["text/plain"] = f"Chart({self.chart_id}: {len(self.figure.data)} trace(s))"
        display(live, raw=True)
        display({"text/html": static_output(figure_html(self.figure, "once")), "text/plain": live["text/plain"]},
                raw=True)

    def traces(self) -> list[dict[str, Any]]:
        """What the figure holds: one ``{"type", "name", "points"}`` per trace (for checking a drawing)."""
        return [_trace_summary(t) for t in self.figure.data]


def live_charts() -> dict[str, Chart]:
    """chart id -> every :class:`Chart` alive in this process (what a browser check compares against)."""
    return dict(_charts)
