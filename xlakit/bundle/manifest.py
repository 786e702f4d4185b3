"""``manifest.json``: what a bundle holds, read and written without JAX.

A bundle folder::

    <bundle>/
      manifest.json          this file
      model.b1.jaxexp        jax.export module of the "default" variant at batch size 1
      model.fast.b8.jaxexp   variant "fast" at batch size 8 (one file per variant and batch size)
      weights.safetensors    parameters; tensor names are the flattened pytree paths
      .cache/                compiled programs per environment partition, and module_hashes.json

The manifest (``format_version`` 2; version 1 files, written before the fields marked *v2*, still load)::

    {"format": "xlakit.bundle", "format_version": 1, "name": "my_model",
     "inputs": [{"name": "x", "shape": ["batch", 784], "dtype": "float32"}],
     "outputs": {"default": [{"name": "output", "shape": ["batch", 10], "dtype": "float32"}]},
     "batch_sizes": [1, 8], "variants": ["default"],
     "weights": {"file": "weights.safetensors",
                 "tensors": {"layers.0.kernel": {"shape": [784, 512], "dtype": "float32"}, ...}},
     "platforms": ["cpu"], "created_with": {"jax": "0.10.2", "xlakit": "0.1.0"},
     "output_trees": {"default": {"leaf": 0}},                      (v2)
     "rows_independent": {"default": true},                         (v2)
     "polymorphic": {"default": "model.bpoly.jaxexp"},              (v2, only variants that have one)
     "row_independence": {"default": {"how": "proven", "reason": "..."}}}   (v2, optional)

*v2*: modules return their outputs as a flat tuple of leaves (in ``outputs`` order) and ``output_trees``
says how to rebuild the pytree (:mod:`xlakit.bundle.trees`), so any pytree works, namedtuples and
dataclasses included. ``rows_independent`` says whether each output row depends only on its own input row,
and ``row_independence`` how that was established (:mod:`xlakit.bundle.rows`): ``proven`` (over the jaxpr
with a symbolic batch, for every batch size), ``declared`` (the exporter's override), ``coupled`` or
``size-dependent``, with the reason. A call may pad a batch or split it into chunks only when it is proven or
declared independent; a manifest without ``row_independence`` (an older xlakit's row *test*) is never padded.
A coupled variant keeps a shape-polymorphic module (batch axis symbolic), from which the exact batch size of
a call is compiled. An output spec may add ``"weak_type": true`` (written only when true): ``jax.jit``
returns that output weakly typed (:mod:`xlakit.bundle.output_types`). Dtypes are NumPy names, or JAX's
extended dtype names such as ``key<fry>`` (typed PRNG keys).

Shapes name their batch axis ``"batch"``; only axis 0 can be the batch axis. Every input is batched; an
output whose leading size does not follow the batch size (a scalar, a per-model statistic) has plain
integer dimensions. Module file names follow from ``variants`` and ``batch_sizes`` (:func:`module_file`),
so the manifest lists no file twice. Weight tensors carry no batch axis.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from xlakit._record import Record
from xlakit.bundle.errors import ManifestError
from xlakit.bundle.files import MAX_JSON_BYTES, MAX_JSON_DEPTH, read_regular, write_atomic
from xlakit.store import safejson

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "WEIGHTS", "CACHE_DIR", "MODULE_SUFFIX", "BATCH",
           "DEFAULT_VARIANT", "READABLE_VERSIONS", "dtype_name", "TensorSpec", "ModuleSpec", "Manifest",
           "module_file", "ROW_HOWS", "parse_row_independence"]

FORMAT = "xlakit.bundle"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
CACHE_DIR = ".cache"
MODULE_SUFFIX = ".jaxexp"
BATCH = "batch"
DEFAULT_VARIANT = "default"

# Variant names: they become part of file names.
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_NO_ENTRIES: Mapping[str, Any] = MappingProxyType({})  # the default of the optional mapping fields (read-only)
_REQUIRED = ("format", "format_version", "name", "inputs", "outputs", "batch_sizes", "variants", "weights")


def dtype_name(dtype: Any) -> str:
    """The manifest's name of a dtype: NumPy's (``"float32"``, ``"bfloat16"``), or ``str(dtype)`` for a JAX
    extended dtype NumPy cannot represent (``"key<fry>"`` for typed PRNG keys)."""
    import numpy as np

    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def module_file(variant: str, batch_size: int | None) -> str:
    """File name of one module: ``model.b8.jaxexp`` for the default variant, ``model.<variant>.b8.jaxexp``
    otherwise; ``batch_size=None`` names the shape-polymorphic module (``model.bpoly.jaxexp``)."""
    stem = "model" if variant == DEFAULT_VARIANT else f"model.{variant}"
    return f"{stem}.b{'poly' if batch_size is None else batch_size}{MODULE_SUFFIX}"


class TensorSpec(Record):
    """Name, shape and dtype of one input, output or weight tensor.

    Attributes:
      name: input/output name, or a weight's flattened pytree path (``"layers.0.kernel"``).
      shape: dimensions; axis 0 may be the string ``"batch"`` (the batch axis), all others are ints >= 0.
      dtype: NumPy dtype name (``"float32"``, ``"bfloat16"``, ``"int32"``...) or a JAX extended dtype name
        (``"key<fry>"`` for a typed PRNG key array made by ``jax.random.key``).
      weak_type: an output ``jax.jit`` returns weakly typed (:mod:`xlakit.bundle.output_types`); written only
        when true (``"weak_type": true``), absent means false.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    weak_type: bool = False

    @property
    def batched(self) -> bool:
        """True when axis 0 is the batch axis."""
        return bool(self.shape) and self.shape[0] == BATCH

    def concrete(self, batch_size: int) -> tuple[int, ...]:
        """The shape with the batch axis set to ``batch_size``."""
        return tuple(batch_size if d == BATCH else int(d) for d in self.shape)

    def describe(self, batch_size: int | None = None) -> str:
        shape = self.concrete(batch_size) if batch_size is not None else self.shape
        return f"{self.dtype}[{','.join(str(d) for d in shape)}]"

    def to_dict(self, with_name: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name} if with_name else {}
        d.update(shape=list(self.shape), dtype=self.dtype)
        if self.weak_type:  # only then: every other spec keeps the bytes it had before the field existed
            d["weak_type"] = True
        return d

    @classmethod
    def from_dict(cls, d: Any, file: Path, where: str, name: str | None = None,
                  batch_allowed: bool = True) -> TensorSpec:
        """Parse ``d``; ``where`` names its position (``"inputs[0]"``) in errors. Raises ManifestError."""
        if not isinstance(d, Mapping):
            raise ManifestError(file, where, f"expected an object with name, shape and dtype, got {_kind(d)}")
        if name is None:
            name = d.get("name")
            if not isinstance(name, str) or not name:
                raise ManifestError(file, f"{where}.name", "missing or not a non-empty string")
        if "shape" not in d:
            raise ManifestError(file, f"{where}.shape", "missing")
        shape = d["shape"]
        if not isinstance(shape, list):
            raise ManifestError(file, f"{where}.shape", f"expected a list of dimensions, got {_kind(shape)}")
        for i, dim in enumerate(shape):
            ok_batch = batch_allowed and i == 0 and dim == BATCH
            if not ok_batch and not (isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0):
                allowed = "an int >= 0" + (' or "batch" (axis 0 only)' if batch_allowed else "")
                raise ManifestError(file, f"{where}.shape[{i}]", f"expected {allowed}, got {dim!r}")
        dtype = d.get("dtype")
        if not isinstance(dtype, str) or not dtype:
            raise ManifestError(file, f"{where}.dtype", "missing or not a dtype name such as 'float32'")
        weak = d.get("weak_type", False)
        if not isinstance(weak, bool):
            raise ManifestError(file, f"{where}.weak_type", f"expected true or false, got {weak!r:.60}")
        if weak and (dtype == "bool" or dtype.startswith("uint")):  # what a Python bool / int never makes weak
            raise ManifestError(file, f"{where}.weak_type", f"a {dtype} value is never weakly typed in JAX (a weak "
                                "type comes from a Python int, float or complex); the field was edited")
        return cls(name, tuple(shape), dtype, weak)


