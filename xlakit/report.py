"""A standalone HTML report with the same views as the widgets, for people outside a notebook.

::

    xlakit report --out report.html [--path CACHE_DIR] [--events events.jsonl] [--cdn]

    import xlakit.report
    xlakit.report.write("report.html", cache=cache, log=xlakit.events.log(), programs={"step": compiled})

Sections (each the static snapshot its widget shows, built by the same :mod:`xlakit.view` functions): a
summary of the events' totals, the memory breakdown (of ``programs``, else of the cache's entries), the cache
timeline (of ``log``), the cache entries with per-partition totals, the allocator numbers and the live arrays
of the process that writes the report (labelled so: from the command line that is the report's own process,
not your program's). A last section lists what the report leaves out and why (no timeline without an event
log; hits counted from the event log only). The file is one page; with ``include_plotlyjs=True`` (the
default) it carries plotly.js once, compressed, and needs no network.

Needs the ``widgets`` extra (plotly); the allocator and live-array sections import JAX. Imports no widget
code (ipywidgets is not needed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from xlakit._atomic import write_atomic

__all__ = ["build", "write"]


def _summary(log: Any, folder: str | None) -> str:
    from xlakit._text.format import fmt_seconds
    from xlakit._text.table import Column, Table
    from xlakit._text.untrusted import html_text
    from xlakit.view.html import snapshot

    rows: list[dict[str, Any]] = []
    if log is not None:
        stats = log.stats()
        rows = [{"what": f"{k} events", "value": f"{v:,}"} for k, v in stats.counts.items() if v]
        rows += [{"what": "compile time", "value": fmt_seconds(stats.compile_s)},
                 {"what": "load time (hits)", "value": fmt_seconds(stats.load_s)},
                 {"what": "time saved by hits", "value": fmt_seconds(stats.saved_s)}]
    table = Table([Column("what", "from the event log"), Column("value", "")], rows).to_html() if rows else ""
    where = f"<p class='xlakit-note'>cache folder: <code>{html_text(folder)}</code></p>" if folder else ""
    return snapshot(f"xlakit report — {time.strftime('%Y-%m-%d %H:%M:%S')}", where + table)


def _left_out(items: list[str]) -> str:
    from xlakit.view.html import note, snapshot

    if not items:
        return ""
    return snapshot("What this report leaves out", "".join(note(i) for i in items))


def _hits_from(log: Any, entries: Any) -> Any:
    """The entries frame with ``hits`` counted from ``log`` (the report's own process has none)."""
    if entries is None or entries.empty:
        return entries
    counts: dict[str, int] = {}
    for e in log.events("hit"):
        if e.key:
            counts[e.key] = counts.get(e.key, 0) + 1
    out = entries.copy()
    out["hits"] = [counts.get(k, 0) for k in out["key"]]
    return out


def build(*, cache: Any = None, log: Any = None, programs: Any = None, devices: Any = None,
          allocator: bool = True, live: bool = True, include_plotlyjs: bool | str = True,
          title: str = "xlakit report") -> str:
    """The report as one HTML page (str).

    Args:
      cache: an ``ExecutableCache``, the cache ``xlakit.enable_cache()`` returns, a
        :class:`~xlakit.cache.CacheFolder` or a cache folder path (read through the folder API: no JAX hooks
        are installed) for the cache section and, without ``programs``, the memory breakdown. None: no cache
        sections.
      log: an :class:`~xlakit.events.EventLog` for the summary, the timeline and the entries' hit counts;
        None: no timeline and no hit counts (the report says so).
      programs: what the memory breakdown shows (anything :class:`~xlakit.widgets.MemoryBreakdown` takes).
      devices: devices of the allocator section (default: every local device).
      allocator, live: include the allocator and live-array sections of the process writing the report
        (bool, default True; titled as that process's numbers).
      include_plotlyjs: True carries plotly.js once (compressed, ~1.9 MB, works offline); "cdn" links it.
      title: the page title.

    Raises:
      TypeError: ``cache`` is not a cache (see :func:`xlakit.view.folder.as_folder`), ``log`` is not an
        :class:`~xlakit.events.EventLog`, ``devices`` not a list of devices, ``allocator``/``live`` not True or
        False, ``title`` not a str. ValueError: ``include_plotlyjs`` other than True, False or ``"cdn"``.
    """
    from xlakit._units import check_flag

    check_flag(allocator, "allocator")
    check_flag(live, "live")
    if not (include_plotlyjs is True or include_plotlyjs is False or include_plotlyjs == "cdn"):
        raise ValueError(f"include_plotlyjs must be True (plotly.js in the page), 'cdn' (a link) or False, got "
                         f"{include_plotlyjs!r}"[:200])
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    if log is not None and not (hasattr(log, "stats") and hasattr(log, "events")):
        raise TypeError(f"log must be an xlakit.events.EventLog (xlakit.events.load(path) reads a saved one), got "
                        f"{type(log).__name__}")
    if devices is not None and (isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__")):
        raise TypeError(f"devices must be a list of JAX devices (jax.local_devices()), got {type(devices).__name__}")
    from xlakit.view import breakdown as bd
    from xlakit.view import cache as cv
    from xlakit.view import live as lv
    from xlakit.view import timeline as tl
    from xlakit.view.folder import as_folder, entries_frame
    from xlakit.view.html import page
    from xlakit.view.programs import collect_programs

    browse = as_folder(cache, who="report") if cache is not None else None
    folder = str(browse.store.root) if browse is not None else None
    sections = [_summary(log, folder)]
    left_out: list[str] = []
    js: bool | str = include_plotlyjs

    def plotly_js() -> bool | str:
        nonlocal js
        current = js
        if js is True or js == "cdn":
            js = False
        return current

    source = programs if programs is not None else browse
    if source is not None:
        found = collect_programs(source)
        frame = bd.breakdown_frame(found.memories, "name")
        sections.append(bd.breakdown_html(frame, "bytes", include_plotlyjs=plotly_js() if len(frame) else False,
                                          notes=[f"programs from {found.origin}"]))
    if log is not None:
        columns = tl.EventColumns(max(len(log), 1))
        columns.extend(log.events())
        data = tl.timeline_data(columns)
        sections.append(tl.timeline_html(data, include_plotlyjs=plotly_js() if data.total else False))
    else:
        left_out.append("The cache timeline: no event log was given (xlakit report --events FILE, or "
                        "build(log=...)).")
    if browse is not None:
        entries = entries_frame(browse)
        if log is not None:
            entries = _hits_from(log, entries)
        elif not entries.empty and "hits" in entries.columns:
            entries = entries.drop(columns=["hits"])
            left_out.append("Hits per entry: they are counted from an event log, and none was given.")
        sections.append(cv.cache_html(entries, cv.partition_totals(entries) if "hits" in entries.columns
                                      else cv.partition_totals(entries.assign(hits=0)).drop(columns=["hits"]),
                                      max_rows=10_000, folder=folder))
    pid = os.getpid()
    if allocator:
        import jax

        from xlakit.memory import allocator_stats
        from xlakit.view.allocator import allocator_html, allocator_rows

        devs = devices if devices is not None else jax.local_devices()
        rows = allocator_rows([allocator_stats(d) for d in devs])
        sections.append(allocator_html(rows, {r["device"]: [r["in_use"]] for r in rows}, {},
                                       title=f"Allocator of the process that wrote this report (pid {pid})",
                                       notes=["These are the numbers of the report-writing process, not of the "
                                              "program that filled the cache; call xlakit.report.write() from your "
                                              "program (or use AllocatorPanel) to see its own."]))
    else:
        left_out.append("Allocator numbers (allocator=False).")
    if live:
        from xlakit.memory import live_arrays

        frame = live_arrays()
        table = lv.live_table(frame)
        total = int(frame["bytes"].sum()) if not frame.empty else 0
        count = int(frame["array"].nunique()) if not frame.empty else 0
        sections.append(lv.live_html(table, lv.treemap_nodes(frame),
                                     include_plotlyjs=plotly_js() if not table.empty else False,
                                     total_bytes=total, arrays=count,
                                     title=f"Live arrays of the process that wrote this report (pid {pid})"))
    else:
        left_out.append("Live arrays (live=False).")
    sections.append(_left_out(left_out))
    return page(title, [s for s in sections if s])


def write(path: str | os.PathLike, **kwargs: Any) -> Path:
    """Write :func:`build` (same keyword arguments) to ``path`` atomically; returns the path.

    Raises:
      ValueError: an empty ``path``. IsADirectoryError: ``path`` is a folder. As :func:`build` otherwise."""
    from xlakit._units import check_out_file

    path = check_out_file(path, "write", "report.html")  # "~/x" is the home folder, never a folder named "~"
    text = build(**kwargs)
    return write_atomic(path, text)
