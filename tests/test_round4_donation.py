"""Donation read from XLA's own record of it: which argument became which result comes from the compiled
module's ``input_output_alias``, the bytes from the argument's allocation, so ``Attribution.donations`` adds up
to ``memory_analysis().alias_size_in_bytes`` also where the result has no buffer of its own (an argument returned
as it was passed) or is a loop's carry (fori_loop, while_loop, scan), and ``compare`` says what XLA did."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import pytest

from xlakit.memory import attribute, compare, peak
from xlakit.memory._display import fmt_bytes
from xlakit.memory._xla_fields import _F

A = jax.ShapeDtypeStruct((256, 256), jnp.float32)  # 256 KiB
V = jax.ShapeDtypeStruct((128,), jnp.float32)  # 512 B
_ALIAS = re.compile(r"\{([\d,]*)\}: \((\d+), \{([\d,]*)\}, [a-z-]+\)")


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Some donated buffers were not usable")
        return fn(*args)


def _xla(f, *args) -> tuple[int, set[tuple[tuple[int, ...], int]]]:
    """XLA's alias_size_in_bytes and its alias entries (output index, parameter number), from the compiled
    module's own text: a reading independent of xlakit's decoder."""
    compiled = _quiet(lambda: f.lower(*args).compile())
    head = compiled.as_text().splitlines()[0]
    found = re.search(r"input_output_alias=\{(.*?)\}, entry", head)
    entries = {(tuple(int(i) for i in m.group(1).split(",") if i), int(m.group(2)))
               for m in _ALIAS.finditer(found.group(1))} if found else set()
    return compiled.memory_analysis().alias_size_in_bytes, entries


def _pairs(d) -> list[tuple[object, object, int]]:
    return sorted((r.argument, r.output, int(r.bytes)) for r in d.itertuples())


def test_the_alias_fields_match_the_descriptor_in_the_installed_jaxlib():
    from test_memory_proto import _embedded_descriptor, _message_fields

    descriptor = _embedded_descriptor(b"xla/service/hlo.proto")
    if descriptor is None:
        pytest.skip("this jaxlib does not embed the hlo.proto descriptor where expected")
    msgs: dict[str, dict[str, int]] = {}
    for number, value in descriptor:
        if number == 4:
            _message_fields(value, "", msgs)
    assert msgs["HloModuleProto"]["input_output_alias"] == _F.MOD_INPUT_OUTPUT_ALIAS
    assert msgs["HloInputOutputAliasProto"]["entries"] == _F.IOA_ENTRIES
    entry = msgs["HloInputOutputAliasProto.AliasEntryProto"]
    assert (entry["output_shape_index"], entry["parameter_number"], entry["parameter_shape_index"]) == (
        _F.IOA_OUTPUT_INDEX, _F.IOA_PARAMETER, _F.IOA_PARAMETER_INDEX)


def _fori(p):
    return jax.lax.fori_loop(0, 3, lambda i, c: c * 0.9 + 1.0, p)


def _while(p):
    return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, p))[1]


def _scan(p):
    return jax.lax.scan(lambda c, _: (c * 2.0, None), p, None, length=3)[0]


@pytest.mark.parametrize("loop", [_fori, _while, _scan], ids=["fori_loop", "while_loop", "scan"])
def test_a_donated_loop_carry_is_aliased_to_the_result(loop):
    """The result is the loop's carry (a get-tuple-element of the while): no buffer of its own at the root."""
    donated = jax.jit(loop, donate_argnums=0)
    alias, entries = _xla(donated, A)
    assert alias == 256 * 1024 and entries == {((), 0)}
    att = attribute(donated, A)
    assert _pairs(att.donations) == [("p", "output", alias)]
    assert att.donations["reason"].isna().all()
    args = att.buffers[att.buffers["role"] == "parameter"].set_index("parameter")
    assert args.loc["p", "output"] == "output"  # the argument's row names the result it became
    c = compare(peak(jax.jit(loop), A), peak(donated, A))
    text = repr(c)
    assert "donation: p → output aliased, 256.0 KiB reused" in text, text
    assert "not reused" not in text and c.peak_delta == -alias  # the sentence and the numbers agree


def _pass_through(state, x):
    return state, x + 1.0


def test_an_argument_returned_as_it_was_passed_is_aliased():
    """``state`` comes back unchanged: the result's bytes are the argument's, with no buffer of their own."""
    f = jax.jit(_pass_through, donate_argnums=0)
    state = {"frozen": A}
    alias, entries = _xla(f, state, V)
    assert alias == 256 * 1024 and entries == {((0,), 0)}
    d = attribute(f, state, V).donations
    assert _pairs(d) == [("state['frozen']", "output[0]['frozen']", alias)]

    ident = jax.jit(lambda p: p, donate_argnums=0)
    alias, entries = _xla(ident, A)
    assert _pairs(attribute(ident, A).donations) == [("p", "output", alias)] and entries == {((), 0)}
    text = compare(peak(jax.jit(lambda p: p), A), peak(ident, A)).summary()
    assert "donation: p → output aliased, 256.0 KiB reused" in text and "not reused" not in text, text


