"""Allocator statistics per device, and resetting the peak so one run can be measured on its own.

Where the numbers come from (each :class:`AllocatorStats` names its source per field in ``sources``):

* GPU/TPU: ``Device.memory_stats()`` — a dict from the PJRT allocator. ``-1`` or a missing key means the
  allocator does not track that field: ``None`` here, never 0.
* CPU: ``Device.memory_stats()`` is ``None``. ``bytes_in_use`` is then the exact sum of live JAX array
  shards in the device's default memory (:func:`xlakit.memory.live.live_bytes`), and the process resident
  set and its high-water mark come from ``/proc/self/status`` (``VmRSS``, ``VmHWM``; Linux only). These are
  process-wide, so every CPU device shows the same two numbers.

Resetting the peak (:func:`reset_peak`), best method first:

1. ``native``: a reset bound by the installed jaxlib (feature-detected by name on the device or its client;
   none is bound up to jaxlib 0.12, XLA's C++ ``ClearMemoryStats`` is not exposed).
1b. ``pjrt``: ``PJRT_Device_ClearMemoryStats`` through the PJRT C API of the device's plugin (libtpu, a CUDA
   plugin; :mod:`xlakit._jax.pjrt_capi`), checked step by step before anything is called: a real reset of the
   allocator's peaks.
2. ``clear_refs`` (Linux, CPU): writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM`` to the current
   resident set — a real reset of the process high-water mark, and so of every CPU device at once.
3. ``baseline``: remember the peak at reset time. Later, a higher peak is exact (it happened after the
   reset); an unchanged peak only bounds the peak since reset from above, and
   ``peak_since_reset_exact`` says so.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from typing import Any

from xlakit._text.format import fmt_count
from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._process import _STATUS, ProcessMemory, process_memory
from xlakit.memory._reset_record import Reset, record, recorded
from xlakit.memory.reset_meaning import peak_since_reset_text, reset_explanation, reset_name, reset_sentence

__all__ = ["AllocatorStats", "AllocatorStatsList", "ResetResult", "ProcessMemory", "allocator_stats",
           "parse_memory_stats", "process_memory", "reset_peak", "last_reset", "STATS_KEYS", "NATIVE_RESET_NAMES"]

# Device.memory_stats() keys, in display order.
STATS_KEYS = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit", "bytes_reservable_limit", "bytes_reserved",
              "peak_bytes_reserved", "largest_alloc_size", "largest_free_block_bytes", "num_allocs", "pool_bytes",
              "peak_pool_bytes")
# Method names a jaxlib could bind for XLA's ClearMemoryStats / a peak reset (checked on device, then client).
NATIVE_RESET_NAMES = ("clear_memory_stats", "reset_memory_stats", "reset_peak_memory_stats",
                      "reset_peak_bytes_in_use")
_CLEAR_REFS = "/proc/self/clear_refs"


@dataclasses.dataclass(frozen=True)
class AllocatorStats:
    """Memory numbers of one device at one moment (bytes unless named ``num_``).

    Attributes:
      device, device_id, platform: which device (``str(device)``, ``device.id``, ``"cpu"``/``"gpu"``/...).
      bytes_in_use ... peak_pool_bytes: the ``Device.memory_stats()`` fields (see :data:`STATS_KEYS`); on CPU
        ``bytes_in_use`` is the live-array sum and the rest are None.
      process_rss_bytes, process_hwm_bytes: ``VmRSS``/``VmHWM`` of the process (CPU only; process-wide).
      peak_since_reset_bytes: the peak since the last :func:`reset_peak` for this device, or None before any.
      peak_since_reset_exact: True when that peak is exact; False when it is only an upper bound (baseline
        reset and the peak did not rise since); None without a reset.
      reset_method: the method of the last reset (``native``, ``pjrt``, ``clear_refs``, ``baseline``) or None.
      peak_at_reset_bytes: the peak right after that reset, what the peak since reset started from, or None.
      sources: field name -> where its value came from (or why it is None).
      extra: memory_stats() keys not in :data:`STATS_KEYS`, as given.
      time: ``time.time()`` of the reading.
    """

    device: str
    device_id: int
    platform: str
    bytes_in_use: int | None = None
    peak_bytes_in_use: int | None = None
    bytes_limit: int | None = None
    bytes_reservable_limit: int | None = None
    bytes_reserved: int | None = None
    peak_bytes_reserved: int | None = None
    largest_alloc_size: int | None = None
    largest_free_block_bytes: int | None = None
    num_allocs: int | None = None
    pool_bytes: int | None = None
    peak_pool_bytes: int | None = None
    process_rss_bytes: int | None = None
    process_hwm_bytes: int | None = None
    peak_since_reset_bytes: int | None = None
    peak_since_reset_exact: bool | None = None
    reset_method: str | None = None
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    time: float = dataclasses.field(default_factory=time.time)
    peak_at_reset_bytes: int | None = None

    _NUMBERS = (*STATS_KEYS, "process_rss_bytes", "process_hwm_bytes", "peak_since_reset_bytes", "peak_at_reset_bytes")

    @property
    def high_water_bytes(self) -> int | None:
        """The high-water mark this device reports: the allocator's ``peak_bytes_in_use`` (GPU/TPU), else the
        process's ``VmHWM`` (CPU: the whole process). Bytes; None where neither is reported."""
        return self.peak_bytes_in_use if self.peak_bytes_in_use is not None else self.process_hwm_bytes

    @property
    def peak_meaning(self) -> str:
        """What the peak since reset means, in words (:mod:`xlakit.memory.reset_meaning`); ``""`` before a reset."""
        return peak_since_reset_text(self.reset_method, self.peak_since_reset_bytes, self.peak_at_reset_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "device_id": self.device_id, "platform": self.platform,
                **{k: getattr(self, k) for k in self._NUMBERS},
                "peak_since_reset_exact": self.peak_since_reset_exact, "reset_method": self.reset_method}

    def to_frame(self):
        """``pandas.DataFrame``: one row per number — field, bytes (nullable Int64), source."""
        import pandas as pd

        rows = [(k, getattr(self, k), self.sources.get(k, "")) for k in self._NUMBERS]
        frame = pd.DataFrame(rows, columns=["field", "bytes", "source"]).set_index("field")
        frame["bytes"] = frame["bytes"].astype("Int64")
        return frame

    def __repr__(self) -> str:
        shown = [f"in use {fmt_bytes(self.bytes_in_use)}"]
        if self.peak_bytes_in_use is not None:
            shown.append(f"peak {fmt_bytes(self.peak_bytes_in_use)}")
        if self.bytes_limit is not None:
            shown.append(f"limit {fmt_bytes(self.bytes_limit)}")
        if self.process_rss_bytes is not None:
            shown.append(f"process RSS {fmt_bytes(self.process_rss_bytes)}, HWM {fmt_bytes(self.process_hwm_bytes)}")
        if self.peak_since_reset_bytes is not None:
            exact = "exact" if self.peak_since_reset_exact else "upper bound, NOT exact"
            shown.append(f"peak since reset {fmt_bytes(self.peak_since_reset_bytes)} ({exact}; {self.peak_meaning})")
        return f"AllocatorStats({self.device}: {', '.join(shown)})"

    @property
    def exact_reason(self) -> str:
        """Why ``peak_since_reset_bytes`` is exact or not (or absent), from its source."""
        return self.sources.get("peak_since_reset_bytes", "no reset_peak() yet")

    def _repr_html_(self) -> str:
        rows = [(k, f"{_fmt_stat(k, getattr(self, k))}  [{self.sources.get(k, '')}]") for k in self._NUMBERS
                if getattr(self, k) is not None or k in ("bytes_in_use", "peak_bytes_in_use")]
        if self.peak_since_reset_bytes is not None:
            verdict = "yes" if self.peak_since_reset_exact else "no"
            rows.append(("peak since reset means", self.peak_meaning))
            rows.append(("peak since reset exact", f"{verdict}: {self.exact_reason}"))
        return html_table(rows, title=f"Allocator stats: {self.device}")


