"""Parameters as a flat, named ``weights.safetensors`` file, and back.

``jax.export`` can only serialize pytree node types it knows (its error: "Cannot serialize PyTreeDef
containing an unregistered type ... flax.nnx...Param"), so a bundle never exports the user's parameter tree.
Parameters are flattened here into ``{path name: array}``; the exported function takes that flat dict and
rebuilds the original tree inside itself (see :mod:`xlakit.bundle.export`), and the file stores the same
flat dict. Tensor names are the flattened pytree paths with ``"."`` between keys, e.g. ``"layers.0.kernel"``
for a nested dict, ``"l1.kernel.value"`` for an ``nnx.State`` (``.value`` is the Variable's own pytree key).

Reading needs no JAX; arrays come back as NumPy arrays (``bfloat16`` through ``ml_dtypes``).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from xlakit.bundle.errors import WeightsError
from xlakit.bundle.manifest import TensorSpec

__all__ = ["flatten_params", "to_numpy", "weights_file_bytes", "read_weights", "read_weight_specs",
           "check_weights"]


def flatten_params(params: Any) -> tuple[list[str], list[Any], Any]:
    """``(names, leaves, treedef)`` of any pytree (dicts, lists, dataclasses, ``flax.nnx.State``...).

    Leaves are returned as given (device arrays stay on their devices). Raises ``ValueError`` when two
    paths render to the same name (e.g. a key ``"a.b"`` beside a nested ``a`` -> ``b``) or a leaf is not
    array-like.
    """
    import jax

    paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    names: list[str] = []
    leaves: list[Any] = []
    seen: dict[str, str] = {}
    for path, leaf in paths:
        name = _path_name(path)
        if name in seen:
            raise ValueError(f"two parameter paths flatten to the same tensor name {name!r}: {seen[name]} and "
                             f"{jax.tree_util.keystr(path)}; rename one of the keys")
        seen[name] = jax.tree_util.keystr(path)
        if not hasattr(leaf, "shape") and not isinstance(leaf, (int, float, complex, bool, np.generic)):
            raise ValueError(f"parameter {name!r} is a {type(leaf).__name__}, not an array; bundles store arrays "
                             "only (split non-array state off, e.g. nnx.split(model, nnx.Param, ...))")
        names.append(name)
        leaves.append(leaf)
    return names, leaves, treedef


def _path_name(path) -> str:
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):  # DictKey, SequenceKey/FlattenedIndexKey, GetAttrKey
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return ".".join(parts) or "param"


def to_numpy(leaf: Any) -> np.ndarray:
    """A host copy of one parameter; Python scalars get JAX's default dtype (float32, int32)."""
    import jax

    if isinstance(leaf, (int, float, complex, bool)):
        return np.asarray(leaf, dtype=jax.dtypes.canonicalize_dtype(np.result_type(leaf)))
    arr = np.asarray(leaf)
    if arr.dtype.kind not in "biufc" and arr.dtype.name != "bfloat16" and not arr.dtype.name.startswith("float8"):
        raise ValueError(f"dtype {arr.dtype} cannot be stored in safetensors")
    return np.ascontiguousarray(arr)


def weights_file_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """The safetensors file holding ``tensors`` (name -> host array), names sorted. Raises ValueError for a
    dtype safetensors cannot store (older safetensors releases cannot write ``bfloat16`` from NumPy)."""
    from safetensors.numpy import save

    try:
        return save(dict(sorted(tensors.items())), metadata={"format": "xlakit.bundle"})
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"safetensors could not store the parameters: {e}") from e


