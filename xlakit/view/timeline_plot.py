"""The cache timeline's figure as a plain plotly dict: what the page draws, built without plotly's objects.

Every part is chosen for what it costs the browser to draw (``Plotly.newPlot``, headless chromium without a
GPU): one marker trace per event kind (each marker is an SVG element, ~0.15-0.25 ms each), the spans of each
span kind as **one** SVG path (a layout shape of type ``path``: a line trace split by gaps is one SVG path per
span, ~500 elements at 1,500 markers), the seconds-saved curve as one step line, no plotly default template
(ours only), and margins wide enough for the lane labels so plotly lays the figure out once. Numbers stay numpy
arrays (plotly's JSON encoder sends them as typed arrays). Pure; :func:`xlakit.view.timeline.timeline_figure`
wraps it in a ``plotly.graph_objects.Figure`` without validation.
"""

from __future__ import annotations

from typing import Any, cast

from xlakit._text.format import middle_cut
from xlakit.view.lanes import LIBRARY_LANE

__all__ = ["KIND_STYLE", "KIND_OFFSET", "SPAN_KINDS", "GL_THRESHOLD", "LANE_LABEL_CHARS", "LANE_LABEL_PX", "lane_label",
           "timeline_spec", "span_path"]

#: kind -> (plotly marker symbol, colour). Symbols are ones WebGL scatter traces draw.
KIND_STYLE: dict[str, tuple[str, str]] = {
    "hit": ("circle", "#2ca02c"), "miss": ("x", "#d62728"), "compile": ("square", "#1f77b4"),
    "store": ("triangle-up", "#9467bd"), "skip": ("diamond", "#7f7f7f"), "corrupt": ("star", "#e377c2"),
    "evict": ("triangle-down", "#8c564b"), "load_error": ("cross", "#ff7f0e"), "store_error": ("cross", "#bcbd22"),
    "trace": ("circle-open", "#17becf"), "lower": ("square-open", "#aec7e8"),
    # the shared (remote) tier
    "remote_hit": ("diamond-open", "#2ca02c"), "remote_miss": ("x-open", "#d62728"),
    "upload": ("triangle-up-open", "#9467bd"), "upload_error": ("cross-open", "#bcbd22"),
    "claim": ("star-open", "#1f77b4"), "wait": ("triangle-right", "#7f7f7f"),
    # an in-process retrace/recompile of a function (what changed is in its reason)
    "recompile": ("hexagon", "#ff4500"),
    # enable_cache() set a configured JAX cache folder aside (the folder is in the event)
    "set_aside": ("pentagon", "#8c564b"),
}
OTHER_STYLE = ("circle-dot", "#333333")  # a kind this view does not know yet
#: Vertical offset of each kind within its lane, so a hit 60 ms after a compile is never hidden under it.
KIND_OFFSET: dict[str, float] = {
    "compile": 0.0, "hit": 0.3, "miss": -0.3, "store": 0.15, "skip": -0.15, "corrupt": -0.4, "evict": 0.4,
    "load_error": -0.22, "store_error": 0.22, "trace": -0.07, "lower": 0.07,
    "remote_hit": 0.26, "remote_miss": -0.26, "upload": 0.11, "upload_error": 0.34, "claim": 0.45, "wait": -0.45,
    "recompile": -0.36, "set_aside": 0.38,
}
#: Kinds with a duration drawn as a span from its start to its end (``Event.time`` is the end): compiles,
#: and hits (the load).
SPAN_KINDS = ("compile", "hit")
#: Markers (all kinds together) above which they are drawn with WebGL (``scattergl``); at or below it, SVG
#: (crisper, no GPU needed). Measured in headless chromium with WebGL in software (``--disable-gpu``:
#: SwiftShader), 31 lanes, CPU seconds of the whole browser per ``Plotly.newPlot``: layout alone 0.2-0.3;
#: SVG 1,500 markers 0.8, 3,000 1.0-1.1, 5,000 1.5-1.8, 8,000 2.5-2.8; WebGL 3,000 1.9-2.7, 8,000 2.4-3.7
#: (its context alone ~0.8 s, its shaders ~0.3 s). So SVG is the faster up to about 8,000 markers without a
#: GPU, while with one WebGL wins above a few thousand: 5,000 splits the two.
GL_THRESHOLD = 5000
#: Subplot domains (fractions of the plot's height): lanes above, the seconds-saved panel below, as plotly's
#: ``make_subplots(rows=2, row_heights=[0.72, 0.28], vertical_spacing=0.08)`` lays them out.
_LANES_DOMAIN, _SAVED_DOMAIN = [0.3376, 1.0], [0.0, 0.2576]


