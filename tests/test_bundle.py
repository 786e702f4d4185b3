"""Bundles end to end on CPU: export, cold and warm loads, the module-hash record, bad input, placement, CLI.

Models are small (a flax.nnx Linear-LayerNorm-Linear, the demo CNN at one batch size, and a plain affine map
for API checks) so the file runs in well under a minute. Equality claims, each stated where asserted:

* bundle output vs the original function at an exported batch size: **bit-identical** — the exported module
  lowers to the same HLO as ``jax.jit(fn)``, so XLA compiles the same program;
* warm (loaded) vs cold (just compiled) bundle outputs, parallel vs serial loads: **bit-identical** — the
  same executable runs;
* a padded call (batch 3 through the batch-4 program) vs the original at batch 3: **allclose** — a
  different program (other shapes) computes the rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bundle_helpers import forget_module_hashes
from conftest import run_python
from flax import nnx

import xlakit
from xlakit import events
from xlakit.bundle import (
    BundleWatcher,
    LoadedBundle,
    ManifestError,
    ModuleError,
    WeightsError,
    check_bundle,
    export_bundle,
    load_bundle,
)
from xlakit.bundle.hashes import RECORD, program_key, read_record
from xlakit.cli import main as cli_main


class Tiny(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(4, 8, rngs=rngs)
        self.norm = nnx.LayerNorm(8, rngs=rngs)
        self.l2 = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.relu(self.norm(self.l1(x))))


def tiny_model(seed: int = 0):
    """``(fn, state)``: ``fn(state, x)`` with ``state`` a real ``nnx.State`` of Params, filled from NumPy
    (building it abstractly compiles nothing)."""
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Tiny(nnx.Rngs(0))))
    rng = np.random.default_rng(seed)
    state = jax.tree.map(lambda s: jnp.asarray(rng.standard_normal(s.shape).astype(s.dtype)), abstract)

    def fn(state, x):
        return nnx.merge(graphdef, state)(x)

    return fn, state


def xs(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def affine(params, x):
    return x @ params["w"] + params["b"]


AFFINE = {"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "b": np.ones(3, np.float32)}


def kinds(log, source=None) -> list[str]:
    return [e.kind for e in log if source is None or e.source == source]


def load(path, **kw) -> LoadedBundle:
    return load_bundle(path, progress=False, **kw).wait()  # every program loaded (or failed), events emitted


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory):
    """An exported Tiny bundle (batch sizes 1 and 4) without .cache; tests copy it."""
    fn, state = tiny_model()
    path = tmp_path_factory.mktemp("pristine") / "tiny"
    export_bundle(fn, state, xs(2), path, batch_sizes=(4, 1))
    return path, fn, state


@pytest.fixture
def bundle(tiny_bundle, tmp_path):
    src, fn, state = tiny_bundle
    dest = tmp_path / "tiny"
    shutil.copytree(src, dest)
    return dest, fn, state


# -- round trip -----------------------------------------------------------------------------------------------

def test_nnx_state_round_trip_cold_then_warm(bundle):
    path, fn, state = bundle
    # Why weights are flattened: jax.export cannot serialize the nnx.State tree itself.
    with pytest.raises(Exception, match="Cannot serialize PyTreeDef"):
        jax.export.export(jax.jit(fn))(state, xs(4)).serialize()

    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["inputs"] == [{"name": "x", "shape": ["batch", 4], "dtype": "float32"}]
    assert manifest["outputs"] == {"default": [{"name": "output", "shape": ["batch", 3], "dtype": "float32"}]}
    assert manifest["batch_sizes"] == [1, 4]
    assert sorted(manifest["weights"]["tensors"]) == ["l1.bias.value", "l1.kernel.value", "l2.bias.value",
                                                      "l2.kernel.value", "norm.bias.value", "norm.scale.value"]
    assert manifest["weights"]["tensors"]["l1.kernel.value"] == {"shape": [4, 8], "dtype": "float32"}
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "model.b1.jaxexp", "model.b4.jaxexp",
                                                      "model.bpoly.jaxexp", "weights.safetensors"]

    with events.record() as cold_log:
        cold = load(path)
    assert cold.counts() == {"hit": 0, "miss": 2, "error": 0}
    assert kinds(cold_log, "xlakit").count("store") == 2
    x4 = xs(4)
    want = np.asarray(jax.jit(fn)(state, x4))
    got_cold = np.asarray(cold(x4))
    np.testing.assert_array_equal(got_cold, want)  # bit-identical: same HLO, same compiled program

    warm = load(path)
    assert warm.counts() == {"hit": 2, "miss": 0, "error": 0}
    np.testing.assert_array_equal(np.asarray(warm(x4)), got_cold)  # bit-identical: the same executable
    np.testing.assert_array_equal(np.asarray(warm(x4[:1])), np.asarray(jax.jit(fn)(state, x4[:1])))

    # batch 3 runs through the batch-4 program (padded with zeros, cut back): a different program than
    # jax.jit(fn) at batch 3, so allclose, not bit-identical.
    out3 = np.asarray(warm(x4[:3]))
    assert out3.shape == (3, 3)
    np.testing.assert_allclose(out3, np.asarray(jax.jit(fn)(state, x4[:3])), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out3, got_cold[:3])  # row-wise model: padding rows do not leak in


def test_demo_cnn_nested_dict_params_bit_identical(tmp_path):
    from xlakit.demo.workloads import _CNN, _init

    graphdef, params = _init(_CNN, seed=0)

    def infer(params, x):
        return nnx.merge(graphdef, params)(x)

    x = np.random.default_rng(0).standard_normal((2, 28, 28, 1)).astype(np.float32)
    export_bundle(infer, params, x, tmp_path / "cnn", batch_sizes=(2,))
    loaded = load(tmp_path / "cnn")
    assert "conv1.kernel" in loaded.weights and loaded.weights["conv1.kernel"].shape == (3, 3, 1, 16)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(jax.jit(infer)(params, x)))


def test_scalar_parameters_keep_their_shape_type_and_answer(tmp_path):
    """0-d parameters stay 0-d (a lax.cond on one exports), a Python float stays weakly typed (x_bf16 * scale is
    bfloat16, as under jax.jit), a float64 becomes what jax.jit makes of it (float32 without x64), and the
    answer is jax.jit's to the bit (it was 333.13901 against jax.jit's 333.137 when scalars became shape (1,))."""
    import ml_dtypes

    params = {"gate": np.float32(0.5), "scale": 333.137, "shift": np.array(-1.0, np.float64)}

    def fn(p, x):
        y = jax.lax.cond(p["gate"] > 0, lambda v: v * p["scale"], lambda v: -v, x)
        return {"y": y, "total": jnp.sum(x.astype(jnp.float32)) * p["scale"] + p["shift"]}

    x = np.ones((2, 3), ml_dtypes.bfloat16)
    manifest = export_bundle(fn, params, x, tmp_path / "b", batch_sizes=(2,))
    assert {w.name: (w.shape, w.dtype) for w in manifest.weights} == {
        "gate": ((), "float32"), "scale": ((), "float32"), "shift": ((), "float32")}
    want, got = jax.jit(fn)(params, x), load(tmp_path / "b")(x)
    assert got["y"].dtype == want["y"].dtype == jnp.bfloat16 and got["total"].shape == want["total"].shape == ()
    np.testing.assert_array_equal(np.asarray(got["y"]), np.asarray(want["y"]))
    assert float(got["total"]) == float(want["total"]) == float(np.float32(6 * np.float32(333.137) - 1))


#: Modules a warm load (every program a hit, no remote) has no use for: importing each costs the first result of a
#: restart ~0.2-0.5 ms (benchmarks/first_result.py).
COLD_PATH_MODULES = ("xlakit.cache.remote", "xlakit.bundle.compiling", "xlakit.bundle.rows")


def test_warm_load_traces_and_compiles_nothing_and_needs_no_model_code(bundle):
    path, fn, state = bundle
    expected = np.asarray(load(path)(xs(4)))  # cold: fills .cache
    with events.record(jax_signals=True) as log:  # JAX's own trace/lower/compile signals included
        warm = load(path)
    assert warm.counts()["hit"] == 2
    assert set(kinds(log)) == {"hit"}, log.to_frame()[["kind", "source", "name"]]

    # A fresh process that never imports flax (or this test's model code) loads and runs the bundle.
    code = f"""
