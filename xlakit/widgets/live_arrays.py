""":class:`LiveArrays`: every live JAX array as a table and a treemap device -> memory kind -> shape."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import traitlets

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Table
from xlakit.view.live import LIVE_COLUMNS
from xlakit.widgets import _data, _figures, _snapshots
from xlakit.widgets._base import View, Worker
from xlakit.widgets._chart import Chart

__all__ = ["LiveArrays"]


class LiveArrays(View, widgets.VBox):
    """Live JAX arrays: a treemap by device → memory kind (``device``, ``pinned_host``, ``unpinned_host``) →
    dtype[shape], and a table of the same groups (arrays, bytes, where the first was created — a notebook cell
    reads ``In [7], line 3``), largest first.

    A view over :func:`xlakit.memory.live_arrays` (exact array bytes per shard; allocator rounding and XLA
    temporaries not included). Reads on :meth:`refresh` (the button), or every ``refresh_s`` seconds on a
    daemon thread that stops on :meth:`close`.

    Args:
      backend: the JAX backend (``"cpu"``, ``"gpu"``...; str | None, default None = the default backend).
      top: initial :attr:`top`. refresh_s: initial :attr:`refresh_s`.
      layout: an ``ipywidgets.Layout`` for the box.

    Raises:
      TypeError: an unknown keyword argument.
    """

    _title = "xlakit live arrays"

    #: Table rows shown at most (int, default 50 groups).
    top = traitlets.Int(50)
    #: Seconds between automatic refreshes, or None for refresh on demand (float | None, default None).
    refresh_s = traitlets.Float(None, allow_none=True)

    def __init__(self, *, backend: str | None = None, top: int = 50, refresh_s: float | None = None,
                 layout: widgets.Layout | None = None) -> None:
        self._setup_view()
        self.backend = backend
        #: one row per (array, device) shard, as :func:`xlakit.memory.live_arrays` returns it.
        self.frame = None
        #: the grouped rows shown (DataFrame).
        self.table = None
        self._worker: Worker | None = None
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.add_class("xlakit-live-refresh")
        self.refresh_button.on_click(self._guard(lambda _b: self.refresh(), "refresh"))
        self.summary = widgets.HTML()
        self.summary.add_class("xlakit-live-summary")
        #: the treemap (:class:`~xlakit.widgets._chart.Chart`); ``figure`` is its plotly Figure.
        self.chart = Chart()
        self.table_html = widgets.HTML()
        top_row = widgets.HBox([self.refresh_button, self.summary], layout=widgets.Layout(flex_flow="row wrap"))
        self._owned = [self.refresh_button, self.summary, self.chart, self.table_html, self.error_area, self._style,
                       top_row]
        super().__init__(children=[self._style, top_row, self.error_area, self.chart,
                                   self.table_html],
                         top=top, refresh_s=refresh_s, layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-live-arrays")
        self.observe(self._guard(lambda _c: self._draw(), "top"), names=["top"])
        self.observe(self._guard(self._on_interval, "refresh_s"), names=["refresh_s"])
        self.refresh()
        self._on_interval(None)

    @traitlets.validate("top")
    def _check_top(self, proposal: Any) -> int:
        from xlakit.widgets._base import checked_count

        return checked_count(proposal["value"], "top", "groups shown")

    @traitlets.validate("refresh_s")
    def _check_interval(self, proposal: Any) -> float | None:
        from xlakit._units import check_seconds

        value = proposal["value"]
        try:  # NaN spun the refresh thread; 1e10 killed it with an OverflowError
            return None if value is None else check_seconds(value, "refresh_s", positive=True)
        except (TypeError, ValueError) as e:
            raise traitlets.TraitError(f"{e} (or None: refresh on demand)") from None

    @property
    def figure(self) -> Any:
        """The treemap's ``plotly.graph_objects.Figure``."""
        return self.chart.figure

    @property
    def total_bytes(self) -> int:
        """Bytes of every live array shard (int)."""
        return int(self.frame["bytes"].sum()) if self.frame is not None and not self.frame.empty else 0

    @property
    def array_count(self) -> int:
        """Distinct live arrays (int)."""
        return int(self.frame["array"].nunique()) if self.frame is not None and not self.frame.empty else 0

    def refresh(self) -> None:
        """Read the live arrays now and redraw."""
        from xlakit.memory import live_arrays

        frame = live_arrays(backend=self.backend)
        with self._lock:
            if self._closed:
                return
            self.frame = frame
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            self.table = _data.live_table(self.frame, self.top)
            self.chart.show(_figures.treemap_figure(_data.treemap_nodes(self.frame)))
            total = self.total_bytes
            self.summary.value = (f"<span data-bytes='{total}'>{self.array_count} live array(s), "
                                  f"{fmt_bytes(total)}</span>")
            self.table_html.value = Table(LIVE_COLUMNS, _data.frame_records(self.table),
                                          css_class="xlakit-live").to_html()

    def _on_interval(self, _change: Any) -> None:
        self._stop_worker(self._worker)
        self._worker = None
        if self.refresh_s is not None and not self._closed:
            self._worker = self._start_worker(self.refresh, self.refresh_s, where="auto-refresh")

    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: the treemap and the grouped table with exact bytes."""
        return _snapshots.live_html(self.table, _data.treemap_nodes(self.frame), include_plotlyjs=include_plotlyjs,
                                    total_bytes=self.total_bytes, arrays=self.array_count)

    def __repr__(self) -> str:
        return f"LiveArrays({self.array_count} arrays, {fmt_bytes(self.total_bytes)})"
