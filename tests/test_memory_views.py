"""The memory pictures as figures: the peak marker sits on the peak step, lifetime bars are the N largest buffers
with their roles and live ranges, a down-sampled liveness line still holds the peak value, and the peak treemap's
sums equal the bytes at the peak. Pure figure builders on small hand-made frames (no JAX, no browser)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from xlakit._text.format import fmt_bytes
from xlakit.view.memory_charts import keep_indices, lifetime_chart, liveness_chart, peak_of
from xlakit.view.peak import (
    MISSING_LABEL,
    group_bytes,
    peak_caption,
    peak_html,
    peak_treemap_figure,
    peak_treemap_nodes,
)

NO_SCOPE, NO_SOURCE = MISSING_LABEL["scope"], MISSING_LABEL["source"]  # the tables' and Peak.by's words

MiB = 2**20


def _buffers() -> pd.DataFrame:
    """Six buffers of a made-up train step: two parameters, a residual from model.py:42 that is the largest, an
    output, a temporary without scope or source, and one without a live range."""
    return pd.DataFrame({
        "buffer_id": [0, 1, 2, 3, 4, 5],
        "instruction": ["p0", "p1", "tanh.3", "add.9", "fusion.2", "copy.1"],
        "bytes": [4 * MiB, 1 * MiB, 8 * MiB, 2 * MiB, 3 * MiB, 5 * MiB],
        "shape": [(1024, 1024), (256, 1024), (8, 1024, 256), (512, 1024), (768, 1024), (1280, 1024)],
        "dtype": ["float32"] * 6,
        "role": ["parameter", "parameter", "residual", "output", "temporary", "temporary"],
        "scope": ["params", "params", "jvp(MLP)", "transpose(jvp(MLP))", None, "jvp(MLP)"],
        "source": ["train.py:10", "train.py:10", "model.py:42", "train.py:20", None, "model.py:50"],
        "parameter": ["params['l1']['kernel']", "params['l2']['kernel']", None, None, None, None],
        "start": [0, 0, 3, 9, 5, None], "end": [11, 11, 8, 11, 7, None], "stack": [None] * 6})


def test_keep_indices_keeps_the_peak_and_each_bins_extremes():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 1000, 10_001).astype(float)
    y[7_777] = 5_000.0           # the peak, alone in its bin
    y[123] = -50.0               # the lowest point
    idx = keep_indices(y, 500)
    assert len(idx) <= 503 and list(idx) == sorted(set(idx))
    assert 7_777 in idx and 123 in idx and 0 in idx and 10_000 in idx
    assert y[idx].max() == 5_000.0 and y[idx].min() == -50.0
    assert 42 in keep_indices(y, 500, keep=[42])  # a step asked for is kept whatever its value
    assert list(keep_indices(y[:100], 500)) == list(range(100))  # a series that fits is kept whole
    with pytest.raises(ValueError, match="max_points"):
        keep_indices(y, 3)


def test_liveness_chart_marks_the_peak_step_and_keeps_the_peak_when_downsampled():
    steps = 12_000
    live = (np.sin(np.arange(steps) / 300.0) + 2) * MiB
    live[9_001] = 10 * MiB                                        # one narrow spike: the peak
    frame = pd.DataFrame({"step": np.arange(steps), "live_bytes": live.astype(np.int64),
                          "instruction": [f"fusion.{i}" for i in range(steps)]})
    fig = liveness_chart(frame, caption="top source model.py:42 (8.0 MiB, mostly residual)", max_points=1000)
    meta = fig.layout.meta["xlakit_liveness"]
    assert meta["peak_step"] == 9_001 == peak_of(frame)[0] and meta["peak_bytes"] == 10 * MiB
    assert meta["points"] <= 1_003 and meta["steps"] == steps
    line = fig.data[0]
    # SVG at any size: filled WebGL areas drew in 27 s without a GPU (benchmarks/memory_charts.py)
    assert line.type == "scatter" and len(line.x) <= 1_003
    assert max(line.y) == 10 * MiB and 9_001 in list(line.x)      # the spike survives the down-sampling
    (marker,) = [s for s in fig.layout.shapes if s.type == "line"]
    assert marker.x0 == marker.x1 == 9_001
    (note,) = fig.layout.annotations
    # The caption sits above the plot's top-left corner in paper coordinates, wrapped for the narrowest chart,
    # the top margin grown by its lines; the axis is the data's own. Beside the line it ran past the plot's
    # edge (the line name cut off), and a data-anchored one widened plotly's autorange.
    lo, hi = fig.layout.xaxis.range
    assert (lo, hi) == (0, steps - 1) and (note.xref, note.x, note.xanchor) == ("paper", 0, "left")
    assert (note.yref, note.y, note.yanchor) == ("paper", 1, "bottom")
    lines = note.text.split("<br>")
    assert len(lines) >= 2 and max(map(len, lines)) <= 50, lines
    assert fig.layout.margin.t >= 56 + 15 * len(lines)
    assert f"peak {fmt_bytes(10 * MiB)} at step 9001 of {steps}" in " ".join(lines)
    assert "model.py:42" in note.text
    # A peak step given by the caller (Peak.step) is the one marked.
    fig = liveness_chart(frame.head(50), peak_step=20)
    assert fig.layout.shapes[0].x0 == 20 and fig.data[0].type == "scatter"


def test_liveness_chart_stacks_kinds_to_the_total():
    frame = pd.DataFrame({"step": [0, 1, 2, 3], "parameter": [4, 4, 4, 4], "output": [0, 0, 0, 2],
                          "temporary": [0, 6, 3, 0], "constant": [0, 0, 0, 0]})
    frame["live_bytes"] = frame[["parameter", "output", "temporary"]].sum(axis=1)
    fig = liveness_chart(frame)
    assert [t.name for t in fig.data] == ["parameter", "output", "temporary", "peak"]  # no constants: no trace
    assert list(fig.data[2].y) == [4, 10, 7, 6] == list(frame["live_bytes"])  # the top of the stack is the total
    assert fig.layout.meta["xlakit_liveness"]["peak_step"] == 1 and fig.layout.shapes[0].x0 == 1


def test_liveness_chart_stacks_an_attributions_roles_in_the_colours_of_the_other_pictures():
    """An attribution's liveness has one column per role: a residual is stacked as "residual" (not as XLA's
    "temporary" kind), coloured as its lifetime bar and treemap tile, and hovering the peak step lists the
    bytes of every role there."""
    from xlakit._text.theme import ROLE_COLORS

    frame = pd.DataFrame({"step": [0, 1, 2, 3], "instruction": ["p", "tanh.3", "fusion.7", "tuple"],
                          "parameter": [4, 4, 4, 4], "optimizer state": [2, 2, 2, 2], "residual": [0, 8, 8, 0],
                          "recomputed": [0, 0, 3, 0], "temporary": [0, 1, 0, 0], "output": [0, 0, 0, 4]})
    frame["live_bytes"] = frame[["parameter", "optimizer state", "residual", "recomputed", "temporary",
                                 "output"]].sum(axis=1)
    frame.attrs["stacked_by"] = "role"
    fig = liveness_chart(frame, caption="mostly residual")
    names = [t.name for t in fig.data]
    assert names == ["parameter", "optimizer state", "output", "residual", "recomputed", "temporary", "peak"]
    stacks = {t.name: t for t in fig.data[:-1]}
    assert list(fig.data[-2].y) == list(frame["live_bytes"]) == [6, 15, 17, 10]  # the stack's top is the total
    bars = {t.name: t for t in lifetime_chart(_buffers()).data}
    for role in ("parameter", "residual", "temporary", "output"):  # one colour per role across the pictures
        assert stacks[role].line.color == bars[role].marker.color == ROLE_COLORS[role]
    assert stacks["recomputed"].line.color == ROLE_COLORS["recomputed"] != ROLE_COLORS["temporary"]
    meta = fig.layout.meta["xlakit_liveness"]
    assert meta["peak_step"] == 2 and fig.layout.shapes[0].x0 == 2 and meta["stacked_by"] == "role"
    assert meta["at_peak"] == {"parameter": 4, "optimizer state": 2, "output": 0, "residual": 8, "recomputed": 3,
                               "temporary": 0}
    assert fig.layout.hovermode == "x unified" and fig.layout.legend.title.text == "by role"
    assert stacks["residual"].customdata[2] == "residual: 8 B" and "17 B live</b> at fusion.7" in \
        stacks["temporary"].customdata[2]
    peak_hover = fig.data[-1].customdata[0]
    assert "peak 17 B at step 2 of 4: mostly residual" in peak_hover and "residual: 8 B<br>" in peak_hover
    # A buffer assignment's frame has no roles: it is stacked by XLA's kind, and says so.
    kinds = pd.DataFrame({"step": [0, 1], "parameter": [4, 4], "temporary": [0, 1], "live_bytes": [4, 5]})
    assert liveness_chart(kinds).layout.legend.title.text == "by XLA buffer kind"


def test_lifetime_chart_draws_the_largest_buffers_by_role_with_their_ranges():
    buffers = _buffers()
    fig = lifetime_chart(buffers, top=3, peak_step=7)
    meta = fig.layout.meta["xlakit_lifetime"]
    # The 3 largest buffers with a live range: tanh.3 (8 MiB), p0 (4 MiB), fusion.2 (3 MiB); copy.1 has none.
    assert sorted(meta["buffer_ids"]) == [0, 2, 4] and meta["shown"] == 3
    assert meta["more"] == 2 and meta["more_bytes"] == 3 * MiB and meta["no_range"] == 1
    assert "+2 more buffers (3.0 MiB) not drawn" in fig.layout.title.text
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"parameter", "residual", "temporary"}
    assert bars["residual"].base == (3.0,) and bars["residual"].x == (6.0,)   # steps 3..8 inclusive
    assert bars["parameter"].base == (0.0,) and bars["parameter"].x == (12.0,)
    assert "model.py:42" in bars["residual"].customdata[0] and "8×1024×256" in bars["residual"].customdata[0]
    assert fig.layout.shapes[0].x0 == 7                                        # the peak step marked
    # Top to bottom in program order: p0 (start 0) above tanh.3 (start 3) above fusion.2 (start 5).
    assert bars["parameter"].y[0] > bars["residual"].y[0] > bars["temporary"].y[0]
    with pytest.raises(ValueError, match="top"):
        lifetime_chart(buffers, top=0)
    with pytest.raises(ValueError, match="columns"):
        lifetime_chart(buffers.drop(columns="start"))


def test_lifetime_chart_draws_at_most_40_bars_by_default_each_labelled():
    """A teacher's trial (2026-12-07): notebook 01's chart drew 43 bars and, above 40, no labels at all ("43
    largest buffers (hover for each)"). By default the 40 largest are drawn, each named; the rest are counted."""
    n = 60
    frame = pd.DataFrame({"buffer_id": range(n), "bytes": [(i + 1) * 1024 for i in range(n)],
                          "role": ["temporary"] * n, "start": list(range(n)), "end": [i + 2 for i in range(n)],
                          "source": [f"model.py:{i}" for i in range(n)]})
    fig = lifetime_chart(frame)
    life = fig.layout.meta["xlakit_lifetime"]
    assert life["shown"] == 40 and life["more"] == 20 and fig.layout.yaxis.showticklabels
    assert min(life["bytes"]) == 21 * 1024  # the 40 largest
    assert not lifetime_chart(frame, top=50).layout.yaxis.showticklabels  # asked for more: tooltips only


def test_peak_treemap_labels_wrap_so_plotly_need_not_shrink_them():
    """A JupyterLab trial (2026-12-06, 848 px): a copy's 130-character source and scope on one line were drawn at
    about 6 px in a third of the chart. Tile labels wrap at spaces into lines of at most TILE_LINE characters,
    every word kept."""
    from xlakit.view.peak import TILE_LINE

    at_peak = _buffers().iloc[[0, 2]].copy()
    long = ("XLA's copy of donated p['u'], read last at cell [2], line 3 (step.<locals>.<genexpr>) "
            "step.<locals>.<genexpr> › (p[k] * new[k]).sum()")
    at_peak["source"] = [long, "model.py:42"]
    labels = peak_treemap_nodes(at_peak)["labels"]
    tile = next(lab for lab in labels if lab.startswith("XLA&#x27;s copy") or lab.startswith("XLA's copy"))
    lines = tile.split("<br>")
    assert len(lines) >= 3 and all(len(line) <= TILE_LINE + 12 for line in lines)  # (+ escapes such as &#x27;)
    assert " ".join(lines).replace("&#x27;", "'").replace("&lt;", "<").replace("&gt;", ">") == long
    assert "model.py:42" in labels  # a short label is left as it was
    # A first-level tile is a header over its children, fitted into the band above them: the band is as tall as
    # the most-wrapped header needs (a three-line header in a 20 px band was drawn at a few pixels).
    from xlakit.view.peak import peak_treemap_figure

    nodes = peak_treemap_nodes(at_peak, path=("source", "scope"))
    header = max(lab.count("<br>") + 1 for lab, par in zip(nodes["labels"], nodes["parents"], strict=True)
                 if par == "peak")
    assert header >= 2 and peak_treemap_figure(nodes).data[0].marker.pad.t >= 15 * header


def test_peak_treemap_sums_equal_the_peak_total():
    at_peak = _buffers().iloc[[0, 1, 2, 4, 5]]          # the buffers live at the peak step
    total = int(at_peak["bytes"].sum())
    nodes = peak_treemap_nodes(at_peak, max_leaves=3)
    value = dict(zip(nodes["ids"], nodes["values"], strict=True))
    assert value["peak"] == total == 21 * MiB
    assert nodes["labels"][0] == "peak: 21.0 MiB live"  # the root's band (it drew an empty 75 px band, 2026-12-07)
    for node_id in nodes["ids"]:                         # every parent is exactly the sum of its children
        children = [v for i, p, v in zip(nodes["ids"], nodes["parents"], nodes["values"], strict=True)
                    if p == node_id]
        if children:
            assert sum(children) == value[node_id], node_id
    assert value["peak/jvp(MLP)"] == 13 * MiB and value["peak/jvp(MLP)/model.py:42"] == 8 * MiB
    assert value[f"peak/{NO_SCOPE}/{NO_SOURCE}"] == 3 * MiB   # missing metadata: said so, not guessed
    # p1 (1 MiB) and fusion.2 (3 MiB) are not among the 3 largest: each is summed under its own group.
    smaller = {i: v for i, lab, v in zip(nodes["ids"], nodes["labels"], nodes["values"], strict=True)
               if lab == "+1 smaller buffers"}
    assert smaller == {"peak/params/train.py:10/+": 1 * MiB, f"peak/{NO_SCOPE}/{NO_SOURCE}/+": 3 * MiB}
    fig = peak_treemap_figure(nodes)
    assert fig.data[0].type == "treemap" and fig.data[0].branchvalues == "total"
    assert fig.data[0].values[0] == total


def test_a_peak_with_hundreds_of_lines_folds_the_smallest_groups_and_keeps_the_sums():
    """600 source tiles (24 scopes x 25 lines) took seconds to draw in a browser: beyond the largest
    ``max_groups`` of a level, the groups are summed into one "+k smaller sources" tile under their parent."""
    n = 600
    at_peak = pd.DataFrame({"bytes": np.arange(1, n + 1) * 1024, "role": "temporary", "shape": [(8,)] * n,
                            "dtype": "f32", "instruction": [f"fusion.{i}" for i in range(n)],
                            "scope": [f"layer{i % 24}" for i in range(n)],
                            "source": [f"model.py:{i}" for i in range(n)]})
    nodes = peak_treemap_nodes(at_peak, max_groups=60, max_leaves=50)
    value = dict(zip(nodes["ids"], nodes["values"], strict=True))
    parent = dict(zip(nodes["ids"], nodes["parents"], strict=True))
    assert value["peak"] == int(at_peak["bytes"].sum())
    for node_id in nodes["ids"]:
        children = [v for i, v in value.items() if parent[i] == node_id]
        assert not children or sum(children) == value[node_id], node_id
    sources = [i for i in nodes["ids"] if i.count("/") == 2]
    folded = [i for i in sources if "/+" in i and "smaller sources" in i]
    assert len(sources) - len(folded) == 60 and 1 <= len(folded) <= 24
    # the 60 largest lines keep their tiles (model.py:540 .. model.py:599); every other line is in a fold
    kept = {i.split("/")[2] for i in sources if i not in folded}
    assert kept == {f"model.py:{i}" for i in range(540, 600)}
    layer0 = [i for i in folded if i.startswith("peak/layer0/")]
    assert layer0 == ["peak/layer0/+23 smaller sources"]   # 25 lines of layer0; 552 and 576 keep tiles
    assert value[layer0[0]] == sum((i + 1) * 1024 for i in range(0, 540, 24))
    with pytest.raises(ValueError, match="max_groups"):
        peak_treemap_nodes(at_peak, max_groups=0)


def test_peak_caption_and_grouping_name_the_largest_group():
    at_peak = _buffers().iloc[[0, 1, 2, 4, 5]]
    sizes = group_bytes(at_peak, "source")
    assert sizes.index[0] == "model.py:42" and int(sizes.iloc[0]) == 8 * MiB
    assert int(group_bytes(at_peak, "source")[NO_SOURCE]) == 3 * MiB
    caption = peak_caption(at_peak)
    assert caption.startswith("top source model.py:42 (8.0 MiB, mostly residual)")
    assert "top scope jvp(MLP) (13.0 MiB" in caption
    assert peak_caption(at_peak.assign(source=None), groups=("source",)) == "source unknown"
    # one group on top of both (a researcher's trial, 2026-12-07: "top source arguments (67.4 MiB, mostly
    # optimizer state); top scope arguments (67.4 MiB, mostly optimizer state)"): said once
    args_only = at_peak.iloc[[0, 1]].assign(source=["argument a", "argument b"], scope="argument")
    assert peak_caption(args_only) == "top source and scope arguments (5.0 MiB, mostly parameter)"
    html = peak_html("Peak", summary=caption, figures=[lifetime_chart(_buffers())], buffers=at_peak,
                     include_plotlyjs=False)
    assert f"data-bytes='{8 * MiB}'" in html and "Peak by source" in html and "xlakit-chart" in html


def test_measurements_figure_draws_each_measurement_with_its_bytes():
    from xlakit.view.budget import measurements_figure

    rows = [{"label": "naive: high-water growth", "bytes": 300 * MiB, "kind": "naive"},
            {"label": "probe, isolated", "bytes": 40 * MiB, "kind": "probe"},
            {"label": "compiler: temporaries + outputs", "bytes": 38 * MiB, "kind": "compiler"}]
    fig = measurements_figure(rows)
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"naive", "probe", "compiler"}
    assert bars["naive"].x == (300 * MiB,) and bars["probe"].text == ("40.0 MiB",)
    assert list(fig.layout.yaxis.categoryarray)[-1] == "naive: high-water growth"  # the first row on top
    with pytest.raises(ValueError, match="bytes"):
        measurements_figure([{"label": "x"}])


