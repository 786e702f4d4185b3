"""A loaded bundle's outputs are what ``jax.jit`` returns, beyond values and dtypes:

* **weak types** — ``jax.export`` drops them from a module's outputs, so a Python scalar parameter passed
  through (or any weakly typed output) came back strongly typed and ``h_bf16 * out`` turned float32. The
  manifest now records them (``"weak_type": true``) and every call path (exact size, padded, chunked, compiled
  exactly from the polymorphic module) marks them weak again, bit for bit.
* **the batch axis** — with one exported size, an output whose length equals that size by chance (a bias of
  length 1 at ``batch_sizes=(1,)``) was taken for batched, so a row-wise model was recorded size-dependent and
  refused other sizes. Which outputs follow the batch is now decided from traces at two different sizes.

Every bundle here is real (exported, loaded, called); references are ``jax.jit`` of the same function.
"""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.bundle import ManifestError, export_bundle, load_bundle
from xlakit.bundle.manifest import Manifest

X = np.arange(12, dtype=np.float32).reshape(4, 3) - 5


def rows(n: int) -> np.ndarray:
    """``n`` rows of small integers as float32: every sum and product below is exact, so answers computed at
    another batch size (padded, chunked) are the same bits as jax.jit's at ``n``."""
    return np.random.default_rng(n).integers(-3, 4, (n, 3)).astype(np.float32)


def load(path):
    return load_bundle(path, progress=False, background=False)


def assert_same_as_jit(got, ref):
    """Same tree, and per leaf the same dtype, weak type, shape and bits."""
    got_leaves, ref_leaves = jax.tree_util.tree_leaves_with_path(got), jax.tree_util.tree_leaves_with_path(ref)
    assert [p for p, _ in got_leaves] == [p for p, _ in ref_leaves]
    for (path, g), (_, r) in zip(got_leaves, ref_leaves, strict=True):
        where = jax.tree_util.keystr(path)
        assert (g.dtype, g.shape, g.weak_type) == (r.dtype, r.shape, r.weak_type), where
        assert np.asarray(g).tobytes() == np.asarray(r).tobytes(), where


# -- F1: weak types of outputs ------------------------------------------------------------------------------

def test_the_red_team_script_keeps_bfloat16_downstream(tmp_path):
    p = {"scale": 0.5, "w": np.ones((3, 3), np.float32)}

    def fn(p, x):
        return {"y": x @ p["w"], "scale": p["scale"]}

    x = np.ones((2, 3), np.float32)
    m = export_bundle(fn, p, x, tmp_path / "b", batch_sizes=(2, 4))
    got, ref = load(tmp_path / "b")(x), jax.jit(fn)(p, x)
    h = jnp.ones(3, jnp.bfloat16)
    assert ref["scale"].weak_type and (h * ref["scale"]).dtype == jnp.bfloat16
    assert got["scale"].weak_type and (h * got["scale"]).dtype == jnp.bfloat16
    assert_same_as_jit(got, ref)
    assert {s.name: s.weak_type for s in m.outputs["default"]} == {"scale": True, "y": False}
    written = json.loads((tmp_path / "b" / "manifest.json").read_text())["outputs"]["default"]
    assert [s.get("weak_type") for s in written] == [True, None]  # written only when true


PARAMS = {"s": 0.5, "i": 3, "c": 1 + 2j, "w": np.arange(-6, 6, dtype=np.float32).reshape(3, 4)}


def many_weak(p, x):
    """Weak outputs of every origin: Python float/int/complex parameters passed through or computed on, a literal,
    a batched output built from a weak scalar; and strong ones beside them."""
    return {"s": p["s"], "i": p["i"], "c": p["c"], "s3": p["s"] * 3, "lit": 2.0,
            "rows": jnp.broadcast_to(p["s"], (x.shape[0],)), "full": jnp.full((x.shape[0], 2), 1.5),
            "y": x @ p["w"], "n": jnp.float32(1.0) + 0}


@pytest.mark.parametrize("n", [2, 3, 4, 9], ids=["exact", "padded", "exact-largest", "chunked"])
def test_weak_outputs_on_every_padded_and_chunked_path(tmp_path, n):
    m = export_bundle(many_weak, PARAMS, X, tmp_path / "b", batch_sizes=(2, 4))
    assert m.rows("default")[0] == "proven"
    assert {s.name for s in m.outputs["default"] if s.weak_type} == {"s", "i", "c", "s3", "lit", "rows", "full"}
    x = rows(n)
    assert_same_as_jit(load(tmp_path / "b")(x), jax.jit(many_weak)(PARAMS, x))


def test_weak_outputs_of_a_coupled_variant_compiled_exactly(tmp_path):
    def centred(p, x):  # rows coupled: batch 3 is compiled from the polymorphic module, never padded
        return {"y": x - x.mean(0), "s": p["s"], "rows": jnp.broadcast_to(p["s"], (x.shape[0],))}

    m = export_bundle(centred, PARAMS, X, tmp_path / "b", batch_sizes=(2,))
    assert m.rows("default")[0] == "coupled"
    lb = load(tmp_path / "b")
    for n in (2, 3):
        assert_same_as_jit(lb(X[:n]), jax.jit(centred)(PARAMS, X[:n]))
    assert ("default", 3) in lb.programs


def test_a_bundle_without_the_field_loads_strongly_typed(tmp_path):
    """A manifest written before the field existed (no ``weak_type``): loads, same values, not weak."""
    export_bundle(many_weak, PARAMS, X, tmp_path / "b", batch_sizes=(4,))
    file = tmp_path / "b" / "manifest.json"
    data = json.loads(file.read_text())
    for spec in data["outputs"]["default"]:
        spec.pop("weak_type", None)
    file.write_text(json.dumps(data))
    got, ref = load(tmp_path / "b")(X), jax.jit(many_weak)(PARAMS, X)
    for k in ref:
        assert not got[k].weak_type and np.asarray(got[k]).tobytes() == np.asarray(ref[k]).tobytes()


