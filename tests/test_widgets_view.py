"""Rendering separated from the widgets (``xlakit.view``): one formatter, one table model, charts that are
sent complete, updates on the kernel's thread, and the views' content fixes (signatures, one disk total,
miss explanations, what a report leaves out)."""

from __future__ import annotations

import re
import threading

import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xlakit
from xlakit.events import Event, EventLog
from xlakit.view import Column, Table, byte_ticks, fmt_bytes, fmt_seconds
from xlakit.widgets import CacheBrowser, CacheTimeline, Chart


def test_one_byte_formatter_in_binary_units_and_seconds_with_three_digits():
    assert [fmt_bytes(n) for n in (0, 512, 1536, 3 * 2**20, -4 * 2**20, None)] == \
        ["0 B", "512 B", "1.5 KiB", "3.0 MiB", "-4.0 MiB", "not reported"]
    # %xlakit stats printed compile_s 2.4176840130003256: seconds read 2.42 s, 12.3 ms, 45 µs, 2 min 5 s.
    assert [fmt_seconds(s) for s in (2.4176840130003256, 0.0123, 4.5e-5, 125.0, 0, None)] == \
        ["2.42 s", "12.3 ms", "45 µs", "2 min 5 s", "0 s", "not reported"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, max_size=6))
def test_byte_axis_ticks_are_binary_units_covering_the_data(values):
    """Charts said kB/MB (decimal) while tables said KiB/MiB: axis ticks are round binary-unit values."""
    vals, text = byte_ticks(values)
    assert len(vals) == len(text) and len(vals) <= 12
    for v, t in zip(vals, text, strict=True):
        m = re.fullmatch(r"(-?[\d.]+) (B|KiB|MiB|GiB|TiB)", t)
        assert m, t
        unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[m.group(2)]
        assert float(m.group(1)) * unit == pytest.approx(v)
    hi, lo = max([0, *values]), min([0, *values])
    if hi > lo and len(vals) > 1:
        step = vals[1] - vals[0]
        assert vals[0] <= lo and vals[-1] >= hi - step  # the ticks span the data, to within one step
        # at least 4 drawn inside the data, unless whole bytes allow no finer step (a 2 B span)
        inside = sum(lo <= v <= hi for v in vals)
        assert inside >= 4 or (text[1].endswith(" B") and step == 1 and hi - lo < 3), (values, text)


def test_byte_axis_draws_more_than_two_ticks_over_negative_aliases():
    """A JupyterLab trial (2026-12-06): bars from -28 MiB (aliases) to 75 MiB had ticks in steps of 50 MiB, so
    only "0 B" and "50 MiB" were drawn."""
    vals, text = byte_ticks([-28 * 2**20, 75 * 2**20])
    assert [t for v, t in zip(vals, text, strict=True) if -28 * 2**20 <= v <= 75 * 2**20] == \
        ["-20 MiB", "0 B", "20 MiB", "40 MiB", "60 MiB"]


def test_table_renders_the_same_cells_as_text_and_html():
    t = Table([Column("name", "name"), Column("size", "size", "bytes"), Column("s", "compile", "seconds")],
              [{"name": "jit_f", "size": 1572864, "s": 2.4176840130003256}, {"name": "jit_g", "size": None}],
              caption="entries", max_rows=1)
    text = t.to_text()
    assert "1.5 MiB" in text and "2.42 s" in text and "1 more row(s)" in text and "None" not in text
    html = t.to_html()
    assert "data-bytes='1572864'" in html and "1.5 MiB" in html and "xlakit-table-wrap" in html
    assert "jit_g" not in html  # max_rows
    assert "2.4176840130003256" not in text


def test_chart_is_sent_complete_in_one_outputs_message():
    """A FigureWidget was created empty and filled later (blank charts after Run All). A Chart's only state
    is one complete plotly output, replaced whole by show()."""
    import plotly.graph_objects as go

    sent = []
    c = Chart()
    c.observe(lambda ch: sent.append(ch["new"]), names=["outputs"])
    c.show(go.Figure(go.Bar(x=["a", "b"], y=[1, 2], name="bars")))
    c.show(go.Figure([go.Bar(x=["a"], y=[3], name="bars"), go.Scatter(x=[0], y=[1], name="line")]))
    assert len(sent) == 2  # one message per update
    (out,) = sent[-1]
    spec = out["data"]["application/vnd.plotly.v1+json"]
    assert [t["name"] for t in spec["data"]] == ["bars", "line"]
    assert spec["layout"]["meta"]["xlakit_chart"] == c.chart_id
    assert c.traces() == [{"type": "bar", "name": "bars", "points": 1}, {"type": "scatter", "name": "line",
                                                                         "points": 1}]
    state = c.get_state()
    assert "_esm" not in state and len(str(state)) < 20_000  # no widget code in the saved state
    c.close()


