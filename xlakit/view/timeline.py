"""The cache timeline view: events kept as columns, filtered and down-sampled, drawn as lanes of spans and
markers with the seconds saved by hits in a panel of their own.

Pure functions (numpy, and plotly for the figure); shared by :class:`xlakit.widgets.CacheTimeline`, its
snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

from xlakit._text.format import fmt_bytes, fmt_count, fmt_seconds
from xlakit._text.table import Column, Table
from xlakit._text.untrusted import plotly_text
from xlakit.events import KINDS
from xlakit.view.columns import EventColumns
from xlakit.view.html import note, snapshot
from xlakit.view.lanes import aggregate, lane_plan
from xlakit.view.timeline_plot import GL_THRESHOLD, KIND_OFFSET, KIND_STYLE, SPAN_KINDS, timeline_spec

__all__ = ["KIND_STYLE", "KIND_OFFSET", "SPAN_KINDS", "EventColumns", "TimelineData", "timeline_data", "downsample",
           "downsample_series", "marker_sizes", "timeline_figure", "timeline_html", "GL_THRESHOLD", "SAVED_POINTS",
           "MAX_LANES", "miss_reason", "miss_reasons"]

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


@functools.lru_cache(maxsize=8192)
def _text(value: Any) -> str:
    """plotly_text, once per distinct value (a name, kind or source repeats on thousands of markers)."""
    return plotly_text(str(value))


@functools.lru_cache(maxsize=4096)
def _reason(value: Any, limit: int) -> str:
    """A recorded reason on one line, at most ``limit`` characters, escaped for plotly."""
    text = " ".join(str(value).split())
    return plotly_text(text if len(text) <= limit else text[:limit - 3] + "...")


def _hover(a: dict[str, Any], i: int) -> str:
    parts = [f"<b>{_text(a['kind'][i])}</b> {_text(a['name'][i])} [{_text(a['source'][i])}]"]
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
    parts.append(f"partition: {_text(a['partition'][i] or '—')}")
    if a["site"][i]:
        parts.append(f"called from: {_text(a['site'][i])}")
    if a["reason"][i]:
        parts.append("reason: " + _reason(a["reason"][i], 160))
    return "<br>".join(parts)


def _bin_hover(a: dict[str, Any], i: int, count: int, total: float, first: float, last: float) -> str:
    """Hover of a marker standing for ``count`` events of one lane and kind in [first, last] s: kept short
    (thousands of them go to the page in every redraw); the slowest event's full hover is one click away."""
    if count == 1:
        return _hover(a, i)
    parts = [f"<b>{count:,} × {_text(a['kind'][i])}</b> {_text(a['name'][i])}",
             f"{first:.2f}–{last:.2f} s" + (f", total {fmt_seconds(total)}" if total > 0 else "")]
    d = a["duration_s"][i]
    if d == d and d > 0:
        parts.append(f"slowest: {fmt_seconds(float(d))}")
    if a["reason"][i]:
        parts.append("reason: " + _reason(a["reason"][i], 80))
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
        n = np.bincount(codes)  # codes are small non-negative ints: counting beats sorting 100,000 of them
        sums = np.bincount(codes, weights=dur, minlength=n.size)
        for code in np.flatnonzero(n).tolist():
            lane, kind = lanes[code // len(KINDS)], KINDS[code % len(KINDS)]
            counts.setdefault(lane, {})[kind] = int(n[code])
            seconds.setdefault(lane, {})[kind] = float(sums[code])
    is_miss = a["kind"][sel] == "miss"
    library_rows = np.isin(a["lane"][sel], [columns.lanes[n] for n in library]) if folded else np.zeros(
        sel.size, dtype=bool)
    miss_idx = sel[is_miss & ~library_rows][::-1][:200]
    misses = tuple({"index": int(i), "label": f"{x[i]:.2f} s: {a['name'][i]}", "reason": why, "key": a["key"][i]}
                   for i, why in zip(miss_idx, miss_reasons(a, miss_idx), strict=True))
    return TimelineData(t0, lanes, points, sx, sy, total, int(sel.size), int(picked.size),
                        float(saved.sum()), counts, misses, library=library, folded=folded, seconds=seconds,
                        library_misses=int(np.count_nonzero(is_miss & library_rows)),
                        hidden_lanes=hidden, dropped=columns.dropped)


def miss_reasons(a: dict, indices: Any) -> list[str]:
    """Why each miss at rows ``indices`` of event arrays ``a`` happened: its recorded reason, and when the same
    function was retraced just before it (a ``recompile`` with no other miss of it in between), what changed
    in its signature: the cache only knows the key is new. One pass over the misses and recompiles."""
    import bisect

    import numpy as np

    rows = np.flatnonzero(np.isin(a["kind"], ("miss", "recompile")))
    by_name: dict[Any, list[int]] = {}
    for row in rows.tolist():
        by_name.setdefault(a["name"][row], []).append(row)
    out = []
    for index in (int(i) for i in indices):
        text = str(a["reason"][index] or "no reason recorded")
        same = by_name.get(a["name"][index], [])
        k = bisect.bisect_left(same, index) - 1  # the event of this function just before the miss
        if k >= 0 and a["kind"][same[k]] == "recompile" and a["reason"][same[k]]:
            text += f"; it was retraced just before because {a['reason'][same[k]]}"
        out.append(text)
    return out


def miss_reason(a: dict, index: int) -> str:
    """:func:`miss_reasons` of one row."""
    return miss_reasons(a, [index])[0]


def timeline_figure(data: TimelineData):
    """The timeline as a ``plotly.graph_objects.Figure``: :func:`xlakit.view.timeline_plot.timeline_spec`
    (lanes of markers and spans over the seconds-saved panel; the user's lanes first, top down, at most
    ``max_lanes`` + 1 of them, so the chart's height is bounded), wrapped without plotly's validation: every
    value is built here, and validating them was most of the build time."""
    import plotly.graph_objects as go

    return go.Figure(timeline_spec(data), _validate=False)


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
