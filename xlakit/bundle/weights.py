"""Parameters as a flat, named ``weights.safetensors`` file, and back.

``jax.export`` can only serialize pytree node types it knows (its error: "Cannot serialize PyTreeDef
containing an unregistered type ... flax.nnx...Param"), so a bundle never exports the user's parameter tree.
Parameters are flattened here into ``{path name: array}``; the exported function takes that flat dict and
rebuilds the original tree inside itself (see :mod:`xlakit.bundle.export`), and the file stores the same
flat dict. Tensor names are the flattened pytree paths with ``"."`` between keys, e.g. ``"layers.0.kernel"``
for a nested dict, ``"l1.kernel.value"`` for an ``nnx.State`` (``.value`` is the Variable's own pytree key).

Each parameter is stored exactly as ``jax.jit`` would see it (:func:`host_param`): its shape (a 0-d array stays
0-d), its dtype after JAX's canonicalization (``float64`` is ``float32`` unless ``jax_enable_x64``), its values,
C-ordered. What the file cannot hold as such travels beside it: a weak type (a Python scalar, or a ``jax.Array``
with ``weak_type=True``) and a typed PRNG key's implementation are restored inside the exported function
(:func:`as_traced`), and a dtype safetensors has no code for (``int4``, ``float8_e3m4``, ``complex128``...) is
stored as its raw bytes (``U8``) with the real dtype and shape in the file's ``__metadata__``
(``"xlakit.raw_dtypes"``), which :func:`read_weights` applies; so is a parameter named ``__metadata__`` (the
format's own header key), stored under another name mapped back there (``"xlakit.renamed"``). A sub-byte dtype
(``int4``...) is stored in a byte-wide one that holds its values exactly and converted back inside the program
(:class:`HostParam`).

Reading needs no JAX; arrays come back as NumPy arrays (``bfloat16``, ``float8_*``, ``int4`` through
``ml_dtypes``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xlakit.bundle.errors import WeightsError
from xlakit.bundle.manifest import TensorSpec

__all__ = ["HostParam", "flatten_params", "host_param", "as_traced", "weights_file_bytes", "read_weights",
           "read_weight_specs", "check_weights"]


def flatten_params(params: Any) -> tuple[list[str], list[Any], Any]:
    """``(names, leaves, treedef)`` of any pytree (dicts, lists, dataclasses, ``flax.nnx.State``...).

    Leaves are returned as given (device arrays stay on their devices). Raises ``ValueError`` when two
    paths render to the same name (e.g. a key ``"a.b"`` beside a nested ``a`` -> ``b``), a name is not UTF-8 text
    (a lone surrogate: neither safetensors nor a reader can store it), or a leaf is not array-like. A name the
    file format reserves (``__metadata__``) is fine: :func:`weights_file_bytes` stores it under another name.
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
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"parameter {jax.tree_util.keystr(path)} has a name that is not UTF-8 text "
                             f"({name[:60]!r}); a bundle stores tensor names as UTF-8 (safetensors, manifest.json): "
                             "rename the key") from None
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


@dataclass(frozen=True)
class HostParam:
    """One parameter as a bundle stores it.

    Attributes:
      array: the host array written to the file: C-ordered, the leaf's shape (0-d stays 0-d), the dtype
        ``jax.jit`` gives the leaf (canonicalized: ``float64`` -> ``float32`` unless ``jax_enable_x64``); for a
        typed PRNG key, its key data (``jax.random.key_data``, ``uint32[..., 2]`` for threefry).
      weak_type: the leaf is weakly typed under ``jax.jit`` (a Python int/float/complex, or a ``jax.Array``
        whose ``weak_type`` is True): ``x_bf16 * scale`` then stays bfloat16.
      key_impl: the PRNG implementation of a typed key (``jax.random.key_impl``), else None.
      sub_byte: for a dtype narrower than a byte (``int4``, ``uint4``, ``int2``, ``uint2``, ``float4_e2m1fn``),
        that dtype; ``array`` then holds the same values in a byte-wide dtype (``int8``, ``uint8``,
        ``float8_e4m3fn``: exact), converted back inside the program. (JAX 0.10 cannot pass a sub-byte array
        placed on a device to an ahead-of-time compiled program: XLA:CPU requires a packed layout that
        ``device_put`` never produces.)
    """

    array: np.ndarray
    weak_type: bool = False
    key_impl: Any = None
    sub_byte: np.dtype | None = None


