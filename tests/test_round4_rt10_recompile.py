"""A recompile or a cache miss is blamed on what JAX keyed it on (red team, round 10).

Faults these tests catch (each was an answer of "no argument changed" or a wrong argument):
a negative ``static_argnums`` (``-1``) was compared as a traced argument, so ``n: 2 -> 3`` read "no argument
changed"; ``jax.jit(jax.grad(loss))`` created in a loop retraces (JAX keys on the ``grad`` wrapper, a new object
each time) but was compared by the function underneath, so no change was named; a static value that prints
the same but is another value to JAX (a dataclass field left out of its ``repr``; a NaN, never equal to itself)
was compared by its ``repr``; ``cache.explain`` named a changed argument by its position among the arguments
the program keeps (``f(x, y, z)`` with ``y`` unused: a new shape of ``z`` read "argument 1").
"""

from __future__ import annotations

import dataclasses

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlakit  # noqa: E402
from xlakit import events  # noqa: E402


def reasons(rec: events.EventLog) -> list[str]:
    return [e.reason for e in rec.events("recompile")]


def test_a_negative_static_argnums_is_a_static_argument():
    f = jax.jit(lambda x, n: x * n, static_argnums=-1)
    with events.record() as rec:
        f(jnp.ones(3), 2)
        f(jnp.ones(3), 3)
    assert reasons(rec) == ["n: static 2 -> 3"]


def test_a_new_wrapper_of_the_same_function_is_a_new_function_object():
    def loss(w):
        return (w ** 2).sum()

    w = jnp.ones(3)
    with events.record() as rec:
        for _ in range(2):
            jax.jit(jax.grad(loss))(w)  # JAX keys its cache on grad's wrapper: a new one retraces
    assert [e.name for e in rec.events("compile")] == ["jit_loss", "jit_loss"]
    (reason,) = reasons(rec)
    assert reason.endswith(".loss: function an earlier function object -> a new function object (same code)")


def test_jit_of_the_same_function_twice_is_no_retrace():
    def g(x):
        return x + 1

    x = jnp.ones(2)
    with events.record() as rec:
        jax.jit(g)(x)
        jax.jit(g)(x)  # JAX's cache holds g's trace: nothing to blame
    assert reasons(rec) == []
    assert [e.name for e in rec.events("compile")] == ["jit_g"]


@dataclasses.dataclass(frozen=True)
class Config:
    width: int
    scale: float = dataclasses.field(repr=False)


def test_a_static_value_that_prints_the_same_but_differs_is_named():
    f = jax.jit(lambda x, cfg: x * cfg.scale, static_argnums=1)
    with events.record() as rec:
        f(jnp.ones(2), Config(2, 1.0))
        f(jnp.ones(2), Config(2, 2.0))  # repr "Config(width=2)" both times; JAX compares with ==
        f(jnp.ones(2), Config(2, 1.0))  # JAX's cache holds this one: no trace
    assert reasons(rec) == ["cfg: static Config(width=2) -> Config(width=2) (prints the same but is not == the "
                            "earlier value)"]


def test_a_nan_static_value_is_told_to_retrace_on_every_call():
    f = jax.jit(lambda x, s: x * s, static_argnums=1)
    with events.record() as rec:
        f(jnp.ones(2), float("nan"))
        f(jnp.ones(2), float("nan"))
    assert reasons(rec) == ["s: static nan -> nan (not equal to itself: JAX traces again on every call with it)"]


def test_a_static_value_equal_to_one_compiled_before_is_seen_by_equality():
    f = jax.jit(lambda x, cfg: x * cfg.scale, static_argnums=1)
    with events.record() as rec:
        f(jnp.ones(2), Config(2, 1.0))
        f(jnp.ones(3), Config(2, 2.0))
        f(jnp.ones(3), Config(2, 1.0))  # Config(2, 1.0) was compiled (with float32[2]); Config(2, 2.0) was not
    assert reasons(rec)[-1] == ("cfg: static Config(width=2) -> Config(width=2) (prints the same but is not == the "
                                "earlier value; an equal value was compiled before, with other arguments)")


def test_explain_names_the_functions_argument_not_its_position_among_kept_ones(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache")

    def f(x, y, z):  # y is unused: JAX leaves it out of the program's arguments
        return x + z

    cache.compile(jax.jit(f), jnp.ones(3), jnp.ones(2), jnp.ones(3))
    found = cache.explain(jax.jit(f), jnp.ones(3), jnp.ones(2), jnp.ones((2, 3)))
    cache.close()  # xlakit's hooks released: later tests of this worker see JAX as it was
    assert [(d.kind, d.part, d.now, d.entry) for d in found.differences if d.kind == "shape"] == [
        ("shape", "argument z", "2x3", "3")]


def test_explain_names_a_pytree_leaf_by_its_path(tmp_path):
    cache = xlakit.ExecutableCache(tmp_path / "cache")

    def f(d):
        return d["a"] * 2 + d["b"].sum()

    cache.compile(jax.jit(f), {"a": jnp.ones(3), "b": jnp.ones(2)})
    found = cache.explain(jax.jit(f), {"a": jnp.ones(3), "b": jnp.ones(4)})
    assert [d.part for d in found.differences if d.kind == "shape"] == ["argument d['b']"]
    lowered = jax.jit(f).lower({"a": jnp.ones(3), "b": jnp.ones(4)})  # a Lowered: no parameter names
    assert [d.part for d in cache.explain(lowered).differences if d.kind == "shape"] == ["argument args[0]['b']"]
    cache.close()
