"""A JAX process for tests/test_serialize.py: run one scenario, print one JSON line (the last line of stdout).

Usage: python tests/serialize_worker.py SCENARIO [DIR]
  placement       4 host devices: permuted load, two-device load refused, one device 0 -> 2
  save DIR        compile a pytree program, check an in-process round trip, write payload/placement/outputs
  load DIR        load what ``save`` wrote and run it on the same inputs
  unserializable  programs JAX cannot serialize (run with JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1)

Scenarios run in subprocesses because device counts are fixed when JAX starts and a bad load can abort.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlakit._jax import serialize as S

NT = collections.namedtuple("NT", "w b")  # a module-level namedtuple: importable by name in both processes


def sharded(x, devices):
    return jax.device_put(x, NamedSharding(Mesh(np.array(devices), ("d",)), P("d")))


def placement_scenario() -> dict:
    from jax.experimental.serialize_executable import deserialize_and_load, serialize

    devs = jax.devices()
    rev = devs[::-1]
    x = jnp.arange(32.0, dtype=jnp.float32).reshape(8, 4) / 7.0
    xs, xr = sharded(x, devs), sharded(x, rev)
    out: dict = {"n_devices": len(devs)}

    # A sharded program, plus one whose output depends on which shard runs where (a sum would hide a wrong mapping).
    compiled = jax.jit(lambda x: jnp.sin(x).sum(0)).lower(xs).compile()
    ordered = jax.jit(lambda x: jnp.cumsum(jnp.sin(x), axis=0) * jnp.arange(1.0, 9.0)[:, None]).lower(xs).compile()
    expected, expected_ordered = np.asarray(compiled(xs)), np.asarray(ordered(xs))

    # Plain JAX: loads, then the first call fails although both shardings print the same.
    payload, in_tree, out_tree = serialize(compiled)
    plain = deserialize_and_load(payload, in_tree, out_tree, execution_devices=rev)
    try:
        plain(xr)
        out["plain_error"] = None
    except Exception as e:  # noqa: BLE001 - recording whatever JAX raises
        lines = str(e).splitlines()
        passed = [ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("Passed sharding")]
        required = [ln.split(":", 1)[1].strip() for ln in lines if ln.strip().startswith("Required sharding")]
        out["plain_error"] = {"type": type(e).__name__, "message": str(e)[:2000],
                              "prints_identically": bool(passed) and passed == required}

    # (a) xlakit: the same devices in reversed order.
    data, placement = S.serialize_compiled(compiled)
    data_o, placement_o = S.serialize_compiled(ordered)
    out["placement"] = placement.to_dict()
    loaded = S.load_compiled(data, placement, devices=rev)
    loaded_o = S.load_compiled(data_o, placement_o, devices=rev)
    got, got_o = loaded(xr), loaded_o(xr)
    out["reversed"] = {
        "equal": bool(np.array_equal(np.asarray(got), expected)),
        "ordered_equal": bool(np.array_equal(np.asarray(got_o), expected_ordered)),
        "loaded_placement": S.placement_of(loaded).device_ids,
        "out_devices": sorted(d.id for d in got_o.sharding.device_set),
        "shard_devices": [s.device.id for s in sorted(got_o.addressable_shards, key=lambda s: s.index[0].start)],
    }

    # (b) two devices: refused before any XLA call; the process lives on.
    xla_calls = []
    real = S._load_executable
    S._load_executable = lambda *a: xla_calls.append(a) or real(*a)
    try:
        S.load_compiled(data, placement, devices=devs[:2])
        out["fewer"] = {"error": None}
    except S.DevicePlacementError as e:
        out["fewer"] = {"error": str(e), "is_value_error": isinstance(e, ValueError)}
    refusals = {}
    lying = S.Placement("cpu", (0, 1), ("cpu", "cpu"), (0, 0))
    cases = {"duplicates": (placement, [devs[0], devs[1], devs[1], devs[3]]),
             "unknown_id": (placement, [0, 1, 2, 9]),
             "lying_placement": (lying, devs[:2])}
    for name, (claimed, devices) in cases.items():
        try:
            S.load_compiled(data, claimed, devices=devices)
            refusals[name] = None
        except S.DevicePlacementError as e:
            refusals[name] = str(e)
    out["refusals"] = refusals
    out["xla_calls_during_refusals"] = len(xla_calls)
    S._load_executable = real
    print("STILL-ALIVE after DevicePlacementError", flush=True)

    # One device -> another device of the same kind; real work after the refusals above.
    x0 = jax.device_put(x, devs[0])
    single = jax.jit(lambda x: jnp.tanh(x) @ x.T).lower(x0).compile()
    data1, placement1 = S.serialize_compiled(single)
    loaded1 = S.load_compiled(data1, placement1, devices=[devs[2]])
    got1 = loaded1(jax.device_put(x, devs[2]))
    out["single"] = {"placement": placement1.to_dict(),
                     "equal": bool(np.array_equal(np.asarray(got1), np.asarray(single(x0)))),
                     "out_devices": sorted(d.id for d in got1.devices())}
    return out


def pytree_program():
    def f(tree):
        a, b = tree["pair"]
        nt = tree["nt"]
        return {"sum": a + b, "nt": NT((nt.w * 2).astype(jnp.bfloat16), None),
                "ints": (jnp.round(a * 10).astype(jnp.int8), None), "none": None}

    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(6, 4)
    tree = {"pair": (x, x[::-1].copy()), "nt": NT(x + 1, None), "none": None}
    return jax.jit(f), tree


def leaves_hex(tree) -> list:
    return [np.asarray(leaf).tobytes().hex() + ":" + str(np.asarray(leaf).dtype) for leaf in jax.tree.leaves(tree)]


def save_scenario(folder: Path) -> dict:
    fn, tree = pytree_program()
    compiled = fn.lower(tree).compile()
    expected = compiled(tree)
    payload, placement = S.serialize_compiled(compiled)
    again = S.load_compiled(payload, placement)(tree)  # same-process round trip with the same pytree
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "payload.bin").write_bytes(payload)
    (folder / "placement.json").write_text(json.dumps(placement.to_dict()))
    return {"outputs": leaves_hex(expected), "structure": str(jax.tree.structure(expected)),
            "same_process_outputs": leaves_hex(again), "same_process_structure": str(jax.tree.structure(again)),
            "nt_type": type(again["nt"]).__name__ if isinstance(again["nt"], NT) else repr(type(again["nt"]))}


def load_scenario(folder: Path) -> dict:
    _, tree = pytree_program()
    placement = S.Placement.from_dict(json.loads((folder / "placement.json").read_text()))
    loaded = S.load_compiled((folder / "payload.bin").read_bytes(), placement)
    got = loaded(tree)
    return {"outputs": leaves_hex(got), "structure": str(jax.tree.structure(got)),
            "nt_is_namedtuple": isinstance(got["nt"], NT)}


def unserializable_scenario() -> dict:
    x = jnp.arange(3.0)
    out: dict = {}

    def attempt(name, fn, *args):
        compiled = jax.jit(fn).lower(*args).compile()
        try:
            S.serialize_compiled(compiled)
            out[name] = {"error": None}
        except S.NotSerializable as e:
            out[name] = {"error": type(e).__name__, "reason": e.reason}
        except Exception as e:  # noqa: BLE001 - a raw error is what the test must catch
            out[name] = {"error": type(e).__name__, "reason": str(e)}
        out[name]["still_runs"] = np.asarray(compiled(*args)).ravel()[:3].tolist()

    attempt("debug_print", lambda x: (jax.debug.print("x={}", x), x * 2)[1], x)
    ref = jax.new_ref(jnp.zeros(3)) if hasattr(jax, "new_ref") else None
    if ref is not None:
        def bump(x):
            ref[...] += x
            return x * 2
        attempt("mutable_ref", bump, x)
    big = np.arange(1000.0, dtype=np.float32)  # hoisted as a const arg under JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1
    attempt("const_args", lambda y: y + big, np.ones(1000, np.float32))

    Local = collections.namedtuple("Local", "a")  # pickles by name, so a class local to a function cannot
    attempt("local_namedtuple", lambda t: t.a * 2, Local(x))
    return out


def main() -> None:
    scenario = sys.argv[1]
    if scenario == "placement":
        result = placement_scenario()
    elif scenario == "save":
        result = save_scenario(Path(sys.argv[2]))
    elif scenario == "load":
        result = load_scenario(Path(sys.argv[2]))
    elif scenario == "unserializable":
        result = unserializable_scenario()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
