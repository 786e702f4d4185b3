"""A recompile is explained against the nearest signature already compiled, counted in differing attributes.

Faults these tests catch: the nearest compiled signature is chosen by how many *arguments* changed, so
``f32[2]``, ``i32[2]``, then ``f32[3]`` was blamed on ``int32[2] -> float32[3]`` (two attributes) rather than
``float32[2] -> float32[3]`` (one); only the first differing attribute of a leaf was named (shape, never the
dtype that changed with it); a pytree that gained leaves counted as one change however many it gained; an
argument passed by keyword one call and positionally the next (a new entry of JAX's tracing cache) read "no
argument changed", as did a global setting of JAX's trace context outside a short list and a ``with mesh:``
block; a committed array's device counted as a change although JAX traces it again only for another abstract
sharding; keyword arguments' placements were matched to the wrong leaves (JAX sorts keywords).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlakit import events  # noqa: E402

CLOSEST = " [against the closest signature compiled before, not the previous call's]"


def recompiles(rec: events.EventLog) -> list[events.Event]:
    return rec.events("recompile")


def test_the_nearest_signature_differs_in_fewest_attributes_not_fewest_arguments():
    @jax.jit
    def total(x):
        return x.sum()

    with events.record() as rec:
        total(jnp.ones(2, jnp.float32))
        total(jnp.ones(2, jnp.int32))
        total(jnp.ones(3, jnp.float32))  # float32[2]: shape only; int32[2]: shape and dtype
    last = recompiles(rec)[-1]
    assert last.changes == [{"what": "shape", "path": "x", "before": "float32[2]", "after": "float32[3]"}]
    assert last.reason == "x: shape float32[2] -> float32[3]" + CLOSEST


def test_every_attribute_that_differs_from_the_nearest_is_named():
    @jax.jit
    def peak(x):
        return x.max()

    with events.record() as rec:
        peak(1.0)
        peak(jnp.ones(3, jnp.int32))
    (event,) = recompiles(rec)
    assert [c["what"] for c in event.changes] == ["shape", "dtype", "weak_type"]
    assert {(c["before"], c["after"]) for c in event.changes} == {("weak float32[]", "int32[3]")}
    assert event.reason == "x: shape, dtype and weak_type weak float32[] -> int32[3]"


def test_a_tie_goes_to_the_latest_signature_and_only_a_whole_leaf_compiled_before_is_seen():
    @jax.jit
    def low(x):
        return x.min()

    @jax.jit
    def high(x):
        return x.max()

    with events.record() as rec:
        low(jnp.ones(3, jnp.int32))
        low(jnp.ones(2))
        low(jnp.ones(2, jnp.int32))  # int32[3]: shape; float32[2], later: dtype
        high(jnp.ones(2))
        high(jnp.ones(3, jnp.int32))
        high(jnp.ones(2, jnp.int32))  # float32[2]: dtype; int32[3], later: shape
        high(jnp.ones(3))  # float32[2]: shape; int32[3], later: dtype; the previous int32[2]: both
    # int32 and [2] were each compiled before, int32[2] never: no "compiled before"
    assert [e.reason for e in recompiles(rec) if e.name == "jit_low"] == [
        "x: shape and dtype int32[3] -> float32[2]", "x: dtype float32[2] -> int32[2]"]
    assert [e.reason for e in recompiles(rec) if e.name == "jit_high"] == [
        "x: shape and dtype float32[2] -> int32[3]", "x: shape int32[3] -> int32[2]",
        "x: dtype int32[3] -> float32[3]" + CLOSEST]


def test_a_static_value_compiled_before_beside_a_shape_change():
    @functools.partial(jax.jit, static_argnames="n")
    def scale(x, n):
        return x * n

    with events.record() as rec:
        scale(jnp.ones(2), n=1)
        scale(jnp.ones(3), n=2)
        scale(jnp.ones(4), n=1)  # (2, n=1): the shape only; (3, n=2), the previous call: shape and n
        scale(jnp.ones(3), n=1)  # (4, n=1), the latest of two at one change: float32[3] was compiled before
    reasons = [e.reason for e in recompiles(rec)]
    assert reasons == ["x: shape float32[2] -> float32[3]; n: static 1 -> 2",
                       "x: shape float32[2] -> float32[4]" + CLOSEST,
                       "x: shape float32[4] -> float32[3] (float32[3] was compiled before, with other arguments)"]


def test_a_pytree_is_compared_with_the_one_of_the_same_structure_and_added_leaves_each_count():
    @jax.jit
    def add_up(t):
        return sum(v.sum() for v in jax.tree_util.tree_leaves(t))

    @jax.jit
    def add_all(t):
        return sum(v.sum() for v in jax.tree_util.tree_leaves(t))

    x2, x3 = jnp.ones(2), jnp.ones(3)
    with events.record() as rec:
        add_up({"a": x2})
        add_up({"a": x3})
        add_up({"a": x2, "b": x2})  # {'a': f32[2]}: a key added; {'a': f32[3]}: a key added and a shape
        add_all({"a": x2, "b": x2, "c": x2})
        add_all({"a": x3})
        add_all({"a": x3, "b": x2, "c": x2})  # the first: a's shape; {'a': f32[3]}: two leaves added
    up = [e for e in recompiles(rec) if e.name == "jit_add_up"][-1]
    assert up.changes == [{"what": "structure", "path": "t['b']", "before": "({'a': *},)",
                           "after": "({'a': *, 'b': *},)"}]
    assert up.reason.endswith(CLOSEST)
    every = [e for e in recompiles(rec) if e.name == "jit_add_all"][-1]
    assert every.reason == ("t['a']: shape float32[2] -> float32[3] (float32[3] was compiled before, with other "
                            "arguments)" + CLOSEST)


def test_an_argument_passed_by_keyword_then_positionally_is_named():
    @jax.jit
    def plus(a, b):
        return a + b

    @jax.jit
    def minus(a, b):
        return a - b

    @functools.partial(jax.jit, static_argnames="n")
    def times(x, n):
        return x * n

    a = b = jnp.ones(2)
    with events.record() as rec:
        plus(a, b=b)
        plus(a, b)
        minus(a, b)
        minus(a, b=b)
        minus(a=a, b=b)  # (a, b=b): a; (a, b): a and b
        times(a, 3)
        times(a, n=3)  # a static argument too: JAX keys on the static keyword names
    by_name = {n: [(e.changes, e.reason) for e in recompiles(rec) if e.name == n]
               for n in ("jit_plus", "jit_minus", "jit_times")}
    assert by_name["jit_plus"] == [
        ([{"what": "passed", "path": "b", "before": "by keyword", "after": "positionally"}],
         "b: passed by keyword -> positionally")]
    assert [r for _, r in by_name["jit_minus"]] == ["b: passed positionally -> by keyword",
                                                    "a: passed positionally -> by keyword"]
    assert [r for _, r in by_name["jit_times"]] == ["n: passed positionally -> by keyword"]


def test_other_keyword_names_over_the_same_tree_are_named():
    @jax.jit
    def pick(a, b=None, c=None):
        return a

    x = jnp.ones(2)
    with events.record() as rec:
        pick(x, b=x)
        pick(x, c=x)
    (event,) = recompiles(rec)
    assert event.reason == "b: structure a, b -> a, c"


def test_a_setting_of_jaxs_trace_context_is_named():
    @jax.jit
    def draw(x):
        return x + 1

    was = jax.config.jax_threefry_partitionable
    try:
        with events.record() as rec:
            draw(jnp.ones(2))
            jax.config.update("jax_threefry_partitionable", not was)
            draw(jnp.ones(2))
    finally:
        jax.config.update("jax_threefry_partitionable", was)
    (event,) = recompiles(rec)
    assert event.changes == [{"what": "config", "path": "jax_threefry_partitionable", "before": str(was),
                              "after": str(not was)}]


def test_the_warning_says_how_an_argument_was_passed():
    from xlakit._jax.retrace import RecompileWarning, RetraceTracker

    change = {"what": "passed", "path": "b", "before": "by keyword", "after": "positionally"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RetraceTracker(warn_after=0)._maybe_warn(("f", None, 0), "jit_f", [change])
    (told,) = [str(w.message) for w in caught if issubclass(w.category, RecompileWarning)]
    assert "because b changed how it was passed (b: passed by keyword -> positionally)" in told
    assert "always by keyword or always positionally" in told


SHARDED = r"""
import json, os, warnings
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from xlakit import events