def test_arena_bar_cuts_the_arena_into_weights_pool_scratch_and_margin():
    from xlakit.memory import weight_budget
    from xlakit.view.budget import arena_figure, arena_segments

    # 256 MiB arena, largest scratch 40 MiB: pool = min(0.9 * 256, 0.95 * 256 - 40) = 203.2 MiB.
    budget = weight_budget(256 * MiB, [40 * MiB, 10 * MiB], pinned_bytes=30 * MiB)
    segs = arena_segments(budget, {"cnn": 10 * MiB, "transformer": 20 * MiB})
    by = {s["name"]: s for s in segs}
    assert [s["kind"] for s in segs] == ["weights", "weights", "pool left", "scratch", "margin"]
    assert by["transformer"]["start"] == 10 * MiB
    assert by["pool left for weights"]["bytes"] == budget.pool_bytes - 30 * MiB == budget.available_bytes
    assert by["largest scratch"]["bytes"] == 40 * MiB
    assert sum(s["bytes"] for s in segs) == 256 * MiB                 # the segments tile the arena exactly
    assert all(a["start"] + a["bytes"] == b["start"] for a, b in zip(segs, segs[1:], strict=False))
    fig = arena_figure(budget, {"cnn": 10 * MiB, "transformer": 20 * MiB})
    assert fig.layout.shapes[0].x0 == budget.pool_bytes and "limited by scratch" in fig.layout.annotations[0].text
    # Too many weights: the part beyond the pool is drawn as "over".
    over = arena_segments(weight_budget(256 * MiB, 40 * MiB, pinned_bytes=220 * MiB))
    assert over[1]["kind"] == "over" and over[1]["bytes"] == 220 * MiB - budget.pool_bytes


