"""Old home of the widgets' pure data helpers; they live in :mod:`xlakit.view` now (one module per view).

Kept so existing imports (``from xlakit.widgets import _data``) keep working.
"""

from __future__ import annotations

from xlakit.view.allocator import allocator_rows, displayed_peak, sparkline_svg
from xlakit.view.breakdown import BREAKDOWN_PARTS, SORT_KEYS, UNITS, breakdown_frame, breakdown_values, unique_labels
from xlakit.view.cache import explain_entry, filter_entries, partition_totals
from xlakit.view.html import TABLE_STYLE, bytes_cell, frame_records, missing, table_html
from xlakit.view.live import live_table, treemap_nodes
from xlakit.view.timeline import (
                                   KIND_STYLE,
                                   EventColumns,
                                   TimelineData,
                                   downsample,
                                   downsample_series,
                                   marker_sizes,
                                   timeline_data,
)

__all__ = ["BREAKDOWN_PARTS", "SORT_KEYS", "UNITS", "breakdown_frame", "breakdown_values", "unique_labels",
           "displayed_peak", "allocator_rows", "sparkline_svg", "EventColumns", "TimelineData", "timeline_data",
           "downsample", "downsample_series", "marker_sizes", "partition_totals", "filter_entries",
           "explain_entry", "live_table", "treemap_nodes", "bytes_cell", "table_html", "KIND_STYLE", "missing",
           "frame_records", "TABLE_STYLE"]
