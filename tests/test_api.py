"""The public surface: a light import, enable/disable restoring JAX exactly, the version guard, stats."""

from __future__ import annotations

import json

import pytest
from conftest import run_python

import xlakit


def test_import_is_light_and_changes_nothing():
    out = run_python(
        "import sys, xlakit\n"
        "heavy = [m for m in ('jax', 'jaxlib', 'ipywidgets', 'plotly', 'pandas', 'rich', 'anywidget')\n"
        "         if m in sys.modules]\n"
        "print(repr(heavy))", new_interpreter=True)
    assert out == "[]"


def test_every_subpackage_is_an_attribute_of_a_bare_import_loaded_on_first_use():
    """Fault: after ``import xlakit``, ``xlakit.memory.peak(...)`` (the README's memory line) raised
    AttributeError: only ``xlakit.widgets`` was reachable. Each subpackage is imported when first named."""
    out = run_python(
        "import sys, xlakit\n"
        "before = [m for m in ('xlakit.memory', 'xlakit.bundle', 'xlakit.widgets') if m in sys.modules]\n"
        "found = [callable(xlakit.memory.peak), callable(xlakit.bundle.load_bundle),\n"
        "         callable(xlakit.store.LocalStore)]\n"
        "print(repr((before, found, 'xlakit.memory' in sys.modules)))")
    assert out == "([], [True, True, True], True)"


def test_enable_then_disable_restores_jax_settings_and_hooks(tmp_path):
    code = f"""
import json, logging, jax
from jax._src import compiler
jax.config.update('jax_compilation_cache_dir', '/somewhere/jax-cache')
jax.config.update('jax_persistent_cache_min_compile_time_secs', 2.5)
names = ['jax_enable_compilation_cache', 'jax_compilation_cache_dir',
         'jax_persistent_cache_min_compile_time_secs', 'jax_persistent_cache_min_entry_size_bytes']
before = {{n: getattr(jax.config, n) for n in names}}
originals = (compiler._cache_read, compiler._cache_write, __import__("jax._src.pjit")._src.pjit._run_python_pjit)
level = logging.getLogger('jax._src.cache_key').level
import xlakit
cache = xlakit.enable_cache({str(tmp_path / 'c')!r})
during = {{n: getattr(jax.config, n) for n in names}}
from xlakit._jax import hooks
hooked = (compiler._cache_read is hooks._cache_read and compiler._cache_write is hooks._cache_write
          and hooks._default is cache)
print(xlakit.disable_cache(), xlakit.disable_cache(), file=__import__('sys').stderr)
after = {{n: getattr(jax.config, n) for n in names}}
print(json.dumps({{'before': before, 'during': during, 'after': after, 'hooked': hooked,
                  'restored': (compiler._cache_read, compiler._cache_write,
                               __import__("jax._src.pjit")._src.pjit._run_python_pjit) == originals,
                  'level_restored': logging.getLogger('jax._src.cache_key').level == level}}))
"""
    r = json.loads(run_python(code))
    assert r["hooked"] and r["restored"] and r["level_restored"]
    assert r["before"] == r["after"]
    assert r["before"]["jax_compilation_cache_dir"] == "/somewhere/jax-cache"
    assert r["during"]["jax_compilation_cache_dir"] is None  # no path can reach the compile options
    assert r["during"]["jax_persistent_cache_min_compile_time_secs"] == 0.0


def test_unsupported_jax_is_refused_with_the_supported_versions():
    code = """
import jax, xlakit
jax.__version__ = '0.4.1'
try:
    xlakit.enable_cache('/tmp/never-created-xlakit')
except Exception as e:
    print(type(e).__name__ + ': ' + str(e))
"""
    out = run_python(code)
    assert out.startswith("UnsupportedJaxVersion: ")
    assert "0.4.1 is outside the supported range" in out and ">=0.9.0,<0.13" in out


def test_changed_hook_signature_is_refused():
    code = """
from jax._src import compiler
compiler._cache_read = lambda key, backend: None
import xlakit
try:
    xlakit.enable_cache('/tmp/never-created-xlakit')
except Exception as e:
    print(type(e).__name__ + ': ' + str(e))
"""
    out = run_python(code)
    assert out.startswith("UnsupportedJaxVersion: ") and "_cache_read('key', 'backend') has changed" in out


