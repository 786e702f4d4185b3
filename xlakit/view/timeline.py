"""The cache timeline view: events kept as columns, filtered and down-sampled, drawn as lanes of spans and
markers with the seconds saved by hits in a panel of their own.

Pure functions (numpy, and plotly for the figure); shared by :class:`xlakit.widgets.CacheTimeline`, its
snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, cast

from xlakit.events import KINDS
from xlakit.view.columns import EventColumns
from xlakit.view.format import fmt_bytes, fmt_count, fmt_seconds
from xlakit.view.html import note, snapshot
from xlakit.view.lanes import aggregate, lane_plan
from xlakit.view.table import Column, Table
from xlakit.view.untrusted import plotly_text

__all__ = ["KIND_STYLE", "KIND_OFFSET", "SPAN_KINDS", "EventColumns", "TimelineData", "timeline_data", "downsample",
           "downsample_series", "marker_sizes", "timeline_figure", "timeline_html", "GL_THRESHOLD", "SAVED_POINTS",
           "MAX_LANES"]

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
}
_OTHER_STYLE = ("circle-dot", "#333333")  # a kind this view does not know yet
#: Vertical offset of each kind within its lane, so a hit 60 ms after a compile is never hidden under it.
KIND_OFFSET: dict[str, float] = {
    "compile": 0.0, "hit": 0.3, "miss": -0.3, "store": 0.15, "skip": -0.15, "corrupt": -0.4, "evict": 0.4,
    "load_error": -0.22, "store_error": 0.22, "trace": -0.07, "lower": 0.07,
    "remote_hit": 0.26, "remote_miss": -0.26, "upload": 0.11, "upload_error": 0.34, "claim": 0.45, "wait": -0.45,
    "recompile": -0.36,
}
#: Kinds with a duration drawn as a span from its start to its end (``Event.time`` is the end): compiles,
#: and hits (the load).
SPAN_KINDS = ("compile", "hit")
#: Markers (all kinds together) above which they are drawn with WebGL (``scattergl``); at or below it, SVG
#: (crisper, no GPU needed). Measured in headless chromium with WebGL in software (``--disable-gpu``:
#: SwiftShader), 31 lanes, CPU seconds of the whole browser per ``Plotly.newPlot``: layout alone 0.2-0.3;
#: SVG 1,500 markers 0.8, 3,000 1.0-1.1, 5,000 1.5-1.8, 8,000 2.5-2.8; WebGL 3,000 1.9-2.7, 8,000 2.4-3.7
#: (its context alone ~0.8 s, its shaders ~0.3 s). So SVG is the faster up to about 8,000 markers without a
#: GPU, while with one WebGL wins above a few thousand: 5,000 splits the two. Span lines and the
#: seconds-saved curve are one SVG path each, whatever the count.
GL_THRESHOLD = 5000
#: Points of the seconds-saved curve at most (a step line; a few per pixel column is all a screen shows).
SAVED_POINTS = 400
#: Lanes drawn one by one; the rest share one collapsed lane (scroll with ``lane_offset`` or the name filter).
MAX_LANES = 30
_COLLAPSED_POINTS = 600


@dataclasses.dataclass(frozen=True)
class TimelineData:
    """What a timeline draws after filters and down-sampling.

    Attributes:
      t0: wall-clock seconds (``time.time()``) of the first kept event; x values are seconds after it.
      lanes: lane names, by lane index (y values are lane indexes).
      points: kind -> dict with numpy arrays ``x`` (s), ``y`` (lane), ``size`` (px), ``index`` (row in the
        columns) and ``hover`` (list of str), for the kinds that pass the filter and have points.
      saved_x, saved_y: the cumulative seconds-saved curve (x in s after ``t0``; y in s), down-sampled.
      misses: the matched misses, newest first (at most 200): dicts with ``index`` (row in the columns),
        ``label`` (time, function) and ``reason`` (why it missed, as recorded).
      total: events kept. matched: events passing the filters. shown: markers drawn (one per event, or per
        lane, kind and time bin beyond ``max_points``: :func:`xlakit.view.lanes.aggregate`).
      saved_s: total seconds saved by the matched hits.
      counts: lane name -> {kind: events} over the matched events (every event, not only those drawn); the
        folded lane's entry sums its programs.
      library: the library programs (origin "library"): folded into the last lane when ``folded``, else
        listed after the user's. folded: whether they are folded.
      seconds: lane name -> {kind: summed ``duration_s``} over the matched events (s).
      library_misses: matched misses of folded library programs (left out of ``misses`` while folded).
      hidden_lanes: lanes collapsed into the last lane ("… N more program lane(s)"; 0 when none).
      dropped: events the columns dropped to stay bounded (oldest first).
    """

    t0: float | None
    lanes: tuple[str, ...]
    points: dict[str, dict[str, Any]]
    saved_x: Any
    saved_y: Any
    total: int
    matched: int
    shown: int
    saved_s: float
    counts: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    misses: tuple[dict[str, Any], ...] = ()
    library: tuple[str, ...] = ()
    folded: bool = False
    seconds: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    library_misses: int = 0
    hidden_lanes: int = 0
    dropped: int = 0

    @property
    def downsampled(self) -> bool:
        return self.shown < self.matched


def marker_sizes(durations, *, smallest: float = 5.0, largest: float = 22.0, max_duration: float | None = None):
    """Marker diameters (px) growing with the square root of the duration; NaN (no duration) -> ``smallest``."""
    import numpy as np

    d = np.nan_to_num(np.asarray(durations, dtype=float), nan=0.0).clip(min=0.0)
    top = max_duration if max_duration is not None else (float(d.max()) if d.size else 0.0)
    if top <= 0:
        return np.full(d.shape, smallest)
    return smallest + (largest - smallest) * np.sqrt(np.minimum(d, top) / top)


def downsample(x, weight, group, max_points: int, *, min_per_group: int = 20):
    """Indices (sorted) of at most about ``max_points`` points that keep each group's shape and its outliers.

    Groups (e.g. lane x kind) share the budget in proportion to their size, at least ``min_per_group`` each.
    A group over its budget is cut into time bins; in each bin the points of smallest and largest ``weight``
    (e.g. duration: the slow compiles stay visible) are kept, plus the group's first and last point. Groups
    within budget are kept whole. Deterministic.

    Args:
      x: positions (float array, e.g. seconds). weight: per point (NaN = 0). group: int group ids.
      max_points: the budget (int > 0).
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    n = x.size
    if n <= max_points:
        return np.arange(n)
    w = np.nan_to_num(np.asarray(weight, dtype=float), nan=0.0)
    group = np.asarray(group)
    keep = []
    uniq, inverse, counts = np.unique(group, return_inverse=True, return_counts=True)
    for g in range(uniq.size):
        idx = np.flatnonzero(inverse == g)
        budget = max(min_per_group, int(max_points * counts[g] / n))
        if idx.size <= budget:
            keep.append(idx)
            continue
        gx = x[idx]
        lo, hi = gx.min(), gx.max()
        bins = max(1, budget // 2 - 1)
        b = np.zeros(idx.size, dtype=np.int64) if hi <= lo else \
            np.minimum(((gx - lo) / (hi - lo) * bins).astype(np.int64), bins - 1)
        order = np.lexsort((w[idx], b))  # by bin, then weight
        sorted_bins = b[order]
        starts = np.flatnonzero(np.r_[True, sorted_bins[1:] != sorted_bins[:-1]])
        ends = np.r_[starts[1:], order.size] - 1
        keep.append(idx[order[starts]])
        keep.append(idx[order[ends]])
        keep.append(idx[[0, -1]])
    return np.unique(np.concatenate(keep))


def downsample_series(x, y, max_points: int):
    """(x, y) with at most about ``max_points`` points for a line: per bin the min and max of ``y``."""
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size <= max_points:
        return x, y
    idx = downsample(x, y, np.zeros(x.size, dtype=np.int64), max_points, min_per_group=max_points)
    return x[idx], y[idx]


def _hover(a: dict[str, Any], i: int) -> str:
    parts = [f"<b>{plotly_text(str(a['kind'][i]))}</b> {plotly_text(str(a['name'][i]))} "
             f"[{plotly_text(str(a['source'][i]))}]"]
    d = a["duration_s"][i]
    if d == d:  # not NaN
        parts.append(f"duration: {fmt_seconds(float(d))}")
    s = a["saved_s"][i]
    if s == s:
        parts.append(f"saved: {fmt_seconds(float(s))}")
    b = a["bytes"][i]
    if b == b:
        exact = "" if abs(b) < 1024 else f" ({int(b):,} bytes)"
        parts.append(f"bytes: {fmt_bytes(int(b))}{exact}")
    else:
        parts.append("bytes: —")
    parts.append(f"key: {plotly_text(str(a['key'][i] or '—'))}")
    parts.append(f"partition: {plotly_text(str(a['partition'][i] or '—'))}")
    if a["site"][i]:
        parts.append(f"called from: {plotly_text(str(a['site'][i]))}")
    reason = a["reason"][i]
    if reason:
        text = " ".join(str(reason).split())
        parts.append("reason: " + plotly_text(text if len(text) <= 160 else text[:157] + "..."))
    return "<br>".join(parts)


def _bin_hover(a: dict[str, Any], i: int, count: int, total: float, first: float, last: float) -> str:
    """Hover of a marker standing for ``count`` events of one lane and kind in [first, last] s: kept short
    (thousands of them go to the page in every redraw); the slowest event's full hover is one click away."""
    if count == 1:
        return _hover(a, i)
    parts = [f"<b>{count:,} × {plotly_text(str(a['kind'][i]))}</b> {plotly_text(str(a['name'][i]))}",
             f"{first:.2f}–{last:.2f} s" + (f", total {fmt_seconds(total)}" if total > 0 else "")]
    d = a["duration_s"][i]
    if d == d and d > 0:
        parts.append(f"slowest: {fmt_seconds(float(d))}")
    reason = a["reason"][i]
    if reason:
        text = " ".join(str(reason).split())
        parts.append("reason: " + plotly_text(text if len(text) <= 80 else text[:77] + "..."))
    return "<br>".join(parts)


def timeline_data(columns: EventColumns, *, kinds: Iterable[str] | None = None, name_filter: str = "",
                  source: str | None = None, max_points: int = 5000, fold_library: bool = True,
                  max_lanes: int = MAX_LANES, lane_offset: int = 0) -> TimelineData:
    """Filter, fold and aggregate ``columns`` for drawing.

    Args:
      kinds: the kinds to show (None: all). The seconds-saved curve ignores this filter (only hits save).
      name_filter: case-insensitive substring of the program name ("" = all); a library program it names is
        still drawn in the folded lane.
      source: one event source, or None for all.
      max_points: budget of drawn event markers (int); beyond it one marker per lane, kind and time bin. The
        curve has its own budget: at most ``SAVED_POINTS`` (or ``max_points`` if smaller).
      fold_library: fold the programs of origin "library" into one "library helpers" lane (default True).
      max_lanes: lanes drawn one by one at most; the others are collapsed into one last lane ("… N more
        programs"), their events aggregated per kind and time bin (at most 600 markers), counts kept.
      lane_offset: the first lane drawn one by one (scrolls the window of ``max_lanes`` lanes; int >= 0).
    """
    import numpy as np

    a = columns.arrays()
    total = a["time"].size
    names = tuple(sorted(columns.lanes, key=lambda name: columns.lanes[name]))
    lanes, lane_map, library = lane_plan(names, columns.origins, fold_library)
    hidden = max(0, len(lanes) - max_lanes)
    if hidden:  # collapse every lane outside the window [offset, offset + max_lanes) into one last lane
        offset = min(max(0, lane_offset), len(lanes) - max_lanes)
        window = np.full(len(lanes), max_lanes, dtype=np.int64)
        window[offset:offset + max_lanes] = np.arange(max_lanes, dtype=np.int64)
        lane_map = window[lane_map]
        lanes = (*lanes[offset:offset + max_lanes], f"… {hidden} more program lane(s)")
    folded = bool(fold_library and library)
    if total == 0:
        empty = np.zeros(0)
        return TimelineData(None, lanes, {}, empty, empty, 0, 0, 0, 0.0, library=library, folded=folded,
                            dropped=columns.dropped)
    t0 = float(np.nanmin(a["time"] - np.nan_to_num(a["duration_s"], nan=0.0).clip(min=0.0)))
    x = a["time"] - t0
    shown_lane = lane_map[a["lane"]]
    base = np.ones(total, dtype=bool)
    if name_filter:
        needle = name_filter.lower()
        lane_ok = np.array([needle in name.lower() for name in names], dtype=bool)
        base &= lane_ok[a["lane"]]
    if source:
        base &= a["source"] == source
    kind_set = set(KINDS if kinds is None else kinds)
    wanted = np.array([k in kind_set for k in KINDS] + [False], dtype=bool)  # code -1: unknown kind
    mask = base & wanted[a["kind_code"]]
    sel = np.flatnonzero(mask)
    group = shown_lane[sel] * len(KINDS) + a["kind_code"][sel]
    if hidden:  # the collapsed lane gets a small budget of its own, so it never crowds out the drawn lanes
        more = shown_lane[sel] == max_lanes
        budget = max(1, min(_COLLAPSED_POINTS, max_points // 8))
        parts = [aggregate(x[sel][m], a["duration_s"][sel][m], group[m], max_points - budget if w else budget)
                 for w, m in ((True, ~more), (False, more))]
        where = [np.flatnonzero(~more), np.flatnonzero(more)]
        rep = np.concatenate([w[p[0]] for w, p in zip(where, parts, strict=True)])
        count, summed, first, last = (np.concatenate([p[i] for p in parts]) for i in range(1, 5))
    else:
        rep, count, summed, first, last = aggregate(x[sel], a["duration_s"][sel], group, max_points)
    picked = sel[rep]
    top = float(np.nanmax(a["duration_s"][sel])) if sel.size and not np.all(np.isnan(a["duration_s"][sel])) else 0.0
    points = {}
    picked_codes = a["kind_code"][picked]
    for code, k in enumerate(KINDS):
        at = np.flatnonzero(picked_codes == code)
        if at.size:
            idx = picked[at]
            dur = np.nan_to_num(a["duration_s"][idx], nan=0.0).clip(min=0.0)
            points[k] = {"x": x[idx], "y": shown_lane[idx] + KIND_OFFSET.get(k, 0.0),
                         "size": marker_sizes(a["duration_s"][idx], smallest=7.0, largest=14.0, max_duration=top),
                         "start": x[idx] - dur, "index": idx, "count": count[at],
                         "hover": [_bin_hover(a, int(i), int(c), float(t), float(f), float(la))
                                   for i, c, t, f, la in zip(idx, count[at], summed[at], first[at], last[at],
                                                             strict=True)]}
    hits = np.flatnonzero(base & (a["kind"] == "hit"))
    saved = np.nan_to_num(a["saved_s"][hits], nan=0.0).clip(min=0.0)
    order = np.argsort(x[hits], kind="stable")
    sx, sy = x[hits][order], np.cumsum(saved[order])
    if sx.size:
        sx, sy = np.r_[0.0, sx, x.max()], np.r_[0.0, sy, sy[-1]]
        sx, sy = downsample_series(sx, sy, min(max_points, SAVED_POINTS))  # each bin's first and last point
    counts: dict[str, dict[str, int]] = {}
    seconds: dict[str, dict[str, float]] = {}
    if sel.size:
        codes = group  # shown lane x kind
        dur = np.nan_to_num(a["duration_s"][sel], nan=0.0)
        uniq, inverse, n = np.unique(codes, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=dur)
        for code, c, t in zip(uniq, n, sums, strict=True):
            lane, kind = lanes[int(code) // len(KINDS)], KINDS[int(code) % len(KINDS)]
            counts.setdefault(lane, {})[kind] = int(c)
            seconds.setdefault(lane, {})[kind] = float(t)
    is_miss = a["kind"][sel] == "miss"
    library_rows = np.isin(a["lane"][sel], [columns.lanes[n] for n in library]) if folded else np.zeros(
        sel.size, dtype=bool)
    miss_idx = sel[is_miss & ~library_rows][::-1][:200]
    misses = tuple({"index": int(i), "label": f"{x[i]:.2f} s: {a['name'][i]}",
                    "reason": str(a["reason"][i] or "no reason recorded"), "key": a["key"][i]} for i in miss_idx)
    return TimelineData(t0, lanes, points, sx, sy, total, int(sel.size), int(picked.size),
                        float(saved.sum()), counts, misses, library=library, folded=folded, seconds=seconds,
                        library_misses=int(np.count_nonzero(is_miss & library_rows)),
                        hidden_lanes=hidden, dropped=columns.dropped)


def _seconds_axis(values: Any) -> tuple[float, str]:
    """(scale, unit) for a seconds axis: ms below one second, so ticks read 5 ms, 10 ms, not 0.00549."""
    top = float(max(values, default=0.0)) if len(values) else 0.0
    return (1e3, "ms") if top < 1.0 else (1.0, "s")


def timeline_figure(data: TimelineData):
    """Lanes of events (compiles and loads as spans from start to end, every kind at its own height in the
    lane, marker size by duration; a lane with recompiles says how many) over a second panel with the
    cumulative seconds saved by hits. The user's lanes come first, top down; at most ``max_lanes`` + 1 lanes
    (see :func:`timeline_data`), so the chart's height is bounded."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from xlakit.view.theme import BASE_LAYOUT, LEGEND, legend_space, title_layout

    has_saved = bool(data.saved_x.size)
    # The values are built here, so plotly's per-element validation (most of the build time) is skipped.
    fig = make_subplots(rows=2 if has_saved else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.72, 0.28] if has_saved else None, figure=go.Figure(_validate=False))
    n_points = sum(len(p["x"]) for p in data.points.values())
    markers = go.Scattergl if n_points > GL_THRESHOLD else go.Scatter

    for kind, p in data.points.items():
        symbol, color = KIND_STYLE.get(kind, _OTHER_STYLE)
        if kind in SPAN_KINDS:
            spans = np.flatnonzero(p["x"] - p["start"] > 0)
            if spans.size:  # one SVG path, its spans split by NaN (no trace when nothing has a duration)
                xs = np.column_stack([p["start"][spans], p["x"][spans], np.full(spans.size, np.nan)]).ravel()
                ys = np.column_stack([p["y"][spans], p["y"][spans], np.full(spans.size, np.nan)]).ravel()
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{kind} (span)", legendgroup=kind,
                                         showlegend=False, hoverinfo="skip", connectgaps=False,
                                         line=dict(color=color, width=5), _validate=False), row=1, col=1)
        # An outline only where the symbol is open (its stroke is all there is); filled symbols need none.
        outline = dict(line=dict(width=1, color=color)) if symbol.endswith("-open") else {}
        fig.add_trace(markers(x=p["x"], y=p["y"], mode="markers", name=kind, legendgroup=kind,
                              customdata=p["index"], hovertext=p["hover"], hoverinfo="text",
                              marker=dict(symbol=symbol, color=color, size=p["size"], opacity=0.9, **outline),
                              _validate=False), row=1, col=1)
    if has_saved:
        scale, unit = _seconds_axis(data.saved_y)
        fig.add_trace(go.Scatter(x=data.saved_x, y=np.asarray(data.saved_y) * scale, mode="lines",
                                 name="seconds saved (cumulative)", line=dict(color="#2ca02c", width=2, shape="hv"),
                                 hovertemplate=f"%{{x:.2f}} s: %{{y:.4g}} {unit} saved<extra></extra>",
                                 _validate=False), row=2, col=1)
        fig.update_yaxes(title_text=f"saved ({unit})", rangemode="tozero", tickformat="~g", ticksuffix=f" {unit}",
                         nticks=4, row=2, col=1)
    lanes = list(data.lanes)
    title = f"Cache events: {data.matched:,} of {data.total:,}"
    if data.downsampled:
        title += f" (drawn: {data.shown:,} markers, one per lane, kind and time bin)"
    visible = max(1, len(lanes))
    if data.hidden_lanes:
        title += f"<br><sub>{data.hidden_lanes} lanes collapsed into the last: scroll with “lanes from”</sub>"
    height = max(320, 90 + 32 * visible) + (140 if has_saved else 0)
    labels = [f"{name} ⟳{data.counts[name]['recompile']}" if data.counts.get(name, {}).get("recompile") else name
              for name in lanes]
    # Margins wide enough for the lane labels (~6.5 px a character at 12 px) and the x axis title: when
    # plotly's automargin has to widen one, it draws the whole figure a second time (~40% of the draw).
    widest = max(map(len, labels), default=0)
    margin = {**cast(dict[str, int], BASE_LAYOUT["margin"]), "l": max(60, min(600, 24 + 7 * widest)), "b": 60}
    # A dict title (title_layout): the figure skips validation, and plotly.js 3+ draws no bare-string title.
    top = title_layout(title, margin)
    height += legend_space(fig, left=margin["l"]) + top["margin"]["t"] - margin["t"]
    fig.update_layout(**{**BASE_LAYOUT, "height": height, **top}, legend=LEGEND)
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(lanes))), ticktext=labels,
                     range=[visible - 0.4, -0.6], autorange=False, row=1, col=1)
    fig.update_xaxes(title_text="seconds since the first event", row=2 if has_saved else 1, col=1)
    return fig


def timeline_html(data: TimelineData, *, include_plotlyjs: bool | str = "once") -> str:
    """Snapshot of the cache timeline: the figure and per-function event counts."""
    import datetime as _dt

    from xlakit.view.plotly_html import figure_html

    if data.total == 0:
        return snapshot("Cache timeline", note("No events yet."))
    used = [k for k in KINDS if any(k in c for c in data.counts.values())]
    order = {name: i for i, name in enumerate(data.lanes)}
    rows = [{"name": name, **{k: c.get(k, 0) for k in used}}
            for name, c in sorted(data.counts.items(), key=lambda item: order.get(item[0], len(order)))]
    table = Table([Column("name", "program"), *(Column(k, k, "count") for k in used)], rows,
                  caption="Events per program and kind (every matching event, not only those drawn)",
                  css_class="xlakit-timeline").to_html()
    start = _dt.datetime.fromtimestamp(data.t0).strftime("%Y-%m-%d %H:%M:%S") if data.t0 else "?"
    summary = note(f"{fmt_count(data.matched)} of {fmt_count(data.total)} events match the filters; "
                   f"{fmt_count(data.shown)} drawn{' (down-sampled)' if data.downsampled else ''}; first event at "
                   f"{start}; seconds saved by hits: {fmt_seconds(data.saved_s)}"
                   + (f"; {len(data.library)} library program(s) of jax/flax/optax folded into one lane"
                      if data.folded else "")
                   + (f"; {fmt_count(data.dropped)} older events dropped to stay bounded" if data.dropped else ""))
    misses = ""
    if data.misses:
        misses = Table([Column("label", "miss"), Column("reason", "why it missed", nowrap=False)],
                       list(data.misses[:20]), caption="Latest misses and why", css_class="xlakit-misses").to_html()
    return snapshot("Cache timeline", figure_html(timeline_figure(data), include_plotlyjs) + summary + table + misses)
