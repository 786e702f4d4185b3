"""Old home of the HTML frames; they live in :mod:`xlakit.view.html` now. Kept for existing imports."""

from __future__ import annotations

from xlakit.view.html import page, snapshot

__all__ = ["snapshot", "page"]
