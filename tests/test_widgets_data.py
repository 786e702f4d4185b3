"""The widgets' pure data helpers (no browser, no widget): down-sampling, lanes, breakdown tables, snapshots."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from xlakit.events import Event
from xlakit.memory import CompiledMemory
from xlakit.widgets import _data, _snapshots


def _mem(name, arg, out, alias=0, temp=0, peak=None, code=None):
    return CompiledMemory(argument_bytes=arg, output_bytes=out, alias_bytes=alias, temp_bytes=temp,
                          generated_code_bytes=code, peak_bytes=peak, name=name, platform="cpu")


def test_breakdown_frame_sorts_and_totals():
    mems = {"small": _mem("small", 100, 10, temp=5, peak=110), "big": _mem("big", 1000, 1000, alias=1000, temp=300),
            "mid": _mem("mid", 400, 4, peak=None)}
    by_name = _data.breakdown_frame(mems)
    assert list(by_name.index) == ["big", "mid", "small"]
    assert by_name.loc["big", "total_bytes"] == 2300 and by_name.loc["big", "net_bytes"] == 1300
    assert by_name.loc["big", "footprint_bytes"] == 1300
    assert pd.isna(by_name.loc["mid", "peak_bytes"])
    assert list(_data.breakdown_frame(mems, "total").index) == ["big", "mid", "small"]
    assert list(_data.breakdown_frame(mems, "peak").index) == ["small", "big", "mid"]  # not reported: last
    assert list(_data.breakdown_frame(mems, "temp").index) == ["big", "small", "mid"]
    with pytest.raises(ValueError, match="sort must be one of"):
        _data.breakdown_frame(mems, "size")


def test_breakdown_values_bytes_and_percent_show_aliases_as_a_reduction():
    frame = _data.breakdown_frame({"p": _mem("p", 600, 400, alias=400, temp=0, peak=600)})
    in_bytes = _data.breakdown_values(frame, "bytes")
    assert in_bytes["arguments"] == [600.0] and in_bytes["outputs"] == [400.0]
    assert in_bytes["aliases (reused)"] == [-400.0]
    assert in_bytes["code"] == [None]  # not reported: no bar, never a fake 0
    assert in_bytes["peak"] == [600.0]
    pct = _data.breakdown_values(frame, "percent")
    assert pct["arguments"] == [60.0] and pct["outputs"] == [40.0] and pct["aliases (reused)"] == [-40.0]
    assert pct["temporaries"] == [0.0] and pct["peak"] == [60.0]
    with pytest.raises(ValueError, match="unit must be one of"):
        _data.breakdown_values(frame, "MiB")


def test_unique_labels_use_the_key_hash():
    labels = _data.unique_labels(["jit_f", "jit_f", "jit_g", None], ["jit_f-aaaa1111bbbb", "jit_f-cccc2222", "x", None])
    assert labels == ["jit_f [aaaa1111]", "jit_f [cccc2222]", "jit_g", "?"]


def test_a_repeated_name_is_told_apart_by_its_argument_shapes():
    """Fault: the dashboard's bars read ``jit_mm [4b249220]`` (a key hash) for a function compiled at two shapes;
    they read the function and the shapes that differ, as the cache browser lists them."""
    def leaf(shape):
        return {"shape": shape, "dtype": "f32", "sharding": None, "donation": False}

    params = [leaf(f"{i}x64") for i in range(1, 30)]  # a model's shared leaves are abbreviated
    labels = _data.unique_labels(
        ["jit_mm", "jit_mm", "jit_step", "jit_step", "jit_scale", "jit_f", "jit_f"],
        ["jit_mm-k1", "jit_mm-k2", "jit_step-k3", "jit_step-k4", "jit_scale-k5", "jit_f-aaaa1111", "jit_f-bbbb2222"],
        [[leaf("512x512")], [leaf("256x128")], [*params, leaf("8x784")], [*params, leaf("64x784")],
         [leaf("64x32")], [leaf("4")], None])
    assert labels[:2] == ["jit_mm(f32[512,512])", "jit_mm(f32[256,128])"]
    # only the leaves that differ, short enough for a chart's tick label (the shared ones read "…")
    assert labels[2:4] == ["jit_step(…, f32[8,784])", "jit_step(…, f32[64,784])"]
    assert labels[4] == "jit_scale"  # a name held once stays the name
    assert labels[5:] == ["jit_f [aaaa1111]", "jit_f [bbbb2222]"]  # one records no signature: the key's hash


def test_downsample_keeps_budget_extremes_and_every_small_group():
    rng = np.random.default_rng(0)
    n = 100_000
    x = np.sort(rng.uniform(0, 1000, n))
    w = rng.exponential(1.0, n)
    w[12345] = 1e6  # one very slow event must survive
    group = rng.integers(0, 5, n)
    group[:7] = 9  # a tiny group is kept whole
    idx = _data.downsample(x, w, group, 5000)
    assert len(idx) <= 5000 * 1.1
    assert 12345 in set(idx.tolist())
    assert set(range(7)) <= set(idx.tolist())
    assert np.all(np.diff(idx) > 0)
    for g in range(5):  # each group keeps its first and last point
        members = np.flatnonzero(group == g)
        assert members[0] in idx and members[-1] in idx
    assert np.array_equal(_data.downsample(x[:100], w[:100], group[:100], 5000), np.arange(100))


def _events(n, t0=1_700_000_000.0):
    kinds = ["hit", "miss", "compile", "store"]
    out = []
    for i in range(n):
        kind = kinds[i % 4]
        out.append(Event(kind=kind, name=f"jit_f{i % 3}", key=f"jit_f{i % 3}-k{i}", duration_s=0.001 * (i % 7),
                         bytes=1000 + i if kind == "store" else None, reason="no entry" if kind == "miss" else None,
                         partition="cpu-p", saved_s=0.5 if kind == "hit" else None, time=t0 + i,
                         source="xlakit" if i % 2 else "jax"))
    return out


def test_event_columns_lanes_are_stable_and_bounded():
    cols = _data.EventColumns(maxlen=10)
    cols.extend(_events(6))
    cols.extend([Event(kind="hit", name=None, time=1_700_000_100.0)])
    assert cols.lanes == {"jit_f0": 0, "jit_f1": 1, "jit_f2": 2, "(no name)": 3}
    cols.extend(_events(8))
    assert len(cols) == 10  # the newest 10
    a = cols.arrays()
    assert a["time"].shape == (10,) and a["lane"].max() <= 3
    assert cols.arrays() is a  # cached until the next append


def test_timeline_data_filters_counts_hover_and_saved_seconds():
    cols = _data.EventColumns()
    cols.extend(_events(40))
    data = _data.timeline_data(cols)
    assert data.total == data.matched == data.shown == 40
    assert data.lanes == ("jit_f0", "jit_f1", "jit_f2")
    assert set(data.points) == {"hit", "miss", "compile", "store"}
    assert data.saved_s == pytest.approx(0.5 * 10)
    assert data.saved_y[-1] == pytest.approx(5.0) and np.all(np.diff(data.saved_y) >= 0)
    hover = data.points["store"]["hover"][0]
    assert "key: jit_f" in hover and "partition: cpu-p" in hover and "bytes: 1003 B" in hover
    assert "reason: no entry" in data.points["miss"]["hover"][0]
    assert sum(sum(c.values()) for c in data.counts.values()) == 40
    only_hits = _data.timeline_data(cols, kinds=["hit"])
    assert set(only_hits.points) == {"hit"} and only_hits.matched == 10
    assert only_hits.saved_s == pytest.approx(5.0)  # the curve ignores the kind filter
    f1 = _data.timeline_data(cols, name_filter="F1")
    assert set(f1.counts) == {"jit_f1"}
    jax_only = _data.timeline_data(cols, source="jax")
    assert jax_only.matched == 20
    empty = _data.timeline_data(_data.EventColumns())
    assert empty.total == 0 and empty.points == {}


def test_timeline_data_with_100k_events_is_fast_and_downsampled():
    cols = _data.EventColumns()
    start = time.process_time()  # CPU seconds: the suite's other workers share the cores
    cols.extend(_events(100_000))
    data = _data.timeline_data(cols, max_points=5000)
    elapsed = time.process_time() - start
    assert data.total == 100_000 and data.downsampled
    assert data.shown <= 5500
    assert len(data.saved_x) <= 5500
    assert data.saved_y[-1] == pytest.approx(0.5 * 25_000)
    assert elapsed < 10, elapsed


def test_marker_sizes_grow_with_duration():
    sizes = _data.marker_sizes([np.nan, 0.0, 0.25, 1.0, 4.0], max_duration=1.0)
    assert sizes[0] == sizes[1] == 5.0 and sizes[3] == sizes[4] == 22.0
    assert sizes[1] < sizes[2] < sizes[3]


def test_sparkline_and_bytes_cells():
    svg = _data.sparkline_svg([0, 10, None, 5])
    assert svg.startswith("<svg") and "polyline" in svg and "circle" in svg
    assert "polyline" not in _data.sparkline_svg([])
    assert "data-bytes='1572864'" in _data.bytes_cell(1572864) and "1.5 MiB" in _data.bytes_cell(1572864)
    assert "not reported" in _data.bytes_cell(None) and "not reported" in _data.bytes_cell(pd.NA)


def test_displayed_peak_prefers_peak_since_reset():
    from xlakit.memory import AllocatorStats

    s = AllocatorStats(device="gpu:0", device_id=0, platform="gpu", peak_bytes_in_use=900)
    assert _data.displayed_peak(s) == (900, "lifetime (no reset yet)")
    s = AllocatorStats(device="cpu:0", device_id=0, platform="cpu", process_hwm_bytes=700)
    assert _data.displayed_peak(s)[0] == 700 and "high-water" in _data.displayed_peak(s)[1]
    s = AllocatorStats(device="gpu:0", device_id=0, platform="gpu", peak_bytes_in_use=900,
                       peak_since_reset_bytes=900, peak_since_reset_exact=False, reset_method="baseline",
                       peak_at_reset_bytes=900)
    assert _data.displayed_peak(s) == (900, "baseline (no reset available) since reset: no rise over the 900 B at "
                                            "reset (at most: the lifetime peak)")
    # After a CPU reset the peak starts from what the whole process held, not from 0: the note says so and
    # gives the rise since (the 390 MiB next to "in use 65 MiB" of issue 35).
    s = AllocatorStats(device="cpu:0", device_id=0, platform="cpu", bytes_in_use=65 * 2**20,
                       peak_since_reset_bytes=390 * 2**20, peak_since_reset_exact=True, reset_method="clear_refs",
                       peak_at_reset_bytes=388 * 2**20)
    assert _data.displayed_peak(s) == (390 * 2**20, "process high-water mark since reset: +2.0 MiB over the "
                                                    "388.0 MiB at reset (exact)")
    assert "the most the whole process has held at once since the reset" in s.peak_meaning


def test_live_table_and_treemap_nodes():
    frame = pd.DataFrame([
        {"array": 1, "device": "cpu:0", "memory_kind": "device", "shape": (10, 10), "dtype": "float32", "bytes": 400,
         "created_at": "a.py:1"},
        {"array": 2, "device": "cpu:0", "memory_kind": "device", "shape": (10, 10), "dtype": "float32", "bytes": 400,
         "created_at": "a.py:2"},
        {"array": 3, "device": "cpu:0", "memory_kind": "pinned_host", "shape": (5,), "dtype": "int8", "bytes": 5,
         "created_at": None},
        {"array": 4, "device": "cpu:1", "memory_kind": "device", "shape": (1000,), "dtype": "float64", "bytes": 8000,
         "created_at": None},
    ])
    table = _data.live_table(frame)
    assert table.iloc[0]["bytes"] == 8000 and table.iloc[0]["array"] == "float64[1000]"
    row = table[table["array"] == "float32[10,10]"].iloc[0]
    assert row["arrays"] == 2 and row["bytes"] == 800 and row["created_at"] == "a.py:1"
    nodes = _data.treemap_nodes(frame)
    values = dict(zip(nodes["ids"], nodes["values"], strict=True))
    assert values["cpu:0"] == 805 and values["cpu:0/device"] == 800 and values["cpu:0/pinned_host"] == 5
    assert values["cpu:1/device/float64[1000]"] == 8000
    assert dict(zip(nodes["ids"], nodes["parents"], strict=True))["cpu:0/device/float32[10,10]"] == "cpu:0/device"
    assert _data.treemap_nodes(frame.iloc[:0])["ids"] == []


def test_partition_totals_and_filters():
    frame = pd.DataFrame([
        {"name": "jit_f", "key": "k1", "partition": "p1", "size_bytes": 100, "compile_s": 1.0, "hits": 2},
        {"name": "jit_g", "key": "k2", "partition": "p1", "size_bytes": 50, "compile_s": 0.5, "hits": 0},
        {"name": "jit_f", "key": "k3", "partition": "p2", "size_bytes": 10, "compile_s": 0.1, "hits": 1},
    ])
    totals = _data.partition_totals(frame)
    assert totals.loc["p1", "entries"] == 2 and totals.loc["p1", "size_bytes"] == 150
    assert totals.loc["p2", "hits"] == 1
    assert list(_data.filter_entries(frame, "F")["key"]) == ["k1", "k3"]
    assert list(_data.filter_entries(frame, "", "p2")["key"]) == ["k3"]
    assert _data.partition_totals(frame.iloc[:0]).empty


def test_explain_entry_names_the_environment_fields_that_differ():
    from xlakit._jax.environment import current_environment
    from xlakit.store.local import EntryInfo

    env = current_environment()
    here = env.to_dict()
    same = EntryInfo(env.partition_name(), "jit_f-abc", None, "jit_f", 10, 1.0, 2.0, 0.1,
                     {"environment": here, "key_parts": {"computation": "h"}})
    assert _data.explain_entry(same, env).status == "hit"
    other = dict(here, jax_version="0.0.1", device_count=here.get("device_count", 1) + 3)
    old = EntryInfo("cpu-old-partition", "jit_f-def", None, "jit_f", 10, 1.0, 2.0, 0.1,
                    {"environment": other, "key_parts": {"computation": "h"}})
    explanation = _data.explain_entry(old, env)
    assert explanation.status == "miss"
    assert "jax version" in explanation.kinds and "devices" in explanation.kinds
    assert "module" not in explanation.kinds  # the program is not compared here


def test_snapshots_contain_the_exact_numbers():
    frame = _data.breakdown_frame({"train_step": _mem("train_step", 123_456_789, 2_345, temp=98_765, peak=123_460_000)})
    html = _snapshots.breakdown_html(frame, "bytes", include_plotlyjs=False)
    for n in (123_456_789, 2_345, 98_765, 123_460_000):
        assert f"data-bytes='{n}'" in html
    assert "train_step" in html and "plotly" in html.lower()
    rows = [{"device": "cpu:0", "in_use": 1024, "peak": 777_777_777, "peak_note": "since reset (clear_refs; exact)",
             "limit": None, "largest_alloc": None, "num_allocs": None, "process_rss": 5, "reset_method": "clear_refs"}]
    html = _snapshots.allocator_html(rows, {"cpu:0": [0, 1024]}, {})
    assert "data-bytes='777777777'" in html and "<svg" in html
    # limit, largest allocation and count, reported by no device (CPU), are columns left out, not a row of blanks
    assert ">limit<" not in html and ">allocations<" not in html and "not reported" not in html
    rows[0]["limit"] = 2**30
    assert ">limit<" in _snapshots.allocator_html(rows, {}, {}) and ">allocations<" not in html


def test_the_memory_tab_counts_library_helpers_as_the_timeline_does():
    """Issue 35: "library helpers (2 programs)" in the timeline, 5 in the Memory tab: the tab counted cache entries
    (one per shape) as programs. It counts programs by name, as the timeline's lane does, and names the entries."""
    from xlakit.memory import CompiledMemory
    from xlakit.view.programs import Programs

    p = Programs()
    p.library = {"jit_iota [1]": CompiledMemory(name="jit_iota", argument_bytes=4, output_bytes=4, alias_bytes=0,
                                                temp_bytes=0),
                 "jit_iota [2]": CompiledMemory(name="jit_iota"), "jit_clip": CompiledMemory(name="jit_clip")}
    assert p.library_note().startswith("library helpers: 2 program(s) in 3 cache entries (one per shape) called "
                                       "only from inside jax/flax/optax folded (jit_clip, jit_iota; footprints 8 bytes")
    p.library = {"jit_clip": CompiledMemory(name="jit_clip")}
    assert p.library_note().startswith("library helpers: 1 program(s) called only")


