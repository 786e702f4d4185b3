"""Plotly figures for the widgets and the report, built from the pure data of :mod:`xlakit.widgets._data`.

Each builder returns a ``plotly.graph_objects.Figure``; widgets copy it into their ``FigureWidget``
(:func:`sync_figure`) and snapshots/reports render it to HTML (:func:`figure_html`). Imports plotly, never
ipywidgets.
"""

from __future__ import annotations

import copy
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from xlakit.memory._display import fmt_bytes
from xlakit.widgets import _data

__all__ = ["breakdown_figure", "liveness_figure", "timeline_figure", "treemap_figure", "figure_html", "sync_figure"]

_PART_COLORS = {
    "arguments": "#1f77b4", "outputs": "#ff7f0e", "temporaries": "#2ca02c", "code": "#9467bd",
    "host arguments": "#aec7e8", "host outputs": "#ffbb78", "host temporaries": "#98df8a", "host code": "#c5b0d5",
    "aliases (reused)": "#7f7f7f", "host aliases (reused)": "#c7c7c7",
}
_LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1)  # above the plot: long
# tick labels below never collide with it
_BASE_LAYOUT = dict(margin=dict(l=60, r=20, t=70, b=40), template="plotly_white", height=360)


def breakdown_figure(frame, unit: str = "bytes") -> go.Figure:
    """Stacked bars per program (``barmode="relative"``: aliases below zero) and a peak marker per program."""
    values = _data.breakdown_values(frame, unit)
    programs = [str(p) for p in frame.index]
    fig = go.Figure()
    suffix = "%" if unit == "percent" else ""
    for field, label, _sign in _data.BREAKDOWN_PARTS:
        ys = values[label]
        if all(v is None for v in ys):
            continue
        raw = [None if _data.missing(v) else v for v in frame[field].tolist()]
        text = [fmt_bytes(int(r)) if r is not None else "not reported" for r in raw]
        fig.add_bar(x=programs, y=ys, name=label, marker_color=_PART_COLORS[label], customdata=text,
                    hovertemplate=f"%{{x}}<br>{label}: %{{customdata}} (%{{y:.4~s}}{suffix})<extra></extra>")
    peaks = values["peak"]
    if any(v is not None for v in peaks):
        raw = [None if _data.missing(v) else v for v in frame["peak_bytes"].tolist()]
        fig.add_scatter(x=programs, y=peaks, mode="markers", name="peak (XLA)",
                        marker=dict(symbol="line-ew-open", size=28, color="black", line=dict(width=3)),
                        customdata=[fmt_bytes(int(r)) if r is not None else "not reported" for r in raw],
                        hovertemplate="%{x}<br>XLA peak: %{customdata}<extra></extra>")
    fig.update_layout(**_BASE_LAYOUT, barmode="relative", title="Compiled memory per program",
                      yaxis_title="% of the program's total" if unit == "percent" else "bytes",
                      legend=_LEGEND, clickmode="event")
    if unit == "bytes":
        fig.update_yaxes(tickformat="~s", ticksuffix="B")
    return fig


def liveness_figure(frame, name: str, max_points: int = 4000) -> go.Figure:
    """Live bytes over program order (``BufferAssignment.live_bytes_by_step()``): stacked by kind when the
    frame has kind columns (reconstructed liveness), else one line per heap-simulator trace."""
    fig = go.Figure()
    if frame is not None and not frame.empty:
        if "trace" in frame.columns:
            for t, part in frame.groupby("trace"):
                x, y = _data.downsample_series(range(len(part)), part["live_bytes"], max_points)
                fig.add_scatter(x=x, y=y, mode="lines", name=f"trace {t} (allocation {part['allocation'].iloc[0]})")
        else:
            for kind in ("parameter", "output", "temporary", "constant"):
                if kind in frame.columns and frame[kind].any():
                    x, y = _data.downsample_series(frame["step"], frame[kind], max_points)
                    fig.add_scatter(x=x, y=y, mode="lines", name=kind, stackgroup="live")
    fig.update_layout(**{**_BASE_LAYOUT, "height": 300}, title=f"Live bytes over program order: {name}",
                      xaxis_title="step (instruction in schedule order)", yaxis_title="bytes")
    fig.update_yaxes(tickformat="~s", ticksuffix="B")
    return fig


