"""The unpickling policy for executable payloads: which globals a payload may name and which it may call, and a
scan that applies it without building anything. Used by :mod:`xlakit._jax.serialize` (both when writing, to
refuse payloads that would not load, and when loading).
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
from typing import Any

from xlakit._jax import payload_layout
from xlakit.store.split import SplitPayload

__all__ = ["FORMAT_GLOBALS", "CALL", "VALUE", "format_globals", "allowed_use", "_resolve_global", "_scan_payload",
           "_Scan", "_ScanUnpickler", "_Stub", "_is_registered_pytree_node"]

# --------------------------------------------------------------------------------------------- unpickling policy
# JAX's executable format, by name: every global the payloads of real programs name, recorded by
# tests/payload_globals_worker.py (single device, donation, dict/list/tuple/None/namedtuple/OrderedDict/
# defaultdict/registered-dataclass pytrees, kwargs, static args, every dtype jax.jit takes on CPU, threefry/rbg/
# unsafe_rbg typed keys, NamedSharding over 1-D and 2-D meshes, pinned_host outputs, shard_map, scan + grad), with
# how the pickle uses it: CALL (REDUCE / NEWOBJ: run with payload arguments) or VALUE (only named: a dtype's scalar
# type, a treedef's registry, a PRNG implementation's functions; never called). Tags say which JAX minor versions
# wrote it; tests/test_unpickle_policy.py asserts that the recorded set equals the entries tagged for the running
# JAX. Resolving a name only looks it up in an already-imported module; nothing else is ever imported or called.
CALL, VALUE = "call", "value"
_J010, _J012 = frozenset({"0.10"}), frozenset({"0.12"})
_BOTH = _J010 | _J012

FORMAT_GLOBALS: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    ("jax._src.interpreters.pxla", "UnloadedMeshExecutable"): (CALL, _BOTH),
    ("jax._src.interpreters.pxla", "AllArgsInfo"): (CALL, _BOTH),
    ("jax._src.stages", "ArgInfo"): (CALL, _BOTH),
    ("jax._src.core", "ShapedArray"): (CALL, _BOTH),
    ("jax._src.core", "ManualAxisType"): (CALL, _BOTH),
    ("jax._src.core", "MemorySpace"): (CALL, _BOTH),
    ("jax._src.layout", "Layout"): (CALL, _BOTH),
    ("jax._src.layout", "AutoLayoutSingleton"): (CALL, _J012),
    ("jax._src.linear_util", "DebugInfo"): (CALL, _BOTH),
    ("jax._src.mesh", "Mesh"): (CALL, _BOTH),
    ("jax._src.mesh", "AbstractMesh"): (CALL, _BOTH),
    ("jax._src.mesh", "AbstractDevice"): (CALL, _BOTH),
    ("jax._src.mesh", "AxisType"): (CALL, _BOTH),
    ("jax", "P"): (CALL, _BOTH),                      # PartitionSpec pickles under its public name
    ("jax._src.named_sharding", "_unpickle_named_sharding"): (CALL, _BOTH),
    ("jax._src.sharding_impls", "_unpickle_single_device_sharding"): (CALL, _BOTH),
    ("jax._src.sharding_impls", "_unpickle_gspmd_sharding"): (CALL, _BOTH),
    ("jax._src.random.prng", "KeyTy"): (CALL, _BOTH),
    ("jax._src.random.prng", "PRNGImpl"): (CALL, _BOTH),
    ("jaxlib._jax", "DeviceList"): (CALL, _BOTH),
    ("jaxlib._jax.pytree", "PyTreeDef"): (CALL, _BOTH),
    ("jaxlib._hlo", "OpSharding"): (CALL, _BOTH),
    ("numpy", "dtype"): (CALL, _BOTH),
    ("numpy._core.multiarray", "_reconstruct"): (CALL, _BOTH),  # a Mesh's device array (numpy >= 2)
    ("numpy", "ndarray"): (VALUE, _BOTH),
    ("jax._src.tree_util", "default_registry"): (VALUE, _BOTH),
    ("jax._src.tree_util", "tracing_registry"): (VALUE, _BOTH),
    ("collections", "OrderedDict"): (VALUE, _BOTH),      # node types of JAX's built-in pytree nodes
    ("collections", "defaultdict"): (VALUE, _BOTH),
    **{("jax._src.numpy.linalg", r): (VALUE, _BOTH)       # node types of JAX's own results (namedtuples)
       for r in ("EigResult", "EighResult", "QRResult", "SVDResult", "SlogdetResult")},
    **{("jax._src.numpy.setops", r): (VALUE, _BOTH)
       for r in ("_UniqueAllResult", "_UniqueCountsResult", "_UniqueInverseResult")},
    **{("jax._src.random.threefry2x32", f"threefry_{f}"): (VALUE, _BOTH)
       for f in ("seed", "split", "fold_in", "random_bits")},
    ("jax._src.random.threefry2x32", "threefry_raw_bits"): (VALUE, frozenset({"0.12.1"})),  # from JAX 0.12.1 on
    **{("jax._src.random.rbg", f"_rbg_{f}"): (VALUE, _BOTH) for f in ("seed", "split", "fold_in", "random_bits")},
    **{("jax._src.random.rbg", f"_unsafe_rbg_{f}"): (VALUE, _BOTH) for f in ("split", "fold_in")},
    **{("ml_dtypes", t): (VALUE, _BOTH) for t in (
        "bfloat16", "float4_e2m1fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
        "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "int1", "int2", "int4", "uint1",
        "uint2", "uint4")},
}

# Beyond the format, a payload names the user's own pytree node types (a treedef holds its node classes:
# namedtuples, registered classes) and a defaultdict's factory: admitted as VALUEs only (never called), and only
# from modules outside jax/jaxlib/numpy/ml_dtypes that are already imported here.
_FACTORY_BUILTINS = frozenset({"list", "dict", "set", "tuple", "int", "float", "str", "bytes", "bool", "frozenset"})


def format_globals(jax_version: str) -> dict[tuple[str, str], str]:
    """``{(module, qualname): CALL | VALUE}`` of the format entries written by JAX ``jax_version`` (e.g.
    ``"0.10.2"``): a tag ``"0.12"`` is the whole minor version, a tag ``"0.12.1"`` that release and the later ones
    of its minor version (an entry a patch release added)."""
    return {name: how for name, (how, versions) in FORMAT_GLOBALS.items()
            if any(_written_by(jax_version, tag) for tag in versions)}


def _written_by(jax_version: str, tag: str) -> bool:
    version, wanted = jax_version.split("."), tag.split(".")
    if version[:2] != wanted[:2]:
        return False
    if len(wanted) == 2:
        return True
    try:
        return int(version[2]) >= int(wanted[2])
    except (IndexError, ValueError):  # "0.12" or "0.12.dev..": the minor version's first release
        return False


def _top(module: str) -> str:
    return module.partition(".")[0]


def allowed_use(module: str, name: str) -> str:
    """How a payload may use a global it names: CALL for the format's CALL entries, VALUE (never called) for
    everything else :func:`_resolve_global` admits."""
    entry = FORMAT_GLOBALS.get((module, name))
    return entry[0] if entry is not None else VALUE


def _resolve_global(module: str, name: str):
    """Return the object ``module.name`` if the policy admits the name, else raise ``pickle.UnpicklingError``.

    Admitted: the entries of ``FORMAT_GLOBALS`` (looked up in their module; one not yet imported is imported
    only because it is in that table: all of them are JAX, NumPy or ml_dtypes internals ``import jax`` loads);
    builtins of ``_FACTORY_BUILTINS``; and, from modules outside jax/jaxlib/numpy/ml_dtypes that are *already
    imported* (a payload never triggers an import), namedtuple classes and classes registered as pytree nodes
    (a treedef names its node types).
    Everything but the CALL entries may only be named, never called: :func:`_scan_payload` enforces that.

    Positive answers for builtins and the format's entries are remembered per ``(module, name)`` and reused
    while ``sys.modules[module]`` is the same module object: every program of a bundle names the same few dozen
    globals. Refusals and user classes (a notebook may redefine one) are decided afresh each time.
    """
    hit = _RESOLVED.get((module, name))
    if hit is not None and sys.modules.get(module) is hit[0]:
        return hit[1]
    obj = _resolve_uncached(module, name)
    if module == "builtins" or (module, name) in FORMAT_GLOBALS:
        mod = sys.modules.get(module)
        if mod is not None:
            _RESOLVED[(module, name)] = (mod, obj)
    return obj


# (module, name) -> (the module object it was resolved in, the allowed object); see _resolve_global.
_RESOLVED: dict[tuple[str, str], tuple[Any, Any]] = {}
_STATIC_PACKAGES = ("jax", "jaxlib", "numpy", "ml_dtypes")


def _resolve_uncached(module: str, name: str):
    def refuse(why: str):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}: {why}")

    parts = name.split(".")
    if any(not p or p.startswith("__") for p in parts):
        refuse("dunder or empty attribute names are never resolved")
    in_format = (module, name) in FORMAT_GLOBALS
    if module == "builtins" and name not in _FACTORY_BUILTINS:
        refuse("only plain container and number types are allowed from builtins")
    if not in_format and _top(module) in _STATIC_PACKAGES:  # JAX's own names are in the format, by name
        refuse("not on the allow-list: not in JAX's executable format (globals are allowed only by name)")
    if module in sys.modules:
        mod = sys.modules[module]
    elif in_format:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            refuse("module not found")
    else:
        refuse("module is not imported in this process (a payload never triggers an import; "
               "globals are allowed only by name)")
    obj: Any = mod
    for p in parts:
        try:
            obj = getattr(obj, p)
        except AttributeError:
            refuse("no such attribute")
    if in_format or module == "builtins":
        return obj
    if isinstance(obj, type) and (_is_plain_namedtuple(obj) or _is_registered_pytree_node(obj)):
        return obj
    refuse("not on the allow-list: neither in JAX's executable format nor a pytree node class of this process "
           "(globals are allowed only by name)")


def _is_plain_namedtuple(cls: type) -> bool:
    # What collections.namedtuple / typing.NamedTuple produce: a direct tuple subclass carrying the generated
    # _fields and _make. Named as a treedef's node type only; never called by a payload.
    return (cls.__bases__ == (tuple,) and isinstance(cls.__dict__.get("_fields"), tuple)
            and "_make" in cls.__dict__)


def _is_registered_pytree_node(cls: type) -> bool:
    from jax._src import tree_util

    return cls in getattr(tree_util, "_registry", {})


class _Stub:
    """Stands for every object during :func:`_scan_payload`: accepts any construction, state or items."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def __setitem__(self, key, value):
        pass


