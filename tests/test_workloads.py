"""The demo workloads are real, deterministic JAX programs."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from xlakit.demo import workloads as W

WORKLOADS = {w.name: w for w in W.workloads()}
TRAIN_STEPS = ["cnn_train_step", "transformer_train_step"]


def test_names():
    assert list(WORKLOADS) == ["cnn_train_step", "transformer_train_step", "mlp_infer_b1", "mlp_infer_b8",
                               "mlp_infer_b64"]
    assert all(w.description for w in WORKLOADS.values())


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_runs_finite_and_deterministic(name):
    built = []  # the (fn, args) run_first_call builds, kept so its compiled program can run again

    def build():
        built.append(WORKLOADS[name].build())
        return built[-1]

    seconds, out = W.run_first_call(dataclasses.replace(WORKLOADS[name], build=build))
    assert seconds > 0
    leaves = jax.tree.leaves(out)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)
    (fn, first_args), = built
    _, args = WORKLOADS[name].build()  # a second build: same seeds, so the same values
    assert all(np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(first_args), jax.tree.leaves(args), strict=True))
    result = fn(*args)  # the program compiled once (a second jit of it costs a compile) on the rebuilt inputs
    again = jax.tree.leaves(result)
    assert len(again) == len(leaves)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(leaves, again, strict=True))
    # the compiled program goes on from its own output (no second compile):
    if name in TRAIN_STEPS:  # a train step learns: two more steps from its own output lower the loss each time
        params, opt_state, loss = result
        losses = [float(loss)]
        for _ in range(2):
            params, opt_state, loss = fn(params, opt_state, *args[2:])
            losses.append(float(loss))
        assert losses[0] > losses[1] > losses[2], losses
    else:  # an inference workload has the batch size its name says
        batch = int(name.removeprefix("mlp_infer_b"))
        assert args[1].shape == (batch, 784) and result.shape == (batch, 10)


def test_build_compiles_nothing():
    compiles = []

    def listener(event, duration, **kwargs):
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for workload in WORKLOADS.values():
            workload.build()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []


@pytest.mark.parametrize("tx", [optax.adam(1e-3), optax.adamw(1e-3)], ids=["adam", "adamw"])
def test_zero_opt_state_equals_optax_init(tx):
    _, params = W._init(W._MLP, seed=0)
    ours, theirs = W._zeros_opt_state(tx, params), tx.init(params)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_transformer_layers_are_stacked_and_scanned():
    fn, args = WORKLOADS["transformer_train_step"].build()
    blocks = args[0]["blocks"]
    assert {leaf.shape[0] for leaf in jax.tree.leaves(blocks)} == {4}  # one slice per layer on axis 0
    up = np.asarray(blocks["up"]["kernel"])
    assert up.shape == (4, 128, 512)
    assert abs(up.std() * np.sqrt(128) - 1) < 0.02  # fan-in per layer (128), not counting the layer axis
    text = fn.trace(*args).lower().as_text()
    assert "jit_transformer_train_step" in text
    assert "stablehlo.while" in text  # scanned: the blocks run in a loop, not unrolled