def test_every_role_the_attribution_gives_has_a_colour():
    from xlakit.memory.attribution import ROLES as ATTRIBUTION_ROLES
    from xlakit.view.memory_charts import ROLE_COLORS, ROLES

    assert set(ATTRIBUTION_ROLES) <= set(ROLES) == set(ROLE_COLORS)


def test_liveness_chart_of_a_heap_simulator_trace_marks_the_highest_event():
    # The frame BufferAssignment.live_bytes_by_step() gives where XLA ships heap traces (GPU/TPU builds).
    frame = pd.DataFrame({"trace": [0, 0, 0, 1, 1], "allocation": [3, 3, 3, 4, 4], "step": [0, 1, 2, 0, 1],
                          "live_bytes": [10, 30, 20, 5, 50]})
    fig = liveness_chart(frame)
    assert [t.name for t in fig.data] == ["trace 0", "trace 1"]
    meta = fig.layout.meta["xlakit_liveness"]
    assert meta["peak_bytes"] == 50 and meta["peak_step"] == 1 and fig.layout.shapes[0].x0 == 1


def test_variants_figure_draws_one_line_per_variant_in_batch_order():
    from xlakit.view.peak import variants_figure

    fig = variants_figure([{"batch": 64, "variant": "remat none", "peak": 9 * MiB},
                           {"batch": 8, "variant": "remat none", "peak": 2 * MiB},
                           {"batch": 8, "variant": "remat full", "peak": 1 * MiB},
                           {"batch": 3, "variant": "remat full", "peak": None}])   # failed: left out
    lines = {t.name: t for t in fig.data}
    assert lines["remat none"].x == (8, 64) and lines["remat none"].y == (2 * MiB, 9 * MiB)
    assert lines["remat full"].x == (8,) and lines["remat full"].customdata == ("1.0 MiB",)


