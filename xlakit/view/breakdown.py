"""The memory breakdown view: compiled memory per program as a frame, bar heights, figures and HTML.

Pure functions of :class:`~xlakit.memory.CompiledMemory` objects (pandas and plotly imported where used),
shared by :class:`xlakit.widgets.MemoryBreakdown`, its snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Column, Table
from xlakit._text.theme import BASE_LAYOUT, LEGEND, PLOTLY_TEMPLATE, byte_axis, legend_space  # noqa: F401 - re-exported
from xlakit._text.untrusted import html_text, html_wrappable
from xlakit.view.html import frame_records, missing, note, snapshot

__all__ = ["BREAKDOWN_PARTS", "SORT_KEYS", "UNITS", "breakdown_frame", "breakdown_values", "unique_labels",
           "breakdown_figure", "liveness_figure", "breakdown_html", "details_html", "PART_COLORS", "BASE_LAYOUT",
           "LEGEND", "apply_byte_axis"]

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
PART_COLORS = {
    "arguments": "#1f77b4", "outputs": "#ff7f0e", "temporaries": "#2ca02c", "code": "#9467bd",
    "host arguments": "#aec7e8", "host outputs": "#ffbb78", "host temporaries": "#98df8a", "host code": "#c5b0d5",
    "aliases (reused)": "#7f7f7f", "host aliases (reused)": "#c7c7c7",
}


def unique_labels(names: Iterable[str | None], keys: Iterable[str | None] | None = None,
                  signatures: Iterable[Sequence[Any] | None] | None = None) -> list[str]:
    """Readable, unique labels. A name held by one program is its label; a repeated name gets the argument
    shapes that tell its programs apart when ``signatures`` (the recorded signature of each, a list of leaf
    dicts, see :mod:`xlakit.view.signatures`) has them: ``jit_mm(f32[512,512])`` and ``jit_mm(f32[256,128])``;
    only the leaves that differ, ``jit_step(…, f32[8,784])``, with ``; 155 donated`` for a donated variant
    (:func:`~xlakit.view.signatures.differing_leaves`); else ``[first 8 hex digits of its key's hash]`` (or
    ``#n``)."""
    from xlakit.view.signatures import differing_leaves, leaf_texts

    labels: list[str] = [n or "?" for n in names]
    key_list: list[str | None] = list(keys) if keys is not None else [None] * len(labels)
    sig_list = list(signatures) if signatures is not None else [None] * len(labels)
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(labels):
        groups.setdefault(n, []).append(i)
    shapes: dict[int, str] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        leaves = [leaf_texts(sig_list[i]) if isinstance(sig_list[i], list) else None for i in members]
        texts = differing_leaves(leaves)  # short: a chart's tick labels (55 characters squashed its plot to 25 px)
        if all(t is not None for t in texts) and len(set(texts)) == len(texts):
            shapes.update({i: str(t) for i, t in zip(members, texts, strict=True)})
    out: list[str] = []
    seen: set[str] = set()
    for i, (n, k) in enumerate(zip(labels, key_list, strict=True)):
        if len(groups[n]) == 1:
            label = n
        elif i in shapes:
            label = f"{n}({shapes[i]})"
        else:
            label = f"{n} [{k.rsplit('-', 1)[-1][:8]}]" if k else f"{n} #{i}"
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
      reported, 0 when none) and ``net_bytes`` (total minus aliases); ``attrs["platforms"]`` holds each
      program's platform (``"cpu"``, ``"gpu"``, ... or None).

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
        frame = frame.sort_index(kind="stable")
    else:
        frame = frame.sort_values(_SORT_COLUMN[sort], ascending=False, na_position="last", kind="stable")
    frame.attrs["platforms"] = {label: getattr(m, "platform", None) for label, m in memories.items()}
    return frame


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
        out: list[float | None] = []
        for v, total in zip(values, totals, strict=True):
            if missing(v):
                out.append(None)
            elif unit == "bytes":
                out.append(float(sign * int(v)))
            else:
                out.append((sign * 100.0 * int(v) / total if int(v) else 0.0) if total else None)
        return out

    values = {label: scale(frame[field].tolist(), sign) for field, label, sign in BREAKDOWN_PARTS}
    values["peak"] = scale(frame["peak_bytes"].tolist())
    values["footprint"] = scale(frame["footprint_bytes"].tolist())
    return values


def apply_byte_axis(fig: Any, values: Sequence[float | None], axis: str = "yaxis") -> None:
    """Binary-unit ticks (0, 1 MiB, 2 MiB...) on ``axis`` of ``fig`` spanning ``values``, over an explicit
    range from 0 (:func:`xlakit._text.theme.byte_axis`)."""
    fig.update_layout({axis: byte_axis(values)})


def _bytes_text(values: Sequence[Any]) -> list[str]:
    return [fmt_bytes(None if missing(v) else int(v)) for v in values]


