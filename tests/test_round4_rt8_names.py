"""Names a researcher reads in the memory views: a cell of an older IPython (``<ipython-input-7-…>``) is ``cell
[7]``, and a layer list passed as an argument of its own (``loss(blocks, x)``: paths ``blocks[0].w1``) names its
blocks as a nested one does, while JAX's ``args[0]`` / ``output[0]`` are no layer lists."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from xlakit._sources import display_file
from xlakit.memory import attribute
from xlakit.memory._blocks import block_of_path


def test_an_old_ipython_cell_keeps_its_execution_count():
    assert display_file("<ipython-input-7-abcdef0123>") == "cell [7]"
    assert display_file("<ipython-input-odd>") == "cell [?]"


def test_paths_of_a_layer_list_argument_name_blocks():
    assert block_of_path("blocks[2].w1") == "blocks[2]"
    assert block_of_path("args[0]['w']") is None and block_of_path("output[1]") is None
    assert block_of_path("model['blocks'][2]['up']") == "blocks[2]"


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w1", "w2"], meta_fields=[])
@dataclasses.dataclass
class _Block:
    w1: jax.Array
    w2: jax.Array


def test_a_layer_list_argument_names_the_blocks_of_its_activations():
    widths = (96, 160)
    blocks = [_Block(jnp.full((32, h), 0.01), jnp.full((h, 32), 0.01)) for h in widths]

    def loss(blocks, x):
        for b in blocks:
            x = x + jnp.tanh(x @ b.w1) @ b.w2
        return (x ** 2).mean()

    frame = attribute(jax.jit(jax.grad(loss)), blocks, jnp.ones((64, 32))).buffers
    hidden = frame[frame["shape"].apply(lambda s: len(s) == 2 and s[0] == 64 and s[1] in widths)]
    named = hidden[hidden["block"].notna()]
    assert len(named) >= 2, hidden[["shape", "block"]]
    assert all(b == f"blocks[{widths.index(s[1])}]" for s, b in zip(named["shape"], named["block"], strict=True))
