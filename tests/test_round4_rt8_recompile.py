"""A recompile is explained against the same function object's signatures, a container's change of kind is one
change, and a static value changed in type only is told.

Faults these tests catch: a function re-created by a factory (``mk = lambda: jax.jit(...)``) and retraced was
blamed on "a new function object" by matching another object's signature, though JAX keys its tracing cache
per object and this object had compiled others (the same with a keyword call matched to another object's);
a tuple passed as a namedtuple counted its leaves as removed and added under renamed paths (``d[0]`` ->
``d.a``), so a shorter tuple looked closer than the tuple of the same length; a static ``2.0`` after ``2`` and
``3`` read ``n: static 3 -> 2.0`` while what forced the trace is that ``2.0`` is a float (JAX compares static
values with their type).
"""

from __future__ import annotations

import collections
import functools

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit import events  # noqa: E402

CLOSEST = " [against the closest signature compiled before, not the previous call's]"


def reasons(rec: events.EventLog) -> list[str]:
    return [e.reason for e in rec.events("recompile")]


def test_a_function_objects_own_signatures_come_before_another_objects():
    def mk():
        return jax.jit(lambda x, y: x * y)

    with events.record() as rec:
        f1 = mk()
        f1(jnp.ones(2), jnp.ones(2))
        f2 = mk()
        f2(jnp.ones(3), jnp.ones(3))  # f2 has compiled nothing yet: a new object is the truth
        f2(jnp.ones(2), jnp.ones(2))  # f1 compiled this, f2 did not: the shapes forced it
    first, second = reasons(rec)
    assert first.endswith("function an earlier function object -> a new function object (same code)")
    assert second == "x: shape float32[3] -> float32[2]; y: shape float32[3] -> float32[2]"
    del f1


def test_a_keyword_call_is_compared_with_the_same_objects_calls():
    def mk():
        @jax.jit
        def f(x, y):
            return x + y

        return f

    with events.record() as rec:
        g = mk()
        g(jnp.ones(2), jnp.ones(2))
        f = mk()
        f(x=jnp.ones(2), y=jnp.ones(2))  # a new object: against g's
        f(jnp.ones(2), jnp.ones(2))  # g compiled this; f only the keyword call
    (event,) = [e for e in rec.events("recompile")][-1:]
    assert event.reason == "x: passed by keyword -> positionally; y: passed by keyword -> positionally"
    assert all(c["what"] == "passed" for c in event.changes) and not any(c.get("seen") for c in event.changes)
    del g


def test_a_tuple_passed_as_a_namedtuple_is_one_change_against_the_tuple_of_its_length():
    pair = collections.namedtuple("pair", "a b")
    x = jnp.ones(2)

    @jax.jit
    def g(d):
        return d[0] + d[1] if len(d) > 1 else d[0]

    with events.record() as rec:
        g((x,))
        g((x, x))
        g(pair(x, x))  # (x,): one leaf renamed and one added; (x, x): its two leaves renamed, one change
    last = rec.events("recompile")[-1]
    assert last.changes == [{"what": "structure", "path": "d", "before": "(*, *)",
                             "after": "CustomNode(namedtuple[pair], [*, *])"}]
    assert last.reason == "d: structure (*, *) -> CustomNode(namedtuple[pair], [*, *])"


def test_leaves_renamed_by_a_change_of_kind_are_compared_one_to_one():
    pair = collections.namedtuple("pair", "a b")

    @jax.jit
    def g(d):
        return d[0].sum() + d[1].sum()

    with events.record() as rec:
        g((jnp.ones(2), jnp.ones(2)))
        g(pair(jnp.ones(2), jnp.ones(3, jnp.int32)))
    (event,) = rec.events("recompile")
    assert event.reason == ("d: structure (*, *) -> CustomNode(namedtuple[pair], [*, *]); "
                            "d.b: shape and dtype float32[2] -> int32[3]")


def test_a_static_value_changed_in_type_only_is_the_tie_break_and_says_both_types():
    @functools.partial(jax.jit, static_argnames="n")
    def h(x, n):
        return x * n

    with events.record() as rec:
        h(jnp.ones(2), n=2)
        h(jnp.ones(2), n=3)
        h(jnp.ones(2), n=2.0)  # 2 and 3 each one change; 2 -> 2.0 is what forced it: the type
    last = rec.events("recompile")[-1]
    assert last.changes == [{"what": "static", "path": "n", "before": "2 (int)", "after": "2.0 (float)"}]
    assert last.reason == "n: static 2 (int) -> 2.0 (float)" + CLOSEST


def test_a_static_bool_after_an_equal_int_names_both_types_and_other_values_stay_plain():
    @functools.partial(jax.jit, static_argnums=1)
    def h(x, n):
        return x * n

    with events.record() as rec:
        h(jnp.ones(2), 1)
        h(jnp.ones(2), True)
        h(jnp.ones(2), 5)
    assert reasons(rec) == ["n: static 1 (int) -> True (bool)", "n: static True -> 5"]
