"""Old home of the static snapshot builders; they live in :mod:`xlakit.view` now. Kept for existing imports."""

from __future__ import annotations

from xlakit.view.allocator import allocator_html, peak_cell, reset_text
from xlakit.view.breakdown import breakdown_html, details_html
from xlakit.view.cache import cache_html, entries_html, partitions_html
from xlakit.view.live import live_html
from xlakit.view.timeline import timeline_html

__all__ = ["breakdown_html", "allocator_html", "timeline_html", "cache_html", "entries_html", "partitions_html",
           "live_html", "details_html", "peak_cell", "reset_text"]
