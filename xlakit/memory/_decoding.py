"""Running the decoders and the attribution with Python's cyclic garbage collector paused.

Decoding a module and attributing its buffers make ~10^5 small objects (instructions, buffers, tuples) that
all stay alive; every few hundred allocations the collector would walk them again to find no garbage (a
quarter of ``peak()``'s time at 500 layers). None of them form cycles that need the collector, and it is
switched back on however the call ends.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["without_gc"]

T = TypeVar("T")


def without_gc(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with the garbage collector paused (left as it was when already paused)."""
    if not gc.isenabled():
        return fn(*args, **kwargs)
    gc.disable()
    try:
        return fn(*args, **kwargs)
    finally:
        gc.enable()
