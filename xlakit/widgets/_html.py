"""HTML frames for snapshots and reports (no widget or plotting library)."""

from __future__ import annotations

import html

__all__ = ["snapshot", "page"]


def snapshot(title: str, body: str) -> str:
    """The frame of a widget's static snapshot."""
    return (f"<div class='xlakit-snapshot' style='font-family:sans-serif'>"
            f"<h4 style='margin:4px 0'>{html.escape(title)}</h4>{body}</div>")


def page(title: str, sections: list[str]) -> str:
    """A standalone HTML page around snapshot sections."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:16px} table{border-collapse:collapse}"
            " th,td{border:1px solid #ddd;padding:2px 6px;text-align:right} th{background:#f4f4f4}"
            " td:first-child,th:first-child{text-align:left} section{margin-bottom:32px}</style>"
            "</head><body>" + "".join(f"<section>{s}</section>" for s in sections) + "</body></html>")