def _fmt_stat(key: str, value: int | None) -> str:
    """num_allocs is a count of allocations; every other allocator stat is bytes."""
    return fmt_count(value) if key == "num_allocs" else fmt_bytes(value)


class AllocatorStatsList(tuple):
    """A tuple of :class:`AllocatorStats`, one per device, with ``to_frame()`` (one row per device)."""

    __slots__ = ()

    def to_frame(self):
        import pandas as pd

        frame = pd.DataFrame([s.to_dict() for s in self])
        for col in AllocatorStats._NUMBERS:
            if col in frame:
                frame[col] = frame[col].astype("Int64")
        return frame

    def __repr__(self) -> str:
        return "AllocatorStatsList(\n  " + ",\n  ".join(repr(s) for s in self) + "\n)"

    def _repr_html_(self) -> str:
        return self.to_frame().to_html(index=False)


def parse_memory_stats(stats: Mapping[str, Any] | None, *, device: str = "?", device_id: int = 0,
                       platform: str = "gpu") -> AllocatorStats:
    """:class:`AllocatorStats` from one ``Device.memory_stats()`` dict (e.g. a recorded one).

    ``-1`` and missing keys become None, each with its reason in ``sources``; unknown keys go to ``extra``.

    Raises:
      TypeError: ``stats`` is not a dict (None means the backend has no allocator stats: use
        :func:`allocator_stats`, which falls back to CPU sources).
    """
    if not isinstance(stats, Mapping):
        raise TypeError(f"memory_stats must be a dict, got {type(stats).__name__}; None means the backend "
                        "reports no allocator stats (CPU): call allocator_stats(device) instead")
    values: dict[str, Any] = {}  # the STATS_KEYS fields, each int or None (keyword arguments below)
    sources: dict[str, str] = {}
    for key in STATS_KEYS:
        raw = stats.get(key)
        if key not in stats:
            values[key], sources[key] = None, f"Device.memory_stats(): key {key!r} absent (not tracked)"
        elif not isinstance(raw, int) or isinstance(raw, bool) or raw < 0 or raw >= 2**63:  # past int64: no count
            values[key], sources[key] = None, f"Device.memory_stats()[{key!r}] = {str(raw)[:40]} (unavailable)"
        else:
            values[key], sources[key] = int(raw), f"Device.memory_stats()[{key!r}]"
    extra = {k: v for k, v in stats.items() if k not in STATS_KEYS}
    return AllocatorStats(device=device, device_id=device_id, platform=platform, sources=sources, extra=extra,
                          **values)


