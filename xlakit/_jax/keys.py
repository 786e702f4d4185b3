"""xlakit's cache key: JAX's key without the concrete device ids, so one entry serves every placement.

JAX's key (``jax._src.cache_key.get``) hashes, in order: the computation, the jaxlib version, the backend
version, the XLA flags, the compile options, the accelerator config, the compression and a custom hook. Two
of these carry the concrete devices a program was lowered for:

* ``compile_options`` — the device assignment (device ids, e.g. ``[[0, 1, 2, 3]]`` vs ``[[3, 2, 1, 0]]`` for a
  mesh built on reversed devices). JAX strips it to ``arange`` itself only on GPU.
* ``accelerator_config`` — the fingerprint of ``get_topology_for_devices(devices)``. On XLA:CPU that is the
  whole client's topology: the same for every subset of one process's devices, but different in every process
  of a ``jax.distributed`` job (ids 0 / 2048 / 4096 and their process indices are in it).

So a program lowered again on permuted or shifted devices of the same kind misses and compiles again, and the
same program gets a different key in each process of a distributed job. :func:`placement_free_key` computes
the same parts with JAX's own helpers, except:

* ``compile_options`` is hashed with the device assignment replaced by ``arange`` of the same shape
  (replica count x computation count stay in) — on the platforms in :data:`PLACEMENT_FREE_PLATFORMS`, whose
  compiled SPMD program does not depend on which same-kind devices run it (XLA:CPU; GPU, where JAX strips it
  for the same reason). Elsewhere (TPU, whose compiler may route collectives by the physical assignment) the
  assignment stays in: correct first, shared second.
* ``accelerator_config`` on CPU hashes each device's kind in order (JAX's own fallback for backends without a
  topology); on other platforms it is JAX's topology fingerprint (the slice's topology, which stays in).
* a ninth part, ``placement``, names what any set of devices must share to run the entry: platform, device
  count, the device array's shape as JAX passes it (1-D from ``jax.jit``; the mesh shape itself is in the
  module's shardings and the compile options' partition count), each device's kind, and which devices share a process
  (process indices renumbered in order of first appearance: ``(0, 0, 1, 1)`` for 2 devices in each of 2
  processes, whatever the processes' ids), plus whether the assignment was stripped.

The key is ``<module name>-<sha256 hex>`` like JAX's, the hash taken over the same bytes JAX hashes (parts in
JAX's order, then ``placement``). The per-part hashes (``sha256`` of each part's bytes, what JAX logs at DEBUG)
come out of the same pass, so explaining a miss needs no second hash of the module.

A different device count, kind, mesh shape, process layout or (off CPU) topology gives a different key. The
executable stored under a key still has the assignment it was compiled with; it is placed on the caller's
devices at load (JAX's ``deserialize_executable`` with the caller's compile options, whose assignment is the
caller's devices), after :func:`check_loadable` has compared the stored assignment with the caller's.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Iterator
from typing import Any

from xlakit._jax.assignment import _assignment_grid, _proto_fields, _varint  # no JAX import; needed by every hit

__all__ = [
    "KEY_FORMAT",
    "PLACEMENT_FREE_PLATFORMS",
    "PlacementMismatch",
    "check_loadable",
    "placement_descriptor",
    "placement_free_key",
    "supported",
]

KEY_FORMAT = "xlakit-key-2"  # hashed into the ``placement`` part; bump when the key's definition changes
PLACEMENT_FREE_PLATFORMS = frozenset({"cpu", "gpu", "cuda", "rocm"})
_HELPERS = ("_hash_computation", "_hash_platform", "_hash_xla_flags", "_hash_serialized_compile_options",
            "_hash_accelerator_config", "_hash_devices", "_hash_string", "get_flag_prefixes", "custom_hook")


class PlacementMismatch(ValueError):
    """A stored executable cannot run on the caller's devices (count or layout differ); raised before XLA."""


class _Tee:
    """Feeds the bytes of one part both to the key's running hash and to the part's own hash."""

    def __init__(self, chain: Any) -> None:
        self.chain, self.part = chain, hashlib.sha256()

    def update(self, data: bytes) -> None:
        self.chain.update(data)
        self.part.update(data)


@functools.cache
def supported() -> bool:
    """Whether this JAX has every private helper of ``jax._src.cache_key`` the key is built from (memoized)."""
    try:
        from jax._src import cache_key
        from jax._src.lib import version_str  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return all(callable(getattr(cache_key, name, None)) for name in _HELPERS)


