"""Loading and compiling one module of a bundle, for :mod:`xlakit.bundle.loader`: look up its program in
``.cache``, load it (the warm path) or deserialize, check, compile and store it (the cold path), with the
signature checked against the manifest either way. Also the batch-size instances of a shape-polymorphic
module (compiled on demand for the exact batch of a call) and the stand-in store used when ``.cache``
must not be used (a symlink). Every action is an event (see :mod:`xlakit.bundle.loader`).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.hashes import (
    Drop,
    RecordState,
    plan_drops,
    program_key,
    sha256_hex,
    write_record,
)
from xlakit.bundle.manifest import ModuleSpec, TensorSpec, dtype_name
from xlakit.bundle.reports import ModuleReport

__all__ = ["Context", "NullStore"]


class Context:
    """What every module load shares; ``load_module`` runs in worker threads."""

    def __init__(self, path, manifest, device, env, partition, store, log) -> None:
        from xlakit._jax.environment import expectations
        from xlakit.cache.path import CachePath

        self.path, self.manifest, self.device, self.env = path, manifest, device, env
        self.partition, self.store, self.log = partition, store, log
        self.expect = expectations(env)
        self.io = CachePath(store, log)  # the one fetch/publish path: hit/miss/corrupt/store events and decisions
        self.errors: dict[str, BundleError] = {}
        self._lock = threading.Lock()
        # The manifest's signature as plain tuples, built once per load (not per tensor per program): a
        # program's signature is compared with one ``==`` and only a mismatch runs the per-tensor check that
        # names the field (see _check_signature).
        self._want_weights = tuple((s.name, tuple(s.shape), s.dtype) for s in sorted(manifest.weights,
                                                                                      key=lambda s: s.name))
        self._want_io: dict[tuple[str, int | None], tuple] = {}

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
        key = program_key(spec.file, sha if sha is not None else sha256_hex(data))
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
            self.io.failed("load_error", self.partition, key, f"{self.manifest.name}/{spec.stem}", reason)
            return ModuleReport(spec.file, spec.variant, spec.batch_size, "error", time.perf_counter() - start,
                                module_bytes=len(data), key=key, reason=reason), None

    def _fail(self, spec: ModuleSpec, err: BundleError, key, size, start) -> ModuleReport:
        with self._lock:
            self.errors[spec.file] = err
        self.io.failed("load_error", self.partition, key, f"{self.manifest.name}/{spec.stem}", str(err))
        return ModuleReport(spec.file, spec.variant, spec.batch_size, "error", time.perf_counter() - start,
                            module_bytes=size, key=key, reason=str(err))

    def _load_or_compile(self, spec: ModuleSpec, data: bytes, key: str, start: float,
                         polymorphic: bool = False) -> tuple[ModuleReport, Any]:
        from xlakit._jax import serialize

        def place(header, payload):
            placement = serialize.Placement.from_dict(header["placement"])
            compiled = serialize.load_compiled(payload, placement, [self.device])
            try:
                self._check_signature(spec, compiled)
            except ModuleError as e:
                # The manifest or the stored program is wrong; the module file decides (only on this rare path).
                # A module that disagrees with the manifest fails with its own error (passed through, the entry
                # kept); a module that agrees means the entry holds another program: it is removed and compiled.
                self._check_export(spec, self._deserialize(spec, data), spec.batch_size if polymorphic else None)
                raise StoredProgramMismatch(f"the stored program is not this module's ({e.problem}; the module "
                                            "file agrees with manifest.json)") from None
            return compiled

        # CachePath records hit / miss / corrupt / load_error (name "<bundle>/<stem>") and, when the stored
        # program does not load, removes the entry so the module is compiled below.
        compiled, found = self.io.fetch(self.partition, key, name=f"{self.manifest.name}/{spec.stem}", load=place,
                                        expect=self.expect, reraise=(BundleError,))
        if compiled is not None:
            return self._report(spec, "hit", found.load_s or 0.0, None, len(data), found, key, None), compiled
        reason = _miss_reason(found, self.partition)

        exported = self._deserialize(spec, data)
        batch = spec.batch_size if polymorphic else None
        self._check_export(spec, exported, batch)
        read_s = time.perf_counter() - start
        t = time.perf_counter()
        compiled = self._compile(exported, batch)
        compile_s = time.perf_counter() - t
        self._check_signature(spec, compiled)
        self.io.compiled(self.partition, key, f"{self.manifest.name}/{spec.stem}", compile_s)
        stored = self._store(spec, key, compiled, compile_s, data)
        return self._report(spec, "miss", read_s, compile_s, len(data), stored, key, reason), compiled

    def _report(self, spec, status, load_s, compile_s, size, decision, key, reason) -> ModuleReport:
        """The module's report row; sizes and compiled memory come from the cache's decision (no re-read)."""
        ok = decision is not None and decision.kind in ("hit", "store")
        # The memory columns are computed from the raw mapping when a report is read, not per load.
        return ModuleReport(spec.file, spec.variant, spec.batch_size, status, load_s, compile_s, size,
                            decision.bytes if ok else None, key=key, reason=reason,
                            memory=decision.memory if ok else None)

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
        """A fresh XLA compile (never JAX's in-process memo or any persistent cache: the stored program must be
        one that never ran; see :mod:`xlakit._jax.fresh`)."""
        import jax
        from jax.sharding import SingleDeviceSharding

        from xlakit._jax.fresh import compile_fresh

        sharding = SingleDeviceSharding(self.device)
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
                 for a in _concrete(exported.in_avals, batch)]
        args, kwargs = exported.in_tree.unflatten(avals)
        return compile_fresh(jax.jit(exported.call).lower(*args, **kwargs))

    def _store(self, spec: ModuleSpec, key: str, compiled, compile_s: float, data: bytes):
        """Publish the program through the cache path; the Decision (``store``, ``store_error`` or ``skip``)
        carries the bytes written and the compiled memory."""
        from xlakit._jax import executables, serialize
        from xlakit.cache.entry import KIND_JAX, program_header

        name = f"{self.manifest.name}/{spec.stem}"
        try:
            payload, placement = serialize.serialize_compiled(compiled)
        except serialize.NotSerializable as e:
            return self.io.skip(self.partition, key, name, f"not serializable: {e.reason}", compile_s)
        header = program_header(name=name, compile_s=compile_s, environment=self.env.to_dict(), key_parts=None,
                                memory=executables.memory_stats(compiled.runtime_executable()), module_text=None,
                                kind=KIND_JAX)
        header.update(placement=placement.to_dict(), bundle=self.manifest.name, module_file=spec.file,
                      module_sha256=_sha_of(key), module_bytes=len(data), variant=spec.variant,
                      batch_size=spec.batch_size)
        if isinstance(self.store, NullStore):  # .cache refused (the load already warned once): record why
            return self.io.failed("store_error", self.partition, key, name, self.store.reason)
        if not self.path.is_dir():  # deleted while loading in the background: never create it again
            return self.io.failed("store_error", self.partition, key, name,
                                  f"{self.path} no longer exists; the program was not stored")
        self.io.ensure_partition(self.partition, self.env.to_dict())
        return self.io.publish(self.partition, key, header, payload)

    # -- signature checks (both paths) ---------------------------------------------------------------------
    def _check_signature(self, spec: ModuleSpec, compiled) -> None:
        """Raise :class:`ModuleError` naming the first tensor (weight, input or output) whose shape or dtype
        differs from the manifest's, or a program that does not take ``(weights, *inputs)``.

        The whole signature is compared at once with the tuples built in ``__init__`` (per load) and
        :meth:`_want_signature` (per variant and batch size); only a mismatch runs the per-tensor comparison
        that builds the precise message. Both compare the same names, shapes and dtype names."""
        import jax

        (args, kwargs) = compiled.args_info
        if kwargs or not args or not isinstance(args[0], dict):
            raise ModuleError(self.path / spec.file, "in_tree", "the program does not take (weights, *inputs)")
        outs = jax.tree_util.tree_leaves(compiled.out_info)
        weights = args[0]
        got_weights = tuple((name, tuple(weights[name].shape), _dtype_name(weights[name].dtype))
                            for name in sorted(weights))
        got_io = (tuple((tuple(a.shape), _dtype_name(a.dtype)) for a in args[1:]),
                  tuple((tuple(a.shape), _dtype_name(a.dtype)) for a in outs))
        if got_weights == self._want_weights and got_io == self._want_signature(spec):
            return
        self._compare(spec, weights, args[1:])  # the slow path: raises naming the tensor that differs
        self._compare_outputs(spec, outs)

    def _want_signature(self, spec: ModuleSpec) -> tuple:
        """``(inputs, outputs)`` of ``spec`` as ``((shape, dtype name), ...)`` tuples, batch axis concrete;
        built once per (variant, batch size). An unknown variant gives a tuple no program matches (the slow
        path then names it)."""
        key = (spec.variant, spec.batch_size)
        want = self._want_io.get(key)
        if want is None:
            def shape(s: TensorSpec) -> tuple:
                return s.concrete(spec.batch_size) if spec.batch_size is not None else tuple(s.shape)

            outs = self.manifest.outputs.get(spec.variant)
            want = (tuple((shape(s), s.dtype) for s in self.manifest.inputs),
                    tuple((shape(s), s.dtype) for s in outs) if outs is not None else None)
            self._want_io[key] = want  # a race only builds the same tuple twice
        return want

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
        for i, (aval, spec_i) in enumerate(zip(inputs, self.manifest.inputs, strict=True)):
            _same(file, f"inputs[{i}] ({spec_i.name})", aval, spec_i, spec.batch_size)

    def _compare_outputs(self, spec: ModuleSpec, outs: Sequence[Any]) -> None:
        file = self.path / spec.file
        want = self.manifest.outputs[spec.variant]
        if len(outs) != len(want):
            raise ModuleError(file, f"outputs.{spec.variant}", f"the module returns {len(outs)} array(s), "
                              f"manifest.json lists {len(want)}")
        for i, (aval, spec_o) in enumerate(zip(outs, want, strict=True)):
            _same(file, f"outputs.{spec.variant}[{i}] ({spec_o.name})", aval, spec_o, spec.batch_size)


def _same(file: Path, field: str, aval: Any, spec: TensorSpec, batch_size: int | None) -> None:
    shape = tuple(aval.shape)
    dtype = dtype_name(aval.dtype)
    want = spec.concrete(batch_size) if batch_size is not None else tuple(spec.shape)
    if shape != want or dtype != spec.dtype:
        got = f"{dtype}[{','.join(map(str, shape))}]"
        raise ModuleError(file, field, f"the module has {got}, manifest.json says "
                          f"{spec.describe(batch_size) if batch_size is not None else spec.describe()}")


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    """:func:`~xlakit.bundle.manifest.dtype_name`, remembered per dtype object (a program has one per tensor,
    and a load sees the same few dtypes hundreds of times)."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        name = _DTYPE_NAMES[dtype] = dtype_name(dtype)
        return name
    except TypeError:  # an unhashable dtype-like object: ask each time
        return dtype_name(dtype)


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
    stored, path, size_bytes, evicted = False, None, None, ()

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


def _miss_reason(found, partition: str) -> str:
    """The report's reason for a module that was compiled, from the cache's decision."""
    if found.kind == "miss" and found.reason and found.reason.startswith("no entry"):
        return f"no program compiled from this module in partition {partition}"
    if found.kind == "corrupt":
        return f"corrupt entry ({found.reason})"
    if found.kind == "load_error":
        return f"stored program could not be loaded ({found.reason})"
    return found.reason or f"no program compiled from this module in partition {partition}"



class StoredProgramMismatch(Exception):
    """A verified ``.cache`` entry whose program's signature is not its module's: the cache path removes the
    entry (``load_error``) and the module is compiled."""