def span_path(start: Any, end: Any, y: Any) -> str:
    """An SVG path in data coordinates (x: s, y: lane) with one horizontal segment per span:
    ``"M{start},{y}L{end},{y}"`` each; x to 10 significant digits (sub-millisecond over a day)."""
    return "".join(f"M{a:.10g},{c:.6g}L{b:.10g},{c:.6g}" for a, b, c in zip(start.tolist(), end.tolist(), y.tolist(),
                                                                          strict=True))


def _seconds_axis(values: Any) -> tuple[float, str]:
    """(scale, unit) for a seconds axis: ms below one second, so ticks read 5 ms, 10 ms, not 0.00549."""
    top = float(max(values, default=0.0)) if len(values) else 0.0
    return (1e3, "ms") if top < 1.0 else (1.0, "s")


#: Characters of a lane's name shown beside the lanes (hovering the label, the markers and the tables give the
#: whole name): a long program name (``jit_<lambda>`` of a module path, a flax class chain) otherwise widened the
#: label margin until an 800 px window with the file browser open (a 368 px cell) kept ~90 px of plot. 20
#: characters (with a recompile badge) take at most :data:`LANE_LABEL_PX`, under half of that cell.
LANE_LABEL_CHARS = 20
#: The most px the lane labels' margin takes (24 + ~7 px per character of :data:`LANE_LABEL_CHARS`).
LANE_LABEL_PX = 24 + 7 * LANE_LABEL_CHARS


def lane_label(name: str, limit: int = LANE_LABEL_CHARS) -> str:
    """``name`` as drawn beside its lane: whole when it fits in ``limit`` characters, else its start and end
    joined by "…" (the end tells programs of one family apart: ``jit_train_step…(batch=64)``). The folded lane,
    "library helpers (11 programs)", reads "library helpers (11)"; "… 271 more program lane(s)" reads
    "… 271 more lanes"."""
    if name.startswith(f"{LIBRARY_LANE} (") and name.endswith(("programs)", "program)")):
        name = name.rsplit(" ", 1)[0] + ")"
    elif name.startswith("… ") and name.endswith(" more program lane(s)"):  # lanes collapsed into the last
        name = name.replace(" program lane(s)", " lanes")
    return middle_cut(name, limit)


def _labelled(name: str, recompiles: int | None) -> str:
    """The lane's label: its name, shortened so that the name and its "⟳n" recompile badge fit together in
    :data:`LANE_LABEL_CHARS` (the badge pushed the label margin past ~250 px). The folded library lane has no
    badge (its programs' recompiles are JAX's own; its hover counts them)."""
    if not recompiles or name.startswith(f"{LIBRARY_LANE} ("):
        return lane_label(name)
    badge = f" ⟳{recompiles}"
    return lane_label(name, max(8, LANE_LABEL_CHARS - len(badge))) + badge


def _lane_hover(name: str, counts: dict[str, int], library: tuple[str, ...]) -> str:
    """What hovering a lane's label shows: the whole name, its events per kind, and the programs a folded lane
    holds (the first 12)."""
    from xlakit._text.untrusted import plotly_text

    kinds = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    text = f"<b>{plotly_text(name)}</b>" + (f"<br>{kinds}" if kinds else "")
    if name.startswith(f"{LIBRARY_LANE} (") and library:
        shown = ", ".join(plotly_text(n) for n in library[:12]) + (f", … ({len(library) - 12} more)"
                                                                  if len(library) > 12 else "")
        text += f"<br>{shown}"
    return text


