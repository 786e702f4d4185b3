"""The cold path of one bundle module, for :class:`xlakit.bundle.programs.Context`: deserialize the
``jax.export`` artifact, check it against the manifest, compile it fresh and store the program; and the
per-tensor signature comparison that names the tensor a program disagrees on.

Imported only when a module is compiled or a signature differs: a warm load (every program a hit) never needs
it, and importing it would cost the first result of a restart (``benchmarks/first_result.py``). Functions take the
load's ``Context`` (``ctx``) for the bundle path, manifest, device, environment, store and cache path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import ManifestMismatch, ModuleError
from xlakit.bundle.manifest import ModuleSpec, TensorSpec, dtype_name
from xlakit.bundle.reports import ModuleReport

__all__ = ["compile_module", "deserialize", "check_export", "compare", "compare_outputs"]


def compile_module(ctx: Any, spec: ModuleSpec, data: bytes, key: str, start: float, found: Any,
                   polymorphic: bool = False) -> tuple[ModuleReport, Any]:
    """Compile the module whose program ``.cache`` did not give (``found``: the cache path's decision) and store
    it: ``(report, compiled)``. Raises ModuleError (a bad artifact or a signature that disagrees with the
    manifest) and XLA's errors; :meth:`Context.load_module` turns them into an ``error`` report."""
    reason = _miss_reason(found, ctx.partition)
    exported = deserialize(ctx, spec, data)
    batch = spec.batch_size if polymorphic else None
    check_export(ctx, spec, exported, batch)
    read_s = time.perf_counter() - start
    t = time.perf_counter()
    compiled = _compile(ctx, exported, batch)
    compile_s = time.perf_counter() - t
    ctx._check_signature(spec, compiled)
    ctx.io.compiled(ctx.partition, key, f"{ctx.manifest.name}/{spec.stem}", compile_s)
    stored = _store(ctx, spec, key, compiled, compile_s, data)
    return ctx._report(spec, "miss", read_s, compile_s, len(data), stored, key, reason), compiled


def deserialize(ctx: Any, spec: ModuleSpec, data: bytes):
    """``jax.export.deserialize`` of the module's bytes. Raises ModuleError naming the file for foreign bytes."""
    import jax

    try:
        return jax.export.deserialize(bytearray(data))
    except Exception as e:  # noqa: BLE001 - flatbuffers raises assorted errors on foreign bytes
        raise ModuleError(ctx.path / spec.file, None, f"not a jax.export artifact (jax.export.deserialize "
                          f"failed: {type(e).__name__}: {e}); re-export the bundle") from None


def check_export(ctx: Any, spec: ModuleSpec, exported, batch: int | None = None) -> None:
    """Raise ModuleError unless ``exported`` runs on the load's device, on one device, as
    ``(weights: dict, *inputs)`` with the manifest's tensors (``batch``: a polymorphic module's batch size)."""
    file = ctx.path / spec.file
    platform = ctx.device.platform
    names = {platform} | ({"cuda", "rocm"} if platform == "gpu" else set())
    if not names & set(exported.platforms):
        raise ModuleError(file, "platforms", f"exported for {list(exported.platforms)}, but the device "
                          f"{ctx.device} is {platform!r}; re-export with platforms=[..., {platform!r}]")
    if exported.nr_devices != 1:
        raise ModuleError(file, "nr_devices", f"exported for {exported.nr_devices} devices; bundles hold "
                          "single-device programs")
    try:
        (args, kwargs) = exported.in_tree.unflatten(_concrete(exported.in_avals, batch))
    except Exception as e:  # noqa: BLE001
        raise ModuleError(file, "in_tree", f"unexpected signature ({e})") from None
    if kwargs or not args or not isinstance(args[0], dict):
        raise ModuleError(file, "in_tree", f"expected (weights: dict, *inputs), got {exported.in_tree}")
    compare(ctx, spec, args[0], args[1:])


def compare(ctx: Any, spec: ModuleSpec, weights: Mapping[str, Any], inputs: Sequence[Any]) -> None:
    """Raise ModuleError naming the first weight or input whose names, shape or dtype differ from the manifest's."""
    file = ctx.path / spec.file
    want = {s.name: s for s in ctx.manifest.weights}
    if set(weights) != set(want):
        missing, extra = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
        field = f"weights.{(missing or extra)[0]}"
        raise ModuleError(file, field, f"the module's weights disagree with manifest.json: missing {missing[:5]}, "
                          f"not in the manifest {extra[:5]}")
    for name, spec_w in want.items():
        _same(file, f"weights.{name}", weights[name], spec_w, None)
    if len(inputs) != len(ctx.manifest.inputs):
        raise ModuleError(file, "inputs", f"the module takes {len(inputs)} input(s), manifest.json lists "
                          f"{len(ctx.manifest.inputs)}")
    for i, (aval, spec_i) in enumerate(zip(inputs, ctx.manifest.inputs, strict=True)):
        _same(file, f"inputs[{i}] ({spec_i.name})", aval, spec_i, spec.batch_size)


def compare_outputs(ctx: Any, spec: ModuleSpec, outs: Sequence[Any]) -> None:
    """Raise ModuleError naming the first output whose count, shape or dtype differs from the manifest's."""
    file = ctx.path / spec.file
    want = ctx.manifest.outputs[spec.variant]
    if len(outs) != len(want):
        raise ModuleError(file, f"outputs.{spec.variant}", f"the module returns {len(outs)} array(s), "
                          f"manifest.json lists {len(want)}")
    for i, (aval, spec_o) in enumerate(zip(outs, want, strict=True)):
        _same(file, f"outputs.{spec.variant}[{i}] ({spec_o.name})", aval, spec_o, spec.batch_size)


def _compile(ctx: Any, exported, batch: int | None = None):
    """A fresh XLA compile (never JAX's in-process memo or any persistent cache: the stored program must be
    one that never ran; see :mod:`xlakit._jax.fresh`)."""
    import jax
    from jax.sharding import SingleDeviceSharding

    from xlakit._jax.export_compat import no_source_locations
    from xlakit._jax.fresh import compile_fresh

    sharding = SingleDeviceSharding(ctx.device)
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
             for a in _concrete(exported.in_avals, batch)]
    args, kwargs = exported.in_tree.unflatten(avals)
    # The module was exported without source lines; lowered here with them, its ops would carry this call's
    # stack, and memory attribution would charge the model's bytes to the line that called load_bundle.
    from xlakit._jax.retrace import quiet_recompiles

    with no_source_locations(), quiet_recompiles():  # a trace per size is the load's own: no user recompile
        lowered = jax.jit(exported.call).lower(*args, **kwargs)
    return compile_fresh(lowered)


