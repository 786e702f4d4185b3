"""Pictures of what holds a compiled program's peak: a treemap of the buffers live there by scope and source
(every tile coloured by its role, the main role of a group; source tiles named by source line and layer),
a one-line caption naming the largest group, and the snapshot of a peak (liveness, lifetimes, treemap, tables).

Pure functions of a peak-buffers frame (one row per logical buffer live at the peak: ``bytes``, ``role``,
``scope``, ``source``, ``shape``, ``dtype``, ``instruction``, optionally ``parameter``), as
``xlakit.memory.peak(...).buffers`` gives it. A missing scope or source is shown in the same words as ``Peak.by``
and the tables ("(no name stack: made by XLA)", "(no line of your code: made by XLA or inside a library)"), never
guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlakit._text.format import fmt_bytes
from xlakit._text.table import Column, Table
from xlakit._text.untrusted import html_wrappable, plotly_text
from xlakit.memory.peak import UNKNOWN_LABELS
from xlakit.view.html import frame_records, note, snapshot
from xlakit.view.memory_charts import ROLE_COLORS, buffer_hover, buffer_label, shape_text

__all__ = ["MISSING_LABEL", "group_bytes", "peak_caption", "peak_treemap_nodes", "peak_treemap_figure",
           "peak_tables_html", "peak_html", "variants_figure"]

#: What a buffer without a value in a grouping column is filed under: the same words as ``Peak.by`` and the
#: tables (:data:`xlakit.memory.peak.UNKNOWN_LABELS`), so a treemap tile and a table row of the same bytes agree.
MISSING_LABEL = {"scope": UNKNOWN_LABELS["scope"], "source": UNKNOWN_LABELS["source"], "role": UNKNOWN_LABELS["role"],
                 "parameter": UNKNOWN_LABELS["parameter"], "instruction": UNKNOWN_LABELS["instruction"]}
_ROOT = "peak"


def _labels(buffers, column: str) -> list[str]:
    missing = MISSING_LABEL.get(column, "(none)")
    if column not in buffers.columns:
        return [missing] * len(buffers)
    return [missing if v is None or (isinstance(v, float) and v != v) or str(v) in ("", "unknown", "<NA>", "None")
            else str(v) for v in buffers[column]]


def group_bytes(buffers, by: str):
    """Bytes per value of column ``by`` (a ``pandas.Series``, largest first; missing values grouped under
    :data:`MISSING_LABEL`)."""
    import pandas as pd

    if buffers is None or buffers.empty:
        return pd.Series(dtype="int64", name="bytes")
    keys = pd.Series(_labels(buffers, by), index=buffers.index, name=by)
    return buffers["bytes"].groupby(keys, sort=False).sum().sort_values(ascending=False, kind="stable")


def peak_caption(buffers, *, groups: Sequence[str] = ("source", "scope")) -> str:
    """The largest group of each column in ``groups`` with its bytes and main role, e.g.
    ``"top source model.py:42 (41.0 MiB, mostly residual); top scope transpose(jvp(MLP)) (44.0 MiB)"``;
    ``""`` for no buffers. Groups that are all missing say so ("source unknown")."""
    from xlakit.memory.peak import UNKNOWN_LABELS, top_groups

    if buffers is None or buffers.empty:
        return ""
    parts = []
    for by in groups:
        # The groups the peak's own summary names (arguments folded, unknowns labelled): the same numbers.
        tops = top_groups(buffers, by, 2) if by in buffers.columns else []
        if not tops or tops[0]["group"] == UNKNOWN_LABELS.get(by):
            parts.append(f"{by} {'unknown' if len(tops) <= 1 else 'mostly unknown'}")
            continue
        top = tops[0]
        role = next(iter(top["roles"]), None)
        main = f", mostly {role}" if role and by != "role" else ""
        said = f"{top['group']} ({fmt_bytes(top['bytes'])}{main})"
        if parts and parts[-1].endswith(f" {said}") and parts[-1].startswith("top "):
            # the same group tops both (the folded "arguments"): said once, "top source and scope arguments"
            parts[-1] = parts[-1][:-len(said) - 1] + f" and {by} {said}"
            continue
        parts.append(f"top {by} {said}")
    return "; ".join(parts)


def _role_color(role: str) -> str:
    return ROLE_COLORS.get(role, "#8c564b")


def _fold_small_groups(level, parent, nbytes, max_groups: int, column: str):
    """``level``'s labels with every group outside the ``max_groups`` largest of the whole level (by bytes)
    relabelled ``"+k smaller <column>s"``, one such group per parent, so a level draws at most about
    ``max_groups`` + (parents) tiles however many scopes and lines the program has."""
    import pandas as pd

    sums = nbytes.groupby([parent, level], sort=False).sum()
    if len(sums) <= max_groups:
        return level
    small = sums.sort_values(ascending=False, kind="stable").index[max_groups:]
    is_small = pd.MultiIndex.from_arrays([parent, level]).isin(small)
    counts = pd.Series([p for p, _ in small]).value_counts()
    folded = parent.map(lambda p: f"+{int(counts.get(p, 0))} smaller {column}s")
    return level.where(~is_small, folded)


def peak_treemap_nodes(buffers, path: Sequence[str] = ("scope", "source"), *, max_leaves: int = 200,
                       max_groups: int = 60) -> dict[str, list[Any]]:
    """Treemap nodes root -> ``path[0]`` -> ``path[1]`` ... -> buffer, valued in bytes (``branchvalues="total"``:
    each node's value is the sum of its children, the root's is the sum of every buffer's bytes).

    Every tile is coloured by role (:data:`~xlakit.view.memory_charts.ROLE_COLORS`): a buffer by its own, a
    group by the role holding most of its bytes. A ``source`` tile is named by the source line and, when known
    and different, the layer (``"model.py:42 (MLP.__call__)<br>MLP.__call__ › self.l1(x)"``); a buffer by its
    parameter path or role and shape (the XLA instruction is in its tooltip).

    The ``max_leaves`` largest buffers are leaves of their own; the rest are summed into one
    "+k smaller buffers" leaf under their group, so the sums stay exact however many buffers there are. Of
    each level of groups the ``max_groups`` largest are tiles of their own and the rest are summed into one
    "+k smaller scopes" / "+k smaller sources" group under their parent: a treemap draws each visible tile with
    its text, and 600 source tiles took seconds in a browser.

    Returns:
      a dict of lists ``ids``, ``labels``, ``parents``, ``values`` (bytes), ``colors``, ``roles`` (the role each
      tile is coloured by; ``""`` for the root), ``text`` (readable bytes) and ``hover``.

    Raises:
      ValueError: ``max_leaves`` or ``max_groups`` < 1.
    """
    import pandas as pd

    if max_leaves < 1 or max_groups < 1:
        raise ValueError(f"max_leaves and max_groups must be >= 1, got {max_leaves} and {max_groups}")
    ids, labels, parents, values, colors, hover = [_ROOT], [_ROOT], [""], [0], ["#eeeeee"], [""]
    roles_of: list[str] = [""]
    if buffers is not None and not buffers.empty:
        frame = buffers.reset_index(drop=True)
        nbytes = frame["bytes"].astype("int64")
        values[0] = int(nbytes.sum())
        roles = _labels(frame, "role")
        role_series = pd.Series(roles, index=frame.index)
        layers = _labels(frame, "layer") if "layer" in frame.columns else None
        node = pd.Series(_ROOT, index=frame.index)
        for depth, col in enumerate(path):  # one level of groups at a time: ids are the path so far
            width = HEADER_LINE if depth == 0 else TILE_LINE  # the first level's tiles are headers of the rest
            level = _fold_small_groups(pd.Series(_labels(frame, col), index=frame.index), node, nbytes, max_groups,
                                       col)
            parent, node = node, node + "/" + level
            sums = nbytes.groupby(node, sort=False).sum().to_dict()
            by_role = nbytes.groupby([node, role_series], sort=False).sum()
            main_role = {nid: str(r) for (nid, r), _ in by_role.sort_values(ascending=False, kind="stable")
                         .groupby(level=0, sort=False).head(1).items()}
            main_layer: dict[str, str] = {}
            if col == "source" and layers is not None:
                by_layer = nbytes.groupby([node, pd.Series(layers, index=frame.index)], sort=False).sum()
                main_layer = {nid: str(lay) for (nid, lay), _ in by_layer.sort_values(ascending=False, kind="stable")
                              .groupby(level=0, sort=False).head(1).items()}
            first = ~node.duplicated()
            for nid, lab, par in zip(node[first].tolist(), level[first].tolist(), parent[first].tolist(), strict=True):
                role = main_role.get(nid, "unknown")
                layer = main_layer.get(nid, "")
                shown = _tile_text(lab, width)
                if layer and layer not in ("unknown", "argument", MISSING_LABEL["source"]) and layer not in lab:
                    shown = _tile_text(layer, width) if lab == MISSING_LABEL["source"] else \
                        f"{shown}<br>{_tile_text(layer, width)}"
                ids.append(nid)
                labels.append(shown)
                parents.append(par)
                values.append(int(sums[nid]))
                colors.append(_role_color(role))
                roles_of.append(role)
                hover.append(f"{col}: {plotly_text(lab)}" + (f"<br>layer: {plotly_text(layer)}" if layer else "")
                             + f"<br>{fmt_bytes(int(sums[nid]))}, mostly {plotly_text(role)}")
        order = nbytes.to_numpy().argsort(kind="stable")[::-1]
        order = order[nbytes.to_numpy()[order] > 0]  # an alias charged nothing at the peak: no tile of its own
        big = order[:max_leaves]
        records = frame.iloc[big].to_dict("records")
        node_of = node.tolist()
        for i, rec in zip(big.tolist(), records, strict=True):
            ids.append(f"{node_of[i]}/#{i}")
            what = buffer_label(rec, size=False) if "source" not in path else \
                (rec.get("parameter") if roles[i] in ("parameter", "optimizer state", "aliased")
                 and rec.get("parameter") else roles[i])
            labels.append(_tile_text(f"{what} {shape_text(rec.get('shape'))}"))
            parents.append(node_of[i])
            values.append(int(rec["bytes"]))
            colors.append(_role_color(roles[i]))
            roles_of.append(roles[i])
            hover.append(f"{buffer_hover(rec)}")
        rest = order[max_leaves:]
        if rest.size:
            grouped = nbytes.iloc[rest].groupby(node.iloc[rest], sort=False).agg(["sum", "count"])
            rest_roles = nbytes.iloc[rest].groupby([node.iloc[rest], role_series.iloc[rest]], sort=False).sum()
            rest_main = {nid: str(r) for (nid, r), _ in rest_roles.sort_values(ascending=False, kind="stable")
                         .groupby(level=0, sort=False).head(1).items()}
            for par, (total, count) in grouped.iterrows():
                role = rest_main.get(par, "unknown")
                ids.append(f"{par}/+")
                labels.append(f"+{count} smaller buffers")
                parents.append(par)
                values.append(int(total))
                colors.append(_role_color(role))
                roles_of.append(role)
                hover.append(f"{count} buffers below the {max_leaves} largest<br>{fmt_bytes(int(total))}, "
                             f"mostly {plotly_text(role)}")
    text = [fmt_bytes(v) for v in values]
    labels[0] = f"{_ROOT}: {text[0]} live"  # the root's band above the tiles says what they add up to
    text[0] = ""  # (said once, in its label)
    return {"ids": ids, "labels": labels, "parents": parents, "values": values, "colors": colors, "roles": roles_of,
            "text": text, "hover": hover}


#: Characters per line of a tile's label: plotly shrinks a label to its tile's width, and a 130-character source
#: and scope on one line was drawn at about 6 px in a third of an 848 px chart (a JupyterLab trial, 2026-12-06).
TILE_LINE = 36
#: The same for a header (a first-level tile, drawn above its children in a band as tall as its lines need,
#: :func:`peak_treemap_figure`): fewer, longer lines keep that band short.
HEADER_LINE = 56


def _tile_text(label: str, width: int = TILE_LINE) -> str:
    """``label`` wrapped at spaces into lines of at most ``width`` characters, escaped for plotly."""
    from xlakit._text.format import wrapped_label

    return "<br>".join(plotly_text(line) for line in wrapped_label(label, width))


def _key_lines(roles: Sequence[str], width: int) -> list[str]:
    """The colour key of ``roles`` (``■ role`` each, in its colour) wrapped into lines that fit ``width`` px."""
    lines: list[list[str]] = [[]]
    used = 0.0
    for r in roles:
        entry = 24 + 7.0 * len(r)  # the square, the gap and the name at 12 px
        if lines[-1] and used + entry > width - 20:
            lines.append([])
            used = 0.0
        lines[-1].append(f"<span style='color:{ROLE_COLORS[r]}'>■</span> {plotly_text(r)}")
        used += entry
    return ["  ".join(line) for line in lines if line]


def peak_treemap_figure(nodes: Mapping[str, list[Any]], title: str = "What holds the peak: scope → source → buffer"):
    """Treemap of :func:`peak_treemap_nodes`: area = bytes, every tile coloured by role, labels with readable
    bytes. A legend-like key under the tiles names the colours of the roles present, wrapped into as many lines
    as the narrowest chart (:data:`~xlakit._text.theme.NARROW_WIDTH`) needs, the bottom margin sized for them:
    above the tiles it ran into the title (and past the right edge) in a narrow window."""
    import plotly.graph_objects as go

    from xlakit._text.theme import NARROW_WIDTH
    from xlakit.view.memory_charts import chart_layout

    text = nodes.get("text") or [fmt_bytes(v) for v in nodes["values"]]
    # a header is fitted into the band above its children: as tall as its most-wrapped label (and its bytes) needs,
    # else plotly shrinks a three-line label to a few pixels
    header_lines = max((lab.count("<br>") + 2 for lab, par in zip(nodes["labels"], nodes["parents"], strict=True)
                        if par == _ROOT), default=1)
    fig = go.Figure(go.Treemap(ids=nodes["ids"], labels=nodes["labels"], parents=nodes["parents"],
                               values=nodes["values"], branchvalues="total",
                               marker=dict(colors=nodes["colors"], line=dict(width=1, color="#ffffff"),
                                           pad=dict(t=min(90, 8 + 15 * header_lines))),
                               text=text, customdata=nodes["hover"], textinfo="label+text", maxdepth=3,
                               textfont=dict(size=14), insidetextfont=dict(size=14),
                               hovertemplate="%{customdata}<extra></extra>", name="peak"))
    present = [r for r in ROLE_COLORS if r in set(nodes.get("roles") or ())]
    lines = _key_lines(present, NARROW_WIDTH)
    key_px = 18 * len(lines) + 8 if lines else 0
    chart_layout(fig, title, 440 + key_px, margin=dict(l=5, r=5, t=40, b=5 + key_px))
    if lines:
        fig.add_annotation(x=0, y=0, xref="paper", yref="paper", yanchor="top", xanchor="left", yshift=-4,
                           text="<br>".join(lines), align="left", showarrow=False, font=dict(size=12))
    return fig


def variants_figure(rows: Sequence[Mapping[str, Any]], title: str = "Peak by batch size, per variant"):
    """Peak bytes against batch size, one line per variant (e.g. remat and donation choice).

    Args:
      rows: dicts with ``batch`` (int), ``variant`` (str) and ``peak`` (bytes, or None for a failed variant —
        left out).

    Returns:
      a ``plotly.graph_objects.Figure`` with one ``lines+markers`` trace per variant, points in batch order, a
      legend naming every variant (one too), the y axis in bytes from 0 (:func:`~xlakit._text.theme.byte_axis`:
      labelled also for one point) and x ticks at the batch sizes swept (up to 12 of them).
    """
    import plotly.graph_objects as go

    from xlakit._text.theme import byte_axis
    from xlakit.view.memory_charts import chart_layout

    fig = go.Figure()
    variants: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        if r.get("peak") is not None:
            variants.setdefault(str(r["variant"]), []).append((int(r["batch"]), int(r["peak"])))
    for name, points in variants.items():
        points.sort()
        fig.add_scatter(x=[b for b, _ in points], y=[p for _, p in points], mode="lines+markers", name=name,
                        customdata=[fmt_bytes(p) for _, p in points],
                        hovertemplate=f"{plotly_text(name)}<br>batch %{{x}}: %{{customdata}}<extra></extra>")
    fig.update_layout(showlegend=bool(variants))  # the variant's name, also when there is only one
    chart_layout(fig, title, 320, xaxis_title="batch size", yaxis_title="peak")
    fig.update_layout(yaxis=byte_axis([p for pts in variants.values() for _, p in pts]))
    batches = sorted({b for pts in variants.values() for b, _ in pts})
    if 0 < len(batches) <= 12:  # the batch sizes swept, not plotly's 31.5, 32, 32.5 around a single one
        fig.update_xaxes(tickmode="array", tickvals=batches)
    return fig


# The user's terms first; XLA's instruction name is the role's hover text; long texts wrap (narrow cells).
_BUFFER_COLUMNS = (Column("source", "source", nowrap=False), Column("layer", "layer", nowrap=False),
                   Column("role", "role", title_key="xla_instruction"), Column("parameter", "parameter", nowrap=False),
                   Column("dtype", "dtype"), Column("shape", "shape"), Column("bytes", "bytes", "bytes"))


def peak_tables_html(buffers, *, top: int = 10) -> str:
    """Bytes by source and by role, and the ``top`` largest buffers live at the peak, as tables."""
    if buffers is None or buffers.empty:
        return note("No buffers live at the peak.")
    out = []
    for by in ("source", "role"):
        sizes = group_bytes(buffers, by)
        rows = [{by: k, "bytes": int(v)} for k, v in sizes.head(top).items()]
        out.append(Table([Column(by, by, nowrap=False), Column("bytes", "bytes", "bytes")], rows,
                         caption=f"Peak by {by}", css_class="xlakit-peak-by").to_html())
    largest = buffers.sort_values("bytes", ascending=False, kind="stable").head(top)
    rows = frame_records(largest)
    for r in rows:
        r["shape"] = shape_text(r.get("shape"))
        r["xla_instruction"] = f"XLA instruction {r['instruction']}" if r.get("instruction") else None
    cols = [c for c in _BUFFER_COLUMNS if c.key in largest.columns]
    out.append(Table(cols, rows, caption=f"Largest {len(rows)} buffers at the peak", drop_empty=True,
                     css_class="xlakit-peak-buffers").to_html())
    return "".join(out)


def peak_html(title: str, *, summary: str, figures: Sequence[Any], buffers, include_plotlyjs: bool | str = "once",
              notes: Sequence[str] = ()) -> str:
    """Snapshot of a peak: a summary line, the figures (plotly HTML, plotly.js at most once), the tables."""
    from xlakit.view.plotly_html import figure_html

    body = [f"<div class='xlakit-peak-summary'>{html_wrappable(summary)}</div>"] if summary else []
    for i, fig in enumerate(figures):  # plotly.js (when asked for) before the first chart only
        body.append(figure_html(fig, include_plotlyjs if i == 0 else False))
    body.append(peak_tables_html(buffers))
    body += [note(n) for n in notes]
    return snapshot(title, "".join(body))