# -- resets ----------------------------------------------------------------------------------------------
_REAL_RESETS = ("native", "pjrt", "clear_refs")


@dataclasses.dataclass(frozen=True)
class ResetResult:
    """What :func:`reset_peak` did.

    method: ``"native"``, ``"clear_refs"`` or ``"baseline"`` (``"none"`` when the device reports no peak
    at all). devices: the devices it applied to. detail: the call made, or why a better method was not
    available. peak_at_reset: device -> the peak right after the reset (bytes; None when not reported): what
    later peaks start from. The words for it: :mod:`xlakit.memory.reset_meaning` (:attr:`meaning`, :attr:`name`).
    """

    method: str
    devices: tuple[str, ...]
    detail: str
    peak_at_reset: Mapping[str, int | None]
    time: float = dataclasses.field(default_factory=time.time)

    @property
    def exact(self) -> bool:
        """True when later peaks are exact for any run (native, pjrt or clear_refs reset)."""
        return self.method in _REAL_RESETS

    @property
    def exact_reason(self) -> str:
        """Why later peaks are exact, or when they are not."""
        if self.exact:
            return f"a real reset ({self.name}): every later peak is the peak since now"
        if self.method == "none":
            return "the device reports no peak, so there is nothing to reset"
        return ("baseline only (no reset is available): a later peak above the one at reset time is exact; an "
                "unchanged one is only an upper bound (the lifetime peak)")

    meaning = property(lambda self: reset_sentence(self.method, _largest(self.peak_at_reset)),
                       doc="``'Reset peak sets the peak to ...'``: what the reset measures from, in words.")
    name = property(lambda self: reset_name(self.method), doc="``'process high-water mark'``, ``'allocator reset'``...")

    def __repr__(self) -> str:
        exact = "Later peaks are exact" if self.exact else f"NOT exact: {self.exact_reason}"
        return f"ResetResult({self.name} on {', '.join(self.devices)}: {self.meaning} {exact}; how: {self.detail})"

    def _repr_html_(self) -> str:
        return html_table([("reset", self.name), ("what it means", reset_explanation(self.method, _largest(
            self.peak_at_reset))), ("devices", ", ".join(self.devices)), ("exact", f"{'yes' if self.exact else 'no'}: "
                           f"{self.exact_reason}"), ("how", f"{self.method}: {self.detail}")], title="Peak reset")


def _largest(values: Mapping[str, int | None]) -> int | None:
    return max((v for v in values.values() if v is not None), default=None)


def _native_reset(device: Any) -> str | None:
    """Call a bound reset if this jaxlib has one; return the call's description, or None."""
    for owner_name, owner in (("Device", device), ("Client", getattr(device, "client", None))):
        for name in NATIVE_RESET_NAMES:
            fn = getattr(owner, name, None) if owner is not None else None
            if callable(fn):
                if owner_name == "Client":
                    fn(device)
                else:
                    fn()
                return f"{owner_name}.{name}()"
    return None


