"""A loaded bundle takes an input as ``jax.jit`` takes it: a NumPy float64 / int64 array (NumPy's default dtypes) is
converted to the float32 / int32 the bundle was exported for, as ``jax.jit`` canonicalizes it while
``jax_enable_x64`` is off, with the same bits out; a dtype ``jax.jit`` would compile another program for (float16,
bfloat16) is still refused by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xlakit


def _affine(p, x):
    return x @ p["w"] + p["b"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    params = {"w": np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "b": np.full(4, 0.25, np.float32)}
    folder = tmp_path_factory.mktemp("b") / "affine"
    xlakit.export_bundle(_affine, params, np.ones((2, 3), np.float32), folder, batch_sizes=(2, 4))
    return params, xlakit.load_bundle(folder, progress=False, background=False)


def test_numpy_float64_input_is_taken_as_jax_jit_takes_it(loaded):
    params, bundle = loaded
    x = np.arange(9.0).reshape(3, 3) / 11  # float64, NumPy's default; batch 3 runs padded to 4
    got, want = bundle(x), jax.jit(_affine)(params, x)
    assert got.dtype == want.dtype == np.float32
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16])
def test_a_dtype_jax_jit_would_compile_another_program_for_is_refused(loaded, dtype):
    _, bundle = loaded
    with pytest.raises(TypeError, match=r"input 'x': dtype .*, the bundle takes float32"):
        bundle(np.ones((2, 3), dtype))


def test_a_jax_array_of_another_dtype_is_refused_not_converted(loaded):
    _, bundle = loaded
    with pytest.raises(TypeError, match="the bundle takes float32"):
        bundle(jnp.ones((2, 3), jnp.int32))


def test_a_model_that_traces_only_at_even_sizes_still_tells_its_bias_from_the_batch(tmp_path):
    """Exported at one size, the batch axis of each output is told from a trace at another size: the next one,
    else twice the exported one (here the model pairs rows, so only even sizes trace): a bias of length 2 at
    batch_sizes=(2,) is no batched output."""
    params = {"w": np.ones((3, 4), np.float32), "b": np.array([0.5, 1.5], np.float32)}

    def paired(p, x):
        rows = x.reshape(-1, 2, 3).sum(1)  # only an even batch reshapes
        return {"y": jnp.repeat(rows @ p["w"], 2, axis=0), "b": p["b"]}

    xlakit.export_bundle(paired, params, np.ones((2, 3), np.float32), tmp_path / "p", batch_sizes=(2,))
    outputs = {spec.name: spec.shape for spec in xlakit.load_bundle(tmp_path / "p", progress=False,
                                                                    background=False).manifest.outputs["default"]}
    assert outputs["b"] == (2,) and outputs["y"][0] == "batch"


def test_a_numpy_float64_example_input_records_the_dtype_the_module_takes(tmp_path):
    """``export_bundle`` with NumPy's default float64 / int64 example (x64 off) recorded float64 while the module
    took float32: no input could call the bundle. The manifest records what jax.jit takes, and a float64 call
    answers as jax.jit does."""
    params = {"w": np.float32(2)}
    xlakit.export_bundle(lambda p, x: x * p["w"], params, np.ones((2, 3)), tmp_path / "f", batch_sizes=(2,))
    bundle = xlakit.load_bundle(tmp_path / "f", progress=False, background=False)
    assert bundle.manifest.inputs[0].dtype == "float32"
    x = np.arange(6.0).reshape(2, 3)
    assert np.asarray(bundle(x)).tobytes() == np.asarray(jax.jit(lambda p, x: x * p["w"])(params, x)).tobytes()
    xlakit.export_bundle(lambda p, x: x + p["w"].astype(x.dtype), params, np.arange(4).reshape(2, 2),
                         tmp_path / "i", batch_sizes=(2,))
    assert xlakit.load_bundle(tmp_path / "i", progress=False, background=False).manifest.inputs[0].dtype == "int32"


@pytest.mark.parametrize("order", [">i8", ">f8", ">i4"])
def test_a_big_endian_parameter_is_stored_as_jax_would_hold_it(order, tmp_path):
    """A big-endian int64 / float64 parameter was stored as int64 / float64 (JAX's dtype table knows only native
    orders) and the bundle could never load ("exported with jax_enable_x64 on"): stored in native order at the
    dtype JAX canonicalizes it to, same values."""
    params = {"w": np.array([1, 2, 3], dtype=order)}
    xlakit.export_bundle(lambda p, x: x * p["w"].astype(jnp.float32), params, np.ones((2, 3), np.float32),
                         tmp_path / "b", batch_sizes=(2,))
    bundle = xlakit.load_bundle(tmp_path / "b", progress=False, background=False)
    assert np.asarray(bundle(np.ones((2, 3), np.float32))).tolist() == [[1.0, 2.0, 3.0]] * 2


def test_a_weak_type_flag_on_a_dtype_jax_never_makes_weak_is_refused(tmp_path):
    import json

    from xlakit.bundle.manifest import ManifestError

    xlakit.export_bundle(lambda p, x: {"y": x * p["w"], "m": x > 0}, {"w": np.float32(2)},
                         np.ones((2, 3), np.float32), tmp_path / "w", batch_sizes=(2,))
    path = tmp_path / "w" / "manifest.json"
    manifest = json.loads(path.read_text())
    for spec in next(iter(manifest["outputs"].values())):
        if spec["dtype"] == "bool":
            spec["weak_type"] = True
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="never weakly typed"):
        xlakit.load_bundle(tmp_path / "w", progress=False, background=False)
