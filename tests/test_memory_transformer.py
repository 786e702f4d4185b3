"""Memory in the user's terms for a flax.nnx transformer train step (``nnx.jit``, ``nnx.Optimizer`` with optax
adam): the peak is charged to the line whose softmax makes the (batch, heads, T, T) attention probabilities,
the graph's parameters and adam moments carry their paths, and wrapping the block in ``nnx.remat`` turns the
attention's residuals into values recomputed in the backward pass, which ``compare`` reports.

The model is built abstractly (``nnx.eval_shape``) and each step is compiled once (two compiles in all)."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from xlakit.memory import attribute, compare, peak
from xlakit.memory._hlo_frames import RECOMPUTED_SCOPE

B, T, D, HEADS, VOCAB = 8, 128, 32, 4, 64
SCORES = B * HEADS * T * T * 4  # one (batch, heads, T, T) float32 value: 2 MiB; every other value is <= 512 KiB
MIB = 2**20


class Attention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.qkv = nnx.Linear(D, 3 * D, rngs=rngs)
        self.out = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        q, k, v = jnp.split(self.qkv(x).reshape(B, T, 3 * HEADS, D // HEADS).transpose(0, 2, 1, 3), 3, axis=1)
        probs = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5, axis=-1)
        return self.out((probs @ v).transpose(0, 2, 1, 3).reshape(B, T, D))


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(D, rngs=rngs)
        self.attn = Attention(rngs)
        self.ln2 = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, 4 * D, rngs=rngs)
        self.down = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class Transformer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, remat: bool = False):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.block = Block(rngs)
        self.ln = nnx.LayerNorm(D, rngs=rngs)
        self.remat = remat

    def __call__(self, tokens):
        h = self.embed(tokens)
        h = nnx.remat(Block.__call__)(self.block, h) if self.remat else self.block(h)
        return self.embed.attend(self.ln(h))


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


SOFTMAX_LINE = _line(Attention.__call__, "jax.nn.softmax(")  # the big activation: attention probabilities
ATTN_CALL_LINE = _line(Block.__call__, "self.attn(")


@nnx.jit
def train_step(model, optimizer, tokens, targets):
    def loss(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(tokens), targets).mean()

    value, grads = nnx.value_and_grad(loss)(model)
    optimizer.update(model, grads)
    return value


def _attribution(remat: bool):
    model = nnx.eval_shape(lambda: Transformer(nnx.Rngs(0), remat))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Transformer(nnx.Rngs(0), remat), optax.adam(1e-3),
                                                     wrt=nnx.Param))
    tokens = jax.ShapeDtypeStruct((B, T), jnp.int32)
    return attribute(train_step, model, optimizer, tokens, tokens)


@pytest.fixture(scope="module")
def plain():
    return _attribution(remat=False)


@pytest.fixture(scope="module")
def remat():
    return _attribution(remat=True)


def _is_softmax_line(source: str) -> bool:
    return source.endswith(f"test_memory_transformer.py:{SOFTMAX_LINE} (Attention.__call__)")


def test_the_peak_is_charged_to_the_attention_softmax_line_and_its_call(plain):
    p = peak(plain)
    by_source = p.by("source")
    top = by_source.iloc[0]
    assert _is_softmax_line(top["group"]), by_source.head()
    # the probabilities and what their backward pass keeps: at least two (B, heads, T, T) float32 values, and
    # more than any other line holds
    assert top["bytes"] >= 2 * SCORES and top["bytes"] > 2 * by_source.iloc[1]["bytes"], by_source.head()
    layer = p.by("layer").iloc[0]["group"]
    assert layer.startswith("Attention.__call__ › jax.nn.softmax(q @ k.transpose(0, 1, 3, 2)"), p.by("layer").head()
    rows = p.buffers[p.buffers["source"] == top["group"]]
    assert (B, HEADS, T, T) in set(rows["shape"]) and "residual" in set(rows["role"])
    # the whole stack is kept: the block's attention call is the next user frame out
    stack = plain.buffers.set_index("buffer_id").loc[rows["buffer_id"].iat[0], "stack"].splitlines()
    assert stack[0].endswith(f"test_memory_transformer.py:{SOFTMAX_LINE} (Attention.__call__)"), stack
    assert any(f.endswith(f"test_memory_transformer.py:{ATTN_CALL_LINE} (Block.__call__)") for f in stack), stack
    assert p.by("role")["bytes"].sum() == p.total_bytes == plain.liveness["live_bytes"].max()
    # the 2 MiB constant XLA broadcast without metadata for the softmax line's fusions is that line's, not unknown
    assert by_source.set_index("group")["bytes"].get("unknown", 0) < 0.01 * p.total_bytes, by_source
    assert f"test_memory_transformer.py:{SOFTMAX_LINE}" in repr(p)


def test_graph_parameters_and_adam_moments_carry_their_paths_under_nnx_jit(plain):
    b = plain.buffers[plain.buffers["parameter"].notna() & plain.buffers["role"].isin(
        ["parameter", "optimizer state"])].set_index("parameter")
    kernel = b.loc["model['block']['attn']['qkv']['kernel']"]
    assert kernel["role"] == "parameter" and kernel["shape"] == (D, 3 * D) and kernel["bytes"] == D * 3 * D * 4
    for moment in ("mu", "nu"):
        row = b.loc[f"optimizer['opt_state'][0]['{moment}']['block']['attn']['qkv']['kernel']"]
        assert row["role"] == "optimizer state" and row["shape"] == (D, 3 * D)
    assert b.loc["optimizer['step']", "role"] == "optimizer state"
    assert b.loc["model['embed']['embedding']", "shape"] == (VOCAB, D)
    assert b.loc["tokens", "role"] == "parameter"
    # every entry argument is named: 15 model leaves, adam's count and 2 x 15 moments, the step, the 2 inputs
    assert len(b) == 15 + 1 + 30 + 1 + 2 and not any("states[" in p for p in b.index), sorted(b.index)[:5]
    assert (b["role"] == "optimizer state").sum() == 32
    # the results too: each new state by its graph path (they read output[0][1].states[0][103]), the loss as
    # the function's own output, and buffers that are no result under a label that says so
    outputs = set(plain.buffers["output"].dropna())
    assert "model['block']['attn']['qkv']['kernel'] (new)" in outputs and "optimizer['step'] (new)" in outputs
    assert "output" in outputs and not any("states[" in o for o in outputs), sorted(outputs)[:5]
    assert plain.by("output").iloc[0]["group"] == "(not a result of the program)"


def test_an_nnx_jit_step_given_lowered_or_compiled_is_named_as_when_given_with_its_arguments(plain):
    """A researcher's trial (2026-12-07): the same nnx.jit step passed as ``train_step.lower(...)`` or its
    ``.compile()`` (what MemoryBreakdown takes) called adam's moments "parameter", named them
    ``optimizer.states[0][2]`` and told no block apart. flax's stages keep the graph definition and the nnx.jit
    function: the names, roles and results read as with the arguments given."""
    model = nnx.eval_shape(lambda: Transformer(nnx.Rngs(0), False))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Transformer(nnx.Rngs(0), False), optax.adam(1e-3),
                                                     wrt=nnx.Param))
    tokens = jax.ShapeDtypeStruct((B, T), jnp.int32)
    lowered = train_step.lower(model, optimizer, tokens, tokens)
    want = plain.buffers[["parameter", "role", "output", "bytes"]].fillna("-").value_counts().sort_index()
    for program in (lowered, lowered.compile()):
        got = attribute(program).buffers
        assert got[["parameter", "role", "output", "bytes"]].fillna("-").value_counts().sort_index().equals(want)
        assert (got["role"] == "optimizer state").sum() == 32 and not got["parameter"].dropna().str.contains(
            "states[", regex=False).any()
    # MemoryBreakdown keeps flax's stage (it had unwrapped it into JAX's, and the names with it)
    from xlakit.widgets import MemoryBreakdown

    w = MemoryBreakdown({"step": lowered})
    shown = w.peak.attribution.buffers
    assert set(shown["parameter"].dropna()) == set(plain.buffers["parameter"].dropna()) and not w.errors
    w.close()


def test_remat_turns_the_attention_residuals_into_recomputed_values_and_compare_says_so(plain, remat):
    before, after = peak(plain), peak(remat)
    r_before = before.by("role").set_index("group").loc["residual", "bytes"]
    r_after = after.by("role").set_index("group").loc["residual", "bytes"]
    # without remat the block's activations are residuals at the peak; with it only the block's input and what
    # lies outside the block (embedding, final layer norm, logits) are kept
    assert r_before >= 2 * SCORES and r_after <= r_before / 4, (r_before, r_after)
    softmax_before = before.buffers[before.buffers["source"].map(_is_softmax_line)]
    softmax_after = after.buffers[after.buffers["source"].map(_is_softmax_line)]
    assert softmax_before.loc[softmax_before["role"] == "residual", "bytes"].sum() >= 2 * SCORES
    # no (B, heads, T, T) value is kept any more: the backward pass recomputes them (XLA may still share a
    # small forward value such as the softmax's (B, heads, T, 1) row sums with the recomputation)
    kept = softmax_after[softmax_after["role"] == "residual"]
    assert kept["bytes"].sum() <= SCORES // 64 and (B, HEADS, T, T) not in set(kept["shape"]), kept
    again = softmax_after[softmax_after["role"] == "recomputed"]
    assert again["bytes"].sum() >= 2 * SCORES and all(s.startswith(RECOMPUTED_SCOPE) for s in again["scope"])
    c = compare(before, after)
    residual = c.by("role").set_index("group").loc["residual"]
    assert residual["delta"] == r_after - r_before <= -2 * SCORES
    assert c.by("role").set_index("group").loc["recomputed", "bytes_b"] >= 2 * SCORES
    text = repr(c)
    assert f"residuals −{(r_before - r_after) / MIB:.1f} MiB (" in text, text
    assert f"test_memory_transformer.py:{SOFTMAX_LINE} (Attention.__call__)" in text, text


def test_what_nnx_jit_lowers_and_compiles_is_attributed_as_jax_s_own_program(cache):
    """``nnx.jit(f).lower(...)`` returns flax's ``Lowered`` and its ``compile()`` flax's ``Compiled``: callables
    that hold JAX's ``jax.stages`` objects; they were taken for functions given without arguments, and a cache
    compiling an ``nnx.jit`` function got flax's ``Compiled`` back where it checks for JAX's."""
    from xlakit.memory import buffer_assignment, compiled_memory

    linear = nnx.eval_shape(lambda: nnx.Linear(4, 8, rngs=nnx.Rngs(0)))
    fn = nnx.jit(lambda m, x: jnp.tanh(m(x)))
    lowered = fn.lower(linear, jax.ShapeDtypeStruct((2, 4), jnp.float32))
    compiled = lowered.compile()
    assert not isinstance(compiled, jax.stages.Compiled) and not isinstance(lowered, jax.stages.Lowered)
    for program in (lowered, compiled):
        a = attribute(program)
        assert a.buffers["shape"].map(lambda s: s == (2, 8)).any() and set(a.buffers["role"]) >= {"parameter"}
        assert peak(program).total_bytes >= (4 * 8 + 8 + 2 * 4 + 2 * 8) * 4
    assert buffer_assignment(compiled).logical_buffers and compiled_memory(compiled).argument_bytes == (
        4 * 8 + 8 + 2 * 4) * 4
    through = attribute(fn, linear, jax.ShapeDtypeStruct((2, 4), jnp.float32), cache=cache)
    assert {"m['kernel']", "m['bias']", "x"} <= set(through.buffers["parameter"].dropna())
    assert len(cache.entries()) == 1  # compiled through the cache and stored
    with pytest.raises(TypeError, match="already compiled"):
        cache.compile(compiled)  # flax's Compiled is refused like JAX's, with what to pass instead
    # MemoryBreakdown drew only totals for it and said "pass the jax.stages.Compiled", which the user had done
    from xlakit._jax.stages import jax_stage
    from xlakit.view.programs import collect_programs

    for source in (compiled, {"step": compiled}):
        programs = collect_programs(source)
        (label,) = programs.memories
        # kept as flax's stage (its nnx.jit function and graph definition name the arguments), holding JAX's
        kept = programs.programs[label]
        assert kept is compiled and isinstance(jax_stage(kept), jax.stages.Compiled) and not programs.notes.get(label)


class _Two(nnx.Module):
    def __init__(self, rngs):
        self.blocks = nnx.List([nnx.Linear(64, 64, rngs=rngs) for _ in range(2)])

    def __call__(self, x):
        for b in self.blocks:
            x = jnp.tanh(b(x))
        return x


def test_xlas_copies_of_a_blocks_parameters_belong_to_that_block():
    """A trial (2026-12-07): in an nnx.jit forward step XLA copies each parameter into the new state it returns;
    those copies had no block, and "(no block told apart)" held 10.6 of 18.1 MiB. A copy of an argument is in
    its argument's block."""
    def forward(model, x):
        return model(x)

    b = peak(nnx.jit(forward).lower(_Two(nnx.Rngs(0)), jnp.ones((8, 64)))).attribution.buffers
    copies = b[b["source"].str.startswith("XLA's copy of argument model['blocks']", na=False)]
    assert len(copies) >= 2, b[["source", "block"]]
    for source, block in zip(copies["source"], copies["block"], strict=True):
        assert block == "blocks[" + source.split("['blocks'][", 1)[1][0] + "]", (source, block)
