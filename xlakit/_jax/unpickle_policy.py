"""The unpickling policy for executable payloads: which globals a payload may name, and a scan that applies it
without building anything. Used by :mod:`xlakit._jax.serialize` (both when writing, to refuse payloads that would
not load, and when loading).
"""

from __future__ import annotations

import enum
import importlib
import io
import pickle
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["_resolve_global", "_scan_payload", "_Scan", "_ScanUnpickler", "_Stub", "_is_registered_pytree_node"]

# --------------------------------------------------------------------------------------------- unpickling policy
# Globals found in real payloads (jax 0.10.2 and 0.12.0.1, CPU): single-device, NamedSharding over 1-D and 2-D
# meshes, GSPMDSharding, donation, dict/tuple/list/namedtuple/None/OrderedDict/defaultdict pytrees, static
# args, kwargs, bf16/int8/float8/complex dtypes, layouts, pinned_host memory kinds, shard_map, scan, grad,
# threefry/rbg/unsafe_rbg typed keys. Resolving a global only looks a name up; a function is only called by
# the pickle if it is one of the few below.

# Functions (and other non-class objects) — never allowed by a rule, only by name.
_ALLOWED_FUNCTIONS = frozenset({
    ("numpy._core.multiarray", "_reconstruct"),        # ndarray (e.g. a Mesh's device array), numpy >= 2
    ("numpy.core.multiarray", "_reconstruct"),         # the same, numpy 1.x
    ("numpy._core.multiarray", "scalar"),              # numpy scalars
    ("numpy.core.multiarray", "scalar"),
    ("jax._src.named_sharding", "_unpickle_named_sharding"),
    ("jax._src.sharding_impls", "_unpickle_single_device_sharding"),
    ("jax._src.sharding_impls", "_unpickle_gspmd_sharding"),
    ("jax._src.partition_spec", "_get_default_unconstrained"),  # P.UNCONSTRAINED
    ("jax._src.tree_util", "default_registry"),        # PyTreeDef state names its registry
    ("jax._src.tree_util", "tracing_registry"),
    ("jax._src.tree_util", "none_leaf_registry"),
    ("jax._src.tree_util", "dispatch_registry"),
})
# Plus the seed/split/fold_in/random_bits functions of JAX's registered PRNG implementations (a typed key's
# dtype pickles its PRNGImpl): see _prng_functions().

