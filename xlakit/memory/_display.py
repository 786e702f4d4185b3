"""Shared display helpers for the memory objects: byte formatting and small HTML tables (no dependencies)."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

__all__ = ["fmt_bytes", "html_table", "record_repr"]


def fmt_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; None -> ``"not reported"``. Binary units, as allocators count."""
    if n is None:
        return "not reported"
    sign, n_abs = ("-" if n < 0 else ""), abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n_abs < 1024 or unit == "TiB":
            return f"{sign}{n_abs} B" if unit == "B" else f"{sign}{n_abs:.1f} {unit}"
        n_abs /= 1024
    raise AssertionError("unreachable")


def html_table(rows: Iterable[tuple[str, Any]], title: str | None = None) -> str:
    """A two-column HTML table (name, value); values pass through ``str`` and are escaped."""
    cells = "".join(f"<tr><th style='text-align:left'>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
                    for k, v in rows)
    caption = f"<caption style='text-align:left'><b>{escape(title)}</b></caption>" if title else ""
    return f"<table>{caption}{cells}</table>"


def record_repr(name: str, parts: Iterable[str]) -> str:
    return f"{name}({', '.join(parts)})"
