"""A standalone HTML report with the same views as the widgets, for people outside a notebook.

::

    xlakit report --out report.html [--path CACHE_DIR] [--events events.jsonl] [--cdn]

    import xlakit.report
    xlakit.report.write("report.html", cache=cache, log=xlakit.events.log(), programs={"step": compiled})

Sections (each the static snapshot its widget shows, built by the same functions): a summary of the
events' totals, the memory breakdown (of ``programs``, else of the cache's entries), the cache timeline (of
``log``), the cache entries with per-partition totals, the allocator numbers of this process's devices, and
the live arrays of this process. The file is one page; with ``include_plotlyjs=True`` (the default) it
inlines plotly.js and needs no network.

Needs the ``widgets`` extra (plotly); the allocator and live-array sections import JAX.
"""

from __future__ import annotations

from xlakit._atomic import write_atomic

import html
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["build", "write"]


def _summary(log: Any, cache: Any) -> str:
    from xlakit.widgets import _data
    from xlakit.widgets._html import snapshot

    rows = []
    if log is not None:
        stats = log.stats()
        rows = [{"what": k, "value": v} for k, v in stats.counts.items() if v]
        rows += [{"what": "compile seconds", "value": f"{stats.compile_s:.3f}"},
                 {"what": "load seconds (hits)", "value": f"{stats.load_s:.3f}"},
                 {"what": "seconds saved", "value": f"{stats.saved_s:.3f}"}]
    table = _data.table_html(rows, [("what", "events"), ("value", "")]) if rows else ""
    where = f"<p>cache folder: <code>{html.escape(str(cache.store.root))}</code></p>" if cache is not None else ""
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    return snapshot(f"xlakit report — {when}", where + table)


def build(*, cache: Any = None, log: Any = None, programs: Any = None, devices: Any = None,
          allocator: bool = True, live: bool = True, include_plotlyjs: bool | str = True,
          title: str = "xlakit report") -> str:
    """The report as one HTML page (str).

    Args:
      cache: an ``ExecutableCache`` (or the cache ``xlakit.enable_cache()`` returns) for the cache section and,
        without ``programs``, the memory breakdown. None: no cache sections.
      log: an :class:`~xlakit.events.EventLog` for the summary and the timeline; None: no timeline.
      programs: what the memory breakdown shows (anything :class:`~xlakit.widgets.MemoryBreakdown` takes).
      devices: devices of the allocator section (default: every local device).
      allocator, live: include the allocator and live-array sections of this process (bool, default True).
      include_plotlyjs: True inlines plotly.js once (works offline, ~4 MB); "cdn" links it.
      title: the page title.
    """
    from xlakit.widgets import _data, _snapshots
    from xlakit.widgets._html import page
    from xlakit.widgets._sources import collect_programs

    browse = None
    if cache is not None:
        from xlakit.widgets.cache_browser import _as_cache

        browse, created = _as_cache(cache)
    sections = [_summary(log, browse)]
    js = include_plotlyjs

    def plotly_js() -> bool | str:
        nonlocal js
        current, js = js, False
        return current

    source = programs if programs is not None else cache
    if source is not None:
        found = collect_programs(source)
        frame = _data.breakdown_frame(found.memories, "name")
        sections.append(_snapshots.breakdown_html(frame, "bytes", include_plotlyjs=plotly_js() if len(frame) else False,
                                                  notes=[f"programs from {found.origin}"]))
    if log is not None:
        columns = _data.EventColumns(max(len(log), 1))
        columns.extend(log.events())
        data = _data.timeline_data(columns)
        sections.append(_snapshots.timeline_html(data, include_plotlyjs=plotly_js() if data.total else False))
    if browse is not None:
        entries = browse.entries()
        sections.append(_snapshots.cache_html(entries, _data.partition_totals(entries), max_rows=10_000,
                                              folder=str(browse.store.root)))
        if created:
            browse.close()
    if allocator:
        from xlakit.memory import allocator_stats
        from xlakit.widgets.allocator_panel import _resolve_devices

        stats = [allocator_stats(d) for d in _resolve_devices(devices)]
        rows = _data.allocator_rows(stats)
        histories = {r["device"]: [r["in_use"]] for r in rows}
        sections.append(_snapshots.allocator_html(rows, histories, {},
                                                  notes=["measured in the process that wrote this report"]))
    if live:
        from xlakit.memory import live_arrays

        frame = live_arrays()
        table = _data.live_table(frame)
        total = int(frame["bytes"].sum()) if not frame.empty else 0
        count = int(frame["array"].nunique()) if not frame.empty else 0
        sections.append(_snapshots.live_html(table, _data.treemap_nodes(frame),
                                             include_plotlyjs=plotly_js() if not table.empty else False,
                                             total_bytes=total, arrays=count))
    return page(title, sections)


def write(path: str | os.PathLike, **kwargs: Any) -> Path:
    """Write :func:`build` (same keyword arguments) to ``path`` atomically; returns the path."""
    path = Path(path)
    text = build(**kwargs)
    return write_atomic(path, text)
