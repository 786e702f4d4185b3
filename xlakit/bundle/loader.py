"""``load_bundle``: a bundle folder to callable compiled programs, from ``.cache`` when possible.

For each module (one variant at one batch size) the loader reads the file, hashes it, and looks up the key
``<module stem>-<SHA-256>`` (:func:`xlakit.bundle.hashes.program_key`) in ``<bundle>/.cache/<partition>/``,
an ordinary :class:`~xlakit.store.LocalStore` (HMAC envelope, atomic publish, quarantine).

* **Hit** (the warm path): the stored payload is :func:`xlakit._jax.serialize.serialize_compiled`'s AOT
  pickle, loaded with :func:`~xlakit._jax.serialize.load_compiled` onto the requested device. Nothing is
  traced, lowered or compiled, and no Python model code is needed: read weights, read module bytes, hash,
  ``store.get``, ``load_compiled``.
* **Miss** (the cold path): ``jax.export.deserialize`` the module, check its platform and signature against
  the manifest, compile ``jax.jit(exported.call).lower(*avals)`` on the device with
  :func:`xlakit._jax.fresh.compile_fresh` (bypassing every other cache, so the stored program is a fresh
  compile that never ran), and store the AOT pickle.
* **Fails open**: an entry that passes its checks but cannot be loaded is removed, recorded as a
  ``load_error`` event, and the module is compiled instead.

Lookups and stores go through the cache's one fetch/publish path (:class:`xlakit.cache.path.CachePath`), which
records ``hit`` / ``miss`` / ``corrupt`` / ``load_error`` / ``store`` / ``store_error`` / ``skip`` and returns a
:class:`~xlakit.cache.decision.Decision` whose sizes, seconds and compiled memory fill the report.

Before loading, the module-hash record drops programs of changed or vanished modules
(:mod:`xlakit.bundle.hashes`). Every action is an event in :func:`xlakit.events.log` (``source="xlakit"``,
``name="<bundle>/<module stem>"``, ``folder`` = the bundle's ``.cache``): ``hit``, ``miss``, ``compile``,
``store``, ``store_error``, ``skip``, ``evict`` (a dropped program), ``corrupt``, ``load_error`` (including a
module that fails).

Order of work (measured in ``docs/restart-measurements.md``): manifest, device, environment, module reads
and hashes, the record's drops. By default (``background=True``) the most-likely-called program then starts
loading alone in a worker thread (:mod:`xlakit.bundle.background`); once its entry is verified and goes to XLA
(which loads it without the GIL), the calling thread places the weights,
``load_bundle`` returns, and the others follow, most likely first; a call waits only for its own program. With
``background=False`` the weights are placed first, the programs load largest first (no worker is left alone
with the biggest one) in ``max_workers - 1`` threads and the calling thread, and ``load_bundle`` returns when all
are loaded.

Nothing in the folder is trusted: module files are read only when they are regular files under
:data:`~xlakit.bundle.files.MAX_MODULE_BYTES` (a FIFO, a device or a huge file fails alone, at once, named),
and a ``.cache`` (or partition folder) that is a symlink is never followed — the load then compiles every
module and stores nothing, with a ``RuntimeWarning`` and a ``store_error`` event saying why. Calling the
result: :mod:`xlakit.bundle.loaded`; module loading and compiling: :mod:`xlakit.bundle.programs`.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlakit import events as _events
from xlakit.bundle.background import ProgramLoader
from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.files import MAX_MODULE_BYTES, cache_problem, read_regular
from xlakit.bundle.hashes import RECORD, RecordState, read_record, sha256_hex
from xlakit.bundle.manifest import CACHE_DIR, DEFAULT_VARIANT, Manifest, ModuleSpec
from xlakit.bundle.programs import Context, NullStore
from xlakit.bundle.reports import ModuleReport
from xlakit.bundle.usage import read_usage, write_usage

if TYPE_CHECKING:
    from xlakit.bundle.loaded import LoadedBundle

__all__ = ["DEFAULT_MAX_WORKERS", "ModuleReport", "load_bundle"]

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



# -- loading ------------------------------------------------------------------------------------------------

def load_bundle(path: str | os.PathLike, devices: Sequence[Any] | None = None, max_workers: int | None = None,
                progress: bool = True, *, secret: bytes | None = None,
                log: _events.EventLog | None = None, remote: str | None = None, remote_mode: str | None = None,
                remote_options: dict | None = None, background: bool = True,
                warmup: bool = False, exact: bool = False) -> LoadedBundle:
    """Load a bundle's programs and weights onto a device, compiling only what ``.cache`` lacks.

    Args:
      path: the bundle folder (see :mod:`xlakit.bundle.manifest`).
      devices: ``[device]`` (or the device alone) to place the programs and weights on: a ``jax.Device`` or an
        integer id; default: JAX's default device. A program cached for another device of the same kind is reused
        (its device assignment is rewritten when loading; see :func:`xlakit._jax.serialize.load_compiled`).
      max_workers: modules loaded or compiled at once, in threads (XLA releases the GIL while loading and
        compiling; with ``background=False`` the calling thread is one of them); default
        :data:`DEFAULT_MAX_WORKERS` (measured; see the comment at its definition).
      progress: show a progress bar (a widget in notebooks, text on stderr elsewhere).
      secret: HMAC key for ``.cache`` entries; default ``$XLAKIT_CACHE_SECRET`` or the user's secret file.
        A ``.cache`` copied from a machine with another secret fails authentication: its entries are
        quarantined and the modules compiled again (set the same ``XLAKIT_CACHE_SECRET`` on both to share).
      log: event log (default :func:`xlakit.events.log`).
      remote, remote_mode, remote_options: a shared store behind ``.cache`` (default ``$XLAKIT_CACHE_REMOTE``
        and its mode/options variables), as for :func:`xlakit.enable_cache`: modules missing from ``.cache``
        are read from it, modules compiled here are uploaded (``rw``).
      background: (default True) return as soon as the manifest is read, the modules hashed and the weights
        placed; the programs go on loading in ``max_workers`` threads, the most likely to be called first (the
        order the last process first called them, from ``.cache/usage.json``; else the default variant,
        smallest batch first), and a call waits only for its own program (see :class:`LoadedBundle`;
        ``load_bundle(p).wait()`` waits for all). False: return once every program is loaded, largest first
        (measured fastest to have *all* programs ready on 2 cores).
      warmup: after loading each program, run it once on zeros in the loading thread
        (:func:`xlakit._jax.warmup.warm_up`), so a call does not pay XLA:CPU's first-run cost (measured in
        ``benchmarks/first_execution.py``: ~5x a later run); costs about one run per program loaded whether or
        not it is called. Skipped for a program a call already used. A failed warm-up is only reported.
      exact: (default False) a batch size that was not exported is compiled exactly (from the variant's
        shape-polymorphic module; stored in ``.cache`` like the others) even where rows are proven independent,
        so every call gives the bits ``jax.jit`` gives at that size. False: such calls are padded up to an
        exported size or chunked (no compile; the same values up to the rounding of XLA's kernels at the
        other size, measured in ``benchmarks/bundle_padding.py``).

    Returns:
      A :class:`LoadedBundle`; modules that failed are in its ``errors`` and ``reports``, and one
      ``RuntimeWarning`` names them: here for modules that could not be read (and, with ``background=False``,
      for all), else on the next call or ``wait()``. The others load.

    Raises:
      xlakit.bundle.ManifestError: ``manifest.json`` is missing, unreadable or lacks/misstates a field.
      xlakit.bundle.WeightsError: the weights file is missing, unreadable, or its tensor names, shapes or
        dtypes disagree with the manifest.
      xlakit._jax.serialize.DevicePlacementError: ``devices`` is not exactly one addressable device.
      TypeError: ``max_workers`` is not an int (a bool, a float or a str included); ``progress``, ``background``,
        ``warmup`` or ``exact`` is not True or False; ``path`` not a str or path, ``log`` not an EventLog,
        ``secret`` not bytes.
      ValueError: ``max_workers`` < 1 or > 4096; an empty ``path``; a ``secret`` shorter than 16 bytes.
    """
    from xlakit._jax.environment import current_environment
    from xlakit._units import check_flag, is_int
    from xlakit.cache import open_store

    start = time.perf_counter()
    for flag, value in (("progress", progress), ("background", background), ("warmup", warmup), ("exact", exact)):
        check_flag(value, flag)  # "false" is truthy
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be the bundle folder (a str or pathlib.Path), got {type(path).__name__}")
    if not str(os.fspath(path)).strip():  # "" loaded whatever bundle the current folder holds
        raise ValueError("path is empty: give the bundle's folder, e.g. 'my_model'")
    if log is not None and not callable(getattr(log, "emit", None)):
        raise TypeError(f"log must be an xlakit.events.EventLog (or None: the process-wide log), got "
                        f"{type(log).__name__}")
    from xlakit.store.secret import check_secret

    secret = check_secret(secret)
    path = Path(os.path.expanduser(path))  # "~/x" is the home folder, never a folder named "~"
    if max_workers is not None and not is_int(max_workers):
        # "3" raised "'<' not supported between str and int"; 2.5 and True were taken as thread counts
        raise TypeError(f"max_workers must be an int number of threads (>= 1) or None, got "
                        f"{type(max_workers).__name__} {max_workers!r:.40}")
    if max_workers is not None and not 1 <= max_workers <= 4096:  # 10**400 threads was taken as asked
        raise ValueError(f"max_workers must be from 1 to 4096 threads, got {str(max_workers)[:40]}")
    log = log or _events.log()
    manifest = Manifest.read(path)
    device = _resolve_device(devices)
    treedefs, notes = _treedefs(path, manifest)  # a malformed tree fails before anything loads

    env = current_environment(device.platform)
    partition = env.partition_name()
    cache_dir = path / CACHE_DIR
    unusable = cache_problem(cache_dir, partition)
    store = NullStore(cache_dir, unusable) if unusable else open_store(
        cache_dir, secret=secret, remote=remote, remote_mode=remote_mode, remote_options=remote_options, log=log)
    ctx = Context(path, manifest, device, env, partition, store, log)
    if unusable:
        ctx.emit("store_error", ".cache", None, reason=unusable)
        warnings.warn(f"bundle {manifest.name!r}: {unusable}; every module is compiled and nothing is stored",
                      RuntimeWarning, stacklevel=2)

    blobs = {spec.file: _read_module(path, spec) for spec in manifest.modules + manifest.poly_modules}
    current = {f: (None if isinstance(b, BundleError) else sha256_hex(b)) for f, b in blobs.items()}
    for f, want in manifest.module_sha256.items():  # a module replaced or edited alone is never used
        got = current.get(f)
        if got is not None and got != want:
            blobs[f] = ModuleError(path / f, None, f"its SHA-256 {got[:12]}... is not the one manifest.json "
                                                   f"recorded at export ({want[:12]}...): the file was replaced or "
                                                   "edited after export, so it is not used; export the bundle again")
    record = RecordState("missing", {}, None, cache_dir / RECORD) if unusable else read_record(cache_dir)
    dropped = ctx.reconcile(record, current)  # before any program loads: drops are decided first
    for spec in manifest.poly_modules:  # compiled on demand; a bad one fails here, named, alone
        blob = blobs[spec.file]
        if isinstance(blob, BundleError):
            ctx.errors[spec.file] = blob
            ctx.io.failed("load_error", partition, None, f"{manifest.name}/{spec.stem}", str(blob))

    usage = None if unusable else read_usage(cache_dir)
    order = _order(manifest, blobs, usage if background else None, background)
    weights = None
    if not background:  # measured: placing the weights beside two loading threads cost CPU and wall on 2 cores
        weights, weights_s = _place_weights(path, manifest, device)
    on_done, bar = None, None
    if progress:  # (the bar's module and tqdm load only when a bar is shown)
        from xlakit.bundle.progress import progress_bar

        bar = progress_bar(len(manifest.modules), f"{manifest.name}")
        on_done = _bar_updater(bar, len(manifest.modules))
    loader = ProgramLoader(ctx, manifest.modules, blobs, current, order, max_workers or DEFAULT_MAX_WORKERS,
                           on_done=on_done, warmup=warmup, head_start=background, caller_works=not background)
    # Background: the head worker's Python (its entry read and verified) runs alone first; then XLA loads the
    # program without the GIL while this thread imports what it needs next and places the weights. Otherwise this
    # thread is one of the workers (it would only wait for them): one thread fewer per load, none for one module.
    loader.wait_head_handoff()
    try:
        if weights is None:
            weights, weights_s = _place_weights(path, manifest, device)
        else:
            loader.work_here()
    except BaseException:
        if bar is not None:
            bar.discard()  # the load is abandoned: no "n failed" line for the modules cancelled below
        loader.cancel()
        loader.wait()  # nothing of this load touches the folder once load_bundle has raised
        raise
    from xlakit.bundle.loaded import LoadedBundle

    poly = {spec.variant: (spec, blobs[spec.file], current[spec.file]) for spec in manifest.poly_modules}
    loaded = LoadedBundle(path=path, manifest=manifest, device=device, weights=weights, loader=loader,
                          specs=tuple(manifest.modules), dropped=tuple(dropped),
                          record_problem=record.reason if record.status == "unreadable" else None,
                          weights_s=weights_s, started=start, ready_s=time.perf_counter() - start, context=ctx,
                          poly=poly, treedefs=treedefs, tree_notes=tuple(notes), cache_problem=unusable,
                          usage=None if unusable else _UsageRecorder(cache_dir, usage or []), exact=exact)
    if not background:
        loaded.wait()
    else:
        loaded._surface(stacklevel=2)  # modules that could not be read failed already: say so now
    loaded.ready_s = time.perf_counter() - start
    if notes:
        warnings.warn(f"bundle {manifest.name!r}: " + "; ".join(notes), RuntimeWarning, stacklevel=2)
    return loaded


def _place_weights(path: Path, manifest: Manifest, device: Any) -> tuple[dict, float]:
    """Read, check and ``device_put`` the weights; ``(weights, seconds)``. Raises WeightsError."""
    import jax

    from xlakit.bundle.errors import WeightsError
    from xlakit.bundle.weights import check_weights, read_weight_specs, read_weights

    t = time.perf_counter()
    wfile = path / manifest.weights_file
    wide = [s for s in manifest.weights if s.dtype in _X64_DTYPES]
    if wide and not jax.config.read("jax_enable_x64"):  # device_put would narrow them; the programs take them wide
        raise WeightsError(wfile, wide[0].name, f"{wide[0].describe()} was exported with jax_enable_x64 on, and "
                           "this process has it off (placing it would make it 32-bit); call "
                           "jax.config.update('jax_enable_x64', True) before load_bundle")
    check_weights(wfile, read_weight_specs(wfile), manifest.weights)  # header first: sizes are known
    host = read_weights(wfile)
    check_weights(wfile, host, manifest.weights)
    weights = jax.device_put(host, device)
    return weights, time.perf_counter() - t


_X64_DTYPES = ("float64", "int64", "uint64", "complex128")


def _order(manifest: Manifest, blobs: dict, usage: list | None, background: bool) -> list[str]:
    """Module files in the order to load them. Waiting for all: largest module first (the last worker is
    not left alone with the biggest program). Background: the order of ``usage`` (first calls of the last
    process), then the default variant before the others, smallest batch first; ties largest first."""
    def size(spec: ModuleSpec) -> int:
        b = blobs[spec.file]
        return 0 if isinstance(b, BundleError) else len(b)

    specs = list(manifest.modules)
    if not background:
        return [s.file for s in sorted(specs, key=lambda s: -size(s))]
    seen = {pair: i for i, pair in enumerate(usage or [])}
    return [s.file for s in sorted(specs, key=lambda s: (seen.get((s.variant, s.batch_size), len(seen)),
                                                         s.variant != DEFAULT_VARIANT, s.batch_size, -size(s)))]


def _bar_updater(bar: Any, total: int):
    counts = {"hit": 0, "miss": 0, "error": 0}
    lock = threading.Lock()

    def update(report: ModuleReport) -> None:
        with lock:
            counts[report.status] = counts.get(report.status, 0) + 1
            # the counts first, then the step that draws them (the other order drew "2/2 ... 1 hit")
            bar.set_postfix_str(f"{counts['hit']} hit, {counts['miss']} compiled, {counts['error']} failed",
                                refresh=False)
            bar.update(1)
            if sum(counts.values()) >= total:
                bar.close()

    return update


class _UsageRecorder:
    """Records a program's first call in ``.cache/usage.json``, off the call's thread.

    One writer thread at a time, which writes the newest list until nothing is left to write (first calls in
    quick succession are never written out of order), and not a daemon: a process that exits right after its
    calls still finishes the small write instead of being cut off mid-way (which left a temp file behind and
    the record short)."""

    def __init__(self, cache_dir: Path, previous: list) -> None:
        self._cache_dir = cache_dir
        self._calls: list = []
        self._previous = previous
        self._lock = threading.Lock()
        self._dirty = False
        self._writing = False

    def __call__(self, variant: str, batch: int) -> None:
        with self._lock:
            self._calls.append((variant, batch))
            if self._calls == self._previous[:len(self._calls)]:
                return  # the same first calls as last time: nothing new to write
            self._dirty = True
            if self._writing:
                return  # the running writer picks the newest list up
            self._writing = True
        try:
            threading.Thread(target=self._write, name="xlakit-usage").start()
        except RuntimeError:  # the interpreter is shutting down: no new threads; write here
            self._write()

    def _write(self) -> None:
        while True:
            with self._lock:
                if not self._dirty:
                    self._writing = False
                    return
                self._dirty = False
                calls = list(self._calls)
            write_usage(self._cache_dir, calls)


def _treedefs(path: Path, manifest: Manifest) -> tuple[dict, list[str]]:
    """variant -> PyTreeDef of its outputs (version-2 bundles), and notes on classes rebuilt as dicts.
    Raises ManifestError for a malformed tree."""
    from xlakit.bundle.errors import ManifestError
    from xlakit.bundle.trees import TreeError, build_treedef

    treedefs, notes = {}, []
    for variant, tree in manifest.output_trees.items():
        try:
            treedefs[variant], more = build_treedef(tree)
        except TreeError as e:
            raise ManifestError(path / "manifest.json", f"output_trees.{variant}", str(e)) from None
        notes.extend(more)
    return treedefs, notes


def _resolve_device(devices):
    import jax

    from xlakit._jax.serialize import DevicePlacementError

    if devices is None:
        return jax.devices()[0]
    from xlakit._units import is_int

    if isinstance(devices, jax.Device) or is_int(devices):
        devices = [devices]  # one device given bare: the same as [device] (a NumPy id too)
    if isinstance(devices, (bool, str, bytes)) or not hasattr(getattr(devices, "flat", devices), "__iter__"):
        raise TypeError(f"devices must be a jax.Device, a device id, or a list of one of them, got "
                        f"{type(devices).__name__} {devices!r:.40}")
    devices = list(getattr(devices, "flat", devices))
    if len(devices) != 1:
        raise DevicePlacementError(f"a bundle's programs run on one device; devices= has {len(devices)} "
                                   f"({devices}); pass [device]")
    d = devices[0]
    if is_int(d):
        d = int(d)
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
    """The module's bytes, or the error naming it: missing, not a regular file (FIFO, device, folder,
    symlink to one), over :data:`~xlakit.bundle.files.MAX_MODULE_BYTES`, unreadable. Never blocks."""
    file = path / spec.file
    at = "shape-polymorphic" if spec.batch_size is None else f"at batch size {spec.batch_size}"
    try:
        return read_regular(file, MAX_MODULE_BYTES)
    except FileNotFoundError:
        return ModuleError(file, None, f"missing (manifest.json lists variant {spec.variant!r} {at})")
    except OSError as e:
        return ModuleError(file, None, f"unreadable: {e}")


