"""Round four, the faults a further red team (three helpers, 2026-12-06) found in issue 34's kinds: bundles (the
load line blamed for a bundle's bytes, inputs named like the call's own parameters, 0 rows, a manifest edited to
disagree with its modules), recompile blame (user contexts compared by a cut text or dropped, a trace that raised
kept as compiled, two lambdas on one line taken for one function, the recompile table naming one of two arguments
that changed together) and settings (XLAKIT_CAPTURE_ASSIGNMENT spellings, a NUL in a path, a quarantine that is a
link, ``file://host/...``, options for a folder, a fingerprint memo folder that is a file)."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xlakit
from xlakit import events

# -- bundles --------------------------------------------------------------------------------------------------


def test_a_bundle_programs_bytes_are_not_charged_to_the_line_that_loaded_it(tmp_path):
    from xlakit import memory

    def infer(p, x):
        return jnp.sort(jnp.outer(x[0], x[0]) * p["s"], axis=0)[:1] + x[:, :1]

    params, x = {"s": np.float32(2)}, np.ones((1, 256), np.float32)
    xlakit.export_bundle(infer, params, x, tmp_path / "b", batch_sizes=(1,))
    loaded = xlakit.load_bundle(tmp_path / "b", progress=False, background=False)
    sources = set(memory.attribute(loaded, batch=1).buffers["source"])
    assert not any("test_round4_rt11.py" in str(s) for s in sources), sources  # was the load_bundle line
    biggest = memory.attribute(loaded, batch=1).buffers.sort_values("bytes").iloc[-1]
    assert biggest["bytes"] == 256 * 256 * 4 and biggest["source"] == "unknown"


def test_an_input_named_variant_is_refused_at_export_and_one_named_self_is_called_by_name(tmp_path):
    params = {"w": np.ones((3, 4), np.float32)}

    def fn(p, x, **kw):
        return x @ p["w"] + next(iter(kw.values()))[:, None]

    with pytest.raises(ValueError, match="named 'variant'.*rename that input"):
        xlakit.export_bundle(fn, params, {"x": np.ones((2, 3), np.float32), "variant": np.ones(2, np.float32)},
                             tmp_path / "v", batch_sizes=(2,))
    example = {"x": np.ones((2, 3), np.float32), "self": np.arange(2, dtype=np.float32)}
    xlakit.export_bundle(fn, params, example, tmp_path / "s", batch_sizes=(2,))
    loaded = xlakit.load_bundle(tmp_path / "s", progress=False, background=False)
    np.testing.assert_array_equal(loaded(**example), jax.jit(fn)(params, **example))  # was "multiple values"


def test_zero_rows_give_zero_rows_where_rows_are_independent_and_a_clear_error_where_not(tmp_path):
    params = {"w": np.ones((3, 4), np.float32)}
    xlakit.export_bundle(lambda p, x: x @ p["w"], params, np.ones((2, 3), np.float32), tmp_path / "rows",
                         batch_sizes=(2,))
    for exact in (False, True):
        out = xlakit.load_bundle(tmp_path / "rows", progress=False, background=False, exact=exact)(
            np.zeros((0, 3), np.float32))
        assert out.shape == (0, 4) and out.dtype == np.float32  # as jax.jit answers; was "empty batch"
    xlakit.export_bundle(lambda p, x: (x - x.mean(0)) @ p["w"], params, np.ones((2, 3), np.float32),
                         tmp_path / "coupled", batch_sizes=(2,))
    coupled = xlakit.load_bundle(tmp_path / "coupled", progress=False, background=False)
    with pytest.raises(ValueError, match="0 rows.*not proven or declared independent"):
        coupled(np.zeros((0, 3), np.float32))


def test_a_manifest_edited_to_disagree_with_a_module_refuses_the_variant_instead_of_dropping_rows(tmp_path):
    params = {"w": np.ones((3, 4), np.float32)}
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    xlakit.export_bundle(lambda p, x: x @ p["w"], params, x, tmp_path / "b", batch_sizes=(2, 4))
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    manifest["outputs"]["default"][0]["shape"] = [2, 4]  # the batched output declared fixed: 2 of 4 rows returned
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = xlakit.load_bundle(tmp_path / "b", progress=False, background=False)
        with pytest.raises(KeyError, match=r"variant 'default' is not used: .*model\.b4\.jaxexp.*float32\[4,4\], "
                                           r"manifest\.json says float32\[2,4\].*re-export"):
            loaded(x)


# -- recompile blame ------------------------------------------------------------------------------------------


def _recompiles(calls) -> list:
    with events.record() as log:
        calls()
    return log.events("recompile")


def test_user_contexts_that_differ_late_or_print_their_address_are_named_as_the_change():
    ctx = jax.make_user_context(default_value=None)

    class Mode:  # hashable, ==-comparable, printed with its address
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return isinstance(other, Mode) and other.v == self.v

        def __hash__(self):
            return hash(self.v)

    f = jax.jit(lambda x: x * 2)

    def calls():
        with ctx("mode=" + "x" * 130 + "A"):
            f(1.0)
        with ctx("mode=" + "x" * 130 + "B"):
            f(1.0)
        with ctx(Mode("train")):
            f(1.0)
        with ctx(Mode("eval")):
            f(1.0)
        with ctx(Mode("eval")):
            f(1.0)  # equal to the last: JAX's cache answers, no trace

    found = _recompiles(calls)
    assert len(found) == 3, [e.reason for e in found]  # each was "no argument changed ... evicted entry"
    for e in found:
        assert [c["what"] for c in e.changes] == ["config"] and e.changes[0]["path"].startswith("user_context"), e
    assert "sha256" in found[0].changes[0]["before"] and found[0].changes[0]["before"] != found[0].changes[0]["after"]
    assert found[2].changes[0]["after"].startswith("Mode object (hash ")


def test_a_trace_that_raised_is_no_compiled_signature_and_two_lambdas_on_one_line_are_two_functions():
    f = jax.jit(lambda x, y: x * y)

    def calls():
        f(jnp.ones(2), jnp.ones(2))
        for _ in range(2):
            with pytest.raises(TypeError):
                f(jnp.ones(2), jnp.ones(3))  # the trace raises: nothing compiled
        f(jnp.ones(3), jnp.ones(3))

    found = _recompiles(calls)
    assert [e.reason for e in found] == ["x: shape float32[2] -> float32[3]; y: shape float32[2] -> float32[3]"]
    inc, dbl = jax.jit(lambda x: x + 1), jax.jit(lambda x: x * 2)
    assert _recompiles(lambda: (inc(1.0), dbl(1.0))) == []  # dbl was "a new function object (same code)"


def test_the_recompile_table_names_every_argument_that_changed_together():
    f = jax.jit(lambda x, y: x.sum() + y.sum())
    with events.record() as log:
        f(jnp.ones(3), jnp.ones(4))
        f(jnp.ones(5), jnp.ones(6))
    row = log.recompiles().iloc[0]
    assert (row.argument, row.what) == ("x, y", "shape")
    assert row.values_seen == "x: float32[3], float32[5]; y: float32[4], float32[6]"


# -- settings -------------------------------------------------------------------------------------------------


def test_capture_setting_spellings_and_a_value_not_understood_is_told(monkeypatch):
    from xlakit._jax import dump_memo

    for text, want in [("off", False), ("OFF", False), ("no", False), ("false", False), ("0", False), ("on", True),
                       ("Yes", True), ("1", True), ("", None)]:
        assert dump_memo._capture_setting(text) is want, text
    with pytest.warns(RuntimeWarning, match="XLAKIT_CAPTURE_ASSIGNMENT='maybe' is not understood"):
        assert dump_memo._capture_setting("maybe") is None
    monkeypatch.setenv("XLAKIT_CAPTURE_ASSIGNMENT", "off")
    assert dump_memo.capture_enabled("tpu") is False  # was on: only "0" was read


def test_a_path_with_a_nul_names_the_setting(tmp_path):
    with pytest.raises(ValueError, match=r"^path '.*\\x00x' holds a NUL character"):
        xlakit.enable_cache(str(tmp_path / "c") + "\0x")


def test_file_urls_name_a_folder_and_take_no_options(tmp_path):
    from xlakit.store.remote import RemoteStore, check_url

    with pytest.raises(ValueError, match="three slashes.*names a host 'shared'"):
        check_url("file://shared/cache")  # was taken as /cache at the file system's root
    assert RemoteStore(f"file://localhost{tmp_path}")._root == str(tmp_path)
    with pytest.raises(ValueError, match=r"is a folder: it takes no remote options \(got \['anon'\]\)"):
        RemoteStore(f"file://{tmp_path}", storage_options={"anon": True})


def test_a_quarantine_that_is_a_link_is_named_so(tmp_path, monkeypatch):
    from xlakit.store import LocalStore

    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    store = LocalStore(tmp_path / "cache", secret=b"test-secret-of-32-bytes-length!!")
    part = "cpu-jaxlib0.10.2-x86_64-avx512-3f2a9c1e"
    store.put(part, "k", {"name": "f", "compile_s": 0.25, "environment": {"platform": "cpu"}}, b"payload" * 100)
    path = store.root / part / "k.xlk"
    path.write_bytes(path.read_bytes()[:-5])
    (tmp_path / "elsewhere").mkdir()
    (store.root / "quarantine").symlink_to(tmp_path / "elsewhere")
    res = store.get(part, "k")
    assert res.status == "corrupt" and path.exists() and not any((tmp_path / "elsewhere").iterdir())
    assert "it is a symbolic link, which xlakit never follows there; make it a real folder" in res.disposition


def test_a_fingerprint_memo_folder_that_is_a_file_is_told_once(tmp_path, monkeypatch):
    from xlakit.store import layout

    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("XLAKIT_FINGERPRINT_MEMO_DIR", str(tmp_path / "afile"))
    monkeypatch.setattr(layout, "_told_memo", set())
    with pytest.warns(RuntimeWarning, match="is not a folder, so the fingerprint memo cannot be kept there"):
        layout.fingerprint_memo_override()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layout.fingerprint_memo_override()  # once


def test_constants_are_counted_once_where_xla_counts_them_in_the_code_figure():
    """Recorded on the TPU v5e of the device tool (jax 0.10.2, libtpu cl/933746096, 2026-12-06, a red-team helper):
    ``tanh(x @ W)`` with W a closed-over f32[4096, 4096] (XLA's bf16[4096,4096] constant, 33,554,432 B):
    generated_code_size_in_bytes 33,665,024 B, and bytes_in_use rose by 33,795,584 B over the compile and one run
    (code + outputs): the constant is inside the code figure. The footprint counted it twice (67,481,600 B). The
    code and constant figures below are the recorded ones; argument, output and temp are small stand-ins."""
    from xlakit.memory._footprint import footprint_terms
    from xlakit.memory.compiled import CompiledMemory

    def memory(platform):
        return CompiledMemory(name="f", platform=platform, source="recorded", argument_bytes=16384,
                              output_bytes=16384, alias_bytes=0, temp_bytes=114688,
                              generated_code_bytes=33_665_024, constant_bytes=33_554_432)

    tpu = footprint_terms(memory("tpu"))
    assert tpu == {"argument_bytes": 16384, "output_bytes": 16384, "temp_bytes": 114688,
                   "constant_bytes": 33_554_432, "code_bytes": 33_665_024 - 33_554_432}
    assert memory("tpu").footprint_bytes == 16384 + 16384 + 114688 + 33_665_024  # was + 33,554,432 again
    assert footprint_terms(memory("gpu"))["code_bytes"] == 110_592  # XLA:GPU's code size adds its constants
    assert footprint_terms(memory("cpu"))["code_bytes"] == 0
    unknown = footprint_terms(memory("newchip"))  # not known: both counted, erring on the side of fitting
    assert unknown["code_bytes"] == 33_665_024 and unknown["constant_bytes"] == 33_554_432


# -- the verifying helper's further instances (same session) ----------------------------------------------------


def test_inputs_with_no_name_or_no_rows_are_refused_at_export_and_keys_answer_zero_rows(tmp_path):
    params = {"w": np.ones((3, 4), np.float32)}
    with pytest.raises(ValueError, match="named '' .*name every input"):  # was exported, then refused at load
        xlakit.export_bundle(lambda p, **kw: kw[""] @ p["w"], params, {"": np.ones((2, 3), np.float32)},
                             tmp_path / "e", batch_sizes=(2,))
    with pytest.raises(ValueError, match="input 'x' has 0 rows: example inputs need at least one row"):
        xlakit.export_bundle(lambda p, x: x @ p["w"], params, np.ones((0, 3), np.float32), tmp_path / "z",
                             batch_sizes=(1, 2))  # was a ZeroDivisionError recorded as "size-dependent"

    def keyed(p, k, x):
        return jax.vmap(lambda kk: jax.random.normal(kk, (3,)))(k) + x

    keys = jax.random.split(jax.random.key(0), 2)
    xlakit.export_bundle(keyed, params, (keys, np.ones((2, 3), np.float32)), tmp_path / "k", batch_sizes=(1, 2))
    loaded = xlakit.load_bundle(tmp_path / "k", progress=False, background=False)
    out = loaded(keys[:0], np.zeros((0, 3), np.float32))  # was refused: no key row to pad with
    assert out.shape == (0, 3) == jax.jit(keyed)(params, keys[:0], jnp.zeros((0, 3))).shape


def test_a_user_context_that_prints_and_hashes_alike_but_is_not_equal_is_named():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        name: str
        lr: float = dataclasses.field(hash=False, repr=False)

    ctx = jax.make_user_context(default_value=None)
    f = jax.jit(lambda x: x + 1)

    def calls():
        with ctx(Cfg("a", 0.1)):
            f(1.0)
        with ctx(Cfg("a", 0.2)):
            f(1.0)

    (found,) = _recompiles(calls)  # was "no argument changed ... evicted entry"
    assert found.changes[0]["what"] == "config" and "prints the same but is not ==" in found.reason


def test_an_argument_whose_shape_and_dtype_changed_is_listed_once():
    k = jax.jit(lambda x, y: x.sum() + y.sum())
    with events.record() as log:
        k(jnp.ones(3), jnp.ones(3))
        k(jnp.ones(4), jnp.ones(4, jnp.int32))
    row = log.recompiles().iloc[0]
    assert row.values_seen == "x: float32[3], float32[4]; y: float32[3], int32[4]"  # y was listed twice


def test_values_that_overflow_int64_together_are_refused_and_file_urls_never_name_the_root():
    from xlakit._jax import extents
    from xlakit.store.remote import check_url

    def outputs(x):
        return tuple(jnp.broadcast_to(x + i, (2**59,)) for i in range(5))  # each 2 EiB, 10 EiB together

    traced = jax.jit(outputs).trace(jax.ShapeDtypeStruct((), jnp.float32))  # tracing never aborts
    with pytest.raises(ValueError, match="holds values of .* bytes together .*overflow int64"):
        extents.check_jaxpr(traced.jaxpr)  # peak read 6 EiB: the int64 sums wrapped
    for url in ("file:///", "file://localhost", "file://localhost/"):
        with pytest.raises(ValueError, match="names the file system.s root|names no bucket or folder"):
            check_url(url)


def test_exporting_and_loading_a_bundle_is_no_recompile_of_the_users_function(tmp_path):
    """Each exported size, row probe and load-time compile traces again: xlakit's own traces. They were reported
    as recompiles ('jit_call ... Exported.call: a new function object'), and a bundle of 6 sizes set off the
    RecompileWarning of a user who never called anything twice."""
    with events.record() as log:
        xlakit.export_bundle(lambda p, x: jnp.tanh(x @ p["w"]), {"w": np.ones((3, 4), np.float32)},
                             np.ones((2, 3), np.float32), tmp_path / "b", batch_sizes=(1, 2, 4))
        loaded = xlakit.load_bundle(tmp_path / "b", progress=False, background=False, exact=True)
        loaded(np.ones((3, 3), np.float32))  # an exact size compiled on the call
    assert log.events("recompile") == []
    assert list(loaded.report()["status"]) == ["miss"] * 4  # 3 sizes and the exact one: each traced and compiled


def test_context_values_equal_to_jax_are_no_change_and_a_memory_tools_trace_is_not_the_users():
    """A third helper's instances: values JAX's key takes as one (1 and 1.0, np.int64(1) and 1, reordered
    metadata, a repr that differs per instance) were named as a config change beside the real cause; and
    ``peak(f, x)`` traced f as if the user had called it, so the user's first ``jax.jit(f)(x)`` read as a
    recompile ("no argument changed")."""
    from xlakit import memory

    ctx = jax.make_user_context(default_value=None)
    f = jax.jit(lambda x: x * 2)

    def calls():
        with ctx(1):
            f(jnp.ones(3))
        with ctx(1.0):
            f(jnp.ones(4))
        with ctx(np.int64(1)):
            f(jnp.ones(5))

    assert [e.reason for e in _recompiles(calls)] == ["x: shape float32[3] -> float32[4]",
                                                      "x: shape float32[4] -> float32[5]"]

    def g(x):
        return jnp.sin(x).sum()

    def look_then_run():
        memory.peak(g, jnp.ones(3))
        jax.jit(g)(jnp.ones(3))

    assert _recompiles(look_then_run) == []


def test_cache_answered_traces_wrappers_and_callable_objects_are_no_recompiles():
    """A fourth helper's instances (2026-12-06): jax.eval_shape / make_jaxpr of a jitted function (JAX times the
    call; nothing is compiled from it) read as recompiles and set off the RecompileWarning; two
    unrelated callable objects were one "<unnamed function>"; an object holding a ``.func`` attribute was taken for
    that function; ``jax.jit(jax.vmap(jf))`` for a recompile of f."""
    runs = []

    def f(x):
        runs.append(x.shape)
        return x * 2

    jf = jax.jit(f)

    class Alpha:
        def __call__(self, x):
            return x + 1

    class Block:
        def __init__(self, act):
            self.func = act

        def __call__(self, w, x):
            return self.func(x @ w)

    def calls():
        jf(jnp.ones(3))
        for _ in range(7):
            jax.eval_shape(jf, jnp.ones(3))
            jax.make_jaxpr(jf)(jnp.ones(3))
        jax.jit(Alpha())(jnp.ones(2))
        jax.jit(lambda y: y.sum())(jnp.ones((2, 2)))
        jax.jit(Block(jnp.tanh))(jnp.ones((3, 3)), jnp.ones((2, 3)))
        jax.jit(jax.vmap(jf))(jnp.ones((5, 3)))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RecompileWarning either
        assert [e.reason for e in _recompiles(calls)] == []
    assert runs[0] == (3,)


def test_pytree_metadata_equal_to_jax_is_no_structure_change():
    import dataclasses

    @dataclasses.dataclass
    class P:
        w: jax.Array
        n: float

    jax.tree_util.register_dataclass(P, data_fields=["w"], meta_fields=["n"])
    f = jax.jit(lambda p: p.w * 2)

    def calls():
        f(P(jnp.ones(3), 1))
        f(P(jnp.ones(3), 1.0))  # == to JAX: no trace
        f(P(jnp.ones(4), 1.0))

    assert [e.reason for e in _recompiles(calls)] == ["p.w: shape float32[3] -> float32[4]"]  # was also "structure"
