"""The cache timeline in the user's terms and at scale: the user's programs first with JAX's own helpers folded
into one lane (counts and seconds kept), markers aggregated per lane and time bin, at most 30 lanes at once,
no redraw while the page does not show the timeline, and bounded logs that say what they dropped."""

from __future__ import annotations

import time

import numpy as np
import pytest

from xlakit.events import Event, EventLog
from xlakit.view import lanes as _lanes
from xlakit.view import timeline as tl


def _session(t0=1_700_000_000.0):
    """A small flax-like session: two user programs among four JAX helpers, one of them missing twice."""
    ev = []
    for i, (name, origin) in enumerate([("jit_train_step", "user"), ("jit_broadcast_in_dim", "library"),
                                        ("jit__threefry_split", "library"), ("jit_eval_step", "user"),
                                        ("jit_convert_element_type", "library"), ("jit__normal", "library")]):
        ev.append(Event("compile", name=name, duration_s=0.1 * (i + 1), origin=origin, time=t0 + i,
                        site="train.py:12 (main)" if origin == "user" else None))
        ev.append(Event("miss", name=name, reason=f"absent {name}", origin=origin, time=t0 + i + 0.5))
    ev.append(Event("hit", name="jit__normal", saved_s=0.2, duration_s=0.01, origin="library", time=t0 + 9))
    ev.append(Event("compile", name="jit_unknown", duration_s=0.05, time=t0 + 10))  # no stack seen: shown
    return ev


def test_library_programs_fold_into_one_lane_keeping_counts_and_seconds():
    cols = tl.EventColumns()
    cols.extend(_session())
    data = tl.timeline_data(cols)
    assert data.lanes == ("jit_train_step", "jit_eval_step", "jit_unknown", "library helpers (4 programs)")
    assert data.folded and set(data.library) == {"jit_broadcast_in_dim", "jit__threefry_split",
                                                 "jit_convert_element_type", "jit__normal"}
    helpers = data.counts["library helpers (4 programs)"]
    assert helpers == {"compile": 4, "miss": 4, "hit": 1}
    assert data.seconds["library helpers (4 programs)"]["compile"] == pytest.approx(0.2 + 0.3 + 0.5 + 0.6)
    assert sum(sum(c.values()) for c in data.counts.values()) == data.matched == 14
    # The misses menu lists the user's misses; the folded ones are counted, not listed.
    assert [m["label"].split(": ")[1] for m in data.misses] == ["jit_eval_step", "jit_train_step"]
    assert data.library_misses == 4
    assert "called from: train.py:12 (main)" in data.points["compile"]["hover"][0]
    fig = tl.timeline_figure(data)
    # The folded lane's label keeps its count within the label width; hovering it lists the programs.
    assert tuple(fig.layout.yaxis.ticktext)[-1] == "library helpers (4)"
    note = fig.layout.annotations[-1]
    assert note.text == "library helpers (4)" and note.y == 3 and "library helpers (4 programs)" in note.hovertext
    assert all(name in note.hovertext for name in data.library) and "4 compile" in note.hovertext

    expanded = tl.timeline_data(cols, fold_library=False)
    assert expanded.lanes[:3] == ("jit_train_step", "jit_eval_step", "jit_unknown")  # yours first
    assert set(expanded.lanes[3:]) == set(data.library) and len(expanded.misses) == 6
    html = tl.timeline_html(data, include_plotlyjs=False)
    assert "4 library program(s) of jax/flax/optax folded into one lane" in html
    assert "every matching event, not only those drawn" in html


def test_a_program_called_once_from_user_code_is_the_users():
    assert _lanes.combine_origin("library", "user") == "user"
    assert _lanes.combine_origin(None, "library") == "library"
    cols = tl.EventColumns()
    cols.extend([Event("compile", name="jit_f", origin="library"), Event("hit", name="jit_f", origin="user")])
    assert cols.origins == {"jit_f": "user"} and tl.timeline_data(cols).lanes == ("jit_f",)


def test_aggregated_markers_keep_every_count_and_the_slowest_event():
    rng = np.random.default_rng(0)
    n = 100_000
    x = np.sort(rng.uniform(0, 100, n))
    dur = rng.exponential(0.01, n)
    dur[12_345] = 9.0  # one slow compile must stay visible as its bin's marker
    group = rng.integers(0, 40, n)
    rep, count, total, first, last = _lanes.aggregate(x, dur, group, 5000)
    assert rep.size <= 5000 and count.sum() == n
    assert total.sum() == pytest.approx(dur.sum())
    assert 12_345 in set(rep.tolist()) and np.all(first <= x[rep]) and np.all(x[rep] <= last)
    small = _lanes.aggregate(x[:10], dur[:10], group[:10], 5000)
    assert small[0].tolist() == list(range(10)) and small[1].tolist() == [1] * 10


