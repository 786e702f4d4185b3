"""One table model, rendered to text (terminals, reprs, the CLI) and to HTML (widgets, snapshots, the report).

A :class:`Table` is columns (key, header, kind) and rows (dicts). Cells are formatted by
:func:`xlakit._text.format.fmt_value` by the column's kind, so bytes read ``1.5 MiB`` and seconds ``2.42 s``
everywhere; HTML byte cells also carry the exact number (``data-bytes`` and the tooltip). Styling comes from
:data:`xlakit._text.theme.STYLE` (JupyterLab's theme variables), not from inline colours. No dependencies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xlakit._text.format import NOT_REPORTED, _missing, fmt_value
from xlakit._text.untrusted import html_text, html_wrappable, terminal_text

__all__ = ["Column", "Table", "KINDS"]

#: Column kinds: how a cell is formatted.
KINDS = ("text", "bytes", "seconds", "count", "float", "datetime", "html")
#: Characters a text cell shows at most (:meth:`Table.to_text`); longer ones end in "… (N characters)". Every row is
#: padded to its column's widest cell, so one 4 MB name (an entry header may hold one) made ``xlakit cache ls``
#: print 50 MB for ten entries.
MAX_CELL = 240


def _fit(text: str) -> str:
    if len(text) <= MAX_CELL:
        return text
    tail = f"… ({len(text):,} characters)"
    return text[: MAX_CELL - len(tail)] + tail


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: the row key, its header, its kind (:data:`KINDS`), whether it may wrap (``nowrap``
    False) — short names and keys never wrap; long free text (reasons, source lines, layers, pytree paths)
    may, at spaces and separators (:func:`~xlakit._text.untrusted.html_wrappable`) — and ``title_key``: the
    row key whose text the HTML cell shows on hover (its ``title``), e.g. the whole of a shortened text."""

    key: str
    header: str
    kind: str = "text"
    nowrap: bool = True
    title_key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column kind must be one of {KINDS}, got {self.kind!r}")


def _columns(columns: Iterable[Column | tuple]) -> tuple[Column, ...]:
    return tuple(c if isinstance(c, Column) else Column(*c) for c in columns)


@dataclasses.dataclass
class Table:
    """Rows (dicts) under columns, rendered by :meth:`to_text` and :meth:`to_html`.

    Args:
      columns: :class:`Column` objects or ``(key, header[, kind[, nowrap]])`` tuples.
      rows: dicts (missing keys and None/NaN show as empty, or "not reported" in byte columns).
      caption: a title line (str | None).
      max_rows: show at most this many rows; the rest is summarised in a last line (int | None).
      css_class: extra CSS class of the ``<table>`` (str).
      drop_empty: leave out the text columns empty in every row shown (bool, default False): an empty column
        still took its share of a narrow cell.
    """

    columns: Sequence[Column | tuple]
    rows: Sequence[Mapping[str, Any]]
    caption: str | None = None
    max_rows: int | None = None
    css_class: str = ""
    drop_empty: bool = False

    def __post_init__(self) -> None:
        self.cols: tuple[Column, ...] = _columns(self.columns)
        self.rows = list(self.rows)
        if self.drop_empty and self.shown:
            self.cols = tuple(c for c in self.cols if c.kind != "text" or any(self.cell_text(c, r) for r in self.shown))
        self.columns = self.cols

    @property
    def shown(self) -> list[Mapping[str, Any]]:
        rows = list(self.rows)
        return rows if self.max_rows is None else rows[: self.max_rows]

    @property
    def more(self) -> int:
        """Rows left out by ``max_rows`` (int)."""
        return len(self.rows) - len(self.shown)

    def cell_text(self, column: Column, row: Mapping[str, Any]) -> str:
        v = row.get(column.key)
        if column.kind == "bytes" and _missing(v):
            return NOT_REPORTED
        if column.kind == "html":
            return "" if _missing(v) else str(v)
        return fmt_value(v, column.kind)

    def to_text(self) -> str:
        """Aligned plain text: numbers right-aligned, text left-aligned, a rule under the header; cells longer than
        :data:`MAX_CELL` characters are cut (the HTML and the data keep them whole)."""
        cols = self.cols
        # Cells hold names from manifests, buckets and logs: shown as text, never as terminal control sequences.
        grid = [[terminal_text(c.header) for c in cols]] + [[_fit(terminal_text(self.cell_text(c, r))) for c in cols]
                                                            for r in self.shown]
        widths = [max(len(line[i]) for line in grid) for i in range(len(cols))]
        right = [c.kind in ("bytes", "seconds", "count", "float") for c in cols]

        def fmt(line: list[str]) -> str:
            cells = zip(line, widths, right, strict=True)
            return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in cells).rstrip()

        out = ([self.caption] if self.caption else []) + [fmt(grid[0]), "  ".join("-" * w for w in widths)]
        out += [fmt(line) for line in grid[1:]]
        if self.more:
            out.append(f"... {self.more} more row(s)")
        return "\n".join(out)

    def _td(self, column: Column, row: Mapping[str, Any]) -> str:
        v: Any = row.get(column.key)
        cls = ["xlakit-num" if column.kind in ("bytes", "seconds", "count", "float") else "xlakit-text"]
        if column.nowrap:
            cls.append("xlakit-nowrap")
        elif column.kind == "text":
            cls.append("xlakit-wrap")
        attrs = ""
        if column.kind == "bytes":
            if _missing(v):
                cls.append("xlakit-na")
            else:
                attrs = f" data-bytes='{int(v)}' title='{int(v):,} bytes'"
        elif column.kind == "seconds" and not _missing(v):
            attrs = f" data-seconds='{float(v)!r}' title='{float(v)!r} s'"
        elif column.title_key and not _missing(row.get(column.title_key)):
            attrs = f" title='{html_text(row.get(column.title_key))}'"
        text = self.cell_text(column, row)
        # Text that may wrap breaks at spaces and separators, never inside a name (html_wrappable).
        body = text if column.kind == "html" else html_wrappable(text) if not column.nowrap else html_text(text)
        return f"<td class='{' '.join(cls)}'{attrs}>{body}</td>"

    def to_html(self) -> str:
        """An HTML table (class ``xlakit-table``) themed by :data:`xlakit._text.theme.STYLE`, inside a
        horizontally scrolling wrapper so a narrow window scrolls the table as one, header included."""
        cols = self.cols
        head = "".join(f"<th class='{'xlakit-num' if c.kind in ('bytes', 'seconds', 'count', 'float') else ''}'>"
                       f"{html_text(c.header)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(self._td(c, r) for c in cols) + "</tr>" for r in self.shown)
        if self.more:
            body += f"<tr><td colspan='{len(cols)}'>… {self.more} more row(s)</td></tr>"
        cap = f"<caption>{html_text(self.caption)}</caption>" if self.caption else ""
        thead = f"<thead><tr>{head}</tr></thead>" if any(c.header for c in cols) else ""
        return (f"<div class='xlakit-table-wrap'><table class='xlakit-table {html_text(self.css_class)}'>{cap}"
                f"{thead}<tbody>{body}</tbody></table></div>")

    def _repr_html_(self) -> str:
        from xlakit._text.theme import STYLE

        return STYLE + self.to_html()

    def __str__(self) -> str:
        return self.to_text()