def _store(ctx: Any, spec: ModuleSpec, key: str, compiled, compile_s: float, data: bytes):
    """Publish the program through the cache path; the Decision (``store``, ``store_error`` or ``skip``)
    carries the bytes written and the compiled memory."""
    from xlakit._jax import executables, serialize
    from xlakit.cache.entry import KIND_JAX, loadable_fields, program_header, runtime_fields

    name = f"{ctx.manifest.name}/{spec.stem}"
    try:
        payload, placement = serialize.serialize_compiled(compiled)
    except serialize.NotSerializable as e:
        return ctx.io.skip(ctx.partition, key, name, f"not serializable: {e.reason}", compile_s)
    executable = compiled.runtime_executable()
    header = program_header(name=name, compile_s=compile_s, environment=ctx.env.to_dict(), key_parts=None,
                            memory=executables.memory_stats(executable), module_text=None, kind=KIND_JAX,
                            runtime=runtime_fields(executable, ctx.env))
    header.update(loadable_fields(payload, placement), bundle=ctx.manifest.name, module_file=spec.file,
                  module_sha256=_sha_of(key), module_bytes=len(data), variant=spec.variant,
                  batch_size=spec.batch_size)
    if ctx.store_refused is not None:  # .cache refused (the load already warned once): record why
        return ctx.io.failed("store_error", ctx.partition, key, name, ctx.store_refused)
    if not ctx.path.is_dir():  # deleted while loading in the background: never create it again
        return ctx.io.failed("store_error", ctx.partition, key, name,
                             f"{ctx.path} no longer exists; the program was not stored")
    ctx.io.ensure_partition(ctx.partition, ctx.env.to_dict())
    return ctx.io.publish(ctx.partition, key, header, payload)


def _same(file: Path, field: str, aval: Any, spec: TensorSpec, batch_size: int | None) -> None:
    shape = tuple(aval.shape)
    dtype = dtype_name(aval.dtype)
    want = spec.concrete(batch_size) if batch_size is not None else tuple(spec.shape)
    if shape != want or dtype != spec.dtype:
        got = f"{dtype}[{','.join(map(str, shape))}]"
        raise ManifestMismatch(file, field, f"the module has {got}, manifest.json says "
                          f"{spec.describe(batch_size) if batch_size is not None else spec.describe()}")


def _concrete(avals: Sequence[Any], batch: int | None) -> list[Any]:
    """``avals`` with every symbolic dimension (only a polymorphic module's batch axis) set to ``batch``."""
    import jax

    if batch is None:
        return list(avals)
    out = []
    for a in avals:
        shape = tuple(d if isinstance(d, int) else batch for d in a.shape)
        out.append(jax.ShapeDtypeStruct(shape, a.dtype) if shape != tuple(a.shape) else a)
    return out


def _sha_of(key: str) -> str:
    """The module SHA-256 inside a program key (``<stem>-<sha>`` or ``<stem>-<sha>-b<n>``)."""
    parts = key.split("-")
    return parts[-2] if parts[-1].startswith("b") and parts[-1][1:].isdigit() else parts[-1]


def _miss_reason(found, partition: str) -> str:
    """The report's reason for a module that was compiled, from the cache's decision."""
    if found.kind == "miss" and found.reason and found.reason.startswith("no entry"):
        return f"no program compiled from this module in partition {partition}"
    if found.kind == "corrupt":
        return f"corrupt entry ({found.reason})"
    if found.kind == "load_error":
        return f"stored program could not be loaded ({found.reason})"
    return found.reason or f"no program compiled from this module in partition {partition}"
