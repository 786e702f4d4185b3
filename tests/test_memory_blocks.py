"""Blocks told apart: four flax.nnx blocks called in a Python loop have the same op names and stack frames, so
their values merged into one "layer"; the parameters each value is made from name its block (``blocks[2]``).

The answer is checked against the name stack of the same model traced with each block under
``jax.named_scope`` (the rule never reads the name stack): every block named is the right one (45 of 137
values, 78 % of their bytes; the seams between blocks are left unnamed). A scan over stacked layers keeps one
buffer for all iterations: it says so."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from xlakit.memory import attribute, checkpoint_each, compare, peak
from xlakit.memory._blocks import block_of_path
from xlakit.memory._hlo_frames import parse_op_name

D, LAYERS = 32, 4


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.ln = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, 4 * D, rngs=rngs)
        self.down = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x):
        return x + self.down(nnx.gelu(self.up(self.ln(x))))


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, scoped: bool):
        self.blocks = nnx.List([Block(rngs) for _ in range(LAYERS)])
        self.scoped = scoped

    def __call__(self, x):
        for i, block in enumerate(self.blocks):
            if self.scoped:
                with jax.named_scope(f"truth{i}"):
                    x = block(x)
            else:
                x = block(x)
        return x


def _grad_step(scoped: bool):
    model = nnx.eval_shape(lambda: Model(nnx.Rngs(0), scoped))
    graphdef, state = nnx.split(model)

    def loss(state, x):
        return (nnx.merge(graphdef, state)(x) ** 2).mean()

    return jax.jit(jax.grad(loss)), (state, jax.ShapeDtypeStruct((64, 16, D), jnp.float32))


def test_block_of_a_parameter_path():
    assert block_of_path("model['blocks'][2]['up']['kernel']") == "blocks[2]"
    assert block_of_path("opt['opt_state'][0]['mu']['blocks'][1]['ln']['scale']") == "blocks[1]"
    assert block_of_path("params['stages'][1]['blocks'][0]['w']") == "stages[1]/blocks[0]"
    assert block_of_path("params['head']['kernel']") is None and block_of_path(None) is None


@pytest.fixture(scope="module")
def scoped():
    step, args = _grad_step(scoped=True)
    return attribute(step, *args)


def test_four_blocks_in_a_loop_are_four_layers_each_named_right(scoped):
    b = scoped.buffers
    mod = scoped.assignment._module
    by_name = {ins.name: ins for ins in mod.instructions.values()}
    checked = named = 0
    for row in b[b["role"] != "parameter"].itertuples():
        ins = by_name.get(row.instruction)
        truth = [n for n in parse_op_name(ins.op_name if ins else "").names if n.startswith("truth")]
        if not truth:
            continue
        checked += 1
        if row.block is not None:
            named += 1
            assert row.block == f"blocks[{truth[0][5:]}]", (row.instruction, row.block, truth)
            assert row.layer.startswith(f"{row.block} › Block.__call__")
    # a value at the seam of two blocks (a layer norm's mean before the block's first parameter) gets none
    assert checked >= 100 and named >= 40, (named, checked)
    # the parameters carry their block from their path; by layer, the same call of each block is its own row
    params = b[b["role"] == "parameter"]
    assert set(params["block"]) == {f"blocks[{i}]" for i in range(LAYERS)} | {None}, params["block"]
    assert all(f"['blocks'][{blk[7]}]" in path for path, blk in zip(params["parameter"], params["block"], strict=True)
               if blk), params[["parameter", "block"]]
    layers = set(peak(scoped).by("layer")["group"])
    assert {f"blocks[{i}] › Block.__call__ › self.up(self.ln(x))" for i in range(LAYERS)} <= layers, layers


def test_a_scan_over_stacked_layers_says_its_buffer_holds_every_iteration():
    def layer(x, w):
        return jnp.tanh(x @ w), None

    def loss(ws, x):
        return jax.lax.scan(layer, x, ws)[0].sum()

    p = peak(jax.jit(jax.grad(loss)), jax.ShapeDtypeStruct((6, 64, 64), jnp.float32),
             jax.ShapeDtypeStruct((256, 64), jnp.float32))
    stacked = p.buffers[p.buffers["block"] == "all 6 iterations (stacked)"]
    assert len(stacked) and (stacked["shape"].map(lambda s: s[0]) == 6).all() and "residual" in set(stacked["role"])
    assert all(layer.startswith("all 6 iterations (stacked) › ") for layer in stacked["layer"])


def test_compare_says_why_per_block_remat_and_donation_left_the_peak_where_it_was():
    """Seen on a 4-block flax.nnx transformer in JupyterLab: ``checkpoint_each(loss, Block)`` turned 70 MiB of
    residuals into recomputed values and the peak stayed put, yet compare advised checkpointing each block; with
    donation the peak rose and the notebook's table did not mention donation at all. XLA:CPU schedules the
    four blocks' recomputations together (here too), so compare names the blocks and the loop that avoids it;
    donation is explained by when its results are made, and the footprint it did lower is shown."""
    model = nnx.eval_shape(lambda: Model(nnx.Rngs(0), False))
    graphdef, state = nnx.split(model)

    def loss(state, x):
        return (nnx.merge(graphdef, state)(x) ** 2).mean()

    x = jax.ShapeDtypeStruct((64, 16, D), jnp.float32)
    plain = peak(jax.jit(jax.grad(loss)), state, x)
    each = compare(plain, peak(jax.jit(jax.grad(checkpoint_each(loss, Block))), state, x))
    assert each.peak_delta >= 0, each  # if XLA ever stops hoisting the recomputations, this test must change
    assert "recomputes the checkpointed values of blocks[0], blocks[1], blocks[2], blocks[3] before" in each.why
    assert "jax.lax.scan (nnx.scan)" in each.why and each.why in repr(each)

    def sgd(state, x):
        return jax.tree.map(lambda p, g: p - 0.1 * g, state, jax.grad(loss)(state, x))

    donated = compare(peak(jax.jit(sgd), state, x), peak(jax.jit(sgd, donate_argnums=0), state, x))
    saved = int(donated.b.attribution.donations["bytes"].sum())
    assert saved > 0 and donated.peak_delta >= 0 and donated.footprint_b < donated.footprint_a, donated
    assert donated.why.startswith(f"Donation reuses {saved / 2**10:.1f} KiB: results are written into their "
                                  "arguments' bytes; one run occupies"), donated.why
    assert "none of them exists at the first program's peak" in donated.why
    html = donated._repr_html_()
    assert "footprint (what one run occupies)" in html and "donation</td>" in html
    assert "aliased, 16.0 KiB reused" in html


def test_only_entries_of_a_layer_list_are_blocks():
    """JupyterLab trial (round four): the input batch ``(x, y)`` led layers as blocks ``batch[0]`` / ``batch[1]``,
    and so did optax's state tuple (``state[0]``) and one-element lists. A block is an entry of a container with at
    least two entries of the same structure (paths below the index; an array entry's shape)."""
    import jax
    import jax.numpy as jnp

    from xlakit.memory import attribute
    from xlakit.memory._blocks import layer_blocks

    assert layer_blocks([("batch[0]", (8, 16)), ("batch[1]", (8, 4)), ("one[0]['w']", (3,)),
                         ("params[0]['w']", (16, 32)), ("params[0]['b']", (32,)), ("params[1]['w']", (32, 32)),
                         ("params[1]['b']", (32,))]) == {"params[0]", "params[1]"}
    assert layer_blocks([("ws[0]", (8, 8)), ("ws[1]", (8, 8)), ("ws[2]", (8, 4))]) == {"ws[0]", "ws[1]"}

    params = [{"w": jnp.full((16, 16), 0.1), "b": jnp.zeros(16)} for _ in range(3)]
    batch = (jnp.ones((8, 16)), jnp.ones((8, 1)))  # (a batch of equal shapes would read as a list: said in the doc)

    def loss(params, batch):
        x = batch[0]
        for layer in params:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return ((x - batch[1]) ** 2).sum()

    b = attribute(jax.jit(jax.grad(loss)), params, batch).buffers
    blocks = set(b["block"].dropna())
    assert blocks and blocks <= {"params[0]", "params[1]", "params[2]"}, blocks  # batch[i] before
    assert not b["layer"].astype(str).str.startswith("batch[").any()
