"""Donation shown as what it is: a result XLA writes into a donated argument's bytes is an ``aliased`` buffer that
names the argument and the result, takes the shared bytes over from the step it is written (each byte still
charged once: the roles sum to XLA's live bytes at every step), and ``compare`` says which argument became which
result and what that saved — for pytree results, and for an argument donated in part."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

from xlakit.memory import attribute, compare, peak
from xlakit.memory.attribution import ROLES

KIB = 1024


def _sgd(p, g):
    """A new parameter dict (a pytree result) and a scalar; ``p['odd']`` has no result of its shape."""
    new = {k: p[k] - 0.1 * g[k] for k in ("w1", "w2")}
    return new, (p["odd"] * 2).sum()


@pytest.fixture(scope="module")
def pair():
    p = {"w1": jax.ShapeDtypeStruct((64, 32), jnp.float32), "w2": jax.ShapeDtypeStruct((32, 64), jnp.float32),
         "odd": jax.ShapeDtypeStruct((7, 3), jnp.float32)}
    g = {k: p[k] for k in ("w1", "w2")}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        donated = attribute(jax.jit(_sgd, donate_argnums=0), p, g)
    return attribute(jax.jit(_sgd), p, g), donated


def test_each_donated_argument_names_the_result_written_into_it_and_the_bytes_saved(pair):
    _plain, donated = pair
    d = donated.donations.set_index("argument")
    assert d.loc["p['w1']", "output"] == "output[0]['w1']" and d.loc["p['w1']", "bytes"] == 8 * KIB
    assert d.loc["p['w2']", "output"] == "output[0]['w2']" and d.loc["p['w2']", "bytes"] == 8 * KIB
    # donated but not reusable (no result of its shape): listed, nothing saved
    assert d.loc["p['odd']", "bytes"] == 0 and d.loc["p['odd']", "output"] is None
    b = donated.buffers
    aliased = b[b["role"] == "aliased"].set_index("parameter")
    assert aliased.loc["p['w1']", "output"] == "output[0]['w1']" and aliased.loc["p['w1']", "bytes"] == 8 * KIB
    args = b[b["role"] == "parameter"].set_index("parameter")
    assert args.loc["p['w2']", "output"] == "output[0]['w2']" and bool(args.loc["p['w2']", "donated"])
    assert bool(args.loc["p['odd']", "donated"]) and pd.isna(args.loc["p['odd']", "output"])
    # the result lives from the step that writes it, not from the argument's first step
    assert aliased.loc["p['w1']", "start"] > args.loc["p['w1']", "start"] == 0
    assert pair[0].donations.empty


def test_the_aliased_result_takes_the_bytes_over_and_each_byte_is_charged_once(pair):
    plain, donated = pair
    for a in (plain, donated):
        live = a.liveness
        roles = [r for r in ROLES if r in live.columns]
        # per step, the roles add up to the union of live byte ranges XLA's allocations hold (swept apart)
        xla = a.assignment.live_bytes_by_step()["live_bytes"]
        assert (live[roles].sum(axis=1) == xla).all() and (live["live_bytes"] == xla).all()
    last = donated.liveness.iloc[-1]
    assert last["aliased"] == 16 * KIB  # both new parameters, charged to the results at the end
    assert donated.liveness["aliased"].iloc[0] == 0  # nothing written yet at the first step


def test_compare_says_which_argument_became_which_result(pair):
    plain, donated = pair
    text = compare(plain, donated).summary()
    assert "donation: p['w1'] → output[0]['w1'] aliased, 8.0 KiB reused" in text, text
    assert "p['w2'] → output[0]['w2'] aliased, 8.0 KiB reused" in text
    assert "donated but not reused: p['odd']" in text
    back = compare(donated, plain).summary()
    assert "donation: p['w1'] → output[0]['w1'] no longer aliased" in back, back
    both = compare(plain, donated).donations
    assert set(both["program"]) == {"b"} and len(both) == 3


def test_sgd_with_donation_reports_aliased_bytes_at_its_peak():
    """The reported case: ``by('role')`` read 'aliased 0 B' and compare only 'outputs −4 MiB'."""
    params = {"w1": jnp.ones((128, 256)), "w2": jnp.ones((256, 128))}
    grads = jax.tree.map(jnp.ones_like, params)

    def sgd(p, g):
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)

    a = peak(jax.jit(sgd), params, grads)
    b = peak(jax.jit(sgd, donate_argnums=0), params, grads)
    by_role = b.by("role").set_index("group")["bytes"]
    assert by_role["aliased"] == 2 * 128 * 256 * 4 and by_role.sum() == b.total_bytes
    aliased = b.buffers[b.buffers["role"] == "aliased"]
    assert sorted(aliased["parameter"]) == ["p['w1']", "p['w2']"]
    assert sorted(aliased["output"]) == ["output['w1']", "output['w2']"]
    summary = compare(a, b).summary()
    assert "aliased outputs +256.0 KiB" in summary and "p['w1'] → output['w1'] aliased, 128.0 KiB reused" in summary