import json, sys, numpy as np, xlakit
from xlakit import events
with events.record(jax_signals=True) as log:
    lb = xlakit.load_bundle({str(path)!r}, progress=False).wait()
out = np.asarray(lb(np.asarray({xs(4).tolist()!r}, dtype=np.float32)))
cold = [m for m in {COLD_PATH_MODULES!r} if m in sys.modules]
print(json.dumps({{"flax": "flax" in sys.modules, "kinds": sorted({{e.kind for e in log}}), "out": out.tolist(),
                  "cold": cold}}))
"""
    report = json.loads(run_python(code))
    assert report["flax"] is False and report["kinds"] == ["hit"]
    assert report["cold"] == []  # what only a miss, an export or a remote needs is not imported on the first result
    np.testing.assert_array_equal(np.asarray(report["out"], np.float32), expected)


def test_parallel_load_equals_serial(tiny_bundle, tmp_path):
    src, fn, state = tiny_bundle
    fn3 = lambda s, x: fn(s, x) * 2.0  # noqa: E731 - a second variant: four modules in all
    export_bundle(fn, state, xs(2), tmp_path / "a", batch_sizes=(1, 4), variants={"double": fn3})
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    serial, parallel = load(tmp_path / "a", max_workers=1), load(tmp_path / "b", max_workers=4)
    warm_serial, warm_parallel = load(tmp_path / "a", max_workers=1), load(tmp_path / "a", max_workers=4)
    assert [r.status for r in serial.reports] == [r.status for r in parallel.reports] == ["miss"] * 4
    assert [r.status for r in warm_serial.reports] == [r.status for r in warm_parallel.reports] == ["hit"] * 4
    assert [r.module for r in parallel.reports] == ["model.b1.jaxexp", "model.b4.jaxexp", "model.double.b1.jaxexp",
                                                    "model.double.b4.jaxexp"]
    for variant in ("default", "double"):
        for n in (1, 3, 4):
            outs = [np.asarray(lb(xs(n), variant=variant)) for lb in (serial, parallel, warm_serial, warm_parallel)]
            for other in outs[1:]:
                np.testing.assert_array_equal(other, outs[0])  # bit-identical: same programs
    np.testing.assert_array_equal(np.asarray(parallel(xs(4), variant="double")),
                                  2.0 * np.asarray(parallel(xs(4))))


# -- the module-hash record ---------------------------------------------------------------------------------

def test_weights_only_update_compiles_nothing(bundle):
    path, fn, state = bundle
    load(path)
    modules_before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.glob("*.jaxexp")}
    _, new_state = tiny_model(seed=7)
    with pytest.raises(FileExistsError, match="weights.safetensors"):
        export_bundle(fn, new_state, xs(2), path, batch_sizes=(1, 4))
    export_bundle(fn, new_state, xs(2), path, batch_sizes=(1, 4), overwrite=True)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.glob("*.jaxexp")} == modules_before

    with events.record(jax_signals=True) as log:
        loaded = load(path)
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0}
    assert "compile" not in kinds(log) and "evict" not in kinds(log)
    assert loaded.dropped == ()
    np.testing.assert_array_equal(np.asarray(loaded(xs(4))), np.asarray(jax.jit(fn)(new_state, xs(4))))
    assert not np.array_equal(np.asarray(loaded(xs(4))), np.asarray(jax.jit(fn)(state, xs(4))))


def _copy_partition(path: Path, name: str) -> Path:
    """Pretend another environment compiled the same modules: a second partition with the same entries."""
    (src,) = [p for p in (path / ".cache").iterdir() if p.is_dir() and p.name != "quarantine"]
    dest = path / ".cache" / name
    dest.mkdir()
    for f in src.glob("*.xlk"):
        shutil.copy2(f, dest / f.name)
    return dest


def test_changed_module_drops_only_its_own_programs_everywhere(bundle, tmp_path):
    path, fn, state = bundle
    load(path)
    other = _copy_partition(path, "gpu-sm90-jaxlib0.10.2-x86_64-avx512-0badc0de")
    old = {f: read_record(path / ".cache").hashes[f] for f in ("model.b1.jaxexp", "model.b4.jaxexp")}

    def fn_plus(s, x):
        return fn(s, x) + 1.0

    export_bundle(fn_plus, state, xs(2), tmp_path / "plus", batch_sizes=(4,))
    shutil.copy(tmp_path / "plus" / "model.b4.jaxexp", path / "model.b4.jaxexp")
    forget_module_hashes(path)  # a bundle from before module hashes: a changed module is compiled, not refused

    check = check_bundle(path)
    assert {m.file: m.state for m in check.modules} == {"model.b1.jaxexp": "unchanged", "model.b4.jaxexp": "changed",
                                                         "model.bpoly.jaxexp": "unchanged"}
    assert sorted((d.partition, d.key) for d in check.drops) == sorted(
        (p, program_key("model.b4.jaxexp", old["model.b4.jaxexp"])) for p in (other.name, _partition(path)))

    with events.record() as log:
        loaded = load(path)
    assert {r.module: r.status for r in loaded.reports} == {"model.b1.jaxexp": "hit", "model.b4.jaxexp": "miss"}
    assert [(e.kind, e.partition) for e in log if e.kind == "evict"] == sorted(
        [("evict", other.name), ("evict", _partition(path))], key=lambda k: k[1])
    b1_key = program_key("model.b1.jaxexp", old["model.b1.jaxexp"])
    assert (other / f"{b1_key}.xlk").exists()                      # b1's programs kept in both partitions
    assert not (other / f"{program_key('model.b4.jaxexp', old['model.b4.jaxexp'])}.xlk").exists()
    np.testing.assert_array_equal(np.asarray(loaded(xs(4))), np.asarray(jax.jit(fn_plus)(state, xs(4))))

    (path / "model.b1.jaxexp").unlink()                            # a module that disappeared
    with pytest.warns(RuntimeWarning, match="1 of 2 modules failed"):
        loaded = load(path)
    assert not (other / f"{b1_key}.xlk").exists()
    assert isinstance(loaded.errors["model.b1.jaxexp"], ModuleError)
    gone = str(loaded.errors["model.b1.jaxexp"])
    assert "model.b1.jaxexp" in gone and "missing" in gone
    assert loaded.batch_sizes() == (4,)
    np.testing.assert_allclose(np.asarray(loaded(xs(1))), np.asarray(jax.jit(fn_plus)(state, xs(1))), rtol=1e-5,
                               atol=1e-6)  # batch 1 now runs padded through the batch-4 program


def _partition(path: Path) -> str:
    from xlakit._jax.environment import current_environment

    return current_environment().partition_name()


def test_unreadable_record_is_rewritten_reported_and_not_trusted(bundle):
    path, fn, state = bundle
    load(path)
    from xlakit.store import LocalStore

    stale_key = program_key("model.b4.jaxexp", "0" * 64)
    store = LocalStore(path / ".cache")
    assert store.put(_partition(path), stale_key, {"name": "stale"}, b"old program").stored
    (path / ".cache" / RECORD).write_text("{ not json")

    with events.record() as log, pytest.warns(RuntimeWarning, match="unreadable"):
        loaded = load(path)
    assert loaded.record_problem and "not valid JSON" in loaded.record_problem
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0}   # current programs are still valid
    assert [d.key for d in loaded.dropped] == [stale_key]
    assert not store.entry_path(_partition(path), stale_key).exists()
    assert "corrupt" in kinds(log)
    record = read_record(path / ".cache")
    assert record.status == "ok" and set(record.hashes) == {"model.b1.jaxexp", "model.b4.jaxexp",
                                                                 "model.bpoly.jaxexp"}


# -- bad input ------------------------------------------------------------------------------------------------

def _edit_manifest(path: Path, edit) -> None:
    data = json.loads((path / "manifest.json").read_text())
    edit(data)
    (path / "manifest.json").write_text(json.dumps(data))


def test_manifest_missing_field_names_file_and_field(bundle):
    path, _, _ = bundle
    _edit_manifest(path, lambda d: d.pop("inputs"))
    with pytest.raises(ManifestError) as e:
        load(path)
    assert e.value.file == str(path / "manifest.json") and e.value.field == "inputs"
    assert "manifest.json: field 'inputs': missing" in str(e.value)
    _edit_manifest(path, lambda d: d.update(inputs=[{"name": "x", "shape": ["batch", "four"], "dtype": "float32"}]))
    with pytest.raises(ManifestError, match=r"field 'inputs\[0\].shape\[1\]'"):
        load(path)
    assert not check_bundle(path).ok


def test_module_that_is_not_an_export_fails_alone(bundle):
    path, fn, state = bundle
    (path / "model.b1.jaxexp").write_bytes(b"\x00not a jax.export artifact" * 10)
    forget_module_hashes(path)  # past the hash check: jax.export's own refusal
    with pytest.warns(RuntimeWarning, match="1 of 2 modules failed"):
        loaded = load(path)
    err = loaded.errors["model.b1.jaxexp"]
    assert isinstance(err, ModuleError) and err.file == str(path / "model.b1.jaxexp")
    assert "not a jax.export artifact" in str(err)
    assert {r.module: r.status for r in loaded.reports} == {"model.b1.jaxexp": "error", "model.b4.jaxexp": "miss"}
    assert loaded.report().set_index("module").loc["model.b1.jaxexp", "status"] == "error"
    np.testing.assert_allclose(np.asarray(loaded(xs(1))), np.asarray(jax.jit(fn)(state, xs(1))), rtol=1e-5, atol=1e-6)


def test_module_exported_for_another_platform(bundle, tmp_path):
    path, fn, state = bundle
    export_bundle(fn, state, xs(2), tmp_path / "tpu", batch_sizes=(4,), platforms=["tpu"])
    shutil.copy(tmp_path / "tpu" / "model.b4.jaxexp", path / "model.b4.jaxexp")
    forget_module_hashes(path)  # past the hash check: the platform's refusal
    with pytest.warns(RuntimeWarning):
        loaded = load(path)
    err = loaded.errors["model.b4.jaxexp"]
    assert err.field == "platforms" and "exported for ['tpu']" in str(err) and "model.b4.jaxexp" in err.file
    assert loaded.batch_sizes() == (1,)
    np.testing.assert_array_equal(np.asarray(loaded(xs(1))), np.asarray(jax.jit(fn)(state, xs(1))))


def test_weights_disagreeing_with_manifest(bundle):
    from safetensors.numpy import load_file, save_file

    path, _, _ = bundle
    wfile = path / "weights.safetensors"
    tensors = load_file(str(wfile))
    renamed = dict(tensors)
    renamed["l1.weight"] = renamed.pop("l1.kernel.value")
    save_file(renamed, str(wfile))
    with pytest.raises(WeightsError) as e:
        load(path)
    assert e.value.file == str(wfile) and e.value.field == "l1.kernel.value" and "missing" in str(e.value)

    reshaped = dict(tensors)
    reshaped["l2.bias.value"] = np.zeros(5, np.float32)
    save_file(reshaped, str(wfile))
    with pytest.raises(WeightsError, match=r"field 'l2.bias.value': shape \[5\] disagrees with manifest.json's \[3\]"):
        load(path)
    assert any("l2.bias.value" in p for p in check_bundle(path).problems)


def test_module_signature_disagreeing_with_manifest(bundle, tmp_path):
    path, fn, state = bundle
    load(path)  # warm programs exist: the check also runs on the warm path
    _edit_manifest(path, lambda d: d["outputs"]["default"][0].update(shape=["batch", 5]))
    with pytest.warns(RuntimeWarning):
        loaded = load(path)
    assert loaded.counts()["error"] == 2
    err = loaded.errors["model.b4.jaxexp"]
    assert err.field == "outputs.default[0] (output)" and "float32[4,3]" in str(err) and "float32[4,5]" in str(err)


# -- export rules ----------------------------------------------------------------------------------------------

def test_export_refuses_to_overwrite_a_different_bundle(tmp_path):
    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2))
    mtimes = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2))  # identical: allowed, nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == mtimes
    with pytest.raises(FileExistsError, match="different bundle"):
        export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(2, 8))
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(2, 8), overwrite=True)
    assert sorted(p.name for p in path.glob("*.jaxexp")) == ["model.b2.jaxexp", "model.b8.jaxexp", "model.bpoly.jaxexp"]

    other = tmp_path / "notes"
    other.mkdir()
    (other / "README.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a bundle"):
        export_bundle(affine, AFFINE, xs(2), other)
    with pytest.raises(ValueError, match="batch_sizes"):
        export_bundle(affine, AFFINE, xs(2), tmp_path / "x", batch_sizes=(0,))
    with pytest.raises(ValueError, match="taken by fn"):
        export_bundle(affine, AFFINE, xs(2), tmp_path / "x", variants={"default": affine})


# -- calling and reporting ---------------------------------------------------------------------------------------

def test_call_picks_smallest_fitting_batch_and_validates_inputs(tmp_path):
    path = tmp_path / "aff"
    export_bundle(lambda p, x, scale: {"y": affine(p, x) * scale, "total": jnp.sum(x)}, AFFINE,
                  {"x": xs(2), "scale": np.ones((2, 1), np.float32)}, path, batch_sizes=(2, 8))
    loaded = load(path)
    assert loaded.manifest.outputs["default"][0].name == "total" and not loaded.manifest.outputs["default"][0].batched
    x, s = xs(5), np.full((5, 1), 2.0, np.float32)
    out = loaded(x=x, scale=s)
    np.testing.assert_allclose(np.asarray(out["y"]), (x @ AFFINE["w"] + AFFINE["b"]) * 2, rtol=1e-6, atol=1e-6)
    assert out["y"].shape == (5, 3)
    np.testing.assert_allclose(float(out["total"]), x.sum(), rtol=1e-5)  # a sum over rows: 5 compiled exactly
    assert loaded.manifest.rows("default")[0] == "coupled" and "reduce_sum" in loaded.manifest.rows("default")[1]
    assert loaded(x[:2], s[:2])["y"].shape == (2, 3)
    with pytest.raises(TypeError, match="dtype float16, the bundle takes float32"):  # float64: taken as jit takes it
        loaded(x.astype(np.float16), s)
    with pytest.raises(ValueError, match=r"shape \[5, 5\], the bundle takes \['batch', 4\]"):
        loaded(np.ones((5, 5), np.float32), s)
    with pytest.raises(TypeError, match="takes 2 input"):
        loaded(x)
    with pytest.raises(KeyError, match="no variant 'fast'"):
        loaded(x, s, variant="fast")


def test_report_frame_values(tmp_path, capsys):
    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(2, 4))
    cold = load_bundle(path, progress=True).wait()  # the bar closes when the last program resolves
    bar = capsys.readouterr().err
    assert "aff" in bar and "2/2" in bar and "2 compiled" in bar
    frame = cold.report()
    assert list(frame.columns) == ["module", "variant", "batch_size", "status", "load_s", "compile_s",
                                   "module_bytes", "program_bytes", "argument_bytes", "output_bytes",
                                   "temp_bytes", "footprint_bytes", "reason"]
    row = frame.set_index("module").loc["model.b2.jaxexp"]
    assert row.status == "miss" and row.compile_s > 0 and row.load_s > 0
    assert row.module_bytes == (path / "model.b2.jaxexp").stat().st_size
    assert row.program_bytes > 0
    assert row.argument_bytes == 4 * (12 + 3 + 2 * 4)   # w f32[4,3] + b f32[3] + x f32[2,4], bytes
    assert row.output_bytes == 4 * 2 * 3
    warm = load(path).report().set_index("module")
    assert list(warm.status) == ["hit", "hit"] and warm.compile_s.isna().all()
    assert warm.loc["model.b4.jaxexp", "argument_bytes"] == 4 * (12 + 3 + 4 * 4)
    assert "2 hit" in repr(load(path))


# -- CLI ------------------------------------------------------------------------------------------------------

def test_cli_check_and_warm(bundle, tmp_path, capsys):
    path, _, _ = bundle
    assert cli_main(["bundle", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "model.b1.jaxexp" in out and "new" in out and "no compiled programs yet" in out
    assert ("rows of default: proven (padded and chunked; with load_bundle(exact=True) exact sizes from "
            "model.bpoly): proven for every batch size") in out

    assert cli_main(["bundle", "warm", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [m["status"] for m in report["modules"]] == ["miss", "miss"]
    assert cli_main(["bundle", "warm", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 loaded from .cache, 0 compiled, 0 failed" in out

    (path / "model.b4.jaxexp").write_bytes(b"changed")
    assert cli_main(["bundle", "check", str(path)]) == 1  # not the bytes the manifest recorded: a problem
    out = capsys.readouterr().out
    assert "changed" in out and "a load would drop model.b4-" in out and "not the bytes manifest.json" in out
    assert cli_main(["bundle", "warm", str(path), "--no-progress"]) == 1  # the module now fails: exit 1
    assert "SHA-256" in capsys.readouterr().out  # not the bytes the manifest recorded (the reason wraps)
    assert cli_main(["bundle", "check", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err

    # Fault: with the weights gone, check said "a load would drop nothing" and then named the problem (the other:
    # model.b4.jaxexp above is not the bytes manifest.json recorded)
    (path / "weights.safetensors").rename(tmp_path / "weights.away")
    assert cli_main(["bundle", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "drop nothing" not in out and out.rstrip().endswith("a load would fail (2 problems above)"), out
    assert "weights.safetensors: missing; copy the bundle's weights file back" in out


def test_cli_warm_in_a_fresh_process_does_not_count_jaxs_start_up(bundle):
    """Fault: ``xlakit bundle warm`` reported JAX's own start-up (import, backend) as the bundle's load seconds;
    now it starts JAX first and reports that apart."""
    path, _, _ = bundle
    load(path).wait()  # .cache filled: the fresh process only loads
    code = f"""