def breakdown_figure(frame, unit: str = "bytes"):
    """Stacked bars per program (``barmode="relative"``: aliases below zero) and a peak marker per program.

    On CPU, XLA's peak leaves out temporaries, so the dash says so (and that it is not ``memory.peak``'s) and
    a second dash marks the footprint (what one run reserves). Axes and tooltips in binary units."""
    import plotly.graph_objects as go

    values = breakdown_values(frame, unit)
    programs = [str(p) for p in frame.index]
    fig = go.Figure()
    pct = unit == "percent"
    for field, label, _sign in BREAKDOWN_PARTS:
        ys = values[label]
        if not any(ys):  # none reported, or 0 B in every program: no bar, and no legend entry for it
            continue
        text = _bytes_text(frame[field].tolist())
        extra = " (%{y:.1f}% of the total)" if pct else ""
        fig.add_bar(x=programs, y=ys, name=label, marker_color=PART_COLORS[label], customdata=text,
                    hovertemplate=f"%{{x}}<br>{label}: %{{customdata}}{extra}<extra></extra>")
    platforms = frame.attrs.get("platforms", {})
    on_cpu = any(platforms.get(p) == "cpu" for p in programs)
    # XLA:CPU's peak_memory_in_bytes leaves temporaries out: not what memory.peak() finds, and named so
    peak_name = "XLA:CPU's peak_memory_in_bytes (no temporaries: not memory.peak)" if on_cpu else "peak (XLA)"
    if any(v is not None for v in values["peak"]):
        fig.add_scatter(x=programs, y=values["peak"], mode="markers", name=peak_name,
                        marker=dict(symbol="line-ew-open", size=28, color="#444", line=dict(width=3)),
                        customdata=_bytes_text(frame["peak_bytes"].tolist()),
                        hovertemplate=f"%{{x}}<br>{peak_name}: %{{customdata}}<extra></extra>")
    if on_cpu and any(v is not None for v in values["footprint"]):
        fig.add_scatter(x=programs, y=values["footprint"], mode="markers", name="footprint (one run reserves)",
                        marker=dict(symbol="line-ew-open", size=28, color="#d62728", line=dict(width=2)),
                        customdata=_bytes_text(frame["footprint_bytes"].tolist()),
                        hovertemplate="%{x}<br>footprint: %{customdata}<extra></extra>")
    # Long program names turn into tick labels rotated under the bars, and plotly takes their room from the plot
    # (12 programs of 40-55 characters left a 25 px plot at 800 px): the figure grows by about what they take.
    longest = max((len(p) for p in programs), default=0)
    labels_px = min(260, 6 * max(0, longest - 15)) if len(programs) > 2 else 0
    fig.update_layout(**{**BASE_LAYOUT, "height": BASE_LAYOUT["height"] + legend_space(fig) + labels_px},
                      barmode="relative",
                      title={"text": "Compiled memory per program"}, legend=LEGEND,
                      yaxis_title="% of the program's total" if pct else "bytes")
    if not pct and len(frame):
        extents: list[float | None] = [float(t) for t in frame["total_bytes"]]
        extents += [-(float(t) - float(n)) for t, n in zip(frame["total_bytes"], frame["net_bytes"], strict=True)]
        extents += [v for v in values["peak"] + values["footprint"] if v is not None]
        apply_byte_axis(fig, extents)
    return fig


def liveness_figure(frame, name: str, max_points: int = 1000, *, peak_step: int | None = None,
                    caption: str | None = None):
    """Live bytes over program order (``BufferAssignment.live_bytes_by_step()``), the peak step marked: stacked
    by kind when the frame has kind columns (reconstructed liveness), else one line per heap-simulator trace.
    See :func:`xlakit.view.memory_charts.liveness_chart` (down-sampling, the marker's caption)."""
    from xlakit.view.memory_charts import liveness_chart

    return liveness_chart(frame, peak_step=peak_step, caption=caption, max_points=max_points,
                          title=f"Live bytes over program order: {name}")


# Source lines, layers (the call on the line, whole) and pytree paths wrap at spaces and separators, and XLA's
# instruction name is the role's hover text, so the bytes stay in view in a narrow cell (the layer column alone
# ran ~700 px wide, the instruction ~240 px).
_PEAK_BUFFER_COLUMNS = (Column("role", "role", title_key="xla_instruction"), Column("source", "source", nowrap=False),
                        Column("layer", "layer", nowrap=False), Column("parameter", "parameter", nowrap=False),
                        Column("dtype", "dtype"), Column("shape", "shape"),
                        Column("bytes", "bytes at the peak", "bytes"), Column("buffer_bytes", "own size", "bytes"))


