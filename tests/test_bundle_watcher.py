"""BundleWatcher with real file writes: debounce, rename, .cache/ and temp files ignored, thread lifecycle.

The watcher only fingerprints files, so these bundles hold placeholder bytes (no JAX here); the test in
test_bundle.py watches a real exported and loaded bundle.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from xlakit.bundle import BundleChange, BundleWatcher
from xlakit.bundle.watcher import fingerprint


def make_bundle(root: Path, name: str, tag: bytes = b"1") -> Path:
    d = root / name
    d.mkdir()
    (d / "model.b1.jaxexp").write_bytes(b"module b1 " + tag)
    (d / "model.b8.jaxexp").write_bytes(b"module b8 " + tag)
    (d / "weights.safetensors").write_bytes(b"weights " + tag)
    (d / "manifest.json").write_text(f'{{"name": "{name}"}}')
    return d


def bump(path: Path, data: bytes) -> None:
    """Rewrite a file with a guaranteed-new mtime (filesystems with coarse timestamps)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_bytes(data)
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def test_change_is_applied_only_when_two_polls_agree(tmp_path):
    a = make_bundle(tmp_path, "a")
    seen: list[BundleChange] = []
    w = BundleWatcher(tmp_path, seen.append, poll_s=60, start=False)
    assert w.bundles == ["a"]

    bump(a / "model.b8.jaxexp", b"half-written")
    assert w.poll() == []                      # first sighting: pending
    bump(a / "model.b8.jaxexp", b"half-written, more")
    assert w.poll() == []                      # differs from the pending poll: still settling
    changes = w.poll()                         # two consecutive polls agree
    assert [(c.kind, c.name, c.files) for c in changes] == [("changed", "a", ("model.b8.jaxexp",))]
    assert seen == changes
    assert not changes[0].weights_only
    assert w.poll() == [] and w.poll() == []   # reported once


def test_weights_only_change_is_marked(tmp_path):
    a = make_bundle(tmp_path, "a")
    w = BundleWatcher(tmp_path, lambda c: None, poll_s=60, start=False)
    bump(a / "weights.safetensors", b"new weights")
    w.poll()
    (change,) = w.poll()
    assert change.kind == "changed" and change.files == ("weights.safetensors",) and change.weights_only


def test_cache_and_temp_files_never_trigger(tmp_path):
    a = make_bundle(tmp_path, "a")
    w = BundleWatcher(tmp_path, lambda c: None, poll_s=60, start=False)
    before = fingerprint(a)
    cache = a / ".cache" / "cpu-jaxlib0.10.2-x86_64-avx2-12345678"
    cache.mkdir(parents=True)
    for i in range(3):
        (cache / f"model.b{i}-abc.xlk").write_bytes(b"x" * (i + 1))
        (a / ".cache" / "module_hashes.json").write_text(str(i))
        (a / f".model.b1.jaxexp.{i}.tmp").write_bytes(b"temp")  # export_bundle's temp files
        (a / "model.b1.jaxexp~").write_bytes(b"editor backup")
        (a / "notes.txt").write_text("not a bundle file")
        assert w.poll() == []
    assert fingerprint(a) == before
    (tmp_path / ".hidden-staging").mkdir()  # hidden folders are not bundles
    (tmp_path / ".hidden-staging" / "manifest.json").write_text("{}")
    assert w.poll() == [] and w.poll() == []


def test_rename_with_identical_contents_is_a_rename(tmp_path):
    make_bundle(tmp_path, "a")
    make_bundle(tmp_path, "b", tag=b"other")
    w = BundleWatcher(tmp_path, lambda c: None, poll_s=60, start=False)
    os.rename(tmp_path / "a", tmp_path / "a2")
    assert w.poll() == []
    changes = w.poll()
    assert [(c.kind, c.name, c.old_name) for c in changes] == [("renamed", "a2", "a")]
    assert w.bundles == ["a2", "b"]


def test_added_removed_and_manifest_last(tmp_path):
    make_bundle(tmp_path, "a")
    w = BundleWatcher(tmp_path, lambda c: None, poll_s=60, start=False)
    n = tmp_path / "new"
    n.mkdir()
    (n / "model.b1.jaxexp").write_bytes(b"module")
    assert w.poll() == [] and w.poll() == []   # no manifest yet: not a bundle
    (n / "manifest.json").write_text("{}")
    w.poll()
    assert [(c.kind, c.name) for c in w.poll()] == [("added", "new")]
    (tmp_path / "a" / "manifest.json").unlink()
    w.poll()
    assert [(c.kind, c.name) for c in w.poll()] == [("removed", "a")]


def test_thread_reports_real_writes_and_stops_cleanly(tmp_path):
    a = make_bundle(tmp_path, "a")
    got: list[BundleChange] = []
    arrived = threading.Event()

    def on_change(change):
        got.append(change)
        arrived.set()

    with BundleWatcher(tmp_path, on_change, poll_s=0.05) as w:
        assert w.running
        cache = a / ".cache"
        cache.mkdir()
        deadline = time.monotonic() + 0.5
        i = 0
        while time.monotonic() < deadline:       # loader-like writes for 10 polls: nothing reported
            (cache / "module_hashes.json").write_text(str(i))
            i += 1
            time.sleep(0.01)
        assert got == []
        bump(a / "model.b1.jaxexp", b"recompiled module")
        assert arrived.wait(5), "the change was not reported"
        time.sleep(0.2)                          # more polls: still exactly one report
        assert [(c.kind, c.files) for c in got] == [("changed", ("model.b1.jaxexp",))]
    assert not w.running
    assert w.stop() is True                      # idempotent


def test_callback_errors_are_kept_and_watching_goes_on(tmp_path):
    a = make_bundle(tmp_path, "a")
    calls: list[BundleChange] = []

    def on_change(change):
        calls.append(change)
        if len(calls) == 1:
            raise RuntimeError("reload failed")

    w = BundleWatcher(tmp_path, on_change, poll_s=60, start=False)
    bump(a / "model.b1.jaxexp", b"v2")
    w.poll()
    with pytest.warns(RuntimeWarning, match="reload failed"):
        w.poll()
    bump(a / "model.b1.jaxexp", b"v3")
    w.poll()
    w.poll()
    assert len(calls) == 2 and [type(e) for e in w.errors] == [RuntimeError]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="poll_s"):
        BundleWatcher(tmp_path, print, poll_s=0)
    with pytest.raises(NotADirectoryError):
        BundleWatcher(tmp_path / "missing", print)


@pytest.mark.parametrize("poll_s", [float("inf"), 1e10, 10**400, float("nan"), 0])
def test_a_poll_interval_that_is_not_seconds_is_refused_by_name(tmp_path, poll_s):
    """Fault: inf or 1e10 passed the "> 0" check, then the polling thread died on its first wait ("OverflowError:
    timestamp out of range for platform time_t", printed by threading) and nothing was watched; 10**400 raised
    "int too large to convert to float"."""
    with pytest.raises(ValueError, match="poll_s must be a finite number of seconds > 0"):
        BundleWatcher(tmp_path, lambda change: None, poll_s=poll_s)
    watcher = BundleWatcher(tmp_path, lambda change: None, poll_s=0.05)
    assert watcher.stop(float("inf")) and watcher.stop(None)  # inf waits for ever, as None does
    with pytest.raises(ValueError, match="timeout must be"):
        watcher.stop(float("nan"))
