"""``export_bundle``: write a model as a bundle folder with ``jax.export`` and safetensors.

Each module is ``jax.export.export(jax.jit(bundle_fn))(weight_avals, *input_avals).serialize()`` for one
variant and batch size, where ``bundle_fn(weights, *inputs)`` takes the parameters as a flat dict
``{tensor name: array}`` (the names of ``weights.safetensors``) and rebuilds the caller's parameter tree
inside the traced function before calling ``fn(params, *inputs)``. So any pytree works as ``params`` —
``flax.nnx.State`` included, whose node types ``jax.export`` cannot serialize — and a loaded bundle needs
neither the model's Python code nor its tree structure. Exporting traces and lowers; it compiles only to
compare the symbolic program with each exported size (:mod:`xlakit.bundle.rows`).

Files are written through temp files and renames, manifest last; a file whose bytes are unchanged is not
rewritten (a weights-only update touches only ``weights.safetensors``, so a watcher sees just that).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlakit.bundle.folder_write import write_bundle_files as _write
from xlakit.bundle.manifest import (
    BATCH,
    DEFAULT_VARIANT,
    MANIFEST,
    WEIGHTS,
    Manifest,
    TensorSpec,
    dtype_name,
    module_file,
)
from xlakit.bundle.output_types import output_specs, probe_shapes, traced_weak_types
from xlakit.bundle.rows import establish_rows
from xlakit.bundle.trees import encode_tree
from xlakit.bundle.weights import as_traced, flatten_params, host_param, weights_file_bytes

__all__ = ["export_bundle"]

_VARIANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _own_traces(export: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``export`` with its traces at every exported size, row probe and output check marked xlakit's own: they
    are no recompiles of the user's function (no ``recompile`` event, no RecompileWarning)."""
    import functools

    @functools.wraps(export)
    def quietly(*args: Any, **kwargs: Any) -> Any:
        from xlakit._jax.retrace import quiet_recompiles

        with quiet_recompiles():
            return export(*args, **kwargs)

    return quietly


