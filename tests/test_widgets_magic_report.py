"""The IPython extension (``%load_ext xlakit``, ``%xlakit``, ``%%xlakit``) and the standalone HTML report."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

import xlakit
import xlakit.report
from xlakit.cli import main
from xlakit.events import EventLog
from xlakit.widgets import CacheTimeline, Dashboard

MiB = 2**20


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # started once per session
    shell.run_line_magic("load_ext", "xlakit")
    return shell


def test_cell_magic_shows_compiles_hits_misses_seconds_and_peak(ip):
    """With --reset-peak the peak is the cell's own (and the summary says it reset); without it the magic
    leaves the process-wide peak alone (a reset would show in every AllocatorPanel) and says what the peak is."""
    cell = ("import numpy as np, jax, jax.numpy as jnp\n"
            "block = np.ones(120 * 2**20 // 8); block[::512] += 1; del block\n"
            "def magic_probe(x):\n    return jnp.sin(x) * 3\n"
            "out = jax.jit(magic_probe)(jnp.ones((17,)))\n"
            "print('cell ran')")
    with capture_output() as cap:
        result = ip.run_cell("%%xlakit --reset-peak\n" + cell)
    assert result.success
    assert "cell ran" in cap.stdout
    summary = ip.user_ns["_xlakit_cell"]
    assert summary.compiles >= 1 and summary.compile_s > 0
    assert summary.reset and summary.peak_bytes is not None and summary.peak_method == "clear_refs"
    assert summary.peak_exact
    before = summary.tracker.before[0].process_rss_bytes
    assert summary.peak_bytes >= before + 100 * MiB  # the 120 MiB block, freed inside the cell
    assert any(e.name == "jit_magic_probe" and e.kind == "compile" for e in summary.events.events())
    text = cap.outputs[-1].data["text/plain"]
    assert text.startswith("xlakit:") and "compile(s)" in text and "process high-water mark" in text
    # The count says whose programs compiled: the cell's own function apart from JAX's helpers.
    assert summary.compiles_by_origin["yours"] == (1, 1) and "1 of your 1 program(s)" in text
    assert sum(n for n, _ in summary.compiles_by_origin.values()) == summary.compiles
    assert "the cell's own: reset at its start" in text and "in use " in text
    html = summary._repr_html_()
    assert f"data-bytes='{summary.peak_bytes}'" in html and "misses" in html and "hits" in html
    assert f"data-bytes='{summary.in_use_change_bytes}'" in html

    from xlakit.memory import allocator_stats

    method_before = allocator_stats()[0].reset_method
    reset_time = getattr(allocator_stats()[0], "reset_time", None)
    with capture_output() as cap:
        ip.run_cell("%%xlakit\nx = 1 + 1")
    plain = ip.user_ns["_xlakit_cell"]
    assert not plain.reset and "not reset by this cell" in cap.outputs[-1].data["text/plain"]
    assert allocator_stats()[0].reset_method == method_before
    if reset_time is not None:
        assert allocator_stats()[0].reset_time == reset_time
    assert "None" not in repr(plain)


def test_cell_magic_counts_cache_hits(ip, tmp_path):
    cache = xlakit.enable_cache(tmp_path / "c")
    try:
        code = "import jax, jax.numpy as jnp\ny = jax.jit(lambda v: v * 5 + 1)(jnp.ones((9,)))"
        ip.run_cell("%%xlakit\n" + code)
        first = ip.user_ns["_xlakit_cell"]
        assert first.misses >= 1 and first.hits == 0
        jax.clear_caches()  # forget in-memory executables: the next compile asks xlakit's store
        ip.run_cell("%%xlakit --no-reset\n" + code)
        second = ip.user_ns["_xlakit_cell"]
        assert second.hits >= 1 and second.load_s > 0
    finally:
        xlakit.disable_cache()
        assert cache is not None


def test_line_magic_returns_views_and_rejects_unknown_commands(ip):
    timeline = ip.run_line_magic("xlakit", "timeline")
    assert isinstance(timeline, CacheTimeline)
    timeline.close()
    board = ip.run_line_magic("xlakit", "dashboard")
    assert isinstance(board, Dashboard) and board.browser is None  # no cache enabled: the tab says so
    board.close()
    assert board.threads_alive == 0
    stats = ip.run_line_magic("xlakit", "stats")
    assert stats.counts is not None
    text = repr(stats)
    # formatted values, never raw floats or None: "compile time  2.42 s", "events from  every layer ..."
    assert "None" not in text and "compile time" in text and "every layer" in text
    assert not re.search(r"\d\.\d{5,}", text)
    with pytest.raises(UsageError, match="unknown %xlakit command"):
        ip.run_line_magic("xlakit", "bogus")
    with pytest.raises(UsageError, match="takes only --reset-peak"):
        ip.run_cell_magic("xlakit", "--fast", "x = 1")


def test_report_build_and_cli(tmp_path, monkeypatch):
    cache = xlakit.ExecutableCache(tmp_path / "cache", log=EventLog())
    try:
        f = cache.jit(lambda x: (x @ x.T).sum())
        f(jnp.ones((96, 96)))
        sizes = [int(s) for s in cache.entries()["size_bytes"]]
        log = cache.log
        html = xlakit.report.build(cache=cache, log=log, include_plotlyjs="cdn")
    finally:
        cache.close()
    assert html.startswith("<!DOCTYPE html>")
    for title in ("Memory breakdown", "Cache timeline", "Cache (", "Allocator", "Live arrays"):
        assert title in html
    for s in sizes:
        assert f"data-bytes='{s}'" in html
    assert f"data-bytes='{96 * 96 * 4}'" in html  # the argument of the jitted program
    assert html.count("cdn.plot.ly") == 1

    events_file = tmp_path / "events.jsonl"
    log.save(events_file)
    out = tmp_path / "report.html"
    made: list = []  # fault: the CLI made an ExecutableCache (which installs JAX's compile hooks) just to list
    init = xlakit.ExecutableCache.__init__
    monkeypatch.setattr(xlakit.ExecutableCache, "__init__", lambda self, *a, **k: made.append(a) or init(self, *a, **k))
    assert main(["report", "--out", str(out), "--path", str(tmp_path / "cache"), "--events", str(events_file),
                 "--cdn"]) == 0
    assert made == []
    text = out.read_text()
    for s in sizes:
        assert f"data-bytes='{s}'" in text
    assert f"{len(log)} of {len(log)} events" in text
    assert main(["report", "--path", str(tmp_path)]) == 2  # --out is required


def test_live_arrays_created_at_names_the_cell(ip):
    """LiveArrays' "created at" pointed at IPython's temporary file (``/tmp/ipykernel_…py:7``); it names the
    cell: ``In [n], line l``."""
    from xlakit.memory import live_arrays
    from xlakit.view.live import live_table

    ip.run_cell("import jax.numpy as jnp\n_x = 1\nmarker_array = jnp.ones((3, 71))")
    count = ip.execution_count  # run_cell without history: the cell keeps the current count
    table = live_table(live_arrays(), top=None)
    row = table[table["array"] == "float32[3,71]"].iloc[0]
    assert row["created_at"].startswith(f"In [{count}], line 3"), row["created_at"]
    ip.run_cell("del marker_array")
