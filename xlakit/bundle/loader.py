"""``load_bundle``: a bundle folder to callable compiled programs, from ``.cache`` when possible.

For each module (one variant at one batch size) the loader reads the file, hashes it, and looks up the key
``<module stem>-<SHA-256>`` (:func:`xlakit.bundle.hashes.program_key`) in ``<bundle>/.cache/<partition>/``,
an ordinary :class:`~xlakit.store.LocalStore` (SHA-256 + HMAC envelope, atomic publish, quarantine).

* **Hit** (the warm path): the stored payload is :func:`xlakit._jax.serialize.serialize_compiled`'s AOT
  pickle, loaded with :func:`~xlakit._jax.serialize.load_compiled` onto the requested device. Nothing is
  traced, lowered or compiled, and no Python model code is needed: read weights, read module bytes, hash,
  ``store.get``, ``load_compiled``.
* **Miss** (the cold path): ``jax.export.deserialize`` the module, check its platform and signature against
  the manifest, ``jax.jit(exported.call).lower(*avals).compile()`` on the device (bypassing every other
  cache, so the stored program is a fresh compile), and store the AOT pickle.
* **Fails open**: an entry that passes its checks but cannot be loaded is removed, recorded as a
  ``load_error`` event, and the module is compiled instead.

Before loading, the module-hash record drops programs of changed or vanished modules
(:mod:`xlakit.bundle.hashes`). Every action is an event in :func:`xlakit.events.log` (``source="xlakit"``,
``name="<bundle>/<module stem>"``): ``hit``, ``miss``, ``compile``, ``store``, ``store_error``, ``skip``,
``evict`` (a dropped program), ``corrupt``, ``load_error`` (including a module that fails).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from html import escape
from pathlib import Path
from typing import Any

from xlakit import events as _events
from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.hashes import Drop, RecordState, plan_drops, program_key, read_record, sha256_hex, write_record
from xlakit.bundle.manifest import CACHE_DIR, DEFAULT_VARIANT, Manifest, ModuleSpec, TensorSpec
from xlakit.bundle.progress import progress_bar
from xlakit.bundle.weights import check_weights, read_weights

__all__ = ["load_bundle", "LoadedBundle", "ModuleReport", "DEFAULT_MAX_WORKERS"]

# Threads that load/compile modules at once when max_workers is None. XLA releases the GIL while it
# deserializes (a pure-Python thread kept ~half its speed during Client.deserialize_executable on 2 busy
# cores) and while it compiles. Measured on the reference machine (2-core AMD EPYC, jaxlib 0.10.2 CPU,
# benchmarks/bundle_warm_start.py's 12 programs, fresh processes, 1/2/4 workers interleaved, shared with
# other jobs at load average ~3): warm load_bundle median 0.277 / 0.281 / 0.287 s (min 0.258 / 0.243 /
# 0.260 s), within noise on busy cores (XLA deserializing each program, 10-100 ms apiece here, dominates);
# cold (compile everything) median 13.5 / 8.2 / 9.1 s over 3 runs each, 2 threads best and
# steadiest. So one thread per core (more only adds contention), at most 4: the gain flattens once cores
# are busy.
DEFAULT_MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))

_REPORT_COLUMNS = ("module", "variant", "batch_size", "status", "load_s", "compile_s", "module_bytes",
                   "program_bytes", "argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes", "reason")


@dataclass(frozen=True)
class ModuleReport:
    """How one module was loaded.

    Attributes:
      module: file name (``model.b8.jaxexp``); variant, batch_size: what it computes.
      status: ``"hit"`` (loaded from ``.cache``), ``"miss"`` (compiled now and stored) or ``"error"``.
      load_s: seconds spent reading and hashing the module file, looking it up and, on a hit, loading the
        executable (``time.perf_counter``); on a miss also deserializing the export and checking it.
      compile_s: seconds lowering and compiling on a miss (``time.perf_counter``); None on a hit or error.
      module_bytes: size of the module file; None when it is missing.
      program_bytes: compressed size of the stored program (envelope header ``payload_bytes``); None when
        no program was stored or loaded.
      argument_bytes, output_bytes, temp_bytes, footprint_bytes: compiled memory per run
        (:class:`xlakit.memory.CompiledMemory`: XLA's ``CompiledMemoryStats``, recorded when compiled);
        None where not reported.
      key: the program's store key; None when the module could not be read.
      reason: why a miss (no program, corrupt entry, load failure) or the error; None on a hit.
    """

    module: str
    variant: str
    batch_size: int
    status: str
    load_s: float
    compile_s: float | None = None
    module_bytes: int | None = None
    program_bytes: int | None = None
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    footprint_bytes: int | None = None
    key: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __repr__(self) -> str:
        extra = f", compile {self.compile_s:.3f} s" if self.compile_s is not None else ""
        why = f", reason: {self.reason}" if self.reason else ""
        return f"ModuleReport({self.module}: {self.status}, load {self.load_s:.3f} s{extra}{why})"


class LoadedBundle:
    """A bundle's compiled programs and weights on one device, callable like the original function.

    ``loaded(x)`` (or ``loaded(x0, x1)``, or ``loaded(x=...)``) picks the smallest loaded batch size of the
    variant that fits the inputs' batch, pads the inputs with zeros up to it, runs the program, and returns
    the outputs (the original function's pytree) with batched outputs cut back to the inputs' batch.

    Attributes:
      path: the bundle folder. manifest: its :class:`~xlakit.bundle.manifest.Manifest`.
      device: the ``jax.Device`` the programs and weights are on.
      weights: tensor name -> ``jax.Array`` on ``device``.
      programs: ``(variant, batch_size)`` -> ``jax.stages.Compiled``, for every module that loaded.
      reports: one :class:`ModuleReport` per module, in manifest order.
      errors: module file -> :class:`~xlakit.bundle.errors.BundleError` for modules that failed.
      dropped: programs removed because their module changed or disappeared (:class:`~xlakit.bundle.hashes.Drop`).
      record_problem: why ``.cache/module_hashes.json`` was unreadable (it was rewritten), else None.
      weights_s: seconds reading, checking and placing the weights. total_s: seconds for the whole load.
    """

    def __init__(self, *, path: Path, manifest: Manifest, device: Any, weights: dict[str, Any],
                 programs: dict[tuple[str, int], Any], reports: tuple[ModuleReport, ...],
                 errors: dict[str, BundleError], dropped: tuple[Drop, ...], record_problem: str | None,
                 weights_s: float, total_s: float) -> None:
        self.path = path
        self.manifest = manifest
        self.device = device
        self.weights = weights
        self.programs = programs
        self.reports = reports
        self.errors = errors
        self.dropped = dropped
        self.record_problem = record_problem
        self.weights_s = weights_s
        self.total_s = total_s

    # -- calling ----------------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, variant: str = DEFAULT_VARIANT, **named: Any) -> Any:
        """Run ``variant`` on ``inputs`` (positional in manifest order, or by name).

        Raises:
          TypeError: wrong number or names of inputs, or an input's dtype differs from the manifest's.
          ValueError: an input's non-batch dimensions differ from the manifest's, inputs disagree on the
            batch size, or the batch exceeds the largest loaded batch size of the variant.
          KeyError: unknown variant, or none of its modules loaded (the message lists the errors).
        """
        import jax
        import numpy as np

        arrays = self._arrange(inputs, named)
        n = int(arrays[0].shape[0])
        batch = self._pick(variant, n)
        compiled = self.programs[(variant, batch)]
        args = []
        for spec, x in zip(self.manifest.inputs, arrays):
            on_device = isinstance(x, jax.Array) and x.devices() == {self.device}
            if n == batch and on_device:
                args.append(x)  # already in place: no copy
                continue
            host = np.asarray(x)
            if n != batch:
                host = np.concatenate([host, np.zeros((batch - n, *host.shape[1:]), host.dtype)])
            args.append(jax.device_put(host, self.device))
        out = compiled(self.weights, *args)
        if n == batch:
            return out
        leaves, treedef = jax.tree_util.tree_flatten(out)
        specs = self.manifest.outputs[variant]
        leaves = [leaf[:n] if i < len(specs) and specs[i].batched else leaf for i, leaf in enumerate(leaves)]
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def batch_sizes(self, variant: str = DEFAULT_VARIANT) -> tuple[int, ...]:
        """The batch sizes of ``variant`` whose programs loaded, ascending."""
        return tuple(sorted(b for v, b in self.programs if v == variant))

    def _pick(self, variant: str, n: int) -> int:
        if variant not in self.manifest.variants:
            raise KeyError(f"bundle {self.manifest.name!r} has no variant {variant!r}; it has "
                           f"{list(self.manifest.variants)}")
        sizes = self.batch_sizes(variant)
        if not sizes:
            failed = "; ".join(str(e) for f, e in self.errors.items())
            raise KeyError(f"no program of variant {variant!r} loaded: {failed}")
        for b in sizes:
            if b >= n:
                return b
        raise ValueError(f"batch of {n} exceeds the largest loaded batch size {sizes[-1]} of variant {variant!r} "
                         f"(loaded: {list(sizes)}); split the batch or export a larger batch size")

    def _arrange(self, inputs: tuple, named: dict) -> list[Any]:
        import numpy as np

        specs = self.manifest.inputs
        if inputs and named:
            raise TypeError("pass the inputs either all positionally or all by name")
        if named:
            unknown = sorted(set(named) - {s.name for s in specs})
            missing = [s.name for s in specs if s.name not in named]
            if unknown or missing:
                raise TypeError(f"inputs by name: expected {[s.name for s in specs]}; unknown {unknown}, "
                                f"missing {missing}")
            inputs = tuple(named[s.name] for s in specs)
        if len(inputs) != len(specs):
            raise TypeError(f"bundle {self.manifest.name!r} takes {len(specs)} input(s) "
                            f"({', '.join(s.name for s in specs)}), got {len(inputs)}")
        batch = None
        for spec, x in zip(specs, inputs):
            shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
            if shape is None or dtype is None:
                raise TypeError(f"input {spec.name!r}: expected an array, got {type(x).__name__}")
            if np.dtype(dtype).name != spec.dtype:
                raise TypeError(f"input {spec.name!r}: dtype {np.dtype(dtype).name}, the bundle takes {spec.dtype} "
                                f"(convert with x.astype('{spec.dtype}'))")
            if len(shape) != len(spec.shape) or tuple(shape[1:]) != tuple(spec.shape[1:]):
                raise ValueError(f"input {spec.name!r}: shape {list(shape)}, the bundle takes {list(spec.shape)}")
            if batch is not None and shape[0] != batch:
                raise ValueError(f"inputs disagree on the batch size: {batch} and {shape[0]} ({spec.name!r})")
            batch = shape[0]
        if not batch:
            raise ValueError("empty batch (batch size 0)")
        return list(inputs)

    # -- views ------------------------------------------------------------------------------------------
    def report(self):
        """``pandas.DataFrame``, one row per module: module, variant, batch_size, status (hit/miss/error),
        load_s, compile_s (seconds), module_bytes, program_bytes, compiled memory (argument_bytes,
        output_bytes, temp_bytes, footprint_bytes; nullable ints), reason. See :class:`ModuleReport`."""
        import pandas as pd

        frame = pd.DataFrame([r.to_dict() for r in self.reports], columns=list(_REPORT_COLUMNS))
        for col in ("module_bytes", "program_bytes", "argument_bytes", "output_bytes", "temp_bytes",
                    "footprint_bytes"):
            frame[col] = frame[col].astype("Int64")
        return frame

    to_frame = report

    def counts(self) -> dict[str, int]:
        """Modules by status: ``{"hit": h, "miss": m, "error": e}``."""
        out = {"hit": 0, "miss": 0, "error": 0}
        for r in self.reports:
            out[r.status] += 1
        return out

    def __repr__(self) -> str:
        c = self.counts()
        return (f"LoadedBundle({self.manifest.name!r} on {self.device}: {len(self.programs)} programs "
                f"({c['hit']} hit, {c['miss']} compiled, {c['error']} failed) in {self.total_s:.3f} s, "
                f"batch sizes {list(self.manifest.batch_sizes)}, variants {list(self.manifest.variants)})")

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(c)}</th>" for c in ("module", "status", "load s", "compile s", "reason"))
        rows = "".join(
            f"<tr><td>{escape(r.module)}</td><td>{escape(r.status)}</td><td>{r.load_s:.3f}</td>"
            f"<td>{'' if r.compile_s is None else f'{r.compile_s:.3f}'}</td><td>{escape(r.reason or '')}</td></tr>"
            for r in self.reports)
        return f"<p>{escape(repr(self))}</p><table><tr>{head}</tr>{rows}</table>"


# -- loading ------------------------------------------------------------------------------------------------

def load_bundle(path: str | os.PathLike, devices: Sequence[Any] | None = None, max_workers: int | None = None,
                progress: bool = True, *, secret: bytes | None = None,
                log: _events.EventLog | None = None) -> LoadedBundle:
    """Load a bundle's programs and weights onto a device, compiling only what ``.cache`` lacks.

    Args:
      path: the bundle folder (see :mod:`xlakit.bundle.manifest`).
      devices: ``[device]`` to place the programs and weights on (a ``jax.Device`` or an integer id);
        default: JAX's default device. A program cached for another device of the same kind is reused
        (its device assignment is rewritten when loading; see :func:`xlakit._jax.serialize.load_compiled`).
      max_workers: modules loaded or compiled at once, in threads (XLA releases the GIL while loading and
        compiling); default :data:`DEFAULT_MAX_WORKERS` (measured; see the comment at its definition).
      progress: show a progress bar (a widget in notebooks, text on stderr elsewhere).
      secret: HMAC key for ``.cache`` entries; default ``$XLAKIT_CACHE_SECRET`` or the user's secret file.
        A ``.cache`` copied from a machine with another secret fails authentication: its entries are
        quarantined and the modules compiled again (set the same ``XLAKIT_CACHE_SECRET`` on both to share).
      log: event log (default :func:`xlakit.events.log`).

    Returns:
      A :class:`LoadedBundle`; modules that failed are in its ``errors`` and ``reports`` (and one
      ``RuntimeWarning`` names them) while the others load.

    Raises:
      xlakit.bundle.ManifestError: ``manifest.json`` is missing, unreadable or lacks/misstates a field.
      xlakit.bundle.WeightsError: the weights file is missing, unreadable, or its tensor names, shapes or
        dtypes disagree with the manifest.
      xlakit._jax.serialize.DevicePlacementError: ``devices`` is not exactly one addressable device.
      ValueError: ``max_workers`` < 1.
    """
    import jax

    from xlakit._jax.environment import current_environment
    from xlakit.store import LocalStore

    start = time.perf_counter()
    path = Path(path)
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    log = log or _events.log()
    manifest = Manifest.read(path)
    device = _resolve_device(devices)

    t = time.perf_counter()
    wfile = path / manifest.weights_file
    host = read_weights(wfile)
    check_weights(wfile, host, manifest.weights)
    weights = jax.device_put(host, device)
    weights_s = time.perf_counter() - t

    env = current_environment(device.platform)
    partition = env.partition_name()
    store = LocalStore(path / CACHE_DIR, secret=secret)
    ctx = _Context(path, manifest, device, env, partition, store, log)

    blobs = {spec.file: _read_module(path, spec) for spec in manifest.modules}
    current = {f: (None if isinstance(b, BundleError) else sha256_hex(b)) for f, b in blobs.items()}
    record = read_record(store.root)
    dropped = ctx.reconcile(record, current)

    bar = progress_bar(len(blobs), f"{manifest.name}", enabled=progress)
    results: dict[str, tuple[ModuleReport, Any]] = {}
    workers = max_workers or DEFAULT_MAX_WORKERS
    try:
        with ctx.compiles, concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="xlakit-bundle") as pool:
            futures = {pool.submit(ctx.load_module, spec, blobs[spec.file], current[spec.file]): spec
                       for spec in manifest.modules}
            for future in concurrent.futures.as_completed(futures):
                report, compiled = future.result()  # load_module never raises
                results[report.module] = (report, compiled)
                bar.update(1)
                counts = [r.status for r, _ in results.values()]
                bar.set_postfix_str(f"{counts.count('hit')} hit, {counts.count('miss')} compiled, "
                                    f"{counts.count('error')} failed")
    finally:
        bar.close()

    reports = tuple(results[spec.file][0] for spec in manifest.modules)
    programs = {(spec.variant, spec.batch_size): results[spec.file][1] for spec in manifest.modules
                if results[spec.file][1] is not None}
    errors = dict(ctx.errors)
    if errors:
        warnings.warn(f"bundle {manifest.name!r}: {len(errors)} of {len(reports)} modules failed to load; the others "
                      "are usable:\n  " + "\n  ".join(str(e) for e in errors.values()), RuntimeWarning, stacklevel=2)
    return LoadedBundle(path=path, manifest=manifest, device=device, weights=weights, programs=programs,
                        reports=reports, errors=errors, dropped=tuple(dropped),
                        record_problem=record.reason if record.status == "unreadable" else None,
                        weights_s=weights_s, total_s=time.perf_counter() - start)


def _resolve_device(devices):
    import jax

    from xlakit._jax.serialize import DevicePlacementError

    if devices is None:
        return jax.devices()[0]
    devices = list(getattr(devices, "flat", devices))
    if len(devices) != 1:
        raise DevicePlacementError(f"a bundle's programs run on one device; devices= has {len(devices)} "
                                   f"({devices}); pass [device]")
    d = devices[0]
    if isinstance(d, int) and not isinstance(d, bool):
        known = {x.id: x for x in jax.devices()}
        if d not in known:
            raise DevicePlacementError(f"device id {d} does not exist (devices: {sorted(known)})")
        d = known[d]
    if not isinstance(d, jax.Device):
        raise TypeError(f"devices must hold jax.Device objects or integer ids, got {type(d).__name__}")
    if d.process_index != jax.process_index():
        raise DevicePlacementError(f"device {d} belongs to process {d.process_index}, not to this process")
    return d


def _read_module(path: Path, spec: ModuleSpec) -> bytes | BundleError:
    file = path / spec.file
    try:
        return file.read_bytes()
    except FileNotFoundError:
        return ModuleError(file, None, f"missing (manifest.json lists variant {spec.variant!r} at batch size "
                           f"{spec.batch_size})")
    except OSError as e:
        return ModuleError(file, None, f"unreadable: {e}")


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


class _Context:
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

    def _fail(self, spec: ModuleSpec, err: BundleError, key, size, start) -> ModuleReport:
        with self._lock:
            self.errors[spec.file] = err
        self.emit("load_error", spec.stem, key, reason=str(err))
        return ModuleReport(spec.file, spec.variant, spec.batch_size, "error", time.perf_counter() - start,
                            module_bytes=size, key=key, reason=str(err))

    def _load_or_compile(self, spec: ModuleSpec, data: bytes, key: str, start: float) -> tuple[ModuleReport, Any]:
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
        self._check_export(spec, exported)
        read_s = time.perf_counter() - start
        t = time.perf_counter()
        compiled = self._compile(exported)
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

    def _check_export(self, spec: ModuleSpec, exported) -> None:
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
            (args, kwargs) = exported.in_tree.unflatten(exported.in_avals)
        except Exception as e:  # noqa: BLE001
            raise ModuleError(file, "in_tree", f"unexpected signature ({e})") from None
        if kwargs or not args or not isinstance(args[0], dict):
            raise ModuleError(file, "in_tree", f"expected (weights: dict, *inputs), got {exported.in_tree}")
        self._compare(spec, args[0], args[1:])

    def _compile(self, exported):
        import jax
        from jax.sharding import SingleDeviceSharding

        sharding = SingleDeviceSharding(self.device)
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in exported.in_avals]
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
                  "module_file": spec.file, "module_sha256": key.rsplit("-", 1)[1], "module_bytes": len(data),
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
    dtype = np.dtype(aval.dtype).name
    want = spec.concrete(batch_size) if batch_size is not None else tuple(spec.shape)
    if shape != want or dtype != spec.dtype:
        got = f"{dtype}[{','.join(map(str, shape))}]"
        raise ModuleError(file, field, f"the module has {got}, manifest.json says "
                          f"{spec.describe(batch_size) if batch_size is not None else spec.describe()}")


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