def host_param(name: str, leaf: Any) -> HostParam:
    """``leaf`` as :class:`HostParam`: the same shape, dtype, weak type and values ``jax.jit`` would trace.

    A ``jax.Array`` is copied from wherever it lives (any device, any sharding, as long as this process holds
    all of it). Raises ``ValueError`` naming ``name`` for a Python int that does not fit JAX's integer type,
    an array that is not fully addressable, or a dtype that is not a number (object, string...)."""
    import jax

    if isinstance(leaf, bool):
        return HostParam(np.asarray(leaf, dtype=np.bool_))
    if isinstance(leaf, (int, float, complex)) and not isinstance(leaf, np.generic):  # weak, as jax.jit makes it
        dtype = jax.dtypes.canonicalize_dtype(np.result_type(type(leaf)))
        try:
            return HostParam(np.asarray(leaf, dtype=dtype), weak_type=True)
        except OverflowError:
            raise ValueError(f"parameter {name!r}: the Python {type(leaf).__name__} {leaf} does not fit {dtype.name} "
                             "(what jax.jit makes of it); store it as an array of a wider dtype "
                             "(with jax_enable_x64)") from None
    key_impl = None
    if isinstance(leaf, jax.Array):
        if not leaf.is_fully_addressable:
            raise ValueError(f"parameter {name!r} is not fully addressable from this process (sharded across "
                             "processes); gather it first (jax.experimental.multihost_utils.process_allgather)")
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            key_impl, leaf = jax.random.key_impl(leaf), jax.random.key_data(leaf)
    weak = bool(getattr(leaf, "weak_type", False))
    arr = np.asarray(leaf)
    if not _storable(arr.dtype):
        raise ValueError(f"parameter {name!r} has dtype {arr.dtype}, which is not a number type; bundles store "
                         "numeric arrays only")
    # native order first: JAX's table knows only native dtypes (a big-endian int64 stayed int64 without x64)
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype.newbyteorder("="))).newbyteorder("=")
    if arr.dtype != canonical:  # float64 without x64, a big-endian array: converted on the host, as jax.jit does
        arr = arr.astype(canonical)
    sub_byte = None
    if arr.dtype.name in _SUB_BYTE:
        sub_byte, arr = arr.dtype, arr.astype(_dtype_named(_SUB_BYTE[arr.dtype.name]))
    if not arr.flags.c_contiguous:  # 0-d arrays are always contiguous: never promoted to shape (1,)
        arr = arr.copy(order="C")
    return HostParam(arr, weak_type=weak, key_impl=key_impl, sub_byte=sub_byte)


# Sub-byte dtype -> the byte-wide dtype that holds each of its values exactly (see HostParam.sub_byte).
_SUB_BYTE = {"int4": "int8", "int2": "int8", "uint4": "uint8", "uint2": "uint8", "float4_e2m1fn": "float8_e4m3fn"}


def as_traced(param: HostParam, value: Any) -> Any:
    """Inside the exported function: the stored ``value`` (a traced array of ``param.array``'s shape and dtype)
    as the function saw the parameter: in its sub-byte dtype again, weakly typed again, or wrapped back into a
    typed PRNG key."""
    if param.key_impl is not None:
        import jax

        return jax.random.wrap_key_data(value, impl=param.key_impl)
    if param.sub_byte is not None:
        value = value.astype(param.sub_byte)
    if param.weak_type:
        from xlakit._jax.export_compat import weakly_typed

        return weakly_typed(value)
    return value


def _storable(dtype: np.dtype) -> bool:
    """Numbers only: NumPy's bool/int/uint/float/complex, or an ``ml_dtypes`` type (bfloat16, float8_*, int4...)."""
    if dtype.kind in "biufc":
        return True
    try:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dtype.name)) == dtype
    except (AttributeError, TypeError):
        return False


def weights_file_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """The safetensors file holding ``tensors`` (name -> C-ordered host array), names sorted. A dtype safetensors
    has no code for is stored as raw bytes (``U8``, one axis) and named with its shape in ``__metadata__``
    (:data:`RAW_DTYPES_KEY`). A name the format reserves (``__metadata__``, the header's own key: a tensor under it
    was silently lost) is stored under a free name and mapped back in ``__metadata__`` (:data:`RENAMED_KEY`), which
    :func:`read_weights` undoes. Raises ValueError when safetensors refuses the arrays."""
    from safetensors.numpy import save

    native = set(_DTYPES.values())
    stored, raw, renamed = {}, {}, {}
    for name, arr in sorted(tensors.items()):
        key = name
        if name in _RESERVED_NAMES:
            key = f"{RENAMED_KEY}.{name}"
            while key in tensors or key in stored:  # never onto a real parameter's name
                key += "_"
            renamed[key] = name
        if arr.dtype.name in native:
            stored[key] = arr
        else:  # C-ordered (host_param), so its bytes are its values in order
            stored[key] = arr.reshape(-1).view(np.uint8)
            raw[key] = {"dtype": arr.dtype.name, "shape": list(arr.shape)}
    metadata = {"format": "xlakit.bundle"}
    if raw:
        metadata[RAW_DTYPES_KEY] = json.dumps(raw, sort_keys=True)
    if renamed:
        metadata[RENAMED_KEY] = json.dumps(renamed, sort_keys=True)
    try:
        return save(stored, metadata=metadata)
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"safetensors could not store the parameters: {e}") from e