mesh = Mesh(jax.devices(), ("d",))
split = lambda x: jax.device_put(x, NamedSharding(mesh, P("d")))
dev0 = lambda x: jax.device_put(x, jax.devices()[0])
x4, x6 = jnp.ones(4), jnp.ones(6)
def committed(x): return x * 2
def back(x): return x * 2
def seen(x): return x * 2
def keywords(a, b, c): return a
def meshes(x): return x * 2
with events.record() as rec:
    f = jax.jit(committed); f(dev0(x4)); f(split(x4)); f(x6)
    f = jax.jit(back); f(split(x4)); f(x4)
    f = jax.jit(seen); f(x4); f(split(x4)); f(x6); f(split(x6))
    f = jax.jit(keywords); f(x4, c=split(x4), b=x4); f(x4, c=x4, b=split(x4))
    f = jax.jit(meshes); f(x4)
    with mesh:
        f(x4)
out = {}
for e in rec.events("recompile"):
    out.setdefault(e.name, []).append(e.reason)
print(json.dumps(out))
"""


def test_placement_on_two_devices_counts_its_abstract_sharding_not_the_device():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    split = "NamedSharding(mesh=Mesh('d': 2, axis_types=(Auto,)), spec=P('d',), memory_kind=device)"
    dev0 = "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)"
    # x6 uncommitted: to dev0's float32[4] only its shape differs (another device is no retrace), to split's two
    assert got["jit_committed"] == [f"x: sharding {dev0} -> {split}", "x: shape float32[4] -> float32[6]" + CLOSEST]
    assert got["jit_back"] == [f"x: sharding {split} -> uncommitted"]
    assert got["jit_seen"] == [f"x: sharding uncommitted -> {split}", "x: shape float32[4] -> float32[6]" + CLOSEST,
                               f"x: sharding uncommitted -> {split} ({split} was compiled before, with other "
                               "arguments)"]
    # keywords flatten sorted (b before c): each keyword's placement is its own
    assert got["jit_keywords"] == [f"b: sharding uncommitted -> {split}; c: sharding {split} -> uncommitted"]
    (mesh_change,) = got["jit_meshes"]
    assert mesh_change.startswith("mesh: sharding Mesh() -> Mesh(), with mesh (Mesh(axis_sizes=(2,)"), mesh_change


def test_a_partial_made_anew_each_call_is_blamed_on_the_new_function_object():
    """``jax.jit(functools.partial(f, k=2.0))(x)`` in a loop retraces because JAX keys its cache on the partial,
    a new object each time; the reason said "no argument changed" while the same loop with a lambda named the
    function. Both now name it."""
    import jax

    def f(a, k):
        return a * k

    kept = []

    def step():
        p = functools.partial(f, k=2.0)
        kept.append(p)  # alive: a new object, not a recycled id
        return jax.jit(p)(jnp.ones(3))

    with events.record() as log:
        step()
        step()
    reasons = [e.reason for e in log.events() if e.kind == "recompile"]
    assert len(reasons) == 1 and reasons[0].endswith(
        ".<locals>.f: function an earlier function object -> a new function object (same code)")


def test_static_values_alike_in_their_first_characters_are_told_apart():
    """A static value's text is cut for display; two tuples of layer sizes that differ only at their end were the
    same text, so the recompile read "no argument changed" and the older signature was dropped."""
    import jax

    def mlp(x, sizes):
        return x * len(sizes)

    step = jax.jit(mlp, static_argnames="sizes")
    with events.record() as log:
        step(jnp.ones(3), sizes=(784,) + (512,) * 30 + (10,))
        step(jnp.ones(3), sizes=(784,) + (512,) * 30 + (12,))
    reasons = [e.reason for e in log.events() if e.kind == "recompile"]
    assert len(reasons) == 1 and reasons[0].startswith("sizes: static (784, 512") and "10) #" in reasons[0] \
        and "12) #" in reasons[0]