def _value_stub(module: str, name: str) -> type:
    """A stand-in for a global the format only names: calling it (REDUCE / NEWOBJ) refuses the payload."""

    def refuse(cls, *args, **kwargs):
        raise pickle.UnpicklingError(f"refusing to call global {module}.{name}: JAX's executable format only "
                                     "names it, so a payload that calls it is not one JAX wrote")

    return type("ValueOnly", (_Stub,), {"__new__": refuse})


class _Scan:
    """What a scan found: the globals named, the device ids referred to, the executables (count), the pickle frame
    (``bytes``) and where the executable is: inside the frame (JAX's own format: ``exec_bytes``, the last one) or
    after it (:mod:`xlakit._jax.payload_layout`: ``tail``, a view of the payload or, from a
    :class:`~xlakit.store.split.SplitPayload`, its tail ``bytes``)."""

    def __init__(self) -> None:
        self.globals: set[tuple[str, str]] = set()
        self.device_ids: set[int] = set()
        self.exec_count = 0
        self.exec_bytes = b""
        self.frame = b""
        self.tail: bytes | memoryview | None = None

    def executable(self) -> bytes:
        """The executable as the ``bytes`` XLA takes: the tail when it already is its own ``bytes`` object, else a
        copy of it, made here once (XLA's ``deserialize_executable`` accepts nothing but ``bytes``), or the bytes
        found inside the frame."""
        if self.tail is None:
            return self.exec_bytes
        return self.tail if isinstance(self.tail, bytes) else bytes(self.tail)


