"""An op JAX makes while lowering — here the broadcast of a closed-over constant inside a scan — carries no line of
the user's function: its stack runs through xlakit (``attribute(f, x)`` traced ``f``) to the line that called
xlakit. It is charged to "unknown", never to that caller's line (found by a user trial, 2026-12-06: 256 KiB per
broadcast blamed on the ``xm.attribute(...)`` line)."""

import jax
import jax.numpy as jnp

import xlakit.memory as xm

W = jnp.ones((256, 256)) * 0.5


def _f(x):
    def body(c, _):
        return jnp.tanh(c @ W), c.sum()

    c, ys = jax.lax.scan(body, x, None, length=4)
    return c.sum() + ys.sum()


def test_an_op_made_while_lowering_is_not_charged_to_the_line_that_called_xlakit():
    buffers = xm.attribute(jax.jit(jax.grad(_f)), jnp.ones((64, 256))).buffers
    assert not buffers["source"].str.contains("test_round4_caller_line.py:2[0-9] ").any()  # this test's lines
    body = buffers[buffers["source"].str.contains(r"test_round4_caller_line.py:\d+ \(_f.<locals>.body\)")]
    assert int(body["bytes"].sum()) > 0  # the scan body's own ops still name their line
    broadcasts = buffers[buffers["instruction"].str.startswith("wrapped_broadcast")]  # W, broadcast per use
    assert int((broadcasts.loc[broadcasts["bytes"] == 256 * 256 * 4, "source"] == "unknown").sum()) >= 2