def test_100k_events_over_324_lanes_build_a_bounded_figure_and_snapshot():
    t0 = 1_700_000_000.0
    kinds = ("hit", "miss", "compile", "store")
    events = [Event(kinds[i % 4], name=f"jit_fn{i % 324}", duration_s=0.001 * (i % 7), time=t0 + 0.001 * i,
                    origin="library" if i % 324 >= 300 else "user", reason="absent" if i % 4 == 1 else None)
              for i in range(100_000)]
    cols = tl.EventColumns()
    cols.extend(events)
    start = time.perf_counter()
    data = tl.timeline_data(cols, max_points=5000)
    fig = tl.timeline_figure(data)
    built = time.perf_counter() - start
    assert data.shown <= 5500 and sum(sum(c.values()) for c in data.counts.values()) == 100_000
    # 300 user lanes + the folded one: 30 drawn one by one, 271 collapsed into a last lane, counts kept
    assert len(data.lanes) == 31 and data.hidden_lanes == 271 and data.lanes[-1] == "… 271 more program lane(s)"
    assert sum(data.counts[data.lanes[-1]].values()) == 100_000 - sum(sum(data.counts[n].values())
                                                                     for n in data.lanes[:30])
    # Bounded: 31 lanes, the saved panel, and room for the legend's rows and the title's second line.
    assert fig.layout.height <= 90 + 32 * 31 + 140 + 160 and tuple(fig.layout.yaxis.range) == (30.6, -0.6)
    scrolled = tl.timeline_data(cols, max_points=5000, lane_offset=100)
    assert scrolled.lanes[0] == "jit_fn100" and scrolled.hidden_lanes == 271
    # Up to GL_THRESHOLD markers SVG (faster than a software-rendered WebGL context), WebGL beyond; the spans
    # and the seconds-saved curve are one SVG path each either way, the curve at most SAVED_POINTS long.
    assert data.shown <= tl.GL_THRESHOLD and {t.type for t in fig.data} == {"scatter"}
    assert [(s.type, s.name) for s in fig.layout.shapes] == [("path", "hit (span)"), ("path", "compile (span)")]
    drawn_spans = sum(int((p["x"] > p["start"]).sum()) for k, p in data.points.items() if k in tl.SPAN_KINDS)
    assert sum(s.path.count("M") for s in fig.layout.shapes) == drawn_spans > 1000
    # Only xlakit's template (plotly's default one is ~7 KB the page would apply), and a title plotly.js 4
    # draws (it ignores a bare string).
    assert fig.layout.template.data.scatter == () and fig.layout.title.text.startswith("Cache events: 100,000")
    dense = tl.timeline_figure(tl.timeline_data(cols, max_points=8000))
    assert {t.type for t in dense.data if t.name in kinds} == {"scattergl"}
    assert {t.type for t in dense.data if t.name not in kinds} == {"scatter"}
    saved = next(t for t in dense.data if t.name.startswith("seconds saved"))
    assert 100 < len(saved.x) <= tl.SAVED_POINTS + 2
    # The left margin holds the longest lane label (plotly's automargin would otherwise draw the figure twice).
    assert fig.layout.yaxis.ticktext[-1] == "… 271 more lanes"  # the collapsed lanes' label, within the cap
    assert fig.layout.margin.l >= 6.5 * max(map(len, fig.layout.yaxis.ticktext)) + 12
    hover = next(h for h in data.points["hit"]["hover"] if h.startswith("<b>"))
    assert "×" in hover and "slowest:" in hover
    assert built < 10, built  # measured properly in benchmarks/timeline_scale.py


def test_columns_and_log_say_what_they_dropped():
    cols = tl.EventColumns(maxlen=5)
    cols.extend(Event("hit", name="f") for _ in range(8))
    assert len(cols) == 5 and cols.dropped == 3
    assert "3 older events dropped" in tl.timeline_html(tl.timeline_data(cols), include_plotlyjs=False)
    log = EventLog(maxlen=3)
    for kind in ("miss", "compile", "hit", "hit", "store"):
        log.emit(kind, name="f")
    assert log.dropped == 2 and log.dropped_kinds == {"miss": 1, "compile": 1}
    assert "2 older dropped" in repr(log) and log.stats().counts["miss"] == 1  # totals keep everything
    log.clear()
    assert log.dropped == 0


def test_widget_fold_toggle_and_no_redraw_while_off_screen():
    from xlakit.widgets import CacheTimeline

    log = EventLog()
    log.extend(_session())
    w = CacheTimeline(log, throttle_s=0.01)
    assert w.throttle_s == 0.01 and CacheTimeline.throttle_s.default_value == 1.0
    assert w.data.lanes[-1] == "library helpers (4 programs)"
    assert "4 of library helpers folded" in w._miss_menu.options[0][0]
    assert "4 library helper(s) folded" in w.status.value
    w._fold_box.value = False
    assert not w.data.folded and len(w.data.lanes) == 7
    w._fold_box.value = True

    drawn = []
    original = w.chart.show
    w.chart.show = lambda fig: (drawn.append(fig), original(fig))[1]
    w._clicks.visible_input.value = "1 0"  # the page: scrolled away
    assert w.on_screen is False
    log.emit("compile", name="jit_train_step", origin="user")
    time.sleep(0.3)
    assert drawn == [] and w.data.total == 14
    w._clicks.visible_input.value = "2 1"  # shown again: one redraw with what arrived
    assert len(drawn) == 1 and w.data.total == 15
    w.close()


