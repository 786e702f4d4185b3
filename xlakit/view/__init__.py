"""Rendering, separate from the widgets: one formatter, one table model, one theme.

* :mod:`xlakit._text.format` — bytes (binary units), seconds and counts as text; byte ticks for chart axes.
* :mod:`xlakit._text.table` — :class:`Table`, rendered to aligned text and to themed HTML.
* :mod:`xlakit._text.theme` — CSS on JupyterLab's theme variables and a plotly template that follows them.
* :mod:`xlakit.view.plotly_html` — a plotly figure as self-contained static HTML (plotly.js once per
  document, compressed) for snapshots, saved notebooks and the report.
* :mod:`xlakit.view.memory_charts` / :mod:`xlakit.view.peak` / :mod:`xlakit.view.budget` — a compiled
  program's memory as pictures: live bytes with the peak marked, buffer lifetimes by role, the peak as a treemap
  by scope and source; measurements side by side and a weight budget as an arena bar.
* :mod:`xlakit.view.folder` — a cache as the views see it, on the JAX-free folder API
  (:class:`xlakit.cache.CacheFolder`): entries with signatures, evict, an ExecutableCache only to explain.

The formatter and table model live below every feature, in :mod:`xlakit._text` (re-exported here), so the
features' reprs use them without importing this layer; ``plotly_html`` imports plotly.
"""

from __future__ import annotations

from xlakit._text.format import byte_ticks, fmt_bytes, fmt_count, fmt_seconds, fmt_value
from xlakit._text.table import Column, Table

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_count", "fmt_value", "byte_ticks", "Column", "Table"]
