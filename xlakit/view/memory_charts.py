"""Pictures of one compiled program's memory over program order: live bytes stacked by role with the peak marked,
and buffer lifetimes (each large logical buffer a bar from the step that defines it to its last use), both in
the one role -> colour map :data:`~xlakit._text.theme.ROLE_COLORS`.

Pure functions of DataFrames (numpy and plotly imported where used), so they are tested without a browser and
shared by :class:`xlakit.widgets.MemoryBreakdown`, :class:`xlakit.widgets.MemoryExplorer` and their snapshots.
The frames are the ones :mod:`xlakit.memory` builds: a liveness frame (``step``, ``live_bytes`` and optionally
``instruction`` and columns of bytes to stack: one per role from ``Attribution.liveness``, or per XLA buffer
kind ``parameter``/``output``/``temporary``/``constant`` from ``BufferAssignment.live_bytes_by_step()``) and
a buffers frame (one row per logical buffer: ``buffer_id, instruction, bytes, shape, dtype, role, scope,
source, layer, parameter, start, end`` and optionally ``allocation``/``offset``: logical buffers in one
allocation slice at once are one bar).

They stay fast for programs of 10,000+ instructions: a line keeps at most about ``max_points`` points (per bin
the smallest and largest value, the first and last step, and always the peak step), and the stacked areas are
drawn in SVG at any size: plotly fills WebGL (``scattergl``) areas slowly where WebGL is software-rendered (a
browser without a GPU: 10,000 steps stacked by 9 roles drew in 27 s as ``scattergl``, 0.5 s as SVG, headless
chromium, ``benchmarks/memory_charts.py``); the lifetime chart draws the ``top`` largest buffers and says how
many it left out.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from xlakit._text.format import fmt_bytes, wrapped_label
from xlakit._text.theme import ROLE_COLORS
from xlakit._text.untrusted import plotly_text
from xlakit.view.chart_marks import PEAK_COLOR, caption_room, mark_peak

__all__ = ["ROLES", "ROLE_COLORS", "keep_indices", "peak_of", "liveness_chart", "lifetime_chart",
           "buffer_hover", "buffer_label", "buffer_slices", "shape_text", "chart_layout"]

#: The roles :func:`xlakit.memory.attribute` gives a logical buffer (``xlakit.memory.ROLES``), in legend order.
ROLES = tuple(ROLE_COLORS)


def keep_indices(y, max_points: int, keep: Sequence[int] = ()):
    """Sorted indices of at most about ``max_points`` points of ``y`` that keep its shape: ``y`` is cut into
    ``max_points // 2`` bins and each bin's smallest and largest value are kept, plus the first and last point
    and every index in ``keep`` (e.g. the peak step). Vectorised (numpy); all indices when ``len(y)`` fits.

    Raises:
      ValueError: ``max_points`` < 4.
    """
    import numpy as np

    if max_points < 4:
        raise ValueError(f"max_points must be >= 4, got {max_points}")
    y = np.asarray(y, dtype=float)
    n = y.size
    if n <= max_points:
        return np.arange(n)
    bins = max_points // 2
    width = -(-n // bins)  # ceil
    padded = bins * width
    lo = np.full(padded, np.inf)
    hi = np.full(padded, -np.inf)
    lo[:n], hi[:n] = y, y
    offsets = np.arange(bins) * width
    picks = [offsets + lo.reshape(bins, width).argmin(axis=1), offsets + hi.reshape(bins, width).argmax(axis=1),
             np.array([0, n - 1, *keep], dtype=np.int64)]
    idx = np.unique(np.concatenate(picks))
    return idx[(idx >= 0) & (idx < n)]


def peak_of(liveness) -> tuple[int | None, int | None]:
    """(step, live bytes) where ``liveness["live_bytes"]`` is largest (the first such step), or (None, None)."""
    if liveness is None or liveness.empty or "live_bytes" not in liveness.columns:
        return None, None
    i = int(liveness["live_bytes"].to_numpy().argmax())
    step = liveness["step"].iloc[i] if "step" in liveness.columns else i
    return int(step), int(liveness["live_bytes"].iloc[i])


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    """:data:`~xlakit._text.theme.PLOTLY_TEMPLATE` as a plotly Template object, built once: validating the dict
    anew costs more than the rest of a 10,000-step chart."""
    import plotly.graph_objects as go

    from xlakit._text.theme import PLOTLY_TEMPLATE

    return go.layout.Template(PLOTLY_TEMPLATE)


def chart_layout(fig, title: str, height: int, *, legend_title: str | None = None, plot_left: int | None = None,
                 **extra: Any) -> None:
    """The shared layout (:data:`~xlakit._text.theme.BASE_LAYOUT`, the legend under the plot, titled
    ``legend_title``) with ``title`` (wrapped to the narrowest width, :func:`~xlakit._text.theme.title_layout`):
    ``height`` px for the plot and axes, plus the title's extra lines and the rows the legend of the traces in
    ``fig`` wraps into at the narrowest width (:func:`~xlakit._text.theme.legend_space`; ``plot_left``: the left
    margin the y axis's labels will take, px, when wider than the layout's)."""
    from xlakit._text.theme import BASE_LAYOUT, LEGEND, legend_space, title_layout

    legend = {**LEGEND, "title": {**LEGEND["title"], "text": legend_title}} if legend_title else LEGEND
    margin = extra.pop("margin", BASE_LAYOUT["margin"])
    top = title_layout(title, margin)
    left = max(int(margin.get("l", 0)), plot_left or 0)
    height += legend_space(fig, left=left, titled=bool(legend_title)) + top["margin"]["t"] - int(margin["t"])
    fig.update_layout(**{**BASE_LAYOUT, "height": height, "template": _template(), "legend": legend, **top, **extra})



def _byte_axis(fig, values, axis: str = "yaxis") -> None:
    from xlakit._text.theme import byte_axis

    fig.update_layout({axis: byte_axis(values)})


def _stacks(frame) -> tuple[list[str], str]:
    """The columns of ``frame`` to stack (those of :data:`ROLES` holding any bytes, in legend order) and what
    they are: ``"role"`` for an attribution's liveness (``attrs["stacked_by"]``), else ``"XLA buffer kind"``
    (``BufferAssignment.live_bytes_by_step()``: parameter/output/temporary/constant, coloured as the role of
    the same name)."""
    columns = [r for r in ROLES if r in frame.columns and frame[r].to_numpy().any()]
    return columns, "role" if frame.attrs.get("stacked_by") == "role" else "XLA buffer kind"


def liveness_chart(liveness, *, peak_step: int | None = None, caption: str | None = None, title: str = "",
                   max_points: int = 1000, steps: int | None = None):
    """Live bytes over program order, stacked by role, with the peak step marked (a dashed vertical line and
    an annotation).

    Args:
      liveness: a liveness frame (see the module docstring): ``Attribution.liveness`` is stacked by role
        (parameter, optimizer state, residual, recomputed, temporary, output...) in
        :data:`~xlakit._text.theme.ROLE_COLORS`, the colours of the lifetime chart and the treemap; a
        ``BufferAssignment.live_bytes_by_step()`` frame (no roles) by XLA's buffer kind, in the colours of the
        roles of the same name; without either, the ``live_bytes`` line. A heap-simulator-trace frame
        (column ``trace``) is drawn one line per trace.
      peak_step: the step to mark (e.g. ``Peak.step``); default the step where ``live_bytes`` is largest.
      caption: text for the annotation after "peak <bytes> at step <n>" (e.g. the peak's top source).
      title: the figure title. max_points: points per line at most (about; :func:`keep_indices`): the default
        1,000 keeps each ~3 px of a 1,400 px wide chart's lowest and highest point and draws a stack of 9 roles
        over 10,000 steps in about half the time 2,000 took.
      steps: the program's step count for the annotation ("of 212"); default the frame's.

    Returns:
      a ``plotly.graph_objects.Figure`` (hovering a step lists the bytes of every role live there);
      ``layout.meta["xlakit_liveness"]`` holds ``peak_step``, ``peak_bytes``, ``steps``, ``points`` (the
      points drawn per line), ``stacked_by`` (``"role"``, ``"XLA buffer kind"`` or None) and ``at_peak``
      (bytes per stacked column at the peak step).
    """
    import numpy as np
    import plotly.graph_objects as go

    fig = go.Figure()
    meta: dict[str, Any] = {"peak_step": None, "peak_bytes": None, "steps": 0, "points": 0, "stacked_by": None,
                            "at_peak": {}}
    if liveness is None or liveness.empty:
        chart_layout(fig, title or "Live bytes over program order", 320)
        fig.update_layout(meta={"xlakit_liveness": meta})
        return fig
    if "trace" in liveness.columns:
        return _trace_chart(liveness, title, max_points, meta)
    columns, stacked_by = _stacks(liveness)
    frame = liveness.sort_values("step", kind="stable") if "step" in liveness.columns else liveness
    x = frame["step"].to_numpy() if "step" in frame.columns else np.arange(len(frame))
    total = frame["live_bytes"].to_numpy(dtype=float)
    if peak_step is None:
        peak_i = int(total.argmax())
    else:
        hits = np.flatnonzero(x == peak_step)
        peak_i = int(hits[0]) if hits.size else int(np.abs(x - peak_step).argmin())
    idx = keep_indices(total, max_points, keep=[peak_i])
    instr = frame["instruction"].to_numpy(dtype=object)[idx] if "instruction" in frame.columns else None
    xs = x[idx]
    below = np.zeros(idx.size)
    parts = [(c, frame[c].to_numpy(dtype=float)[idx], ROLE_COLORS[c]) for c in columns] or \
        [("live bytes", total[idx], ROLE_COLORS["parameter"])]
    where = [f" at {plotly_text(str(i))}" for i in instr] if instr is not None else [""] * idx.size
    for k, (name, ys, color) in enumerate(parts):
        top = below + ys
        # Hovering a step shows every stack's bytes there (hovermode "x unified"); the last adds the total.
        labels = [f"{plotly_text(name)}: {fmt_bytes(v)}" for v in ys]
        if k == len(parts) - 1:
            labels = [f"{lab}<br><b>{fmt_bytes(t)} live</b>{w}" for lab, t, w in zip(labels, total[idx], where,
                                                                                      strict=True)]
        fig.add_trace(go.Scatter(x=xs, y=top, mode="lines", name=name, line=dict(color=color, width=1, shape="hv"),
                              fill="tonexty" if len(fig.data) else "tozeroy", customdata=labels,
                              hovertemplate="%{customdata}<extra></extra>"))
        below = top
    p_step, p_bytes = int(x[peak_i]), int(total[peak_i])
    n_steps = int(steps if steps is not None else len(frame))
    text = f"peak {fmt_bytes(p_bytes)} at step {p_step} of {n_steps}"
    if caption:
        text += f": {caption}"
    room = mark_peak(fig, p_step, plotly_text(text), (float(x.min()), float(x.max())) if len(x) else None)
    at_peak = {c: int(frame[c].iloc[peak_i]) for c in columns}
    split = "".join(f"<br>{plotly_text(c)}: {fmt_bytes(v)}" for c, v in
                    sorted(at_peak.items(), key=lambda kv: -kv[1]) if v)
    fig.add_trace(go.Scatter(x=[p_step], y=[p_bytes], mode="markers", name="peak",
                          marker=dict(color=PEAK_COLOR, size=9, symbol="diamond"),
                          customdata=[plotly_text(text) + split], hovertemplate="%{customdata}<extra></extra>"))
    meta.update(peak_step=p_step, peak_bytes=p_bytes, steps=n_steps, points=int(idx.size),
                stacked_by=stacked_by if columns else None, at_peak=at_peak)
    heading = title or "Live bytes over program order"
    chart_layout(fig, heading, 340, legend_title=f"by {stacked_by}" if columns else None)
    caption_room(fig, room)
    fig.update_layout(xaxis_title="step (instruction in schedule order)", yaxis_title="bytes",
                      hovermode="x unified", meta={"xlakit_liveness": meta})
    _byte_axis(fig, [0.0, float(total.max())])
    return fig


def _trace_chart(frame, title: str, max_points: int, meta: dict[str, Any]):
    """One line per heap-simulator trace (event index as x); the highest point of all traces is marked."""
    import numpy as np
    import plotly.graph_objects as go

    fig = go.Figure()
    best: tuple[float, int] = (-1.0, 0)
    for t, part in frame.groupby("trace"):
        y = part["live_bytes"].to_numpy(dtype=float)
        i = int(y.argmax())
        if y[i] > best[0]:
            best = (float(y[i]), i)
        idx = keep_indices(y, max_points, keep=[i])
        fig.add_scatter(x=idx, y=y[idx], mode="lines", line=dict(shape="hv"), name=f"trace {t}",
                        customdata=[fmt_bytes(v) for v in y[idx]],
                        hovertemplate="event %{x}: %{customdata}<extra></extra>")
        meta["points"] = max(meta["points"], int(idx.size))
    meta.update(peak_step=best[1], peak_bytes=int(best[0]), steps=len(frame))
    mark_peak(fig, best[1], f"peak {fmt_bytes(best[0])} (heap trace event {best[1]})")
    chart_layout(fig, title or "Live bytes over the heap simulator trace", 320)
    fig.update_layout(xaxis_title="heap trace event", meta={"xlakit_liveness": meta})
    _byte_axis(fig, [0.0, float(np.nanmax(frame["live_bytes"].to_numpy(dtype=float)))])
    return fig


def shape_text(shape: Any) -> str:
    """``(8, 1024, 256)`` -> ``"8×1024×256"``; ``()`` -> ``"scalar"``; missing -> ``"?"``."""
    if shape is None or (isinstance(shape, float) and shape != shape):
        return "?"
    dims = tuple(shape)
    return "×".join(str(d) for d in dims) if dims else "scalar"


def _text(v: Any, missing: str = "unknown") -> str:
    if v is None or (isinstance(v, float) and v != v):
        return missing
    return str(v)


def buffer_hover(row: Any) -> str:
    """Tooltip of one buffer row: instruction, role, bytes, dtype[shape], scope, source, parameter, live range."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    parts = [f"{plotly_text(_text(get('layer'), ''))}" if _known(get("layer")) else "",
             f"<b>{plotly_text(_text(get('instruction')))}</b> ({plotly_text(_text(get('role')))})",
             f"{fmt_bytes(get('bytes'))} {plotly_text(_text(get('dtype'), '?'))}"
             f"[{plotly_text(shape_text(get('shape')))}]",
             f"scope: {plotly_text(_text(get('scope')))}", f"source: {plotly_text(_text(get('source')))}"]
    if get("parameter") is not None and _text(get("parameter"), "") not in ("", "unknown"):
        parts.append(f"parameter: {plotly_text(str(get('parameter')))}")
    if get("start") is not None and get("end") is not None:
        parts.append(f"live steps {_text(get('start'))}–{_text(get('end'))}")
    return "<br>".join(p for p in parts if p)