def _residual_slots() -> pd.DataFrame:
    """A scan's residual stack as XLA assigns it: slot 0 (allocation 7, offset 0) appears under five logical-buffer
    names, in-place updates chained step to step; slot 1 (offset 8 MiB) under two; a later value that reuses slot
    0's memory after it is freed (no overlap: a bar of its own); and a parameter."""
    names = ["bitcast_dynamic-update-slice_fusion.1", "arg_tuple.1", "while.16", "copy.3", "wrapped_broadcast",
             "bitcast_dynamic-update-slice_fusion.2", "copy.4", "fusion.9", "Ws.1"]
    return pd.DataFrame({
        "buffer_id": [10, 11, 12, 13, 14, 20, 21, 30, 1],
        "instruction": names,
        "bytes": [8 * MiB] * 8 + [2 * MiB],
        "shape": [(8, 512, 512)] * 8 + [(512, 1024)],
        "dtype": ["float32"] * 9,
        "role": ["residual"] * 7 + ["temporary", "parameter"],
        "scope": ["forward › while/body"] * 7 + ["transpose(jvp(block))", "argument"],
        "source": ["cell [4], line 3 (block)"] * 7 + [None, "argument params['Ws']"],
        "layer": ["block › x @ W"] * 7 + [None, "argument"],
        "parameter": [None] * 8 + ["params['Ws']"],
        "allocation": pd.array([7, 7, 7, 7, 7, 7, 7, 7, 0], dtype="Int64"),
        "offset": pd.array([0, 0, 0, 0, 0, 8 * MiB, 8 * MiB, 0, 0], dtype="Int64"),
        "start": [2, 5, 9, 12, 14, 3, 10, 21, 0], "end": [5, 9, 12, 14, 20, 10, 19, 25, 25]})