def _partial(s):
    return {"w": s["w"] * 2.0, "b": s["b"]}, s["c"].sum()


def test_a_result_written_into_another_leaf_of_its_size_and_the_leaf_left_over():
    """s (b, c, w in flat order) is donated; results (b, w, scalar). XLA writes ``b`` back into ``s['b']`` and the
    new ``w`` into the bytes of ``s['c']`` (same size, read before); ``s['w']`` is left with no result free."""
    f = jax.jit(_partial, donate_argnums=0)
    s = {"w": A, "b": V, "c": A}
    alias, entries = _xla(f, s)
    leaves = ["s['b']", "s['c']", "s['w']"]  # parameter numbers: flat order
    outputs = ["output[0]['b']", "output[0]['w']", "output[1]"]
    expected = sorted((leaves[n], outputs[k[0]], 512 if leaves[n] == "s['b']" else 256 * 1024) for k, n in entries)
    d = _quiet(attribute, f, s).donations
    assert len(entries) == 2 and int(d["bytes"].sum()) == alias == 256 * 1024 + 512
    assert _pairs(d[d["output"].notna()]) == expected
    left = d[d["output"].isna()].set_index("argument")
    assert list(left.index) == [next(a for a in leaves if a not in {e[0] for e in expected})]
    assert left["reason"].iat[0] == "each result the size of float32[256,256] took another argument's bytes"

    plain = peak(jax.jit(_partial), s)
    c = compare(plain, _quiet(peak, f, s))
    text = repr(c)
    assert f"donated but not reused: {left.index[0]} (each result the size of float32[256,256] took" in text
    # XLA paid for the aliasing with copies at the peak: the why says that, with the peak's own numbers
    ta, tb = c._role_delta("temporary")
    assert tb > ta, "if XLA stops copying here, this test must change"
    assert f"Donation reuses {fmt_bytes(alias)}" in c.why and "comes before those results are made" not in c.why
    assert f"The peak rose by {fmt_bytes(c.peak_delta)}: it holds {fmt_bytes(tb - ta)} ({tb - ta:,} B) more of " \
        "temporaries: copies XLA makes of arguments +" in c.why, c.why
    # the parts add up, exactly, and the line that keeps the copy is named (the new w is written into s['c'] while
    # s['c'].sum() still reads it)
    copies, other = c._copies(c.b) - c._copies(c.a), tb - ta - (c._copies(c.b) - c._copies(c.a))
    assert f"copies XLA makes of arguments +{fmt_bytes(copies)} ({copies:+,} B), other temporaries " \
        f"+{fmt_bytes(other)} ({other:+,} B)" in c.why, c.why
    assert f"test_round4_donation.py:{_partial.__code__.co_firstlineno + 1} (_partial)" in c.why, c.why
    # every result XLA wrote into a donated argument already exists at the plain program's peak: no timing story
    assert c._role_delta("output")[0] >= alias and "comes before" not in c.why


def test_a_donated_argument_xla_could_not_reuse_says_why():
    mismatch = jax.jit(lambda a: a[0] * 2.0, donate_argnums=0)
    alias, entries = _xla(mismatch, A)
    assert alias == 0 and not entries
    d = _quiet(attribute, mismatch, A).donations
    assert _pairs(d) == [("a", None, 0)] and d["reason"].iat[0] == "no result the size of float32[256,256]"
    text = compare(peak(jax.jit(lambda a: a[0] * 2.0), A), _quiet(peak, mismatch, A)).summary()
    assert text.endswith("donated but not reused: a (no result the size of float32[256,256])"), text

    unused = jax.jit(lambda a, b: b * 2.0, donate_argnums=0)  # JAX leaves the unread argument out
    d = attribute(unused, A, A).donations
    assert _pairs(d) == [("a", None, 0)] and d["reason"].iat[0] == "the program does not read it: JAX left it out"


def test_donate_argnames_and_a_scalar():
    f = jax.jit(lambda x, y, i: (x + 1.0, y, i + 1), donate_argnames=("x", "i"))
    i = jax.ShapeDtypeStruct((), jnp.int32)
    alias, entries = _xla(f, A, V, i)
    d = attribute(f, A, V, i).donations
    assert _pairs(d) == [("i", "output[2]", 4), ("x", "output[0]", 256 * 1024)] and int(d["bytes"].sum()) == alias


def test_remat_gradient_step_donated():
    def step(p, x):
        g = jax.grad(lambda p: jax.checkpoint(lambda p: jnp.sin(p @ x).sum())(p))(p)
        return p - 0.1 * g

    f = jax.jit(step, donate_argnums=0)
    alias, entries = _xla(f, A, A)
    d = attribute(f, A, A).donations
    assert alias == 256 * 1024 and _pairs(d) == [("p", "output", alias)]