_PARAMETER_ROLES = ("parameter", "optimizer state", "aliased")


_MISSING = ("", "unknown", "None", "<NA>")


def _known(v: Any) -> str | None:
    """``v`` as text, or None when it is missing, empty or ``"unknown"``."""
    t = _text(v, "")
    return None if t in _MISSING else t


def buffer_label(row: Any, *, size: bool = True) -> str:
    """A buffer named in the user's terms: its parameter path (parameters, optimizer state, donated results),
    else its source line, layer or parameter, else "no line of your code" (as ``Peak.by("source")`` says it: made by
    XLA or inside a library; XLA's ``copy.34`` is in the tooltip only); then the role and (``size``) the bytes,
    e.g. ``"cell [4], line 3 (block) · residual · 8.0 MiB"``."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    role = _text(get("role"))
    parameter = _known(get("parameter"))
    where = (parameter if role in _PARAMETER_ROLES and parameter else None) or _known(get("source")) \
        or _known(get("layer")) or parameter or "no line of your code"
    parts = [where, role]
    if size:
        parts.append(fmt_bytes(get("bytes")))
    return " · ".join(parts)


#: Characters per line of a lifetime chart's bar label: a longer one (a copy's story) wraps, never cut.
LABEL_LINE = 48


def _slice_groups(frame) -> list[list[int]]:
    """Positions in ``frame`` grouped by allocation slice: rows of the same ``allocation`` and ``offset`` whose
    live ranges (``start``..``end``, inclusive) overlap, chained, are one group (in-place updates, bitcasts and
    loop-carried aliases of one piece of memory). Rows without an allocation or offset, or every row when the
    frame lacks those columns, are groups of their own."""
    import numpy as np
    import pandas as pd

    n = len(frame)
    if not {"allocation", "offset"} <= set(frame.columns):
        return [[i] for i in range(n)]
    alloc = pd.to_numeric(frame["allocation"], errors="coerce").to_numpy(dtype=float)
    off = pd.to_numeric(frame["offset"], errors="coerce").to_numpy(dtype=float)
    start = frame["start"].to_numpy(dtype=float)
    end = frame["end"].to_numpy(dtype=float)
    keyed = ~(np.isnan(alloc) | np.isnan(off))
    groups: list[list[int]] = [[int(i)] for i in np.flatnonzero(~keyed)]
    idx = np.flatnonzero(keyed)
    current: list[int] = []
    reach = -np.inf
    for i in idx[np.lexsort((start[idx], off[idx], alloc[idx]))].tolist():
        if current and alloc[i] == alloc[current[0]] and off[i] == off[current[0]] and start[i] <= reach:
            current.append(i)
            reach = max(reach, end[i])
        else:
            current = [i]
            groups.append(current)
            reach = end[i]
    return groups


def buffer_slices(buffers):
    """One row per piece of memory a buffers frame's live buffers occupy (see :func:`_slice_groups`): the
    representative buffer (the largest; then one that is not a temporary; then one whose source is known; then
    the longest lived; then the first to start) with the group's ``start`` the earliest, ``end`` the latest and
    ``bytes`` the largest (counted once), plus ``aliases`` (a tuple of the other buffers' instructions, in start
    order). Buffers without a live range are dropped."""
    import numpy as np
    import pandas as pd

    start, end = (pd.to_numeric(buffers[c], errors="coerce") for c in ("start", "end"))
    ranged = buffers[(start >= 0) & (end >= start)].reset_index(drop=True)
    ranged = ranged.assign(start=pd.to_numeric(ranged["start"]), end=pd.to_numeric(ranged["end"]))
    groups = _slice_groups(ranged)
    sizes = ranged["bytes"].to_numpy(dtype=float)
    starts, ends = ranged["start"].to_numpy(dtype=float), ranged["end"].to_numpy(dtype=float)
    named = np.zeros(len(ranged), dtype=bool)
    for column in ("source", "layer", "parameter"):  # _known, column-wise (a row-wise pass took most of the chart)
        if column in ranged.columns:
            values = ranged[column]
            named |= (values.notna() & ~values.astype(str).isin(_MISSING)).to_numpy(dtype=bool)
    names = ranged["instruction"].tolist() if "instruction" in ranged.columns else [None] * len(ranged)
    roles = ranged["role"].fillna("unknown").astype(str).tolist()
    reps, lo, hi, top, aliases = [], [], [], [], []
    for g in groups:
        rep = min(g, key=lambda i: (-sizes[i], roles[i] in ("temporary", "unknown"), not named[i],
                                    starts[i] - ends[i], starts[i]))
        reps.append(rep)
        lo.append(min(starts[i] for i in g))
        hi.append(max(ends[i] for i in g))
        top.append(max(sizes[i] for i in g))
        aliases.append(tuple(_text(names[i], "?") for i in sorted(g, key=lambda i: starts[i]) if i != rep))
    out = ranged.iloc[reps].reset_index(drop=True)
    if not len(out):
        return out.assign(aliases=[])
    return out.assign(start=np.asarray(lo).astype(np.int64), end=np.asarray(hi).astype(np.int64),
                      bytes=np.asarray(top).astype(np.int64), aliases=aliases)


def _slice_hover(row: Any) -> str:
    hover = buffer_hover(row)
    aliases = row.get("aliases") or ()
    if aliases:
        listed = ", ".join(plotly_text(str(a)) for a in aliases[:8]) + (", …" if len(aliases) > 8 else "")
        hover += (f"<br>+{len(aliases)} alias{'es' if len(aliases) > 1 else ''} (same allocation slice, "
                  f"bytes counted once): {listed}")
    return hover


def lifetime_chart(buffers, *, top: int = 40, peak_step: int | None = None, title: str = ""):
    """Buffer lifetimes: each of the ``top`` largest pieces of memory a horizontal bar over program order from
    ``start`` to ``end`` (inclusive), coloured by role, labelled in the user's terms (:func:`buffer_label`), with
    a tooltip naming the instruction, scope, source, shape and bytes.

    Logical buffers that share one allocation slice at once (same ``allocation`` and ``offset``, overlapping live
    ranges: in-place updates, bitcasts, a loop's carried value) are one bar over the union of their live ranges,
    their bytes counted once, the tooltip naming the aliases (:func:`buffer_slices`); without those columns each
    buffer is its own bar. Bars are ordered by start step (top to bottom), so the chart reads like the program.
    Buffers without a live range (``start``/``end`` missing or -1) are counted, not drawn.

    Args:
      buffers: a buffers frame (see the module docstring). top: how many of the largest bars to draw
        (int >= 1; default 40, each labelled: above 40 bars the labels are left out and only tooltips name them,
        and 43 unlabelled bars explained nothing in a teacher's trial, 2026-12-07). peak_step: a step to mark
        with a dashed line (e.g. ``Peak.step``). title: the figure title.

    Returns:
      a ``plotly.graph_objects.Figure``, one bar trace per role present; ``layout.meta["xlakit_lifetime"]``
      holds ``shown`` (bars drawn), ``more`` / ``more_bytes`` (bars with a live range left out — beyond ``top``
      or under 1/1000 of the largest bar — and their bytes),
      ``no_range`` (buffers without one), ``aliases`` (buffers drawn as part of another's bar, or left out with
      it), and per bar drawn, top to bottom: ``buffer_ids`` (the representative's), ``bytes`` and ``labels``.

    Raises:
      ValueError: ``top`` < 1, or the frame lacks a column the chart needs.
    """
    import numpy as np
    import plotly.graph_objects as go

    if top < 1:
        raise ValueError(f"top must be >= 1 buffer, got {top}")
    need = {"bytes", "role", "start", "end"}
    if buffers is not None and not need <= set(buffers.columns):
        raise ValueError(f"a buffers frame needs columns {sorted(need)}; got {sorted(buffers.columns)}")
    fig = go.Figure()
    meta: dict[str, Any] = {"shown": 0, "more": 0, "more_bytes": 0, "no_range": 0, "aliases": 0, "buffer_ids": [],
                            "bytes": [], "labels": []}
    if buffers is None or buffers.empty:
        chart_layout(fig, title or "Buffer lifetimes", 300)
        fig.update_layout(meta={"xlakit_lifetime": meta})
        return fig
    slices = buffer_slices(buffers)
    n_ranged = int(len(slices) + sum(len(a) for a in slices["aliases"]))
    meta["no_range"] = int(len(buffers) - n_ranged)
    meta["aliases"] = n_ranged - int(len(slices))
    sizes = slices["bytes"].to_numpy(dtype=float)
    order = np.argsort(-sizes, kind="stable")  # a bar under 1/1000 of the largest (a 4-byte constant live from
    visible = order[sizes[order] * 1000 >= sizes.max(initial=0)]  # step 0, at the top) is counted, not drawn
    shown = slices.iloc[visible[:top]]
    rest = slices.drop(index=shown.index)
    meta["more"], meta["more_bytes"] = int(len(rest)), int(rest["bytes"].sum())
    shown = shown.sort_values(["start", "bytes"], ascending=[True, False], kind="stable")
    n = len(shown)
    position = np.arange(n)[::-1]  # the first to start at the top
    roles = shown["role"].fillna("unknown").astype(str).to_numpy()
    records = shown.to_dict("records")
    starts = shown["start"].to_numpy(dtype=float)
    lengths = shown["end"].to_numpy(dtype=float) - starts + 1
    for role in [*ROLES, *sorted(set(roles) - set(ROLES))]:
        mask = roles == role
        if not mask.any():
            continue
        fig.add_bar(y=position[mask], x=lengths[mask], base=starts[mask], orientation="h", name=role,
                    marker=dict(color=ROLE_COLORS.get(role, "#8c564b"), line=dict(width=0)),
                    customdata=[_slice_hover(r) for r, m in zip(records, mask, strict=True) if m],
                    hovertemplate="%{customdata}<extra></extra>")
    if "buffer_id" in shown.columns:
        meta["buffer_ids"] = [int(b) for b in shown["buffer_id"]]
    labels = [buffer_label(r) for r in records]
    meta.update(shown=n, bytes=[int(b) for b in shown["bytes"]], labels=labels)
    show_ticks = n <= 40
    ticks = [wrapped_label(t, LABEL_LINE) for t in labels]
    tick_text = ["<br>".join(map(plotly_text, t)) for t in ticks]
    fig.update_layout(barmode="overlay", bargap=0.15,
                      yaxis=dict(tickmode="array", tickvals=list(position), ticktext=tick_text,
                                 showticklabels=show_ticks, automargin=True,
                                 title=None if show_ticks else f"{n} largest buffers (hover for each)"),
                      xaxis_title="step (instruction in schedule order)")
    if peak_step is not None:  # the label on the side of the line with room
        ends = starts + lengths
        mark_peak(fig, int(peak_step), f"peak step {int(peak_step)}",
                  left=bool(n) and peak_step > (starts.min() + ends.max()) / 2)
    heading = title or "Buffer lifetimes (largest buffers, coloured by role)"
    if meta["more"]:  # a line of its own: a narrow chart wraps the title at its spaces
        heading += f"<br>+{meta['more']:,} more buffers ({fmt_bytes(meta['more_bytes'])}) not drawn"
    widest = max((len(line) for t in ticks for line in t), default=0) if show_ticks else 0
    # rows are evenly spaced, so each is as tall as the most-wrapped label (else neighbours' labels overlap)
    lines = max(map(len, ticks), default=1) if show_ticks else 1
    height = 160 + n * (4 + 13 * lines) if show_ticks else min(900, 160 + 14 * n)  # at most 40 labelled rows
    chart_layout(fig, heading, int(height), plot_left=int(24 + 6.5 * widest))
    fig.update_layout(meta={"xlakit_lifetime": meta})
    return fig