def test_lifetime_chart_draws_aliases_of_one_allocation_slice_as_one_bar():
    buffers = _residual_slots()
    fig = lifetime_chart(buffers, peak_step=15)
    meta = fig.layout.meta["xlakit_lifetime"]
    # 9 logical buffers, 4 pieces of memory: slot 0 (5 names), slot 1 (2 names), the later reuse, the parameter.
    assert meta["shown"] == 4 and meta["aliases"] == 5 and meta["more"] == 0 and meta["no_range"] == 0
    assert meta["buffer_ids"] == [1, 14, 21, 30]      # top to bottom by start; each slice's longest-lived buffer
    assert meta["bytes"] == [2 * MiB, 8 * MiB, 8 * MiB, 8 * MiB]     # each slice's bytes once, not 5x
    (residual,) = [t for t in fig.data if t.name == "residual"]
    spans = sorted(zip(residual.base, residual.x, strict=True))
    assert spans == [(2.0, 19.0), (3.0, 17.0)]                       # steps 2..20 and 3..19: the unions
    assert "+4 aliases" in residual.customdata[0] and "while.16" in residual.customdata[0]
    assert "live steps 2–20" in residual.customdata[0]
    assert "+1 alias " in residual.customdata[1] and "bitcast_dynamic-update-slice_fusion.2" in residual.customdata[1]
    # What the bars crossing the peak step add up to is what is live there: 2 + 8 + 8 MiB, not 2 + 7 x 8 MiB.
    crossing = [b for y, b in enumerate(meta["bytes"]) if any(
        base <= 15 < base + x for t in fig.data for pos, base, x in zip(t.y, t.base, t.x, strict=True)
        if pos == meta["shown"] - 1 - y)]
    assert sum(crossing) == 18 * MiB
    # Fewer bars asked for: the left-out count is in pieces of memory, the aliases of a drawn bar are not "more".
    one = lifetime_chart(buffers, top=1).layout.meta["xlakit_lifetime"]
    assert one["shown"] == 1 and one["more"] == 3 and one["more_bytes"] == 18 * MiB
    # Without allocation/offset columns every logical buffer is its own bar, as before.
    flat = lifetime_chart(buffers.drop(columns=["allocation", "offset"])).layout.meta["xlakit_lifetime"]
    assert flat["shown"] == 9 and flat["aliases"] == 0 and sum(flat["bytes"]) == 66 * MiB