def _flat(devices: Any) -> list:
    if devices is None:
        return []
    flat = getattr(devices, "flat", None)
    return list(flat if flat is not None else devices)


def placement_descriptor(devices: Any, platform: str, stripped: bool) -> str:
    """The text of the ``placement`` part: what every device set that shares an entry has in common.

    ``devices``: the device array JAX keys (``numpy.ndarray`` of ``jax.Device``, in device-assignment order).
    Example: ``xlakit-key-2;platform=cpu;count=4;shape=(4,);kinds=cpu,cpu,cpu,
    cpu;processes=0,0,0,0;assignment=stripped``.
    """
    flat = _flat(devices)
    shape = tuple(getattr(devices, "shape", (len(flat),)))
    renumber: dict[int, int] = {}
    layout = [renumber.setdefault(int(getattr(d, "process_index", 0)), len(renumber)) for d in flat]
    return (f"{KEY_FORMAT};platform={platform};count={len(flat)};shape={shape};"
            f"kinds={','.join(str(d.device_kind) for d in flat)};processes={','.join(map(str, layout))};"
            f"assignment={'stripped' if stripped else 'kept'}")


@functools.lru_cache(maxsize=4)
def _signature(jax_get: Any) -> inspect.Signature:
    """``inspect.signature`` of JAX's ``get``, asked once per function (it costs ~20 us, on every key)."""
    return inspect.signature(jax_get)