@_own_traces
def export_bundle(fn: Callable[..., Any], params: Any, example_inputs: Any, path: str | os.PathLike,
                  batch_sizes: Sequence[int] = (1,), variants: Mapping[str, Callable[..., Any]] | None = None, *,
                  name: str | None = None, overwrite: bool = False,
                  platforms: Sequence[str] | None = None,
                  rows_independent: bool | Mapping[str, bool] | None = None) -> Manifest:
    """Write ``fn`` and ``params`` as a bundle folder at ``path``.

    Args:
      fn: ``fn(params, *inputs) -> outputs`` (with a dict of example inputs: ``fn(params, **inputs)``); a
        plain or ``jax.jit``-wrapped function. Outputs may be any pytree of arrays: dicts (str or int keys),
        lists, tuples, namedtuples, registered dataclasses, ``flax.struct`` dataclasses, custom nodes. They
        are flattened by path like the parameters; the tree is kept in the manifest as plain data
        (:mod:`xlakit.bundle.trees`). Typed PRNG keys (``jax.random.key``) may be inputs or outputs.
      params: any pytree of arrays (nested dicts, ``flax.nnx.State``, dataclasses...). Stored in
        ``weights.safetensors`` under their flattened path names, each exactly as ``jax.jit`` traces it (see
        :mod:`xlakit.bundle.weights`): shape (0-d stays 0-d), canonical dtype, values, weak type; NumPy arrays
        of any layout, Python and NumPy scalars, ``jax.Array`` s on any device, typed PRNG keys (stored as
        their key data), every numeric dtype JAX has (``bool`` to ``complex``, ``bfloat16``, ``float8_*``,
        ``int4``).
      example_inputs: one array, a tuple of arrays (positional inputs named ``x0``, ``x1``...; a single
        array is named ``x``) or a dict name -> array. Arrays or ``jax.ShapeDtypeStruct``. Axis 0 of every
        input is the batch axis. Their rows feed the comparison of the symbolic program with each exported
        size (see ``rows_independent``).
      path: the bundle folder (created if missing).
      batch_sizes: batch sizes to export, one module each (default ``(1,)``).
      variants: more functions with ``fn``'s signature, by name (e.g. ``{"fast": fn_bf16}``); each becomes
        ``model.<name>.b<n>.jaxexp``. ``fn`` itself is the variant ``"default"``.
      name: the bundle's name in the manifest (default: the folder's name).
      overwrite: replace a *different* bundle at ``path``. Re-exporting identical content never needs it.
        Only the files the old manifest names *and* that carry a name an export writes (``manifest.json``,
        ``weights.safetensors``, ``model[.<variant>].b<n|poly>.jaxexp``) are replaced or removed, so a
        foreign manifest naming e.g. ``thesis.tex`` never gets it deleted; other files (a user's own
        ``*.jaxexp`` included) and ``.cache/`` are left in place. Into a non-empty folder that is not a
        bundle (no valid ``manifest.json``) the bundle is written beside the user's files, deleting nothing,
        and refused when one of its file names is already taken there.
      platforms: ``jax.export`` platforms (e.g. ``["cpu", "cuda"]``); default: the default backend's.
      rows_independent: the exporter's declaration that each output row depends only on its own input row
        (a bool for every variant, or a dict by variant name), recorded as ``declared``. None (default):
        established by :func:`xlakit.bundle.rows.establish_rows` (a proof over the jaxpr traced with a
        symbolic batch, and a comparison with each exported size: two small compiles per size), recorded as
        ``proven``, ``coupled`` or ``size-dependent`` with the reason (``Manifest.row_independence``).
        Proven (or declared) variants are padded up to an exported size and split into chunks above the
        largest. Coupled variants are never padded: a shape-polymorphic module ``model.bpoly.jaxexp`` is kept,
        from which a loaded bundle compiles the exact batch size of a call. Size-dependent variants (a
        ``RuntimeWarning`` says why) are served only at the exported sizes.

    Returns:
      The written :class:`~xlakit.bundle.manifest.Manifest`.

    Raises:
      FileExistsError: ``path`` holds a different bundle and ``overwrite`` is False, or is a non-empty
        folder that is not a bundle and ``overwrite`` is False or one of the bundle's file names is taken
        there; nothing was written. The message says what differs.
      ValueError: bad ``batch_sizes``/``variants``/inputs, parameters that are not arrays, two parameter
        paths with the same name, a parameter path that is not UTF-8 text, an output dict key that is not plain
        data, outputs whose leading axis does not follow the batch size consistently or whose weak type changes
        with it, or an input or output of a dtype ``jax.export`` cannot serialize (``int2``, ``uint2``; the
        message names it). Nothing is written.
      TypeError: ``fn`` or a variant is not callable; ``path``, ``name``, ``overwrite`` or ``platforms`` of the
        wrong type (``platforms`` a single string included).
      Errors from tracing ``fn`` pass through.
    """
    import jax

    from xlakit._jax import extents
    from xlakit._version import __version__

    _check_settings(path, name, overwrite, platforms)
    path = Path(os.path.expanduser(path))  # "~/x" is the home folder, never a folder named "~"
    sizes = _batch_sizes(batch_sizes)
    functions = {DEFAULT_VARIANT: fn, **_variants(variants)}
    for vname, f in functions.items():
        if not callable(f):
            raise TypeError(f"variant {vname!r}: expected a callable fn(params, *inputs), got {type(f).__name__}")
    declared = _declared(rows_independent, functions)
    input_names, input_avals, by_keyword = _inputs(example_inputs)
    bundle_name = name or path.resolve().name

    names, leaves, treedef = flatten_params(params)
    try:
        stored = {n: host_param(n, leaf) for n, leaf in zip(names, leaves, strict=True)}
    except ValueError as e:
        raise ValueError(f"parameters: {e}") from None
    host = {n: p.array for n, p in stored.items()}
    weight_avals = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in host.items()}

    modules: dict[str, bytes] = {}
    outputs: dict[str, tuple[TensorSpec, ...]] = {}
    trees: dict[str, Any] = {}
    independent: dict[str, bool] = {}
    polymorphic: dict[str, str] = {}
    established: dict[str, dict[str, str]] = {}
    exported_platforms: tuple[str, ...] = ()
    for vname, f in functions.items():
        # Named after the function (as jax.jit names it), never after the folder: a renamed or re-exported
        # bundle keeps byte-identical modules, and with them its compiled programs.
        wrapped = _bundle_fn(f, stored, treedef, input_names, by_keyword, _ident(getattr(f, "__name__", "fn")))
        probe = probe_shapes(wrapped, weight_avals, input_avals, sizes)  # first: the exports set the output tree
        jitted = jax.jit(wrapped)
        per_size = {}
        for b in sizes:
            avals = [jax.ShapeDtypeStruct((b, *a.shape[1:]), a.dtype) for a in input_avals]
            try:
                # XLA would end the process lowering a value too large to describe: refused first
                extents.trace(jitted, (weight_avals, *avals), {}, f"the bundle program {vname!r} at batch size {b}")
                with _no_source_locations():
                    exp = jax.export.export(jitted, platforms=platforms)(weight_avals, *avals)
            except (TypeError, ValueError) as e:
                _explain_batch_axis(e, vname, b, input_names, input_avals, wrapped, weight_avals)
                raise
            try:
                modules[module_file(vname, b)] = bytes(exp.serialize())  # a bytearray
            except KeyError as e:  # jax.export's serializer has no code for this dtype (int2, uint2)
                _refuse_unserializable(e, vname, input_names, input_avals, wrapped.out_paths, exp.out_avals)
                raise
            exported_platforms = tuple(exp.platforms)
            weak = traced_weak_types(jitted, weight_avals, *avals)  # exp.out_avals have no weak type
            per_size[b] = (wrapped.out_paths, exp.out_avals, weak)
            trees[vname] = wrapped.out_tree
        outputs[vname] = output_specs(vname, per_size, probe)
        record = establish_rows(wrapped, host, input_avals, _input_values(example_inputs), sizes,
                                [spec.batched for spec in outputs[vname]], platforms, declared.get(vname), BATCH)
        independent[vname] = record.independent
        established[vname] = {"how": record.how, "reason": record.reason}
        if record.poly is not None:
            modules[module_file(vname, None)] = record.poly
            polymorphic[vname] = module_file(vname, None)
        elif record.how == "size-dependent":
            _warn_exact_sizes(vname, record.reason)

    manifest = Manifest(
        name=bundle_name,
        inputs=tuple(TensorSpec(n, (BATCH, *a.shape[1:]), dtype_name(a.dtype))
                     for n, a in zip(input_names, input_avals, strict=False)),
        outputs=outputs, batch_sizes=sizes, variants=tuple(functions),
        weights=tuple(sorted((TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in host.items()),
                             key=lambda s: s.name)),
        platforms=exported_platforms, created_with={"jax": jax.__version__, "xlakit": __version__},
        output_trees=trees, rows_independent=independent, polymorphic=polymorphic,
        row_independence=established, module_sha256={f: hashlib.sha256(b).hexdigest() for f, b in modules.items()})
    weights_bytes = weights_file_bytes(host)
    files = {**modules, WEIGHTS: weights_bytes, MANIFEST: manifest.to_json().encode("utf-8")}
    _write(path, files, overwrite)
    return manifest