class ModuleSpec(Record):
    """One module file: the program of ``variant`` at ``batch_size`` (None: the shape-polymorphic module,
    whose batch axis is symbolic)."""

    file: str
    variant: str
    batch_size: int | None

    @property
    def stem(self) -> str:
        """``model.b8`` for ``model.b8.jaxexp``."""
        return self.file[: -len(MODULE_SUFFIX)]


class Manifest(Record):
    """The parsed ``manifest.json`` (see the module docstring for the format).

    Attributes:
      name: the bundle's name (by default its folder's name when exported).
      inputs: one spec per positional input, every one batched on axis 0.
      outputs: variant -> the flattened output leaves' specs (names are pytree paths, ``"output"`` for a
        single array).
      batch_sizes: compiled batch sizes, ascending.
      variants: variant names, ``"default"`` first.
      weights: one spec per weight tensor (no batch axis), sorted by name.
      weights_file: the safetensors file name, relative to the bundle.
      platforms: platforms the modules were exported for (``jax.export``'s ``platforms``).
      created_with: versions that wrote the bundle (information only).
      output_trees: variant -> the JSON form of the output pytree (:mod:`xlakit.bundle.trees`); empty for a
        version-1 bundle, whose modules return the pytree themselves.
      rows_independent: variant -> True when every output row depends only on its input row (padding and
        chunking are exact), False when rows are coupled or it is unknown (never padded).
      polymorphic: variant -> file name of its shape-polymorphic module (coupled variants only).
      row_independence: variant -> ``{"how": ..., "reason": ...}`` (see the module docstring); empty for a
        bundle exported before it was recorded.
      module_sha256: module file -> the SHA-256 (hex) of the bytes the export wrote; a module whose bytes differ
        at load (replaced, edited, another bundle's) is refused. Empty for a bundle exported before it was
        recorded (not checked). The manifest itself is not authenticated: this catches a module changed alone.
      format_version: the file's version (1 or 2).
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: Mapping[str, tuple[TensorSpec, ...]]
    batch_sizes: tuple[int, ...]
    variants: tuple[str, ...]
    weights: tuple[TensorSpec, ...]
    weights_file: str = WEIGHTS
    platforms: tuple[str, ...] = ()
    created_with: Mapping[str, str] = _NO_ENTRIES
    output_trees: Mapping[str, Any] = _NO_ENTRIES
    rows_independent: Mapping[str, bool] = _NO_ENTRIES
    polymorphic: Mapping[str, str] = _NO_ENTRIES
    row_independence: Mapping[str, Mapping[str, str]] = _NO_ENTRIES
    module_sha256: Mapping[str, str] = _NO_ENTRIES
    format_version: int = FORMAT_VERSION

    @property
    def modules(self) -> tuple[ModuleSpec, ...]:
        """Every fixed-size module, variant by variant, batch sizes ascending."""
        return tuple(ModuleSpec(module_file(v, b), v, b) for v in self.variants for b in self.batch_sizes)

    @property
    def poly_modules(self) -> tuple[ModuleSpec, ...]:
        """The shape-polymorphic modules (``batch_size`` None), one per coupled variant that has one."""
        return tuple(ModuleSpec(self.polymorphic[v], v, None) for v in self.variants if v in self.polymorphic)

    @property
    def files(self) -> tuple[str, ...]:
        """Every file the manifest names: modules (fixed and polymorphic), weights, the manifest itself."""
        return tuple(m.file for m in self.modules + self.poly_modules) + (self.weights_file, MANIFEST)

    def independent(self, variant: str) -> bool:
        """True only when ``variant``'s rows were proven or declared independent (padding and chunking are
        then allowed). An older manifest's ``rows_independent: true`` came from a test, not a proof: False."""
        how, _ = self.rows(variant)
        return how in ("proven", "declared") and bool(self.rows_independent.get(variant, False))

    def rows(self, variant: str) -> tuple[str, str]:
        """``(how, reason)``: how ``variant``'s row independence was established (``proven``, ``declared``,
        ``coupled``, ``size-dependent``, or ``unproven`` for a bundle exported before it was recorded)."""
        entry = self.row_independence.get(variant)
        if entry is not None:
            return str(entry["how"]), str(entry["reason"])
        if self.rows_independent.get(variant, False):
            return "unproven", ("an older xlakit tested the rows on one input and proved nothing; re-export the "
                                "bundle to prove them")
        return "unproven", "exported before row independence was recorded; re-export the bundle"

    def module(self, variant: str, batch_size: int) -> ModuleSpec:
        return ModuleSpec(module_file(variant, batch_size), variant, batch_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "name": self.name,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": {v: [s.to_dict() for s in specs] for v, specs in self.outputs.items()},
            "batch_sizes": list(self.batch_sizes), "variants": list(self.variants),
            "weights": {"file": self.weights_file,
                        "tensors": {s.name: s.to_dict(with_name=False) for s in self.weights}},
            "platforms": list(self.platforms), "created_with": dict(self.created_with),
            "output_trees": dict(self.output_trees), "rows_independent": dict(self.rows_independent),
            "polymorphic": dict(self.polymorphic),
            "row_independence": {v: dict(e) for v, e in self.row_independence.items()},
            "module_sha256": dict(self.module_sha256),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: Any, file: str | os.PathLike = MANIFEST) -> Manifest:
        """Parse and validate. Raises :class:`ManifestError` naming ``file`` and the first bad field."""
        file = Path(file)
        if not isinstance(d, Mapping):
            raise ManifestError(file, None, f"expected a JSON object, got {_kind(d)}")
        for name in _REQUIRED:
            if name not in d:
                raise ManifestError(file, name, "missing (required: " + ", ".join(_REQUIRED) + ")")
        if d["format"] != FORMAT:
            raise ManifestError(file, "format", f"expected {FORMAT!r}, got {d['format']!r}: not an xlakit bundle")
        version = d["format_version"]
        if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ManifestError(file, "format_version", f"this xlakit reads versions {list(READABLE_VERSIONS)}, the "
                                f"bundle says {version!r}; re-export it or upgrade xlakit")
        name = d["name"]
        if not isinstance(name, str) or not name:
            raise ManifestError(file, "name", "expected a non-empty string")

        variants = d["variants"]
        if not isinstance(variants, list) or not variants:
            raise ManifestError(file, "variants", "expected a non-empty list of names")
        for i, v in enumerate(variants):
            if not isinstance(v, str) or not 0 < len(v) <= 64 or not _NAME_CHARS.issuperset(v):
                raise ManifestError(file, f"variants[{i}]", f"expected 1-64 characters of [A-Za-z0-9_-], got {v!r}")
        if len(set(variants)) != len(variants):
            raise ManifestError(file, "variants", f"duplicate names in {variants}")

        sizes = d["batch_sizes"]
        if not isinstance(sizes, list) or not sizes:
            raise ManifestError(file, "batch_sizes", "expected a non-empty list of positive integers")
        for i, b in enumerate(sizes):
            if not (isinstance(b, int) and not isinstance(b, bool) and b > 0):
                raise ManifestError(file, f"batch_sizes[{i}]", f"expected a positive integer, got {b!r}")
        if len(set(sizes)) != len(sizes):
            raise ManifestError(file, "batch_sizes", f"duplicate sizes in {sizes}")

        raw_inputs = d["inputs"]
        if not isinstance(raw_inputs, list) or not raw_inputs:
            raise ManifestError(file, "inputs", "expected a non-empty list of tensor specs")
        inputs = tuple(TensorSpec.from_dict(s, file, f"inputs[{i}]") for i, s in enumerate(raw_inputs))
        for i, s in enumerate(inputs):
            if not s.batched:
                raise ManifestError(file, f"inputs[{i}].shape", f"input {s.name!r} has no batch axis: axis 0 must "
                                    f'be "batch", got {list(s.shape)}')
        names = [s.name for s in inputs]
        if len(set(names)) != len(names):
            raise ManifestError(file, "inputs", f"duplicate input names in {names}")

        raw_outputs = d["outputs"]
        if not isinstance(raw_outputs, Mapping):
            raise ManifestError(file, "outputs",
                                f"expected an object variant -> list of specs, got {_kind(raw_outputs)}")
        outputs: dict[str, tuple[TensorSpec, ...]] = {}
        for v in variants:
            if v not in raw_outputs:
                raise ManifestError(file, f"outputs.{v}", "missing: every variant needs its outputs")
            specs = raw_outputs[v]
            if not isinstance(specs, list):
                raise ManifestError(file, f"outputs.{v}", f"expected a list of tensor specs, got {_kind(specs)}")
            outputs[v] = tuple(TensorSpec.from_dict(s, file, f"outputs.{v}[{i}]") for i, s in enumerate(specs))

        weights = d["weights"]
        if not isinstance(weights, Mapping):
            raise ManifestError(file, "weights", f"expected an object with file and tensors, got {_kind(weights)}")
        wfile = weights.get("file", WEIGHTS)
        if not isinstance(wfile, str) or not wfile or "/" in wfile or "\\" in wfile or wfile.startswith("."):
            raise ManifestError(file, "weights.file", f"expected a file name inside the bundle, got {wfile!r}")
        tensors = weights.get("tensors")
        if not isinstance(tensors, Mapping):
            raise ManifestError(file, "weights.tensors", "missing or not an object tensor name -> {shape, dtype}")
        wspecs = tuple(TensorSpec.from_dict(spec, file, f"weights.tensors.{tname}", name=tname, batch_allowed=False)
                       for tname, spec in tensors.items())

        platforms = d.get("platforms", [])
        if not isinstance(platforms, list) or not all(isinstance(p, str) for p in platforms):
            raise ManifestError(file, "platforms", f"expected a list of platform names, got {platforms!r}")
        created = d.get("created_with", {})
        trees, independent, poly = _v2_fields(d, file, variants, outputs, version)
        established = parse_row_independence(d, file, variants) if version >= 2 else {}
        hashes = d.get("module_sha256", {})
        if not isinstance(hashes, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and len(v) == 64 and _HEX.issuperset(v)
                for k, v in hashes.items()):
            raise ManifestError(file, "module_sha256", "expected an object module file -> 64 hex digits")
        return cls(name=name, inputs=inputs, outputs=outputs, batch_sizes=tuple(sorted(sizes)),
                   variants=tuple(variants), weights=tuple(sorted(wspecs, key=lambda s: s.name)),
                   weights_file=wfile, platforms=tuple(platforms),
                   created_with=dict(created) if isinstance(created, Mapping) else {}, output_trees=trees,
                   rows_independent=independent, polymorphic=poly, row_independence=established,
                   module_sha256=dict(hashes), format_version=version)

    @classmethod
    def read(cls, bundle: str | os.PathLike) -> Manifest:
        """Read ``<bundle>/manifest.json``. Raises :class:`ManifestError` (missing, not JSON, bad field)."""
        file = Path(bundle) / MANIFEST
        if Path(bundle).exists() and not Path(bundle).is_dir():
            raise ManifestError(Path(bundle), None, "is a file, not a bundle folder; pass the folder that holds "
                                "manifest.json")
        if not os.path.lexists(bundle):
            raise ManifestError(Path(bundle), None, "does not exist; pass the path of a bundle folder (one with "
                                "manifest.json, written by xlakit.export_bundle)")
        try:
            text = read_regular(file, MAX_JSON_BYTES)
        except FileNotFoundError:
            raise ManifestError(file, None, "missing: not a bundle folder (export one with "
                                "xlakit.export_bundle)") from None
        except OSError as e:
            raise ManifestError(file, None, f"unreadable: {e}") from None
        try:
            data = safejson.loads(text, MAX_JSON_DEPTH)
        except ValueError as e:  # safejson.UnsafeJson: syntax, depth, UTF-8, non-finite or huge numbers
            raise ManifestError(file, None, f"not valid JSON: {e}") from None
        return cls.from_dict(data, file)

    def write(self, bundle: str | os.PathLike) -> Path:
        """Write ``<bundle>/manifest.json`` atomically; returns its path. Raises OSError."""
        path = Path(bundle) / MANIFEST
        write_atomic(path, self.to_json().encode("utf-8"))
        return path

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.describe()}" for s in self.inputs)
        return (f"Manifest({self.name!r}, inputs=[{ins}], batch_sizes={list(self.batch_sizes)}, "
                f"variants={list(self.variants)}, {len(self.weights)} weight tensors)")


