"""Bundles give the original function's answers: any output pytree, typed PRNG keys, any batch size (padding
never changes a value: rows that couple are never padded), on any device of the same kind.

Models are a 3x2 affine map; each bundle is exported once per module (fixtures) and copied per test.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shutil

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_python

from xlakit import events
from xlakit.bundle import export_bundle, load_bundle
from xlakit.bundle.hashes import read_record

W = {"w": np.arange(6.0, dtype=np.float32).reshape(3, 2) / 5}
X4 = np.arange(12.0, dtype=np.float32).reshape(4, 3) / 4

Pair = collections.namedtuple("Pair", ["lo", "hi"])


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Out:
    lo: jax.Array
    hi: jax.Array
    tag: str = dataclasses.field(default="t", metadata=dict(static=True))


@flax.struct.dataclass
class FlaxOut:
    y: jax.Array
    name: str = flax.struct.field(pytree_node=False, default="flax")


class Box:
    """A custom pytree node with aux data."""

    def __init__(self, items, label):
        self.items, self.label = items, label


jax.tree_util.register_pytree_with_keys(
    Box, lambda b: ([(jax.tree_util.GetAttrKey("items"), b.items)], b.label),
    lambda label, kids: Box(kids[0], label))


def load(path, **kw):
    return load_bundle(path, progress=False, **kw).wait()  # every program loaded (or failed), events emitted


def assert_same_tree(got, want):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# -- any pytree ---------------------------------------------------------------------------------------------

def every_kind(p, x):
    h = x @ p["w"]
    return {"pair": Pair(h, 2 * h), "out": Out(h, -h), "flax": FlaxOut(h + 1), "ints": {0: h, 1: h * 3},
            "box": Box([h, None, (h,)], "lbl"), "none": None}


@pytest.fixture(scope="module")
def tree_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("trees") / "trees"
    export_bundle(every_kind, W, X4, path, batch_sizes=(2,))
    return path


def test_any_output_pytree_round_trips(tree_bundle):
    """namedtuple, register_dataclass (with a static field), flax.struct, int-key dict, a custom node with
    aux data, None: jax.export cannot serialize these trees; the bundle stores them as data and rebuilds them."""
    manifest = json.loads((tree_bundle / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert [o["name"] for o in manifest["outputs"]["default"]] == [
        "box.items.0", "box.items.2.0", "flax.y", "ints.0", "ints.1", "out.lo", "out.hi", "pair.lo", "pair.hi"]
    loaded = load(tree_bundle)
    assert loaded.tree_notes == ()
    got = loaded(X4[:2])
    assert_same_tree(got, jax.jit(every_kind)(W, X4[:2]))
    assert isinstance(got["pair"], Pair) and got["out"].tag == "t" and got["flax"].name == "flax"
    assert got["box"].label == "lbl" and got["box"].items[1] is None
    assert_same_tree(load(tree_bundle)(X4[:1]), jax.jit(every_kind)(W, X4[:1]))  # warm, padded


def test_output_classes_not_in_the_process_come_back_as_dicts(tree_bundle):
    """A process without the model code imports nothing the manifest names; unknown classes become dicts."""
    code = f"""
import json, warnings, numpy as np, xlakit
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = xlakit.load_bundle({str(tree_bundle)!r}, progress=False)(np.ones((2, 3), np.float32))
print(json.dumps({{"pair": sorted(out["pair"]), "ints": sorted(out["ints"]), "box": type(out["box"]).__name__,
                  "warned": any("comes back as a dict" in str(x.message) for x in w)}}))
