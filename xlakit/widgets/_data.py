"""Pure data for the widgets: tables, lanes, down-sampling, sparklines. No widget or plotting library here.

Everything a widget shows is computed by a function in this module from core objects (``CompiledMemory``,
``AllocatorStats``, ``Event``, the frames of ``ExecutableCache.entries()`` and ``xlakit.memory.live_arrays()``),
so the tests check the numbers without a browser and :mod:`xlakit.report` renders the same views without
a kernel. numpy and pandas are imported where needed.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from xlakit.events import KINDS, Event
from xlakit.memory._display import fmt_bytes

__all__ = ["BREAKDOWN_PARTS", "SORT_KEYS", "UNITS", "breakdown_frame", "breakdown_values", "unique_labels",
           "displayed_peak", "allocator_rows", "sparkline_svg", "EventColumns", "TimelineData", "timeline_data",
           "downsample", "downsample_series", "marker_sizes", "partition_totals", "filter_entries",
           "explain_entry", "live_table", "treemap_nodes", "bytes_cell", "table_html", "KIND_STYLE"]

# -- memory breakdown ---------------------------------------------------------------------------------------

#: (CompiledMemory field, label, sign). Aliased (donated) bytes are counted in both arguments and outputs, so
#: they are drawn as a reduction (negative bar): the stack's net height is what one run reserves.
BREAKDOWN_PARTS: tuple[tuple[str, str, int], ...] = (
    ("argument_bytes", "arguments", 1),
    ("output_bytes", "outputs", 1),
    ("temp_bytes", "temporaries", 1),
    ("generated_code_bytes", "code", 1),
    ("host_argument_bytes", "host arguments", 1),
    ("host_output_bytes", "host outputs", 1),
    ("host_temp_bytes", "host temporaries", 1),
    ("host_generated_code_bytes", "host code", 1),
    ("alias_bytes", "aliases (reused)", -1),
    ("host_alias_bytes", "host aliases (reused)", -1),
)
#: Sort orders of :func:`breakdown_frame`: ``name`` ascending, the others largest first.
SORT_KEYS = ("name", "total", "footprint", "peak", "argument", "output", "temp")
#: Units of :func:`breakdown_values`.
UNITS = ("bytes", "percent")
_SORT_COLUMN = {"total": "total_bytes", "footprint": "footprint_bytes", "peak": "peak_bytes",
                "argument": "argument_bytes", "output": "output_bytes", "temp": "temp_bytes"}


def unique_labels(names: Iterable[str | None], keys: Iterable[str | None] | None = None) -> list[str]:
    """Readable, unique labels: a repeated name gets ``[first 8 hex digits of its key's hash]`` (or ``#n``)."""
    names = [n or "?" for n in names]
    keys = list(keys) if keys is not None else [None] * len(names)
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out, seen = [], set()
    for i, (n, k) in enumerate(zip(names, keys)):
        label = n if counts[n] == 1 else (f"{n} [{k.rsplit('-', 1)[-1][:8]}]" if k else f"{n} #{i}")
        while label in seen:
            label += "'"
        seen.add(label)
        out.append(label)
    return out


def breakdown_frame(memories: Mapping[str, Any], sort: str = "name"):
    """One row per program: the byte fields of its ``CompiledMemory``, totals, in display order.

    Args:
      memories: label -> :class:`~xlakit.memory.CompiledMemory`.
      sort: one of :data:`SORT_KEYS`; ``name`` ascending, the others largest first (not reported last).

    Returns:
      ``pandas.DataFrame`` indexed by label with every field of :data:`BREAKDOWN_PARTS`, ``peak_bytes``,
      ``footprint_bytes`` (nullable Int64; <NA> = not reported), ``total_bytes`` (sum of the positive parts
      reported, 0 when none) and ``net_bytes`` (total minus aliases).

    Raises:
      ValueError: an unknown ``sort``.
    """
    import pandas as pd

    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {SORT_KEYS}, got {sort!r}")
    fields = [f for f, _, _ in BREAKDOWN_PARTS]
    rows = []
    for label, m in memories.items():
        row = {"program": label, **{f: getattr(m, f) for f in fields}, "peak_bytes": m.peak_bytes,
               "footprint_bytes": m.footprint_bytes}
        row["total_bytes"] = sum(getattr(m, f) or 0 for f, _, sign in BREAKDOWN_PARTS if sign > 0)
        row["net_bytes"] = row["total_bytes"] - sum(getattr(m, f) or 0 for f, _, sign in BREAKDOWN_PARTS if sign < 0)
        rows.append(row)
    columns = ["program", *fields, "peak_bytes", "footprint_bytes", "total_bytes", "net_bytes"]
    frame = pd.DataFrame(rows, columns=columns).set_index("program")
    for c in columns[1:]:
        frame[c] = frame[c].astype("Int64")
    if sort == "name":
        return frame.sort_index(kind="stable")
    return frame.sort_values(_SORT_COLUMN[sort], ascending=False, na_position="last", kind="stable")


def breakdown_values(frame, unit: str = "bytes") -> dict[str, list[float | None]]:
    """Bar heights per part label (and ``"peak"``) in ``unit``, in the frame's row order.

    ``bytes``: as reported (aliases negative). ``percent``: of each program's ``total_bytes``. A part not
    reported is None (no bar), never a fake 0.

    Raises:
      ValueError: an unknown ``unit``.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    totals = [int(t) for t in frame["total_bytes"]] if len(frame) else []

    def scale(values, sign: int = 1) -> list[float | None]:
        out = []
        for v, total in zip(values, totals):
            if missing(v):
                out.append(None)
            elif unit == "bytes":
                out.append(float(sign * int(v)))
            else:
                out.append((sign * 100.0 * int(v) / total if int(v) else 0.0) if total else None)
        return out

    values = {label: scale(frame[field].tolist(), sign) for field, label, sign in BREAKDOWN_PARTS}
    values["peak"] = scale(frame["peak_bytes"].tolist())
    return values


def missing(v: Any) -> bool:
    """None, NaN, ``pandas.NA`` or ``pandas.NaT``: a value that is not reported."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    import pandas as pd

    return v is pd.NA or v is pd.NaT


# -- allocator ------------------------------------------------------------------------------------------------

def displayed_peak(stats: Any) -> tuple[int | None, str]:
    """The peak a panel shows for one ``AllocatorStats``, and what it is.

    The peak since the last reset when there was one (exact after a ``native``/``clear_refs`` reset; an upper
    bound after a ``baseline`` reset whose peak did not rise); else the allocator's lifetime peak; else, on
    CPU, the process resident high-water mark (``VmHWM``).
    """
    if stats.peak_since_reset_bytes is not None:
        how = "exact" if stats.peak_since_reset_exact else "at most (lifetime peak)"
        return stats.peak_since_reset_bytes, f"since reset ({stats.reset_method}; {how})"
    if stats.peak_bytes_in_use is not None:
        return stats.peak_bytes_in_use, "lifetime (no reset yet)"
    if stats.process_hwm_bytes is not None:
        return stats.process_hwm_bytes, "process high-water mark, lifetime (no reset yet)"
    return None, "not reported"


def allocator_rows(stats_list: Iterable[Any]) -> list[dict[str, Any]]:
    """One dict per device: device, in_use, peak, peak_note, limit, largest_alloc, num_allocs, process_rss.

    Byte values are ``int`` or None (not reported)."""
    rows = []
    for s in stats_list:
        peak, note = displayed_peak(s)
        rows.append({"device": s.device, "in_use": s.bytes_in_use, "peak": peak, "peak_note": note,
                     "limit": s.bytes_limit, "largest_alloc": s.largest_alloc_size, "num_allocs": s.num_allocs,
                     "process_rss": s.process_rss_bytes, "reset_method": s.reset_method})
    return rows


def sparkline_svg(values: Sequence[float | None], width: int = 120, height: int = 24) -> str:
    """A tiny inline SVG polyline of ``values`` (None skipped); the last value is marked with a dot.

    The y range is 0..max, so a flat line at the bottom means nothing in use. Empty input gives an empty SVG.
    """
    pts = [(i, float(v)) for i, v in enumerate(values) if v is not None]
    svg = f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' class='xlakit-spark'>"
    if not pts:
        return svg + "</svg>"
    top = max(v for _, v in pts) or 1.0
    n = max(len(values) - 1, 1)
    coords = [(1 + (width - 2) * i / n, height - 2 - (height - 4) * v / top) for i, v in pts]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    x, y = coords[-1]
    return (svg + f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{line}'/>"
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2' fill='#1f77b4'/></svg>")


# -- timeline -------------------------------------------------------------------------------------------------

#: kind -> (plotly marker symbol, colour). Symbols are ones WebGL scatter traces draw.
KIND_STYLE: dict[str, tuple[str, str]] = {
    "hit": ("circle", "#2ca02c"), "miss": ("x", "#d62728"), "compile": ("square", "#1f77b4"),
    "store": ("triangle-up", "#9467bd"), "skip": ("diamond", "#7f7f7f"), "corrupt": ("star", "#e377c2"),
    "evict": ("triangle-down", "#8c564b"), "load_error": ("cross", "#ff7f0e"), "store_error": ("cross", "#bcbd22"),
    "trace": ("circle-open", "#17becf"), "lower": ("square-open", "#aec7e8"),
    "remote_hit": ("diamond-open", "#2ca02c"), "remote_miss": ("x-open", "#d62728"), "upload": ("triangle-up-open", "#9467bd"), "upload_error": ("cross-open", "#bcbd22"), "claim": ("star-open", "#1f77b4"), "wait": ("triangle-right", "#7f7f7f"),  # noqa: E501
}
_NO_NAME = "(no name)"


class EventColumns:
    """The events a timeline shows, kept as columns (appended incrementally, bounded, thread-safe).

    Lanes (one per function name) are assigned on append in order of first appearance and never change.

    Args:
      maxlen: keep the newest ``maxlen`` events (int, default 100,000).
    """

    FIELDS = ("time", "kind", "name", "source", "duration_s", "bytes", "key", "partition", "reason", "saved_s")

    def __init__(self, maxlen: int = 100_000) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen}")
        self.maxlen = maxlen
        self.lanes: dict[str, int] = {}
        self._cols: dict[str, list[Any]] = {f: [] for f in (*self.FIELDS, "lane")}
        self._lock = threading.Lock()
        self._arrays: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self._cols["time"])

    def extend(self, events: Iterable[Event]) -> int:
        """Append events; returns how many."""
        n = 0
        with self._lock:
            cols, lanes = self._cols, self.lanes
            for e in events:
                name = e.name or _NO_NAME
                lane = lanes.get(name)
                if lane is None:
                    lane = lanes[name] = len(lanes)
                for f in self.FIELDS:
                    cols[f].append(getattr(e, f))
                cols["name"][-1] = name
                cols["lane"].append(lane)
                n += 1
            extra = len(cols["time"]) - self.maxlen
            if extra > 0:
                for f in cols:
                    del cols[f][:extra]
            if n:
                self._arrays = None
        return n

    def arrays(self) -> dict[str, Any]:
        """The columns as numpy arrays (cached until the next append): numbers as float64 (NaN = None)."""
        import numpy as np

        with self._lock:
            if self._arrays is None:
                c = self._cols
                out = {"time": np.asarray(c["time"], dtype=float), "lane": np.asarray(c["lane"], dtype=np.int64)}
                for f in ("duration_s", "bytes", "saved_s"):
                    out[f] = np.asarray([np.nan if v is None else v for v in c[f]], dtype=float)
                for f in ("kind", "name", "source", "key", "partition", "reason"):
                    out[f] = np.asarray(c[f], dtype=object)
                self._arrays = out
            return self._arrays