def test_lifetime_chart_labels_bars_in_the_users_terms():
    buffers = _residual_slots()
    fig = lifetime_chart(buffers)
    ticks = list(fig.layout.yaxis.ticktext)
    meta = fig.layout.meta["xlakit_lifetime"]
    assert meta["labels"] == ["params['Ws'] · parameter · 2.0 MiB",            # the parameter path
                              "cell [4], line 3 (block) · residual · 8.0 MiB",  # the source line
                              "cell [4], line 3 (block) · residual · 8.0 MiB",
                              "no line of your code · temporary · 8.0 MiB"]     # nothing else known: as by()
    assert ticks[1] == "cell [4], line 3 (block) · residual · 8.0 MiB"
    assert ticks[0] == "params['Ws'] · parameter · 2.0 MiB"          # plotly text: quotes as they are
    assert not any(t.startswith(("arg_tuple", "while", "Ws.1", "bitcast")) for t in ticks)
    (residual,) = [t for t in fig.data if t.name == "residual"]
    assert "<b>wrapped_broadcast</b>" in residual.customdata[0]                    # the instruction: hover
    # Without a source, the layer names the bar.
    no_source = buffers.assign(source=None)
    labels = lifetime_chart(no_source).layout.meta["xlakit_lifetime"]["labels"]
    assert labels[1] == "block › x @ W · residual · 8.0 MiB"