def _peak_buffers_table(peak_buffers, top: int) -> str:
    """The ``top`` largest buffers of ``Peak.buffers`` in the user's terms (role, source, layer, parameter,
    shape, bytes charged at the peak); hovering a role shows the XLA instruction."""
    from xlakit.view.memory_charts import shape_text

    largest = peak_buffers.sort_values("bytes", ascending=False, kind="stable").head(top)
    rows = frame_records(largest)
    for r in rows:
        r["shape"] = None if r.get("shape") is None else shape_text(r["shape"])
        r["xla_instruction"] = f"XLA instruction {r['instruction']}" if r.get("instruction") else None
        for key in ("source", "layer"):
            if r.get(key) in ("unknown", "", "argument"):  # "argument": a parameter's layer, said by its source
                r[key] = None
    cols = [c for c in _PEAK_BUFFER_COLUMNS if c.key in largest.columns]
    shared = "buffer_bytes" in largest.columns and not (largest["buffer_bytes"] == largest["bytes"]).all()
    if not shared:
        cols = [c for c in cols if c.key != "buffer_bytes"]  # nothing shared: the same number twice
    return (Table(cols, rows, css_class="xlakit-largest xlakit-peak-buffers", drop_empty=True).to_html()
            + note("bytes at the peak: what each buffer adds to the peak (xlakit.memory.peak)"
                   + (". Buffers that share one piece of memory (the same allocation and offset: an update in place, "
                      "a value XLA put in a dead one's bytes) count it once, charged to one of them; the others read "
                      "0 B or less here, their own size beside it" if shared else "")
                   + ". Hover a role for XLA's instruction"))


def details_html(selected: str | None, largest, note_text: str | None = None, *, peak_buffers=None,
                 top: int = 10) -> str:
    """The largest-buffers table of the selected program (or the note saying why there is none).

    With ``peak_buffers`` (``xlakit.memory.peak(...).buffers``) the table is its ``top`` largest buffers in the
    user's terms: role, source, layer, parameter, shape and the bytes each is charged at the peak, the XLA
    instruction last. Without it (no peak attribution), XLA's own list ``largest``
    (:meth:`xlakit.memory.BufferAssignment.largest`)."""
    if selected is None:
        return note("Select a program to see its largest buffers and live bytes over program order.")
    parts = [f"<h5 style='margin:6px 0'>Largest buffers at the peak: {html_text(selected)}</h5>"]
    if note_text:
        parts.append(note(note_text))
    if peak_buffers is not None and not peak_buffers.empty:
        parts.append(_peak_buffers_table(peak_buffers, top))
    elif largest is not None and not largest.empty:
        rows = frame_records(largest)
        for r in rows:
            r["shape"] = "×".join(str(d) for d in (r.get("shape") or ())) if r.get("shape") is not None else None
        cols = [Column("instruction", "instruction"), Column("opcode", "opcode"), Column("dtype", "dtype"),
                Column("shape", "shape"), Column("bytes", "bytes", "bytes"), Column("kind", "allocation kind"),
                Column("allocation", "allocation")]
        parts.append(Table(cols, rows, css_class="xlakit-largest").to_html())
        if largest.attrs.get("source"):
            parts.append(note(f"source: {largest.attrs['source']}"))
    return "".join(parts)


def breakdown_html(frame, unit: str = "bytes", *, include_plotlyjs: bool | str = "once", selected: str | None = None,
                   largest=None, liveness=None, detail_note: str | None = None, notes: Sequence[str] = (),
                   detail_figures: Sequence[Any] = (), peak_text: str | None = None, peak_buffers=None,
                   top: int = 10) -> str:
    """Snapshot of a memory breakdown: the bar chart, one table row per program, and the selection's detail
    (``detail_figures`` when given — the liveness, lifetime and treemap figures the widget shows — else the
    liveness figure of ``liveness``; ``peak_text`` a line above them; the largest buffers from ``peak_buffers``,
    ``Peak.buffers``, when given, else from ``largest``: see :func:`details_html`)."""
    from xlakit.view.plotly_html import figure_html

    if frame.empty:
        return snapshot("Memory breakdown", note("No programs."))
    fig = breakdown_figure(frame, unit)
    used = [Column(f, label, "bytes") for f, label, _ in BREAKDOWN_PARTS if frame[f].notna().any()]
    cols = [Column("program", "program"), *used, Column("peak_bytes", "peak (XLA)", "bytes"),
            Column("footprint_bytes", "footprint", "bytes"), Column("total_bytes", "total", "bytes")]
    table = Table(cols, frame_records(frame), css_class="xlakit-breakdown").to_html()
    body = [figure_html(fig, include_plotlyjs), table]
    body += [note(n) for n in notes]
    if selected is not None:
        if peak_text:
            body.append(f"<div class='xlakit-peak-summary'>{html_wrappable(peak_text)}</div>")
        body.append(details_html(selected, largest, detail_note, peak_buffers=peak_buffers, top=top))
        if detail_figures:
            body += [figure_html(f, False) for f in detail_figures]
        elif liveness is not None and not liveness.empty:
            body.append(figure_html(liveness_figure(liveness, selected), False))
    return snapshot(f"Memory breakdown ({len(frame)} programs, {unit})", "".join(body))
