"""The cache, events, memory and widget APIs checked and named (red team, round 10, fourth pass).

Faults these tests catch: ``cache.load(key, devices="cpu")`` failed inside the load, which removed the good entry
as unloadable; ``cache.prune(-1)`` / ``prune(True)`` evicted every entry and ``prune("1e3")`` raised a bare
comparison error; ``cache.compile("f")`` took the string for a jax.jit object (``str.lower``); ``events.last(f,
since=time.time())`` answered None although ``f`` compiled; ``events.last(f, log=5)`` and friends raised bare
AttributeErrors (``prometheus_collector(5)`` only when scraped); ``Event(duration_s="1")`` broke the log's totals
after being kept; ``remote_mode="ro"`` with ``remote=""`` was taken; ``CacheTimeline(5)`` / ``maxlen=0`` /
``throttle_s=True``, ``CacheBrowser(max_rows=-1)``, ``AllocatorPanel(history_len=-1)``, ``MemoryBreakdown(unit=
"bogus")`` were taken or refused without a name; a failed ``dashboard()`` left a refresh thread running;
``peak().by(["role"])``; ``allocator_stats(np.int64(0))``; ``probe`` of a program of empty arrays said XLA
reports no buffer assignment; ``compiled_memory(f)`` without arguments and ``sweep(f, 5)`` raised the user's
own errors.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlakit  # noqa: E402
from xlakit import events, memory  # noqa: E402


def test_cache_arguments_are_checked_before_anything_is_removed(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "c")
    try:
        _compiled, decision = cache.compile(jax.jit(lambda x: x * 3), jnp.ones(3))
        for bad in ("cpu", 5, jax.devices()[0], [None]):
            with pytest.raises(TypeError, match="devices must be a list of jax.Device"):
                cache.load(decision.key, devices=bad)
        assert cache.load(decision.key) is not None  # the entry is still there
        for bad in ("-1", -1, True, None):
            with pytest.raises((TypeError, ValueError), match="max_bytes"):
                cache.prune(bad)
        assert len(cache.entries()) == 1
        for bad in ("f", b"f"):
            with pytest.raises(TypeError, match="pass the function itself"):
                cache.compile(bad)
    finally:
        cache.close()
    with pytest.raises(ValueError, match="remote_mode='ro' with remote=''"):
        xlakit.enable_cache(tmp_path / "t", remote="", remote_mode="ro")


def test_events_arguments_are_checked():
    with pytest.raises(ValueError, match="ahead of time.monotonic"):
        events.last("step", since=time.time())
    for call in (lambda: events.last("step", log=5), lambda: events.recompiles(5),
                 lambda: events.install_listeners(5), lambda: events.prometheus_collector(5)):
        with pytest.raises(TypeError, match="must be an xlakit.events.EventLog"):
            call()
    with pytest.raises(TypeError, match="path must be the events file"):
        events.load(5)
    with pytest.raises(TypeError, match="event field 'duration_s' must be"):
        events.Event(kind="hit", source="xlakit", duration_s="1")
    assert events.Event(kind="hit", source="xlakit", duration_s=float("nan")).duration_s is None  # not measured


def test_memory_arguments_and_answers():
    compiled = jax.jit(lambda a: jnp.tanh(a) * 2).lower(jnp.ones((64, 64))).compile()
    with pytest.raises(ValueError, match="cannot group by \\['role'\\]"):
        memory.peak(compiled).by(["role"])
    assert memory.allocator_stats(np.int64(jax.devices()[0].id))
    empty = memory.probe(lambda a: a * 2, jnp.ones((0, 4)))
    assert "no buffer assignment" not in str(getattr(empty, "reason", "") or "")

    def f(x):
        return x * 2

    with pytest.raises(TypeError, match="got the function 'f' without example arguments"):
        memory.compiled_memory(f)
    with pytest.raises(TypeError, match="make_args must be a function of the batch size"):
        memory.sweep(f, 5, [8])


def test_widget_arguments_are_named_and_a_failed_dashboard_leaves_no_thread(tmp_path):
    widgets = pytest.importorskip("xlakit.widgets")
    traitlets = pytest.importorskip("traitlets")
    with pytest.raises(TypeError, match="log must be an EventLog"):
        widgets.CacheTimeline(5)
    for bad in (0, 1.5, True):
        with pytest.raises((TypeError, ValueError), match="maxlen"):
            widgets.CacheTimeline([], maxlen=bad)
    with pytest.raises(TypeError, match="throttle_s"):
        widgets.CacheTimeline([], throttle_s=True)
    with pytest.raises(traitlets.TraitError, match="kinds must be one of"):
        widgets.CacheTimeline([], kinds=["bogus"])
    with pytest.raises(traitlets.TraitError, match="max_rows must be an int of at least 1"):
        widgets.CacheBrowser(str(tmp_path), max_rows=-1)
    with pytest.raises(traitlets.TraitError, match="history_len must be an int of at least 1"):
        widgets.AllocatorPanel(history_len=-1, auto_refresh=False)
    with pytest.raises(traitlets.TraitError, match="unit must be one of"):
        widgets.MemoryBreakdown({}, unit="bogus")
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(TypeError):
        widgets.dashboard(log=[1])
    time.sleep(0.2)
    assert not [t.name for t in threading.enumerate() if "auto-refresh" in t.name and t.name not in before]


def test_numpy_flags_and_ids_for_bundles_and_a_prune_that_meets_a_deleted_object(tmp_path, monkeypatch):
    path = tmp_path / "b"
    manifest = xlakit.export_bundle(lambda p, x: x @ p["w"], {"w": np.ones((3, 2), np.float32)},
                                    np.ones((2, 3), np.float32), path, rows_independent=np.bool_(True))
    assert manifest.rows("default")[0] == "declared"
    for bad in (True, "cpu"):
        with pytest.raises(TypeError, match="devices must be a jax.Device, a device id, or a list"):
            xlakit.load_bundle(path, devices=bad, progress=False)
    assert xlakit.load_bundle(path, devices=np.int64(jax.devices()[0].id), progress=False, background=False)

    from xlakit.cache import remote_maintenance as rm
    from xlakit.store.envelope import seal
    from xlakit.store.remote import RemoteStore

    secret = b"0123456789abcdef-rt10"
    remote = RemoteStore((tmp_path / "bucket").as_uri())
    part = "cpu-jaxlib0.10.2-x86_64-avx512-e59573ea"
    for i in range(3):
        key = f"jit_s{i}-{i:064x}"
        assert remote.put(part, key, seal({"partition": part, "key": key, "name": f"jit_s{i}"}, b"x" * 64, secret))
    real_peek = remote.peek
    monkeypatch.setattr(remote, "peek", lambda p, k, n: None if k.startswith("jit_s1-") else real_peek(p, k, n))
    result = rm.prune(remote, secret, older_than_s=0.0, dry_run=True)
    assert result.vanished == 1 and result.unreadable == 0 and len(result.deleted) == 2
