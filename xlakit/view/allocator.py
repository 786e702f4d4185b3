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
from xlakit.memory.reset_meaning import platform_peak_note, reset_explanation, reset_meaning
from xlakit.view.html import note, snapshot

__all__ = ["displayed_peak", "allocator_rows", "sparkline_svg", "peak_cell", "reset_text", "allocator_html",
           "bytes_span", "peak_notes"]


def displayed_peak(stats: Any) -> tuple[int | None, str]:
    """The peak a panel shows for one ``AllocatorStats``, and what it is, in a few words.

    The peak since the last reset when there was one, named by the reset's kind
    (:data:`xlakit.memory.reset_meaning.RESET_MEANINGS`: ``"process high-water mark since reset: +2.0 MiB over
    the 388.2 MiB at reset"``; "at most" after a ``baseline`` reset whose peak did not rise); else the
    allocator's lifetime peak; else, on CPU, the process resident high-water mark (``VmHWM``).
    """
    if stats.peak_since_reset_bytes is not None:
        meaning = reset_meaning(stats.reset_method)
        name = meaning.name if meaning is not None else str(stats.reset_method)
        at_reset = getattr(stats, "peak_at_reset_bytes", None)
        if at_reset is None:
            how = "exact" if stats.peak_since_reset_exact else "at most (lifetime peak)"
            return stats.peak_since_reset_bytes, f"{name} since reset ({how})"
        rise = stats.peak_since_reset_bytes - at_reset
        if rise > 0:
            exact = " (exact)" if stats.peak_since_reset_exact else ""
            return stats.peak_since_reset_bytes, f"{name} since reset: +{fmt_bytes(rise)} over the " \
                                                 f"{fmt_bytes(at_reset)} at reset{exact}"
        how = "" if stats.peak_since_reset_exact else " (at most: the lifetime peak)"
        return stats.peak_since_reset_bytes, f"{name} since reset: no rise over the {fmt_bytes(at_reset)} at " \
                                             f"reset{how}"
    if stats.peak_bytes_in_use is not None:
        return stats.peak_bytes_in_use, "lifetime (no reset yet)"
    if stats.process_hwm_bytes is not None:
        return stats.process_hwm_bytes, "process high-water mark, lifetime (no reset yet)"
    return None, "not reported"


def peak_notes(stats: Any, reset: Any = None) -> list[str]:
    """The sentences under an allocator table for one device's ``AllocatorStats``: what its platform's "in use"
    and "peak" count, and after a reset (``reset``: its ``ResetResult``, or the stats' own ``reset_method``) what
    *Reset peak* set the peak to and what the number after it means."""
    out = [n for n in (platform_peak_note(getattr(stats, "platform", None)),) if n]
    method = getattr(reset, "method", None) or getattr(stats, "reset_method", None)
    explanation = reset_explanation(method, getattr(stats, "peak_at_reset_bytes", None))
    return out + ([explanation] if explanation else [])


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
    """One line for a ``ResetResult``: what kind of reset ran, when, its method and what the peak starts from
    (``"process high-water mark at 12:00:01 (clear_refs): peak starts from 388.2 MiB"``)."""
    if result is None:
        return ""
    when = _dt.datetime.fromtimestamp(result.time).strftime("%H:%M:%S")
    meaning = reset_meaning(result.method)
    name = meaning.name if meaning is not None else result.method
    values = [v for v in (result.peak_at_reset or {}).values() if v is not None]
    start = f": peak starts from {fmt_bytes(max(values))}" if values else ""
    return f"{name} at {when} ({result.method}){start}"


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
