"""Padding and chunking never change an answer: row independence is proven over the jaxpr traced with a
symbolic batch axis (for every batch size), never guessed from a test on one input; a function that looks at
the batch size is served only at its exported sizes; the manifest records how it was established.

The analysis itself traces only (no compile); the bundle tests export one or two tiny programs each.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit._jax.symbolic import trace_symbolic
from xlakit.bundle import export_bundle, load_bundle
from xlakit.bundle.row_proof import prove_rows

W = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
(B,) = jax.export.symbolic_shape("batch")


def verdict(f, batched=(True,)):
    weights = {"w": jax.ShapeDtypeStruct((3, 4), jnp.float32)}
    trace = trace_symbolic(lambda w, x: (f(w, x),), weights, jax.ShapeDtypeStruct((B, 3), jnp.float32))
    assert trace.problem is None and trace.guesses == ()
    return prove_rows(trace.jaxpr, 1, batched)


ROW_WISE = {
    "mlp with weights": lambda w, x: jax.nn.gelu(x @ w["w"]) @ w["w"].T,
    "softmax and layer norm over features": lambda w, x: jax.nn.softmax((x - x.mean(-1, keepdims=True)) @ w["w"]),
    "per-row gather (take_along_axis)": lambda w, x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
    "embedding lookup by each row's index": lambda w, x: w["w"][jnp.clip(x[:, 0].astype(jnp.int32), 0, 2)],
    "reshape and transpose keeping rows": lambda w, x: (x @ w["w"]).reshape(-1, 2, 2).transpose(0, 2, 1),
    "scan over features": lambda w, x: jax.lax.scan(lambda c, col: (c * 0.5 + col, c), jnp.zeros(x.shape[0]),
                                                    x.T)[1].T,
    "where, cumsum and sort within rows": lambda w, x: jnp.where(x > 0, jnp.cumsum(x, 1), jnp.sort(x, 1)),
    "write one column": lambda w, x: x.at[:, 1].set(w["w"][0, 0]),
    "cond on a weight": lambda w, x: jax.lax.cond(w["w"][0, 0] > 0, jnp.sin, jnp.cos, x),
    "pooling within a row": lambda w, x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2), (1, 1), "SAME"),
}

COUPLED = {
    "centring switched on by an outlier": (
        lambda w, x: jnp.where(jnp.any(jnp.abs(x) > 100.0), x - x.mean(axis=0), x), "reduce_or reduces over the row"),
    "look-ahead to the next row": (
        lambda w, x: x + jnp.concatenate([x[1:], jnp.zeros_like(x[:1])], axis=0), "gather selects along the row"),
    "cumsum over rows": (lambda w, x: jnp.cumsum(x, axis=0), "cumsum accumulates along the row axis"),
    "sort along rows": (lambda w, x: jnp.sort(x, axis=0), "sort sorts along the row axis"),
    "shift by one row": (lambda w, x: jnp.roll(x, 1, axis=0), "slices the row axis"),
    "row positions": (lambda w, x: x + jnp.arange(x.shape[0])[:, None], "iota counts along the row axis"),
    "the batch size as a number": (lambda w, x: x / x.shape[0], "dim_as_value uses the batch size"),
    "a loop until the batch sums to 10": (
        lambda w, x: jax.lax.while_loop(lambda v: v.sum() < 10, lambda v: v + 1, x), "while stops on a row-dep"),
    "pooling across rows": (
        lambda w, x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 1), (1, 1), "SAME"), "pools across the row"),
    "fresh random rows of the batch's size": (
        lambda w, x: x + jax.random.normal(jax.random.key(0), x.shape), "random_bits gives shape"),
}


@pytest.mark.parametrize("name", sorted(ROW_WISE))
def test_row_wise_programs_are_proven(name):
    v = verdict(ROW_WISE[name])
    assert v.proven, v.reason


@pytest.mark.parametrize("name", sorted(COUPLED))
def test_coupling_is_found_with_its_primitive_and_line(name):
    f, why = COUPLED[name]
    v = verdict(f)
    assert not v.proven and why in v.reason, v.reason
    assert "test_bundle_rows.py:" in v.reason  # the user's line, not JAX's


def test_outputs_must_be_row_wise_on_axis_0_or_row_free():
    assert not verdict(lambda w, x: x.T, batched=(True,)).proven  # rows on axis 1
    assert not verdict(lambda w, x: jnp.sum(x), batched=(False,)).proven
    assert verdict(lambda w, x: jnp.sum(w["w"]), batched=(False,)).proven


def test_decisions_on_the_batch_size_are_seen_while_tracing():
    """``==`` and truth tests on a symbolic size silently take one branch in JAX; ``>=`` raises."""
    x = jax.ShapeDtypeStruct((B, 3), jnp.float32)
    eq = trace_symbolic(lambda v: v * 7 if v.shape[0] == 7 else v, x)
    mod = trace_symbolic(lambda v: v * 2 if v.shape[0] % 2 else v, x)
    ge = trace_symbolic(lambda v: v * 2 if v.shape[0] >= 16 else v, x)
    assert eq.guesses and "batch == 7 at" in eq.guesses[0] and "test_bundle_rows.py" in eq.guesses[0]
    assert mod.guesses and "bool(mod(batch, 2))" in mod.guesses[0]
    assert ge.jaxpr is None and "InconclusiveDimensionOperation" in ge.problem
    same = trace_symbolic(lambda v: v.reshape(v.shape[0], 3) if v.shape[0] == v.shape[0] else v, x)
    assert same.guesses == ()  # decided for every size: not a branch


def test_jaxs_own_dataclass_comparisons_of_shapes_are_not_the_users_decisions():
    """Fault: depending on what ran earlier in the process, JAX compared one of its dataclasses holding the
    symbolic shape with one of batch 2 while tracing, and that comparison (a dataclass ``__eq__``, made from a
    string) was reported as the user's ``batch == 2 at <string>:4``: a row-wise function became size-dependent.
    A generated dunder is attributed to its caller: JAX's own caller is trusted, the user's line is named."""
    import dataclasses

    from xlakit._jax import symbolic

    @dataclasses.dataclass(frozen=True)
    class Shaped:
        shape: tuple

    jax_file = jax._src.core.__file__
    namespace: dict = {}
    exec(compile("def compare(a, b):\n    return a == b\n", jax_file, "exec"), namespace)  # code "in JAX"
    found: list[str] = []
    with symbolic._size_guesses(found):
        namespace["compare"](Shaped((B, 3)), Shaped((2, 3)))
    assert found == []                                          # JAX's comparison of its own keys
    with symbolic._size_guesses(found):
        assert Shaped((B, 3)) != Shaped((2, 3))                 # the user's own comparison
    assert len(found) == 1 and "test_bundle_rows.py" in found[0] and "<string>" not in found[0], found


# -- through a bundle ------------------------------------------------------------------------------------------

def load(path):
    return load_bundle(path, progress=False).wait()


def test_outlier_centring_is_compiled_exactly_never_padded(tmp_path):
    """Centring switched on by an outlier: the old row test saw no outlier and padded; the proof finds the
    reduction over rows, so a batch of 3 runs exactly (the batch-4 export is not padded)."""
    def f(p, x):
        return jnp.where(jnp.any(jnp.abs(x) > 100.0), x - x.mean(axis=0), x) @ p["w"]

    m = export_bundle(f, W, np.ones((4, 3), np.float32), tmp_path / "b", batch_sizes=(4,))
    how, reason = m.rows("default")
    assert (how, m.rows_independent["default"]) == ("coupled", False) and "reduce_or" in reason
    saved = json.loads((tmp_path / "b" / "manifest.json").read_text())["row_independence"]["default"]
    assert saved == {"how": "coupled", "reason": reason}
    x = np.array([[1, 2, 3], [4, 5, 6], [500, 0, 0]], np.float32)
    np.testing.assert_allclose(np.asarray(load(tmp_path / "b")(x)), np.asarray(f(W, x)), rtol=1e-5)


def test_look_ahead_rows_are_never_chunked(tmp_path):
    """y[i] = x[i] + x[i+1]: a batch of 6 above the largest size 4 is compiled exactly, not chunked 4 + 2."""
    def f(p, x):
        return (x + jnp.concatenate([x[1:], jnp.zeros_like(x[:1])], axis=0)) @ p["w"]

    m = export_bundle(f, W, np.ones((4, 3), np.float32), tmp_path / "b", batch_sizes=(4,))
    assert m.rows("default")[0] == "coupled" and m.polymorphic == {"default": "model.bpoly.jaxexp"}
    x = np.arange(18, dtype=np.float32).reshape(6, 3) + 1
    np.testing.assert_allclose(np.asarray(load(tmp_path / "b")(x)), np.asarray(f(W, x)), rtol=1e-5)


@pytest.mark.parametrize("kind", ["raises", "branch", "isinstance"])
def test_size_dependent_functions_are_served_only_at_exported_sizes(tmp_path, kind):
    """``if x.shape[0] >= 16`` cannot be traced symbolically; ``if x.shape[0] % 2`` bakes in one branch (seen
    while tracing); ``isinstance(x.shape[0], int)`` is no comparison at all, but the symbolic program then
    differs from the batch-2 export. Each is served at its exported size only, never padded."""
    body = {"raises": lambda x: x * 2 if x.shape[0] >= 16 else x,
            "branch": lambda x: x * 2 if x.shape[0] % 2 else x,
            "isinstance": lambda x: x * 2 if isinstance(x.shape[0], int) else x}[kind]
    why = {"raises": "cannot be traced with a symbolic batch", "branch": "decides on the batch size",
           "isinstance": "differs from the batch-2 export"}[kind]
    with pytest.warns(RuntimeWarning, match="depends on the batch size"):
        m = export_bundle(lambda p, x: body(x) @ p["w"], W, np.ones((2, 3), np.float32), tmp_path / "b",
                          batch_sizes=(2,))
    how, reason = m.rows("default")
    assert how == "size-dependent" and why in reason and m.polymorphic == {} and not m.independent("default")
    assert "http" not in reason  # JAX's links were cut mid-URL at 200 characters ("https://docs.jax.dev/e)")
    lb = load(tmp_path / "b")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(np.asarray(lb(x)), np.asarray(body(x) @ W["w"]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"served only at \[2\]"):
        lb(x[:1])


def test_an_example_without_a_batch_axis_is_named_not_a_traceback_from_jax(tmp_path):
    """Fault: ``export_bundle(f, params, x_one_item)`` with ``x`` of shape (4,) took 4 as the batch, traced at
    batch 1 and ended in JAX's ``dot_general requires contracting dimensions to have the same shape``. A function
    that traces at the example's own shapes but not with axis 0 resized now gets a ValueError that says so (JAX's
    error chained); one that fails at its own shapes still gets JAX's error as it is."""
    params = {"w": np.full((4, 3), 2.0, np.float32), "b": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match=r"traces at the examples' own shapes \(x \(4,\)\) but not with axis 0 "
                                         r"set to 1 .*give it one: x\[None\]") as e:
        export_bundle(lambda p, x: x @ p["w"] + p["b"], params, np.ones((4,), np.float32), tmp_path / "a",
                      batch_sizes=(1,))
    assert isinstance(e.value.__cause__, TypeError) and not (tmp_path / "a").exists()
    with pytest.raises(TypeError, match="dot_general"):
        export_bundle(lambda p, x: x @ p["b"], params, np.ones((2, 4), np.float32), tmp_path / "b",
                      batch_sizes=(1, 2))


def test_declared_is_recorded_as_declared_and_older_manifests_are_unproven(tmp_path):
    """rows_independent=True stays the explicit override (padded, recorded as declared); a manifest from before
    the proof says rows_independent true without row_independence: unproven, never padded."""
    m = export_bundle(lambda p, x: x @ p["w"], W, np.ones((2, 3), np.float32), tmp_path / "b", batch_sizes=(2,),
                      rows_independent=True)
    assert m.rows("default")[0] == "declared" and m.independent("default")
    lb = load(tmp_path / "b")
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    np.testing.assert_allclose(np.asarray(lb(x)), x @ W["w"], rtol=1e-6)  # padded 1 -> 2
    path = tmp_path / "b" / "manifest.json"
    data = json.loads(path.read_text())
    del data["row_independence"], data["module_sha256"]  # as an older xlakit wrote it
    data["polymorphic"] = {}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"rows unproven \(an older xlakit tested the rows on one input"):
        load(tmp_path / "b")(x)