def read_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file as NumPy arrays (little-endian, in file order).

    The file is read, never memory-mapped: a file truncated or rewritten while it is read (an export replacing
    it in place, a copy still being written) raises instead of killing the process with SIGBUS, as a mapped
    page past the new end would. Each tensor is read straight into its array (peak memory: the arrays once).

    Raises:
      WeightsError: naming the file: missing, not a regular file, not a safetensors file (header length,
        JSON, dtype, shape or offsets out of bounds), or changed while it was read (fewer bytes than the header
        promised, or another size / modification time when the read ended).
    """
    path = Path(path)
    with _open_regular(path) as f:
        before = os.fstat(f.fileno())
        header, data_start = _header(path, f, before.st_size)
        out = {}
        for name, (dtype, shape, begin, end) in header.items():
            arr = np.empty(shape, dtype)
            f.seek(data_start + begin)
            got = f.readinto(arr.reshape(-1).view(np.uint8).data) if end > begin else 0
            if got != end - begin:
                raise WeightsError(path, name, f"the file changed while it was read: {got} of {end - begin} bytes "
                                   "of this tensor were there (truncated?); read it again once it is written")
            out[name] = arr
        after = os.fstat(f.fileno())
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise WeightsError(path, None, f"the file changed while it was read (size {before.st_size} -> "
                           f"{after.st_size} bytes); read it again once it is written")
    return out


def read_weight_specs(path: str | os.PathLike) -> dict[str, TensorSpec]:
    """Names, shapes and dtypes from the safetensors header only (no tensor data is read, nothing mapped).
    Raises :class:`WeightsError` as :func:`read_weights` does."""
    path = Path(path)
    with _open_regular(path) as f:
        header, _ = _header(path, f, os.fstat(f.fileno()).st_size)
    return {name: TensorSpec(name, shape, dtype.name) for name, (dtype, shape, _, _) in header.items()}


_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own bound on the JSON header


def _header(path: Path, f, size: int) -> tuple[dict[str, tuple[np.dtype, tuple[int, ...], int, int]], int]:
    """The safetensors header: ``{name: (dtype, shape, begin, end)}`` (offsets relative to the data, which
    starts at the returned offset), checked against the file's ``size`` in bytes. Format: an 8-byte
    little-endian header length, that many bytes of JSON, then the tensors' bytes."""
    from xlakit.store import safejson

    def bad(why: str) -> WeightsError:
        return WeightsError(path, None, f"not a readable safetensors file: {why}")

    raw = f.read(8)
    if len(raw) != 8:
        raise bad(f"{size} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(raw, "little")
    if n > min(_MAX_HEADER_BYTES, size - 8):
        raise bad(f"header length {n} exceeds the file ({size} bytes) or the format's bound")
    try:
        meta = safejson.loads(f.read(n))  # bounded depth and numbers: the header is untrusted input
    except ValueError as e:
        raise bad(f"header is not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise bad("header is not a JSON object")
    data_bytes = size - 8 - n
    out = {}
    for name, spec in meta.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _dtype(spec["dtype"])
            shape = tuple(int(d) for d in spec["shape"])
            begin, end = (int(o) for o in spec["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"tensor {name!r} has a malformed entry ({type(e).__name__}: {e})") from None
        if any(d < 0 for d in shape) or not 0 <= begin <= end <= data_bytes \
                or end - begin != math.prod(shape) * dtype.itemsize:  # Python ints: a huge shape cannot wrap to 0
            raise bad(f"tensor {name!r}: offsets {[begin, end]} do not fit shape {list(shape)} of {dtype.name} "
                      f"within the file's {data_bytes} data bytes")
        out[str(name)] = (dtype, shape, begin, end)
    return out, 8 + n


def _dtype(code: str) -> np.dtype:
    name = _DTYPES[code]
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    dtype = np.dtype(name)  # safetensors stores little-endian; native dtypes where the machine is too
    return dtype if sys.byteorder == "little" else dtype.newbyteorder("<")


def _open_regular(path: Path):
    """Open ``path`` for reading; raise WeightsError unless it is a regular file (a FIFO or device is never
    opened: the type is checked before the open, and again on the open descriptor)."""
    import stat

    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise WeightsError(path, None, "not a regular file (a FIFO, device, folder or socket); it was not read")
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller's with-block
    except FileNotFoundError:
        raise WeightsError(path, None, "missing; copy the bundle's weights file back, or export the bundle again "
                           "(xlakit.export_bundle)") from None
    except OSError as e:
        raise WeightsError(path, None, f"unreadable: {e}") from None
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced between the stat and the open
        f.close()
        raise WeightsError(path, None, "not a regular file (a FIFO, device, folder or socket); it was not read")
    return f


# safetensors' dtype codes -> NumPy names, for header-only reads
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16",
           "U8": "uint8", "BOOL": "bool", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def check_weights(file: str | os.PathLike, found: dict[str, Any], expected: tuple[TensorSpec, ...]) -> None:
    """Raise :class:`WeightsError` naming ``file`` and the tensor when ``found`` (name -> array or spec)
    disagrees with the manifest's ``expected`` specs: a missing or extra name, another shape or dtype."""
    want = {s.name: s for s in expected}
    missing = sorted(set(want) - set(found))
    if missing:
        raise WeightsError(file, missing[0], f"tensor named in manifest.json is not in the file "
                           f"({len(missing)} missing: {missing[:5]})")
    extra = sorted(set(found) - set(want))
    if extra:
        raise WeightsError(file, extra[0], f"tensor is not named in manifest.json ({len(extra)} extra: {extra[:5]})")
    for name, spec in want.items():
        got = found[name]
        shape = tuple(got.shape)
        dtype = got.dtype if isinstance(got.dtype, str) else np.dtype(got.dtype).name
        if shape != tuple(spec.shape):
            raise WeightsError(file, name, f"shape {list(shape)} disagrees with manifest.json's {list(spec.shape)}")
        if dtype != spec.dtype:
            raise WeightsError(file, name, f"dtype {dtype} disagrees with manifest.json's {spec.dtype}")
