"""Real, deterministic JAX workloads: flax.nnx models trained or served with optax, as plain jitted functions.

Each :class:`Workload` builds a ``jax.jit``-wrapped pure function and concrete example arguments. Outputs are
pytrees of arrays, so callers can compare ``jax.tree.leaves(out)`` bit for bit across processes.

Building compiles nothing: the models are created abstractly with ``nnx.eval_shape`` and their parameters drawn
with NumPy from fixed seeds. Eager flax init compiles about 20 tiny XLA programs and takes 2.5-3 s for the
transformer on a 2-core machine, about as long as compiling the workload itself, and those compiles would pollute
any cache statistics measured around the first call.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

__all__ = ["Workload", "workloads", "run_first_call"]


@dataclass(frozen=True)
class Workload:
    """A named JAX program with example inputs.

    Attributes:
      name: identifier, also the jitted function's name (so its HLO module is ``jit_<name>``).
      description: one line for people.
      build: returns ``(fn, args)``: ``fn`` is ``jax.jit``-wrapped and pure, ``args`` a tuple of concrete arrays
        and pytrees of arrays. Same seed every time, so every build gives the same values.
    """

    name: str
    description: str
    build: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]


def workloads() -> list[Workload]:
    """All workloads, in this order:

    - ``cnn_train_step`` and ``transformer_train_step``: ``step(params, opt_state, x, y) -> (params, opt_state,
      loss)``, one optimizer step on mean cross-entropy (the transformer predicts the next token).
    - ``mlp_infer_b1``, ``mlp_infer_b8``, ``mlp_infer_b64``: ``infer(params, x) -> logits`` of shape (batch, 10).

    ``params`` are nested dicts of arrays (``nnx.to_pure_dict``), ``opt_state`` is optax's state for them.
    """
    return [
        Workload("cnn_train_step", "flax.nnx CNN (2 conv + 2 dense), 28x28x1 batch 32, 10 classes, optax adam step",
                 _build_cnn_train_step),
        Workload("transformer_train_step",
                 "flax.nnx decoder-only transformer (4 layers stacked with nnx.vmap, run with nnx.scan; d_model 128, "
                 "4 heads, seq 64, vocab 512), batch 8, optax adamw step", _build_transformer_train_step),
        *[Workload(f"mlp_infer_b{b}", f"flax.nnx MLP 784-512-512-10 inference, batch {b}",
                   functools.partial(_build_mlp_infer, b)) for b in (1, 8, 64)],
    ]


def run_first_call(workload: Workload) -> tuple[float, Any]:
    """Build ``workload`` and time its first call, i.e. trace, lower, compile (or cache load) and run.

    Returns:
      ``(seconds, outputs)``: wall time of ``fn(*args)`` up to ``jax.block_until_ready`` (``time.perf_counter``).
    """
    fn, args = workload.build()
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, out


# --- models -------------------------------------------------------------------------------------------------


class _CNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), rngs=rngs)
        self.hidden = nnx.Linear(7 * 7 * 32, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.avg_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
        x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
        return self.out(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))


class _Block(nnx.Module):
    def __init__(self, d_model: int, heads: int, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        # keep_rngs=False: without dropout the layer needs no RNG state, so the model holds only Params.
        self.attn = nnx.MultiHeadAttention(heads, d_model, decode=False, keep_rngs=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.up = nnx.Linear(d_model, 4 * d_model, rngs=rngs)
        self.down = nnx.Linear(4 * d_model, d_model, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class _Transformer(nnx.Module):
    """Decoder-only, pre-LayerNorm transformer whose blocks are stacked and scanned, as large-model codebases
    (MaxText, the flax "scan over layers" guide) do: ``nnx.vmap`` creates one ``_Block`` whose every Param has
    a leading axis of size ``layers``, and ``nnx.scan`` runs it once per layer.

    Why scan: the first call of the train step is then dominated by XLA compile, not Python. Measured on a
    2-core AMD EPYC (jaxlib 0.10.2, flax 0.12.8, CPU; medians of 2-4 fresh processes, the machine otherwise
    nearly idle): scanned, the step traces in ~0.4 s (one layer is traced, ~400 nested jit calls instead of
    ~1,260, and adamw updates 22 stacked arrays instead of 70), lowers in ~0.25 s and compiles in ~4.2 s
    (~7.6 s CPU over both cores); the executable loads from the cache in ~0.2 s and first runs in ~0.2 s.
    ``xlakit demo``: cold ~5.5 s, warm ~1.1 s, 4.5-5.9x. The same model unrolled (a Python loop over 4
    ``_Block`` modules) traces in ~0.8 s and compiles in ~3.1 s (~5 s CPU; each unrolled layer adds only ~0.3 s
    CPU), but loads in ~0.45 s and first runs in ~0.4 s: cold ~4.7 s, warm ~1.7 s, 2.4-3.1x. ``unroll=2`` and
    ``unroll=True`` compile no faster and load and first run slower (5.1x, 4.0x); ``nnx.remat`` on the block
    saves ~1.4 s of compile CPU and little warm time (3.7-5.0x); d_model 256 / 8 heads / seq 128 adds ~0.4 s of
    run time to both (3.5x). More layers add run time only.
    """

    _stacked = ("blocks",)  # Params under these attributes have the leading layer axis; see _init

    def __init__(self, rngs: nnx.Rngs, vocab=512, d_model=128, layers=4, heads=4, seq=64):
        self.embed = nnx.Embed(vocab, d_model, rngs=rngs)
        self.pos = nnx.Param(jnp.zeros((seq, d_model)))

        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_blocks(rngs: nnx.Rngs):
            return _Block(d_model, heads, rngs)

        self.blocks = make_blocks(rngs)
        self.ln = nnx.LayerNorm(d_model, rngs=rngs)
        self.head = nnx.Linear(d_model, vocab, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        mask = nnx.make_causal_mask(tokens)

        @nnx.scan(in_axes=(nnx.Carry, 0, None), out_axes=nnx.Carry)
        def run_blocks(x, block, mask):
            return block(x, mask)

        return self.head(self.ln(run_blocks(x, self.blocks, mask)))


class _MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(784, 512, rngs=rngs), nnx.Linear(512, 512, rngs=rngs),
                                nnx.Linear(512, 10, rngs=rngs)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = nnx.relu(layer(x))
        return self.layers[-1](x)


# --- builders -----------------------------------------------------------------------------------------------


def _build_cnn_train_step():
    graphdef, params = _init(_CNN, seed=0)
    rng = np.random.default_rng(1)
    x = jax.device_put(rng.standard_normal((32, 28, 28, 1), dtype=np.float32))
    y = jax.device_put(rng.integers(0, 10, size=32, dtype=np.int32))
    tx = optax.adam(1e-3)
    return _train_step(graphdef, tx, "cnn_train_step"), (params, _zeros_opt_state(tx, params), x, y)


def _build_transformer_train_step():
    graphdef, params = _init(_Transformer, seed=0)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 512, size=(8, 65), dtype=np.int32)
    x, y = jax.device_put(tokens[:, :-1]), jax.device_put(tokens[:, 1:])  # next-token prediction
    tx = optax.adamw(1e-3)
    return _train_step(graphdef, tx, "transformer_train_step"), (params, _zeros_opt_state(tx, params), x, y)


def _build_mlp_infer(batch: int):
    graphdef, params = _init(_MLP, seed=0)
    x = jax.device_put(np.random.default_rng(1).standard_normal((batch, 784), dtype=np.float32))

    def infer(params, x):
        return nnx.merge(graphdef, params)(x)

    infer.__name__ = infer.__qualname__ = f"mlp_infer_b{batch}"
    return jax.jit(infer), (params, x)


def _train_step(graphdef, tx: optax.GradientTransformation, name: str):
    """``step(params, opt_state, x, y) -> (params, opt_state, loss)``: one optimizer step on mean cross-entropy."""

    def step(params, opt_state, x, y):
        def loss_fn(p):
            logits = nnx.merge(graphdef, p)(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    step.__name__ = step.__qualname__ = name
    return jax.jit(step)


def _init(module_cls, seed: int):
    """``(graphdef, params)``: the module's structure from ``nnx.eval_shape`` (nothing runs) and a pure dict of
    parameters drawn with NumPy: kernels normal with std 1/sqrt(fan-in), embeddings 1/sqrt(features), biases 0,
    LayerNorm scales 1, anything else (the position embedding) normal with std 0.02. Params under the attributes
    named in ``module_cls._stacked`` hold one slice per layer on axis 0 (made by ``nnx.vmap``); their fan-in
    leaves that axis out."""
    abstract = nnx.eval_shape(lambda: module_cls(rngs=nnx.Rngs(0)))
    graphdef, state, *rest = nnx.split(abstract, nnx.Param, ...)
    if jax.tree.leaves(rest):  # the pure functions merge Params only; other state would silently go missing
        raise ValueError(f"{module_cls.__name__} holds state other than nnx.Param")
    rng = np.random.default_rng(seed)
    stacked = getattr(module_cls, "_stacked", ())

    def draw(path, leaf):
        name, shape = str(getattr(path[-1], "key", path[-1])), leaf.shape
        per_layer = shape[1:] if str(getattr(path[0], "key", path[0])) in stacked else shape
        if name == "bias":
            value = np.zeros(shape)
        elif name == "scale":
            value = np.ones(shape)
        elif name in ("kernel", "embedding"):
            fan_in = per_layer[-1] if name == "embedding" else math.prod(per_layer[:-1])
            value = rng.standard_normal(shape) / math.sqrt(fan_in)
        else:
            value = rng.standard_normal(shape) * 0.02
        return jax.device_put(np.asarray(value, dtype=leaf.dtype))

    # flatten order is sorted by key, so the same seed gives the same values on every run
    return graphdef, jax.tree_util.tree_map_with_path(draw, nnx.to_pure_dict(state))


def _zeros_opt_state(tx: optax.GradientTransformation, params):
    """``tx.init(params)`` without running it: Adam's state (step count, both moments) starts at zero, and
    ``jax.eval_shape`` gives its structure without compiling the ~7 small programs eager init would."""
    return jax.tree.map(lambda s: jax.device_put(np.zeros(s.shape, s.dtype)), jax.eval_shape(tx.init, params))
