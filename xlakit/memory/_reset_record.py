"""The process's record of peak resets: the last reset of each device, its method, when, and the peak it started
from. :func:`xlakit.memory.reset_peak` writes it whoever calls it (a panel's button, a probe, your code);
``allocator_stats`` reads the peak since that reset from it, and the allocator panel names the last reset."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["Reset", "record", "recorded"]


@dataclasses.dataclass(frozen=True)
class Reset:
    method: str
    peak_at_reset: int | None  # baseline: the peak then; clear_refs: VmHWM right after the reset
    time: float


_resets: dict[tuple[str, int], Reset] = {}
_lock = threading.Lock()


def _key(device: Any) -> tuple[str, int]:
    return (str(getattr(device, "platform", "?")), int(getattr(device, "id", 0)))


def record(devices: Iterable[Any], entry: Reset) -> None:
    """``entry`` is now the last reset of each of ``devices``."""
    with _lock:
        for device in devices:
            _resets[_key(device)] = entry


def recorded(device: Any) -> Reset | None:
    """The last reset of ``device`` in this process, or None before any."""
    with _lock:
        return _resets.get(_key(device))
