"""Serialize real programs the way ExecutableCache stores them and print every global their pickles name.

Usage: XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/payload_globals_worker.py

Output (last line of stdout): {"jax": "0.10.2", "programs": {name: [[module, qualname, "call" | "value"], ...]},
"loads": {name: "loaded" or the error load_compiled raised}}
where "call" means the pickle calls the global (REDUCE / NEWOBJ: a constructor or function run with payload
arguments) and "value" means it only names it (a class or function stored as an attribute, e.g. a treedef's
node type). The globals are recorded by a bare unpickler that resolves nothing, so this is what JAX writes,
independent of xlakit's policy.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import pickle
import sys
import typing


class _Recorder(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.seen: dict[tuple[str, str], str] = {}

    def find_class(self, module, name):
        key = (module, name)
        self.seen.setdefault(key, "value")
        seen = self.seen

        class Global:
            def __new__(cls, *args, **kwargs):
                seen[key] = "call"
                return object.__new__(_Instance)

        return Global

    def persistent_load(self, pid):
        return _Instance()


class _Instance:
    def __setstate__(self, state):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def __setitem__(self, key, value):
        pass


# The ml_dtypes scalar types jax.jit accepts as arguments on CPU (jax 0.10.2, ml_dtypes 0.5).
ML_DTYPES = ("bfloat16", "float4_e2m1fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
             "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "int1", "int2", "int4", "uint1",
             "uint2", "uint4")


class Pair(typing.NamedTuple):
    a: typing.Any
    b: typing.Any


@dataclasses.dataclass
class Params:
    w: typing.Any
    scale: typing.Any


def programs():
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.tree_util.register_dataclass(Params, data_fields=["w", "scale"], meta_fields=[])
    x = np.arange(8.0, dtype=np.float32)
    devices = jax.devices()
    mesh1 = Mesh(np.array(devices), ("d",))
    mesh2 = Mesh(np.array(devices).reshape(2, 2), ("x", "y"))
    table = {
        "single device": lambda: jax.jit(lambda v: jnp.sin(v) * 2).lower(x),
        "donation": lambda: jax.jit(lambda v, w: (v + w, w * 2), donate_argnums=0).lower(x, x),
        "pytrees": lambda: jax.jit(lambda t, *, k: {"out": [t["a"][0] + k, None, Pair(t["b"], t["c"])],
                                                   "od": collections.OrderedDict(z=t["a"][1])}).lower(
            {"a": (x, x), "b": [x], "c": None}, k=x),
        "defaultdict and dataclass": lambda: jax.jit(lambda d, p: (d["a"] * p.scale, p)).lower(
            collections.defaultdict(list, a=x), Params(x, np.float32(2))),
        "static args": lambda: jax.jit(lambda v, n: v * n, static_argnums=1).lower(x, 3),
        "dtypes": lambda: jax.jit(lambda *a: tuple(v * 1 for v in a)).lower(
            x.astype(ml_dtypes.bfloat16), x.astype(np.float16), x.astype(np.int8), x.astype(np.uint8),
            x > 2, x.astype(np.complex64), x.astype(ml_dtypes.float8_e4m3fn), x.astype(ml_dtypes.float8_e5m2),
            x.astype(ml_dtypes.int4), np.int32(3)),
        "every ml_dtypes type JAX takes": lambda: jax.jit(lambda *a: a).lower(*(
            np.zeros(2, getattr(ml_dtypes, t)) for t in ML_DTYPES if hasattr(ml_dtypes, t))),
        "typed keys": lambda: jax.jit(lambda k1, k2, k3: (jax.random.normal(k1, (2,)), jax.random.split(k2),
                                                         jax.random.uniform(k3))).lower(
            jax.random.key(0), jax.random.key(1, impl="rbg"), jax.random.key(2, impl="unsafe_rbg")),
        "sharded 1-D mesh": lambda: jax.jit(lambda v: v * 2, out_shardings=NamedSharding(mesh1, P())).lower(
            jax.device_put(x, NamedSharding(mesh1, P("d")))),
        "sharded 2-D mesh": lambda: jax.jit(lambda m: (m @ m.T, m.sum(0)),
                                            out_shardings=(NamedSharding(mesh2, P("x", None)),
                                                           NamedSharding(mesh2, P("y")))).lower(
            jax.device_put(x.reshape(4, 2), NamedSharding(mesh2, P("x", "y")))),
        "pinned_host output": lambda: jax.jit(lambda v: v + 1, out_shardings=NamedSharding(
            mesh1, P(), memory_kind="pinned_host")).lower(x),
        "shard_map": lambda: jax.jit(jax.shard_map(lambda b: b * jax.lax.axis_index("d"), mesh=mesh1,
                                                   in_specs=P("d"), out_specs=P("d"))).lower(x),
        "JAX's own result namedtuples": lambda: jax.jit(lambda m: (
            jnp.linalg.qr(m), jnp.linalg.eigh(m), jnp.linalg.slogdet(m), jnp.linalg.svd(m), jnp.linalg.eig(m),
            jnp.unique_all(m[0], size=3), jnp.unique_counts(m[0], size=3), jnp.unique_inverse(m[0], size=3))).lower(
            np.eye(3, dtype=np.float32)),
        "scan and grad": lambda: jax.jit(jax.grad(lambda v: jax.lax.scan(lambda c, t: (c * t, c), 1.0,
                                                                         v)[0])).lower(x),
    }
    return table


def main() -> None:
    import jax

    from xlakit._jax import payload_layout
    from xlakit._jax.serialize import load_compiled, serialize_compiled

    out, loads = {}, {}
    for name, lower in programs().items():
        payload, placement = serialize_compiled(lower().compile())
        rec = _Recorder(payload_layout.split(payload)[0])  # the pickle frame (the executable follows it)
        rec.load()
        out[name] = sorted([m, n, how] for (m, n), how in rec.seen.items())
        try:  # through xlakit's scan and restricted unpickler, as a cache hit loads it
            loaded = load_compiled(payload, placement)
            loads[name] = "loaded" if isinstance(loaded, jax.stages.Compiled) else type(loaded).__name__
        except Exception as e:  # noqa: BLE001 - reported, the test names it
            loads[name] = f"{type(e).__name__}: {e}"
    print(json.dumps({"jax": jax.__version__, "devices": jax.device_count(), "programs": out, "loads": loads}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