def timeline_figure(data: _data.TimelineData) -> go.Figure:
    """One WebGL marker trace per kind (lane = y, duration = size) and the cumulative seconds-saved line."""
    fig = go.Figure()
    for kind, p in data.points.items():
        symbol, color = _data.KIND_STYLE[kind]
        fig.add_scattergl(x=p["x"], y=p["y"], mode="markers", name=kind, customdata=p["index"],
                          hovertext=p["hover"], hoverinfo="text",
                          marker=dict(symbol=symbol, color=color, size=p["size"], opacity=0.8,
                                      line=dict(width=0)))
    if data.saved_x.size:
        fig.add_scattergl(x=data.saved_x, y=data.saved_y, mode="lines", name="seconds saved (cumulative)",
                          yaxis="y2", line=dict(color="#2ca02c", width=2, shape="hv"),
                          hovertemplate="%{x:.2f} s: %{y:.3f} s saved<extra></extra>")
    lanes = list(data.lanes)
    title = f"Cache events: {data.matched} of {data.total}"
    if data.downsampled:
        title += f" (drawn: {data.shown}, down-sampled)"
    fig.update_layout(**{**_BASE_LAYOUT, "height": max(300, 60 + 28 * len(lanes))}, title=title,
                      xaxis_title="seconds since the first event",
                      yaxis=dict(tickmode="array", tickvals=list(range(len(lanes))), ticktext=lanes,
                                 range=[-0.7, max(len(lanes), 1) - 0.3], autorange=False),
                      yaxis2=dict(title="seconds saved", overlaying="y", side="right", rangemode="tozero",
                                  showgrid=False),
                      legend=_LEGEND)
    return fig


def treemap_figure(nodes: dict[str, list[Any]]) -> go.Figure:
    """Treemap device -> memory kind -> dtype[shape], area = bytes."""
    fig = go.Figure(go.Treemap(ids=nodes["ids"], labels=nodes["labels"], parents=nodes["parents"],
                               values=nodes["values"], text=nodes["text"], branchvalues="total",
                               textinfo="label+text", hovertemplate="%{label}<br>%{text}<extra></extra>"))
    fig.update_layout(**{**_BASE_LAYOUT, "margin": dict(l=5, r=5, t=40, b=5)},
                      title="Live arrays: device → memory kind → array")
    return fig


def figure_html(fig: go.Figure, include_plotlyjs: bool | str = "cdn") -> str:
    """The figure as an HTML fragment (``include_plotlyjs``: True inlines plotly.js, "cdn" links it, False
    assumes the page already has it)."""
    return pio.to_html(fig, full_html=False, include_plotlyjs=include_plotlyjs,
                       config={"responsive": True, "displaylogo": False})


def sync_figure(widget: Any, fig: go.Figure) -> None:
    """Make a ``FigureWidget`` show ``fig``: traces updated in place when their number and types match,
    replaced otherwise; the layout replaced; the widget's full state (what a late front-end loads) updated."""
    with widget.batch_update():
        same = len(widget.data) == len(fig.data) and all(a.type == b.type for a, b in zip(widget.data, fig.data))
        if same:
            for old, new in zip(widget.data, fig.data):
                spec = new.to_plotly_json()
                spec.pop("type", None)
                old.update(spec, overwrite=True)
        else:
            widget.data = ()
            widget.add_traces(list(fig.data))
        widget.layout = fig.layout
    # The messages above reach front-ends that are connected now. A front-end that connects later (Voilà,
    # a re-opened notebook, saved widget state) gets only the full-state traits, which plotly sets once at
    # construction: keep them current too.
    widget._widget_data = copy.deepcopy(widget._data)
    widget._widget_layout = copy.deepcopy(widget._layout_obj._props)