def test_cache_stats_from_real_compiles_and_hits(tmp_path):
    code = f"""
import jax, numpy as np, xlakit
xlakit.enable_cache({str(tmp_path / 'c')!r})
f = lambda x: jax.numpy.sin(x) @ x.T
jax.jit(f)(np.ones((64, 64), np.float32))
s = xlakit.cache_stats()
print(s.counts['miss'], s.counts['compile'], s.counts['store'], s.counts['hit'], s.compile_s > 0, s.stored_bytes > 0)
"""
    assert run_python(code) == "1 1 1 0 True True"
    warm = run_python(code.replace("print(s.counts['miss']", "print(s.saved_s >= 0, s.load_s > 0, s.counts['miss']"))
    assert warm == "True True 0 0 0 1 False False"


def test_stats_saved_seconds_never_negative():
    from xlakit.events import EventLog

    log = EventLog()
    log.emit("hit", name="f", duration_s=0.5, saved_s=-0.4)  # a load slower than the compile it replaced
    log.emit("hit", name="g", duration_s=0.1, saved_s=2.0)
    log.emit("compile", name="h", duration_s=1.5)
    stats = log.stats()
    assert stats.saved_s == 2.0 and stats.load_s == 0.6 and stats.compile_s == 1.5 and stats.hits == 2


def test_event_log_is_bounded_and_observable():
    from xlakit.events import EventLog

    log = EventLog(maxlen=3)
    seen = []
    unsubscribe = log.subscribe(seen.append)
    for i in range(5):
        log.emit("miss", name=f"f{i}")
    unsubscribe()
    log.emit("miss", name="after")
    assert [e.name for e in log.events()] == ["f3", "f4", "after"]
    assert [e.name for e in seen] == ["f0", "f1", "f2", "f3", "f4"]
    assert log.stats().counts["miss"] == 6  # totals are never dropped with old events
    frame = log.to_frame()
    assert list(frame["name"]) == ["f3", "f4", "after"] and "reason" in frame.columns


@pytest.mark.parametrize("kwargs, error, match", [
    ({"path": 123}, TypeError, r"path must be a folder path .*got int 123"),
    ({"max_bytes": "lots"}, ValueError, r"max_bytes: invalid size 'lots'.*500MB or 2GiB"),
    ({"max_bytes": True}, TypeError, r"max_bytes must be an int number of bytes.*got bool True"),
    ({"max_bytes": 1.5e9}, TypeError, r"max_bytes must be an int number of bytes.*got float"),
    ({"max_bytes": 0}, ValueError, r"max_bytes must be a positive number of bytes"),
    ({"min_compile_time_s": "1s"}, TypeError, r"min_compile_time_s must be a number of seconds.*got str '1s'"),
    ({"min_compile_time_s": float("nan")}, ValueError, r"min_compile_time_s must be a finite number"),
    ({"min_compile_time_s": -1}, ValueError, r"min_compile_time_s must be a finite number of seconds >= 0"),
    # a bare OverflowError before: int(float("1" * 400)) and math.isfinite(10**400)
    ({"max_bytes": "1" * 400}, ValueError, r"max_bytes: size '1111.*\(402 characters\) is more than the largest"),
    ({"max_bytes": 10**400}, ValueError, r"max_bytes: 1000.*is more than the largest cap xlakit accepts"),
    ({"min_compile_time_s": 10**400}, ValueError, r"min_compile_time_s must be a finite number of seconds"),
    ({"min_compile_time_s": 1e10}, ValueError, r"min_compile_time_s must be .* at most 1e\+09"),
])
def test_enable_cache_refuses_bad_arguments_by_name_before_touching_jax(tmp_path, kwargs, error, match):
    # Before the fix these failed deep inside (os.fspath of an int in store/layout.py, "'<=' not supported"
    # between str and int) or were silently accepted (NaN, True).
    from xlakit.cache import transparent

    kwargs.setdefault("path", tmp_path / "c")
    with pytest.raises(error, match=match):
        xlakit.enable_cache(**kwargs)
    assert transparent.active() is None
    assert not (tmp_path / "c").exists()


