"""The programs of ``benchmarks/accelerator.py``, in plain JAX (no flax: nothing compiles while they are built).

* a decoder-only bf16 transformer (pre-LayerNorm, causal attention, GELU MLP, tied embedding): its SGD train step
  (``jnp.take`` of the embedding inside: a gather, which the TPU compiler lowers to its own internal custom calls)
  and its inference function (logits);
* a Pallas kernel (``pl.pallas_call``, elementwise ``2a + b``): Mosaic's ``tpu_custom_call`` on TPU, Triton on
  GPU, ``interpret=True`` on CPU (where Pallas has no compiler);
* small MLPs of varied widths and depths for the folder of bundles.

Parameters are drawn with NumPy from fixed seeds and placed with ``jax.device_put``: building compiles nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Model sizes for one run. ``layers``/``d_model``/``heads``/``seq``/``batch``/``vocab``: the transformer;
    ``pallas_rows`` x ``pallas_cols``: the Pallas operands (float32); ``folder``: ``(width, depth)`` of each small
    MLP bundle (input and output width 256)."""

    label: str
    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    vocab: int
    pallas_rows: int
    pallas_cols: int
    folder: tuple[tuple[int, int], ...]


def _folder(widths: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """20+ MLPs: every width at depth 2 and 3."""
    return tuple((w, d) for w in widths for d in (2, 3))


#: The issue's transformer (compiles in 13.5 s on a TPU v5e) and a folder of MLPs 128 to 2048 wide (~160 MB of
#: weights in all: the programs' loads, not the weights, should dominate the folder's restart).
ACCELERATOR = Sizes("accelerator: 6 layers, d_model 1024, 8 heads, seq 512, batch 8, vocab 8192", 6, 1024, 8, 512,
                    8, 8192, 512, 512, _folder((128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 2048)))
#: CPU: the same architecture, smaller (a CPU compiles and runs it in seconds, not minutes).
CPU = Sizes("cpu: 2 layers, d_model 256, 4 heads, seq 128, batch 4, vocab 2048", 2, 256, 4, 128, 4, 2048, 128, 256,
            _folder((64, 96, 128, 192, 256, 384, 512, 640, 768, 1024)))
#: ``--quick``: a smoke run.
QUICK = Sizes("quick: 1 layer, d_model 64, 2 heads, seq 32, batch 2, vocab 256", 1, 64, 2, 32, 2, 256, 16, 128,
              _folder((16, 24, 32, 48, 64, 80, 96, 112, 128, 160)))


def sizes_for(platform: str, quick: bool) -> Sizes:
    """``QUICK`` with ``quick``; else ``CPU`` on the CPU and ``ACCELERATOR`` on any accelerator."""
    if quick:
        return QUICK
    return CPU if platform == "cpu" else ACCELERATOR


# -- the transformer -------------------------------------------------------------------------------------------

def transformer_params(s: Sizes, seed: int = 0) -> dict[str, Any]:
    """``{"emb": (vocab, d), "blocks": [per layer: wqkv (d, 3d), wo (d, d), w1 (d, 4d), w2 (4d, d), ln1, ln2 (d,)],
    "lnf": (d,)}``, bf16, normal(0, 0.02) weights and unit LayerNorm scales, on JAX's default device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    d = s.d_model

    def w(*shape):
        return jax.device_put(np.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.02, jnp.bfloat16))

    def ones():
        return jax.device_put(np.ones((d,), jnp.bfloat16))

    blocks = [{"wqkv": w(d, 3 * d), "wo": w(d, d), "w1": w(d, 4 * d), "w2": w(4 * d, d), "ln1": ones(),
               "ln2": ones()} for _ in range(s.layers)]
    return {"emb": w(s.vocab, d), "blocks": blocks, "lnf": ones()}


def tokens(s: Sizes, batch: int | None = None, seed: int = 1):
    """int32 token ids, ``(batch or s.batch, s.seq)``, as a NumPy array."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, s.vocab, (batch or s.batch, s.seq)).astype(np.int32)


def _layer_norm(x, g):
    import jax
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5)).astype(x.dtype) * g


