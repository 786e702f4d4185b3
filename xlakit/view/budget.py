"""Pictures of measured memory and of a weight budget: measurements of one run side by side (naive, probes, the
compiler's figure), and a device's arena as one bar — each model's weights, the pool left, the largest scratch,
the margin.

Pure functions (plotly imported where used) of plain numbers and a :class:`xlakit.memory.Budget`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlakit._text.format import byte_ticks, fmt_bytes
from xlakit._text.theme import byte_axis
from xlakit.view.memory_charts import chart_layout

__all__ = ["MEASUREMENT_COLORS", "measurements_figure", "arena_segments", "arena_figure"]

#: Colour per kind of measurement in :func:`measurements_figure`.
MEASUREMENT_COLORS = {"naive": "#d62728", "probe": "#2ca02c", "compiler": "#1f77b4", "other": "#7f7f7f"}
_WEIGHT_COLORS = ("#1f77b4", "#aec7e8", "#9467bd", "#c5b0d5", "#17becf", "#9edae5", "#8c564b", "#c49c94")


def measurements_figure(rows: Sequence[Mapping[str, Any]],
                        title: str = "One run's memory: each measurement beside the compiler's figure"):
    """Horizontal bars, one per measurement, each labelled with its bytes.

    Args:
      rows: dicts with ``label`` (str), ``bytes`` (int) and ``kind`` (``"naive"``, ``"probe"``, ``"compiler"``
        or ``"other"``: the bar's colour and legend group).

    Raises:
      ValueError: a row without ``label`` or ``bytes``, or a negative byte count.
    """
    import plotly.graph_objects as go

    for r in rows:
        if "label" not in r or "bytes" not in r:
            raise ValueError(f"each measurement needs 'label' and 'bytes', got {dict(r)}")
        if r["bytes"] is not None and r["bytes"] < 0:
            raise ValueError(f"{r['label']}: bytes must be >= 0, got {r['bytes']}")
    fig = go.Figure()
    labels = [str(r["label"]) for r in rows][::-1]  # the first row on top
    for kind in MEASUREMENT_COLORS:
        chosen = [r for r in rows[::-1] if r.get("kind", "other") == kind]
        if not chosen:
            continue
        fig.add_bar(y=[str(r["label"]) for r in chosen], x=[r["bytes"] for r in chosen], orientation="h", name=kind,
                    marker_color=MEASUREMENT_COLORS[kind], text=[fmt_bytes(r["bytes"]) for r in chosen],
                    textposition="auto", hovertemplate="%{y}: %{text}<extra></extra>")
    chart_layout(fig, title, 120 + 48 * max(1, len(rows)))
    fig.update_layout(yaxis=dict(categoryorder="array", categoryarray=labels), xaxis_title="bytes")
    fig.update_layout(xaxis=byte_axis([float(r["bytes"] or 0) for r in rows]))
    return fig


def arena_segments(budget: Any, weights: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The arena of ``budget`` cut into consecutive segments, left to right: each model's weights (``weights``:
    name -> bytes; default one segment of ``budget.pinned_bytes``), the pool left for more weights, the gap
    between the pool and the scratch reserve when ``fraction`` caps the pool, the largest scratch, and the
    margin (``wiggle × arena``). Each segment: ``name``, ``kind`` (weights / pool left / unassigned / scratch /
    margin / over), ``start`` and ``bytes``. Weights beyond the pool show as ``over`` (overcommitted).
    """
    weights = dict(weights) if weights is not None else ({"weights": budget.pinned_bytes} if budget.pinned_bytes
                                                         else {})
    arena, pool = int(budget.arena_bytes), max(0, int(budget.pool_bytes))
    margin = int(round(budget.wiggle * arena))
    out: list[dict[str, Any]] = []
    x = 0
    for name, n in weights.items():
        out.append({"name": name, "kind": "weights", "start": x, "bytes": int(n)})
        x += int(n)
    if x > pool:
        out.append({"name": "over the pool", "kind": "over", "start": pool, "bytes": x - pool})
    else:
        out.append({"name": "pool left for weights", "kind": "pool left", "start": x, "bytes": pool - x})
        x = pool
    reserve_start = arena - margin - int(budget.scratch_bytes)
    if reserve_start > x:
        out.append({"name": "unassigned (fraction caps the pool)", "kind": "unassigned", "start": x,
                    "bytes": reserve_start - x})
    out.append({"name": "largest scratch", "kind": "scratch", "start": max(reserve_start, 0),
                "bytes": int(budget.scratch_bytes)})
    out.append({"name": f"margin ({budget.wiggle:g} × arena)", "kind": "margin", "start": arena - margin,
                "bytes": margin})
    return [s for s in out if s["bytes"] > 0]


_SEGMENT_COLORS = {"pool left": "#98df8a", "unassigned": "#eeeeee", "scratch": "#ff7f0e", "margin": "#c7c7c7",
                   "over": "#d62728"}


def arena_figure(budget: Any, weights: Mapping[str, int] | None = None, title: str | None = None):
    """The arena as one horizontal bar of :func:`arena_segments`, a dashed line where the pool ends, and the
    arena's end marked; hover gives each segment's bytes."""
    import plotly.graph_objects as go

    segments = arena_segments(budget, weights)
    fig = go.Figure()
    w = 0
    for s in segments:
        color = _WEIGHT_COLORS[w % len(_WEIGHT_COLORS)] if s["kind"] == "weights" else _SEGMENT_COLORS[s["kind"]]
        w += s["kind"] == "weights"
        fig.add_bar(y=["arena"], x=[s["bytes"]], base=[s["start"]], orientation="h", name=s["name"],
                    marker=dict(color=color, line=dict(color="#444", width=0.5)),
                    customdata=[f"{s['name']}: {fmt_bytes(s['bytes'])} ({s['bytes']:,} bytes)"],
                    hovertemplate="%{customdata}<extra></extra>")
    fig.add_vline(x=int(budget.pool_bytes), line=dict(color="#2ca02c", dash="dash", width=2))
    fig.add_annotation(x=int(budget.pool_bytes), y=1.0, yref="paper", yanchor="top", showarrow=False,
                       text=f"pool {fmt_bytes(budget.pool_bytes)} (limited by {budget.limited_by})",
                       font=dict(color="#2ca02c", size=11), bgcolor="rgba(255,255,255,0.8)")
    state = "OVERCOMMITTED" if budget.overcommitted else f"{fmt_bytes(budget.available_bytes)} free in the pool"
    chart_layout(fig, title or f"Weight budget: arena {fmt_bytes(budget.arena_bytes)}, {state}", 260,
                 barmode="overlay")
    top = max([int(budget.arena_bytes), *[s["start"] + s["bytes"] for s in segments]])
    vals, text = byte_ticks([0.0, float(top)])
    fig.update_layout(xaxis=dict(tickmode="array", tickvals=vals, ticktext=text, range=[0, top * 1.01]),
                      yaxis=dict(showticklabels=False), meta={"xlakit_arena": segments})
    return fig