def test_chart_sends_an_explicit_height_and_reserves_it():
    """A chart without ``layout.height`` drew 0 px high in JupyterLab (plotly's responsive mode sized it to 100%
    of an output with no height): the spec carries the height, is not responsive, and the output keeps it."""
    import plotly.graph_objects as go

    c = Chart(go.Figure(go.Bar(y=[1, 2])))
    spec = c.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert spec["layout"]["height"] == 360 and c.layout.min_height == "360px"
    assert "responsive" not in spec["config"]
    c.show(go.Figure(go.Bar(y=[1]), layout=dict(height=450)))
    assert c.outputs[0]["data"]["application/vnd.plotly.v1+json"]["layout"]["height"] == 450
    assert c.layout.min_height == "450px"
    c.close()


class _Loop:
    """Stands in for the kernel's IO loop: records callbacks instead of running them."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, fn):
        self.callbacks.append((threading.current_thread().name, fn))


def test_refresh_threads_hand_widget_updates_to_the_kernel_thread():
    """Updates used to be sent from worker threads; a worker now only queues them on the kernel's loop."""
    log = EventLog()
    w = CacheTimeline(log, throttle_s=0.0)
    loop = _Loop()
    w._loop = loop
    drawn_before = w.data.total
    log.emit("miss", name="jit_late", key="jit_late-1", reason="no entry")
    for _ in range(200):
        if loop.callbacks:
            break
        threading.Event().wait(0.01)
    assert loop.callbacks and loop.callbacks[0][0].startswith("xlakit-CacheTimeline")
    assert w.data.total == drawn_before  # nothing drawn from the worker thread
    loop.callbacks[0][1]()  # the kernel's thread runs it
    assert w.data.total == drawn_before + 1
    w.close()


def test_timeline_menu_explains_a_miss():
    log = EventLog()
    log.extend([Event(kind="miss", name="jit_f", key="jit_f-1", reason="no entry with this key", time=1.0),
                Event(kind="compile", name="jit_f", duration_s=0.5, time=1.6)])
    w = CacheTimeline(log, live=False)
    options = [v for _, v in w._miss_menu.options if v != -1]
    assert options == [0]
    w._miss_menu.value = 0
    assert "no entry with this key" in w.miss_explanation.value and "jit_f-1" in w.miss_explanation.value
    w.close()


def test_a_miss_after_a_retrace_says_what_changed_not_only_that_the_key_is_new():
    """Fault: the miss of a train step whose batch changed was explained as "no entry for this key" while the
    recompile recorded just before it held "x: shape float32[64,256] -> float32[96,256]"."""
    log = EventLog()
    change = "x: shape float32[64,256] -> float32[96,256]"
    log.extend([Event(kind="miss", name="jit_step", key="jit_step-1", reason="no entry for this key", time=1.0),
                Event(kind="recompile", name="jit_step", reason=change, time=2.0),
                Event(kind="miss", name="jit_step", key="jit_step-2", reason="no entry for this key", time=2.1),
                Event(kind="miss", name="jit_step", key="jit_step-3", reason="no entry for this key", time=3.0)])
    w = CacheTimeline(log, live=False)
    assert change in w.explain_miss(2) and "jit_step-2" in w.explain_miss(2)
    assert "retraced" not in w.explain_miss(0)   # the first compile: nothing changed
    assert "retraced" not in w.explain_miss(3)   # a later miss with no retrace of its own
    # the saved notebook's "Latest misses and why" table says it too (it kept only the cache's reason)
    snapshot = w.to_html(include_plotlyjs=False)
    assert snapshot.count("it was retraced just before because x: shape float32[64,256] -&gt; float32[96,256]") == 1
    w.close()


