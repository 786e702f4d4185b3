"""Errors about a bundle's files. Each names the file and the field (or tensor, or argument) at fault.

``BundleError`` subclasses ``ValueError`` (bad input, not a bug), so ``except ValueError`` catches them too.
"""

from __future__ import annotations

__all__ = ["BundleError", "ManifestError", "ModuleError", "ManifestMismatch", "WeightsError"]


class BundleError(ValueError):
    """A bundle file is missing, unreadable or disagrees with another file.

    Attributes:
      file: path of the file at fault (as given; usually ``<bundle>/<name>``).
      field: the field, tensor name or argument position at fault, or None when the whole file is.
      problem: what is wrong, in words, without the file and field.
    """

    def __init__(self, file: object, field: str | None, problem: str) -> None:
        self.file = str(file)
        self.field = field
        self.problem = problem
        where = f"{self.file}: field {field!r}" if field else self.file
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # keep the three attributes across pickling (e.g. from a worker process)
        return (type(self), (self.file, self.field, self.problem))


class ManifestError(BundleError):
    """``manifest.json`` is missing, not JSON, or lacks or misstates a field."""


class ModuleError(BundleError):
    """A module file (``*.jaxexp``) is missing, is not a ``jax.export`` artifact, was exported for another
    platform, or its signature disagrees with the manifest. Only that module fails; the others still load."""


class ManifestMismatch(ModuleError):
    """A module's weights, inputs or outputs disagree with ``manifest.json``: one of them was changed after the
    export (with the module's SHA-256 in the manifest and matching, the manifest). The loaded bundle then uses no
    program of that variant (its batching and padding come from the manifest)."""


def refuse_edited(errors: dict, variant: str, files: list) -> None:
    """Raise ``KeyError`` when a module of ``variant`` (its ``files``) failed with :class:`ManifestMismatch`
    (``errors``: module file -> the error its load raised): its padding and batching would come from a manifest
    that is not the exported one."""
    edited = next((e for f, e in list(errors.items()) if isinstance(e, ManifestMismatch) and f in files), None)
    if edited is not None:
        raise KeyError(f"variant {variant!r} is not used: {edited}; the manifest and its module disagree, so one "
                       "of them was changed after the export; re-export the bundle")


class WeightsError(BundleError):
    """``weights.safetensors`` is missing or unreadable, or its tensor names, shapes or dtypes disagree with
    the manifest."""