# -- pieces ---------------------------------------------------------------------------------------------

def _explain_batch_axis(error: Exception, variant: str, batch: int, names, avals, wrapped, weight_avals) -> None:
    """Tracing at ``batch`` rows failed. If the function traces at the examples' own shapes, the likely cause is
    an example without a batch axis (axis 0 was taken as one and resized): raise a ValueError that says so,
    chained to JAX's error. Otherwise return, and the caller re-raises JAX's error as it is."""
    import jax

    if all(a.shape and a.shape[0] == batch for a in avals):
        return  # the examples' own batch size: nothing was resized
    try:
        jax.eval_shape(wrapped, weight_avals, *avals)
    except Exception:  # noqa: BLE001 - it fails at its own shapes too: JAX's error is the right one
        return
    from xlakit._jax.symbolic import brief_error

    shapes = ", ".join(f"{n} {tuple(a.shape)}" for n, a in zip(names, avals, strict=False))
    raise ValueError(
        f"variant {variant!r}: export_bundle takes axis 0 of every example input as the batch axis and resizes it "
        f"to each batch size; the function traces at the examples' own shapes ({shapes}) but not with axis 0 set "
        f"to {batch} ({brief_error(error)}). If an example holds one item without a batch axis, give "
        "it one: x[None] (batch size 1).") from error


