"""A copy XLA inserts of an argument (copy insertion: no metadata, no line of the user's code) is named by the
argument it copies, not left "unknown" (JupyterLab trial, round four: a donated step's 4 MiB copy had no source).
For a donated argument the words say why XLA copies it: a result is written into its buffer while its value is
still read."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import xlakit.memory as xm


def _step(p, x):
    new = {k: v - 0.1 * jnp.tanh(x @ v) for k, v in p.items()}
    return new, sum((p[k] * new[k]).sum() for k in p)  # the old p is read after the new one is made


def test_a_donated_arguments_copy_names_the_argument_and_why():
    p = {"u": jnp.ones((64, 64)), "w": jnp.ones((64, 64))}
    attribution = xm.attribute(jax.jit(_step, donate_argnums=0), p, jnp.ones((64, 64)))
    b = attribution.buffers
    copies = b[b["instruction"].astype(str).str.startswith("copy")]
    line = _step.__code__.co_firstlineno + 2  # the line that reads the old p after the new one is made
    sources = sorted(copies["source"])
    for k, source in zip("uw", sources, strict=True):
        head = f"XLA's copy of argument p['{k}'] (donated: its buffer takes a result while this value is still read"
        assert source.startswith(head + ", last at ") and source.endswith(
            f"test_attribution_argument_copies.py:{line} (_step.<locals>.<genexpr>))"), source
    assert set(copies["line"]) == {line}  # the layer and line are that reader's: what holds the copy
    assert set(copies["scope"]) == {"made by XLA › copy of an argument"}
    assert set(copies["bytes"]) == {64 * 64 * 4}
    assert "unknown" not in set(b.loc[b["bytes"] == 64 * 64 * 4, "source"])


def test_a_donated_arguments_copy_when_its_buffer_takes_another_result():
    def f(*xs):
        return [x + 1 for x in xs[::2]]

    xs = tuple(jnp.full((2,), float(i)) for i in range(12))
    b = xm.attribute(jax.jit(f, donate_argnums=(0, 3, 6, 9)), *xs).buffers
    copied = set(b.loc[b["scope"] == "made by XLA › copy of an argument", "source"])
    # XLA copies xs[6] (donated: its buffer takes another result while xs[6] + 1 still reads it)
    (source,) = copied
    assert source.startswith("XLA's copy of argument xs[6] (donated: its buffer takes a result while this value is "
                             "still read, last at ") and "test_attribution_argument_copies.py:" in source


def test_a_kept_arguments_copy_claims_no_donation():
    b = xm.attribute(jax.jit(lambda x: (x, x + 1)), jnp.ones(16)).buffers
    copy = b[b["instruction"] == "copy"].iloc[0]  # XLA copies x into the first result
    assert (copy["role"], copy["source"]) == ("output", "XLA's copy of argument x")
