"""A recompile caused by a container changing kind is named at the deepest path where the structures differ.

Fault this test catches (red team, jax 0.10.2): ``j = jax.jit(lambda a: a[0])`` called as ``j([x])`` then
``j((x,))`` was explained as ``arguments: structure ([*],) -> ((*,),)``, blaming no argument (the leaves' paths,
``a[0]``, are the same in both); other structure changes name their path (``x['a']: structure ...``).
"""

from __future__ import annotations

import collections

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit import events  # noqa: E402

Pair = collections.namedtuple("Pair", "p q")


def _explained(calls) -> list[tuple[str, list[dict]]]:
    with events.record() as rec:
        for fn, args, kwargs in calls:
            fn(*args, **kwargs)
    return [(e.reason, e.changes) for e in rec.events("recompile")]


def test_a_list_that_becomes_a_tuple_names_the_argument():
    x = jnp.ones(2)
    j = jax.jit(lambda a: a[0])
    ((reason, changes),) = _explained([(j, ([x],), {}), (j, ((x,),), {})])
    assert reason == "a: structure [*] -> (*,)"  # before: "arguments: structure ([*],) -> ((*,),)"
    assert changes == [{"what": "structure", "path": "a", "before": "[*]", "after": "(*,)"}]


def test_a_container_changing_kind_at_any_depth_is_named_there():
    x = jnp.ones(2)

    @jax.jit
    def first(x):
        return x["a"][0]

    @jax.jit
    def second(t, b=None):
        return t.q[0]

    @jax.jit
    def maybe(a):
        return a

    explained = _explained([
        (first, ({"a": [x], "b": x},), {}), (first, ({"a": (x,), "b": x},), {}),
        (second, (Pair(x, [x]),), {"b": {"z": [x]}}), (second, (Pair(x, (x,)),), {"b": {"z": (x,)}}),
        (maybe, (None,), {}), (maybe, (x,), {}),
    ])
    assert [r for r, _ in explained] == [
        "x['a']: structure [*] -> (*,)",
        "t.q: structure [*] -> (*,); b['z']: structure [*] -> (*,)",
        "a: structure None -> *",
    ]


def test_a_kind_change_that_adds_leaves_is_named_where_the_kind_changed_and_a_key_added_where_it_was_added():
    x = jnp.ones(2)

    @jax.jit
    def grow(a):
        return a[0]

    @jax.jit
    def keys(t):
        return t["a"]

    explained = _explained([(grow, ([x],), {}), (grow, ((x, x),), {}),
                            (keys, ({"a": x},), {}), (keys, ({"a": x, "b": x},), {})])
    assert [r for r, _ in explained] == ["a: structure [*] -> (*, *)",
                                         "t['b']: structure ({'a': *},) -> ({'a': *, 'b': *},)"]