def _refuse_unserializable(error: KeyError, variant: str, input_names, input_avals, out_paths, out_avals) -> None:
    """``jax.export``'s serializer raised ``KeyError: dtype(int2)``: it has no code for a dtype. Raise a ValueError
    naming the input or output of that dtype and what to do instead (nothing has been written yet). Returns when
    the KeyError is about something else."""
    import jax
    import numpy as np

    from xlakit.bundle.weights import _path_name

    dtype = error.args[0] if error.args else None
    if not isinstance(dtype, np.dtype):
        return
    why = f"has dtype {dtype.name}, which jax.export (jax {jax.__version__}) cannot serialize"
    wide = "uint8" if dtype.name.startswith("uint") else "int8" if dtype.name.startswith("int") else "float32"
    for path, aval in zip(out_paths, out_avals, strict=False):
        if aval.dtype == dtype:
            raise ValueError(f"variant {variant!r}: output {_path_name(path) if path else 'output'!r} {why}; return "
                             f"it in a wider dtype (e.g. out.astype(jnp.{wide})) and convert it after the call"
                             ) from None
    for name, aval in zip(input_names, input_avals, strict=False):
        if aval.dtype == dtype:
            raise ValueError(f"variant {variant!r}: input {name!r} {why}; pass it in a wider dtype (e.g. "
                             f"x.astype(jnp.{wide})) and convert it inside the function") from None
    raise ValueError(f"variant {variant!r}: a value of dtype {dtype.name} reaches the exported program's "
                     f"signature and jax.export (jax {jax.__version__}) cannot serialize that dtype; use a "
                     f"wider one there (e.g. {wide})") from None


def _input_values(example_inputs) -> list[Any]:
    """The example inputs' values in input order (the order of :func:`_inputs`)."""
    if isinstance(example_inputs, Mapping):
        return list(example_inputs.values())
    if isinstance(example_inputs, (tuple, list)):
        return list(example_inputs)
    return [example_inputs]


def _declared(rows_independent, functions) -> dict[str, bool]:
    from xlakit._units import _numpy_bool

    if rows_independent is None:
        return {}
    if isinstance(rows_independent, bool) or _numpy_bool(rows_independent):  # np.bool_(True) is a yes too
        return {v: bool(rows_independent) for v in functions}
    if not isinstance(rows_independent, Mapping):
        raise ValueError(f"rows_independent must be None, a bool or a dict variant -> bool, got "
                         f"{type(rows_independent).__name__}")
    unknown = sorted(set(rows_independent) - set(functions), key=str)
    if unknown:
        raise ValueError(f"rows_independent names unknown variants {unknown}; variants are {list(functions)}")
    for v, flag in rows_independent.items():
        if not (isinstance(flag, bool) or _numpy_bool(flag)):
            raise ValueError(f"rows_independent[{v!r}] must be True or False, got {flag!r}")
    return {v: bool(flag) for v, flag in rows_independent.items()}


def _bundle_fn(f, stored, treedef, input_names, by_keyword, fun_name):
    """The exported function: flat weights in (``stored``: name -> :class:`~xlakit.bundle.weights.HostParam`, in
    flatten order), a flat tuple of output leaves out; each weight is given back to ``f`` as ``jax.jit`` traced
    it (weak type, typed key). The output tree and leaf paths of the latest trace are kept on the function
    (``out_tree``, ``out_paths``) for the manifest."""
    import jax

    def bundle_fn(weights, *inputs):
        params = treedef.unflatten([as_traced(p, weights[n]) for n, p in stored.items()])
        if by_keyword:
            out = f(params, **dict(zip(input_names, inputs, strict=False)))
        else:
            out = f(params, *inputs)
        paths, _ = jax.tree_util.tree_flatten_with_path(out)
        tree, count = encode_tree(out)
        if count != len(paths):
            raise ValueError(f"output tree: {count} leaves encoded, {len(paths)} flattened")
        bundle_fn.out_tree, bundle_fn.out_paths = tree, [p for p, _ in paths]
        return tuple(leaf for _, leaf in paths)

    bundle_fn.__name__ = bundle_fn.__qualname__ = fun_name
    return bundle_fn


def _warn_exact_sizes(vname: str, reason: str) -> None:
    import warnings

    warnings.warn(f"variant {vname!r} depends on the batch size: {reason}. It is never padded or chunked and it "
                  "has no module with a symbolic batch axis, so only the exported batch sizes can be called",
                  RuntimeWarning, stacklevel=3)


def _no_source_locations():
    """Lower without Python source locations in the module (see
    :func:`xlakit._jax.export_compat.no_source_locations`): the same function exported from another line
    or script then gives the same module bytes, and keeps its compiled programs."""
    from xlakit._jax.export_compat import no_source_locations

    return no_source_locations()