#: How a variant's row independence was established (:mod:`xlakit.bundle.rows`).
ROW_HOWS = ("proven", "declared", "coupled", "size-dependent")


def parse_row_independence(d: Mapping[str, Any], file: Any, variants: Sequence[str]) -> dict[str, dict[str, str]]:
    """The optional ``row_independence`` field of a manifest ``d``, validated (absent: {}). Raises
    :class:`~xlakit.bundle.errors.ManifestError` naming ``file`` and the bad entry."""
    value = d.get("row_independence", {})
    if not isinstance(value, Mapping):
        raise ManifestError(file, "row_independence",
                            f"expected an object variant -> {{how, reason}}, got {type(value).__name__}")
    out = {}
    for v, entry in value.items():
        if v not in variants:
            raise ManifestError(file, f"row_independence.{v}", "not a variant of this bundle")
        if not isinstance(entry, Mapping) or entry.get("how") not in ROW_HOWS or \
                not isinstance(entry.get("reason"), str):
            raise ManifestError(file, f"row_independence.{v}", f"expected {{\"how\": one of {list(ROW_HOWS)}, "
                                f"\"reason\": text}}, got {entry!r:.200}")
        out[v] = {"how": entry["how"], "reason": entry["reason"]}
    return out


def _v2_fields(d: Mapping[str, Any], file: Path, variants: list, outputs: Mapping[str, tuple],
               version: int) -> tuple[dict, dict, dict]:
    """``output_trees``, ``rows_independent`` and ``polymorphic``, validated (absent in version 1)."""
    from xlakit.bundle.trees import TreeError, tree_leaf_count

    if version == 1:
        return {}, {}, {}
    fields = {}
    for name in ("output_trees", "rows_independent", "polymorphic"):
        value = d.get(name)
        if not isinstance(value, Mapping):
            raise ManifestError(file, name, f"missing or not an object variant -> value (got {_kind(value)})")
        extra = sorted(set(value) - set(variants), key=str)
        if extra:
            raise ManifestError(file, f"{name}.{extra[0]}", "not a variant of this bundle")
        fields[name] = value
    trees = {}
    for v in variants:
        if v not in fields["output_trees"]:
            raise ManifestError(file, f"output_trees.{v}", "missing: every variant needs its output tree")
        try:
            n = tree_leaf_count(fields["output_trees"][v])
        except TreeError as e:
            raise ManifestError(file, f"output_trees.{v}", str(e)) from None
        if n != len(outputs[v]):
            raise ManifestError(file, f"output_trees.{v}", f"has {n} leaves, outputs.{v} lists {len(outputs[v])}")
        trees[v] = fields["output_trees"][v]
    independent = {}
    for v, flag in fields["rows_independent"].items():
        if not isinstance(flag, bool):
            raise ManifestError(file, f"rows_independent.{v}", f"expected true or false, got {flag!r}")
        independent[v] = flag
    poly = {}
    for v, fname in fields["polymorphic"].items():
        if fname != module_file(v, None):
            raise ManifestError(file, f"polymorphic.{v}", f"expected {module_file(v, None)!r}, got {fname!r}")
        poly[v] = fname
    return trees, independent, poly


_HEX = frozenset("0123456789abcdef")


def _kind(x: Any) -> str:
    return "null" if x is None else type(x).__name__
