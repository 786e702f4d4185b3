"""Loading and compiling one module of a bundle, for :mod:`xlakit.bundle.loader`: look up its program in
``.cache``, load it (the warm path) or deserialize, check, compile and store it (the cold path), with the
signature checked against the manifest either way. Also the batch-size instances of a shape-polymorphic
module (compiled on demand for the exact batch of a call) and the stand-in store used when ``.cache``
must not be used (a symlink). Every action is an event (see :mod:`xlakit.bundle.loader`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.hashes import Drop, RecordState, plan_drops, program_key, write_record
from xlakit.bundle.manifest import ModuleSpec, TensorSpec, dtype_name
from xlakit.bundle.reports import ModuleReport

__all__ = ["Context", "NullStore"]


class _PassThrough:
    """Compiles routed here find nothing and store nothing (the stored program must be a fresh compile:
    re-serializing an executable that was itself loaded from a cache is unreliable, see xlakit.cache)."""

    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        return None, None

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):
        return None


class _FreshCompiles:
    """Installs xlakit's compile hooks on the first miss of a load and removes them at its end, so every
    compile of the load bypasses JAX's persistent cache and xlakit's transparent mode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acquired = False
        self._usable = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._acquired:
                from xlakit._jax import hooks

                hooks.release()
                self._acquired = False

    @contextlib.contextmanager
    def fresh(self):
        from xlakit._jax import hooks

        with self._lock:
            if not self._acquired and self._usable:
                try:
                    hooks.acquire()
                    self._acquired = True
                except Exception:  # noqa: BLE001 - an unsupported JAX: compile without the bypass
                    self._usable = False
        if not self._acquired:
            yield
            return
        with hooks.route(_PassThrough()):
            yield


