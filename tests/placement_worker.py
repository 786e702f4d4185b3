"""A JAX process (4 CPU devices) checking that one cache entry serves every placement of the same program.

Usage:
  python tests/placement_worker.py placements CACHE_DIR
      transparent mode and ExecutableCache: the same programs on permuted, shifted and differently sized
      device sets; prints one JSON line with events, values and keys.
  python tests/placement_worker.py distributed PORT PROCESS_ID CACHE_DIR
      one process of a 2-process ``jax.distributed`` job: prints xlakit's key and JAX's own key of a
      process-local program and of an SPMD program over both processes' devices.

XLA_FLAGS (``--xla_force_host_platform_device_count``) must be set by the caller before JAX starts.
"""

from __future__ import annotations

import json
import sys


def _events(log, since: int) -> list[dict]:
    return [{"kind": e.kind, "name": e.name, "key": getattr(e, "key", None), "reason": getattr(e, "reason", None)}
            for e in list(log.events())[since:]]


def _sharded(fn, devices, x):
    """``jit(fn)(x)`` with ``x`` split over a 1-D mesh of ``devices`` (in that order)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(devices, ("d",))
    spec = NamedSharding(mesh, PartitionSpec("d"))
    y = jax.jit(fn, out_shardings=spec)(jax.device_put(x, spec))
    return y


def _shard_devices(y) -> list[int]:
    """Device id holding each row block of ``y``, in row order."""
    shards = sorted(y.addressable_shards, key=lambda s: s.index[0].start or 0)
    return [s.device.id for s in shards]


def placements(cache_dir: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import xlakit
    from xlakit._jax import hooks, keys
    from xlakit._jax.fresh import probe_key

    devs = jax.devices()
    assert len(devs) == 4, devs
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)

    def spmd(v):  # an SPMD program whose rows are coupled through a collective (sum over the mesh axis)
        return jnp.tanh(v * 1.5) + v.sum(0) / 7.0

    out: dict = {"runs": {}}
    cache = xlakit.enable_cache(cache_dir)
    log = xlakit.events.log()

    def run(label, devices, rows=8):
        start = len(log.events())
        y = _sharded(spmd, devices, x[:rows])
        out["runs"][label] = {"events": _events(log, start), "value": np.asarray(y).tobytes().hex(),
                              "shards": _shard_devices(y), "asked": [d.id for d in devices]}

    run("4_forward", devs)
    run("4_reversed", devs[::-1])
    run("4_rotated", devs[1:] + devs[:1])
    run("2_first", devs[:2], rows=4)
    run("2_shifted", devs[2:], rows=4)
    run("2_swapped", [devs[3], devs[1]], rows=4)

    # one device, committed to device 0 then to device 3: the same entry
    def single(v):
        return jnp.cos(v) * 2.0 + 1.0

    for label, d in (("1_dev0", devs[0]), ("1_dev3", devs[3])):
        start = len(log.events())
        y = jax.jit(single)(jax.device_put(x, d))
        out["runs"][label] = {"events": _events(log, start), "value": np.asarray(y).tobytes().hex(),
                              "shards": [next(iter(y.devices())).id], "asked": [d.id]}

    # keys straight from the key function: the same on permuted devices, never on another count or kind
    hooks.acquire()
    try:
        low = {}
        for label, ds in (("fwd", devs), ("rev", devs[::-1]), ("two", devs[:2])):
            from jax.sharding import Mesh, NamedSharding, PartitionSpec
            spec = NamedSharding(Mesh(ds, ("d",)), PartitionSpec("d"))
            lowered = jax.jit(spmd, out_shardings=spec).lower(jax.ShapeDtypeStruct((8, 4), np.float32,
                                                                                   sharding=spec))
            low[label] = lowered
        with hooks.route(cache):
            ctxs = {label: probe_key(lowered)[0] for label, lowered in low.items()}
        out["keys"] = {label: c.key for label, c in ctxs.items()}
        out["key_parts"] = ctxs["fwd"].parts()
        # another device kind: the same call with each device standing in under another kind
        real_get = hooks._saved["key_get"]

        class OtherKind:
            def __init__(self, d):
                self.device_kind = "TPU v9 (imagined)"
                self.process_index = d.process_index
                self.id = d.id

        args, kwargs = ctxs["fwd"].key_call  # JAX's cache_key.get arguments of that lookup
        mine, _ = keys.placement_free_key(real_get, args, kwargs)
        other_devices = np.array([OtherKind(d) for d in args[1].flat], dtype=object).reshape(args[1].shape)
        other, _ = keys.placement_free_key(real_get, (args[0], other_devices, *args[2:]), kwargs)
        out["kind_keys"] = {"cpu": mine, "other": other}
        out["jax_keys"] = {label: real_get(*c.key_call[0], **c.key_call[1]) for label, c in ctxs.items()}
    finally:
        hooks.release()

    # ExecutableCache: an entry compiled on one mesh is hit from the reversed mesh and loads onto a rotation
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def spmd2(v):
        return jnp.sin(v) * v.sum(0)

    ec = xlakit.ExecutableCache(cache_dir + "-explicit")
    explicit = {}
    for label, ds in (("fwd", devs), ("rev", devs[::-1])):
        spec = NamedSharding(Mesh(ds, ("d",)), PartitionSpec("d"))
        compiled, decision = ec.compile(jax.jit(spmd2, out_shardings=spec), jax.device_put(x, spec))
        y = compiled(jax.device_put(x, spec))
        explicit[label] = {"decision": decision.kind, "key": decision.key, "value": np.asarray(y).tobytes().hex(),
                           "shards": _shard_devices(y), "asked": [d.id for d in ds]}
    rotated = devs[2:] + devs[:2]
    loaded = ec.load(explicit["fwd"]["key"], devices=rotated)
    spec = NamedSharding(Mesh(rotated, ("d",)), PartitionSpec("d"))
    y = loaded(jax.device_put(x, spec))
    explicit["load_rotated"] = {"value": np.asarray(y).tobytes().hex(), "shards": _shard_devices(y),
                                "asked": [d.id for d in rotated]}
    try:
        ec.load(explicit["fwd"]["key"], devices=devs[:2])
        explicit["load_two"] = "loaded"
    except xlakit.DevicePlacementError as e:
        explicit["load_two"] = f"refused: {e}"
    out["explicit"] = explicit
    ec.close()

    # the load check refuses a 4-device executable for 2 devices before XLA sees it
    from xlakit._jax import executables
    compiled4 = jax.jit(spmd).lower(jax.ShapeDtypeStruct((8, 4), np.float32, sharding=jax.sharding.NamedSharding(
        jax.sharding.Mesh(devs, ("d",)), jax.sharding.PartitionSpec("d")))).compile()
    exec4 = executables.serialize(compiled4._executable.xla_extension_executable())
    try:
        keys.check_loadable(exec4, None, devs[:2])
        out["check_2_of_4"] = "loaded"
    except keys.PlacementMismatch as e:
        out["check_2_of_4"] = f"refused: {e}"
    keys.check_loadable(exec4, None, devs[::-1])  # same count: accepted
    return out


def distributed(port: str, process_id: int, cache_dir: str) -> dict:
    """Keys of the same programs in one process of a 2-process job (each process has 2 CPU devices)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import xlakit
    from xlakit._jax import hooks
    from xlakit._jax.environment import current_environment
    from xlakit._jax.fresh import probe_key

    cache = xlakit.enable_cache(cache_dir)
    local = jax.local_devices()
    x = np.arange(8.0, dtype=np.float32)

    def local_program(v):
        return jnp.exp(v) - v

    def spmd(v):
        return v * 2.0 + v.sum()

    global_spec = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec("d"))
    lowered = {
        "local": jax.jit(local_program).lower(jax.device_put(x, local[0])),
        "local_2dev": jax.jit(local_program).lower(jax.ShapeDtypeStruct(
            (8,), np.float32, sharding=NamedSharding(Mesh(np.array(local), ("d",)), PartitionSpec("d")))),
        "spmd": jax.jit(spmd, out_shardings=global_spec).lower(
            jax.ShapeDtypeStruct((8,), np.float32, sharding=global_spec)),
    }
    report: dict = {"process_id": process_id, "local_ids": [d.id for d in local], "xlakit": {}, "jax": {}}
    real_get = hooks._saved["key_get"]
    for label, low in lowered.items():
        with hooks.route(cache):
            ctx, backend = probe_key(low)
        report["xlakit"][label] = ctx.key
        report["jax"][label] = real_get(*ctx.key_call[0], **ctx.key_call[1])  # JAX's own key of the same lookup
    report["partition"] = current_environment(backend.platform).partition_name()
    # Process 0 compiles and stores (only process 0 writes); process 1 then loads that entry onto its own
    # device (id 2048), which is another device id than the one it was compiled for.
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client

    def run_local(v):
        return jnp.log1p(v) * 3.0

    log = xlakit.events.log()
    if process_id == 0:
        start = len(log.events())
        y = jax.jit(run_local)(jax.device_put(x, local[0]))
        report["run_events"] = _events(log, start)
    client.wait_at_barrier("xlakit-placement-stored", 60_000)
    if process_id == 1:
        start = len(log.events())
        y = jax.jit(run_local)(jax.device_put(x, local[0]))
        report["run_events"] = _events(log, start)
    report["run_value"] = np.asarray(y).tobytes().hex()
    report["run_device"] = next(iter(y.devices())).id
    client.wait_at_barrier("xlakit-placement-done", 60_000)
    return report


def main() -> None:
    mode = sys.argv[1]
    if mode == "placements":
        report = placements(sys.argv[2])
    elif mode == "distributed":
        report = distributed(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