def timeline_spec(data: Any) -> dict[str, Any]:
    """The figure of a :class:`xlakit.view.timeline.TimelineData` as a plotly dict ``{"data", "layout"}``.

    Lanes of events (compiles and loads as spans from start to end, every kind at its own height in the lane,
    marker size by duration, hover text from ``data.points[kind]["hover"]``, event rows as ``customdata``; a
    lane with recompiles says how many) over a second panel with the cumulative seconds saved by hits. Each
    span kind's spans are one layout shape named ``"<kind> (span)"`` in the kind's legend group (hidden with
    its markers from the legend). Traces: one per kind drawn (``scatter``, or ``scattergl`` above
    :data:`GL_THRESHOLD` markers), then the curve (``"seconds saved (cumulative)"``, on ``y2``)."""
    import numpy as np

    from xlakit._text.theme import BASE_LAYOUT, LEGEND, legend_space, title_layout

    has_saved = bool(data.saved_x.size)
    n_points = sum(len(p["x"]) for p in data.points.values())
    marker_type = "scattergl" if n_points > GL_THRESHOLD else "scatter"
    traces: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    for kind, p in data.points.items():
        symbol, color = KIND_STYLE.get(kind, OTHER_STYLE)
        if kind in SPAN_KINDS:
            spans = np.flatnonzero(p["x"] - p["start"] > 0)
            if spans.size:
                shapes.append({"type": "path", "name": f"{kind} (span)", "legendgroup": kind, "showlegend": False,
                               "path": span_path(p["start"][spans], p["x"][spans], p["y"][spans]),
                               "xref": "x", "yref": "y", "layer": "below", "line": {"color": color, "width": 5}})
        marker: dict[str, Any] = {"symbol": symbol, "color": color, "size": p["size"], "opacity": 0.9}
        if symbol.endswith("-open"):  # an outline only where the symbol is open (its stroke is all there is)
            marker["line"] = {"width": 1, "color": color}
        traces.append({"type": marker_type, "x": p["x"], "y": p["y"], "mode": "markers", "name": kind,
                       "legendgroup": kind, "customdata": p["index"], "hovertext": p["hover"], "hoverinfo": "text",
                       "marker": marker, "xaxis": "x", "yaxis": "y"})
    lanes = list(data.lanes)
    visible = max(1, len(lanes))
    labels = [_labelled(name, data.counts.get(name, {}).get("recompile")) for name in lanes]
    x_title = {"text": "seconds since the first event"}
    # The labels are annotations, not tick labels, so that hovering one shows the lane's whole name (plotly
    # gives tick labels no hover); the ticks keep the labels as text.
    label_notes = [{"x": 0, "xref": "paper", "xanchor": "right", "xshift": -6, "y": i, "yref": "y", "text": label,
                    "showarrow": False, "font": {"size": 12},
                    "hovertext": _lane_hover(name, data.counts.get(name, {}), tuple(data.library))}
                   for i, (name, label) in enumerate(zip(lanes, labels, strict=True))]
    layout: dict[str, Any] = {
        "xaxis": {"anchor": "y", "domain": [0.0, 1.0]},
        "yaxis": {"anchor": "x", "domain": _LANES_DOMAIN if has_saved else [0.0, 1.0], "tickmode": "array",
                  "tickvals": list(range(len(lanes))), "ticktext": labels, "showticklabels": False,
                  "range": [visible - 0.4, -0.6], "autorange": False}, "annotations": label_notes}
    if has_saved:
        scale, unit = _seconds_axis(data.saved_y)
        traces.append({"type": "scatter", "x": data.saved_x, "y": np.asarray(data.saved_y) * scale, "mode": "lines",
                       "name": "seconds saved (cumulative)", "line": {"color": "#2ca02c", "width": 2, "shape": "hv"},
                       "hovertemplate": f"%{{x:.2f}} s: %{{y:.4g}} {unit} saved<extra></extra>",
                       "xaxis": "x2", "yaxis": "y2"})
        layout["xaxis"].update(matches="x2", showticklabels=False)
        layout["xaxis2"] = {"anchor": "y2", "domain": [0.0, 1.0], "title": x_title}
        layout["yaxis2"] = {"anchor": "x2", "domain": _SAVED_DOMAIN, "title": {"text": f"saved ({unit})"},
                            "rangemode": "tozero", "tickformat": "~g", "ticksuffix": f" {unit}", "nticks": 4}
    else:
        layout["xaxis"]["title"] = x_title
    title = f"Cache events: {data.matched:,} of {data.total:,}"
    if data.downsampled:
        title += f" (drawn: {data.shown:,} markers, one per lane, kind and time bin)"
    if data.hidden_lanes:
        title += f"<br><sub>{data.hidden_lanes} lanes collapsed into the last: scroll with “lanes from”</sub>"
    # Margins wide enough for the lane labels (~6.5 px a character at 12 px) and the x axis title: when
    # plotly's automargin has to widen one, it draws the whole figure a second time (~40% of the draw).
    widest = max(map(len, labels), default=0)
    margin = {**cast(dict[str, int], BASE_LAYOUT["margin"]), "l": max(60, min(LANE_LABEL_PX, 24 + 7 * widest)),
              "b": 60}
    # The title wrapped for a narrow column (title_layout), and the height grown by the legend's rows there.
    top = title_layout(title, margin)
    height = max(320, 90 + 32 * visible) + (140 if has_saved else 0) + top["margin"]["t"] - margin["t"]
    spec = {"data": traces, "layout": layout}
    layout.update({**BASE_LAYOUT, **top, "legend": dict(LEGEND), "shapes": shapes})
    layout["height"] = height + legend_space(spec, left=margin["l"])
    return spec