def test_size_strings_are_read_like_the_cli_and_parse_size_has_one_home():
    from xlakit._units import check_max_bytes, parse_size
    from xlakit.cli import parse_size as cli_parse_size

    assert cli_parse_size is parse_size
    assert check_max_bytes("2GB") == 2 * 10**9
    assert check_max_bytes("500MiB") == 500 * 2**20
    assert check_max_bytes(4096) == 4096
    assert check_max_bytes(None) is None


def test_a_tilde_cache_path_is_the_home_folder_not_a_folder_named_tilde(tmp_path, monkeypatch):
    """`enable_cache("~/x")` once created a folder literally named `~` in the working directory (and the first
    compile stored there): a trap that invites `rm -rf ~`. The same holds for ExecutableCache and the variable."""
    import jax
    import jax.numpy as jnp

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    cache = xlakit.enable_cache("~/xlk-cache")
    try:
        assert cache.path == home / "xlk-cache" and cache.path.is_dir()  # created (and so checked) at enable
        jax.jit(lambda x: x * 3 + 1)(jnp.arange(4.0))
        assert list((home / "xlk-cache").rglob("*.xlk"))
    finally:
        xlakit.disable_cache()
    monkeypatch.setenv("XLAKIT_CACHE_DIR", "~/from-env")
    explicit = xlakit.ExecutableCache()
    try:
        assert explicit.path == home / "from-env"
    finally:
        explicit.close()
    # Every other path the API writes: a bundle, an event log, a report.
    import numpy as np

    xlakit.export_bundle(lambda p, x: x * p["s"], {"s": np.float32(2)}, np.ones((1, 2), np.float32), "~/bundle",
                         batch_sizes=(1,))
    assert (home / "bundle" / "manifest.json").is_file()
    assert xlakit.load_bundle("~/bundle", progress=False, background=False).manifest.batch_sizes == (1,)
    xlakit.events.log().save("~/events.jsonl")
    assert (home / "events.jsonl").is_file() and xlakit.EventLog.load("~/events.jsonl") is not None
    assert not (work / "~").exists()


@pytest.mark.parametrize("opener", ["enable_cache", "ExecutableCache"])
def test_an_unusable_cache_folder_is_an_error_from_the_call_that_opened_it(tmp_path, opener):
    """A file given as the cache folder, or a folder that cannot be created, was reported only at the first
    compile (as a store_error): the call that named the folder now raises, naming the path and what to do."""
    from xlakit.cache import transparent
    from xlakit.store import CacheFolderError

    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for path, why in ((afile, "is a file, not a folder"), (afile / "cache", "cannot create cache folder")):
        with pytest.raises(CacheFolderError, match=why) as caught:
            getattr(xlakit, opener)(path)
        assert str(path) in str(caught.value) and "XLAKIT_CACHE_DIR" in str(caught.value)
        assert isinstance(caught.value, OSError)
    assert transparent.active() is None and afile.read_text() == "not a folder"


def test_a_cache_folder_from_the_variable_is_named_as_such(tmp_path, monkeypatch):
    """With $XLAKIT_CACHE_DIR naming a file, the error advised "or set XLAKIT_CACHE_DIR" although it was set."""
    from xlakit.store import CacheFolderError

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "afile"))
    with pytest.raises(CacheFolderError, match=r"it comes from \$XLAKIT_CACHE_DIR: set that to a folder"):
        xlakit.ExecutableCache()
    # A name too long for the filesystem raised a bare OSError (ENAMETOOLONG) from the first lstat, naming nothing.
    monkeypatch.setenv("XLAKIT_CACHE_DIR", "9" * 400)
    with pytest.raises(CacheFolderError, match=r"File name too long.*it comes from \$XLAKIT_CACHE_DIR") as caught:
        xlakit.ExecutableCache()
    assert "(400 characters)" in str(caught.value) and len(str(caught.value)) < 400