def _pjrt_reset(device: Any) -> tuple[str | None, str, str]:
    """``(call made or None, "pjrt", why not)``: :func:`xlakit._jax.pjrt_capi.clear_memory_stats`."""
    from xlakit._jax.pjrt_capi import PjrtUnavailable, clear_memory_stats

    try:
        return clear_memory_stats(device), "pjrt", ""
    except PjrtUnavailable as exc:
        return None, "pjrt", str(exc)
    except Exception as exc:  # noqa: BLE001 - an unexpected failure is a reason, never a crash of the caller
        return None, "pjrt", f"{type(exc).__name__}: {exc}"


def _clear_refs() -> str | None:
    """Reset the process VmHWM; return None on success, or why it failed."""
    if not sys.platform.startswith("linux"):
        return f"{_CLEAR_REFS} exists only on Linux"
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError as exc:
        return f"writing 5 to {_CLEAR_REFS} failed: {exc.strerror or exc}"
    return None


def _device_stats(device: Any) -> dict | None:
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - an unimplemented stats call is "no stats", not a failure
        return None
    return dict(stats) if isinstance(stats, Mapping) else None


def reset_peak(device: Any = None) -> ResetResult:
    """Reset the memory peak of ``device`` (default: every addressable device) with the best method available.

    See the module docstring for the methods. On CPU the reset is process-wide (``VmHWM``), so it applies to
    every CPU device at once. After a ``baseline`` reset, :func:`allocator_stats` reports
    ``peak_since_reset_bytes`` as exact when the peak rose and as an upper bound when it did not.

    Args:
      device: a ``jax.Device``, a device id, or None for all addressable devices.

    Returns:
      :class:`ResetResult` naming the method that ran.

    Raises:
      ValueError: no device with that id.
    """
    devices = _resolve(device)
    detail_parts, method_used, peaks = [], set(), {}
    cpu_cleared: str | None | bool = False  # False = not tried yet
    for dev in devices:
        stats = _device_stats(dev)
        native, method, unavailable = _native_reset(dev), "native", ""
        if not native and stats is not None:
            native, method, unavailable = _pjrt_reset(dev)
        now = time.time()
        if native:
            after = _device_stats(dev) or {}
            peak = after.get("peak_bytes_in_use")
            entry = Reset(method, peak if isinstance(peak, int) and peak >= 0 else None, now)
            detail = native
        elif stats is None:  # CPU: the process high-water mark
            if cpu_cleared is False:
                cpu_cleared = _clear_refs()
            hwm = process_memory().hwm_bytes
            if cpu_cleared is None:
                entry, detail = Reset("clear_refs", hwm, now), f"wrote 5 to {_CLEAR_REFS} (VmHWM reset)"
            elif hwm is not None:
                entry, detail = Reset("baseline", hwm, now), f"baseline on VmHWM ({cpu_cleared})"
            else:
                entry, detail = Reset("none", None, now), f"no peak to reset ({cpu_cleared}; no {_STATUS})"
        else:
            peak = stats.get("peak_bytes_in_use")
            if isinstance(peak, int) and peak >= 0:
                entry = Reset("baseline", peak, now)
                detail = f"baseline on peak_bytes_in_use (no reset: {unavailable})"
            else:
                entry, detail = Reset("none", None, now), "memory_stats() reports no peak_bytes_in_use"
        # VmHWM is process-wide: every CPU device was reset with it
        record([dev, *(_process_cpu_devices(dev) if entry.method == "clear_refs" else ())], entry)
        method_used.add(entry.method)
        peaks[str(dev)] = entry.peak_at_reset
        if detail not in detail_parts:
            detail_parts.append(detail)
    method = method_used.pop() if len(method_used) == 1 else "mixed:" + ",".join(sorted(method_used))
    return ResetResult(method, tuple(str(d) for d in devices), "; ".join(detail_parts), peaks)


def _process_cpu_devices(dev: Any) -> list[Any]:
    """The other CPU devices of this process (they share its VmHWM); none for a non-JAX device object."""
    jax = sys.modules.get("jax")
    if jax is None or type(dev).__module__.split(".")[0] not in ("jaxlib", "jax"):
        return []
    try:
        return [d for d in jax.local_devices(backend=dev.platform) if d is not dev]
    except Exception:  # noqa: BLE001 - only bookkeeping; the reset itself already happened
        return []


