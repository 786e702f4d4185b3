"""Hand-built flax.nnx train steps for the memory attribution tests, with the big activation on a known line.

``BIG_LINE`` is the line of ``MLP.__call__`` whose ``self.wide(x)`` makes the largest value of the program
(batch x 2048 float32), and its backward pass too: the next line averages it down (no parameters), so its
gradient is fused into that of ``nnx.relu``. The tests check that the peak is attributed to that line.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import optax
from flax import nnx

WIDE = 2048


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.wide = nnx.Linear(16, WIDE, rngs=rngs)
        self.out = nnx.Linear(WIDE // 32, 4, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.wide(x))
        return self.out(h.reshape(h.shape[0], 32, -1).mean(axis=1))


BIG_LINE = inspect.getsourcelines(MLP.__call__)[1] + 1  # the line `h = nnx.relu(self.wide(x))`


def train_step(remat: bool = False, donate: bool = False):
    """``(step, params, opt_state)``: ``step(params, opt_state, x, y) -> (params, opt_state, loss)``, one adam
    step of mean squared error; ``remat`` wraps the model call in ``jax.checkpoint`` (nothing saved).
    ``params`` and ``opt_state`` are ``jax.ShapeDtypeStruct`` trees: the model is built abstractly
    (``nnx.eval_shape``), because eager flax init compiles a dozen tiny programs first."""
    model = nnx.eval_shape(lambda: MLP(nnx.Rngs(0)))
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    opt = optax.adam(1e-3)

    def forward(p, x):
        st = jax.tree.map(lambda v: v, state)
        nnx.replace_by_pure_dict(st, p)
        return nnx.merge(graphdef, st)(x)

    if remat:
        forward = jax.checkpoint(forward, policy=jax.checkpoint_policies.nothing_saveable)

    def step(params, opt_state, x, y):
        def loss(p):
            return ((forward(p, x) - y) ** 2).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    jitted = jax.jit(step, donate_argnums=(0, 1) if donate else ())
    return jitted, params, jax.eval_shape(opt.init, params)


def batch(n: int):
    """Example ``(x, y)`` of ``n`` rows as ``jax.ShapeDtypeStruct`` (compile-only)."""
    return jax.ShapeDtypeStruct((n, 16), jnp.float32), jax.ShapeDtypeStruct((n, 4), jnp.float32)


def scan_train_step(remat: bool, layers: int = 8, width: int = 128):
    """``(step, params)``: ``step(params, x) -> (params, loss)``, one SGD step of ``layers`` tanh layers of
    ``width`` run with ``jax.lax.scan`` over stacked weights; ``remat`` checkpoints each layer, so the backward
    pass recomputes the layer's activation instead of keeping it as a residual."""
    def layer(h, w):
        return jnp.tanh(h @ w), None

    body = jax.checkpoint(layer) if remat else layer

    def loss(params, x):
        h, _ = jax.lax.scan(body, x, params["w"])
        return (h ** 2).mean()

    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

    params = {"w": jax.ShapeDtypeStruct((layers, width, width), jnp.float32)}
    return jax.jit(step), params