# Classes seen in payloads. Calling one of these (REDUCE/NEWOBJ) only builds a value.
_ALLOWED_CLASSES = frozenset({
    ("jax._src.interpreters.pxla", "UnloadedMeshExecutable"),
    ("jax._src.interpreters.pxla", "AllArgsInfo"),
    ("jax._src.stages", "ArgInfo"),
    ("jax._src.core", "ShapedArray"),
    ("jax._src.core", "ManualAxisType"),
    ("jax._src.core", "MemorySpace"),
    ("jax._src.layout", "Layout"),
    ("jax._src.layout", "AutoLayoutSingleton"),        # 0.12
    ("jax._src.linear_util", "DebugInfo"),
    ("jax._src.mesh", "Mesh"),
    ("jax._src.mesh", "AbstractMesh"),
    ("jax._src.mesh", "AbstractDevice"),
    ("jax._src.mesh", "AxisType"),
    ("jax", "P"),                                      # PartitionSpec pickles under its public name
    ("jax._src.partition_spec", "P"),
    ("jax._src.random.prng", "KeyTy"),
    ("jax._src.random.prng", "PRNGImpl"),
    ("jaxlib._jax", "DeviceList"),
    ("jaxlib._jax.pytree", "PyTreeDef"),
    ("jaxlib._hlo", "OpSharding"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("collections", "OrderedDict"),
    ("collections", "defaultdict"),
})

_SAFE_BUILTINS = frozenset({"tuple", "list", "dict", "set", "frozenset", "slice", "complex", "bytearray",
                            "bytes", "str", "int", "float", "bool", "range"})
_JAX_PACKAGES = ("jax", "jaxlib")
_DTYPE_PACKAGES = ("numpy", "ml_dtypes")


def _prng_functions() -> frozenset:
    try:
        from jax._src.random import prng
    except ImportError:  # older layout
        from jax._src import prng  # type: ignore[no-redef,attr-defined]
    names = set()
    for impl in getattr(prng, "prngs", {}).values():
        for attr in ("seed", "split", "random_bits", "fold_in"):
            fn = getattr(impl, attr, None)
            if fn is not None and getattr(fn, "__module__", None):
                names.add((fn.__module__, fn.__qualname__))
    return frozenset(names)


def _top(module: str) -> str:
    return module.partition(".")[0]


def _resolve_global(module: str, name: str):
    """Return the object ``module.name`` if the policy allows it, else raise ``pickle.UnpicklingError``.

    Allowed: the named functions and classes above; builtins only from ``_SAFE_BUILTINS``; and, so newer
    JAX versions keep working, classes (never functions) of these kinds: Enum, Sharding, AbstractValue and
    ExtendedDType subclasses in ``jax``/``jaxlib``; NumPy scalar and dtype classes in ``numpy``/``ml_dtypes``;
    for any other module that is *already imported* (never imported on a payload's behalf — imports run
    code): namedtuple classes and classes registered as pytree nodes (treedefs name them).

    Positive answers for builtins and the ``jax``/``jaxlib``/``numpy``/``ml_dtypes`` packages are remembered per
    ``(module, name)`` and reused while ``sys.modules[module]`` is the same module object (the allow-list is
    static): every program of a bundle names the same few dozen globals, and the first answer costs a
    ``_prng_functions()`` walk and subclass checks. Refusals and classes of other modules (a notebook may
    redefine a namedtuple or pytree class) are decided afresh each time.
    """
    hit = _RESOLVED.get((module, name))
    if hit is not None and sys.modules.get(module) is hit[0]:
        return hit[1]
    obj = _resolve_uncached(module, name)
    if module == "builtins" or _top(module) in _JAX_PACKAGES + _DTYPE_PACKAGES:
        mod = sys.modules.get(module)
        if mod is not None:
            _RESOLVED[(module, name)] = (mod, obj)
    return obj


# (module, name) -> (the module object it was resolved in, the allowed object); see _resolve_global.
_RESOLVED: dict[tuple[str, str], tuple[Any, Any]] = {}


def _resolve_uncached(module: str, name: str):
    def refuse(why: str):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}: {why}")

    parts = name.split(".")
    if any(not p or p.startswith("__") for p in parts):
        refuse("dunder or empty attribute names are never resolved")
    pair = (module, name)
    explicit = pair in _ALLOWED_FUNCTIONS or pair in _ALLOWED_CLASSES
    if module == "builtins":
        if name not in _SAFE_BUILTINS:
            refuse("only plain container and number types are allowed from builtins")
        explicit = True
    if not explicit and pair in _prng_functions():
        explicit = True
    trusted_package = _top(module) in _JAX_PACKAGES + _DTYPE_PACKAGES
    if module in sys.modules:
        mod = sys.modules[module]
    elif explicit or trusted_package:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            refuse("module not found")
    else:
        refuse("module is not imported in this process (a payload never triggers an import)")
    obj: Any = mod
    for p in parts:
        try:
            obj = getattr(obj, p)
        except AttributeError:
            refuse("no such attribute")
    if explicit:
        if pair in _ALLOWED_CLASSES and not isinstance(obj, type):
            refuse("expected a class")
        return obj
    if not isinstance(obj, type):
        refuse("not on the allow-list (functions and objects are allowed only by name)")
    if _top(module) in _JAX_PACKAGES and _is_jax_value_class(obj):
        return obj
    if _top(module) in _DTYPE_PACKAGES and _is_dtype_class(obj):
        return obj
    if _is_plain_namedtuple(obj):
        return obj
    # JAX registers internal node classes too (tree_util.Partial wraps a callable): only user classes here.
    if not trusted_package and _is_registered_pytree_node(obj):
        return obj
    refuse("class is not on the allow-list")


def _is_jax_value_class(cls: type) -> bool:
    from jax._src import core, dtypes
    from jax.sharding import Sharding

    return issubclass(cls, (enum.Enum, Sharding, core.AbstractValue, dtypes.ExtendedDType))


def _is_dtype_class(cls: type) -> bool:
    import numpy as np

    return issubclass(cls, (np.generic, np.dtype))


def _is_plain_namedtuple(cls: type) -> bool:
    # What collections.namedtuple / typing.NamedTuple produce: a direct tuple subclass carrying the generated
    # _fields and _make (subclasses that could override __new__ have other bases). Calling it builds a tuple.
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


@dataclass
class _Scan:
    globals: set
    device_ids: set
    exec_count: int = 0
    exec_bytes: bytes = b""


class _ScanUnpickler(pickle.Unpickler):
    """Walks a payload applying the global policy, but builds nothing real: every global and persistent
    object becomes a :class:`_Stub`. No JAX object, device or executable is created."""

    def __init__(self, file):
        super().__init__(file)
        self.result = _Scan(set(), set())

    def find_class(self, module, name):
        _resolve_global(module, name)
        self.result.globals.add((module, name))
        return _Stub

    def persistent_load(self, pid):
        kind = pid[0] if isinstance(pid, tuple) and pid else None
        if kind == "device" and len(pid) == 2 and isinstance(pid[1], int):
            self.result.device_ids.add(pid[1])
        elif kind == "exec" and len(pid) == 2 and isinstance(pid[1], bytes):
            self.result.exec_count += 1
            self.result.exec_bytes = pid[1]
        elif pid != ("client",):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
        return _Stub()


def _scan_payload(payload: bytes) -> _Scan:
    """Apply the unpickling policy to ``payload`` without building objects. Raises ``pickle.UnpicklingError``."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    scanner = _ScanUnpickler(io.BytesIO(payload))
    try:
        scanner.load()
    except pickle.UnpicklingError:
        raise
    except Exception as e:
        raise pickle.UnpicklingError(f"not a valid xlakit executable payload: {type(e).__name__}: {e}") from e
    return scanner.result
