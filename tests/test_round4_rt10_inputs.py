"""Bad input named, nothing of the user's lost; a bundle's modules vouched for by its manifest (red team, round 10,
third pass).

Faults these tests catch: ``xlakit demo --keep-cache DIR`` emptied a folder of the user's own files (``~`` too);
``report --trace F --events F`` replaced the events log with its own output; ``memory.move(x, donate="no")``
deleted the arrays ("no" is truthy), as ``track(reset=)``, ``record(jax_signals=)``, ``summary(fold_library=)``
and ``save(append=)`` took any truthy value; ``live_bytes(memory_kind="devcie")`` / ``device=99`` answered 0
bytes; an explicit ``secret=b""`` signed every entry with an empty key; ``refresh_s=nan`` spun a widget's thread;
``MemoryExplorer(batch_sizes=[1.5])`` became ``[1]``; ``log="x"`` failed at the first compile; an export for
``platforms=["CPU"]`` wrote a bundle no device loads, ``export_bundle(..., "")`` wrote into the current folder;
``CacheBrowser("typo")`` showed an empty cache; ``EventLog.save(folder)`` named ``/proc/self/fd/3``; a bundle
module replaced by another bundle's (or edited) was compiled and served silently, a declared-independent variant
could not serve ``exact=True``, ``bundle warm`` passed over an unusable polymorphic module and ``bundle check``
showed none of the programs compiled from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil

import numpy as np
import pytest
from cli_helpers import run

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlakit  # noqa: E402
from xlakit import events, memory  # noqa: E402


def test_demo_keep_cache_refuses_a_folder_of_the_users_files(tmp_path):
    from xlakit.demo.runner import check_keep_cache

    (tmp_path / "mine.txt").write_text("thesis")
    with pytest.raises(ValueError, match="--keep-cache .*holds files and is not an xlakit cache"):
        check_keep_cache(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "thesis"
    with pytest.raises(ValueError, match="not a folder"):
        check_keep_cache(tmp_path / "mine.txt")
    check_keep_cache(tmp_path / "new")  # missing: fine
    with contextlib.closing(xlakit.ExecutableCache(tmp_path / "cache")) as cache:  # hooks released at the end
        cache.compile(jax.jit(lambda x: x + 1), jnp.ones(2))
    check_keep_cache(tmp_path / "cache")  # an xlakit cache: fine


def test_report_never_writes_over_its_events_file(capsys, tmp_path):
    log = tmp_path / "events.jsonl"
    events.EventLog().save(log)
    before = log.read_bytes()
    for option in ("--trace", "--out"):
        code, _out, err = run(capsys, "report", option, str(log), "--events", str(log))
        assert code == 2 and f"{option} {log} is the --events file" in err
    assert log.read_bytes() == before


def test_flags_must_be_bools(tmp_path):
    x = jnp.ones(4)
    with pytest.raises(TypeError, match="donate must be True or False"):
        memory.move(x, "device", donate="no")
    assert not x.is_deleted()
    with pytest.raises(TypeError, match="reset must be True or False"):
        memory.track(reset="no")
    with pytest.raises(TypeError, match="jax_signals must be True or False"), events.record(jax_signals="no"):
        pass
    with pytest.raises(TypeError, match="fold_library must be True or False"):
        events.EventLog().summary("no")
    with pytest.raises(TypeError, match="append must be True or False"):
        events.EventLog().save(tmp_path / "e.jsonl", append="no")


def test_live_bytes_refuses_what_no_device_has():
    with pytest.raises(ValueError, match="memory_kind='devcie'.*not a memory kind"):
        memory.live_bytes(memory_kind="devcie")
    with pytest.raises(ValueError, match="device=99.*no device"):
        memory.live_bytes(device=99)
    with pytest.raises(TypeError, match="live_bytes\\(device=...\\)"):
        memory.live_bytes(device="cpu")
    kept = jnp.ones(1024, jnp.float32)
    assert memory.live_bytes(device=jax.devices()[0].id) >= 4096 and kept.size == 1024


def test_explicit_secrets_are_bytes_of_16_or_more(tmp_path):
    for bad, error in ((b"", ValueError), (b"short", ValueError), ("text secret long enough", TypeError)):
        with pytest.raises(error, match="secret"):
            xlakit.ExecutableCache(tmp_path / "c", secret=bad)
    xlakit.ExecutableCache(tmp_path / "c", secret=b"0123456789abcdef").close()


def test_widget_and_explorer_numbers_are_checked():
    widgets = pytest.importorskip("xlakit.widgets")
    for bad in (math.nan, 1e10, "1", 0):
        with pytest.raises((TypeError, ValueError)):
            widgets.AllocatorPanel(refresh_s=bad, auto_refresh=False)
    with pytest.raises(Exception, match="refresh_s"):
        widgets.LiveArrays(refresh_s=math.nan)
    for sizes in ([1.5, 2.5], ["8"], [True]):
        with pytest.raises((TypeError, ValueError), match="batch_sizes"):
            widgets.MemoryExplorer(lambda x: x * 2, lambda b: (jnp.ones(b),), batch_sizes=sizes, start=False)


def test_log_platforms_paths_and_folders_are_named(tmp_path):
    with pytest.raises(TypeError, match="log must be an xlakit.events.EventLog"):
        xlakit.ExecutableCache(tmp_path / "c", log="x")
    params, x = {"w": np.ones((3, 2), np.float32)}, np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"platforms: \['CPU'\] is not a jax.export platform"):
        xlakit.export_bundle(lambda p, x: x @ p["w"], params, x, tmp_path / "b", platforms=["CPU"])
    with pytest.raises(ValueError, match="path is empty"):
        xlakit.export_bundle(lambda p, x: x @ p["w"], params, x, "")
    with pytest.raises(ValueError, match="path is empty"):
        xlakit.load_bundle("")
    with pytest.raises(TypeError, match="path must be the bundle folder"):
        xlakit.load_bundle(5)
    widgets = pytest.importorskip("xlakit.widgets")
    with pytest.raises(ValueError, match="no cache folder at .* \\(a typo\\?\\)"):
        widgets.CacheBrowser(str(tmp_path / "typo"))
    with pytest.raises(IsADirectoryError, match="is a folder; give a file in it"):
        events.EventLog().save(tmp_path)
    with pytest.raises(ValueError, match="the path is empty"):
        events.EventLog().save("")


def _export(path, fn, **kw):
    return xlakit.export_bundle(fn, {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)},
                                np.ones((4, 4), np.float32), path, batch_sizes=(1, 4), **kw)


def test_a_module_replaced_by_another_bundles_is_refused(capsys, tmp_path):
    _export(tmp_path / "a", lambda p, x: jnp.tanh(x @ p["w"] * 2.5 + 0.75))
    _export(tmp_path / "b", lambda p, x: jax.nn.relu(x @ p["w"]))
    a = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert set(a["module_sha256"]) == {"model.b1.jaxexp", "model.b4.jaxexp", "model.bpoly.jaxexp"}
    shutil.copy(tmp_path / "b" / "model.bpoly.jaxexp", tmp_path / "a" / "model.bpoly.jaxexp")
    shutil.copy(tmp_path / "b" / "model.b4.jaxexp", tmp_path / "a" / "model.b4.jaxexp")
    with pytest.warns(RuntimeWarning):
        loaded = xlakit.load_bundle(tmp_path / "a", progress=False, background=False, exact=True)
    assert set(loaded.errors) == {"model.b4.jaxexp", "model.bpoly.jaxexp"}
    assert "not the one manifest.json recorded at export" in str(loaded.errors["model.b4.jaxexp"])
    with pytest.raises(xlakit.bundle.ModuleError, match="replaced or edited after export"):
        loaded(np.ones((3, 4), np.float32))
    code, out, _err = run(capsys, "bundle", "warm", str(tmp_path / "a"), "--no-progress")
    assert code == 1 and "model.bpoly.jaxexp (compiled for batch sizes that were not exported) cannot be used" in out
    code, out, _err = run(capsys, "bundle", "check", str(tmp_path / "a"))
    assert code == 1 and out.count("not the bytes manifest.json recorded at export") == 2


def test_declared_variants_serve_exact_sizes_and_check_lists_them(capsys, tmp_path):
    def fn(p, x):
        return jnp.tanh(x @ p["w"])

    manifest = _export(tmp_path / "d", fn, rows_independent=True)
    assert manifest.rows("default")[0] == "declared" and "default" in manifest.polymorphic
    loaded = xlakit.load_bundle(tmp_path / "d", progress=False, background=False, exact=True)
    params = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)}
    for n in (3, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(jax.jit(fn)(params, x)))
    code, out, _err = run(capsys, "bundle", "check", str(tmp_path / "d"), "--json")
    poly = next(m for m in json.loads(out)["modules"] if m["file"] == "model.bpoly.jaxexp")
    assert code == 0 and poly["exact_sizes"] == [3, 5] and poly["partitions"]


def test_group_by_top_throttle_and_remote_mode_are_checked(tmp_path):
    with pytest.raises(TypeError, match="group_by must be a column name"):
        memory.live_arrays(group_by=5)
    with pytest.raises(ValueError, match="group_by is empty"):
        memory.live_arrays(group_by=[])
    with pytest.raises(ValueError, match="remote_mode='ro' without a remote"):
        xlakit.enable_cache(tmp_path / "c", remote_mode="ro")
    widgets = pytest.importorskip("xlakit.widgets")
    traitlets = pytest.importorskip("traitlets")
    for bad in (-1, 0):
        with pytest.raises(traitlets.TraitError, match="top must be an int of at least 1"):
            widgets.LiveArrays(top=bad)
    with pytest.raises((ValueError, traitlets.TraitError), match="throttle_s must be a finite number of seconds"):
        widgets.CacheTimeline(throttle_s=math.nan)
