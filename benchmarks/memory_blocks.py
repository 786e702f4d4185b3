"""How many values of a model's blocks ``xlakit.memory`` names with their block (``blocks[2]``), and whether any is
named wrong: a 4-block flax.nnx transformer train step (layer norms, 4-head attention, MLP, adam through
``nnx.Optimizer``), each block of a different width, compiled twice.

The answer to check against is the name stack: the second compile traces each block under
``jax.named_scope(f"blk{i}")``, which the block rule (:mod:`xlakit.memory._blocks`) never reads. Per value of the
blocks (arguments left out): named right, named wrong, not named (a seam between two blocks, or a value reading
two blocks' parameters), and the share of their bytes named. Compile-only; one process, about 15 s on 2 CPU cores.

Run: ``PYTHONPATH=. python benchmarks/memory_blocks.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from xlakit.memory import attribute
from xlakit.memory._hlo_frames import parse_op_name

D, LAYERS, HEADS, SEQ, VOCAB = 128, 4, 4, 64, 512


class Block(nnx.Module):
    def __init__(self, hidden: int, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(D, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(HEADS, D, qkv_features=HEADS * hidden // 16, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, hidden, rngs=rngs)
        self.down = nnx.Linear(hidden, D, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class Transformer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, scoped: bool):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.blocks = nnx.List([Block(528 + 16 * i, rngs) for i in range(LAYERS)])
        self.ln = nnx.LayerNorm(D, rngs=rngs)
        self.head = nnx.Linear(D, VOCAB, rngs=rngs)
        self.scoped = scoped

    def __call__(self, tokens):
        x, mask = self.embed(tokens), nnx.make_causal_mask(tokens)
        for i, block in enumerate(self.blocks):
            if self.scoped:
                with jax.named_scope(f"blk{i}"):
                    x = block(x, mask)
            else:
                x = block(x, mask)
        return self.head(self.ln(x))


def train_step(scoped: bool):
    model = Transformer(nnx.Rngs(0), scoped)
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, tokens):
        def loss_fn(model):
            logits = model(tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    return step, (model, opt, jnp.zeros((8, SEQ), jnp.int32))


def main() -> None:
    a = attribute(*(lambda s: (s[0], *s[1]))(train_step(scoped=True)))
    by_name = {ins.name: ins for ins in a.assignment._module.instructions.values()}
    right = wrong = unnamed = 0
    named_bytes = all_bytes = 0
    for row in a.buffers.itertuples():
        ins = by_name.get(row.instruction)
        truth = [n for n in parse_op_name(ins.op_name if ins else "").names if n.startswith("blk")]
        if not truth or row.role in ("parameter", "optimizer state"):
            continue
        all_bytes += row.bytes
        if row.block is None:
            unnamed += 1
            continue
        named_bytes += row.bytes
        if row.block == f"blocks[{truth[0][3:]}]":
            right += 1
        else:
            wrong += 1
            print(f"  wrong: {row.instruction} named {row.block}, in {truth[0]}")
    total = right + wrong + unnamed
    print(f"values of the blocks: {total}; named right {right}, named wrong {wrong}, not named {unnamed}; "
          f"{named_bytes / all_bytes:.0%} of their bytes named")
    plain = attribute(*(lambda s: (s[0], *s[1]))(train_step(scoped=False)))
    sums = plain.buffers.assign(block=plain.buffers["block"].fillna("(none)")).groupby("block")["bytes"].sum()
    print("the same model without the named scopes, bytes by block:",
          ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sums.items()))


if __name__ == "__main__":
    main()