class Context:
    """What every module load shares; ``load_module`` runs in worker threads."""

    def __init__(self, path, manifest, device, env, partition, store, log) -> None:
        from xlakit._jax.handler import _expectations

        self.path, self.manifest, self.device, self.env = path, manifest, device, env
        self.partition, self.store, self.log = partition, store, log
        self.expect = _expectations(env)
        self.compiles = _FreshCompiles()
        self.errors: dict[str, BundleError] = {}
        self._partition_written = False
        self._lock = threading.Lock()

    def emit(self, kind: str, stem: str, key: str | None, **fields: Any) -> None:
        partition = fields.pop("partition", self.partition)
        self.log.emit(kind, name=f"{self.manifest.name}/{stem}", key=key, partition=partition, source="xlakit",
                      **fields)

    # -- module-hash record -------------------------------------------------------------------------------
    def reconcile(self, record: RecordState, current: dict[str, str | None]) -> list[Drop]:
        drops = plan_drops(self.store, record, current)
        for d in drops:
            if self.store.remove(d.partition, d.key):
                stem = (d.module or d.key).removesuffix(".jaxexp")
                self.emit("evict", stem, d.key, partition=d.partition, reason=d.reason)
        if record.status == "unreadable":
            self.emit("corrupt", "module_hashes.json", None, partition=None,
                      reason=f"{record.path}: {record.reason}; rewritten from the current modules, not trusted")
            warnings.warn(f"{record.path} was unreadable ({record.reason}); it was rewritten from the current module "
                          f"files and {len(drops)} program(s) not compiled from them were removed", RuntimeWarning,
                          stacklevel=3)
        known = {f: h for f, h in current.items() if h}
        if isinstance(self.store, NullStore):
            return drops
        if record.status != "ok" or dict(record.hashes) != known:
            try:
                write_record(self.store.root, known)
            except OSError as e:  # a read-only bundle still loads; it just cannot remember
                self.emit("store_error", "module_hashes.json", None, partition=None,
                          reason=f"could not write {record.path}: {e}")
        return drops

    # -- one module ---------------------------------------------------------------------------------------
    def load_module(self, spec: ModuleSpec, data: bytes | BundleError, sha: str | None) -> tuple[ModuleReport, Any]:
        """Load or compile one module. Never raises: failures become an ``error`` report."""
        start = time.perf_counter()
        if isinstance(data, BundleError):
            return self._fail(spec, data, None, None, start), None
        key = program_key(spec.file, sha)
        try:
            return self._load_or_compile(spec, data, key, start)
        except BundleError as e:
            return self._fail(spec, e, key, len(data), start), None
        except Exception as e:  # noqa: BLE001 - XLA/JAX failures: one module fails, the process goes on
            err = ModuleError(self.path / spec.file, None, f"{type(e).__name__}: {e}")
            return self._fail(spec, err, key, len(data), start), None

    def load_instance(self, spec: ModuleSpec, data: bytes, sha: str) -> tuple[ModuleReport, Any]:
        """Load or compile the program for ``spec.batch_size`` rows from the shape-polymorphic module
        ``spec.file`` (stored under :func:`~xlakit.bundle.hashes.program_key` with the batch size). Never
        raises: a failure is an ``error`` report (not recorded in :attr:`errors`: the module itself loaded)."""
        start = time.perf_counter()
        key = program_key(spec.file, sha, spec.batch_size)
        try:
            return self._load_or_compile(spec, data, key, start, polymorphic=True)
        except Exception as e:  # noqa: BLE001 - one batch size fails; the bundle stays usable
            reason = str(e) if isinstance(e, BundleError) else f"{type(e).__name__}: {e}"
            self.emit("load_error", spec.stem, key, reason=reason)
            return ModuleReport(spec.file, spec.variant, spec.batch_size, "error", time.perf_counter() - start,
                                module_bytes=len(data), key=key, reason=reason), None

    def _fail(self, spec: ModuleSpec, err: BundleError, key, size, start) -> ModuleReport:
        with self._lock:
            self.errors[spec.file] = err
        self.emit("load_error", spec.stem, key, reason=str(err))
        return ModuleReport(spec.file, spec.variant, spec.batch_size, "error", time.perf_counter() - start,
                            module_bytes=size, key=key, reason=str(err))

    def _load_or_compile(self, spec: ModuleSpec, data: bytes, key: str, start: float,
                         polymorphic: bool = False) -> tuple[ModuleReport, Any]:
        from xlakit._jax import serialize

        found = self.store.get(self.partition, key, expect=self.expect)
        reason = None
        if found.status == "hit":
            try:
                placement = serialize.Placement.from_dict(found.header["placement"])
                compiled = serialize.load_compiled(found.payload, placement, [self.device])
            except Exception as e:  # noqa: BLE001 - the cache fails open: drop the entry, compile instead
                self.store.remove(self.partition, key)
                reason = f"stored program could not be loaded ({type(e).__name__}: {e}); removed and recompiled"
                self.emit("load_error", spec.stem, key, reason=reason, duration_s=time.perf_counter() - start)
            else:
                self._check_signature(spec, compiled)
                load_s = time.perf_counter() - start
                recorded = float(found.header.get("compile_s") or 0.0)
                self.emit("hit", spec.stem, key, duration_s=load_s, bytes=found.header.get("payload_bytes"),
                          saved_s=max(0.0, recorded - load_s))
                return self._report(spec, "hit", load_s, None, len(data), found.header, key, None), compiled
        elif found.status in ("corrupt", "unauthenticated", "mismatch"):
            reason = f"{found.status} entry ({found.reason}); moved to {found.quarantined_to}"
            if found.status != "mismatch":
                self.emit("corrupt", spec.stem, key, reason=reason)
        elif found.status == "error":
            reason = f"could not read the store: {found.reason}"
            self.emit("load_error", spec.stem, key, reason=reason)
        reason = reason or f"no program compiled from this module in partition {self.partition}"
        self.emit("miss", spec.stem, key, reason=reason, duration_s=time.perf_counter() - start)

        exported = self._deserialize(spec, data)
        batch = spec.batch_size if polymorphic else None
        self._check_export(spec, exported, batch)
        read_s = time.perf_counter() - start
        t = time.perf_counter()
        compiled = self._compile(exported, batch)
        compile_s = time.perf_counter() - t
        self._check_signature(spec, compiled)
        self.emit("compile", spec.stem, key, duration_s=compile_s)
        header = self._store(spec, key, compiled, compile_s, data)
        return self._report(spec, "miss", read_s, compile_s, len(data), header, key, reason), compiled

    def _report(self, spec, status, load_s, compile_s, size, header, key, reason) -> ModuleReport:
        mem = _memory(header)
        return ModuleReport(spec.file, spec.variant, spec.batch_size, status, load_s, compile_s, size,
                            (header or {}).get("payload_bytes"), mem.get("argument_bytes"), mem.get("output_bytes"),
                            mem.get("temp_bytes"), mem.get("footprint_bytes"), key, reason)

    # -- the cold path --------------------------------------------------------------------------------------
    def _deserialize(self, spec: ModuleSpec, data: bytes):
        import jax

        try:
            return jax.export.deserialize(bytearray(data))
        except Exception as e:  # noqa: BLE001 - flatbuffers raises assorted errors on foreign bytes
            raise ModuleError(self.path / spec.file, None, f"not a jax.export artifact (jax.export.deserialize "
                              f"failed: {type(e).__name__}: {e}); re-export the bundle") from None

    def _check_export(self, spec: ModuleSpec, exported, batch: int | None = None) -> None:
        file = self.path / spec.file
        platform = self.device.platform
        names = {platform} | ({"cuda", "rocm"} if platform == "gpu" else set())
        if not names & set(exported.platforms):
            raise ModuleError(file, "platforms", f"exported for {list(exported.platforms)}, but the device "
                              f"{self.device} is {platform!r}; re-export with platforms=[..., {platform!r}]")
        if exported.nr_devices != 1:
            raise ModuleError(file, "nr_devices", f"exported for {exported.nr_devices} devices; bundles hold "
                              "single-device programs")
        try:
            (args, kwargs) = exported.in_tree.unflatten(_concrete(exported.in_avals, batch))
        except Exception as e:  # noqa: BLE001
            raise ModuleError(file, "in_tree", f"unexpected signature ({e})") from None
        if kwargs or not args or not isinstance(args[0], dict):
            raise ModuleError(file, "in_tree", f"expected (weights: dict, *inputs), got {exported.in_tree}")
        self._compare(spec, args[0], args[1:])

    def _compile(self, exported, batch: int | None = None):
        import jax
        from jax.sharding import SingleDeviceSharding

        sharding = SingleDeviceSharding(self.device)
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
                 for a in _concrete(exported.in_avals, batch)]
        args, kwargs = exported.in_tree.unflatten(avals)
        lowered = jax.jit(exported.call).lower(*args, **kwargs)
        with self.compiles.fresh():
            return lowered.compile()

    def _store(self, spec: ModuleSpec, key: str, compiled, compile_s: float, data: bytes) -> dict | None:
        from xlakit._jax import serialize
        from xlakit._jax.handler import _memory_stats

        try:
            payload, placement = serialize.serialize_compiled(compiled)
        except serialize.NotSerializable as e:
            self.emit("skip", spec.stem, key, reason=f"not serializable: {e.reason}")
            return None
        with self._lock:
            if not self._partition_written:
                self.store.write_partition_info(self.partition, self.env.to_dict())
                self._partition_written = True
        header = {"name": f"{self.manifest.name}/{spec.stem}", "payload_kind": "jax-compiled-pickle",
                  "placement": placement.to_dict(), "environment": self.env.to_dict(), "compile_s": compile_s,
                  "memory": _memory_stats(compiled.runtime_executable()), "bundle": self.manifest.name,
                  "module_file": spec.file, "module_sha256": _sha_of(key), "module_bytes": len(data),
                  "variant": spec.variant, "batch_size": spec.batch_size}
        t = time.perf_counter()
        result = self.store.put(self.partition, key, header, payload)
        if not result.stored:
            self.emit("store_error", spec.stem, key, reason=result.reason, duration_s=time.perf_counter() - t)
            return header
        self.emit("store", spec.stem, key, bytes=result.size_bytes, duration_s=time.perf_counter() - t)
        # payload_bytes is set by the envelope when sealing; read it back for the report
        from xlakit.store import read_header_file

        try:
            return read_header_file(result.path)
        except Exception:  # noqa: BLE001 - the report loses one number, nothing else
            return header

    # -- signature checks (both paths) ---------------------------------------------------------------------
    def _check_signature(self, spec: ModuleSpec, compiled) -> None:
        import jax

        (args, kwargs) = compiled.args_info
        if kwargs or not args or not isinstance(args[0], dict):
            raise ModuleError(self.path / spec.file, "in_tree", "the program does not take (weights, *inputs)")
        self._compare(spec, args[0], args[1:])
        outs = jax.tree_util.tree_leaves(compiled.out_info)
        self._compare_outputs(spec, outs)

    def _compare(self, spec: ModuleSpec, weights: Mapping[str, Any], inputs: Sequence[Any]) -> None:
        file = self.path / spec.file
        want = {s.name: s for s in self.manifest.weights}
        if set(weights) != set(want):
            missing, extra = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
            field = f"weights.{(missing or extra)[0]}"
            raise ModuleError(file, field, f"the module's weights disagree with manifest.json: missing {missing[:5]}, "
                              f"not in the manifest {extra[:5]}")
        for name, spec_w in want.items():
            _same(file, f"weights.{name}", weights[name], spec_w, None)
        if len(inputs) != len(self.manifest.inputs):
            raise ModuleError(file, "inputs", f"the module takes {len(inputs)} input(s), manifest.json lists "
                              f"{len(self.manifest.inputs)}")
        for i, (aval, spec_i) in enumerate(zip(inputs, self.manifest.inputs)):
            _same(file, f"inputs[{i}] ({spec_i.name})", aval, spec_i, spec.batch_size)

    def _compare_outputs(self, spec: ModuleSpec, outs: Sequence[Any]) -> None:
        file = self.path / spec.file
        want = self.manifest.outputs[spec.variant]
        if len(outs) != len(want):
            raise ModuleError(file, f"outputs.{spec.variant}", f"the module returns {len(outs)} array(s), "
                              f"manifest.json lists {len(want)}")
        for i, (aval, spec_o) in enumerate(zip(outs, want)):
            _same(file, f"outputs.{spec.variant}[{i}] ({spec_o.name})", aval, spec_o, spec.batch_size)


