"""HTML frames for snapshots and reports, and the pandas bridge to :class:`~xlakit._text.table.Table`.

No widget library here; pandas is imported only by the functions that take frames.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Column, Table
from xlakit._text.theme import STYLE
from xlakit._text.untrusted import html_text

__all__ = ["snapshot", "page", "note", "missing", "frame_records", "bytes_cell", "table_html", "TABLE_STYLE"]

#: The stylesheet every table uses (kept under its old name).
TABLE_STYLE = STYLE


def snapshot(title: str, body: str) -> str:
    """The frame of a widget's static snapshot (class ``xlakit-snapshot``)."""
    return f"<div class='xlakit-snapshot'><h4>{html_text(title)}</h4>{body}</div>"


def note(text: str) -> str:
    """A muted line of explanation (escaped)."""
    return f"<p class='xlakit-note'>{html_text(text)}</p>"


def page(title: str, sections: list[str]) -> str:
    """A standalone HTML page around snapshot sections (light colours, the same stylesheet)."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'><title>{html_text(title)}</title>"
            "<style>body{font-family:sans-serif;margin:16px} section{margin-bottom:32px}</style>"
            f"{STYLE}</head><body>" + "".join(f"<section>{s}</section>" for s in sections) + "</body></html>")


def missing(v: Any) -> bool:
    """None, NaN, ``pandas.NA`` or ``pandas.NaT``: a value that is not reported."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - the widgets extra has pandas
        return False
    return v is pd.NA or v is pd.NaT


def frame_records(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts with the index as a column (pandas NA -> None)."""
    if frame is None or frame.empty:
        return []
    flat = frame.reset_index() if frame.index.name is not None else frame
    return [{k: (None if missing(v) else v) for k, v in rec.items()} for rec in flat.to_dict("records")]


def bytes_cell(n: Any) -> str:
    """A table cell for a byte count: readable text, the exact number in ``data-bytes`` and the title."""
    if missing(n):
        return "<td class='xlakit-num xlakit-na'>not reported</td>"
    n = int(n)
    return f"<td class='xlakit-num' data-bytes='{n}' title='{n:,} bytes'>{html_text(fmt_bytes(n))}</td>"


def table_html(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], *,
               byte_columns: Iterable[str] = (), seconds_columns: Iterable[str] = (), caption: str | None = None,
               max_rows: int | None = None, css_class: str = "xlakit-table") -> str:
    """:class:`Table` HTML from ``(key, header)`` columns; the keys in ``byte_columns`` / ``seconds_columns``
    are formatted as bytes / seconds."""
    byte_columns, seconds_columns = set(byte_columns), set(seconds_columns)
    cols = [Column(k, h, "bytes" if k in byte_columns else "seconds" if k in seconds_columns else "text")
            for k, h in columns]
    return Table(cols, rows, caption=caption, max_rows=max_rows, css_class=css_class).to_html()
