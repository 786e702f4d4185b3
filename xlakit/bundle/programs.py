"""Loading one module of a bundle, for :mod:`xlakit.bundle.loader`: look up its program in ``.cache`` and load
it (the warm path), or hand the module to :mod:`xlakit.bundle.compiling` (the cold path: deserialize, check,
compile and store), with the signature checked against the manifest either way. Also the batch-size instances
of a shape-polymorphic module (compiled on demand for the exact batch of a call) and the stand-in store used
when ``.cache`` must not be used (a symlink). Every action is an event (see :mod:`xlakit.bundle.loader`).

The cold path and the per-tensor signature comparison live in their own module so that a warm load imports
neither (each module imported costs the first result of a restart; ``benchmarks/first_result.py``).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
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
        #: Why ``.cache`` is refused (a :class:`NullStore` stands in for it: nothing is stored), else None.
        self.store_refused: str | None = store.reason if isinstance(store, NullStore) else None
        self.expect = expectations(env)
        # The one fetch/publish path: hit/miss/corrupt/store events and decisions. Its events come from loading
        # threads or load_bundle, never from inside a JAX trace: no stack attribution (origin None).
        self.io = CachePath(store, log, attribute=False)
        self.errors: dict[str, BundleError] = {}
        #: Called on a loading thread when it hands work to XLA, which runs it without the GIL: an entry that
        #: passed every check goes to be loaded, or a module goes to be compiled.
        #: :class:`~xlakit.bundle.background.ProgramLoader` gives the calling thread its turn there.
        self.on_xla: Callable[[], None] | None = None
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
                      origin=None, **fields)

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
            if self.on_xla is not None:
                self.on_xla()
            compiled = serialize.load_compiled(payload, placement, [self.device])
            try:
                self._check_signature(spec, compiled)
            except ModuleError as e:
                # The manifest or the stored program is wrong; the module file decides (only on this rare path).
                # A module that disagrees with the manifest fails with its own error (passed through, the entry
                # kept); a module that agrees means the entry holds another program: it is removed and compiled.
                from xlakit.bundle import compiling

                compiling.check_export(self, spec, compiling.deserialize(self, spec, data),
                                       spec.batch_size if polymorphic else None)
                raise StoredProgramMismatch(f"the stored program is not this module's ({e.problem}; the module "
                                            "file agrees with manifest.json)") from None
            return compiled

        # CachePath records hit / miss / corrupt / load_error (name "<bundle>/<stem>") and, when the stored
        # program does not load, removes the entry so the module is compiled below.
        compiled, found = self.io.fetch(self.partition, key, name=f"{self.manifest.name}/{spec.stem}", load=place,
                                        expect=self.expect, reraise=(BundleError,))
        if compiled is not None:
            return self._report(spec, "hit", found.load_s or 0.0, None, len(data), found, key, None), compiled
        if self.on_xla is not None:
            self.on_xla()
        from xlakit.bundle import compiling  # the cold path: imported only when a module is compiled

        return compiling.compile_module(self, spec, data, key, start, found, polymorphic)

    def _report(self, spec, status, load_s, compile_s, size, decision, key, reason) -> ModuleReport:
        """The module's report row; sizes and compiled memory come from the cache's decision (no re-read)."""
        ok = decision is not None and decision.kind in ("hit", "store")
        # The memory columns are computed from the raw mapping when a report is read, not per load.
        return ModuleReport(spec.file, spec.variant, spec.batch_size, status, load_s, compile_s, size,
                            decision.bytes if ok else None, key=key, reason=reason,
                            memory=decision.memory if ok else None)

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
        from xlakit.bundle import compiling  # the slow path: raises naming the tensor that differs

        compiling.compare(self, spec, weights, args[1:])
        compiling.compare_outputs(self, spec, outs)

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


class StoredProgramMismatch(Exception):
    """A verified ``.cache`` entry whose program's signature is not its module's: the cache path removes the
    entry (``load_error``) and the module is compiled."""