def _logits(p, toks, heads: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    x = jnp.take(p["emb"], toks, axis=0)  # the gather
    b, s, d = x.shape
    mask = jnp.tril(jnp.ones((s, s), bool))
    for blk in p["blocks"]:
        h = _layer_norm(x, blk["ln1"]) @ blk["wqkv"]
        q, k, v = (t[:, :, 0] for t in jnp.split(h.reshape(b, s, 3, heads, d // heads), 3, axis=2))
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.sqrt(d // heads)
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), -1).astype(x.dtype)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, s, d) @ blk["wo"]
        x = x + jax.nn.gelu(_layer_norm(x, blk["ln2"]) @ blk["w1"]) @ blk["w2"]
    return (_layer_norm(x, p["lnf"]) @ p["emb"].T).astype(jnp.float32)


def train_step(s: Sizes):
    """``transformer_train_step(params, tokens) -> (params, loss)``: next-token cross-entropy, one SGD step (lr
    0.01), not jitted (its HLO module is ``jit_transformer_train_step`` once jitted)."""
    import jax
    import jax.numpy as jnp

    def loss_fn(p, toks):
        logp = jax.nn.log_softmax(_logits(p, toks, s.heads)[:, :-1])
        return -jnp.take_along_axis(logp, toks[:, 1:, None], -1).mean()

    def transformer_train_step(p, toks):
        loss, g = jax.value_and_grad(loss_fn)(p, toks)
        return jax.tree.map(lambda a, b: a - 0.01 * b.astype(a.dtype), p, g), loss

    return transformer_train_step


def infer(s: Sizes):
    """``transformer_infer(params, tokens) -> logits`` (float32, ``(batch, seq, vocab)``), not jitted."""

    def transformer_infer(p, toks):
        return _logits(p, toks, s.heads)

    return transformer_infer


# -- Pallas ----------------------------------------------------------------------------------------------------

def pallas_double_add(a, b):
    """``2 * a + b`` by a Pallas kernel over whole operands (one block); ``interpret=True`` on the CPU."""
    import jax
    from jax.experimental import pallas as pl

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * 2.0 + b_ref[...]

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
                          interpret=jax.devices()[0].platform == "cpu")(a, b)


def pallas_step(a, b):
    """``sum(2a + b)`` through :func:`pallas_double_add` (its HLO module: ``jit_pallas_step``)."""
    import jax.numpy as jnp

    return jnp.sum(pallas_double_add(a, b))


def pallas_operands(s: Sizes, seed: int = 2):
    """Two float32 NumPy arrays of ``(pallas_rows, pallas_cols)``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (s.pallas_rows, s.pallas_cols)
    return rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)


def pallas_infer(params, x):
    """The Pallas bundle's function: ``2 * x + params["b"]`` row by row (``b`` broadcast to x's rows)."""
    import jax.numpy as jnp

    return pallas_double_add(x, jnp.broadcast_to(params["b"], x.shape))


# -- the folder's MLPs -----------------------------------------------------------------------------------------

MLP_IO = 256


def mlp_params(width: int, depth: int, seed: int) -> dict[str, Any]:
    """``{"w0": (256, width), "b0", ..., "w<depth>": (width, 256), ...}``, float32 NumPy (the bundle places them)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    dims = [MLP_IO] + [width] * depth + [MLP_IO]
    out = {}
    for i, (m, n) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        out[f"w{i}"] = (rng.standard_normal((m, n), dtype=np.float32) / np.sqrt(m)).astype(np.float32)
        out[f"b{i}"] = np.zeros((n,), np.float32)
    return out


def mlp_infer(params, x):
    """ReLU MLP over the layers of :func:`mlp_params`."""
    import jax

    n = len(params) // 2
    for i in range(n):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < n - 1:
            x = jax.nn.relu(x)
    return x