def test_peak_treemap_colours_tiles_by_role_and_names_sources_in_user_terms():
    from xlakit.view.memory_charts import ROLE_COLORS

    at_peak = _buffers().iloc[[0, 1, 2, 4, 5]].assign(
        layer=["argument", "argument", "MLP.__call__ › jnp.tanh(h)", None, "MLP.__call__ › h.copy()"])
    nodes = peak_treemap_nodes(at_peak)
    by_id = {i: (lab, col, role) for i, lab, col, role in
             zip(nodes["ids"], nodes["labels"], nodes["colors"], nodes["roles"], strict=True)}
    leaves = [i for i in nodes["ids"] if "/#" in i]
    assert len(leaves) == 5
    for i in leaves:                                         # every buffer in its role's colour
        _, colour, role = by_id[i]
        assert colour == ROLE_COLORS[role]
    assert {by_id[i][2] for i in leaves} == {"parameter", "residual", "temporary"}
    # Groups in the colour of their main role (by bytes): jvp(MLP) holds 8 MiB residual, 5 MiB temporary.
    assert by_id["peak/jvp(MLP)"][1:] == (ROLE_COLORS["residual"], "residual")
    assert by_id["peak/params"][1:] == (ROLE_COLORS["parameter"], "parameter")
    assert by_id[f"peak/{NO_SCOPE}"][1:] == (ROLE_COLORS["temporary"], "temporary")
    # Source tiles: the source line and the layer; buffers by parameter path or role and shape.
    assert by_id["peak/jvp(MLP)/model.py:42"][0] == "model.py:42<br>MLP.__call__ › jnp.tanh(h)"
    assert by_id["peak/params/train.py:10"][0] == "train.py:10"          # "argument": no layer to add
    leaf_labels = sorted(by_id[i][0] for i in leaves)
    assert "residual 8×1024×256" in leaf_labels
    # plotly shows only &amp; &lt; &gt; as entities: quotes stay quotes (an escaped one read "&#x27;" on screen)
    assert "params['l1']['kernel'] 1024×1024" in leaf_labels
    assert not any("tanh.3" in lab for lab in leaf_labels)              # the instruction is in the hover
    assert any("tanh.3" in h for h in nodes["hover"])
    fig = peak_treemap_figure(nodes)
    tree = fig.data[0]
    assert list(tree.marker.colors) == nodes["colors"] and "#dddddd" not in tree.marker.colors
    assert tree.text[0] == "" and tree.text[1] == fmt_bytes(tree.values[1]) and tree.textinfo == "label+text"
    assert tree.labels[0] == f"peak: {fmt_bytes(21 * MiB)} live"  # the root's bytes once, in its label
    assert "residual" in fig.layout.annotations[0].text                 # the colour key
    # An alias charged nothing at the peak (its bytes counted with a larger buffer) gets no tile of its own.
    alias = at_peak.iloc[[2]].assign(bytes=0, instruction="copy.7")
    with_alias = peak_treemap_nodes(pd.concat([at_peak, alias]))
    assert len([i for i in with_alias["ids"] if "/#" in i]) == 5 and with_alias["values"][0] == 21 * MiB


def test_details_table_shows_the_peaks_buffers_in_user_terms_and_xlas_only_without_one():
    from xlakit.view.breakdown import details_html

    peak_buffers = _buffers().iloc[[0, 1, 2, 4, 5]].assign(
        layer=["argument", "argument", "MLP.__call__ › jnp.tanh(h)", None, None],
        buffer_bytes=lambda f: f["bytes"])
    peak_buffers.loc[5, "bytes"] = 1 * MiB                     # shares 4 of its 5 MiB with a larger buffer
    largest = pd.DataFrame({"instruction": ["wrapped_broadcast", "copy.10"], "opcode": ["fusion", "copy"],
                            "dtype": ["f32", "f32"], "shape": [(8,), (8,)], "bytes": [64, 32],
                            "kind": ["temporary", "temporary"], "allocation": [1, 2]})
    largest.attrs["source"] = "XLA peak_buffers"
    html = details_html("step", largest, peak_buffers=peak_buffers, top=5)
    headers = re.findall(r"<th class='[^']*'>([^<]*)</th>", html)
    assert headers == ["role", "source", "layer", "parameter", "dtype", "shape", "bytes at the peak", "own size"]
    body = html.split("<tbody>")[1]
    rows = body.split("<tr>")[1:]
    assert len(rows) == 5 and "residual" in rows[0] and "model.py:42" in rows[0] and "8×1024×256" in rows[0]
    assert "title='XLA instruction tanh.3'>residual</td>" in rows[0]        # XLA's name: the role's hover text
    assert f"data-bytes='{8 * MiB}'" in rows[0] and "params[&#x27;l1&#x27;][&#x27;kernel&#x27;]" in rows[1]
    assert f"data-bytes='{1 * MiB}'" in rows[4] and f"data-bytes='{5 * MiB}'" in rows[4]  # charged, own size
    assert "own size" not in details_html("step", largest, peak_buffers=peak_buffers, top=3)  # all unshared
    for gone in ("wrapped_broadcast", "copy.10", "allocation kind", "XLA peak_buffers"):
        assert gone not in html
    # No peak attribution: XLA's own list, as before.
    old = details_html("step", largest)
    assert "wrapped_broadcast" in old and "allocation kind" in old and "source: XLA peak_buffers" in old
    assert "bytes at the peak" not in old


def test_every_chart_puts_its_legend_under_the_plot_and_wraps_a_long_title():
    """A legend above the plot grew into the title when a ~500 px notebook column wrapped it into more rows.
    Every chart's legend sits at the bottom of the figure (plotly reserves its rows there), the figure is made
    taller by the rows it takes at 400 px, and a title too long for 400 px is cut into lines, the top margin
    growing with them. (tests/test_browser_charts.py checks the drawn boxes in chromium.)"""
    from chart_gallery import gallery

    from xlakit._text.theme import TITLE_LINE, legend_rows, title_lines

    for name, fig in gallery().items():
        legend = fig.layout.legend
        if any(t.type != "treemap" for t in fig.data):  # a treemap has no legend (its key: test_browser_charts)
            assert (legend.orientation, legend.yref, legend.y, legend.yanchor) == ("h", "container", 0, "bottom"), \
                name
        lines = fig.layout.title.text.split("<br>")
        assert all(len(line) <= 51 or "<" in line for line in lines), (name, lines)
        assert fig.layout.margin.t >= 40 + TITLE_LINE * (len(lines) - 1), name
    live = gallery()["liveness"]
    assert live.layout.legend.title.text == "by role" and live.layout.height > 340  # 9 roles + peak: wrapped rows
    assert legend_rows(["a"]) == 0 and legend_rows(["parameter", "output"], 1400) == 1
    assert legend_rows([f"role {i}" for i in range(10)], 400) > 1
    assert title_lines("Buffer lifetimes: jit_train_step (largest buffers, coloured by role)") == [
        "Buffer lifetimes: jit_train_step (largest buffers,", "coloured by role)"]
    assert title_lines("short<br><sub>a second line, kept whole</sub>") == ["short",
                                                                           "<sub>a second line, kept whole</sub>"]