def test_a_click_on_a_miss_marker_explains_that_miss():
    """The page's click message (hidden Text, ``"<seq> <rows>"``) explains the clicked miss, the same text the
    menu shows; a click on a compile, a repeated click and a malformed message behave; the bridge saves no
    widget code."""
    from xlakit.widgets._clicks import parse_click

    log = EventLog()
    log.extend([Event(kind="miss", name="jit_f", key="jit_f-1", reason="no entry with this key", time=1.0),
                Event(kind="compile", name="jit_f", duration_s=0.5, time=1.6),
                Event(kind="miss", name="jit_g", key="jit_g-1", reason="compile options differ", time=2.0)])
    w = CacheTimeline(log, live=False)
    miss = next(t for t in w.figure.data if t.name == "miss")
    assert sorted(miss.customdata) == [0, 2]  # each marker carries its event row
    w._clicks.input.value = "1 1"  # the compile: nothing shown, no error
    assert w.miss_explanation.value == "" and not w.errors
    w._clicks.input.value = "2 1 2"  # a click hitting the compile and the jit_g miss
    assert "compile options differ" in w.miss_explanation.value and w._miss_menu.value == 2
    w._miss_menu.value = 0
    menu_text = w.miss_explanation.value
    w._miss_menu.value = -1
    w._clicks.input.value = "3 0"
    assert w.miss_explanation.value == menu_text and "jit_f-1" in menu_text
    w.miss_explanation.value = ""
    w._clicks.input.value = "4 0"  # the same miss again: a new message, shown again
    assert w.miss_explanation.value == menu_text
    assert parse_click("5 x 7 -1") == [7] and parse_click("") == []
    for bridge_widget in w._clicks.widgets:
        state = bridge_widget.get_state()
        assert "_esm" not in state and len(str(state)) < 3_000
    assert not w.errors
    w.close()