def test_long_program_names_get_room_under_the_bars():
    """12 programs named like 'jit_train_step(…, i32[16,128], i32[16,128])' rotated their tick labels into the
    plot's room: at 800 px the bars were 25 px tall. The figure grows by about what the labels take."""
    from xlakit.view.breakdown import breakdown_figure

    short = breakdown_figure(_data.breakdown_frame({f"p{i}": _mem(f"p{i}", 100, 10) for i in range(12)}))
    long = breakdown_figure(_data.breakdown_frame(
        {f"jit_train_step(…, i32[{i},128], i32[{i},128])": _mem("s", 100, 10) for i in range(12)}))
    assert long.layout.height - short.layout.height >= 150, (short.layout.height, long.layout.height)


def test_a_part_that_is_0_bytes_in_every_program_has_no_legend_entry():
    """A teacher's trial (2026-12-07): notebook 01's legend listed "aliases (reused)" for a program with 0 B of
    aliases. A part none of the programs has is left out of the chart and its legend; one that any has stays."""
    from xlakit.view.breakdown import breakdown_figure

    none = breakdown_figure(_data.breakdown_frame({"a": _mem("a", 100, 10, temp=5)}))
    assert {t.name for t in none.data if t.type == "bar"} == {"arguments", "outputs", "temporaries"}
    some = breakdown_figure(_data.breakdown_frame({"a": _mem("a", 100, 10, temp=5), "b": _mem("b", 100, 10, alias=8)}))
    assert "aliases (reused)" in {t.name for t in some.data}
