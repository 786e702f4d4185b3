"""``LoadedBundle``: a loaded bundle's programs, callable like the original function, with exact answers
for any batch size.

How a call with a batch of ``n`` rows runs (``variant``'s programs were loaded for the exported sizes):

* ``n`` is an exported size: that program, as is.
* rows independent (``manifest.rows_independent[variant]``): padded up to the smallest exported size that
  fits, batched outputs cut back to ``n``; above the largest size, split into chunks of the largest size
  (the last one padded) and the batched outputs concatenated.
* rows coupled, or unknown: never padded. A program for exactly ``n`` rows is compiled from the variant's
  shape-polymorphic module (or loaded from ``.cache``, where it is stored like the others) for any ``n`` up
  to the largest exported size; above it, or without a polymorphic module, a ``ValueError`` says what to do.
* a version-1 bundle (exported before row coupling was recorded) is padded as before, with a
  ``RuntimeWarning`` once: re-export it.

Outputs come back as the exported function's pytree (:mod:`xlakit.bundle.trees`).
"""

from __future__ import annotations

import threading
import warnings
from html import escape
from pathlib import Path
from typing import Any

from xlakit.bundle.errors import BundleError, ModuleError
from xlakit.bundle.manifest import DEFAULT_VARIANT, Manifest, ModuleSpec, dtype_name
from xlakit.bundle.reports import REPORT_COLUMNS, ModuleReport

__all__ = ["LoadedBundle"]


