"""The cache's answers are right in every mode: decisions as values, no invented hits, one name and key per program
whichever way it is cached, explanations from any writer, programs that ran still stored. Programs that need a
fresh process (a second process must hit) run in subprocesses; the rest runs here on small arrays."""

from __future__ import annotations

import ast
import base64
import functools
import json
from pathlib import Path

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_python

import xlakit
from xlakit.cache import entry as cache_entry
from xlakit.cache import explaining

ROOT = Path(__file__).resolve().parent.parent


def test_compile_after_the_program_ran_stores_it_and_the_next_process_hits(tmp_path):
    """Fault: compile() of a program JAX held in memory reported a 'hit' nobody loaded and stored nothing."""
    code = f"""
import json, jax, jax.numpy as jnp, xlakit
cache = xlakit.ExecutableCache({str(tmp_path / 'c')!r})
f = lambda x: jnp.tanh(x) * 2
x = jnp.arange(4.0)
jax.jit(f)(x)                                   # ran in this process first
compiled, d = cache.compile(jax.jit(f), x)
kinds = [e.kind for e in xlakit.events.log().events() if e.source == 'xlakit']
print(json.dumps({{'kind': d.kind, 'loadable': d.loadable, 'bytes': d.bytes, 'folder': d.folder, 'kinds': kinds,
                  'entries': len(cache.entries()), 'out': [float(v) for v in compiled(x)]}}))
"""
    first = json.loads(run_python(code))
    assert first["kind"] == "store" and first["loadable"] and first["bytes"] > 0
    assert first["folder"] == str(tmp_path / "c") and first["entries"] == 1
    assert "hit" not in first["kinds"] and first["kinds"][-1] == "store"
    second = json.loads(run_python(code))
    assert second["kind"] == "hit" and second["kinds"] == ["hit"] and second["out"] == first["out"]


def test_a_sort_program_that_ran_is_stored_from_an_executable_that_never_ran(cache):
    """Fault: on XLA:CPU an executable with a sort cannot be serialized after its first run ("LessThan is not
    serializable") and JAX hands back that same executable; compile_fresh compiles past JAX's memo."""
    from xlakit._jax import serialize
    from xlakit._jax.fresh import compile_fresh

    v = jnp.linspace(0.0, 1.0, 64)

    def g(v):
        return jnp.sort(jnp.outer(v, v), axis=0)[0]

    expected = np.asarray(jax.jit(g)(v))  # the program runs first
    lowered = jax.jit(g).lower(v)
    fresh = compile_fresh(lowered)
    payload, placement = serialize.serialize_compiled(fresh)  # would raise for the executable that ran
    assert np.array_equal(np.asarray(serialize.load_compiled(payload, placement)(v)), expected)

    compiled, decision = cache.compile(jax.jit(g), v)
    assert decision.kind == "store" and decision.loadable, decision
    assert np.array_equal(np.asarray(cache.load(decision.key)(v)), expected)
    assert np.array_equal(np.asarray(compiled(v)), expected)


class _Scale:  # a callable object without __name__
    def __call__(self, x):
        return x * 3.0


def test_partial_and_callable_objects_get_jax_jit_names(cache):
    """Fault: cache.jit named every partial or callable object 'jit_marked', so its key never matched jax.jit's."""

    def scaled(x, k):
        return x * k

    part = functools.partial(scaled, k=2.0)
    x = np.arange(4.0, dtype=np.float32)
    for fn in (part, _Scale()):
        jax_name = jax.jit(fn).lower(x).as_text().split("module @", 1)[1].split(" ", 1)[0]
        cache.jit(fn)(x)
        assert xlakit.events.log().events("store")[-1].name == jax_name
    assert set(cache.entries()["name"]) == {"jit_scaled", "jit__unnamed_function"}