def test_cache_browser_shows_signatures_and_one_disk_total(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    try:
        f = cache.jit(lambda x: x * 2)
        f(jnp.ones((8, 4)))
        f(jnp.ones((16, 4)))
        b = CacheBrowser(cache)
        labels = [label for label, _ in b._selector.options]
        assert any("float32[8,4]" in label or "f32[8,4]" in label for label in labels), labels
        assert any("[16,4]" in label for label in labels), labels
        assert len(set(labels)) == 2
        assert "arguments (dtype[shape]" in b.table_html.value
        status_total = int(re.search(r"data-bytes='(\d+)'", b.status.value).group(1))
        assert status_total == int(b.totals["size_bytes"].sum())  # the status line and the table agree
        assert "white-space: nowrap" in xlakit._text.theme.STYLE and "xlakit-nowrap" in b.totals_html.value
        b.close()
    finally:
        cache.close()


def _count_executable_caches(monkeypatch) -> list:
    """Records every ExecutableCache construction (each installs JAX hooks)."""
    made: list = []
    init = xlakit.ExecutableCache.__init__

    def counting(self, *args, **kwargs):
        made.append(args)
        init(self, *args, **kwargs)

    monkeypatch.setattr(xlakit.ExecutableCache, "__init__", counting)
    return made


def test_cache_browser_lists_a_folder_without_jax_hooks_and_says_when_arguments_are_not_recorded(
        tmp_path, monkeypatch):
    """CacheBrowser made an ExecutableCache (installing JAX's compile hooks) just to list, verify and evict, and
    showed a blank where an entry records no argument signature. It lists through the folder API, makes an
    ExecutableCache only to explain (closed after), and writes "arguments not recorded"."""
    from xlakit._jax import hooks
    from xlakit.store import LocalStore

    folder = tmp_path / "cache"
    writer = xlakit.ExecutableCache(folder, log=EventLog())
    writer.jit(lambda x: x * 2)(jnp.ones((8, 4)))
    writer.close()
    store = LocalStore(folder)
    (info,) = store.entries()
    store.put(info.partition, "0" * 64, {"name": "jit_old", "compile_s": 0.5}, b"an entry without a signature")
    store.put(info.partition, info.key + "-aot", {"name": "jit__lambda"}, b"xlakit 0.1's loadable twin")
    users = hooks._users
    made = _count_executable_caches(monkeypatch)

    b = CacheBrowser(str(folder))
    assert made == [] and hooks._users == users
    labels = sorted(label for label, _ in b._selector.options)
    assert len(labels) == 2  # the legacy "-aot" twin is no program of its own
    assert labels[0].startswith("jit__lambda(f32[8,4])") and labels[1].startswith("jit_old(arguments not recorded)")
    assert "f32[8,4]" in b.table_html.value and "arguments not recorded" in b.table_html.value
    assert all(reason is None for _, reason in b.verify()) and "0 bad" in b.result.value
    b.select("0" * 64)
    assert b.evict_selected() == [(info.partition, "0" * 64)] and list(b.frame["name"]) == ["jit__lambda"]
    assert made == [] and hooks._users == users  # verify and evict installed nothing either

    b.select(info.key)
    (explanation,) = b.explain_selected()
    assert explanation.status == "hit" and len(made) == 1 and hooks._users == users  # made, then closed
    b.close()
    board = xlakit.widgets.dashboard(cache=folder)  # a path: the Cache and Memory tabs read the folder
    assert list(board.browser.frame["name"]) == ["jit__lambda"] and len(made) == 1
    assert list(board.breakdown.memories) == ["jit__lambda"]
    board.close()

    from xlakit import report

    html = report.build(cache=folder, log=None, allocator=False, live=False, include_plotlyjs=False)
    assert "f32[8,4]" in html and str(info.size_bytes) in html and len(made) == 1


def test_signature_text_names_dtype_shape_sharding_and_donation():
    """The selector and the table show each argument's dtype[shape], sharding and donation; a header recorded
    by a 2-device program (Shardy sharding) reads ``f32[8,4] @mesh[{"x"}, {}]``."""
    from xlakit.view.cache import entry_label, signature_text
    from xlakit.view.folder import NO_SIGNATURE, signature_of

    recorded = [{"donation": None, "dtype": "f32", "shape": "8x4", "sharding": '#sdy.sharding<@mesh, [{"x"}, {}]>'},
                {"donation": "true", "dtype": "i32", "shape": "scalar", "sharding": "{devices=[2]<=[2]}"}]
    assert signature_text(recorded) == 'f32[8,4] @mesh[{"x"}, {}], i32[] {devices=[2]<=[2]} donated'
    assert signature_of({"signature": recorded}) == signature_text(recorded)
    assert signature_of({}) == signature_of({"signature": "f32[2]"}) == NO_SIGNATURE == "arguments not recorded"
    assert signature_of({"signature": []}) == "no arguments"
    label = entry_label({"name": "n" * 500, "signature": None, "size_bytes": 2048, "partition": "p", "key": "k"})
    assert label == "n" * 79 + "…(arguments not recorded) · 2.0 KiB · p · k"


def test_report_says_what_it_leaves_out(tmp_path):
    import xlakit.report

    cache = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    try:
        cache.jit(lambda x: x + 1)(jnp.ones((5,)))
        html = xlakit.report.build(cache=cache, log=None, include_plotlyjs=False)
    finally:
        cache.close()
    assert "What this report leaves out" in html
    assert "The cache timeline: no event log was given" in html
    assert "Hits per entry" in html and "hits (this process)" not in html
    assert "of the process that wrote this report (pid" in html
    source = open(xlakit.report.__file__).read()
    assert not re.search(r"^\s*(from|import) xlakit\.widgets", source, re.M)  # no widget internals


def test_plotly_js_once_per_document_and_again_when_its_cell_reruns(monkeypatch):
    """plotly.js goes with the first figure only; re-running the cell that carried it sends it again (its
    old output is replaced), while other cells and a second figure of the same run do not."""
    import plotly.graph_objects as go

    from xlakit.view import plotly_html

    fig = go.Figure(go.Bar(x=["a"], y=[1]))
    request = {"cell": "cell-A", "msg": "m1"}
    monkeypatch.setattr(plotly_html, "_current_request", lambda: (request["cell"], request["msg"]))
    plotly_html.reset_once()
    has = lambda html: "DecompressionStream" in html  # noqa: E731
    assert has(plotly_html.figure_html(fig))            # first figure: the loader
    assert not has(plotly_html.figure_html(fig))        # same run of the same cell
    request.update(cell="cell-B", msg="m2")
    assert not has(plotly_html.figure_html(fig))        # another cell
    request.update(cell="cell-A", msg="m3")
    assert has(plotly_html.figure_html(fig))            # the loader's cell again: its output is replaced
    assert not has(plotly_html.figure_html(fig, False)) and has(plotly_html.figure_html(fig, True))
    plotly_html.reset_once()


def test_every_event_kind_has_a_timeline_marker_and_lane_offset():
    """A new event kind (the shared tier's remote_hit, upload, claim, ...) must never make the timeline raise."""
    from xlakit.events import KINDS
    from xlakit.view.timeline import KIND_OFFSET, KIND_STYLE

    assert set(KINDS) <= set(KIND_STYLE) and set(KINDS) <= set(KIND_OFFSET)
    offsets = [KIND_OFFSET[k] for k in KINDS]
    assert len(set(offsets)) == len(offsets)  # no two kinds share a height, so none hides another


def test_widget_workers_are_stopped_before_the_interpreter_exits():
    """A daemon worker still inside JAX while Python finalized ended a kernel with "terminate called ... FATAL:
    exception not rethrown" (seen at a kernel's exit with a MemoryExplorer and an AllocatorPanel open): every live
    worker is stopped by an atexit handler first."""
    import time

    from xlakit.widgets import _base

    calls = []
    worker = _base.Worker(lambda: calls.append(time.perf_counter()), 0.005, name="xlakit-test-worker")
    time.sleep(0.05)
    assert worker.alive and calls and worker in _base._live_workers
    _base._stop_live_workers()  # what atexit runs at the interpreter's exit
    assert not worker.alive
