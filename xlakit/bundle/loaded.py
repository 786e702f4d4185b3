"""``LoadedBundle``: a loaded bundle's programs, callable like the original function, with exact answers
for any batch size.

How a call with a batch of ``n`` rows runs (``variant``'s programs were loaded for the exported sizes):

* ``n`` is an exported size: that program, as is.
* rows proven or declared independent (``manifest.independent(variant)``, see :mod:`xlakit.bundle.rows`):
  padded up to the smallest exported size that fits, batched outputs cut back to ``n``; above the largest
  size, split into chunks of the largest size (the last one padded) and the batched outputs concatenated. The
  rows' values are the same function of their inputs, but not always the same bits as ``jax.jit`` at ``n`` rows:
  XLA picks its kernels per batch size (on XLA:CPU a matrix product of 1 row and of 4 rows round differently,
  as ``jax.jit`` itself does at two batch sizes). Loaded with ``exact=True``, such a call compiles exactly
  ``n`` rows from the variant's shape-polymorphic module instead, as for coupled rows.
* rows coupled, or not proven: never padded. A program for exactly ``n`` rows is compiled from the
  variant's shape-polymorphic module (or loaded from ``.cache``, where it is stored like the others), for any
  ``n``. Without one (the function depends on the batch size, or the bundle predates the proof) a
  ``ValueError`` names the exported sizes and the reason.

Outputs come back as the exported function's pytree (:mod:`xlakit.bundle.trees`).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from xlakit._text.untrusted import html_text
from xlakit._units import wait_timeout
from xlakit.bundle.errors import BundleError, ModuleError, refuse_edited
from xlakit.bundle.manifest import DEFAULT_VARIANT, Manifest, ModuleSpec, dtype_name
from xlakit.bundle.reports import REPORT_COLUMNS, ModuleReport

__all__ = ["LoadedBundle"]


class LoadedBundle:
    """A bundle's compiled programs and weights on one device, callable like the original function.

    ``loaded(x)`` (or ``loaded(x0, x1)``, or ``loaded(x=...)``) runs the batch as the module docstring says:
    exact for every batch size (padding or chunking only where rows are independent) and returns the
    outputs as the original function's pytree.

    By default (``background=True``) the programs are still loading when you get this object: a call waits
    only for the program it runs (moving it to the front of the queue), and every attribute that describes all
    programs (``programs``, ``reports``, ``errors``, ``total_s``, ``batch_sizes()``, ``counts()``,
    ``report()``, the repr) waits for all of them; :meth:`ready` and :meth:`wait_for` ask about one. A program
    that failed to load in the background is in ``errors`` and ``reports``, and a ``RuntimeWarning`` names it
    on the next call or :meth:`wait`; a call that needed it uses the next larger loaded size, as if it had
    never been exported.

    Attributes:
      path: the bundle folder. manifest: its :class:`~xlakit.bundle.manifest.Manifest`.
      device: the ``jax.Device`` the programs and weights are on.
      weights: tensor name -> ``jax.Array`` on ``device``.
      programs: ``(variant, batch_size)`` -> ``jax.stages.Compiled``, for every module that loaded, and for
        every batch size compiled on demand from a shape-polymorphic module.
      reports: one :class:`~xlakit.bundle.reports.ModuleReport` per module, in manifest order, then one per
        on-demand program (module ``model.bpoly.jaxexp`` at the call's batch size).
      errors: module file -> :class:`~xlakit.bundle.errors.BundleError` for modules that failed.
      dropped: programs removed because their module changed or disappeared (:class:`~xlakit.bundle.hashes.Drop`).
      record_problem: why ``.cache/module_hashes.json`` was unreadable (it was rewritten), else None.
      cache_problem: why ``.cache`` was not used (e.g. it is a symlink), else None.
      tree_notes: output classes that come back as dicts (not defined in this process), and why.
      weights_s: seconds reading, checking and placing the weights. ready_s: seconds until ``load_bundle``
        returned. total_s: seconds until every program was loaded (or failed) and, with ``warmup=True``, warmed
        up, from the start of the load.
    """

    def __init__(self, *, path: Path, manifest: Manifest, device: Any, weights: dict[str, Any], loader: Any,
                 specs: tuple[ModuleSpec, ...], dropped: tuple, record_problem: str | None, weights_s: float,
                 started: float, ready_s: float, context: Any = None, poly: dict | None = None,
                 treedefs: dict | None = None, tree_notes: tuple[str, ...] = (), cache_problem: str | None = None,
                 usage: Any = None, exact: bool = False) -> None:
        self.path = path
        self.exact = exact
        self.manifest = manifest
        self.device = device
        self.weights = weights
        self.dropped = dropped
        self.record_problem = record_problem
        self.cache_problem = cache_problem
        self.weights_s = weights_s
        self.ready_s = ready_s
        self.tree_notes = tree_notes
        self._loader = loader
        self._specs = specs
        self._files: dict[tuple[str, int], str] = {(s.variant, s.batch_size): s.file for s in specs
                                                   if s.batch_size is not None}  # fixed-size modules only
        self._started = started
        self._finished: float | None = None
        self._programs: dict[tuple[str, int], Any] = {}
        self._extra_reports: tuple[ModuleReport, ...] = ()
        self._context = context
        self._poly = poly or {}  # variant -> (ModuleSpec, bytes | BundleError, sha256 | None)
        self._treedefs = treedefs or {}
        self._usage = usage  # (record first call: (variant, batch) -> None) or None
        self._called: set[tuple[str, int]] = set()
        self._warned_errors: set[str] = set()
        self._lock = threading.Lock()
        self._exact_lock = threading.Lock()

    # -- waiting ----------------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> LoadedBundle:
        """Block until every program has loaded or failed (and, with ``warmup=True``, been warmed up); returns
        ``self`` (so ``load_bundle(p).wait()``).

        Raises:
          TimeoutError: ``timeout`` seconds passed first (the load goes on).
          ValueError: ``timeout`` is NaN, negative or a finite number over 10**9 (None or inf: wait for ever).
        """
        timeout = wait_timeout(timeout)
        if not self._loader.wait(timeout):
            raise TimeoutError(f"bundle {self.manifest.name!r}: programs still loading after {timeout} s")
        if self._finished is None:
            for variant, batch in self._files:
                self._get(variant, batch)
            self._finished = max(self._loader_finished(), self._started + self.ready_s)
        self._surface(stacklevel=3)
        return self

    def ready(self, batch_size: int, variant: str = DEFAULT_VARIANT) -> bool:
        """Whether the exported program for ``batch_size`` rows of ``variant`` has finished loading (or
        failed: then :attr:`errors` says why). Never waits. Raises KeyError as :meth:`wait_for` (a poll of a size
        never exported looped for ever)."""
        return self._loader.done(self._exported(variant, batch_size))

    def wait_for(self, batch_size: int, variant: str = DEFAULT_VARIANT, timeout: float | None = None) -> bool:
        """Wait for one exported program (moved to the front of the queue); True if it loaded, False if it
        failed. Raises KeyError for a size or variant the manifest does not export, TimeoutError after
        ``timeout`` seconds, ValueError for a ``timeout`` :meth:`wait` refuses."""
        timeout = wait_timeout(timeout)
        self._exported(variant, batch_size)
        try:
            return self._get(variant, batch_size, timeout) is not None
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"program {variant!r} at batch size {batch_size} still loading after {timeout} s"
                               ) from None

    def _exported(self, variant: str, batch_size: Any) -> str:
        """The module file of an exported program; KeyError for a size (``True`` is none) or variant not exported."""
        file = None if isinstance(batch_size, bool) else self._files.get((variant, batch_size))
        if file is None:
            sizes = sorted(b for v, b in self._files if v == variant)
            raise KeyError(f"bundle {self.manifest.name!r} exports no program of variant {variant!r} at batch size "
                           f"{batch_size!r}; its batch sizes are {sizes}" + ("" if sizes else
                           f" (variants: {sorted(self.manifest.variants)})"))
        return file

    def _get(self, variant: str, batch: int, timeout: float | None = None) -> Any:
        """The exported program for ``(variant, batch)``, waiting for it alone; None if it failed."""
        program = self._programs.get((variant, batch))
        if program is not None:
            return program
        file = self._files[(variant, batch)]
        _, compiled = self._loader.result(file, timeout)
        if compiled is not None:
            with self._lock:
                self._programs.setdefault((variant, batch), compiled)
        return compiled

    def _loader_finished(self) -> float:
        return self._loader.finished_at or time.perf_counter()

    def _results(self) -> list[tuple[ModuleReport, Any]]:
        return [self._loader.result(s.file) for s in self._specs]

    def _surface(self, stacklevel: int = 2) -> None:
        """Warn, once per module, about modules that failed (from the caller's thread)."""
        errors = self._context.errors if self._context is not None else {}
        with self._lock:
            new = {f: e for f, e in list(errors.items()) if f not in self._warned_errors}
            self._warned_errors.update(new)
        if not new:
            return
        head = f"{len(new)} of {len(self._specs)} modules failed to load; the others are usable"
        warnings.warn(f"bundle {self.manifest.name!r}: {head}:\n  " + "\n  ".join(str(e) for e in new.values()),
                      RuntimeWarning, stacklevel=stacklevel + 1)

    # -- everything (waits for all programs) ------------------------------------------------------------
    @property
    def programs(self) -> dict[tuple[str, int], Any]:
        self.wait()
        return self._programs

    @property
    def reports(self) -> tuple[ModuleReport, ...]:
        self.wait()
        return tuple(self._loader.report(r.module, r) for r, _ in self._results()) + self._extra_reports

    @property
    def errors(self) -> dict[str, BundleError]:
        self.wait()
        return dict(self._context.errors) if self._context is not None else {}

    @property
    def total_s(self) -> float:
        self.wait()
        return float((self._finished or self._started) - self._started)

    # -- calling ----------------------------------------------------------------------------------------
    def __call__(self, /, *inputs: Any, variant: str = DEFAULT_VARIANT, **named: Any) -> Any:
        """Run ``variant`` on ``inputs`` (positional in manifest order, or by name).

        With a background load, waits only for the program this batch runs on.

        Raises:
          TypeError: wrong number or names of inputs, or an input's dtype differs from the manifest's.
          ValueError: an input's non-batch dimensions differ from the manifest's, inputs disagree on the
            batch size, or (rows not proven or declared independent) the batch is not an exported size and
            the variant has no shape-polymorphic module to compile it exactly from, or has 0 rows (with rows
            independent, 0 rows give each batched output with 0 rows, as ``jax.jit`` does).
          KeyError: unknown variant, or none of its modules loaded (the message lists the errors).
          xlakit.bundle.ModuleError: the exact program for this batch size could not be compiled.
        """
        arrays = self._arrange(inputs, named)
        n = int(arrays[0].shape[0])
        self._check_variant(variant)
        if n == 0:
            return self._rebuild(variant, self._no_rows(variant, arrays))
        try:
            if (variant, n) in self._files and self._get(variant, n) is not None:
                return self._rebuild(variant, self._run(variant, n, arrays, n))
            return self._rebuild(variant, self._route(variant, arrays, n))
        finally:
            self._surface()

    def _route(self, variant: str, arrays: list, n: int) -> list:
        """``n`` is not an exported size that loaded: pad, chunk or compile the exact size."""
        if self.exact or not self.manifest.independent(variant):
            # Any size can be compiled exactly from a shape-polymorphic module, even an exported size whose own
            # program failed to load; without one, only loaded programs serve.
            if variant not in self._poly:
                self._largest(variant)  # no program at all: the KeyError comes first
            self._exact(variant, n)
            return self._run(variant, n, arrays, n)
        batch = self._fit(variant, n)
        if batch is not None:
            return self._run(variant, batch, arrays, n)
        return self._chunks(variant, self._largest(variant), arrays, n)

    def _no_rows(self, variant: str, arrays: list) -> list:
        """0 rows, as ``jax.jit`` answers them: where rows are independent, the smallest program on padding,
        batched outputs cut to none; else refused (an output over the batch would see rows not the caller's)."""
        if not self.manifest.independent(variant):
            raise ValueError(f"empty batch (0 rows): the rows of variant {variant!r} are not proven or declared "
                             "independent, so no exported program can answer for 0 rows (an output over the batch "
                             "would see padding rows); skip the call for an empty batch")
        batch = next((b for b in self._candidates(variant) if self._get(variant, b) is not None), None)
        batch = self._largest(variant) if batch is None else batch  # none loaded: its KeyError names the errors
        try:
            return self._run(variant, batch, arrays, 0)
        finally:
            self._surface()

    def _candidates(self, variant: str) -> list[int]:
        return sorted(b for v, b in self._files if v == variant)

    def _fit(self, variant: str, m: int) -> int | None:
        """The smallest exported size >= ``m`` whose program loaded (waiting for each in turn), or None."""
        for b in self._candidates(variant):
            if b >= m and self._get(variant, b) is not None:
                return b
        return None

    def _largest(self, variant: str) -> int:
        """The largest exported size whose program loaded. Raises KeyError when none did."""
        for b in reversed(self._candidates(variant)):
            if self._get(variant, b) is not None:
                return b
        errors = self._context.errors if self._context is not None else {}
        failed = "; ".join(str(e) for e in errors.values())
        raise KeyError(f"no program of variant {variant!r} loaded: {failed}")

    def _run(self, variant: str, batch: int, arrays: list, n: int) -> list:
        """Flat output leaves of the ``batch`` program on ``arrays`` (``n`` rows, padded up to ``batch``),
        batched leaves cut back to ``n``."""
        import jax

        errors = self._context.errors if self._context is not None else {}
        if errors:  # a module that disagrees with the manifest: none of the variant's programs is used
            refuse_edited(errors, variant, [f for (v, _), f in self._files.items() if v == variant])
        compiled = self._programs[(variant, batch)]
        first = (variant, batch) not in self._called and self._first_call(variant, batch)
        args = []
        for x in arrays:
            if n == batch and isinstance(x, jax.Array) and x.devices() == {self.device}:
                args.append(x)  # already in place: no copy
                continue
            if n != batch:
                from xlakit.bundle.rows import pad_rows

                x = pad_rows(x, batch - n)
            args.append(jax.device_put(x, self.device))
        out = compiled(self.weights, *args)
        self._loader.first_run(out)  # the first result of a background load gets the cores first
        if first and self._usage is not None:  # after the dispatch: the recorder's thread starts while XLA runs
            self._usage(variant, batch)
        leaves = list(out) if variant in self._treedefs else jax.tree_util.tree_leaves(out)
        if variant not in self._treedefs:  # a version-1 module returns the pytree itself
            self._treedefs.setdefault(("v1", variant), jax.tree_util.tree_structure(out))
        if n == batch:
            return leaves
        specs = self.manifest.outputs[variant]
        return [leaf[:n] if i < len(specs) and specs[i].batched else leaf for i, leaf in enumerate(leaves)]

    def _chunks(self, variant: str, size: int, arrays: list, n: int) -> list:
        """Rows independent, batch above the largest size: run chunks of ``size`` rows and join them."""
        import jax.numpy as jnp

        parts = []
        for start in range(0, n, size):
            m = min(size, n - start)
            batch = self._fit(variant, m) or size  # size itself loaded and holds m rows
            parts.append(self._run(variant, batch, [x[start:start + m] for x in arrays], m))
        specs = self.manifest.outputs[variant]
        return [jnp.concatenate([p[i] for p in parts]) if i < len(specs) and specs[i].batched else leaf
                for i, leaf in enumerate(parts[0])]

    def _rebuild(self, variant: str, leaves: list) -> Any:
        """The output pytree, each leaf weakly typed where ``jax.jit`` returned it so (the manifest's record: the
        programs drop weak types; :mod:`xlakit.bundle.output_types`)."""
        from xlakit.bundle.output_types import restore_weak

        leaves = restore_weak(leaves, self.manifest.outputs[variant])
        treedef = self._treedefs.get(variant) or self._treedefs.get(("v1", variant))
        return treedef.unflatten(leaves) if treedef is not None else leaves

    def _exact(self, variant: str, n: int) -> None:
        """Make sure ``programs[(variant, n)]`` exists: loaded from ``.cache`` or compiled from the
        shape-polymorphic module, and stored. Raises ValueError / ModuleError."""
        with self._lock:
            if (variant, n) in self._programs:
                return
        with self._exact_lock:
            if (variant, n) in self._programs:
                return
            if variant not in self._poly or self._context is None:
                sizes = list(self.batch_sizes(variant))
                how, reason = self.manifest.rows(variant)
                if self.exact and self.manifest.independent(variant):
                    raise ValueError(f"batch of {n} is not an exported batch size of variant {variant!r} ({sizes}) "
                                     "and the bundle was loaded with exact=True, but it keeps no shape-polymorphic "
                                     "module to compile that size from (exported by an older xlakit, or its "
                                     "symbolic program could not be exported): call with one of those sizes, load "
                                     "without exact=True (padded rows: the same answer up to rounding), or export "
                                     "again")
                raise ValueError(f"batch of {n} is not an exported batch size of variant {variant!r} ({sizes}), and "
                                 f"padding or chunking could change the answer: rows {how} ({reason}). It has no "
                                 "shape-polymorphic module to compile the exact size from, so it is served only at "
                                 f"{sizes}: call with one of those batch sizes or export batch_sizes including {n}")
            spec, data, sha = self._poly[variant]
            if isinstance(data, BundleError):
                raise data
            report, compiled = self._context.load_instance(ModuleSpec(spec.file, variant, n), data, sha)
            self._extra_reports = self._extra_reports + (report,)
            if compiled is None:
                raise ModuleError(self.path / spec.file, None, f"no exact program for a batch of {n}: {report.reason}")
            with self._lock:
                self._programs[(variant, n)] = compiled

    def batch_sizes(self, variant: str = DEFAULT_VARIANT) -> tuple[int, ...]:
        """The exported batch sizes of ``variant`` whose programs loaded, ascending (waits for them)."""
        return tuple(b for b in self._candidates(variant) if self._get(variant, b) is not None)

    def _check_variant(self, variant: str) -> None:
        if variant not in self.manifest.variants:
            raise KeyError(f"bundle {self.manifest.name!r} has no variant {variant!r}; it has "
                           f"{list(self.manifest.variants)}")

    def _first_call(self, variant: str, batch: int) -> bool:
        """Mark an exported program called (it no longer needs a warm-up); True the first time, when the caller
        records it in ``.cache/usage.json`` once the run is dispatched."""
        with self._lock:
            if (variant, batch) in self._called:
                return False
            self._called.add((variant, batch))
        file = self._files.get((variant, batch))
        if file is None:
            return False
        self._loader.mark_used(file)
        return True

    def _arrange(self, inputs: tuple, named: dict) -> list[Any]:
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
        inputs = tuple(_as_jit_takes(x, spec.dtype) for spec, x in zip(specs, inputs, strict=True))
        for spec, x in zip(specs, inputs, strict=True):
            shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
            if shape is None or dtype is None:
                raise TypeError(f"input {spec.name!r}: expected an array, got {type(x).__name__}")
            if dtype_name(dtype) != spec.dtype:
                raise TypeError(f"input {spec.name!r}: dtype {dtype_name(dtype)}, the bundle takes {spec.dtype} "
                                f"(convert with x.astype('{spec.dtype}'))")
            if len(shape) != len(spec.shape) or tuple(shape[1:]) != tuple(spec.shape[1:]):
                raise ValueError(f"input {spec.name!r}: shape {list(shape)}, the bundle takes {list(spec.shape)}")
            if batch is not None and shape[0] != batch:
                raise ValueError(f"inputs disagree on the batch size: {batch} and {shape[0]} ({spec.name!r})")
            batch = shape[0]
        return list(inputs)

    # -- views ------------------------------------------------------------------------------------------
    def report(self):
        """``pandas.DataFrame``, one row per module (and per program compiled on demand for an exact batch
        size): module, variant, batch_size, status (hit/miss/error), load_s, compile_s (seconds),
        module_bytes, program_bytes, compiled memory (argument_bytes, output_bytes, temp_bytes,
        footprint_bytes; nullable ints), reason. See :class:`~xlakit.bundle.reports.ModuleReport`."""
        import pandas as pd

        frame = pd.DataFrame([r.to_dict() for r in self.reports], columns=list(REPORT_COLUMNS))
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
        head = "".join(f"<th>{html_text(c)}</th>" for c in ("module", "status", "load s", "compile s", "reason"))
        rows = "".join(
            f"<tr><td>{html_text(r.module)}</td><td>{html_text(r.status)}</td><td>{r.load_s:.3f}</td>"
            f"<td>{'' if r.compile_s is None else f'{r.compile_s:.3f}'}</td><td>{html_text(r.reason or '')}</td></tr>"
            for r in self.reports)
        return f"<p>{html_text(repr(self))}</p><table><tr>{head}</tr>{rows}</table>"


def _as_jit_takes(x: Any, want: str) -> Any:
    """``x`` as ``jax.jit`` would take it where that is the dtype the bundle takes: a host array (numpy) whose dtype
    JAX canonicalizes to ``want`` (float64 -> float32, int64 -> int32 while ``jax_enable_x64`` is off: NumPy's
    default dtypes) converted to it, as ``jax.jit`` converts it; anything else as it is (checked by the caller)."""
    import jax
    import numpy as np

    dtype = getattr(x, "dtype", None)
    if dtype is None or isinstance(x, jax.Array) or dtype_name(dtype) == want:
        return x
    try:
        canonical = jax.dtypes.canonicalize_dtype(dtype)
    except (TypeError, ValueError):
        return x
    return np.asarray(x, dtype=canonical) if dtype_name(canonical) == want else x