def test_an_optimizer_state_donated_whole_adds_up_to_xla():
    optax = pytest.importorskip("optax")
    params = {"w": jax.ShapeDtypeStruct((64, 64), jnp.float32), "b": jax.ShapeDtypeStruct((64,), jnp.float32)}
    tx = optax.adam(1e-3)
    state = jax.eval_shape(tx.init, params)

    def step(p, s, x):
        g = jax.grad(lambda p: (x @ p["w"] + p["b"]).sum())(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    f = jax.jit(step, donate_argnums=(0, 1))
    x = jax.ShapeDtypeStruct((4, 64), jnp.float32)
    alias, entries = _xla(f, params, state, x)
    d = attribute(f, params, state, x).donations
    assert len(d) == len(entries) == 7 and d["output"].notna().all() and int(d["bytes"].sum()) == alias
    d = d.set_index("argument")
    assert d.loc["p['w']", "output"] == "output[0]['w']" and d.loc["s[0].mu['w']", "output"] == "output[1][0].mu['w']"


def test_a_loops_result_is_an_output_or_aliased_and_its_counter_is_not():
    """The program returns an element of the while's tuple (``get-tuple-element(while), index=1``): that buffer,
    in the live-out allocation, is the output (aliased when the argument was donated), while the loop's counter
    and tuple stay temporaries with no output named — before, every buffer of the loop read "temporary"."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    def body(i, p):
        return p * 1.01 + 1.0

    for donate, role in ((True, "aliased"), (False, "output")):
        f = jax.jit(lambda p: jax.lax.fori_loop(0, 3, body, p), donate_argnums=0 if donate else ())
        b = memory.attribute(f, jnp.ones((256, 256))).buffers
        loop = b[b["opcode"] == "while"]
        big = loop[loop["bytes"] == 256 * 256 * 4]
        assert big["role"].tolist() == [role] and big["output"].tolist() == ["output"]
        small = loop[loop["bytes"] < 256 * 256 * 4]
        assert len(small) >= 1 and set(small["role"]) == {"temporary"} and small["output"].isna().all()


def test_a_small_loop_xla_cpu_wraps_in_a_call_returns_an_output():
    """XLA:CPU wraps a while with a small carry in a call (xla_cpu_small_call): the program's only result, in
    the live-out allocation, read as a temporary with no output named."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    f = jax.jit(lambda x: jax.lax.fori_loop(0, 5, lambda i, c: c * 1.5 + 1.0, x))
    b = memory.attribute(f, jnp.ones(64)).buffers
    out = b[b["role"] == "output"]  # the loop's values in the live-out allocation: its bytes, counted once
    assert len(out) >= 1 and set(out["bytes"]) == {256} and out["allocation"].nunique() == 1
    assert set(out["output"]) == {"output"}


def test_a_scan_returning_carry_and_stacked_values_names_each_after_its_output():
    """A scan's carry and its stacked ys are elements of one while tuple, returned through get-tuple-element
    (index 1 and 2): each buffer is named by the tuple index, not by whichever result reached the while first
    (the ys read output[0] before)."""
    import jax
    import jax.numpy as jnp

    from xlakit import memory

    def f(x):
        def body(c, xi):
            c = c + xi.sum()
            return c, jnp.tanh(xi * c)
        return jax.lax.scan(body, 0.0, x)

    b = memory.attribute(jax.jit(f), jnp.ones((8, 64, 32))).buffers
    loop = b[b["opcode"] == "while"]
    named = {(tuple(s), o) for s, o in zip(loop["shape"], loop["output"], strict=True) if isinstance(o, str)}
    assert named == {((), "output[0]"), ((8, 64, 32), "output[1]")}
    counter = loop[loop["dtype"] == "int32"]
    assert counter["output"].isna().all() and set(counter["role"]) == {"temporary"}


def test_donation_that_xla_undoes_with_a_copy_is_not_called_a_saving():
    """A donated argument whose result cannot be written in place (a transpose) is reused, but XLA holds a copy of
    it among the temporaries: the footprint is the same (XLA's figures: alias 4 MiB, temporaries +4 MiB), so the
    comparison says the bytes were reused and nothing saved, not "4.0 MiB saved" (a red team's finding)."""
    a = jnp.ones((512, 512))
    plain = jax.jit(lambda a: a.T).lower(a).compile().memory_analysis()
    donated = jax.jit(lambda a: a.T, donate_argnums=0).lower(a).compile().memory_analysis()
    footprint = [m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
                 for m in (plain, donated)]
    assert donated.alias_size_in_bytes == 1 << 20 and footprint[0] == footprint[1]  # XLA: nothing saved
    c = compare(peak(jax.jit(lambda a: a.T), a), peak(jax.jit(lambda a: a.T, donate_argnums=0), a))
    assert "1.0 MiB reused (one run occupies 2.0 MiB → 2.0 MiB)" in c.summary(), c.summary()
    assert "saved" not in c.summary() and "nothing is saved" in c.why, c.why
