"""Live arrays: which JAX arrays are alive, where (device x memory kind), how big, and who made them.

Source: ``jax.live_arrays()`` (every undeleted ``jax.Array`` of the backend), each array's sharding
(``sharding.addressable_devices_indices_map`` for the bytes each device holds, ``sharding.memory_kind``) and
its creation traceback (``Array.traceback``). Bytes are exact array bytes (shape x itemsize per shard); the
allocator's rounding and XLA's temporaries are not included.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Iterator
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table

__all__ = ["live_arrays", "live_bytes", "move", "MoveResult", "COLUMNS"]

COLUMNS = ("array", "device", "device_id", "platform", "memory_kind", "shape", "shard_shape", "dtype", "bytes",
           "array_bytes", "devices", "created_at")


_INTERNAL = ("jax", "jaxlib", "xlakit", "python")


def _user_frame(tb: Any) -> str | None:
    """``"file:line (function)"`` of the innermost frame of user code; failing that, the innermost frame outside
    JAX/jaxlib/xlakit/stdlib (e.g. inside flax). Library code as :mod:`xlakit._sources` decides it (by where
    packages are installed, not by folder names)."""
    from xlakit._sources import library_package

    if tb is None:
        return None
    try:
        frames = list(tb.frames)  # innermost first
    except Exception:  # noqa: BLE001 - a traceback we cannot read is just unknown
        return None
    packages = [(f, library_package(f.file_name)) for f in frames]
    user = [f for f, package in packages if package is None]
    outside = [f for f, package in packages if package not in _INTERNAL]
    frame = (user or outside or [None])[0]
    if frame is None:
        return None
    return f"{frame.file_name}:{frame.line_num} ({frame.function_name})"


def _shards(arr: Any) -> Iterator[tuple[Any, tuple[int, ...]]]:
    """(device, shard shape) for each addressable device holding part of ``arr``."""
    indices = arr.sharding.addressable_devices_indices_map(arr.shape)
    for device, index in indices.items():
        if index is None:  # fully replicated on this device
            yield device, tuple(arr.shape)
            continue
        shape = []
        for dim, sl in zip(arr.shape, index, strict=False):
            start, stop, step = sl.indices(dim) if isinstance(sl, slice) else (0, dim, 1)
            shape.append(max(0, math.ceil((stop - start) / step)))
        shape.extend(arr.shape[len(index):])
        yield device, tuple(shape)


def _itemsize(arr: Any) -> float:
    # nbytes / size also covers sub-byte dtypes (int4) the way JAX counts them
    return arr.nbytes / arr.size if arr.size else arr.dtype.itemsize


def _rows(arrays: Iterable[Any], with_origin: bool = True) -> list[dict[str, Any]]:
    rows = []
    for arr in arrays:
        try:
            if arr.is_deleted():
                continue
            kind = arr.sharding.memory_kind
            itemsize = _itemsize(arr)
            shards = list(_shards(arr))
        except Exception:  # noqa: BLE001 - an array deleted under us, or an exotic sharding
            continue
        origin = _user_frame(getattr(arr, "traceback", None)) if with_origin else None
        for device, shard_shape in shards:
            rows.append({"array": id(arr), "device": str(device), "device_id": device.id,
                         "platform": device.platform, "memory_kind": kind, "shape": tuple(arr.shape),
                         "shard_shape": shard_shape, "dtype": str(arr.dtype),
                         "bytes": int(math.prod(shard_shape) * itemsize), "array_bytes": int(arr.nbytes),
                         "devices": len(shards), "created_at": origin})
    return rows


def _backend(backend: Any) -> str | None:
    """``backend`` checked: None or the name of a backend JAX has (``"cpu"``); raises TypeError / ValueError naming
    ``backend`` (a float said "'float' object has no attribute 'live_arrays'", ``""`` was taken as the default)."""
    if backend is None:
        return None
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a backend name such as 'cpu' or 'gpu', or None, got "
                        f"{type(backend).__name__}")
    if not backend.strip():
        raise ValueError("backend is empty: give a backend name such as 'cpu' or 'gpu', or None for the default")
    import jax

    try:
        jax.devices(backend)
    except RuntimeError as e:
        raise ValueError(f"backend {backend!r}: JAX has no such backend here ({e})"[:300]) from None
    return backend


def live_arrays(group_by: str | Iterable[str] | None = None, *, backend: str | None = None):
    """Every live JAX array, one row per (array, device holding a shard), as a ``pandas.DataFrame``.

    Args:
      group_by: None for one row per shard; a column name or list of names (e.g. ``("device",
        "memory_kind")``) for totals: columns ``arrays`` (distinct arrays) and ``bytes`` (sum).
      backend: the JAX backend (``"cpu"``, ``"gpu"``); default: the default backend.

    Columns (ungrouped): array (Python id), device, device_id, platform, memory_kind (``device``,
    ``pinned_host``, ``unpinned_host``), shape, shard_shape, dtype, bytes (this shard), array_bytes (whole
    array), devices (shards), created_at (``file:line (function)`` of the first user frame in the array's
    creation traceback; None when JAX kept no traceback).

    Raises:
      KeyError: ``group_by`` names an unknown column (the message lists them). TypeError / ValueError:
        ``group_by`` neither a name, a list of names nor None; an empty list.
    """
    import jax
    import pandas as pd

    frame = pd.DataFrame(_rows(jax.live_arrays(_backend(backend))), columns=list(COLUMNS))
    if group_by is None:
        return frame
    try:
        keys = [group_by] if isinstance(group_by, str) else list(group_by)
    except TypeError:  # 5 said "'int' object is not iterable"
        raise TypeError(f"group_by must be a column name or a list of them (from {list(COLUMNS)}), or None, got "
                        f"{type(group_by).__name__}") from None
    if not keys:  # [] reached pandas' "No group keys passed!"
        raise ValueError(f"group_by is empty: give a column name or a list of them (from {list(COLUMNS)}), or None "
                         "for one row per shard")
    unknown = [k for k in keys if not isinstance(k, str) or k not in COLUMNS]
    if unknown:
        raise KeyError(f"unknown group_by column(s) {unknown}; choose from {list(COLUMNS)}")
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "arrays", "bytes"]).set_index(keys)
    return frame.groupby(keys, dropna=False).agg(arrays=("array", "nunique"), bytes=("bytes", "sum"))


def live_bytes(device: Any = None, memory_kind: str | None = "default", *, backend: str | None = None) -> int:
    """Exact bytes of live JAX array shards, summed (no tracebacks read, so cheap).

    Args:
      device: a ``jax.Device`` or device id; None for all devices of the backend.
      memory_kind: count only shards in this memory kind; ``"default"`` = each device's default memory
        (``device.default_memory().kind``); None for every kind.

    Raises:
      ValueError: ``device`` is an id no device of the backend has, or ``memory_kind`` is no memory kind of its
        devices (a typo counted 0 bytes). TypeError: ``device`` neither a ``jax.Device``, an int nor None.
    """
    import jax

    from xlakit._units import is_int

    backend = _backend(backend)
    devices = jax.devices(backend) if backend else jax.devices()
    if device is not None and not is_int(device) and not hasattr(device, "id"):
        raise TypeError(f"live_bytes(device=...): expected a jax.Device, a device id (int) or None, got "
                        f"{type(device).__name__}")
    if is_int(device) and int(device) not in {d.id for d in devices}:
        raise ValueError(f"live_bytes(device={device}): no device of this backend has that id; ids: "
                         f"{sorted(d.id for d in devices)}")
    if memory_kind not in (None, "default"):
        kinds = {m.kind for d in devices for m in _memories(d)}
        if kinds and memory_kind not in kinds:
            raise ValueError(f"live_bytes(memory_kind={memory_kind!r}): not a memory kind of these devices; "
                             f"kinds: {sorted(kinds)}, 'default' or None (every kind)")
    total = 0
    want_id = int(device) if is_int(device) else None if device is None else device.id
    for row in _rows(jax.live_arrays(backend), with_origin=False):
        if want_id is not None and row["device_id"] != want_id:
            continue
        if memory_kind is not None and row["memory_kind"] is not None:
            target = memory_kind
            if memory_kind == "default":
                target = _default_kind(row["device_id"], backend)
            if row["memory_kind"] != target:
                continue
        total += row["bytes"]
    return total


def _memories(device: Any) -> list[Any]:
    try:
        return list(device.addressable_memories())
    except Exception:  # noqa: BLE001 - a backend without memory spaces: every kind is allowed
        return []


_DEFAULT_KIND: dict[tuple[str | None, int], str] = {}


def _default_kind(device_id: int, backend: str | None) -> str:
    key = (backend, device_id)
    if key not in _DEFAULT_KIND:
        import jax

        dev = next(d for d in jax.devices(backend) if d.id == device_id)
        try:
            _DEFAULT_KIND[key] = dev.default_memory().kind
        except Exception:  # noqa: BLE001 - backends without memories: everything is "device"
            _DEFAULT_KIND[key] = "device"
    return _DEFAULT_KIND[key]


@dataclasses.dataclass(frozen=True)
class MoveResult:
    """Outcome of :func:`move`.

    arrays: the input pytree with moved arrays replaced. memory_kind: the target. bytes_moved: bytes of the
    shards copied (arrays already in the target kind are not copied and count 0). moved / unchanged: array
    counts (``unchanged`` includes non-JAX leaves). seconds: wall time including ``block_until_ready``.
    """

    arrays: Any = dataclasses.field(repr=False)
    memory_kind: str
    bytes_moved: int
    moved: int
    unchanged: int
    seconds: float

    def __repr__(self) -> str:
        return (f"MoveResult({self.moved} array(s), {fmt_bytes(self.bytes_moved)} -> {self.memory_kind} in "
                f"{self.seconds * 1e3:.1f} ms; {self.unchanged} unchanged)")

    def _repr_html_(self) -> str:
        return html_table([("memory kind", self.memory_kind), ("bytes moved", fmt_bytes(self.bytes_moved)),
                           ("arrays moved", self.moved), ("unchanged", self.unchanged),
                           ("seconds", f"{self.seconds:.4f}")], title="Move")


def move(arrays: Any, memory_kind: str = "pinned_host", *, donate: bool = False) -> MoveResult:
    """Copy every JAX array in a pytree to ``memory_kind`` on the same devices (offload and back).

    Args:
      arrays: a pytree (array, list, dict, flax params...). Non-JAX leaves pass through unchanged.
      memory_kind: ``"pinned_host"`` to offload, ``"device"`` to bring back, or any kind listed by
        ``device.addressable_memories()``.
      donate: delete each source array once its copy is ready (``Array.delete()``), so its memory is freed
        even while other references exist; those references are then unusable. (XLA does not implement
        ``device_put(..., donate=True)`` across memory kinds.)

    Returns:
      :class:`MoveResult` with the new pytree and the bytes moved.

    Raises:
      ValueError: a device does not offer ``memory_kind`` (checked before any transfer; the message lists
        the kinds it offers). TypeError: ``donate`` is not True or False (``"no"`` is truthy: it deleted the
        arrays).
    """
    import jax

    from xlakit._units import check_flag

    check_flag(donate, "donate")
    leaves, treedef = jax.tree_util.tree_flatten(arrays)
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            for device in leaf.sharding.device_set:
                # jaxlib's Device stub does not declare addressable_memories (a real method of every device)
                kinds = [m.kind for m in device.addressable_memories()]  # type: ignore[attr-defined]
                if memory_kind not in kinds:
                    raise ValueError(f"{device} has no memory kind {memory_kind!r}; it offers {kinds}")
    start = time.perf_counter()
    out, moved, unchanged, nbytes = [], 0, 0, 0
    for leaf in leaves:
        if not isinstance(leaf, jax.Array) or leaf.sharding.memory_kind == memory_kind:
            out.append(leaf)
            unchanged += 1
            continue
        nbytes += sum(r["bytes"] for r in _rows([leaf], with_origin=False))
        out.append(jax.device_put(leaf, leaf.sharding.with_memory_kind(memory_kind)))
        moved += 1
    jax.block_until_ready([x for x in out if isinstance(x, jax.Array)])
    if donate:
        for leaf, new in zip(leaves, out, strict=True):
            if new is not leaf:
                leaf.delete()
    return MoveResult(jax.tree_util.tree_unflatten(treedef, out), memory_kind, nbytes, moved, unchanged,
                      time.perf_counter() - start)