@dataclasses.dataclass(frozen=True)
class TimelineData:
    """What a timeline draws after filters and down-sampling.

    Attributes:
      t0: wall-clock seconds (``time.time()``) of the first kept event; x values are seconds after it.
      lanes: lane names, by lane index (y values are lane indexes).
      points: kind -> dict with numpy arrays ``x`` (s), ``y`` (lane), ``size`` (px), ``index`` (row in the
        columns) and ``hover`` (list of str), for the kinds that pass the filter and have points.
      saved_x, saved_y: the cumulative seconds-saved curve (x in s after ``t0``; y in s), down-sampled.
      total: events kept. matched: events passing the filters. shown: points drawn (after down-sampling).
      saved_s: total seconds saved by the matched hits.
      counts: lane name -> {kind: events} over the matched events (every event, not only those drawn).
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
    parts = [f"<b>{escape(str(a['kind'][i]))}</b> {escape(str(a['name'][i]))} [{escape(str(a['source'][i]))}]"]
    d = a["duration_s"][i]
    if d == d:  # not NaN
        parts.append(f"duration: {d:.4f} s")
    s = a["saved_s"][i]
    if s == s:
        parts.append(f"saved: {s:.4f} s")
    b = a["bytes"][i]
    parts.append(f"bytes: {fmt_bytes(int(b)) + f' ({int(b)})' if b == b else '—'}")
    parts.append(f"key: {escape(str(a['key'][i] or '—'))}")
    parts.append(f"partition: {escape(str(a['partition'][i] or '—'))}")
    reason = a["reason"][i]
    if reason:
        text = " ".join(str(reason).split())
        parts.append("reason: " + escape(text if len(text) <= 160 else text[:157] + "..."))
    return "<br>".join(parts)


def timeline_data(columns: EventColumns, *, kinds: Iterable[str] | None = None, name_filter: str = "",
                  source: str | None = None, max_points: int = 5000) -> TimelineData:
    """Filter and down-sample ``columns`` for drawing.

    Args:
      kinds: the kinds to show (None: all). The seconds-saved curve ignores this filter (only hits save).
      name_filter: case-insensitive substring of the function name ("" = all).
      source: one event source, or None for all.
      max_points: budget of drawn event markers (int; the curve has its own budget of the same size).
    """
    import numpy as np

    a = columns.arrays()
    total = a["time"].size
    lanes = tuple(sorted(columns.lanes, key=columns.lanes.get))
    if total == 0:
        empty = np.zeros(0)
        return TimelineData(None, lanes, {}, empty, empty, 0, 0, 0, 0.0)
    t0 = float(a["time"].min())
    x = a["time"] - t0
    base = np.ones(total, dtype=bool)
    if name_filter:
        needle = name_filter.lower()
        lane_ok = np.array([needle in name.lower() for name in lanes], dtype=bool)
        base &= lane_ok[a["lane"]]
    if source:
        base &= a["source"] == source
    kind_set = set(KINDS if kinds is None else kinds)
    mask = base & np.isin(a["kind"], list(kind_set))
    sel = np.flatnonzero(mask)
    kind_ids = {k: i for i, k in enumerate(KINDS)}
    group = a["lane"][sel] * len(KINDS) + np.array([kind_ids[k] for k in a["kind"][sel]], dtype=np.int64)
    picked = sel[downsample(x[sel], a["duration_s"][sel], group, max_points)] if sel.size else sel
    top = float(np.nanmax(a["duration_s"][sel])) if sel.size and not np.all(np.isnan(a["duration_s"][sel])) else 0.0
    points = {}
    for k in KINDS:
        idx = picked[a["kind"][picked] == k]
        if idx.size:
            points[k] = {"x": x[idx], "y": a["lane"][idx], "size": marker_sizes(a["duration_s"][idx], max_duration=top),
                         "index": idx, "hover": [_hover(a, int(i)) for i in idx]}
    hits = np.flatnonzero(base & (a["kind"] == "hit"))
    saved = np.nan_to_num(a["saved_s"][hits], nan=0.0).clip(min=0.0)
    order = np.argsort(x[hits], kind="stable")
    sx, sy = x[hits][order], np.cumsum(saved[order])
    if sx.size:
        sx, sy = np.r_[0.0, sx, x.max()], np.r_[0.0, sy, sy[-1]]
        sx, sy = downsample_series(sx, sy, max_points)
    counts: dict[str, dict[str, int]] = {}
    if sel.size:
        pairs, n = np.unique(np.stack([a["lane"][sel], group % len(KINDS)]), axis=1, return_counts=True)
        for (lane, kind), c in zip(pairs.T, n):
            counts.setdefault(lanes[int(lane)], {})[KINDS[int(kind)]] = int(c)
    return TimelineData(t0, lanes, points, sx, sy, total, int(sel.size), int(picked.size),
                        float(saved.sum()), counts)


# -- cache browser --------------------------------------------------------------------------------------------

def filter_entries(frame, name_filter: str = "", partition: str | None = None):
    """Rows of an ``ExecutableCache.entries()`` frame whose name contains ``name_filter`` (case-insensitive)
    and, if given, in ``partition``."""
    if frame.empty:
        return frame
    mask = frame["partition"].notna()
    if name_filter:
        mask &= frame["name"].fillna("").str.lower().str.contains(name_filter.lower(), regex=False)
    if partition:
        mask &= frame["partition"] == partition
    return frame[mask]


def partition_totals(frame):
    """Per partition: entries, bytes on disk, recorded compile seconds, hits in this process (a DataFrame
    indexed by partition; empty without entries)."""
    import pandas as pd

    columns = ["entries", "size_bytes", "compile_s", "hits"]
    if frame.empty:
        return pd.DataFrame(columns=["partition", *columns]).set_index("partition")
    out = frame.groupby("partition").agg(entries=("key", "size"), size_bytes=("size_bytes", "sum"),
                                         compile_s=("compile_s", "sum"), hits=("hits", "sum"))
    return out[columns]


def explain_entry(info: Any, environment: Any):
    """Could this cache entry be loaded here? Its recorded environment against ``environment`` (the current
    one), as an :class:`~xlakit.explain.Explanation` (status ``hit`` when nothing differs and the partition is
    this one, else ``miss`` with the differing fields).

    Uses :func:`xlakit.explain.compare` with the entry's own key parts and signature, so only the
    environment can differ (the program itself is not known to a cache browser; ``ExecutableCache.explain``
    compares a function you pass).
    """
    from xlakit.explain import Explanation, compare

    header = dict(getattr(info, "header", None) or {})
    now = {"key_parts": header.get("key_parts"), "environment": environment.to_dict(),
           "signature": header.get("signature"), "module_text": None}
    diffs, _ = compare(now, header)
    here = environment.partition_name()
    status = "hit" if not diffs and info.partition == here else "miss"
    nearest = {"key": info.key, "partition": info.partition, "created": info.created}
    return Explanation(info.name or "?", info.key, here, status, nearest=nearest if status == "miss" else None,
                       differences=tuple(diffs))


# -- live arrays ----------------------------------------------------------------------------------------------

def _shape_label(dtype: Any, shape: Any) -> str:
    dims = ",".join(str(d) for d in (shape or ()))
    return f"{dtype}[{dims}]"


def live_table(frame, top: int | None = 50):
    """Live array shards grouped by device, memory kind, dtype and shape: arrays, bytes, where the first was
    created; largest first, at most ``top`` rows (None: all)."""
    import pandas as pd

    columns = ["device", "memory_kind", "array", "arrays", "bytes", "created_at"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    f = frame.assign(array_label=[_shape_label(d, s) for d, s in zip(frame["dtype"], frame["shape"])],
                     memory_kind=frame["memory_kind"].fillna("device"))
    out = (f.groupby(["device", "memory_kind", "array_label"], dropna=False, sort=False)
           .agg(arrays=("array", "nunique"), bytes=("bytes", "sum"), created_at=("created_at", "first"))
           .reset_index().rename(columns={"array_label": "array"}))
    out = out.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)
    return out[columns] if top is None else out[columns].head(top)


def treemap_nodes(frame) -> dict[str, list[Any]]:
    """Treemap nodes device -> memory kind -> dtype[shape] with byte values (``branchvalues="total"``).

    Returns a dict of lists ``ids``, ``labels``, ``parents``, ``values`` (bytes) and ``text`` (readable bytes
    and array counts)."""
    nodes: dict[str, dict[str, Any]] = {}

    def add(node_id: str, label: str, parent: str, nbytes: int, arrays: int) -> None:
        node = nodes.setdefault(node_id, {"label": label, "parent": parent, "value": 0, "arrays": 0})
        node["value"] += nbytes
        node["arrays"] += arrays

    if not frame.empty:
        for row in live_table(frame, top=None).itertuples(index=False):
            dev, kind = str(row.device), str(row.memory_kind)
            add(dev, dev, "", int(row.bytes), int(row.arrays))
            add(f"{dev}/{kind}", kind, dev, int(row.bytes), int(row.arrays))
            add(f"{dev}/{kind}/{row.array}", str(row.array), f"{dev}/{kind}", int(row.bytes), int(row.arrays))
    ids = list(nodes)
    return {"ids": ids, "labels": [nodes[i]["label"] for i in ids], "parents": [nodes[i]["parent"] for i in ids],
            "values": [nodes[i]["value"] for i in ids],
            "text": [f"{fmt_bytes(nodes[i]['value'])}, {nodes[i]['arrays']} array(s)" for i in ids]}


# -- HTML -----------------------------------------------------------------------------------------------------

def bytes_cell(n: Any) -> str:
    """A table cell for a byte count: readable text, the exact number in ``data-bytes`` and the title."""
    if missing(n):
        return "<td class='xlakit-na'>not reported</td>"
    n = int(n)
    return f"<td data-bytes='{n}' title='{n} bytes'>{escape(fmt_bytes(n))}</td>"


def _cell(v: Any) -> str:
    if missing(v):
        return "<td></td>"
    if isinstance(v, float):
        return f"<td>{v:.4g}</td>"
    if hasattr(v, "strftime"):  # datetimes (pandas Timestamps), to the second
        return f"<td>{v.strftime('%Y-%m-%d %H:%M:%S')}</td>"
    return f"<td>{escape(str(v))}</td>"


def table_html(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], *,
               byte_columns: Iterable[str] = (), caption: str | None = None, max_rows: int | None = None,
               css_class: str = "xlakit-table") -> str:
    """An HTML table of ``rows`` (dicts), ``columns`` = (key, header); byte columns via :func:`bytes_cell`.

    With ``max_rows``, the rest is summarised in a last line."""
    byte_columns = set(byte_columns)
    head = "".join(f"<th>{escape(h)}</th>" for _, h in columns)
    shown = rows if max_rows is None else rows[:max_rows]
    body = "".join("<tr>" + "".join(bytes_cell(r.get(k)) if k in byte_columns else _cell(r.get(k))
                                    for k, _ in columns) + "</tr>" for r in shown)
    more = (f"<tr><td colspan='{len(columns)}'>… {len(rows) - len(shown)} more row(s)</td></tr>"
            if len(shown) < len(rows) else "")
    cap = f"<caption style='text-align:left'>{escape(caption)}</caption>" if caption else ""
    return (f"{TABLE_STYLE}<table class='xlakit-table {css_class}' style='border-collapse:collapse;font-size:12px'>"
            f"{cap}<thead><tr>{head}</tr></thead><tbody>{body}{more}</tbody></table>")


#: Cell padding and rules for every xlakit table (inline, so a snapshot and a widget look the same).
TABLE_STYLE = ("<style>.xlakit-table th,.xlakit-table td{padding:2px 8px;border-bottom:1px solid #e4e4e4;"
               "text-align:right;vertical-align:top}.xlakit-table th{background:#f6f6f6}"
               ".xlakit-table td:first-child,.xlakit-table th:first-child{text-align:left}</style>")


def frame_records(frame) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts with the index as a column (pandas NA -> None)."""
    if frame is None or frame.empty:
        return []
    flat = frame.reset_index() if frame.index.name is not None else frame
    out = []
    for rec in flat.to_dict("records"):
        out.append({k: (None if missing(v) else v) for k, v in rec.items()})
    return out
