""":func:`dashboard`: every xlakit view in one set of tabs."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from xlakit.widgets._base import View
from xlakit.widgets._html import snapshot
from xlakit.widgets.allocator_panel import AllocatorPanel
from xlakit.widgets.cache_browser import CacheBrowser
from xlakit.widgets.cache_timeline import CacheTimeline
from xlakit.widgets.live_arrays import LiveArrays
from xlakit.widgets.memory_breakdown import MemoryBreakdown

__all__ = ["Dashboard", "dashboard"]


class Dashboard(View, widgets.Tab):
    """Tabs: Memory (:class:`MemoryBreakdown`), Allocator (:class:`AllocatorPanel`), Timeline
    (:class:`CacheTimeline`), Cache (:class:`CacheBrowser`), Live arrays (:class:`LiveArrays`).

    Build it with :func:`dashboard`. :meth:`close` closes every view (and stops their threads).

    Attributes:
      breakdown, allocator, timeline, live: the views. browser: the :class:`CacheBrowser`, or None when
      there is no cache (the tab then says how to get one).
    """

    _title = "xlakit dashboard"

    def __init__(self, *, log: Any = None, cache: Any = None, programs: Any = None, devices: Any = None,
                 refresh_s: float = 1.0, layout: widgets.Layout | None = None) -> None:
        self._setup_view()
        from xlakit.cache import active
        from xlakit.view.folder import as_folder

        # The folder API (no JAX hooks): a path or a store is opened as a CacheFolder, None is the enabled cache.
        cache = as_folder(cache, who="dashboard") if cache is not None else active()
        built: list[Any] = []  # closed again if a later view refuses its argument: no refresh thread left running
        try:
            self.breakdown = _built(built, MemoryBreakdown(programs if programs is not None else cache))
            self.timeline = _built(built, CacheTimeline(log))
            self.allocator = _built(built, AllocatorPanel(devices, refresh_s))
            self.browser = _built(built, CacheBrowser(cache)) if cache is not None else None
            self.live = _built(built, LiveArrays())
        except BaseException:
            for view in built:
                view.close()
            raise
        no_cache = widgets.HTML("<p>No cache: call <code>xlakit.enable_cache()</code> or pass "
                                "<code>dashboard(cache=PATH)</code>.</p>")
        self.views = [v for v in (self.breakdown, self.allocator, self.timeline, self.browser, self.live) if v]
        self._owned = [*self.views, no_cache, self.error_area, self._style]
        children = [self.breakdown, self.allocator, self.timeline, self.browser or no_cache, self.live]
        super().__init__(children=children, titles=("Memory", "Allocator", "Timeline", "Cache", "Live arrays"),
                         layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-dashboard")
        self.observe(self._guard(self._on_tab, "tab"), names=["selected_index"])

    def _on_tab(self, change) -> None:
        # A chart drawn in a hidden tab had no width to fill, so plotly used its default size; sending the
        # complete figure again when its tab is shown makes the front-end draw it at the visible width.
        index = change["new"]
        if index is None or index >= len(self.children):
            return
        for chart in _charts_in(self.children[index]):
            chart.show(chart.figure)

    @property
    def threads_alive(self) -> int:
        """Worker threads still running in all views (int)."""
        return sum(v.threads_alive for v in self.views)

    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: every view's snapshot, one after another (plotly.js included at most once)."""
        parts = []
        for view in self.views:
            parts.append(view.to_html(include_plotlyjs))
            if include_plotlyjs is True:
                include_plotlyjs = False
        return snapshot("xlakit dashboard", "".join(parts))

    def __repr__(self) -> str:
        return "Dashboard(" + "; ".join(repr(v) for v in self.views) + ")"


def _charts_in(widget: Any) -> list[Any]:
    """The :class:`~xlakit.widgets._chart.Chart` widgets inside a widget tree."""
    from xlakit.widgets._chart import Chart

    if isinstance(widget, Chart):
        return [widget]
    return [c for child in getattr(widget, "children", ()) for c in _charts_in(child)]


def dashboard(*, log: Any = None, cache: Any = None, programs: Any = None, devices: Any = None,
              refresh_s: float = 1.0) -> Dashboard:
    """Every xlakit view in tabs.

    Args:
      log: the :class:`~xlakit.events.EventLog` for the timeline (default: the process-wide log).
      cache: an :class:`~xlakit.ExecutableCache`, the cache ``xlakit.enable_cache()`` returns, a
        :class:`~xlakit.cache.CacheFolder` or a cache folder path (default: the enabled transparent cache, if
        any) for the Cache tab and, without ``programs``, the Memory tab.
      programs: what :class:`MemoryBreakdown` shows (default: the cache's entries).
      devices: the devices of the allocator panel (default: every local device).
      refresh_s: the allocator panel's auto-refresh interval (float seconds, default 1.0).

    Raises:
      TypeError: an unknown keyword argument, or ``cache`` is not a cache.
    """
    return Dashboard(log=log, cache=cache, programs=programs, devices=devices, refresh_s=refresh_s)


def _built(views: list[Any], view: Any) -> Any:
    views.append(view)
    return view
