"""Bundles: a model as a folder you can copy to another machine and start from in a fraction of a compile.

::

    my_model/
      manifest.json        name, inputs/outputs (shapes with a named batch axis, dtypes), batch sizes, variants
      model.b1.jaxexp      jax.export module at batch size 1 (one file per batch size and variant)
      model.b8.jaxexp
      model.bpoly.jaxexp   only where rows couple: batch axis symbolic, exact sizes compiled from it
      weights.safetensors  parameters; tensor names are the flattened pytree paths
      .cache/              compiled programs per environment partition, and module_hashes.json

* :func:`export_bundle` writes one (``jax.export`` + safetensors; compiles nothing).
* :func:`load_bundle` returns a :class:`LoadedBundle`: programs loaded from ``.cache`` (no tracing, no
  model code) or compiled and stored there (``background=True``: returns once the weights are placed and each
  call waits only for its own program; ``warmup=True``: each program runs once on zeros after it loads);
  ``loaded(x)`` gives the original function's answer for any
  batch size (padding or chunking only where rows are independent) as the original output pytree.
* :class:`BundleWatcher` reports bundles added, changed, renamed or removed in a folder of bundles.
* :func:`check_bundle` says what a bundle holds and what a load would drop, without JAX.

Modules: :mod:`~xlakit.bundle.manifest` (format), :mod:`~xlakit.bundle.files` (bounded reads, bounded
JSON, temps, ``.cache`` symlinks), :mod:`~xlakit.bundle.weights` (safetensors), :mod:`~xlakit.bundle.trees`
(output pytrees as data), :mod:`~xlakit.bundle.output_types` (outputs' batch axes and weak types),
:mod:`~xlakit.bundle.rows` (how row independence is established; padding), :mod:`~xlakit.bundle.row_proof`
and :mod:`~xlakit.bundle.row_rules` (the proof), :mod:`~xlakit.bundle.export`, :mod:`~xlakit.bundle.hashes`
(module-hash record),
:mod:`~xlakit.bundle.loader`, :mod:`~xlakit.bundle.programs` (one module: load or compile),
:mod:`~xlakit.bundle.background` (the ranked loading threads), :mod:`~xlakit.bundle.usage` (first-call order),
:mod:`~xlakit.bundle.loaded` (calling), :mod:`~xlakit.bundle.reports`, :mod:`~xlakit.bundle.progress` (the
bar), :mod:`~xlakit.bundle.watcher`, :mod:`~xlakit.bundle.check`, :mod:`~xlakit.bundle.errors`. Importing
this package does not import JAX, and each name loads its own module on first use (``load_bundle`` imports
neither the exporter nor the watcher: the first result after a restart pays only for what it runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xlakit.bundle.check import BundleCheck, ModuleCheck, check_bundle
    from xlakit.bundle.errors import BundleError, ManifestError, ModuleError, WeightsError
    from xlakit.bundle.export import export_bundle
    from xlakit.bundle.hashes import Drop
    from xlakit.bundle.loaded import LoadedBundle
    from xlakit.bundle.loader import DEFAULT_MAX_WORKERS, ModuleReport, load_bundle
    from xlakit.bundle.manifest import Manifest, ModuleSpec, TensorSpec
    from xlakit.bundle.watcher import BundleChange, BundleWatcher

__all__ = ["export_bundle", "load_bundle", "LoadedBundle", "ModuleReport", "DEFAULT_MAX_WORKERS",
           "BundleWatcher", "BundleChange", "check_bundle", "BundleCheck", "ModuleCheck", "Manifest", "ModuleSpec",
           "TensorSpec", "Drop", "BundleError", "ManifestError", "ModuleError", "WeightsError"]

from xlakit._lazy import lazy_exports  # noqa: E402 - placed by the names it serves

#: Public name -> the module that defines it.
_HOME = {
    **dict.fromkeys(("BundleCheck", "ModuleCheck", "check_bundle"), "check"),
    **dict.fromkeys(("BundleError", "ManifestError", "ModuleError", "WeightsError"), "errors"),
    "export_bundle": "export",
    "Drop": "hashes",
    **dict.fromkeys(("DEFAULT_MAX_WORKERS", "ModuleReport", "load_bundle"), "loader"),
    "LoadedBundle": "loaded",
    **dict.fromkeys(("Manifest", "ModuleSpec", "TensorSpec"), "manifest"),
    **dict.fromkeys(("BundleChange", "BundleWatcher"), "watcher"),
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals(), __all__)