class LoadedBundle:
    """A bundle's compiled programs and weights on one device, callable like the original function.

    ``loaded(x)`` (or ``loaded(x0, x1)``, or ``loaded(x=...)``) runs the batch as the module docstring says:
    exact for every batch size (padding or chunking only where rows are independent) and returns the
    outputs as the original function's pytree.

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
      weights_s: seconds reading, checking and placing the weights. total_s: seconds for the whole load.
    """

    def __init__(self, *, path: Path, manifest: Manifest, device: Any, weights: dict[str, Any],
                 programs: dict[tuple[str, int], Any], reports: tuple[ModuleReport, ...],
                 errors: dict[str, BundleError], dropped: tuple, record_problem: str | None,
                 weights_s: float, total_s: float, context: Any = None, poly: dict | None = None,
                 treedefs: dict | None = None, tree_notes: tuple[str, ...] = (),
                 cache_problem: str | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.device = device
        self.weights = weights
        self.programs = programs
        self.reports = reports
        self.errors = errors
        self.dropped = dropped
        self.record_problem = record_problem
        self.cache_problem = cache_problem
        self.weights_s = weights_s
        self.total_s = total_s
        self.tree_notes = tree_notes
        self._exported = {k for k in programs}
        self._context = context
        self._poly = poly or {}  # variant -> (ModuleSpec, bytes | BundleError, sha256 | None)
        self._treedefs = treedefs or {}
        self._lock = threading.Lock()
        self._warned_v1 = False

    # -- calling ----------------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, variant: str = DEFAULT_VARIANT, **named: Any) -> Any:
        """Run ``variant`` on ``inputs`` (positional in manifest order, or by name).

        Raises:
          TypeError: wrong number or names of inputs, or an input's dtype differs from the manifest's.
          ValueError: an input's non-batch dimensions differ from the manifest's, inputs disagree on the
            batch size, or (rows coupled) the batch is not an exported size and no exact program can be
            made, or exceeds the largest exported size.
          KeyError: unknown variant, or none of its modules loaded (the message lists the errors).
          xlakit.bundle.ModuleError: the exact program for this batch size could not be compiled.
        """
        arrays = self._arrange(inputs, named)
        n = int(arrays[0].shape[0])
        sizes = self._sizes(variant)
        if (variant, n) in self.programs:
            return self._rebuild(variant, self._run(variant, n, arrays, n))
        independent = self.manifest.independent(variant) if self.manifest.format_version >= 2 else None
        if independent is None and not self._warned_v1:
            self._warned_v1 = True
            warnings.warn(f"bundle {self.manifest.name!r} was exported by an older xlakit that did not record "
                          "whether rows are independent; batches are padded as before, which is wrong for "
                          "outputs that couple rows (batch means, sorts). Re-export it.", RuntimeWarning,
                          stacklevel=2)
        if independent is False:
            if n > sizes[-1]:
                raise ValueError(f"batch of {n} exceeds the largest loaded batch size {sizes[-1]} of variant "
                                 f"{variant!r}, and its rows are coupled (an output depends on several rows), so "
                                 "it cannot be split: export a larger batch size")
            self._exact(variant, n)
            return self._rebuild(variant, self._run(variant, n, arrays, n))
        if n <= sizes[-1]:
            batch = next(b for b in sizes if b >= n)
            return self._rebuild(variant, self._run(variant, batch, arrays, n))
        return self._rebuild(variant, self._chunks(variant, sizes[-1], arrays, n))

    def _run(self, variant: str, batch: int, arrays: list, n: int) -> list:
        """Flat output leaves of the ``batch`` program on ``arrays`` (``n`` rows, padded up to ``batch``),
        batched leaves cut back to ``n``."""
        import jax

        from xlakit.bundle.rows import pad_rows

        compiled = self.programs[(variant, batch)]
        args = []
        for x in arrays:
            if n == batch and isinstance(x, jax.Array) and x.devices() == {self.device}:
                args.append(x)  # already in place: no copy
                continue
            args.append(jax.device_put(pad_rows(x, batch - n), self.device))
        out = compiled(self.weights, *args)
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
            batch = next(b for b in self._sizes(variant) if b >= m)
            parts.append(self._run(variant, batch, [x[start:start + m] for x in arrays], m))
        specs = self.manifest.outputs[variant]
        return [jnp.concatenate([p[i] for p in parts]) if i < len(specs) and specs[i].batched else leaf
                for i, leaf in enumerate(parts[0])]

    def _rebuild(self, variant: str, leaves: list) -> Any:
        treedef = self._treedefs.get(variant) or self._treedefs.get(("v1", variant))
        return treedef.unflatten(leaves) if treedef is not None else leaves

    def _exact(self, variant: str, n: int) -> None:
        """Make sure ``programs[(variant, n)]`` exists: loaded from ``.cache`` or compiled from the
        shape-polymorphic module, and stored. Raises ValueError / ModuleError."""
        with self._lock:
            if (variant, n) in self.programs:
                return
            if variant not in self._poly or self._context is None:
                sizes = self._sizes(variant)
                raise ValueError(f"batch of {n} is not an exported batch size of variant {variant!r} ({list(sizes)}) "
                                 "and its rows are coupled (an output depends on several rows), so padding would "
                                 "change the answer; it has no shape-polymorphic module to compile the exact size "
                                 f"from. Call with a batch of {list(sizes)} or export batch_sizes including {n}")
            spec, data, sha = self._poly[variant]
            if isinstance(data, BundleError):
                raise data
            with self._context.compiles:  # fresh compile, hooks released afterwards
                report, compiled = self._context.load_instance(ModuleSpec(spec.file, variant, n), data, sha)
            self.reports = self.reports + (report,)
            if compiled is None:
                raise ModuleError(self.path / spec.file, None, f"no exact program for a batch of {n}: {report.reason}")
            self.programs[(variant, n)] = compiled

    def batch_sizes(self, variant: str = DEFAULT_VARIANT) -> tuple[int, ...]:
        """The exported batch sizes of ``variant`` whose programs loaded, ascending."""
        return tuple(sorted(b for v, b in self._exported if v == variant))

    def _sizes(self, variant: str) -> tuple[int, ...]:
        if variant not in self.manifest.variants:
            raise KeyError(f"bundle {self.manifest.name!r} has no variant {variant!r}; it has "
                           f"{list(self.manifest.variants)}")
        sizes = self.batch_sizes(variant)
        if not sizes:
            failed = "; ".join(str(e) for f, e in self.errors.items())
            raise KeyError(f"no program of variant {variant!r} loaded: {failed}")
        return sizes

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
        for spec, x in zip(specs, inputs):
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
        if not batch:
            raise ValueError("empty batch (batch size 0)")
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
        head = "".join(f"<th>{escape(c)}</th>" for c in ("module", "status", "load s", "compile s", "reason"))
        rows = "".join(
            f"<tr><td>{escape(r.module)}</td><td>{escape(r.status)}</td><td>{r.load_s:.3f}</td>"
            f"<td>{'' if r.compile_s is None else f'{r.compile_s:.3f}'}</td><td>{escape(r.reason or '')}</td></tr>"
            for r in self.reports)
        return f"<p>{escape(repr(self))}</p><table><tr>{head}</tr>{rows}</table>"
