"""``export_bundle``: write a model as a bundle folder with ``jax.export`` and safetensors.

Each module is ``jax.export.export(jax.jit(bundle_fn))(weight_avals, *input_avals).serialize()`` for one
variant and batch size, where ``bundle_fn(weights, *inputs)`` takes the parameters as a flat dict
``{tensor name: array}`` (the names of ``weights.safetensors``) and rebuilds the caller's parameter tree
inside the traced function before calling ``fn(params, *inputs)``. So any pytree works as ``params`` —
``flax.nnx.State`` included, whose node types ``jax.export`` cannot serialize — and a loaded bundle needs
neither the model's Python code nor its tree structure. Exporting traces and lowers; it compiles nothing.

Files are written through temp files and renames, manifest last; a file whose bytes are unchanged is not
rewritten (a weights-only update touches only ``weights.safetensors``, so a watcher sees just that).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlakit.bundle.manifest import (BATCH, CACHE_DIR, DEFAULT_VARIANT, MANIFEST, MODULE_SUFFIX, WEIGHTS,
                                    Manifest, TensorSpec, write_atomic)
from xlakit.bundle.weights import flatten_params, to_numpy, weights_file_bytes

__all__ = ["export_bundle"]

_VARIANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def export_bundle(fn: Callable[..., Any], params: Any, example_inputs: Any, path: str | os.PathLike,
                  batch_sizes: Sequence[int] = (1,), variants: Mapping[str, Callable[..., Any]] | None = None, *,
                  name: str | None = None, overwrite: bool = False,
                  platforms: Sequence[str] | None = None) -> Manifest:
    """Write ``fn`` and ``params`` as a bundle folder at ``path``.

    Args:
      fn: ``fn(params, *inputs) -> outputs`` (with a dict of example inputs: ``fn(params, **inputs)``); a
        plain or ``jax.jit``-wrapped function. Outputs may be any pytree of arrays.
      params: any pytree of arrays (nested dicts, ``flax.nnx.State``, dataclasses...). Stored in
        ``weights.safetensors`` under their flattened path names.
      example_inputs: one array, a tuple of arrays (positional inputs named ``x0``, ``x1``...; a single
        array is named ``x``) or a dict name -> array. Arrays or ``jax.ShapeDtypeStruct``; only shapes and
        dtypes are used. Axis 0 of every input is the batch axis; its size here does not matter.
      path: the bundle folder (created if missing).
      batch_sizes: batch sizes to export, one module each (default ``(1,)``).
      variants: more functions with ``fn``'s signature, by name (e.g. ``{"fast": fn_bf16}``); each becomes
        ``model.<name>.b<n>.jaxexp``. ``fn`` itself is the variant ``"default"``.
      name: the bundle's name in the manifest (default: the folder's name).
      overwrite: replace a *different* bundle (or a non-empty folder) at ``path``. Re-exporting identical
        content never needs it. Files that are not bundle files, and ``.cache/``, are left in place.
      platforms: ``jax.export`` platforms (e.g. ``["cpu", "cuda"]``); default: the default backend's.

    Returns:
      The written :class:`~xlakit.bundle.manifest.Manifest`.

    Raises:
      FileExistsError: ``path`` holds a different bundle, or a non-empty non-bundle folder, and
        ``overwrite`` is False; nothing was written. The message says what differs.
      ValueError: bad ``batch_sizes``/``variants``/inputs, parameters that are not arrays, two parameter
        paths with the same name, or outputs whose leading axis does not follow the batch size
        consistently.
      TypeError: ``fn`` or a variant is not callable.
      Errors from tracing ``fn`` pass through.
    """
    import jax
    import numpy as np

    import xlakit

    path = Path(path)
    sizes = _batch_sizes(batch_sizes)
    functions = {DEFAULT_VARIANT: fn, **_variants(variants)}
    for vname, f in functions.items():
        if not callable(f):
            raise TypeError(f"variant {vname!r}: expected a callable fn(params, *inputs), got {type(f).__name__}")
    input_names, input_avals, by_keyword = _inputs(example_inputs)
    bundle_name = name or path.resolve().name

    names, leaves, treedef = flatten_params(params)
    try:
        host = {n: to_numpy(leaf) for n, leaf in zip(names, leaves)}
    except ValueError as e:
        raise ValueError(f"parameters: {e}") from None
    weight_avals = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in host.items()}

    modules: dict[str, bytes] = {}
    outputs: dict[str, tuple[TensorSpec, ...]] = {}
    exported_platforms: tuple[str, ...] = ()
    for vname, f in functions.items():
        # Named after the function (as jax.jit names it), never after the folder: a renamed or re-exported
        # bundle keeps byte-identical modules, and with them its compiled programs.
        wrapped = _bundle_fn(f, names, treedef, input_names, by_keyword, _ident(getattr(f, "__name__", "fn")))
        per_size = {}
        for b in sizes:
            avals = [jax.ShapeDtypeStruct((b, *a.shape[1:]), a.dtype) for a in input_avals]
            with _no_source_locations():
                exp = jax.export.export(jax.jit(wrapped), platforms=platforms)(weight_avals, *avals)
            modules[_module_name(vname, b)] = exp.serialize()
            exported_platforms = tuple(exp.platforms)
            per_size[b] = exp
        outputs[vname] = _output_specs(vname, per_size)

    manifest = Manifest(
        name=bundle_name,
        inputs=tuple(TensorSpec(n, (BATCH, *a.shape[1:]), np.dtype(a.dtype).name)
                     for n, a in zip(input_names, input_avals)),
        outputs=outputs, batch_sizes=sizes, variants=tuple(functions),
        weights=tuple(sorted((TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in host.items()),
                             key=lambda s: s.name)),
        platforms=exported_platforms, created_with={"jax": jax.__version__, "xlakit": xlakit.__version__})
    weights_bytes = weights_file_bytes(host)
    files = {**modules, WEIGHTS: weights_bytes, MANIFEST: manifest.to_json().encode("utf-8")}
    _write(path, files, overwrite)
    return manifest


# -- pieces ---------------------------------------------------------------------------------------------

def _bundle_fn(f, names, treedef, input_names, by_keyword, fun_name):
    def bundle_fn(weights, *inputs):
        params = treedef.unflatten([weights[n] for n in names])
        if by_keyword:
            return f(params, **dict(zip(input_names, inputs)))
        return f(params, *inputs)

    bundle_fn.__name__ = bundle_fn.__qualname__ = fun_name
    return bundle_fn


def _no_source_locations():
    """Lower without Python source locations (file:line of the caller's frames) in the module.

    JAX records the user's stack in every op's location, so the same function exported from another line
    (or another script) would give other module bytes — and a module whose bytes change loses its compiled
    programs. With the traceback-in-locations limit at 0 only op names remain, and the bytes depend on the
    function alone. A thread-local JAX config context (private, from ``jax._src.config`` in 0.9-0.12);
    where it is missing the export still works, only less deterministically.
    """
    import contextlib

    try:
        from jax._src import config

        return config.traceback_in_locations_limit(0)
    except Exception:  # noqa: BLE001 - another JAX layout: export with locations
        return contextlib.nullcontext()


def _batch_sizes(batch_sizes) -> tuple[int, ...]:
    try:
        sizes = list(batch_sizes)
    except TypeError:
        raise ValueError(f"batch_sizes must be a sequence of positive integers, got {batch_sizes!r}") from None
    if not sizes:
        raise ValueError("batch_sizes is empty: give at least one batch size")
    for b in sizes:
        if not (isinstance(b, int) and not isinstance(b, bool) and b > 0):
            raise ValueError(f"batch_sizes must be positive integers, got {b!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"batch_sizes has duplicates: {sizes}")
    return tuple(sorted(sizes))


def _variants(variants) -> dict[str, Callable]:
    if variants is None:
        return {}
    if not isinstance(variants, Mapping):
        raise ValueError(f"variants must be a dict name -> function, got {type(variants).__name__}")
    for vname in variants:
        if not isinstance(vname, str) or not _VARIANT.match(vname):
            raise ValueError(f"variant name {vname!r}: use 1-64 characters of [A-Za-z0-9_-] (it becomes a file name)")
        if vname == DEFAULT_VARIANT:
            raise ValueError(f"variant name {DEFAULT_VARIANT!r} is taken by fn itself; choose another name")
    return dict(variants)


def _inputs(example_inputs) -> tuple[list[str], list[Any], bool]:
    """(names, avals, by_keyword) of the example inputs."""
    if isinstance(example_inputs, Mapping):
        names, values, by_keyword = [str(k) for k in example_inputs], list(example_inputs.values()), True
    elif isinstance(example_inputs, (tuple, list)):
        values, by_keyword = list(example_inputs), False
        names = [f"x{i}" for i in range(len(values))]
    else:
        names, values, by_keyword = ["x"], [example_inputs], False
    if not values:
        raise ValueError("example_inputs is empty: a bundle needs at least one batched input")
    avals = []
    for n, v in zip(names, values):
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if shape is None or dtype is None:
            raise ValueError(f"input {n!r}: expected an array or jax.ShapeDtypeStruct, got {type(v).__name__}")
        if len(shape) == 0:
            raise ValueError(f"input {n!r} is a scalar: every input needs a batch axis (axis 0)")
        avals.append(v)
    return names, avals, by_keyword


def _output_specs(variant: str, per_size: dict) -> tuple[TensorSpec, ...]:
    """Output leaf specs with the batch axis named, checked to be consistent across batch sizes."""
    import jax
    import numpy as np

    from xlakit.bundle.weights import _path_name

    leaves_by_size = {}
    for b, exp in per_size.items():
        paths, _ = jax.tree_util.tree_flatten_with_path(exp.out_tree.unflatten(exp.out_avals))
        leaves_by_size[b] = [(_path_name(p) if p else "output", aval) for p, aval in paths]
    first_b, first = next(iter(leaves_by_size.items()))
    specs = []
    for i, (oname, aval) in enumerate(first):
        batched = all(len(leaves[i][1].shape) > 0 and leaves[i][1].shape[0] == b
                      for b, leaves in leaves_by_size.items())
        rest = tuple(aval.shape[1:]) if batched else tuple(aval.shape)
        for b, leaves in leaves_by_size.items():
            other = tuple(leaves[i][1].shape[1:]) if batched else tuple(leaves[i][1].shape)
            if other != rest:
                raise ValueError(f"variant {variant!r}: output {oname!r} has shape {list(leaves[i][1].shape)} at batch "
                                 f"size {b} but {list(aval.shape)} at batch size {first_b}; only axis 0 may follow "
                                 "the batch size")
        specs.append(TensorSpec(oname, (BATCH, *rest) if batched else rest, np.dtype(aval.dtype).name))
    return tuple(specs)


def _module_name(variant: str, batch_size: int) -> str:
    from xlakit.bundle.manifest import module_file

    return module_file(variant, batch_size)


def _ident(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text) or "bundle"


def _write(path: Path, files: dict[str, bytes], overwrite: bool) -> None:
    """Write only what changed, modules first and the manifest last; refuse to replace another bundle."""
    existing = _existing(path)
    differs = [n for n, data in files.items() if existing.get(n) != data]
    stale = sorted(n for n in existing if n.endswith(MODULE_SUFFIX) and n not in files)
    if existing and (differs or stale) and not overwrite:
        if MANIFEST not in existing:
            raise FileExistsError(f"{path} is a non-empty folder without {MANIFEST}, not a bundle; "
                                  "pass overwrite=True to write a bundle into it anyway, or choose another path")
        what = ", ".join(differs + [f"{n} (no longer exported)" for n in stale])
        raise FileExistsError(f"{path} holds a different bundle ({what} differ); pass overwrite=True to replace it")
    path.mkdir(parents=True, exist_ok=True)
    order = sorted(n for n in differs if n != MANIFEST) + ([MANIFEST] if MANIFEST in differs else [])
    for n in order:
        write_atomic(path / n, files[n])
    for n in stale:
        try:
            os.unlink(path / n)
        except FileNotFoundError:
            pass


def _existing(path: Path) -> dict[str, bytes | None]:
    """Bundle-relevant files already at ``path``: modules, weights and manifest with their bytes; any other
    visible file with None (it only makes the folder non-empty)."""
    if not path.exists():
        return {}
    if not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a folder")
    found: dict[str, bytes | None] = {}
    for entry in os.scandir(path):
        if entry.name == CACHE_DIR or entry.name.startswith("."):
            continue
        if entry.is_file() and (entry.name in (MANIFEST, WEIGHTS) or entry.name.endswith(MODULE_SUFFIX)):
            with open(entry.path, "rb") as f:
                found[entry.name] = f.read()
        else:
            found[entry.name] = None
    return found
