"""The memory pictures on a real compiled gradient: MemoryBreakdown marks the peak step xlakit.memory.peak finds,
draws the largest buffers' lifetimes with their roles and a treemap summing to the peak; MemoryExplorer compiles
each choice on a background thread (the kernel-side callback returns at once), redraws, shows a failing variant's
error and keeps working, and revisits are cache hits."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import pytest

import xlakit
from xlakit import memory
from xlakit.events import EventLog
from xlakit.widgets import MemoryBreakdown, MemoryExplorer

W = {"a": jax.ShapeDtypeStruct((64, 256), jnp.float32), "b": jax.ShapeDtypeStruct((256, 8), jnp.float32)}


def loss(w, x):
    h = jnp.tanh(x @ w["a"])        # kept for the backward pass: a residual
    return jnp.mean((h @ w["b"]) ** 2)


def make_args(batch):
    return W, jax.ShapeDtypeStruct((batch, 64), jnp.float32)


@pytest.fixture(scope="module")
def grad_program():
    return jax.jit(jax.grad(loss)).lower(*make_args(128)).compile()


def test_memory_breakdown_draws_the_peak_lifetimes_and_treemap_of_a_real_program(grad_program):
    pk = memory.peak(grad_program)
    w = MemoryBreakdown({"grad": grad_program}, selected="grad")
    assert not w.errors and w.peak is not None and w.peak.step == pk.step
    live = w.detail_figure.layout.meta["xlakit_liveness"]
    assert live["peak_step"] == pk.step and live["peak_bytes"] == pk.total_bytes
    assert w.detail_figure.layout.shapes[0].x0 == pk.step
    top_source = pk.by("source")["group"].iat[0]
    assert top_source in w.detail_figure.layout.annotations[0].text          # the peak named in the user's terms
    # Lifetimes: one bar per piece of memory with a live range (the logical buffers of one allocation slice
    # merged), each in its role's trace, from the first start to the last end of the buffers it stands for.
    buffers = pk.attribution.buffers
    ranged = buffers[buffers["start"] >= 0]
    life = w.lifetime_figure.layout.meta["xlakit_lifetime"]
    assert life["shown"] + life["more"] + life["aliases"] == len(ranged)
    assert life["no_range"] == len(buffers) - len(ranged)
    # the bars left out are slivers under 1/1000 of the largest (a program's 4-byte constants), not drawn
    assert life["more_bytes"] * 1000 <= life["more"] * max(life["bytes"])
    by_id = ranged.set_index("buffer_id")
    for trace in w.lifetime_figure.data:
        for pos, base, length in zip(trace.y, trace.base, trace.x, strict=True):
            rep = by_id.loc[life["buffer_ids"][life["shown"] - 1 - pos]]
            assert rep["role"] == trace.name and base <= rep["start"] and base + length - 1 >= rep["end"]
            same = ranged[(ranged["allocation"] == rep["allocation"]) & (ranged["offset"] == rep["offset"])]
            assert same["start"].min() <= base and base + length - 1 <= same["end"].max()
    assert "residual" in {t.name for t in w.lifetime_figure.data}
    # What the bars crossing the peak step add up to is what is live there, not more (aliases counted once).
    crossing = sum(b for i, b in enumerate(life["bytes"]) for t in w.lifetime_figure.data
                   for pos, base, length in zip(t.y, t.base, t.x, strict=True)
                   if pos == life["shown"] - 1 - i and base <= pk.step < base + length)
    assert crossing <= pk.total_bytes
    # Bars named in the user's terms: the source line of the residual, the parameter path of a parameter.
    ticks = [t.replace("<br>", " ") for t in w.lifetime_figure.layout.yaxis.ticktext]  # a long label wraps
    assert any(t.startswith("w['a'] · parameter") for t in ticks)
    assert any("(loss) · residual · " in t for t in ticks)
    # The largest buffers at the peak: xlakit.memory.peak's, in the user's terms, not XLA's instruction list.
    assert "bytes at the peak" in w.details.value and "allocation kind" not in w.details.value
    assert "residual" in w.details.value and pk.buffers["instruction"].iat[0] in w.details.value
    # Treemap: the root is the peak total, and the bytes charged to the buffers live there sum to it.
    tree = w.treemap_figure.data[0]
    assert tree.values[0] == pk.total_bytes == int(pk.buffers["bytes"].sum())
    # ...its top tiles are the user's source lines, every tile in its role's colour (none left grey).
    from xlakit.view.memory_charts import ROLE_COLORS

    top = {lab.replace("<br>", " "): col for lab, par, col in zip(tree.labels, tree.parents, tree.marker.colors,
                                                                   strict=True) if par == "peak"}  # labels wrap
    assert any(lab.startswith(top_source) for lab in top), (top_source, list(top))
    assert set(tree.marker.colors[1:]) <= set(ROLE_COLORS.values())
    assert top[next(lab for lab in top if lab.startswith(top_source))] == ROLE_COLORS[
        pk.buffers.loc[pk.buffers["source"] == top_source].groupby("role")["bytes"].sum().idxmax()]
    html = w.to_html(False)
    assert html.count("class='xlakit-chart'") == 4 and repr(pk).split(" (")[0] in html
    w.close()


def _gated_make_args(gate: threading.Event, threads: list[str]):
    def make(batch):
        threads.append(threading.current_thread().name)
        if batch == 3:
            raise ValueError("batch 3 does not divide the devices")
        if batch == 32:
            assert gate.wait(30), "test gate never opened"
        return make_args(batch)
    return make


def test_memory_explorer_compiles_in_the_background_redraws_and_shows_errors(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    gate, threads = threading.Event(), []
    e = MemoryExplorer(loss, _gated_make_args(gate, threads), batch_sizes=(3, 8, 32), batch=8, step=jax.grad,
                       cache=cache)
    first = e.wait(60)
    assert first.error is None and first.decision == "store" and first.peak_bytes > 0
    assert e.liveness_chart.figure.layout.meta["xlakit_liveness"]["peak_bytes"] == first.peak.total_bytes

    t = time.perf_counter()
    e._batch_slider.value = 32                        # as a drag of the slider sets it
    returned = time.perf_counter() - t
    assert e.busy and e.current is None and "compiling batch 32" in e.status.value
    assert returned < 1.0, f"the callback blocked for {returned:.2f} s"
    gate.set()
    big = e.wait(60)
    assert big.batch == 32 and big.peak_bytes > first.peak_bytes              # activations grow with the batch
    assert threads == ["xlakit-MemoryExplorer-compile"] * 2                    # never on the kernel's thread
    assert e.liveness_chart.figure.layout.meta["xlakit_liveness"]["peak_bytes"] == big.peak.total_bytes
    assert e.treemap_chart.figure.data[0].values[0] == big.peak.total_bytes
    (line,) = e.variants_chart.figure.data                                     # peak against batch size
    assert line.x == (8, 32) and line.y == (first.peak_bytes, big.peak_bytes)

    assert e.wait(float("inf")) is big                # inf waits for ever (threading raised OverflowError)
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
        e.wait(float("nan"))                          # said "still compiling after nan s"

    e.batch = 3                                       # make_args fails: shown, recorded, nothing raised
    failed = e.wait(60)
    assert failed.error == "ValueError: batch 3 does not divide the devices"
    assert any("batch 3 does not divide" in m for m in e.errors) and e.error_area.layout.display == ""
    assert "batch 3 does not divide" in e.summary.value

    e.batch = 8                                       # a variant seen before: redrawn from memory at once
    assert not e.busy and e.current is first
    assert e.liveness_chart.figure.layout.meta["xlakit_liveness"]["peak_bytes"] == first.peak.total_bytes
    html = e.to_html(False)
    assert "class='xlakit-chart'" in html and "Variants tried" in html and f"data-bytes='{big.peak_bytes}'" in html
    # beside the logical peak, the number to budget with (donation can raise the one and lower the other)
    assert big.footprint_bytes == big.peak.attribution.memory.footprint_bytes > 0
    assert "XLA footprint (budget with this)" in html and f"data-bytes='{big.footprint_bytes}'" in html
    e.close()
    assert e.threads_alive == 0

    again = MemoryExplorer(loss, make_args, batch_sizes=(8,), step=jax.grad, cache=cache)
    assert again.wait(60).decision == "hit"           # a revisit in a new widget loads from the cache
    again.close()
    cache.close()  # its hooks stay installed until then: a later test in this worker found a cache enabled


def test_memory_explorer_rejects_bad_choices():
    with pytest.raises(ValueError, match="not one of"):
        MemoryExplorer(loss, make_args, batch_sizes=(8, 16), batch=12, start=False)
    with pytest.raises(ValueError, match="checkpoint_policies has no"):
        MemoryExplorer(loss, make_args, remat={"x": "no_such_policy"}, start=False)
    with pytest.raises(TypeError, match="callable"):
        MemoryExplorer(loss, 8, start=False)


def test_memory_explorer_closed_while_compiling_draws_nothing_afterwards():
    gate, threads = threading.Event(), []
    e = MemoryExplorer(loss, _gated_make_args(gate, threads), batch_sizes=(32,), step=jax.grad)
    deadline = time.monotonic() + 30
    while not threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert e.busy and threads        # the compile has started: it waits in make_args
    e.close()
    gate.set()
    deadline = time.monotonic() + 60
    while not e.results and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert e.results[(32, "none", "none")].peak is not None    # it finished on its thread...
    assert e._drawn is None and not e.errors                    # ...and drew nothing into the closed widget


def test_the_explorers_saved_snapshot_is_the_drawn_result_not_compiling():
    """Fault: the static snapshot a saved notebook keeps was taken when the explorer was displayed, before its
    background compile finished: the saved notebook and nbconvert HTML said "compiling… Nothing compiled yet"
    forever. The displayed snapshot is now replaced once the variant is drawn."""

    class Handle:
        def __init__(self):
            self.shown = []

        def update(self, data, raw=False):
            self.shown.append(data["text/html"])

    handle = Handle()
    e = MemoryExplorer(loss, make_args, batch_sizes=(8,), step=jax.grad, start=False)
    e.__dict__["_snapshot_handles"] = [handle]  # what _ipython_display_ keeps for the snapshot it displayed
    e._request()  # what start=True does once the widget exists
    assert e.wait(120) is not None
    deadline = time.monotonic() + 20  # the worker replaces the snapshot just after it draws
    while time.monotonic() < deadline and not (handle.shown and "xlakit-chart" in handle.shown[-1]):
        time.sleep(0.05)
    e.close()
    # charts are divs of class xlakit-chart; plotly.js itself comes only with a process's first chart
    assert handle.shown and "compiling…" not in handle.shown[-1] and "xlakit-chart" in handle.shown[-1]


def _tanh_block(x, w):
    h = x @ w  # three values of h kept per block without remat; only the block's input with it
    return jnp.tanh(h) * jax.nn.sigmoid(h) + jnp.sin(h)


def _stack_loss(ws, x):
    for i in range(4):
        x = _tanh_block(x, ws[i])
    return jnp.mean(x ** 2)


def test_memory_explorer_checkpoints_each_block_and_says_what_remat_changed():
    """Issue 35: the explorer's remat wrapped the whole function (whose recomputation is live at once, so the peak
    did not move) and per-block checkpointing, what people do, could not be tried."""
    ws = jax.ShapeDtypeStruct((4, 128, 128), jnp.float32)
    e = MemoryExplorer(_stack_loss, lambda b: (ws, jax.ShapeDtypeStruct((b, 128), jnp.float32)), batch_sizes=(512,),
                       step=jax.grad, block=_tanh_block)
    assert "each _tanh_block: checkpoint (save nothing)" in e._remat_menu.options
    plain = e.wait(60)
    e.remat = "checkpoint (save nothing)"
    whole = e.wait(60)
    e.remat = "each _tanh_block: checkpoint (save nothing)"
    each = e.wait(60)
    assert plain.error is whole.error is each.error is None, (whole.error, each.error)
    assert each.peak_bytes < plain.peak_bytes and whole.peak_bytes >= each.peak_bytes
    assert "against remat none: peak " in e.summary.value and "residuals −" in e.summary.value
    e.remat = "checkpoint (save nothing)"
    e.wait(60)
    assert "against remat none" in e.summary.value and "all together" in e.summary.value, e.summary.value
    e.close()


def test_memory_breakdown_of_one_program_shows_it_without_a_click(grad_program):
    """A teacher's trial (2026-12-07): notebook 01's breakdown of its one program opened with no program chosen,
    so its peak, lifetimes and treemap stayed hidden until the menu was used."""
    w = MemoryBreakdown({"grad": grad_program})
    assert w.selected == "grad" and w.peak is not None and not w.errors
    w.close()
    two = MemoryBreakdown({"a": grad_program, "b": grad_program})
    assert two.selected is None  # which of several to open is the user's choice
    two.close()
