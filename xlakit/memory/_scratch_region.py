"""The scratch region a TPU reserves for a program's run: the one rule :func:`xlakit.memory.peak` and
:func:`xlakit.memory.probe` share (platforms with ``scratch_in_reserved_region`` in :mod:`xlakit._jax.platforms`).

Measured on a TPU v5e (jax 0.10.2, libtpu cl/933746096; ``docs/tpu/round10-probe-2026-12-06.log``): a run's
temporaries are not allocated from ``bytes_in_use`` but from one region the allocator reports as
``bytes_reserved``, as large as the buffer assignment's device temporary allocation rounded up to
:attr:`~xlakit._jax.platforms.Platform.reservation_granule` (exact to the byte for 4 programs from 2.7 MB to
1.08 GB). Where ``memory_analysis().temp_size_in_bytes`` is 0 no region is reserved at all, whatever device
temporaries the assignment lists (4 of 5 such programs; one reserved 115,712 B). XLA's ``peak_memory_in_bytes``
is not this: it was 3.7x what the chip held for a small transformer step and 1.4 % under it for a large one.
"""

from __future__ import annotations

__all__ = ["region_temp"]


def region_temp(temp_size_in_bytes: int | None, assignment_temp_bytes: int | None) -> tuple[int | None, str]:
    """``(bytes, source)`` of the device temporaries the region is sized for, before the granule: 0 where
    ``temp_size_in_bytes`` (``memory_analysis()``) is 0; else the assignment's device temporary allocation
    (``BufferAssignment.totals()["temp_bytes"]``) where known; else ``temp_size_in_bytes``; else None."""
    if temp_size_in_bytes == 0:
        return 0, "XLA reserves no scratch region for this program: temp_size_in_bytes is 0"
    if isinstance(assignment_temp_bytes, int) and assignment_temp_bytes >= 0:
        return assignment_temp_bytes, "XLA's buffer assignment (device temporary allocation)"
    if isinstance(temp_size_in_bytes, int) and temp_size_in_bytes > 0:
        return temp_size_in_bytes, "memory_analysis().temp_size_in_bytes (no buffer assignment in this process)"
    return None, "not reported"