def _same(file: Path, field: str, aval: Any, spec: TensorSpec, batch_size: int | None) -> None:
    import numpy as np

    shape = tuple(aval.shape)
    dtype = dtype_name(aval.dtype)
    want = spec.concrete(batch_size) if batch_size is not None else tuple(spec.shape)
    if shape != want or dtype != spec.dtype:
        got = f"{dtype}[{','.join(map(str, shape))}]"
        raise ModuleError(file, field, f"the module has {got}, manifest.json says "
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


class _Absent:
    status, reason, payload, header, quarantined_to = "absent", None, None, None, None


class _NotStored:
    stored, path, size_bytes = False, None, None

    def __init__(self, reason: str) -> None:
        self.reason = reason


class NullStore:
    """Stands in for ``.cache`` when it must not be used (a symlink, or not a folder): finds nothing,
    stores nothing, removes nothing, lists nothing. ``root`` is the path that was refused."""

    def __init__(self, root: Path, reason: str) -> None:
        self.root, self.reason = root, reason

    def get(self, partition, key, *, expect=None):
        return _Absent()

    def put(self, partition, key, header, payload):
        return _NotStored(self.reason)

    def remove(self, partition, key) -> bool:
        return False

    def write_partition_info(self, partition, info) -> bool:
        return False

    def partitions(self) -> list[str]:
        return []

    def entries(self, partition=None) -> list:
        return []

    def entry_path(self, partition, key) -> Path:
        return self.root / partition / f"{key}.xlk"


def _memory(header: Mapping[str, Any] | None) -> dict[str, int | None]:
    if not header or not header.get("memory"):
        return {}
    try:
        from xlakit.memory.compiled import compiled_memory

        m = compiled_memory(dict(header))
    except Exception:  # noqa: BLE001 - a malformed memory field costs the columns, not the load
        return {}
    return {"argument_bytes": m.argument_bytes, "output_bytes": m.output_bytes, "temp_bytes": m.temp_bytes,
            "footprint_bytes": m.footprint_bytes}