def test_a_one_point_chart_shows_a_labelled_y_range_from_zero():
    """"Peak by batch size" of one batch size and one variant: plotly's autorange zoomed around the one value,
    between two of the byte ticks, and drew none. Every byte axis has an explicit range from 0 past its
    largest value, holding labelled ticks; a one-point sweep also names its variant and its batch size."""
    from chart_gallery import one_point_sweep

    from xlakit.view.breakdown import apply_byte_axis
    from xlakit.view.budget import measurements_figure

    fig = one_point_sweep()
    y = fig.layout.yaxis
    lo, hi = y.range
    assert lo == 0 and 9 * MiB < hi <= 1.1 * 9 * MiB and y.autorange is False and y.rangemode == "tozero"
    inside = [t for t, v in zip(y.ticktext, y.tickvals, strict=True) if lo <= v <= hi]
    assert inside[0] == "0 B" and len(inside) >= 3 and inside[-1] == "8 MiB", inside
    assert list(fig.layout.xaxis.tickvals) == [32] and fig.layout.showlegend is True
    assert fig.data[0].name == "remat none, donate True"
    # The same axis everywhere bytes are drawn: one measurement, one step of liveness, aliases below zero.
    bar = measurements_figure([{"label": "probe", "bytes": 40 * MiB, "kind": "probe"}])
    assert tuple(bar.layout.xaxis.range) == (0, 42 * MiB) and bar.layout.xaxis.autorange is False
    one_step = liveness_chart(pd.DataFrame({"step": [0], "live_bytes": [3 * MiB]}))
    assert tuple(one_step.layout.yaxis.range) == pytest.approx((0, 3.15 * MiB))
    import plotly.graph_objects as go

    signed = go.Figure()
    apply_byte_axis(signed, [10 * MiB, -4 * MiB])
    assert tuple(signed.layout.yaxis.range) == pytest.approx((-4.2 * MiB, 10.5 * MiB))
    zeros = go.Figure()
    apply_byte_axis(zeros, [0, 0])
    assert tuple(zeros.layout.yaxis.range) == (0, 1) and tuple(zeros.layout.yaxis.ticktext) == ("0 B",)


def test_lifetime_chart_wraps_a_long_label_onto_lines_and_keeps_every_word():
    # A JupyterLab trial (2026-12-06): a copy's story as one 100-character tick label took the plot's width.
    story = "XLA's copy of donated params[1]['w'], read last by its own update at cell [2], line 4"
    buffers = _residual_slots()
    long = buffers.assign(source=[story] * len(buffers), parameter=None)
    fig = lifetime_chart(long)
    label = fig.layout.meta["xlakit_lifetime"]["labels"][0]
    tick = fig.layout.yaxis.ticktext[0]
    lines = tick.split("<br>")
    assert len(lines) >= 2 and all(len(line) <= 48 for line in lines)
    assert " ".join(lines).replace("&lt;", "<") == label  # nothing cut: the lines are the label's words
    assert not any(re.match(r"[KMG]?i?B\b", line) for line in lines)  # a size is never split ("4.0" / "MiB")
    assert fig.layout.margin.l < 24 + 7 * 48  # the margin is a line's width, not the label's
    rows = len(fig.layout.yaxis.tickvals)  # evenly spaced rows, each as tall as the most-wrapped label
    assert fig.layout.height - fig.layout.margin.t - fig.layout.margin.b >= rows * 13 * len(lines)


def test_the_arguments_split_says_the_parameter_role_holds_the_inputs_too():
    """A trial (2026-12-07): "23.0 MiB arguments (… 8.3 MiB parameters)" beside 6.8 MiB of weights — XLA's entry
    parameters that are not optimizer state include the input batch. The split says so."""
    from xlakit.memory._grouping import ARGUMENTS_LABEL, group_text

    text = group_text({"group": ARGUMENTS_LABEL, "bytes": 3 * MiB, "count": 3,
                       "roles": {"parameter": 2 * MiB, "optimizer state": 1 * MiB}})
    assert text == "3.0 MiB arguments (2.0 MiB parameters and inputs, 1.0 MiB optimizer state)"
    other = group_text({"group": "model.py:3 (f)", "bytes": MiB, "count": 1, "roles": {"parameter": MiB}})
    assert other == "1.0 MiB from model.py:3 (f) (parameters)"  # elsewhere the role keeps its own word
