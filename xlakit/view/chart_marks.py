"""Marks drawn over a chart of program order: the peak step as a dashed line, named by a label or a caption.

Shared by the liveness and lifetime charts (:mod:`xlakit.view.memory_charts`); plotly is not imported here.
"""

from __future__ import annotations

__all__ = ["PEAK_COLOR", "mark_peak", "caption_room"]

#: The colour of the peak's line and its text.
PEAK_COLOR = "#d62728"
#: px per line of the peak's caption (11 px text) and per average character (DejaVu Sans, chromium's "sans-serif").
_CAPTION_LINE, _CAPTION_CHAR = 15, 6.6


def mark_peak(fig, step: int, text: str, x_range: tuple[float, float] | None = None, *, left: bool = False) -> int:
    """A vertical dashed line at ``step`` across the plot, and ``text`` naming the peak: without ``x_range``
    a short label beside the line's top (on its ``left`` side when the line is near the right edge); with it
    (the data's first and last step) the axis is pinned to that range and the text is a caption above the
    plot's top-left corner, wrapped at spaces for the narrowest chart (:data:`~xlakit._text.theme.NARROW_WIDTH`).
    Beside the line a caption ran past the plot's edge (the line name cut off at 1280 and 800 px), and a
    data-anchored one widened plotly's autorange. Returns the px the caption takes above the plot, for
    :func:`caption_room` once the layout is set (0 for a label)."""
    from xlakit._text.theme import NARROW_WIDTH, title_lines

    fig.add_vline(x=step, line=dict(color=PEAK_COLOR, dash="dash", width=2))
    style = dict(text=text, showarrow=False, font=dict(color=PEAK_COLOR, size=11))
    lo, hi = x_range if x_range is not None else (0.0, 0.0)
    if hi <= lo:
        fig.add_annotation(x=step, xanchor="right" if left else "left", y=1.0, yref="paper", yanchor="top",
                           bgcolor="rgba(255,255,255,0.7)", **style)
        return 0
    fig.update_xaxes(range=[lo, hi], autorange=False)
    lines = title_lines(text, NARROW_WIDTH - 80, char_px=_CAPTION_CHAR)
    fig.add_annotation(x=0, xref="paper", xanchor="left", y=1.0, yref="paper", yanchor="bottom", yshift=4,
                       align="left", **{**style, "text": "<br>".join(lines)})
    return _CAPTION_LINE * len(lines) + 6


def caption_room(fig, px: int) -> None:
    """``px`` more at the top of ``fig`` (margin and height) for a caption :func:`mark_peak` put above the plot,
    and the title pinned to the top (in plotly's default place, the middle of the top margin, the grown margin
    moved it down onto the caption)."""
    if px:
        fig.update_layout(margin=dict(t=int(fig.layout.margin.t) + px), height=int(fig.layout.height) + px,
                          title=dict(yref="container", y=1, yanchor="top", pad=dict(t=12)))
