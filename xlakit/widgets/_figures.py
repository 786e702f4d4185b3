"""Old home of the plotly figure builders; they live in :mod:`xlakit.view` now. Kept for existing imports."""

from __future__ import annotations

from xlakit.view.breakdown import breakdown_figure, liveness_figure
from xlakit.view.live import treemap_figure
from xlakit.view.plotly_html import figure_html
from xlakit.view.timeline import timeline_figure

__all__ = ["breakdown_figure", "liveness_figure", "timeline_figure", "treemap_figure", "figure_html"]
