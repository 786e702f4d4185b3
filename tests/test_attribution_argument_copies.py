"""A copy XLA inserts of an argument (copy insertion: no metadata, no line of the user's code) is named by the
argument it copies, not left "unknown" (JupyterLab trial, round four: a donated step's 4 MiB copy had no source).
For a donated argument the words say why XLA copies it: a result is written into its buffer while its value is
still read."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import xlakit.memory as xm


def _step(p, x):
    new = {k: v - 0.1 * jnp.tanh(x @ v) for k, v in p.items()}
    return new, sum((p[k] * new[k]).sum() for k in p)  # the old p is read after the new one is made


def test_a_donated_arguments_copy_names_the_argument_and_why():
    p = {"u": jnp.ones((64, 64)), "w": jnp.ones((64, 64))}
    attribution = xm.attribute(jax.jit(_step, donate_argnums=0), p, jnp.ones((64, 64)))
    b = attribution.buffers
    copies = b[b["instruction"].astype(str).str.startswith("copy")]
    line = _step.__code__.co_firstlineno + 2  # the line that reads the old p after the new one is made
    sources = sorted(copies["source"])
    for k, source in zip("uw", sources, strict=True):
        assert source.startswith(f"XLA's copy of donated p['{k}'], read last at ") and source.endswith(
            f"test_attribution_argument_copies.py:{line} (_step.<locals>.<genexpr>)"), source
    assert set(copies["line"]) == {line}  # the layer and line are that reader's: what holds the copy
    assert set(copies["scope"]) == {"made by XLA › copy of a donated argument, kept apart from the result "
                                    "written into its buffer"}
    assert set(copies["bytes"]) == {64 * 64 * 4}
    assert "unknown" not in set(b.loc[b["bytes"] == 64 * 64 * 4, "source"])


def test_a_donated_arguments_copy_when_its_buffer_takes_another_result():
    def f(*xs):
        return [x + 1 for x in xs[::2]]

    xs = tuple(jnp.full((2,), float(i)) for i in range(12))
    b = xm.attribute(jax.jit(f, donate_argnums=(0, 3, 6, 9)), *xs).buffers
    copied = set(b.loc[b["scope"].str.startswith("made by XLA › copy of a"), "source"])
    # XLA copies xs[6] (donated: its buffer takes another result while xs[6] + 1 still reads it)
    (source,) = copied
    assert source.startswith("XLA's copy of donated xs[6], read last at ") and \
        "test_attribution_argument_copies.py:" in source


def test_a_kept_arguments_copy_claims_no_donation():
    b = xm.attribute(jax.jit(lambda x: (x, x + 1)), jnp.ones(16)).buffers
    copy = b[b["instruction"] == "copy"].iloc[0]  # XLA copies x into the first result
    assert (copy["role"], copy["source"]) == ("output", "XLA's copy of argument x")


def test_groups_of_no_bytes_at_the_peak_are_left_out_of_its_tables_and_said_once():
    """A buffer sharing bytes charged to another one holds 0 B at the peak; its group read "0 B" in ``by()``
    (JupyterLab trial: a copy's 0 B row beside the copies). The rows leave it out, a note says so, ``.raw`` keeps
    it and the bytes still sum to the peak."""
    sizes = [64, 128, 128, 10]
    params = [{"w": jnp.full((a, b), 0.01), "b": jnp.zeros(b)} for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    batch = (jnp.ones((16, 64)), jnp.ones((16, 10)))

    def step(params, batch):
        def loss(params):
            x = batch[0]
            for layer in params:
                x = jnp.tanh(x @ layer["w"] + layer["b"])
            return ((x - batch[1]) ** 2).mean()

        value, grads = jax.value_and_grad(loss)(params)
        new = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        pairs = zip(jax.tree.leaves(new), jax.tree.leaves(params), strict=True)
        return new, value + sum(jnp.sum((a - b) ** 2) for a, b in pairs)

    p = xm.peak(jax.jit(step, donate_argnums=0), params, batch)
    for column in ("source", "layer", "role"):
        table = p.by(column)
        zero = int((table.raw["bytes"] == 0).sum()) if "bytes" in table.raw.columns else 0
        assert (table["bytes"] > 0).all() and int(table["bytes"].sum()) == p.total_bytes
        said = [n for n in table.notes if "of 0 B left out" in n]
        assert len(said) == (1 if zero else 0), (column, table.notes, zero)
        names = [str(g) for g in table.raw.loc[table.raw["bytes"] == 0, "group"]]
        assert not said or any(name in said[0] for name in names), (said, names)  # the groups left out, named
        assert zero or column == "role"  # XLA:CPU (jaxlib 0.10.2) shares a copy's bytes here: the case is met


def test_a_copy_read_last_by_its_own_update_says_so_rather_than_blame_the_update_line():
    """JupyterLab trial: with no later read of the parameters, XLA:CPU (jaxlib 0.10.2) still copies some donated
    weights, and the copy's last reader is the SGD update writing into that very buffer. The source said "read last
    at" the update's line as if it were the user's to change; it now says the update is the argument's own
    (``input_output_alias``), and compare says no later read of the user's holds it."""
    sizes = [64, 128, 128, 10]
    params = {f"l{i}": {"w": jnp.full((a, b), 0.01), "b": jnp.zeros(b)}
              for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))}
    batch = (jnp.ones((32, 64)), jnp.ones((32, 10)))

    def loss(params, batch):
        x = batch[0]
        for layer in params.values():
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return ((x - batch[1]) ** 2).mean()

    def step(params, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

    donated = xm.peak(jax.jit(step, donate_argnums=0), params, batch)
    b = donated.attribution.buffers
    own = b.loc[b["source"].str.contains("read last by its own update at", regex=False), "source"]
    assert len(own) >= 1  # XLA:CPU copies here (if it stops, this test must change)
    update_line = step.__code__.co_firstlineno + 2
    assert all(s.startswith("XLA's copy of donated params[") and f":{update_line} (" in s for s in own), list(own)
    why = xm.compare(xm.peak(jax.jit(step), params, batch), donated).why
    assert "by their own updates at" in why and "no later read of yours" in why, why


def test_a_copy_into_another_layout_claims_no_donation_story():
    """A ``copy`` of an argument whose ShapeProto differs from the argument's (same dims and type, so another
    layout: how an accelerator compiler may lay a weight out for its matmul unit) is no interference copy: it is
    named for the layout, whether or not the argument was donated. XLA:CPU made no such copy in the programs tried
    (a transpose there is a bitcast of the argument's layout), so the instructions here are stand-ins holding
    two ShapeProto encodings: f32[64,32] with layouts {1,0} and {0,1}."""
    import types

    from xlakit.memory._proto import Message
    from xlakit.memory._speaking import copied_argument

    row_major = bytes([0x10, 0x0B, 0x18, 0x40, 0x18, 0x20, 0x2A, 0x04, 0x0A, 0x02, 0x01, 0x00])
    column_major = bytes([0x10, 0x0B, 0x18, 0x40, 0x18, 0x20, 0x2A, 0x04, 0x0A, 0x02, 0x00, 0x01])
    param = types.SimpleNamespace(opcode="parameter", op_name="w", shape=Message(row_major, lazy=True))
    mod = types.SimpleNamespace(instructions={1: param})
    leaf = types.SimpleNamespace(graph=False, path="w", index=0)
    for shape, expected in ((row_major, "XLA's copy of donated w{}"),
                            (column_major, "XLA's copy of argument w in another layout{}")):
        copy = types.SimpleNamespace(opcode="copy", operands=(1,), shape=Message(shape, lazy=True))
        source, scope, num = copied_argument(copy, {1: 0}, {0: leaf}, mod, [True])
        assert (source, num) == (expected, 0), source
        assert ("layout" in scope) == (shape is column_major)