class _ScanUnpickler(pickle.Unpickler):
    """Walks a payload applying the global policy, but builds nothing real: every global and persistent
    object becomes a :class:`_Stub`. No JAX object, device or executable is created. ``tail``: the length of the
    executable that follows the frame (the frame's persistent id then names that length), or None for JAX's own
    format (the executable inside)."""

    def __init__(self, file, tail: int | None = None):
        super().__init__(file)
        self.result = _Scan()
        self._tail = tail

    def find_class(self, module, name):
        _resolve_global(module, name)
        self.result.globals.add((module, name))
        if allowed_use(module, name) == CALL:
            return _Stub
        return _value_stub(module, name)

    def persistent_load(self, pid):
        kind = pid[0] if isinstance(pid, tuple) and pid else None
        if kind == "device" and len(pid) == 2 and isinstance(pid[1], int):
            self.result.device_ids.add(pid[1])
        elif kind == "exec" and len(pid) == 2 and self._tail is None and isinstance(pid[1], bytes):
            self.result.exec_count += 1
            self.result.exec_bytes = pid[1]
        elif kind == "exec" and len(pid) == 2 and self._tail is not None and type(pid[1]) is int:
            if pid[1] != self._tail:
                raise pickle.UnpicklingError(f"the frame names an executable of {pid[1]} bytes, the payload holds "
                                             f"{self._tail}")
            self.result.exec_count += 1
        elif pid != ("client",):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
        return _Stub()


def _scan_payload(payload: bytes | memoryview | SplitPayload) -> _Scan:
    """Apply the unpickling policy to ``payload`` (either layout of :mod:`xlakit._jax.payload_layout`, bytes-like
    or a :class:`~xlakit.store.split.SplitPayload`) without building objects; only the pickle frame is read.
    Raises ``pickle.UnpicklingError``."""
    if not isinstance(payload, (bytes, bytearray, memoryview, SplitPayload)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    frame, tail = payload_layout.split(payload)
    scanner = _ScanUnpickler(io.BytesIO(frame), None if tail is None else len(tail))
    try:
        scanner.load()
    except pickle.UnpicklingError:
        raise
    except Exception as e:
        raise pickle.UnpicklingError(f"not a valid xlakit executable payload: {type(e).__name__}: {e}") from e
    scanner.result.frame, scanner.result.tail = frame, tail
    return scanner.result
