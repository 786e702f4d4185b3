"""Bundles padded or exact, and results named beside ordered effects' tokens (red team, round 10).

Faults these tests catch: the README said padding a call "never changes an answer" and that ``loaded(x)`` gives
the same answer as ``infer(params, x)``, but XLA:CPU rounds a matrix product of 1 row and of 4 rows differently,
so a batch of 1 padded into the batch-4 program differed from ``jax.jit`` in the last bit (8 of 16 outputs of a
width-16 MLP, up to 2 ULP: recorded on this project's CPU machine, jax 0.10.2, 2026-12-06, by
``benchmarks/bundle_padding.py``) and nothing let a user ask for the exact bits — now ``load_bundle(exact=True)``
compiles each size from the shape-polymorphic module, kept for proven variants too; and with an ordered effect
(``jax.debug.print(..., ordered=True)``) XLA's result tuple starts with a token, so results were named by tuple
position (``output 2``) instead of the user's tree (``output[1]``), beside a donations table that said
``output[1]``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlakit  # noqa: E402
from xlakit import memory  # noqa: E402

RNG = np.random.default_rng(0)
PARAMS = {"w": RNG.standard_normal((16, 16)).astype(np.float32), "b": RNG.standard_normal(16).astype(np.float32)}


def mlp(p, x):
    return jax.nn.softmax(jnp.tanh(x @ p["w"] + p["b"]) @ p["w"].T, axis=-1)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("b") / "mlp"
    manifest = xlakit.export_bundle(mlp, PARAMS, RNG.standard_normal((4, 16)).astype(np.float32), path,
                                    batch_sizes=(4, 8))
    assert manifest.rows("default")[0] == "proven"
    assert "default" in manifest.polymorphic  # kept for exact=True
    return path


def test_exact_loads_give_jax_jits_bits_at_every_size(bundle):
    loaded = xlakit.load_bundle(bundle, progress=False, background=False, exact=True)
    for n in (1, 3, 4, 9):
        x = RNG.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(jax.jit(mlp)(PARAMS, x)))
    assert sorted(b for v, b in loaded.programs if v == "default") == [1, 3, 4, 8, 9]  # 1, 3, 9 compiled exactly


def test_padded_calls_agree_in_value_and_run_no_new_program(bundle):
    loaded = xlakit.load_bundle(bundle, progress=False, background=False)
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    got, ref = np.asarray(loaded(x)), np.asarray(jax.jit(mlp)(PARAMS, x))
    np.testing.assert_allclose(got, ref, rtol=0, atol=4 * float(np.spacing(np.float32(ref.max()))))
    assert sorted(b for v, b in loaded.programs if v == "default") == [4, 8]  # padded: nothing compiled


def test_exact_must_be_a_bool(bundle):
    with pytest.raises(TypeError, match="exact"):
        xlakit.load_bundle(bundle, progress=False, background=False, exact="yes")


def test_results_beside_an_ordered_effects_token_are_named_by_the_users_tree():
    def step(a, b):
        jax.debug.print("b0 {}", b[0], ordered=True)
        return b + 1, a * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = jax.jit(step, donate_argnums=0).lower(jnp.ones((256, 256)), jnp.ones((32,))).compile()
    found = memory.attribute(compiled)
    rows = found.buffers
    assert rows.loc[rows.role == "aliased", "output"].tolist() == ["output[1]"]
    assert rows.loc[(rows.role == "output") & (rows["bytes"] == 128), "output"].tolist() == ["output[0]"]
    assert found.donations.loc[found.donations.argument == "a", "output"].tolist() == ["output[1]"]
    assert int(found.donations["bytes"].sum()) == compiled.memory_analysis().alias_size_in_bytes == 262144
