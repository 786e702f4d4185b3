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

Nothing in the folder is trusted: module files are read only when they are regular files under
:data:`~xlakit.bundle.files.MAX_MODULE_BYTES` (a FIFO, a device or a huge file fails alone, at once, named),
and a ``.cache`` (or partition folder) that is a symlink is never followed — the load then compiles every
module and stores nothing, with a ``RuntimeWarning`` and a ``store_error`` event saying why. Calling the
result: :mod:`xlakit.bundle.loaded`; module loading and compiling: :mod:`xlakit.bundle.programs`.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xlakit import events as _events
from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.files import MAX_MODULE_BYTES, cache_problem, read_regular
from xlakit.bundle.hashes import RECORD, RecordState, read_record, sha256_hex
from xlakit.bundle.loaded import LoadedBundle
from xlakit.bundle.manifest import CACHE_DIR, Manifest, ModuleSpec
from xlakit.bundle.programs import Context, NullStore
from xlakit.bundle.progress import progress_bar
from xlakit.bundle.reports import ModuleReport
from xlakit.bundle.trees import TreeError, build_treedef
from xlakit.bundle.weights import check_weights, read_weight_specs, read_weights

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



# -- loading ------------------------------------------------------------------------------------------------

def load_bundle(path: str | os.PathLike, devices: Sequence[Any] | None = None, max_workers: int | None = None,
                progress: bool = True, *, secret: bytes | None = None,
                log: _events.EventLog | None = None, remote: str | None = None, remote_mode: str | None = None,
                remote_options: dict | None = None) -> LoadedBundle:
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
      remote, remote_mode, remote_options: a shared store behind ``.cache`` (default ``$XLAKIT_CACHE_REMOTE``
        and its mode/options variables), as for :func:`xlakit.enable_cache`: modules missing from ``.cache``
        are read from it, modules compiled here are uploaded (``rw``).

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
    from xlakit.cache.remote import open_store

    start = time.perf_counter()
    path = Path(path)
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    log = log or _events.log()
    manifest = Manifest.read(path)
    device = _resolve_device(devices)

    treedefs, notes = _treedefs(path, manifest)
    t = time.perf_counter()
    wfile = path / manifest.weights_file
    check_weights(wfile, read_weight_specs(wfile), manifest.weights)  # header first: sizes are known
    host = read_weights(wfile)
    check_weights(wfile, host, manifest.weights)
    weights = jax.device_put(host, device)
    weights_s = time.perf_counter() - t

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
    record = RecordState("missing", {}, None, cache_dir / RECORD) if unusable else read_record(cache_dir)
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
    for spec in manifest.poly_modules:  # compiled on demand; a bad one fails here, named, alone
        if isinstance(blobs[spec.file], BundleError):
            ctx.errors[spec.file] = blobs[spec.file]
            ctx.emit("load_error", spec.stem, None, reason=str(blobs[spec.file]))
    errors = dict(ctx.errors)
    if errors:
        warnings.warn(f"bundle {manifest.name!r}: {len(errors)} of {len(reports)} modules failed to load; the others "
                      "are usable:\n  " + "\n  ".join(str(e) for e in errors.values()), RuntimeWarning, stacklevel=2)
    if notes:
        warnings.warn(f"bundle {manifest.name!r}: " + "; ".join(notes), RuntimeWarning, stacklevel=2)
    poly = {spec.variant: (spec, blobs[spec.file], current[spec.file]) for spec in manifest.poly_modules}
    return LoadedBundle(path=path, manifest=manifest, device=device, weights=weights, programs=programs,
                        reports=reports, errors=errors, dropped=tuple(dropped),
                        record_problem=record.reason if record.status == "unreadable" else None,
                        weights_s=weights_s, total_s=time.perf_counter() - start, context=ctx, poly=poly,
                        treedefs=treedefs, tree_notes=tuple(notes), cache_problem=unusable)


def _treedefs(path: Path, manifest: Manifest) -> tuple[dict, list[str]]:
    """variant -> PyTreeDef of its outputs (version-2 bundles), and notes on classes rebuilt as dicts.
    Raises ManifestError for a malformed tree."""
    from xlakit.bundle.errors import ManifestError

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