def _peak_since_reset(dev: Any, current_peak: int | None) -> tuple[int | None, bool | None, str | None, str]:
    entry = recorded(dev)
    if entry is None:
        return None, None, None, "no reset_peak() yet"
    if current_peak is None:
        return None, None, entry.method, "the current peak is not reported"
    if entry.method in _REAL_RESETS:
        return current_peak, True, entry.method, f"peak after a {entry.method} reset"
    if entry.method == "baseline" and entry.peak_at_reset is not None:
        if current_peak > entry.peak_at_reset:
            return current_peak, True, "baseline", "peak rose after the baseline reset: exact"
        return current_peak, False, "baseline", ("peak unchanged since the baseline reset: the peak since reset "
                                                 "is at most this (lifetime peak)")
    return None, None, entry.method, "no peak was reported at reset time"


#: :attr:`ResetResult.detail` of a reset :func:`last_reset` found in the process's record.
RECORDED_RESET = "reset_peak() in this process (memory.probe resets the peak too)"


def last_reset(device: Any) -> ResetResult | None:
    """The latest :func:`reset_peak` of ``device`` in this process, whoever called it (a panel, a probe, your
    code), as a :class:`ResetResult` whose ``detail`` is :data:`RECORDED_RESET`; None before any."""
    entry = recorded(device)
    if entry is None:
        return None
    return ResetResult(entry.method, (str(device),), RECORDED_RESET, {str(device): entry.peak_at_reset}, entry.time)


def _peak_at_reset(dev: Any) -> int | None:
    return getattr(recorded(dev), "peak_at_reset", None)


# -- reading ---------------------------------------------------------------------------------------------
def _resolve(device: Any) -> list[Any]:
    import jax

    if device is None:
        return list(jax.local_devices())
    from xlakit._units import is_int

    if is_int(device):  # np.int64(0) from an array of ids is an id too
        device = int(device)
        for d in jax.devices():
            if d.id == device:
                return [d]
        raise ValueError(f"no device with id {device}; devices: {[d.id for d in jax.devices()]}")
    if not hasattr(device, "memory_stats"):
        raise TypeError(f"expected a jax.Device, a device id or None, got {type(device).__name__}")
    return [device]


def _one(dev: Any) -> AllocatorStats:
    stats = _device_stats(dev)
    name, dev_id, platform = str(dev), int(getattr(dev, "id", 0)), str(getattr(dev, "platform", "?"))
    if stats is not None:
        parsed = parse_memory_stats(stats, device=name, device_id=dev_id, platform=platform)
        peak, exact, method, why = _peak_since_reset(dev, parsed.peak_bytes_in_use)
        sources = {**parsed.sources, "peak_since_reset_bytes": f"peak_bytes_in_use vs. reset: {why}"}
        return dataclasses.replace(parsed, peak_since_reset_bytes=peak, peak_since_reset_exact=exact,
                                   reset_method=method, sources=sources, peak_at_reset_bytes=_peak_at_reset(dev))
    from xlakit.memory.live import live_bytes

    proc = process_memory()
    sources = {k: f"not reported on {platform} (Device.memory_stats() is None)" for k in STATS_KEYS}
    sources["bytes_in_use"] = ("sum of live jax.Array shard bytes in this device's default memory "
                               "(jax.live_arrays(); exact array bytes, XLA temporaries not included)")
    sources["process_rss_bytes"] = f"VmRSS from {_STATUS} (whole process)" if proc.rss_bytes is not None \
        else proc.source
    sources["process_hwm_bytes"] = f"VmHWM from {_STATUS} (whole process)" if proc.hwm_bytes is not None \
        else proc.source
    peak, exact, method, why = _peak_since_reset(dev, proc.hwm_bytes)
    sources["peak_since_reset_bytes"] = f"VmHWM vs. reset: {why}"
    return AllocatorStats(device=name, device_id=dev_id, platform=platform,
                          bytes_in_use=live_bytes(dev_id, backend=platform if platform != "?" else None),
                          process_rss_bytes=proc.rss_bytes, process_hwm_bytes=proc.hwm_bytes,
                          peak_since_reset_bytes=peak, peak_since_reset_exact=exact, reset_method=method,
                          sources=sources, peak_at_reset_bytes=_peak_at_reset(dev))


def allocator_stats(device: Any = None) -> AllocatorStats | AllocatorStatsList:
    """Memory numbers of a device, or of every addressable device.

    Args:
      device: a ``jax.Device`` (or any object with ``memory_stats()``, ``id`` and ``platform``), a device
        id, or None.

    Returns:
      :class:`AllocatorStats` for one device; for ``device=None`` an :class:`AllocatorStatsList` with one
      entry per addressable device (``jax.local_devices()``).

    Raises:
      ValueError: no device with that id. TypeError: ``device`` is not a device.
    """
    if device is None:
        return AllocatorStatsList(_one(d) for d in _resolve(None))
    return _one(_resolve(device)[0])