def test_a_recompile_is_a_marker_in_its_lane_and_its_label_counts_them():
    t0 = 1_700_000_000.0
    events = [Event("compile", name="jit_step", duration_s=0.2, origin="user", time=t0)]
    events += [Event("recompile", name="jit_step", origin="user", time=t0 + i, duration_s=0.1,
                     reason=f"x: shape float32[{8 * i}] -> float32[{8 * (i + 1)}]") for i in (1, 2, 3)]
    cols = tl.EventColumns()
    cols.extend(events)
    data = tl.timeline_data(cols)
    assert data.counts["jit_step"]["recompile"] == 3
    fig = tl.timeline_figure(data)
    marker = next(t for t in fig.data if t.name == "recompile")
    assert len(marker.x) == 3 and marker.marker.symbol == "hexagon"
    assert tuple(fig.layout.yaxis.ticktext) == ("jit_step ⟳3",)
    assert "float32[16] -&gt; float32[24]" in data.points["recompile"]["hover"][1]


def test_columns_convert_only_new_rows_and_match_a_full_conversion():
    cols = tl.EventColumns(maxlen=50)
    cols.extend(_session())
    first = cols.arrays()
    assert cols.arrays() is first
    cols.extend(Event("store", name=f"jit_g{i}", bytes=i, origin="user") for i in range(45))  # drops 9
    inc = cols.arrays()
    fresh = tl.EventColumns(maxlen=50)
    fresh.extend([*_session(), *(Event("store", name=f"jit_g{i}", bytes=i, origin="user") for i in range(45))])
    full = fresh.arrays()
    assert inc["time"].size == 50 and cols.dropped == 9
    for f in ("kind", "name", "origin", "kind_code"):
        assert inc[f].tolist() == full[f].tolist()
    assert np.array_equal(inc["bytes"], full["bytes"], equal_nan=True)
    assert inc["lane"].tolist() == [cols.lanes[n] for n in inc["name"]]


def test_widget_scrolls_the_lane_window_with_lanes_from():
    from xlakit.widgets import CacheTimeline

    w = CacheTimeline([Event("compile", name=f"jit_fn{i}", origin="user") for i in range(45)], live=False)
    assert len(w.data.lanes) == 31 and w.data.hidden_lanes == 15 and w._offset_box.layout.display == ""
    w._offset_box.value = 15
    assert w.data.lanes[0] == "jit_fn15" and w.data.lanes[29] == "jit_fn44"
    assert "15 lane(s) collapsed into the last" in w.status.value
    w.close()


def test_a_long_program_name_keeps_most_of_a_narrow_column_for_the_plot():
    """Fault: the lane labels' margin grew with the longest program name (7 px a character, up to 600 px), so a
    flax program named by its module path left an 800 px notebook column ~90 px of plot. Labels are now at most
    20 characters (start … end), drawn as annotations beside the lanes whose hover shows the whole name."""
    long = "jit_" + "model.encoder.layers_3.attention.query_key_value_projection" * 2
    short = "jit_eval_step"
    cols = tl.EventColumns()
    cols.extend([Event("compile", name=long, duration_s=0.2, origin="user", time=1.0),
                 Event("compile", name=short, duration_s=0.1, origin="user", time=2.0)])
    data = tl.timeline_data(cols)
    fig = tl.timeline_figure(data)
    labels = dict(zip(data.lanes, fig.layout.yaxis.ticktext, strict=True))
    assert labels[short] == short
    label = labels[long]
    assert len(label) == 20 and "…" in label and long.startswith(label.split("…")[0])
    assert long.endswith(label.split("…")[1])
    assert fig.layout.margin.l <= 24 + 7 * 20  # 164 px: a 368 px cell keeps over half for the plot
    assert not fig.layout.yaxis.showticklabels  # drawn as annotations: the same text, with the whole name on hover
    drawn = {a.text: a.hovertext for a in fig.layout.annotations}
    assert set(drawn) == {label, short} and long in drawn[label]
    assert long in data.points["compile"]["hover"][0] or long in " ".join(data.points["compile"]["hover"])
    # with a recompile badge the label still fits: the badge takes from the name, not from the plot
    cols.extend([Event("recompile", name=long, duration_s=0.1, origin="user", time=3.0 + i, reason="x: shape")
                 for i in range(12)])
    badged = tl.timeline_figure(tl.timeline_data(cols))
    label = dict(zip(tl.timeline_data(cols).lanes, badged.layout.yaxis.ticktext, strict=True))[long]
    assert label.endswith(" ⟳12") and len(label) == 20 and badged.layout.margin.l <= 24 + 7 * 20, label
