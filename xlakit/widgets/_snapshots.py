"""Static HTML for each view (plotly HTML plus tables with the numbers), from the pure data only.

Widgets call these from ``to_html()`` (their ``text/html`` snapshot) and :mod:`xlakit.report` calls them
for a standalone page, so a notebook without a kernel and a report show the same numbers. Byte cells carry
the exact count in ``data-bytes`` next to the readable text. Imports plotly, never ipywidgets.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from xlakit.events import KINDS
from xlakit.memory._display import fmt_bytes
from xlakit.widgets import _data, _figures
from xlakit.widgets._html import snapshot

__all__ = ["breakdown_html", "allocator_html", "timeline_html", "cache_html", "entries_html", "partitions_html",
           "live_html", "details_html", "peak_cell", "reset_text"]


def _note(text: str) -> str:
    return f"<p style='color:#555;font-size:12px;margin:2px 0'>{escape(text)}</p>"


def details_html(selected: str | None, largest, note: str | None = None) -> str:
    """The largest-buffers table of the selected program (or the note saying why there is none)."""
    if selected is None:
        return _note("Select a program to see its largest buffers and live bytes over program order.")
    parts = [f"<h5 style='margin:6px 0'>Largest buffers at the peak: {escape(selected)}</h5>"]
    if note:
        parts.append(_note(note))
    if largest is not None and not largest.empty:
        rows = _data.frame_records(largest)
        for r in rows:
            r["shape"] = "×".join(str(d) for d in (r.get("shape") or ())) if r.get("shape") is not None else None
        parts.append(_data.table_html(rows, [("instruction", "instruction"), ("opcode", "opcode"),
                                             ("dtype", "dtype"), ("shape", "shape"), ("bytes", "bytes"),
                                             ("kind", "allocation kind"), ("allocation", "allocation")],
                                      byte_columns=["bytes"], css_class="xlakit-largest"))
        if largest.attrs.get("source"):
            parts.append(_note(f"source: {largest.attrs['source']}"))
    return "".join(parts)


def breakdown_html(frame, unit: str = "bytes", *, include_plotlyjs: bool | str = "cdn", selected: str | None = None,
                   largest=None, liveness=None, detail_note: str | None = None, notes: Sequence[str] = ()) -> str:
    """Snapshot of a memory breakdown: the bar chart, one table row per program, and the selection's detail."""
    if frame.empty:
        return snapshot("Memory breakdown", _note("No programs."))
    fig = _figures.breakdown_figure(frame, unit)
    used = [(f, label) for f, label, _ in _data.BREAKDOWN_PARTS if frame[f].notna().any()]
    columns = [("program", "program"), *used, ("peak_bytes", "peak (XLA)"), ("footprint_bytes", "footprint"),
               ("total_bytes", "total")]
    byte_columns = [f for f, _ in columns[1:]]
    table = _data.table_html(_data.frame_records(frame), columns, byte_columns=byte_columns,
                             css_class="xlakit-breakdown")
    body = [_figures.figure_html(fig, include_plotlyjs), table]
    body += [_note(n) for n in notes]
    if selected is not None:
        body.append(details_html(selected, largest, detail_note))
        if liveness is not None and not liveness.empty:
            body.append(_figures.figure_html(_figures.liveness_figure(liveness, selected), False))
    return snapshot(f"Memory breakdown ({len(frame)} programs, {unit})", "".join(body))


def peak_cell(row: Mapping[str, Any]) -> str:
    """The peak value as HTML: bytes (exact in ``data-bytes``) and what kind of peak it is."""
    peak = row.get("peak")
    if peak is None:
        return "<span class='xlakit-na'>not reported</span>"
    return (f"<span class='xlakit-bytes' data-bytes='{int(peak)}' title='{int(peak)} bytes'>"
            f"{escape(fmt_bytes(int(peak)))}</span> <small style='color:#666'>{escape(row['peak_note'])}</small>")


def reset_text(result: Any) -> str:
    """One line for a ``ResetResult``: the method that ran, its detail, and when."""
    if result is None:
        return ""
    when = _dt.datetime.fromtimestamp(result.time).strftime("%H:%M:%S")
    return f"{result.method} at {when}: {result.detail}"