def test_entries_written_by_each_mode_hit_in_the_other(tmp_path):
    code = f"""
import functools, json, sys, jax, numpy as np, xlakit
class Scale:
    def __call__(self, x): return x * 3.0
def scaled(x, k): return x * k
part, obj = functools.partial(scaled, k=2.0), Scale()
x = np.arange(4.0, dtype=np.float32)
xlakit.enable_cache({str(tmp_path / 'c')!r})
cache = xlakit.ExecutableCache({str(tmp_path / 'c')!r})
if sys.argv[-1] == 'write':
    cache.jit(part)(x)   # explicit mode writes the partial
    jax.jit(obj)(x)      # transparent mode writes the object
else:
    jax.jit(part)(x)     # transparent mode reads the partial
    cache.jit(obj)(x)    # explicit mode reads the object
print(json.dumps([(e.kind, e.name) for e in xlakit.events.log().events() if e.kind in ('hit', 'miss', 'store')]))
"""
    import sys

    from conftest import worker_env

    def run(mode):
        proc = fresh_process.run([sys.executable, "-c", code, mode], capture_output=True, text=True, env=worker_env(),
                                 timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [tuple(e) for e in json.loads(proc.stdout.strip().splitlines()[-1])]

    assert run("write") == [("miss", "jit_scaled"), ("store", "jit_scaled"),
                            ("miss", "jit__unnamed_function"), ("store", "jit__unnamed_function")]
    assert run("read") == [("hit", "jit_scaled"), ("hit", "jit__unnamed_function")]


def test_explain_names_the_shape_of_an_entry_written_by_transparent_mode(tmp_path):
    """Fault: entries written by enable_cache() had no signature or module text, so a changed shape was
    explained as 'module'. Also: the nearest entry prefers the fewest differing dimensions; and the jaxlib
    fingerprint memo lives beside the cache in use (enable_cache's folder), not in $XLAKIT_CACHE_DIR."""
    code = f"""
import json, jax, jax.numpy as jnp, numpy as np, xlakit
t = xlakit.enable_cache({str(tmp_path / 'c')!r})
def f(a):
    return jnp.sin(a) * 2
jax.jit(f)(np.ones((256, 256), np.float32))
jax.jit(f)(np.ones((16, 4), np.float32))
jax.jit(f)(np.ones((8, 4), np.float32))
listed = t.entries()
own = t.explain(f, np.ones((300, 256), np.float32)).kinds
xlakit.disable_cache()
cache = xlakit.ExecutableCache({str(tmp_path / 'c')!r})
big = cache.explain(f, np.ones((300, 256), np.float32))
near = cache.explain(f, np.ones((8, 5), np.float32))
def g(a):
    return jnp.cos(a) * 2
g.__name__ = 'f'
edited = cache.explain(g, np.ones((8, 4), np.float32))
print(json.dumps({{'big': [[d.kind, d.part, d.now, d.entry] for d in big.differences], 'text': str(big),
                  'near': [[d.kind, d.part, d.now, d.entry] for d in near.differences],
                  'edited': edited.kinds, 'diff': edited.module_diff, 'own': own, 'listed': len(listed),
                  'entries': t.stats()['entries'], 'signatures': listed['name'].tolist()}}))
"""
    out = json.loads(run_python(code, env={"XLAKIT_CACHE_DIR": str(tmp_path / "default"),
                                           "XLAKIT_FINGERPRINT_MEMO_DIR": ""}))  # unset: the memo goes beside
    assert (tmp_path / "c" / "jaxlib_fingerprints.json").is_file()
    assert not (tmp_path / "default").exists()
    assert out["big"] == [["shape", "argument a", "300x256", "256x256"]]  # f(a): named by its parameter
    assert out["own"] == ["shape"]  # the TransparentCache itself explains, lists and totals its entries
    assert out["listed"] == out["entries"] == 3 and out["signatures"] == ["jit_f"] * 3
    assert "shape" in out["text"] and "differs in: shape" in out["text"]
    assert out["near"] == [["shape", "argument a", "8x5", "8x4"]]
    assert out["edited"] == ["module"] and "stablehlo.cosine" in out["diff"] and "stablehlo.sine" in out["diff"]


def test_module_text_is_decompressed_with_a_bound_and_only_when_authenticated():
    import zstandard

    text = "module @jit_f {}\n" * 100
    assert cache_entry.unpack_text(cache_entry.pack_text(text)) == text
    bomb = zstandard.ZstdCompressor(level=1).compress(b"\0" * (8 << 20))  # declares 8 MiB, ~300 bytes
    assert cache_entry.unpack_text(base64.b64encode(bomb).decode(), limit=1 << 20) is None
    assert cache_entry.unpack_text("not base64 !!") is None

    class Refusing:  # what the store says about an entry whose HMAC fails
        def get(self, partition, key):
            return type("Found", (), {"status": "unauthenticated", "header": {"module_text_zstd": "x"}})()

    info = type("Info", (), {"partition": "p", "key": "k"})()
    assert explaining._authenticated_text(Refusing(), info) is None


def test_signature_distance_prefers_same_rank_and_dtype_then_fewest_dims():
    def sig(*shapes, dtype="f32"):
        return [{"shape": s, "dtype": dtype, "sharding": None, "donation": None} for s in shapes]

    d = explaining.signature_distance
    assert d(sig("8x5"), sig("8x4")) < d(sig("8x5"), sig("16x4"))
    assert d(sig("8x4"), sig("8x4")) == 0
    assert d(sig("8x4"), sig("8x4", dtype="f16")) > d(sig("8x4"), sig("9x5"))
    assert d(sig("8x4"), sig("8x4x1")) > d(sig("8x4"), sig("9x5"))
    assert d(sig("8x4"), sig("8x4", "8x4")) >= 10**6


def test_a_skipped_program_gets_no_loadable_copy(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache", min_compile_time_s=1000.0)
    try:
        compiled, decision = cache.compile(jax.jit(lambda x: x + 1), np.ones(3, np.float32))
        assert decision.kind == "skip" and "min_compile_time_s=1000" in decision.reason
        assert np.asarray(compiled(np.ones(3, np.float32))).tolist() == [2.0, 2.0, 2.0]
        assert cache.store.entries() == []
    finally:
        cache.close()


def test_decision_and_events_carry_folder_memory_and_sizes(cache):
    x = np.ones((16, 16), np.float32)
    _, decision = cache.compile(jax.jit(lambda a: a @ a), x)
    assert decision.kind == "store" and decision.memory["argument_size_in_bytes"] == 1024
    assert decision.bytes == cache.store.entries()[0].size_bytes or decision.bytes > 0
    [event] = xlakit.events.log().events("store")
    assert event.folder == str(cache.store.root) and event.memory == dict(decision.memory)
    assert event.bytes == decision.bytes


def test_empty_listing_has_the_documented_columns(tmp_path):
    """Fault: entries() of an empty cache was a frame without columns (frame['name'] raised)."""
    from xlakit.cache.folder import ENTRY_COLUMNS, CacheFolder

    frame = CacheFolder(tmp_path / "empty").entries()
    assert frame.empty and list(frame.columns) == list(ENTRY_COLUMNS) and frame["name"].tolist() == []


def test_the_folder_api_imports_no_jax_and_installs_nothing(tmp_path):
    code = f"""
import json, sys, xlakit.cache.folder as folder
frame = folder.entries({str(tmp_path / 'c')!r}); stats = folder.stats({str(tmp_path / 'c')!r})
print(json.dumps({{'jax': 'jax' in sys.modules, 'columns': list(frame.columns)[:3], 'entries': stats['entries']}}))
"""
    out = json.loads(run_python(code, new_interpreter=True))
    assert out == {"jax": False, "columns": ["name", "key", "partition"], "entries": 0}


def test_every_wrapped_jax_function_is_version_checked(tmp_path):
    """Fault: only _cache_read/_cache_write were checked; cache_key.get and pjit._run_python_pjit were not."""
    code = f"""
from jax._src import pjit
pjit._run_python_pjit = lambda p, args_flat: None
import xlakit
try:
    xlakit.enable_cache({str(tmp_path / 'c')!r})
except xlakit.UnsupportedJaxVersion as e:
    print(str(e))
"""
    out = run_python(code)
    assert "jax._src.pjit._run_python_pjit('p', 'args_flat') has changed" in out
    assert not (tmp_path / "c").exists()  # refused before the cache folder was created
    assert "ExecutableCache" not in out  # it needs the same hooks: never recommended as the way out


def test_adapters_import_nothing_above_them():
    """Layering: xlakit/_jax imports (at module level) only itself, the store and helpers; events never imports
    _jax at module level (the events <-> listeners import circle is gone)."""
    allowed = ("xlakit._jax", "xlakit.store", "xlakit._atomic", "xlakit._record")
    for path in sorted((ROOT / "xlakit" / "_jax").glob("*.py")) + [ROOT / "xlakit" / "events" / "__init__.py"]:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module + ("." + a.name if node.module == "xlakit" else "") for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if not name.startswith("xlakit"):
                    continue
                if path.parent.name == "events":
                    assert not name.startswith("xlakit._jax"), (path.name, name)
                else:
                    assert name.startswith(allowed), (path.name, name)


def test_folder_api_gives_signatures_removal_events_and_the_current_partition(cache):
    """Fault: the views reached around the folder API (re-reading headers for the argument signature, removing
    files through the store and emitting the evict event themselves, importing xlakit._jax for the current
    environment). The folder API answers all three: a ``signature`` column, ``remove`` recording ``evict``,
    and ``xlakit.cache.current_partition``."""
    from xlakit.cache import CacheFolder, current_environment, current_partition
    from xlakit.events import EventLog

    cache.jit(lambda x: x + 1)(jnp.ones((3, 2), jnp.float32))
    (info,) = cache.store.entries()
    assert info.partition == current_partition() == current_environment().partition_name()
    cache.store.put(info.partition, "0" * 64, {"name": "jit_old", "compile_s": 0.5}, b"written before signatures")
    old_bytes = next(i.size_bytes for i in cache.store.entries() if i.key == "0" * 64)

    log = EventLog()
    folder = CacheFolder(store=cache.store, log=log)
    frame = folder.entries().set_index("key")
    (arg,) = frame.loc[info.key, "signature"]
    assert arg["dtype"] == "f32" and arg["shape"] in ("3x2", [3, 2], (3, 2)), arg
    assert frame.loc["0" * 64, "signature"] is None

    assert folder.remove(info.partition, "0" * 64, "evicted by hand in a test") is True
    [event] = log.events("evict")
    assert (event.key, event.partition, event.name, event.reason) == (
        "0" * 64, info.partition, "jit_old", "evicted by hand in a test")
    assert event.bytes == old_bytes > 0
    assert folder.remove(info.partition, "0" * 64, "again") is False and len(log.events("evict")) == 1
    assert [i.key for i in cache.store.entries()] == [info.key]


def test_constructor_checks_path_and_reads_size_strings(tmp_path):
    # Before the fix: "expected str, bytes or os.PathLike object, not int" from the store's layout code, and
    # "'<=' not supported between instances of 'str' and 'int'" for a size string.
    with pytest.raises(TypeError, match=r"path must be a folder path .*got int 123"):
        xlakit.ExecutableCache(123)
    with pytest.raises(TypeError, match=r"min_compile_time_s must be a number of seconds"):
        xlakit.ExecutableCache(tmp_path / "c", min_compile_time_s="1")
    c = xlakit.ExecutableCache(tmp_path / "c", max_bytes="1G")
    try:
        assert c.store.max_bytes == 10**9
    finally:
        c.close()


def test_jit_compile_and_load_refuse_the_wrong_kind_of_program_at_once(cache):
    def f(x):
        return x * 2

    x = jnp.ones(3)
    lowered = jax.jit(f).lower(x)
    # Before the fix jit(42) and jit(lowered) were accepted and failed only at the first call, inside the hooks.
    with pytest.raises(TypeError, match=r"needs a function to jit, got int 42"):
        cache.jit(42)
    with pytest.raises(TypeError, match=r"not a lowered/compiled program; for a Lowered use cache.compile"):
        cache.jit(lowered)
    # Before the fix a Compiled was traced as a function and failed with a JAX tracer error.
    with pytest.raises(TypeError, match=r"already compiled.*cache.compile\(f, x\)"):
        cache.compile(lowered.compile(), x)
    # Before the fix: "'int' object is not subscriptable".
    with pytest.raises(TypeError, match=r"cache.load\(\) needs an EntryInfo.*got int 123"):
        cache.load(123)
    with pytest.raises(TypeError, match=r"got dict"):
        cache.load({"name": "f"})
    compiled, decision = cache.compile(lowered)
    assert decision.kind == "store"
    [info] = cache.store.entries()
    for entry in (decision.key, info, {"key": decision.key}, cache.entries().iloc[0]):
        assert np.array_equal(np.asarray(cache.load(entry)(x)), np.full(3, 2.0))