def test_a_weak_type_that_is_not_true_or_false_is_a_manifest_error(tmp_path):
    export_bundle(many_weak, PARAMS, X, tmp_path / "b", batch_sizes=(4,))
    data = json.loads((tmp_path / "b" / "manifest.json").read_text())
    data["outputs"]["default"][0]["weak_type"] = "yes"
    with pytest.raises(ManifestError, match=r"outputs\.default\[0\]\.weak_type.*true or false"):
        Manifest.from_dict(data)


def test_a_weak_type_that_changes_with_the_batch_size_is_refused(tmp_path):
    def odd(p, x):
        return {"y": x @ p["w"], "k": 1.0 if x.shape[0] == 2 else np.float32(1.0)}

    with pytest.raises(ValueError, match="'k' is strongly typed at batch size 4 but weakly typed at batch size 2"):
        export_bundle(odd, PARAMS, X, tmp_path / "b", batch_sizes=(2, 4))
    assert not (tmp_path / "b" / "manifest.json").exists()


# -- F2: which outputs follow the batch ---------------------------------------------------------------------

def test_the_red_team_script_a_bias_of_length_one_at_batch_size_one(tmp_path):
    p = {"w": np.ones((3, 4), np.float32), "b": np.array([0.5], np.float32)}

    def fn(p, x):
        return {"y": x @ p["w"] + p["b"], "b": p["b"]}

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # it warned "output 0 ... symbolic batch axis"
        m = export_bundle(fn, p, np.ones((1, 3), np.float32), tmp_path / "b")
    assert m.rows("default")[0] == "proven"
    assert {s.name: s.shape for s in m.outputs["default"]} == {"b": (1,), "y": ("batch", 4)}
    lb = load(tmp_path / "b")
    for n in (1, 3):
        x = rows(n)
        assert_same_as_jit(lb(x), jax.jit(fn)(p, x))


@pytest.mark.parametrize("size", [1, 3, 4])
def test_weight_only_outputs_whose_length_is_the_exported_size(tmp_path, size):
    """Any constant length equal to the single exported size: a bias, a weight's column, a per-model
    statistic of that length. Called above, below and at the size (padded, chunked), as jax.jit answers."""
    p = {"w": np.arange(3 * size, dtype=np.float32).reshape(3, size) - size,
         "b": np.arange(size, dtype=np.float32), "k": np.ones((size, 2), np.float32)}

    def fn(p, x):
        return {"y": x @ p["w"] + p["b"], "b": p["b"] * 2, "col": p["w"][0], "k": p["k"].cumsum(0),
                "rowsum": (x @ p["w"]).sum(1)}

    m = export_bundle(fn, p, X[:size], tmp_path / "b", batch_sizes=(size,))
    assert m.rows("default")[0] == "proven"
    assert {s.name: s.batched for s in m.outputs["default"]} == {"b": False, "col": False, "k": False,
                                                                  "rowsum": True, "y": True}
    lb = load(tmp_path / "b")
    for n in sorted({1, size, size + 1, 2 * size + 1}):
        x = rows(n)
        assert_same_as_jit(lb(x), jax.jit(fn)(p, x))


def test_two_exported_sizes_never_confused_a_constant_length(tmp_path):
    """Already right before: a length of 2 cannot follow both 2 and 4 (kept as a guard)."""
    p = {"w": np.ones((3, 2), np.float32), "b": np.array([0.5, 1.5], np.float32)}

    def fn(p, x):
        return {"y": x @ p["w"] + p["b"], "b": p["b"]}

    m = export_bundle(fn, p, X, tmp_path / "b", batch_sizes=(2, 4))
    assert m.rows("default")[0] == "proven"
    assert {s.name: s.shape for s in m.outputs["default"]} == {"b": (2,), "y": ("batch", 2)}
    x = X[:3]
    assert_same_as_jit(load(tmp_path / "b")(x), jax.jit(fn)(p, x))


def test_the_probe_trace_never_becomes_the_output_tree(tmp_path):
    """The second size is traced only to tell constants from the batch: a function whose outputs differ there
    keeps the exported size's tree, and is served at that size."""
    p = {"w": np.ones((3, 2), np.float32)}

    def fn(p, x):
        y = x @ p["w"]
        return {"y": y} if x.shape[0] == 1 else {"y": y, "extra": y.sum()}

    with pytest.warns(RuntimeWarning, match="depends on the batch size"):
        m = export_bundle(fn, p, X[:1], tmp_path / "b")
    assert [s.name for s in m.outputs["default"]] == ["y"]
    assert_same_as_jit(load(tmp_path / "b")(X[:1]), jax.jit(fn)(p, X[:1]))


def test_a_function_that_traces_only_at_its_exported_size(tmp_path):
    """No second size to compare with (the reshape fails there): the exported size decides alone, as before,
    and the bundle serves that size."""
    p = {"w": np.ones((3, 2), np.float32)}

    def fn(p, x):
        return {"y": x.reshape(1, 3) @ p["w"]}

    with pytest.warns(RuntimeWarning, match="depends on the batch size"):
        m = export_bundle(fn, p, X[:1], tmp_path / "b")
    assert m.rows("default")[0] == "size-dependent"
    assert_same_as_jit(load(tmp_path / "b")(X[:1]), jax.jit(fn)(p, X[:1]))
