"""The allocator view: one row per device (in use, peak and what kind of peak, limit...), sparklines, resets.

Pure functions of :class:`~xlakit.memory.AllocatorStats`; shared by :class:`xlakit.widgets.AllocatorPanel`,
its snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Column, Table
from xlakit._text.untrusted import html_text
from xlakit.view.html import note, snapshot

__all__ = ["displayed_peak", "allocator_rows", "sparkline_svg", "peak_cell", "reset_text", "allocator_html",
           "bytes_span"]


def displayed_peak(stats: Any) -> tuple[int | None, str]:
    """The peak a panel shows for one ``AllocatorStats``, and what it is.

    The peak since the last reset when there was one (exact after a ``native``/``clear_refs`` reset; an upper
    bound after a ``baseline`` reset whose peak did not rise); else the allocator's lifetime peak; else, on
    CPU, the process resident high-water mark (``VmHWM``).
    """
    if stats.peak_since_reset_bytes is not None:
        how = "exact" if stats.peak_since_reset_exact else "at most (lifetime peak)"
        return stats.peak_since_reset_bytes, f"since reset ({stats.reset_method}; {how})"
    if stats.peak_bytes_in_use is not None:
        return stats.peak_bytes_in_use, "lifetime (no reset yet)"
    if stats.process_hwm_bytes is not None:
        return stats.process_hwm_bytes, "process high-water mark, lifetime (no reset yet)"
    return None, "not reported"


def allocator_rows(stats_list: Iterable[Any]) -> list[dict[str, Any]]:
    """One dict per device: device, in_use, peak, peak_note, limit, largest_alloc, num_allocs, process_rss.

    Byte values are ``int`` or None (not reported)."""
    rows = []
    for s in stats_list:
        peak, peak_note = displayed_peak(s)
        rows.append({"device": s.device, "in_use": s.bytes_in_use, "peak": peak, "peak_note": peak_note,
                     "limit": s.bytes_limit, "largest_alloc": s.largest_alloc_size, "num_allocs": s.num_allocs,
                     "process_rss": s.process_rss_bytes, "reset_method": s.reset_method})
    return rows


def sparkline_svg(values: Sequence[float | None], width: int = 120, height: int = 24) -> str:
    """A tiny inline SVG polyline of ``values`` (None skipped); the last value is marked with a dot.

    The y range is 0..max, so a flat line at the bottom means nothing in use. Empty input gives an empty SVG.
    Colours follow the theme (``--jp-brand-color1``).
    """
    pts = [(i, float(v)) for i, v in enumerate(values) if v is not None]
    svg = f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' class='xlakit-spark'>"
    if not pts:
        return svg + "</svg>"
    top = max(v for _, v in pts) or 1.0
    n = max(len(values) - 1, 1)
    coords = [(1 + (width - 2) * i / n, height - 2 - (height - 4) * v / top) for i, v in pts]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    x, y = coords[-1]
    return (svg + f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{line}'/>"
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2' fill='#1f77b4'/></svg>")


def bytes_span(n: int | None) -> str:
    """A byte count as HTML: readable text, the exact number in ``data-bytes`` and the tooltip."""
    if n is None:
        return "<span class='xlakit-na'>not reported</span>"
    return f"<span class='xlakit-bytes' data-bytes='{int(n)}' title='{int(n):,} bytes'>{fmt_bytes(int(n))}</span>"


def peak_cell(row: Mapping[str, Any]) -> str:
    """The peak value as HTML: bytes (exact in ``data-bytes``) and what kind of peak it is."""
    if row.get("peak") is None:
        return "<span class='xlakit-na'>not reported</span>"
    return f"{bytes_span(row['peak'])} <small class='xlakit-note'>{html_text(row['peak_note'])}</small>"


def reset_text(result: Any) -> str:
    """One line for a ``ResetResult``: the method that ran, its detail, and when."""
    if result is None:
        return ""
    when = _dt.datetime.fromtimestamp(result.time).strftime("%H:%M:%S")
    return f"{result.method} at {when}: {result.detail}"


def allocator_html(rows: Sequence[Mapping[str, Any]], histories: Mapping[str, Sequence[int | None]],
                   resets: Mapping[str, Any], reset_all: Any = None, notes: Sequence[str] = (),
                   title: str = "Allocator") -> str:
    """Snapshot of the allocator panel: one row per device with a sparkline of bytes in use."""
    table_rows = [{"device": r["device"], "in_use": r["in_use"], "peak": peak_cell(r), "limit": r["limit"],
                   "largest": r["largest_alloc"], "count": r["num_allocs"],
                   "spark": sparkline_svg(histories.get(r["device"], ())),
                   "reset": html_text(reset_text(resets.get(r["device"])))} for r in rows]
    columns = [Column("device", "device"), Column("in_use", "in use", "bytes"),
               Column("peak", "peak", "html", nowrap=False), Column("limit", "limit", "bytes"),
               Column("largest", "largest allocation", "bytes"), Column("count", "allocations", "count"),
               Column("spark", "in use over time", "html"), Column("reset", "last reset", "html", nowrap=False)]
    # Columns no device reports (limit, largest allocation and count on CPU; the notes say so) are left out.
    unreported = {c for c in ("limit", "largest", "count") if rows and all(t[c] is None for t in table_rows)}
    table = Table([c for c in columns if c.key not in unreported], table_rows, css_class="xlakit-allocator").to_html()
    extra = [note(f"reset all: {reset_text(reset_all)}")] if reset_all is not None else []
    return snapshot(title, table + "".join(extra) + "".join(note(n) for n in notes))
