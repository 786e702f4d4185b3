"""The live-arrays view: live array shards grouped by device, memory kind and dtype[shape], as a table and a
treemap; "created at" names the notebook cell (``In [7], line 3``) rather than IPython's temporary file.

Pure functions of the frame :func:`xlakit.memory.live_arrays` returns; shared by
:class:`xlakit.widgets.LiveArrays`, its snapshot and :mod:`xlakit.report`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from xlakit._text.format import fmt_bytes, fmt_count
from xlakit._text.table import Column, Table
from xlakit.view.html import frame_records, note, snapshot

__all__ = ["live_table", "treemap_nodes", "treemap_figure", "live_html", "cell_location", "LIVE_COLUMNS"]

LIVE_COLUMNS = (Column("device", "device"), Column("memory_kind", "memory kind"), Column("array", "array"),
                Column("arrays", "count", "count"), Column("bytes", "bytes", "bytes"),
                Column("created_at", "created at (first array)"))
_LOCATION = re.compile(r"^(?P<path>.*?):(?P<line>\d+)(?P<rest>.*)$")


def cell_location(where: Any) -> Any:
    """``"/tmp/ipykernel_1234/5678.py:7"`` -> ``"In [3], line 7"`` when that file is a cell this IPython
    session ran (IPython's own map from cell files to execution counts); anything else unchanged."""
    if not isinstance(where, str):
        return where
    m = _LOCATION.match(where)
    if m is None:
        return where
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return where
    shell = get_ipython()
    mapping = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if not isinstance(mapping, dict):
        return where
    count = mapping.get(m.group("path"))
    if count is None:
        return where
    return f"In [{count}], line {m.group('line')}{m.group('rest')}"


def _shape_label(dtype: Any, shape: Any) -> str:
    dims = ",".join(str(d) for d in (shape or ()))
    return f"{dtype}[{dims}]"


def live_table(frame, top: int | None = 50):
    """Live array shards grouped by device, memory kind, dtype and shape: arrays, bytes, where the first was
    created (a notebook cell as ``In [n], line l``); largest first, at most ``top`` rows (None: all)."""
    import pandas as pd

    columns = ["device", "memory_kind", "array", "arrays", "bytes", "created_at"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    f = frame.assign(array_label=[_shape_label(d, s) for d, s in zip(frame["dtype"], frame["shape"], strict=True)],
                     memory_kind=frame["memory_kind"].fillna("device"))
    out = (f.groupby(["device", "memory_kind", "array_label"], dropna=False, sort=False)
           .agg(arrays=("array", "nunique"), bytes=("bytes", "sum"), created_at=("created_at", "first"))
           .reset_index().rename(columns={"array_label": "array"}))
    out["created_at"] = [cell_location(w) for w in out["created_at"]]
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


def treemap_figure(nodes: Mapping[str, list[Any]]):
    """Treemap device -> memory kind -> dtype[shape], area = bytes (labels in binary units)."""
    import plotly.graph_objects as go

    from xlakit._text.theme import BASE_LAYOUT, title_layout

    fig = go.Figure(go.Treemap(ids=nodes["ids"], labels=nodes["labels"], parents=nodes["parents"],
                               values=nodes["values"], text=nodes["text"], branchvalues="total", name="live arrays",
                               textinfo="label+text", hovertemplate="%{label}<br>%{text}<extra></extra>"))
    fig.update_layout(**{**BASE_LAYOUT, **title_layout("Live arrays: device → memory kind → array",
                                                       dict(l=5, r=5, t=40, b=5))})
    return fig


def live_html(table, nodes: Mapping[str, list[Any]], *, include_plotlyjs: bool | str = "once",
              total_bytes: int | None = None, arrays: int | None = None, title: str = "Live arrays") -> str:
    """Snapshot of the live arrays view: treemap and the grouped table."""
    from xlakit.view.plotly_html import figure_html

    if table.empty:
        return snapshot(title, note("No live JAX arrays."))
    body = Table(LIVE_COLUMNS, frame_records(table), css_class="xlakit-live").to_html()
    summary = note(f"{fmt_count(arrays)} array(s), {fmt_bytes(total_bytes)} ({total_bytes:,} bytes) in total"
                   if total_bytes is not None else "")
    return snapshot(title, figure_html(treemap_figure(nodes), include_plotlyjs) + summary + body)
