"""Widget state after given inputs and after clicks through the widget API; snapshots carry the numbers."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import traitlets

import xlakit
from xlakit.events import Event, EventLog
from xlakit.memory import compiled_memory, reset_peak
from xlakit.widgets import AllocatorPanel, CacheBrowser, CacheTimeline, LiveArrays, MemoryBreakdown, _data, dashboard

MiB = 2**20


def _wait(predicate, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# -- fixtures -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def programs():
    def matmul(x, y):
        return jnp.tanh(x @ y).sum(0)

    def double(x):
        return x * 2

    cm = jax.jit(matmul).lower(jnp.ones((256, 512)), jnp.ones((512, 128))).compile()
    cd = jax.jit(double, donate_argnums=0).lower(jnp.ones((1024, 1024))).compile()
    return {"matmul": cm, "scale": cd}


def square(x):
    return x * x


def cube(x):
    return x * x * x


@pytest.fixture
def cache(tmp_path):
    c = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    c.jit(square)(jnp.ones((64, 64)))
    c.jit(cube)(jnp.ones((32,)))
    yield c
    c.close()


class FakeDevice:
    """A GPU-like device: ``memory_stats()`` from a dict; optionally a native reset (or one that fails)."""

    platform = "fakegpu"

    def __init__(self, id, in_use, peak, native=False, broken=False):
        self.id = id
        self.stats = {"bytes_in_use": in_use, "peak_bytes_in_use": peak, "bytes_limit": 16 * 2**30,
                      "largest_alloc_size": 4096, "num_allocs": 7}
        if native:
            self.reset_peak_memory_stats = self._native
        if broken:
            self.reset_peak_memory_stats = self._broken

    def memory_stats(self):
        return dict(self.stats)

    def allocate(self, n):
        self.stats["bytes_in_use"] += n
        self.stats["peak_bytes_in_use"] = max(self.stats["peak_bytes_in_use"], self.stats["bytes_in_use"])

    def _native(self):
        self.stats["peak_bytes_in_use"] = self.stats["bytes_in_use"]

    def _broken(self):
        raise RuntimeError("boom: the allocator refused")

    def __str__(self):
        return f"fake:{self.id}"


# -- MemoryBreakdown ----------------------------------------------------------------------------------------

def test_memory_breakdown_bars_units_sorting_and_selection(programs):
    w = MemoryBreakdown(programs)
    scale = compiled_memory(programs["scale"])  # f32[1024,1024] donated: 4 MiB in, 4 MiB out, 4 MiB aliased
    matmul = compiled_memory(programs["matmul"])
    assert w.program_names == ("matmul", "scale")
    assert w.frame.loc["scale", "argument_bytes"] == scale.argument_bytes == 4 * MiB
    assert w.frame.loc["scale", "alias_bytes"] == scale.alias_bytes == 4 * MiB
    bars = {t.name: t for t in w.figure.data}
    assert bars["arguments"].type == "bar" and list(bars["arguments"].x) == ["matmul", "scale"]
    assert bars["arguments"].y == (float(matmul.argument_bytes), float(scale.argument_bytes))
    assert bars["aliases (reused)"].y[1] == -float(scale.alias_bytes)  # a reduction, below zero
    # On CPU XLA's peak leaves out temporaries: the dash says so, and a second dash marks the footprint.
    xla_peak = bars["XLA:CPU's peak_memory_in_bytes (no temporaries: not memory.peak)"]
    assert xla_peak.y == (float(matmul.peak_bytes), float(scale.peak_bytes))
    assert bars["footprint (one run reserves)"].y == (float(matmul.footprint_bytes), float(scale.footprint_bytes))
    # The byte axis and tooltips use binary units (MiB), never plotly's decimal k/M.
    ticks = list(w.figure.layout.yaxis.ticktext)
    assert any(t.endswith("MiB") for t in ticks) and not any(t.endswith(("kB", "MB", "M", "k")) for t in ticks)
    assert bars["arguments"].customdata[1] == "4.0 MiB" and "%{y" not in bars["arguments"].hovertemplate

    w._unit_toggle.value = "percent"  # the toggle, as a click sets it
    assert w.unit == "percent"
    bars = {t.name: t for t in w.figure.data}
    assert bars["arguments"].y[1] == pytest.approx(50.0) and bars["aliases (reused)"].y[1] == pytest.approx(-50.0)
    assert bars["arguments"].y[0] == pytest.approx(100.0 * matmul.argument_bytes /
                                                   (matmul.argument_bytes + matmul.output_bytes))

    w._sort_menu.value = "total"  # scale (8 MiB) before matmul (768 KiB)
    assert w.program_names == ("scale", "matmul")
    assert list(w.figure.data[0].x) == ["scale", "matmul"]
    w.sort = "name"
    assert w.program_names == ("matmul", "scale")

    w._program_menu.value = "matmul"  # pick in the dropdown
    assert w.selected == "matmul"
    assert w.largest is not None and not w.largest.empty
    assert list(w.largest["bytes"]) == sorted(w.largest["bytes"], reverse=True)
    assert w.largest["bytes"].iloc[0] == 256 * 512 * 4  # x: f32[256,512]
    assert w.liveness is not None and w.liveness["live_bytes"].max() >= matmul.argument_bytes
    assert "Largest buffers at the peak: matmul" in w.details.value
    assert len(w.detail_figure.data) >= 1

    w.select("scale")
    assert w.selected == "scale" and w._program_menu.value == "scale"
    w._program_menu.value = w._program_menu.options[0][1]  # "—": no program
    assert w.selected is None and w.largest is None
    w._program_menu.value = "scale"

    html = w._repr_mimebundle_()["text/html"]
    for n in (scale.argument_bytes, matmul.argument_bytes, matmul.output_bytes, matmul.peak_bytes):
        assert f"data-bytes='{n}'" in html
    assert "Largest buffers at the peak: scale" in html
    assert not w.errors
    w.close()


def test_memory_breakdown_rejects_bad_input(programs):
    with pytest.raises(TypeError):
        MemoryBreakdown(programs, colour="red")
    with pytest.raises(traitlets.TraitError):
        MemoryBreakdown(programs, unit="MiB")
    with pytest.raises(traitlets.TraitError):
        MemoryBreakdown(programs, selected="nope")
    with pytest.raises(TypeError, match="MemoryBreakdown takes"):
        MemoryBreakdown(42)
    empty = MemoryBreakdown()
    assert empty.program_names == () and "No programs" in empty.to_html()
    empty.close()


def test_memory_breakdown_of_a_cache_loads_the_selected_entry_and_a_folder_says_why_there_are_no_buffers(cache):
    w = MemoryBreakdown(cache)
    assert set(w.program_names) == {"jit_square", "jit_cube"}
    entries = cache.entries().set_index("name")
    assert w.frame.loc["jit_square", "argument_bytes"] == entries.loc["jit_square", "argument_size_in_bytes"] == 16384
    w.select("jit_square")  # stored by cache.jit: only the XLA executable, which cannot be loaded back
    assert "no loadable entry" in w.detail_note and "records the memory totals" in w.detail_note
    assert w.largest is None and not w.errors
    cache.compile(jax.jit(cube), jnp.ones((32,)))  # a hit that makes the jit_cube entry loadable
    w.refresh()
    w.select("jit_cube")    # an ExecutableCache loads it (no compile): buffers, peak and pictures
    assert "loaded (not compiled)" in w.detail_note and not w.errors
    assert w.largest["bytes"].max() == 32 * 4 and w.peak is not None
    assert w.lifetime_figure.layout.meta["xlakit_lifetime"]["shown"] > 0
    w.close()
    folder = MemoryBreakdown(cache.store)  # a folder cannot load programs: it says so
    folder.select("jit_square")
    assert folder.largest is None and "records the memory totals, not the buffer assignment" in folder.detail_note
    assert not folder.errors
    folder.close()


def test_memory_breakdown_of_a_loaded_bundle(tmp_path):
    bundle = pytest.importorskip("xlakit.bundle")

    def model(params, x):
        return jnp.tanh(x @ params["w"]) + params["b"]

    params = {"w": jnp.ones((16, 8)), "b": jnp.zeros((8,))}
    bundle.export_bundle(model, params, jnp.ones((1, 16)), tmp_path / "b", batch_sizes=(1, 4))
    loaded = bundle.load_bundle(tmp_path / "b", progress=False, log=EventLog())
    w = MemoryBreakdown(loaded)
    assert len(w.program_names) == 2
    by_batch = {r.batch_size: r.module for r in loaded.reports}
    assert set(w.program_names) == set(by_batch.values())
    w.select(by_batch[4])
    assert w.largest is not None and not w.largest.empty
    assert w.frame.loc[by_batch[4], "argument_bytes"] > w.frame.loc[by_batch[1], "argument_bytes"]
    w.close()


# -- AllocatorPanel -----------------------------------------------------------------------------------------

def test_allocator_panel_rows_and_reset_buttons():
    d0, d1 = FakeDevice(9101, 100, 5000, native=True), FakeDevice(9102, 200, 7000)
    p = AllocatorPanel([d0, d1], auto_refresh=False)
    assert p.peaks() == {"fake:9101": 5000, "fake:9102": 7000}
    row = p.rows[0]
    assert (row["in_use"], row["limit"], row["largest_alloc"], row["num_allocs"]) == (100, 16 * 2**30, 4096, 7)
    assert "data-bytes='5000'" in p.cells["fake:9101"]["peak"].value
    assert "lifetime" in p.cells["fake:9101"]["peak"].value

    p.reset_buttons["fake:9101"].click()
    assert p.last_reset["fake:9101"].method == "native"
    assert p.peaks()["fake:9101"] == 100  # the native reset set the peak to what is in use now
    assert "native" in p.cells["fake:9101"]["method"].value
    assert "reset_peak_memory_stats" in p.cells["fake:9101"]["method"].value

    d1.allocate(2000)  # in use 2200, peak stays 7000
    p.reset_all_button.click()
    assert p.reset_all_result.method == "mixed:baseline,native"
    assert "mixed:baseline,native" in p.reset_all_label.value
    assert p.peaks()["fake:9102"] == 7000 and "at most" in p.cells["fake:9102"]["peak"].value
    d1.allocate(10_000)  # a new peak after the baseline reset is exact
    p.refresh_button.click()
    assert p.peaks()["fake:9102"] == 12_200 and "exact" in p.cells["fake:9102"]["peak"].value
    assert [b for _, b in p.history["fake:9102"]] == [200, 200, 2200, 12_200]  # one sample per refresh

    html = p._repr_mimebundle_()["text/html"]
    assert "data-bytes='12200'" in html and "mixed:baseline,native" in html and "<svg" in html
    # a reset made elsewhere in the process (a probe, reset_peak()): the peak is measured from it, and the last
    # reset column says so (it stayed empty while the peak read "since reset: +114 MiB")
    time.sleep(0.6)
    reset_peak(d0)
    p.refresh_button.click()
    assert "by reset_peak() outside this panel" in p.cells["fake:9101"]["method"].value
    # Every column shown: these devices report a limit, a largest allocation and a count; each cell is labelled
    # (no header row above rows that scrolled sideways as a whole) and a row wraps in a narrow output.
    box = p._rows[0].box
    assert box.layout.flex_flow == "row wrap" and all(c.layout.display is None for c in box.children)
    assert [c.children[0].value for c in box.children][4:7] == [
        f"<span class='xlakit-note'>{h}</span>" for h in ("limit", "largest alloc.", "allocations")]
    assert not p.errors
    p.close()


def test_allocator_panel_leaves_out_what_no_device_reports():
    """On CPU XLA reports no limit, largest allocation or allocation count: those columns are left out (the
    panel's note says so) instead of a row of "not reported" that pushed the last columns off screen."""
    p = AllocatorPanel(auto_refresh=False)
    shown = [k for k, c in p._rows[0].columns.items() if c.layout.display != "none"]
    assert shown == ["device", "reset", "in_use", "peak", "spark", "method"], shown
    assert "not reported" in p.notes.value  # the note says what is left out
    p.close()


def test_allocator_panel_shows_callback_errors_inside():
    p = AllocatorPanel([FakeDevice(9103, 1, 2, broken=True)], auto_refresh=False)
    p.reset_buttons["fake:9103"].click()  # raises inside the handler
    assert p.errors and "RuntimeError: boom: the allocator refused" in p.errors[-1]
    assert "boom" in p.error_area.value and p.error_area.layout.display != "none"
    p.clear_errors()
    assert p.error_area.layout.display == "none"
    p.close()


def test_allocator_panel_auto_refresh_thread_stops_on_close():
    d = FakeDevice(9104, 10, 10)
    p = AllocatorPanel([d], refresh_s=0.02)
    assert p.threads_alive == 1
    _wait(lambda: len(p.history["fake:9104"]) >= 4, what="auto refreshes")
    p.auto_refresh = False
    assert p.threads_alive == 0
    p._auto_box.value = True  # the checkbox
    assert p.threads_alive == 1
    worker = p._worker
    p.close()
    assert p.threads_alive == 0 and not worker.alive
    n = len(p.history["fake:9104"])
    time.sleep(0.1)
    assert len(p.history["fake:9104"]) == n
    with pytest.raises(ValueError):
        AllocatorPanel([d], refresh_s=0)
    with pytest.raises(TypeError):
        AllocatorPanel([d], interval=1)


def test_allocator_panel_cpu_peak_drops_after_reset():
    p = AllocatorPanel(auto_refresh=False)
    cpu = str(jax.local_devices()[0])
    p.reset()
    start = p.peaks()[cpu]
    block = np.ones(200 * MiB // 8)
    block[::512] += 1
    del block
    p.refresh()
    high = p.peaks()[cpu]
    assert high - start >= 190 * MiB
    p.reset_buttons[cpu].click()
    assert p.last_reset[cpu].method == "clear_refs"
    assert p.peaks()[cpu] < high - 150 * MiB
    assert "clear_refs" in p.cells[cpu]["method"].value
    p.close()


# -- CacheTimeline ------------------------------------------------------------------------------------------

def _events(n, t0=1_700_000_000.0):
    kinds = ["hit", "miss", "compile", "store"]
    return [Event(kind=kinds[i % 4], name=f"jit_f{i % 3}", key=f"jit_f{i % 3}-k{i}", duration_s=0.01 * (i % 5),
                  bytes=4096 if i % 4 == 3 else None, reason="absent" if i % 4 == 1 else None, partition="cpu-p",
                  saved_s=0.25 if i % 4 == 0 else None, time=t0 + 0.01 * i) for i in range(n)]


def _spans(fig, name):
    """(start s, end s, y) of each segment of the span shape ``name`` (an SVG path ``M x,y L x,y ...``)."""
    import re

    path = next(s.path for s in fig.layout.shapes if s.name == name)
    return [(float(a), float(b), float(y)) for a, y, b, y2 in
            re.findall(r"M([-\d.e+]+),([-\d.e+]+)L([-\d.e+]+),([-\d.e+]+)", path) if y == y2]


def saved_axis_ok(fig) -> bool:
    """The seconds-saved curve is on its own y axis (a second panel) whose ticks carry a unit."""
    saved = next(t for t in fig.data if t.name.startswith("seconds saved"))
    axis = fig.layout["yaxis" + saved.yaxis[1:]]
    return saved.yaxis != "y" and axis.ticksuffix in (" ms", " s") and axis.overlaying is None


def test_cache_timeline_draws_filters_and_follows_the_log():
    log = EventLog()
    log.extend(_events(40))
    w = CacheTimeline(log, throttle_s=0.01)
    assert w.data.total == 40 and w.data.lanes == ("jit_f0", "jit_f1", "jit_f2")
    assert {t.type for t in w.figure.data} == {"scatter"}  # SVG up to 5,000 markers (WebGL above)
    names = [t.name for t in w.figure.data]
    assert set(names) == {"hit", "miss", "compile", "store", "seconds saved (cumulative)"}
    # The spans of each span kind are one SVG path (a layout shape), hidden with their kind from the legend.
    assert {(s.name, s.type, s.legendgroup) for s in w.figure.layout.shapes} == {
        ("compile (span)", "path", "compile"), ("hit (span)", "path", "hit")}
    # Every kind sits at its own height in its lane: a hit right after a compile is never hidden under it.
    ys = {t.name: set(t.y) for t in w.figure.data if t.name in ("hit", "compile")}
    assert not ys["hit"] & ys["compile"]
    # Compiles are spans from start to end (Event.time is the end), not points at their end.
    spans = _spans(w.figure, "compile (span)")
    start, end, lane = spans[0]
    assert end - start == pytest.approx(0.02, abs=1e-6) and lane == 2  # event 2 (jit_f2): duration 0.02 s
    compiles = w.data.points["compile"]
    assert len(spans) == int((compiles["x"] > compiles["start"]).sum()) == 8  # each compile with a duration
    # Seconds saved has its own panel and axis, in readable units.
    assert saved_axis_ok(w.figure)
    saved = next(t for t in w.figure.data if t.name.startswith("seconds saved"))
    assert saved.y[-1] == pytest.approx(0.25 * 10)
    assert tuple(w.figure.layout.yaxis.ticktext) == ("jit_f0", "jit_f1", "jit_f2")

    w._kind_menu.value = ("hit", "miss")
    assert set(w.data.points) == {"hit", "miss"} and w.data.matched == 20
    w._name_box.value = "f2"
    assert set(w.data.counts) == {"jit_f2"}
    w._source_menu.value = "jax"
    assert w.source == "jax" and w.data.matched == 0  # these events are all from xlakit
    w._source_menu.value = w._source_menu.options[0][1]  # "all sources"
    assert w.source is None and w.data.matched > 0
    w._kind_menu.value = tuple(xlakit.events.KINDS)
    w._name_box.value = ""

    log.emit("evict", name="jit_new", key="jit_new-1", bytes=123_456, reason="over the cap", partition="cpu-p")
    _wait(lambda: w.data.total == 41, what="the live update")
    assert "jit_new" in w.data.lanes and "evict" in w.data.points
    hover = w.data.points["evict"]["hover"][0]
    assert "120.6 KiB (123,456 bytes)" in hover and "over the cap" in hover and "jit_new-1" in hover

    html = w._repr_mimebundle_()["text/html"]
    assert "41 of 41 events" in html and "jit_new" in html
    w.close()
    assert w.threads_alive == 0 and not log._observers
    log.emit("hit", name="after_close")
    time.sleep(0.05)
    assert w.data.total == 41


def test_cache_timeline_live_off_and_fixed_events():
    log = EventLog()
    w = CacheTimeline(log, live=False)
    log.extend(_events(5))
    assert w.data.total == 0
    w.refresh()
    assert w.data.total == 5
    w.close()
    fixed = CacheTimeline(_events(8))
    assert fixed.data.total == 8 and fixed.threads_alive == 0 and fixed.event_log is None
    fixed.close()
    with pytest.raises(TypeError):
        CacheTimeline([1, 2])
    with pytest.raises(traitlets.TraitError):
        CacheTimeline(log, kinds=["nope"])


def test_cache_timeline_with_100k_events_stays_responsive():
    log = EventLog(maxlen=200_000)
    log.extend(_events(100_000))
    start = time.perf_counter()
    w = CacheTimeline(log, max_points=5000, throttle_s=0.01)
    built = time.perf_counter() - start
    assert w.data.total == 100_000 and w.data.downsampled
    assert sum(len(t.x) for t in w.figure.data if t.name in xlakit.events.KINDS) <= 5500
    assert w.data.shown <= 5000 and {t.type for t in w.figure.data} == {"scatter"}  # WebGL above 5,000 markers
    start = time.perf_counter()
    log.emit("hit", name="jit_f0", saved_s=1.0)
    _wait(lambda: w.data.total == 100_001, timeout=20, what="the live update")
    redraw = time.perf_counter() - start
    html = w.to_html(include_plotlyjs=False)
    assert "100001 events" in html.replace(",", "") or "100001 of 100001" in html
    w.close()
    print(f"100k events: first draw {built:.2f} s, live redraw {redraw:.2f} s, snapshot {len(html):,} chars")
    assert built < 20 and redraw < 10


def test_cache_timeline_shows_errors_from_its_callbacks(monkeypatch):
    w = CacheTimeline(_events(4))

    def broken(*a, **k):
        raise ValueError("no timeline today")

    monkeypatch.setattr(_data, "timeline_data", broken)
    w._name_box.value = "x"  # the filter box fires the redraw, which fails
    assert w.errors and "ValueError: no timeline today" in w.errors[-1]
    assert "no timeline today" in w.error_area.value
    w.close()


# -- CacheBrowser -------------------------------------------------------------------------------------------

def test_cache_browser_table_filters_and_actions(cache):
    b = CacheBrowser(cache)
    assert set(b.frame["name"]) == {"jit_square", "jit_cube"}
    partition = b.frame["partition"].iloc[0]
    assert b.totals.loc[partition, "entries"] == 2
    sizes = [int(s) for s in b.frame["size_bytes"]]
    html = b._repr_mimebundle_()["text/html"]
    for s in sizes:
        assert f"data-bytes='{s}'" in html
    assert f"data-bytes='{sum(sizes)}'" in html  # the partition total

    b._name_box.value = "cube"
    assert list(b.frame["name"]) == ["jit_cube"]
    b._name_box.value = ""

    b.verify_button.click()
    assert b.last_action[0] == "verify" and len(b.last_action[1]) >= 2
    assert "0 bad" in b.result.value

    cube_key = b.frame.set_index("name").loc["jit_cube", "key"]
    b.select(cube_key)
    assert b.selected == ((partition, cube_key),)
    b.explain_button.click()
    (explanation,) = b.last_action[1]
    assert explanation.status == "hit" and "hit in" in b.result.value

    b.evict_button.click()
    assert b.last_action == ("evict", [(partition, cube_key)])
    assert [i.name for i in cache.store.entries() if not i.key.endswith("-aot")] == ["jit_square"]
    evicts = cache.log.events("evict")
    assert evicts and evicts[-1].key == cube_key and "CacheBrowser" in evicts[-1].reason
    assert list(b.frame["name"]) == ["jit_square"] and b.selected == ()

    explanation = b.explain(square, jnp.ones((64, 64)))
    assert explanation.status == "hit"
    assert not b.errors
    b.close()


def test_cache_browser_folds_library_programs_into_one_line(cache):
    """Entries of programs this process saw called only from inside JAX are one "library helpers" line."""
    cube = next(i for i in cache.store.entries() if i.name == "jit_cube")
    cache.log.clear()  # the test's own calls are the user's; say this one came from inside JAX
    cache.log.emit("store", name="jit_cube", key=cube.key, origin="library")
    cache.log.emit("store", name="jit_square", origin="user")
    b = CacheBrowser(cache)
    assert list(b.frame["name"]) == ["jit_square"] and list(b.frame["origin"]) == ["user"]
    assert "library helpers: 1 entries of 1 program(s)" in b.library_html.value
    assert "jit_cube" in b.library_html.value and "1 of library helpers folded" in b.status.value
    assert "library helpers: 1 entries" in b.to_html(include_plotlyjs=False)
    b._fold_box.value = False
    assert set(b.frame["name"]) == {"jit_square", "jit_cube"} and b.library_html.value == ""
    b.close()


def test_memory_breakdown_of_a_cache_folds_library_programs(cache):
    cube = next(i for i in cache.store.entries() if i.name == "jit_cube")
    cache.log.clear()
    cache.log.emit("store", name="jit_cube", key=cube.key, origin="library")
    w = MemoryBreakdown(cache)
    assert [n.split(" ")[0] for n in w.program_names] == ["jit_square"]
    assert "library helpers: 1 program(s)" in w.status.value and "jit_cube" in w.status.value
    assert "library helpers: 1 program(s)" in w.to_html(include_plotlyjs=False)
    expanded = MemoryBreakdown(cache, fold_library=False)
    assert len(expanded.program_names) == 2
    w.close()
    expanded.close()


def test_cache_browser_quarantines_a_corrupt_entry_and_shows_errors(cache, monkeypatch):
    b = CacheBrowser(cache)
    info = next(i for i in cache.store.entries() if i.name == "jit_square")
    data = bytearray(info.path.read_bytes())
    data[-10] ^= 0xFF
    info.path.write_bytes(bytes(data))
    b.verify_button.click()
    assert "1 bad" in b.result.value and "quarantined" in b.result.value
    assert list(b.frame["name"]) == ["jit_cube"]
    assert cache.log.events("corrupt")

    def read_only(partition, key):
        raise OSError("read-only file system")

    b.select(b.frame["key"].iloc[0])
    monkeypatch.setattr(cache.store, "remove", read_only)
    b.evict_button.click()
    assert b.errors and "OSError: read-only file system" in b.errors[-1]
    b.close()
    with pytest.raises(TypeError):
        CacheBrowser(cache, sort="size")


def test_cache_browser_of_the_transparent_cache(tmp_path):
    xlakit.disable_cache()
    with pytest.raises(ValueError, match="no cache to browse"):
        CacheBrowser()
    enabled = xlakit.enable_cache(tmp_path / "t")
    try:
        jax.jit(lambda x: x - 7)(jnp.ones((3,)))
        b = CacheBrowser()
        assert "jit__lambda" in set(b.frame["name"]) and str(b.cache.store.root) == str(enabled.path)
        b.close()
    finally:
        xlakit.disable_cache()


# -- LiveArrays and the dashboard ---------------------------------------------------------------------------

def test_live_arrays_table_treemap_and_snapshot():
    keep = jnp.ones((123, 457), jnp.float32)
    la = LiveArrays()
    row = la.table[la.table["array"] == "float32[123,457]"].iloc[0]
    assert row["bytes"] == 123 * 457 * 4 and row["memory_kind"] == "device"
    treemap = la.figure.data[0]
    assert treemap.type == "treemap" and f"{row['device']}/device/float32[123,457]" in treemap.ids
    html = la._repr_mimebundle_()["text/html"]
    assert f"data-bytes='{123 * 457 * 4}'" in html
    del keep
    la.refresh_button.click()
    assert "float32[123,457]" not in set(la.table["array"])
    la.close()
    auto = LiveArrays(refresh_s=0.02)
    assert auto.threads_alive == 1
    auto.close()
    assert auto.threads_alive == 0


def test_dashboard_tabs_snapshot_and_close(cache):
    log = EventLog()
    log.extend(_events(12))
    d = dashboard(cache=cache, log=log, refresh_s=0.05)
    assert d.titles == ("Memory", "Allocator", "Timeline", "Cache", "Live arrays")
    assert d.browser is not None and set(d.breakdown.program_names) == {"jit_square", "jit_cube"}
    assert d.threads_alive >= 2  # allocator auto-refresh, timeline live updates
    from xlakit.view import plotly_html

    plotly_html.reset_once()
    html = d._repr_mimebundle_()["text/html"]
    for title in ("Memory breakdown", "Allocator", "Cache timeline", "Cache (2 entries)", "Live arrays"):
        assert title in html
    assert html.count("DecompressionStream") == 1  # plotly.js once for every chart of the snapshot
    assert "cdn.plot.ly" not in html  # no network needed
    d.close()
    assert d.threads_alive == 0 and not log._observers
    assert all(v.closed for v in d.views)


def test_import_xlakit_stays_light_and_has_the_ipython_hook():
    from conftest import run_python

    out = run_python("import sys, xlakit\n"
                     "heavy = [m for m in ('IPython', 'ipywidgets', 'plotly', 'xlakit.widgets', 'jax')\n"
                     "         if m in sys.modules]\n"
                     "print(repr((heavy, callable(xlakit.load_ipython_extension))))", new_interpreter=True)
    assert out == "([], True)"