RAW_DTYPES_KEY = "xlakit.raw_dtypes"  # __metadata__ key: {tensor name: {"dtype": name, "shape": [...]}}
RENAMED_KEY = "xlakit.renamed"  # __metadata__ key: {name in the file: parameter name the format reserves}
_RESERVED_NAMES = ("__metadata__",)  # safetensors' header key: a tensor of that name cannot be stored under it
# Dtypes safetensors has no code for, stored as raw bytes; only these names are read back from __metadata__.
_RAW_DTYPES = ("complex128", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz")


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
    out: dict[str, tuple[np.dtype, tuple[int, ...], int, int]] = {}
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
    _apply_raw_dtypes(out, meta.get("__metadata__"), bad)
    _apply_renames(out, meta.get("__metadata__"), bad)
    return out, 8 + n


def _metadata_object(metadata: Any, key: str, depth: int, bad) -> dict:
    """The JSON object the file's ``__metadata__[key]`` holds (``{}`` where absent), read with bounded depth.

    Raises:
      ``bad``: not JSON, or not an object.
    """
    from xlakit.store import safejson

    if not isinstance(metadata, dict) or key not in metadata:
        return {}
    try:
        found = safejson.loads(metadata[key], max_depth=depth)
    except (TypeError, ValueError) as e:
        raise bad(f"__metadata__[{key!r}] is not JSON ({e})") from None
    if not isinstance(found, dict):
        raise bad(f"__metadata__[{key!r}] is not an object")
    return found


def _apply_renames(tensors: dict, metadata: Any, bad) -> None:
    """Give the tensors named in ``__metadata__[RENAMED_KEY]`` their parameter names back (only names the format
    reserves: nothing else can be renamed by a file)."""
    renamed = _metadata_object(metadata, RENAMED_KEY, 2, bad)
    for stored, name in renamed.items():
        if name not in _RESERVED_NAMES or stored not in tensors or name in tensors:
            raise bad(f"__metadata__[{RENAMED_KEY!r}]: {str(stored)[:60]!r} -> {str(name)[:60]!r} renames no stored "
                      f"tensor to a name the format reserves ({', '.join(_RESERVED_NAMES)})")
        tensors[name] = tensors.pop(stored)


def _apply_raw_dtypes(tensors: dict, metadata: Any, bad) -> None:
    """Give the tensors named in ``__metadata__[RAW_DTYPES_KEY]`` their real dtype and shape, checked: the
    stored tensor is one axis of ``uint8`` holding exactly ``prod(shape) * itemsize`` bytes of a known dtype."""
    raw = _metadata_object(metadata, RAW_DTYPES_KEY, 4, bad)
    for name, spec in raw.items():
        try:
            dtype_name, shape = spec["dtype"], tuple(int(d) for d in spec["shape"])
        except (KeyError, TypeError, ValueError):
            raise bad(f"tensor {name!r}: malformed raw dtype entry {str(spec)[:60]}") from None
        if name not in tensors or dtype_name not in _RAW_DTYPES:
            raise bad(f"tensor {name!r}: raw dtype {str(dtype_name)[:40]!r} names no stored tensor or no dtype "
                      f"this reader knows ({', '.join(_RAW_DTYPES)})")
        stored, stored_shape, begin, end = tensors[name]
        dtype = _dtype_named(dtype_name)
        if stored != np.uint8 or len(stored_shape) != 1 or any(d < 0 for d in shape) \
                or end - begin != math.prod(shape) * dtype.itemsize:
            raise bad(f"tensor {name!r}: {end - begin} raw bytes do not hold {dtype_name}{list(shape)}")
        tensors[name] = (dtype, shape, begin, end)


def _dtype(code: str) -> np.dtype:
    return _dtype_named(_DTYPES[code])


def _dtype_named(name: str) -> np.dtype:
    if not hasattr(np, name):  # bfloat16, float8_*, int4...: ml_dtypes
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
           "U8": "uint8", "BOOL": "bool", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
           "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu"}


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