import contextlib, io, json
from xlakit.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["bundle", "warm", {str(path)!r}, "--json"]) == 0
print(json.dumps(json.loads(out.getvalue())))
"""
    report = json.loads(run_python(code, new_interpreter=True))  # JAX's start-up is what is measured
    assert [m["status"] for m in report["modules"]] == ["hit", "hit"], report
    # two tiny stored programs load in milliseconds; importing JAX and starting its CPU client takes far longer
    assert 0 < report["total_s"] < report["jax_start_s"], report


# -- watcher on a real bundle ------------------------------------------------------------------------------------

def test_watcher_ignores_the_loaders_writes(tiny_bundle, tmp_path):
    src, fn, state = tiny_bundle
    repo = tmp_path / "repo"
    repo.mkdir()
    watcher = BundleWatcher(repo, lambda c: None, poll_s=60, start=False)
    shutil.copytree(src, repo / "tiny")
    watcher.poll()
    assert [c.kind for c in watcher.poll()] == ["added"]
    load(repo / "tiny")                                  # writes .cache/: partitions, entries, module_hashes.json
    assert (repo / "tiny" / ".cache" / RECORD).exists()
    assert watcher.poll() == [] and watcher.poll() == []
    _, new_state = tiny_model(seed=3)
    export_bundle(fn, new_state, xs(2), repo / "tiny", batch_sizes=(1, 4), overwrite=True)
    watcher.poll()
    (change,) = watcher.poll()
    assert change.weights_only


# -- placement -------------------------------------------------------------------------------------------------

PLACEMENT = """
import json, numpy as np, jax, xlakit
from xlakit._jax.serialize import DevicePlacementError
def affine(p, x):
    return x @ p["w"] + p["b"]