"""
    got = json.loads(run_python(code))
    assert got == {"pair": ["hi", "lo"], "ints": [0, 1], "box": "dict", "warned": True}


# -- typed PRNG keys ----------------------------------------------------------------------------------------

def test_typed_prng_keys_as_inputs_and_outputs(tmp_path):
    def out_keys(p, x):
        return jax.random.split(jax.random.key(0), x.shape[0])

    def in_keys(p, k):
        return jax.vmap(lambda kk: jax.random.normal(kk, (2,)))(k) * p["w"][0]

    keys = jax.random.split(jax.random.key(1), 2)
    m = export_bundle(in_keys, W, keys, tmp_path / "in", batch_sizes=(2,))
    assert m.inputs[0].dtype == "key<fry>" and m.rows_independent == {"default": True}
    np.testing.assert_array_equal(np.asarray(load(tmp_path / "in")(keys)), np.asarray(jax.jit(in_keys)(W, keys)))
    np.testing.assert_array_equal(np.asarray(load(tmp_path / "in")(keys[:1])),
                                  np.asarray(jax.jit(in_keys)(W, keys[:1])))  # warm, padded with a key row
    m = export_bundle(out_keys, W, X4[:2], tmp_path / "out", batch_sizes=(2,))
    assert m.outputs["default"][0].dtype == "key<fry>"
    got = load(tmp_path / "out")(X4[:2])
    assert got.dtype == keys.dtype
    np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(out_keys(W, X4[:2])))


# -- padding never changes an answer ----------------------------------------------------------------------------

def coupled(p, x):
    logits = x @ p["w"]
    return {"logits": logits, "mean_score": jnp.mean(logits), "centered": logits - logits.mean(axis=0)}


@pytest.fixture(scope="module")
def coupled_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("coupled") / "c"
    export_bundle(coupled, W, X4[:3], path, batch_sizes=(4,))
    return path


def test_coupled_rows_are_never_padded(coupled_bundle, tmp_path):
    """A batch mean and batch centering over 3 rows through a batch-4 bundle: padding gave mean_score 1.275
    for 1.7. The export detects the coupling and keeps a shape-polymorphic module; the exact batch size is
    compiled from it, stored in .cache, and loaded from there next time."""
    path = tmp_path / "c"
    shutil.copytree(coupled_bundle, path)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["rows_independent"] == {"default": False}
    assert manifest["polymorphic"] == {"default": "model.bpoly.jaxexp"} and (path / "model.bpoly.jaxexp").exists()
    x3 = X4[:3]
    cold = load(path)
    got = cold(x3)
    assert float(got["mean_score"]) == pytest.approx(1.7, abs=1e-6)
    for k, v in jax.jit(coupled)(W, x3).items():
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(v), rtol=1e-6, atol=1e-6)
    assert [(r.module, r.batch_size, r.status) for r in cold.reports][-1] == ("model.bpoly.jaxexp", 3, "miss")
    assert set(read_record(path / ".cache").hashes) == {"model.b4.jaxexp", "model.bpoly.jaxexp"}

    with events.record() as log:
        warm = load(path)
        again = warm(x3)
    assert [e.kind for e in log if e.kind in ("hit", "miss", "compile")] == ["hit", "hit"]
    np.testing.assert_array_equal(np.asarray(again["centered"]), np.asarray(got["centered"]))
    x5 = np.arange(15.0, dtype=np.float32).reshape(5, 3)  # above the largest size: exact, never chunked
    assert float(warm(x5)["mean_score"]) == pytest.approx(float(jax.jit(coupled)(W, x5)["mean_score"]), rel=1e-6)

    # The batch-4 module broken: batch 4 was exported, so it must still be served, exactly, from the
    # shape-polymorphic module (not refused as "above the largest loaded size").
    (path / "model.b4.jaxexp").write_bytes(b"not a jax.export module")
    with pytest.warns(RuntimeWarning, match="model.b4.jaxexp"):
        broken = load(path)
    for k, v in jax.jit(coupled)(W, X4).items():
        np.testing.assert_allclose(np.asarray(broken(X4)[k]), np.asarray(v), rtol=1e-6, atol=1e-6)


def test_declared_and_detected_independence(tmp_path):
    """A program proven row-wise is padded and split into chunks above the largest size; a declared
    rows_independent=False is never padded; a program that cannot be made polymorphic takes exact sizes only."""
    m = export_bundle(lambda p, x: jnp.tanh(x @ p["w"]), W, X4, tmp_path / "rowwise", batch_sizes=(1, 2))
    assert m.rows_independent == {"default": True} and m.polymorphic == {"default": "model.bpoly.jaxexp"}
    assert m.rows("default")[0] == "proven"  # its module kept for load_bundle(exact=True)
    lb = load(tmp_path / "rowwise")
    x7 = np.random.default_rng(0).standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lb(x7)), np.tanh(x7 @ W["w"]), rtol=1e-5, atol=1e-6)  # 4 chunks

    m = export_bundle(lambda p, x: jnp.tanh(x @ p["w"]), W, X4, tmp_path / "declared", batch_sizes=(2,),
                      rows_independent=False)
    assert m.rows_independent == {"default": False} and m.polymorphic == {"default": "model.bpoly.jaxexp"}
    assert m.rows("default")[0] == "declared"
    lb = load(tmp_path / "declared")
    lb(X4[:1])
    assert sorted(lb.programs) == [("default", 1), ("default", 2)]      # batch 1 compiled exactly, not padded

    def needs_static(p, x):  # a NumPy array of the concrete batch size: not shape-polymorphic
        y = x @ p["w"]
        return y - y.mean(0) + np.arange(int(x.shape[0]), dtype=np.float32)[:, None]

    with pytest.warns(RuntimeWarning, match="symbolic batch axis"):
        m = export_bundle(needs_static, W, X4, tmp_path / "fixed", batch_sizes=(2, 4))
    assert m.rows_independent == {"default": False} and m.polymorphic == {}
    assert m.rows("default")[0] == "size-dependent"
    lb = load(tmp_path / "fixed")
    np.testing.assert_array_equal(np.asarray(lb(X4[:2])), np.asarray(jax.jit(needs_static)(W, X4[:2])))
    with pytest.raises(ValueError, match=r"no shape-polymorphic module.*served only at \[2, 4\]"):
        lb(X4[:3])


# -- any same-kind device ---------------------------------------------------------------------------------------

DEVICES = """
import json, numpy as np, jax, jax.numpy as jnp, xlakit
from xlakit import events
W = {"w": np.arange(6.0, dtype=np.float32).reshape(3, 2) / 5}
path = PATH
xlakit.export_bundle(lambda p, x: {"y": x @ p["w"], "m": jnp.mean(x)}, W, np.ones((3, 3), np.float32), path,
                     batch_sizes=(4,))
