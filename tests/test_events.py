"""The event log as pure logic (no JAX): concurrency, observers, bounds, persistence, stats, summary, metrics."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time

import pytest
from conftest import worker_env

import xlakit.events as ev
from xlakit.events import Event, EventLog


def test_eight_threads_appending_ten_thousand_each_lose_nothing():
    log = EventLog(maxlen=200_000)
    seen: list[collections.Counter] = [collections.Counter(), collections.Counter()]
    for counter in seen:
        log.subscribe(lambda e, c=counter: c.update([id(e)]))
    start = threading.Barrier(8)

    def writer(t: int) -> None:
        start.wait()
        for i in range(10_000):
            log.emit("hit", name=f"t{t}", key=str(i), duration_s=0.001, saved_s=0.002)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    events = log.events()
    assert len(events) == len(log) == 80_000
    for t in range(8):  # each thread's events are all there, in the order that thread wrote them
        assert [int(e.key) for e in events if e.name == f"t{t}"] == list(range(10_000))
    stats = log.stats()
    assert stats.hits == 80_000
    assert stats.load_s == pytest.approx(80.0) and stats.saved_s == pytest.approx(160.0)
    ids = {id(e) for e in events}
    for counter in seen:  # every observer saw every event exactly once
        assert set(counter) == ids and set(counter.values()) == {1}


def test_every_observer_sees_every_event_once_and_a_broken_one_breaks_nothing():
    log = EventLog()
    first, late = [], []

    def broken(event):
        raise RuntimeError("widget closed")

    log.subscribe(first.append)
    log.subscribe(broken)
    log.emit("miss", name="a")
    stop_late = log.subscribe(late.append)
    log.emit("compile", name="a", duration_s=0.5)
    stop_late()
    stop_late()  # unsubscribing twice is harmless
    log.emit("store", name="a", bytes=10)
    assert [e.kind for e in first] == ["miss", "compile", "store"]
    assert [e.kind for e in late] == ["compile"]
    assert len(log.observer_errors) == 3 and "RuntimeError: widget closed" in log.observer_errors[0]
    assert [e.kind for e in log] == ["miss", "compile", "store"]  # the log itself is unaffected


def test_bounded_log_keeps_the_newest_n_and_totals_keep_everything():
    log = EventLog(maxlen=5)
    for i in range(12):
        log.emit("compile", name=f"f{i}", duration_s=1.0)
    assert [e.name for e in log.events()] == ["f7", "f8", "f9", "f10", "f11"]
    assert log.maxlen == 5 and len(log) == 5
    assert log.stats().counts["compile"] == 12 and log.stats().compile_s == 12.0
    assert len(log.summary().rows) == 5  # the summary covers kept events only
    with pytest.raises(ValueError, match="maxlen"):
        EventLog(maxlen=0)


def sample_events() -> list[Event]:
    return [
        Event("miss", name="jit_f", key="jit_f-00ff", duration_s=0.0003, reason="no entry — «absent»",
              partition="cpu-x", source="xlakit"),
        Event("compile", name="jit_f", key="jit_f-00ff", duration_s=1.25, partition="cpu-x"),
        Event("store", name="jit_f", key="jit_f-00ff", duration_s=0.002, bytes=4345, partition="cpu-x"),
        Event("hit", name="jit_g", key="jit_g-11", duration_s=0.01, saved_s=0.0, source="jax-persistent",
              reason="JAX recorded 0 s"),
        Event("miss", name="jit_g", source="jit", reason="at x.py:3:\n  never seen function"),
        Event("trace", name="jit_g", duration_s=0.004, source="jax"),
    ]


def test_save_load_round_trip(tmp_path):
    log = EventLog()
    log.extend(sample_events())
    path = tmp_path / "events.jsonl"
    assert log.save(path) == 6
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["reason"] == "no entry — «absent»"
    loaded = EventLog.load(path)
    assert loaded.events() == log.events()  # every field, both clocks included
    assert loaded.stats() == log.stats()
    assert ev.load(path).events() == log.events()

    log.save(path, append=True)  # appending adds, a plain save replaces
    assert len(EventLog.load(path)) == 12
    log.save(path)
    assert len(EventLog.load(path)) == 6
    assert [p.name for p in tmp_path.iterdir()] == ["events.jsonl"]  # no temp file left behind


def test_load_skips_a_truncated_last_line_and_rejects_a_damaged_middle(tmp_path):
    log = EventLog()
    log.extend(sample_events())
    path = tmp_path / "events.jsonl"
    log.save(path)
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # a writer killed in the middle of its last line
    with pytest.warns(RuntimeWarning, match=r"events.jsonl:6: skipped an incomplete last line"):
        loaded = EventLog.load(path)
    assert loaded.events() == log.events()[:5]

    lines = data.decode().splitlines(keepends=True)
    path.write_text(lines[0] + '{"kind": "hit", "na\n' + "".join(lines[2:]))
    with pytest.raises(ValueError, match=r"events.jsonl:2: not an xlakit event"):
        EventLog.load(path)
    path.write_text(lines[0] + json.dumps({"kind": "teleport"}) + "\n" + lines[1])
    with pytest.raises(ValueError, match=r":2: .*unknown event kind 'teleport'"):
        EventLog.load(path)


def test_load_drops_fields_from_a_newer_version_with_a_warning(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text(json.dumps({**Event("hit", name="f").to_dict(), "gpu_kind": "H100"}) + "\n")
    with pytest.warns(RuntimeWarning, match="gpu_kind"):
        [e] = EventLog.load(path).events()
    assert e.kind == "hit" and e.name == "f"
    with pytest.raises(ValueError, match="gpu_kind"):
        Event.from_dict({"kind": "hit", "gpu_kind": "H100"})


def test_kinds_and_sources_are_closed_sets():
    assert set(ev.KINDS) >= {"hit", "miss", "store", "skip", "corrupt", "evict", "load_error", "store_error",
                             "compile", "trace", "lower"}
    assert ev.SOURCES == ("xlakit", "jax-persistent", "jit", "jax")
    with pytest.raises(ValueError, match="unknown event kind 'hitt'"):
        Event("hitt")
    with pytest.raises(ValueError, match="unknown event source 'tpu'"):
        Event("hit", source="tpu")
    with pytest.raises(TypeError):
        EventLog().emit("hit", nmae="typo")
    with pytest.raises(ValueError, match="unknown event source"):
        EventLog().stats("tpu")


def test_since_on_both_clocks():
    log = EventLog()
    log.emit("miss", name="old")
    t_mono, t_wall = time.monotonic(), time.time()
    log.emit("miss", name="new")
    assert [e.name for e in log.since(t_mono)] == ["new"]
    assert [e.name for e in log.since(t_wall, clock="wall")] == ["new"]
    assert log.since(t_mono).stats().misses == 1
    assert [e.name for e in log.events(since=t_mono)] == ["new"]
    with pytest.raises(ValueError, match="clock"):
        log.since(0, clock="cpu")


def test_stats_per_source_count_each_compile_once_and_never_negative_savings():
    log = EventLog()
    log.extend(sample_events())
    log.emit("hit", name="jit_f", duration_s=0.5, saved_s=-0.4)  # a load slower than the compile it replaced
    log.emit("compile", name="jit_h", duration_s=0.75, source="jax")  # a compile no cache saw
    log.emit("corrupt", name="jit_f")
    log.emit("lower", name="jit_g", duration_s=0.25, source="jax")
    total = log.stats()
    assert total.counts["compile"] == 2 and total.compile_s == 2.0
    assert total.hits == 2 and total.misses == 2 and total.saved_s == 0.0 and total.load_s == pytest.approx(0.51)
    assert total.failures == 1 and total.stored_bytes == 4345
    assert total.trace_s == 0.004 and total.lower_s == 0.25 and total.source is None
    by = log.stats_by_source()
    assert set(by) == set(ev.SOURCES)
    assert by["xlakit"].counts["miss"] == 1 and by["jit"].counts["miss"] == 1 and by["jax-persistent"].hits == 1
    assert by["xlakit"].compile_s == 1.25 and by["jax"].compile_s == 0.75
    assert log.stats("xlakit") == by["xlakit"] and by["xlakit"].source == "xlakit"
    assert "hit=1" in repr(by["xlakit"]) and "[xlakit]" in repr(by["xlakit"])


def test_summary_per_function_and_layer():
    log = EventLog()
    log.extend(sample_events())
    log.emit("hit", name="jit_f", duration_s=0.03, saved_s=1.22)
    summary = log.summary()
    assert [(r.name, r.source) for r in summary.rows] == [("jit_f", "xlakit"), ("jit_g", "jax-persistent"),
                                                          ("jit_g", "jit"), ("jit_g", "jax")]
    f = summary.row("jit_f", "xlakit")
    assert (f.counts["miss"], f.counts["compile"], f.counts["store"], f.counts["hit"]) == (1, 1, 1, 1)
    assert (f.compile_s, f.load_s, f.saved_s, f.stored_bytes) == (1.25, 0.03, 1.22, 4345)
    assert summary.row("jit_g", "jax").trace_s == 0.004 and summary.row("nope", "jax") is None
    text = repr(summary)
    assert text.splitlines()[0].split() == ["name", "source", "hit", "miss", "compile", "store", "trace",
                                            "compile", "s", "load", "s", "saved", "s"]
    assert "jit_f" in text.splitlines()[1] and "1.250" in text.splitlines()[1]
    frame = summary.to_frame()
    assert list(frame["name"]) == ["jit_f", "jit_g", "jit_g", "jit_g"] and frame["compile"].tolist() == [1, 0, 0, 0]
    assert "<table>" in summary._repr_html_() and repr(EventLog().summary()) == "Summary(no events)"


def test_record_keeps_only_what_happened_inside_the_block():
    main = ev.log()
    main.emit("miss", name="before")
    with ev.record(jax_signals=False) as rec:
        main.emit("miss", name="inside")
        other = threading.Thread(target=lambda: main.emit("store", name="other-thread", bytes=7))
        other.start()
        other.join()
    main.emit("miss", name="after")
    assert [e.name for e in rec] == ["inside", "other-thread"]
    assert rec.stats().misses == 1 and rec.stats().stored_bytes == 7
    assert main.events()[-1].name == "after"


def test_an_empty_log_is_still_the_log_you_passed():
    # ``log or events.log()`` is how producers pick a log; an empty log must not be replaced.
    mine = EventLog()
    assert (mine or ev.log()) is mine


def test_reprs_are_readable():
    e = Event("hit", name="jit_step", key="jit_step-" + "ab" * 32, duration_s=0.0123, saved_s=1.5, bytes=4096,
              reason="line one\n   line two")
    text = repr(e)
    assert text.startswith("Event(hit jit_step [xlakit], 0.0123 s, saved 1.5000 s, 4096 bytes, key jit_step-")
    assert "\n" not in text and "line one line two" in text
    assert "<table>" in e._repr_html_() and "jit_step" in e._repr_html_()
    log = EventLog(maxlen=10)
    log.append(e)
    assert repr(log) == "EventLog(1 of at most 10 events kept; totals: hit=1)"
    assert "jit_step" in log._repr_html_()
    frame = log.to_frame()
    assert list(frame.columns)[:3] == ["kind", "name", "key"] and frame["saved_s"].tolist() == [1.5]


def test_cache_stats_read_as_a_grouped_summary_with_the_raw_numbers_in_a_frame():
    """Fault: ``cache_stats()`` in a notebook was 25 raw rows (``compile_s 0.1951986549997855``, every kind at 0).
    It shows what happened in words, grouped, seconds and bytes formatted; ``to_frame()`` keeps the raw numbers."""
    import re

    log = EventLog()
    for i in range(3):
        log.emit("miss", name=f"f{i}", origin="user")
        log.emit("compile", name=f"f{i}", duration_s=0.1951986549997855, origin="user")
        log.emit("store", name=f"f{i}", bytes=160_000, origin="user")
    log.emit("hit", name="f0", duration_s=0.004, saved_s=0.19, origin="user")
    log.emit("corrupt", name="f1", reason="sha256 mismatch", origin="user")
    stats = log.stats()
    rows = {r["what"]: r["value"] for r in stats.summary_rows()}
    assert rows["lookups"] == "1 hit, 3 misses"
    assert rows["compiled"] == "3 programs in 586 ms" and rows["stored"] == "3 programs, 468.8 KiB"
    assert rows["saved by hits"] == "190 ms (loading took 4 ms)" and rows["failures"] == "1 corrupt entry"
    assert "shared tier" not in rows and "JAX before each compile" not in rows  # nothing of those happened
    html = stats._repr_html_()
    assert html.count("<tr>") == len(rows) + 1 and not re.search(r"\d\.\d{5,}", html) and ">0<" not in html
    assert not re.search(r"\d\.\d{4,}", repr(stats)) and "stored 468.8 KiB" in repr(stats)
    frame = stats.to_frame()
    assert frame["compile_s"].iat[0] == pytest.approx(3 * 0.1951986549997855) and frame["store"].iat[0] == 3


def test_prometheus_counters_have_serving_names_and_never_double_count():
    prometheus_client = pytest.importorskip("prometheus_client")
    log = EventLog()
    log.extend(sample_events())
    log.emit("hit", name="jit_f", duration_s=0.25, saved_s=1.0)
    log.emit("hit", name="jit_f", duration_s=0.25, saved_s=-3.0)
    log.emit("store_error", name="jit_f", reason="read-only")
    registry = prometheus_client.CollectorRegistry()
    collector = ev.prometheus_collector(log)
    registry.register(collector)

    def value(name, **labels):
        return registry.get_sample_value(name, labels)

    for _ in range(2):  # scraping twice reads the same totals
        assert value("xlakit_executable_cache_hits_total", source="xlakit") == 2
        assert value("xlakit_executable_cache_hits_total", source="jax-persistent") == 1
        assert value("xlakit_executable_cache_misses_total", source="jit") == 1
        assert value("xlakit_executable_cache_stores_total", source="xlakit") == 1
        assert value("xlakit_executable_cache_failures_total", source="xlakit", kind="store_error") == 1
        assert value("xlakit_executable_cache_failures_total", source="xlakit", kind="corrupt") == 0
        assert value("xlakit_executable_cache_load_seconds_total", source="xlakit") == 0.5
        assert value("xlakit_executable_cache_saved_seconds_total", source="xlakit") == 1.0
        assert value("xlakit_executable_cache_stored_bytes_total", source="xlakit") == 4345
        assert value("xlakit_compile_seconds_total", source="xlakit") == 1.25
        assert value("xlakit_compiles_total", source="jax") == 0
    text = prometheus_client.generate_latest(registry).decode()
    assert 'xlakit_executable_cache_hits_total{source="xlakit"} 2.0' in text
    assert "# TYPE xlakit_executable_cache_misses_total counter" in text
    log.emit("hit", name="jit_f", duration_s=0.1, saved_s=0.0)
    assert value("xlakit_executable_cache_hits_total", source="xlakit") == 3  # live totals, no re-registering


def test_prometheus_without_the_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.registry", None)
    with pytest.raises(ImportError, match=r"pip install 'xlakit\[metrics\]'"):
        ev.prometheus_collector()


def test_using_the_log_imports_no_jax_pandas_or_prometheus(tmp_path):
    code = f"""
import sys, xlakit.events as ev
log = ev.EventLog()
log.emit('hit', name='f', duration_s=0.1, saved_s=0.2)
with ev.record(jax_signals=False) as rec:
    ev.log().emit('miss', name='g')
log.save({str(tmp_path / 'e.jsonl')!r}); ev.load({str(tmp_path / 'e.jsonl')!r})
repr(log.summary()); repr(log.stats()); log.since(0)
print([m for m in ('jax', 'jaxlib', 'pandas', 'prometheus_client') if m in sys.modules])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=worker_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"