def allocator_html(rows: Sequence[Mapping[str, Any]], histories: Mapping[str, Sequence[int | None]],
                   resets: Mapping[str, Any], reset_all: Any = None, notes: Sequence[str] = ()) -> str:
    """Snapshot of the allocator panel: one row per device with a sparkline of bytes in use."""
    head = ["device", "in use", "peak", "limit", "largest allocation", "allocations", "in use over time",
            "last reset"]
    body = []
    for r in rows:
        spark = _data.sparkline_svg(histories.get(r["device"], ()))
        body.append("<tr>" + f"<td>{escape(r['device'])}</td>" + _data.bytes_cell(r["in_use"])
                    + f"<td class='xlakit-peak'>{peak_cell(r)}</td>" + _data.bytes_cell(r["limit"])
                    + _data.bytes_cell(r["largest_alloc"])
                    + f"<td>{'not reported' if r['num_allocs'] is None else int(r['num_allocs'])}</td>"
                    + f"<td>{spark}</td><td>{escape(reset_text(resets.get(r['device'])))}</td></tr>")
    table = (_data.TABLE_STYLE + "<table class='xlakit-table xlakit-allocator' style='border-collapse:collapse;"
             "font-size:12px'><thead><tr>"
             + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    extra = [_note(f"reset all: {reset_text(reset_all)}")] if reset_all is not None else []
    return snapshot("Allocator", table + "".join(extra) + "".join(_note(n) for n in notes))


def timeline_html(data: _data.TimelineData, *, include_plotlyjs: bool | str = "cdn") -> str:
    """Snapshot of the cache timeline: the figure and per-function event counts."""
    if data.total == 0:
        return snapshot("Cache timeline", _note("No events yet."))
    used = [k for k in KINDS if any(k in c for c in data.counts.values())]
    rows = [{"name": name, **{k: c.get(k, 0) for k in used}} for name, c in sorted(data.counts.items())]
    table = _data.table_html(rows, [("name", "function"), *((k, k) for k in used)], css_class="xlakit-timeline")
    start = _dt.datetime.fromtimestamp(data.t0).strftime("%Y-%m-%d %H:%M:%S") if data.t0 else "?"
    summary = _note(f"{data.matched} of {data.total} events match the filters; {data.shown} drawn"
                    f"{' (down-sampled)' if data.downsampled else ''}; first event at {start}; "
                    f"seconds saved by hits: {data.saved_s:.3f}")
    return snapshot("Cache timeline", _figures.figure_html(_figures.timeline_figure(data), include_plotlyjs)
                    + summary + table)


ENTRY_COLUMNS = (("name", "name"), ("key", "key"), ("partition", "partition"), ("size_bytes", "size"),
                 ("compile_s", "compile s"), ("hits", "hits"), ("loadable", "loadable"),
                 ("argument_size_in_bytes", "arguments"), ("output_size_in_bytes", "outputs"),
                 ("temp_size_in_bytes", "temporaries"), ("last_used", "last used"))
_ENTRY_BYTES = ("size_bytes", "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")


def entries_html(frame, max_rows: int = 200) -> str:
    """The entries of an ``ExecutableCache.entries()`` frame as a table (sizes exact in ``data-bytes``)."""
    rows = _data.frame_records(frame)
    for r in rows:
        if r.get("key"):
            r["key"] = r["key"] if len(r["key"]) <= 32 else r["key"][:32] + "…"
    columns = [(k, h) for k, h in ENTRY_COLUMNS if k in frame.columns]
    return (_data.table_html(rows, columns, byte_columns=_ENTRY_BYTES, max_rows=max_rows, css_class="xlakit-entries")
            if rows else _note("No entries."))


def partitions_html(totals) -> str:
    """Per-partition totals (:func:`xlakit.widgets._data.partition_totals`) as a table."""
    rows = _data.frame_records(totals)
    if not rows:
        return ""
    return _data.table_html(rows, [("partition", "partition"), ("entries", "entries"), ("size_bytes", "bytes on disk"),
                                   ("compile_s", "compile s"), ("hits", "hits")], byte_columns=["size_bytes"],
                            caption="Per partition", css_class="xlakit-partitions")


def cache_html(frame, totals, *, max_rows: int = 200, folder: str | None = None, status: str | None = None) -> str:
    """Snapshot of the cache browser: per-partition totals and the entries table."""
    head = _note(f"folder: {folder}") if folder else ""
    return snapshot(f"Cache ({len(frame)} entries)",
                    head + partitions_html(totals) + entries_html(frame, max_rows) + (status or ""))


def live_html(table, nodes: Mapping[str, list[Any]], *, include_plotlyjs: bool | str = "cdn",
              total_bytes: int | None = None, arrays: int | None = None) -> str:
    """Snapshot of the live arrays view: treemap and the grouped table."""
    if table.empty:
        return snapshot("Live arrays", _note("No live JAX arrays."))
    rows = _data.frame_records(table)
    body = _data.table_html(rows, [("device", "device"), ("memory_kind", "memory kind"), ("array", "array"),
                                   ("arrays", "count"), ("bytes", "bytes"), ("created_at", "created at")],
                            byte_columns=["bytes"], css_class="xlakit-live")
    summary = _note(f"{arrays} array(s), {fmt_bytes(total_bytes)} ({total_bytes} bytes) in total"
                    if total_bytes is not None else "")
    return snapshot("Live arrays", _figures.figure_html(_figures.treemap_figure(nodes), include_plotlyjs)
                    + summary + body)
