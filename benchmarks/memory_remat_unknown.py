"""How much of a rematerialised train step's peak ``xlakit.memory.peak()`` cannot attribute, and how much it calls
recomputed: a 3-layer MLP, batch 256, one train step of ``jax.grad``, with no remat, ``jax.checkpoint`` under
``nothing_saveable`` and under ``dots_saveable``, in three styles (plain JAX and flax.linen ``nn.remat`` with
SGD, flax.nnx with adam), on CPU.

Per variant, at the peak step (bytes charged there, shared bytes once; they sum to the peak): bytes with an
unknown source (no stack frame), an unknown scope (no op name), and bytes of the role ``recomputed``
(values JAX recomputes in the backward pass, name stack ``.../rematted_computation/...``), and the peak's bytes
per role; then the same over every logical buffer of the program (bytes of each buffer, not only the peak's).
Compile-only (abstract arguments); one process, about 20 s on 2 CPU cores.

Run: ``PYTHONPATH=. python benchmarks/memory_remat_unknown.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

F32 = jnp.float32
BATCH, D_IN, WIDTH, LAYERS = 256, 784, 512, 3
POLICIES = {"no remat": None, "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
            "dots_saveable": jax.checkpoint_policies.dots_saveable}


def _sgd(loss, params, x, y):
    def step(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return jax.tree.map(lambda a, g: a - 0.1 * g, p, grads), value

    return jax.jit(step), (params, x, y)


def plain_jax(policy):
    """``relu(x @ w + b)`` three times then a linear read-out; ``jax.checkpoint`` around the forward pass."""
    def forward(p, x):
        for i in range(LAYERS):
            x = jax.nn.relu(x @ p[f"w{i}"] + p[f"b{i}"])
        return x @ p["out"]

    if policy is not None:
        forward = jax.checkpoint(forward, policy=policy)
    sizes = [D_IN] + [WIDTH] * LAYERS
    params = {f"w{i}": jax.ShapeDtypeStruct((sizes[i], WIDTH), F32) for i in range(LAYERS)}
    params |= {f"b{i}": jax.ShapeDtypeStruct((WIDTH,), F32) for i in range(LAYERS)}
    params["out"] = jax.ShapeDtypeStruct((WIDTH, 10), F32)
    return _sgd(lambda p, x, y: ((forward(p, x) - y) ** 2).mean(), params,
                jax.ShapeDtypeStruct((BATCH, D_IN), F32), jax.ShapeDtypeStruct((BATCH, 10), F32))


def flax_linen(policy):
    """flax.linen ``Dense`` layers, each wrapped in ``nn.remat(nn.Dense, policy=...)``."""
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            dense = nn.Dense if policy is None else nn.remat(nn.Dense, policy=policy)
            for _ in range(LAYERS):
                x = nn.relu(dense(WIDTH)(x))
            return nn.Dense(10)(x)

    model = MLP()
    x = jax.ShapeDtypeStruct((BATCH, D_IN), F32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    return _sgd(lambda p, x, y: ((model.apply(p, x) - y) ** 2).mean(), params, x,
                jax.ShapeDtypeStruct((BATCH, 10), F32))


def flax_nnx(policy):
    """flax.nnx, activation-bound: ``Linear(16, 2048)``, relu, averaged down to 64, ``Linear(64, 64)``, relu,
    ``Linear(64, 10)`` and one adam step, so the peak falls inside the backward pass (the other two peak at
    the update); ``jax.checkpoint`` around the model call, as a user does around ``nnx.merge(...)(x)``."""
    import optax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.wide = nnx.Linear(16, 2048, rngs=rngs)
            self.mid = nnx.Linear(64, 64, rngs=rngs)
            self.out = nnx.Linear(64, 10, rngs=rngs)

        def __call__(self, x):
            h = nnx.relu(self.wide(x))
            h = nnx.relu(self.mid(h.reshape(h.shape[0], 32, -1).mean(axis=1)))
            return self.out(h)

    graphdef, state = nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))), nnx.Param)
    params, opt = nnx.to_pure_dict(state), optax.adam(1e-3)

    def forward(p, x):
        st = jax.tree.map(lambda v: v, state)
        nnx.replace_by_pure_dict(st, p)
        return nnx.merge(graphdef, st)(x)

    if policy is not None:
        forward = jax.checkpoint(forward, policy=policy)

    def step(p, opt_state, x, y):
        value, grads = jax.value_and_grad(lambda q: ((forward(q, x) - y) ** 2).mean())(p)
        updates, opt_state = opt.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, value

    return jax.jit(step), (params, jax.eval_shape(opt.init, params), jax.ShapeDtypeStruct((BATCH, 16), F32),
                           jax.ShapeDtypeStruct((BATCH, 10), F32))


def main() -> None:
    from xlakit.memory import peak

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {LAYERS}-layer MLP {D_IN}->{WIDTH}, batch {BATCH}")
    head = (f"{'model':11}{'remat':18}{'peak MiB':>9}{'src unknown':>13}{'scope unknown':>14}{'recomputed':>12}"
            f"   | all buffers: {'src unknown':>11}{'recomputed':>11}{'total MiB':>10}")
    print(head)
    for build in (plain_jax, flax_linen, flax_nnx):
        for label, policy in POLICIES.items():
            fn, args = build(policy)
            p = peak(fn, *args)
            b, every = p.buffers, p.attribution.buffers

            def share(frame, mask, total):
                return f"{100 * frame.loc[mask, 'bytes'].sum() / max(total, 1):.2f} %"

            total_all = int(every["bytes"].sum())
            print(f"{build.__name__:11}{label:18}{p.total_bytes / 2**20:9.2f}"
                  f"{share(b, b['source'] == 'unknown', p.total_bytes):>13}"
                  f"{share(b, b['scope'] == 'unknown', p.total_bytes):>14}"
                  f"{share(b, b['role'] == 'recomputed', p.total_bytes):>12}"
                  f"   |              {share(every, every['source'] == 'unknown', total_all):>11}"
                  f"{share(every, every['role'] == 'recomputed', total_all):>11}{total_all / 2**20:10.2f}")
            split = ", ".join(f"{g} {v / 2**20:.2f}" for g, v in zip(p.by("role")["group"], p.by("role")["bytes"],
                                                                      strict=True) if v >= 2**10)
            print(f"{'':29}at the peak ({p.where}), MiB: {split}")


if __name__ == "__main__":
    main()