#: The platform names ``jax.export`` lowers for (``jax.export.export(..., platforms=...)``, jax 0.10).
EXPORT_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def _check_settings(path, name, overwrite, platforms) -> None:
    """The plain settings of :func:`export_bundle`, checked before anything is traced: ``platforms="cpu"`` was
    taken as the platforms 'c', 'p', 'u' and written into the manifest, ``name=5`` and ``overwrite="no"`` (true)
    were accepted, ``path=5`` failed inside ``os.path``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be the bundle folder (a str or pathlib.Path), got {type(path).__name__}")
    if not str(os.fspath(path)).strip():  # "" wrote the bundle into the current folder
        raise ValueError("path is empty: give the bundle's folder, e.g. 'my_model'")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise (ValueError if isinstance(name, str) else TypeError)(
            f"name must be a non-empty string or None (the folder's name), got {type(name).__name__} {name!r:.60}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {type(overwrite).__name__} {overwrite!r:.60}")
    if platforms is not None and (isinstance(platforms, str) or not isinstance(platforms, Sequence)
                                  or not platforms or not all(isinstance(p, str) and p for p in platforms)):
        raise TypeError(f"platforms must be a non-empty list of platform names such as ['cpu', 'cuda'] (not one "
                        f"string), or None for the default backend's; got {platforms!r:.80}")
    unknown = [p for p in platforms or () if p not in EXPORT_PLATFORMS]
    if unknown:  # "CPU" or a typo wrote a bundle no device can load
        raise ValueError(f"platforms: {unknown} {'is' if len(unknown) == 1 else 'are'} not a jax.export platform; "
                         f"use lower-case names of {list(EXPORT_PLATFORMS)}")


def _batch_sizes(batch_sizes) -> tuple[int, ...]:
    from xlakit._units import check_int, is_int

    if isinstance(batch_sizes, str):  # "8" was read as the sequence of characters
        raise TypeError(f"batch_sizes must be a sequence of positive integers such as (1, 8), got {batch_sizes!r:.60}")
    try:
        sizes = list(batch_sizes)
    except TypeError:
        raise ValueError(f"batch_sizes must be a sequence of positive integers, got {batch_sizes!r}") from None
    if not sizes:
        raise ValueError("batch_sizes is empty: give at least one batch size")
    for b in sizes:
        if not is_int(b) or b <= 0:  # np.array([1, 2])'s np.int64 is a batch size; True is not
            raise ValueError(f"batch_sizes must be positive integers, got {b!r:.60}")
        check_int(b, "batch_sizes", minimum=1, what="batch size")  # 2**70 failed deep in tracing, misexplained
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"batch_sizes has duplicates: {sizes}")
    return tuple(sorted(int(b) for b in sizes))


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
        if "variant" in names:  # the loaded bundle's call takes variant= itself: this input could not be passed
            raise ValueError("an example input is named 'variant', which the loaded bundle's call keeps for picking "
                             "the variant (bundle(x, variant='greedy')); rename that input (its key in "
                             "example_inputs and the keyword fn takes)")
    elif isinstance(example_inputs, (tuple, list)):
        values, by_keyword = list(example_inputs), False
        names = [f"x{i}" for i in range(len(values))]
    else:
        names, values, by_keyword = ["x"], [example_inputs], False
    if not values:
        raise ValueError("example_inputs is empty: a bundle needs at least one batched input")
    avals = []
    for n, v in zip(names, values, strict=False):
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if shape is None or dtype is None:
            raise ValueError(f"input {n!r}: expected an array or jax.ShapeDtypeStruct, got {type(v).__name__}")
        if len(shape) == 0:
            raise ValueError(f"input {n!r} is a scalar: every input needs a batch axis (axis 0)")
        if not n:
            raise ValueError("an example input is named '' (an empty key of example_inputs): name every input")
        if shape[0] == 0:
            raise ValueError(f"input {n!r} has 0 rows: example inputs need at least one row (the batch sizes to "
                             "export are batch_sizes=; a loaded bundle answers 0 rows where rows are independent)")
        avals.append(_as_jit_sees(v))
    return names, avals, by_keyword


def _as_jit_sees(value: Any) -> Any:
    """An example input as ``jax.jit`` takes it: a NumPy float64 / int64 (or big-endian) array is float32 / int32
    (native order) while ``jax_enable_x64`` is off, so the manifest records the dtype the module takes (a float64
    record made a bundle no input could call); anything else as given."""
    import jax
    import numpy as np

    try:
        dtype = np.dtype(value.dtype)
        canonical = np.dtype(jax.dtypes.canonicalize_dtype(dtype.newbyteorder("=")))
    except TypeError:  # an extended dtype (a typed PRNG key): JAX's own
        return value
    return value if canonical == dtype else jax.ShapeDtypeStruct(tuple(value.shape), canonical)


def _ident(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text) or "bundle"