def _bound(jax_get: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """JAX's ``get`` arguments by name, defaults filled in (the sixth parameter is ``ignore_callbacks`` on
    0.10, ``ignore_custom_partitioning`` on 0.12: passed on to ``_hash_computation`` as is)."""
    bound = _signature(jax_get).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _without_cache_paths(options: Any) -> Any:
    """``options``, or a copy without the paths JAX adds when its own persistent cache folder is set (the XLA:GPU
    kernel cache file and autotune folder below ``jax_compilation_cache_dir``, and the LLVM module parallelism the
    kernel cache switches on): where a cache lives never enters a key (a folder set after ``enable_cache()`` made
    every stored program miss)."""
    import copy

    debug = options.executable_build_options.debug_options
    if not (debug.xla_gpu_kernel_cache_file or debug.xla_gpu_per_fusion_autotune_cache_dir):
        return options
    options = copy.deepcopy(options)
    debug = options.executable_build_options.debug_options
    if debug.xla_gpu_kernel_cache_file:
        debug.xla_gpu_kernel_cache_file = ""
        debug.xla_gpu_enable_llvm_module_compilation_parallelism = False
    debug.xla_gpu_per_fusion_autotune_cache_dir = ""
    return options


def placement_free_key(jax_get: Any, args: tuple, kwargs: dict, *,
                       with_parts: bool = True) -> tuple[str, dict[str, str]]:
    """``(key, parts)`` for a call ``jax_get(*args, **kwargs)`` of JAX's ``cache_key.get``.

    ``key`` is ``<module name>-<64 hex>``; ``parts`` maps each part's name (JAX's eight, then ``placement``)
    to the sha256 hex of that part's bytes. See the module docstring for what differs from JAX's key.
    With ``with_parts=False`` only the key is computed and ``parts`` is ``{}``: every byte is hashed once
    instead of twice (a hit never needs the parts; a miss or an explanation computes them again).

    Raises:
      Whatever JAX's helpers raise (the caller falls back to JAX's own key).
    """
    from jax._src import cache_key as ck
    from jax._src.lib import version_str
    from jax._src.lib.mlir import ir

    params = list(_signature(jax_get).parameters)
    named = _bound(jax_get, args, kwargs)
    module, devices = named[params[0]], named[params[1]]
    compile_options, backend = named[params[2]], named[params[3]]
    compression = named[params[4]] if len(params) > 4 else "zstandard"
    ignore = named[params[5]] if len(params) > 5 else None
    platform = str(backend.platform)
    strip = platform in PLACEMENT_FREE_PLATFORMS

    def computation(h):
        if ignore is None:
            return ck._hash_computation(h, module)
        return ck._hash_computation(h, module, ignore)

    def accelerator(h):
        if platform == "cpu":
            ck._hash_devices(h, _as_array(devices))
        else:
            ck._hash_accelerator_config(h, _as_array(devices))

    entries = [
        ("computation", computation),
        ("jax_lib version", lambda h: h.update(version_str.encode("utf-8"))),
        ("backend version", lambda h: ck._hash_platform(h, backend)),
        ("XLA flags", lambda h: ck._hash_xla_flags(h, ck.get_flag_prefixes())),
        ("compile_options", lambda h: ck._hash_serialized_compile_options(h, _without_cache_paths(compile_options),
                                                                           strip_device_assignment=strip)),
        ("accelerator_config", accelerator),
        ("compression", lambda h: ck._hash_string(h, compression)),
        ("custom_hook", lambda h: ck._hash_string(h, ck.custom_hook())),
        ("placement", lambda h: ck._hash_string(h, placement_descriptor(devices, platform, strip))),
    ]
    chain = hashlib.sha256()
    parts: dict[str, str] = {}
    for name, fn in entries:
        if not with_parts:
            fn(chain)
            continue
        tee = _Tee(chain)
        fn(tee)
        parts[name] = tee.part.hexdigest()
    module_name = ir.StringAttr(module.operation.attributes["sym_name"]).value
    return f"{module_name}-{chain.hexdigest()}", parts


def _as_array(devices: Any) -> Any:
    import numpy as np

    if hasattr(devices, "flat"):
        return devices
    arr = np.empty(len(_flat(devices)), dtype=object)
    arr[:] = _flat(devices)
    return arr


# --------------------------------------------------------------------------------------------- load check

def stored_compile_options(exec_bytes: bytes | memoryview) -> Iterator[Any]:
    """Each ``CompileOptions`` the serialized executable may hold (unknown format: none), read without copying
    the executable: the same fields as :func:`xlakit._jax.assignment._stored_compile_options`, walked over a
    ``memoryview`` so that only the small compile-options field becomes ``bytes`` (slicing ``bytes`` copied the
    whole ~1 MB executable twice per lookup: ~0.7 ms of a transformer's warm hit).

    Layout (PjRt CPU, jaxlib 0.10-0.12): an optional IFRT header (a varint length, then that many bytes), then
    an ``ExecutableAndOptionsProto`` {1: executable bytes, 2: ``CompileOptionsProto``}.
    """
    from jax._src.lib import xla_client as xc

    view = memoryview(exec_bytes)
    candidates = [view]
    try:
        header_len, pos = _varint(view, 0)  # type: ignore[arg-type]  # indexing is all it does
        candidates.append(view[pos + header_len:])
    except IndexError:
        pass
    for buf in candidates:
        fields = _proto_fields(buf)  # type: ignore[arg-type]  # indexing and slicing are all it does
        if not fields or not any(num == 1 and wire == 2 for num, wire, _ in fields):
            continue
        for num, wire, value in fields:
            if num == 2 and wire == 2:
                try:
                    yield xc.CompileOptions.ParseFromString(bytes(value))  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - not a CompileOptionsProto
                    continue


def check_loadable(exec_bytes: bytes, compile_options: Any, executable_devices: Any) -> None:
    """Refuse, before any XLA call, to load a stored executable whose device layout differs from the caller's.

    The key already holds count, kinds and layout; this re-checks what would abort the process or run wrong
    if a key ever matched wrongly: the stored compile options' device assignment (read from the serialized
    executable, :func:`xlakit._jax.assignment._stored_compile_options`) must have the same replica x
    computation shape as the caller's compile options, and as many devices as ``executable_devices``; and the
    caller's devices must be of one platform. An executable whose format exposes no stored assignment is
    checked by count only against the caller's options.

    Raises:
      PlacementMismatch: naming both layouts.
    """
    wanted = _flat(executable_devices)
    caller = _assignment_grid(compile_options) if compile_options is not None else None
    if caller is not None and caller.size != len(wanted):
        raise PlacementMismatch(f"the lookup's device assignment has {caller.size} device(s) but "
                                f"{len(wanted)} devices were given")
    stored = None
    for options in stored_compile_options(exec_bytes):
        stored = _assignment_grid(options)
        if stored is not None:
            break
    if stored is None:
        return
    if stored.size != len(wanted):
        raise PlacementMismatch(f"the stored executable was compiled for {stored.size} device(s), the caller "
                                f"runs on {len(wanted)} (loading it would abort the process)")
    if caller is not None and caller.shape != stored.shape:
        raise PlacementMismatch(f"the stored executable's device assignment is {stored.shape[0]} replica(s) x "
                                f"{stored.shape[1]} computation(s), the caller's {caller.shape[0]} x "
                                f"{caller.shape[1]}")