x = np.arange(9.0, dtype=np.float32).reshape(3, 3)
d0, d1 = jax.devices()
out = {}
for name, devices in (("cold1", [d1]), ("warm0", [d0]), ("warm_id1", [1])):
    with events.record() as log:
        lb = xlakit.load_bundle(path, devices=devices, progress=False).wait()
        y = lb(x)
    out[name] = {"kinds": [e.kind for e in log if e.kind in ("hit", "miss", "compile") and e.source == "xlakit"],
                 "dev": sorted(d.id for d in y["y"].devices()), "m": float(y["m"]),
                 "y": np.asarray(y["y"]).tolist()}
print(json.dumps(out))
"""


def test_load_on_any_same_kind_device_hits(tmp_path):
    """Programs compiled for device 1 (the fixed size and the exact size from the polymorphic module) are
    loaded from .cache for device 0 and for device id 1: one entry serves every same-kind device."""
    code = DEVICES.replace("PATH", repr(str(tmp_path / "dev")))
    got = json.loads(run_python(code, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}))
    assert got["cold1"]["kinds"] == ["miss", "compile", "miss", "compile"]
    assert got["warm0"]["kinds"] == ["hit", "hit"] and got["warm_id1"]["kinds"] == ["hit", "hit"]
    assert [got[k]["dev"] for k in ("cold1", "warm0", "warm_id1")] == [[1], [0], [1]]
    assert got["cold1"]["y"] == got["warm0"]["y"] == got["warm_id1"]["y"]
    assert got["warm0"]["m"] == pytest.approx(4.0)


def test_version_1_bundle_still_loads_and_is_never_padded(tmp_path):
    """A bundle written before row coupling was recorded (format_version 1: modules return the pytree
    itself) loads and serves its exported sizes; nothing proved its rows independent, so another batch size
    is refused (naming the exported sizes) rather than padded."""
    from safetensors.numpy import save_file

    path = tmp_path / "v1"
    path.mkdir()
    exp = jax.export.export(jax.jit(lambda w, x: {"y": x @ w["w"]}))(
        {"w": jax.ShapeDtypeStruct((3, 2), jnp.float32)}, jax.ShapeDtypeStruct((2, 3), jnp.float32))
    (path / "model.b2.jaxexp").write_bytes(exp.serialize())
    save_file(W, str(path / "weights.safetensors"))
    (path / "manifest.json").write_text(json.dumps({
        "format": "xlakit.bundle", "format_version": 1, "name": "v1",
        "inputs": [{"name": "x", "shape": ["batch", 3], "dtype": "float32"}],
        "outputs": {"default": [{"name": "y", "shape": ["batch", 2], "dtype": "float32"}]},
        "batch_sizes": [2], "variants": ["default"],
        "weights": {"file": "weights.safetensors", "tensors": {"w": {"shape": [3, 2], "dtype": "float32"}}}}))
    lb = load(path)
    np.testing.assert_array_equal(np.asarray(lb(X4[:2])["y"]), X4[:2] @ W["w"])
    with pytest.raises(ValueError, match=r"rows unproven .*re-export.*served only at \[2\]"):
        lb(X4[:1])