params = {"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "b": np.ones(3, np.float32)}
path = PATH
xlakit.export_bundle(affine, params, np.ones((2, 4), np.float32), path, batch_sizes=(2,))
d0, d1 = jax.devices()
x = np.arange(8, dtype=np.float32).reshape(2, 4)
on0 = xlakit.load_bundle(path, progress=False).wait()           # compiled for device 0 and stored
on1 = xlakit.load_bundle(path, devices=[d1], progress=False)    # the same program, moved to device 1
try:
    xlakit.load_bundle(path, devices=[d0, d1], progress=False)
    refused = False
except DevicePlacementError:
    refused = True
y0, y1 = on0(x), on1(x)
print(json.dumps({"statuses": [on0.reports[0].status, on1.reports[0].status], "refused": refused,
                  "y0": sorted(d.id for d in y0.devices()), "y1": sorted(d.id for d in y1.devices()),
                  "w1": sorted(d.id for d in on1.weights["w"].devices()),
                  "same": bool(np.array_equal(np.asarray(y0), np.asarray(y1))),
                  "right": bool(np.allclose(np.asarray(y1), x @ params["w"] + params["b"]))}))
"""


def test_placement_reuses_a_program_compiled_for_another_device(tmp_path):
    code = PLACEMENT.replace("PATH", repr(str(tmp_path / "aff")))
    report = json.loads(run_python(code, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}))
    assert report == {"statuses": ["miss", "hit"], "refused": True, "y0": [0], "y1": [1], "w1": [1],
                      "same": True, "right": True}


def test_cold_compiles_bypass_transparent_mode(tmp_path):
    """With xlakit.enable_cache() on, a bundle's compiles are fresh and go only to the bundle's .cache (a
    program re-serialized after a load from another cache is unreliable, so none is taken from there)."""
    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(2,))
    transparent = tmp_path / "transparent"
    xlakit.enable_cache(transparent)
    try:
        with events.record() as log:
            loaded = load(path)
    finally:
        xlakit.disable_cache()
    assert loaded.counts()["miss"] == 1
    assert [e.name for e in log if e.kind == "store"] == ["aff/model.b2"]
    assert not list(transparent.rglob("*.xlk"))
    np.testing.assert_allclose(np.asarray(load(path)(xs(2))), xs(2) @ AFFINE["w"] + AFFINE["b"], rtol=1e-6)


def test_bfloat16_weights_round_trip(tmp_path):
    params = {"w": jnp.asarray(AFFINE["w"], jnp.bfloat16), "b": jnp.asarray(AFFINE["b"], jnp.bfloat16)}

    def half(p, x):
        return (x.astype(jnp.bfloat16) @ p["w"] + p["b"]).astype(jnp.float32)

    manifest = export_bundle(half, params, xs(2), tmp_path / "bf16", batch_sizes=(2,))
    assert {s.name: s.dtype for s in manifest.weights} == {"b": "bfloat16", "w": "bfloat16"}
    loaded = load(tmp_path / "bf16")
    assert loaded.weights["w"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(loaded(xs(2))), np.asarray(jax.jit(half)(params, xs(2))))
