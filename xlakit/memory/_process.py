"""The resident memory of this process from ``/proc/self/status`` (Linux): what the CPU allocator view and the
probe read where JAX reports no allocator numbers."""

from __future__ import annotations

import dataclasses
import sys

__all__ = ["ProcessMemory", "process_memory"]

_STATUS = "/proc/self/status"


@dataclasses.dataclass(frozen=True)
class ProcessMemory:
    """Resident memory of this process (bytes) from ``/proc/self/status``; None where not available."""

    rss_bytes: int | None
    hwm_bytes: int | None
    source: str


def process_memory() -> ProcessMemory:
    """``VmRSS`` (resident now) and ``VmHWM`` (resident high-water mark) of this process, in bytes.

    Source: ``/proc/self/status`` (kB x 1024). On systems without it both are None."""
    values: dict[str, int] = {}
    try:
        with open(_STATUS, encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return ProcessMemory(None, None, f"{_STATUS} not readable on {sys.platform}")
    return ProcessMemory(values.get("VmRSS"), values.get("VmHWM"), f"{_STATUS} (VmRSS, VmHWM)")
