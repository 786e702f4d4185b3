"""Weight budget: how many bytes of an arena can hold weights once the largest program's scratch is reserved.

The seed system's rule (ReactantServer.jl): probe each program's scratch (:func:`xlakit.memory.probe`), then

    pool = min(fraction * arena, (1 - wiggle) * arena - max_scratch)

``fraction`` caps the weights' share of the arena; ``wiggle`` keeps a margin for fragmentation and
allocator overhead; ``max_scratch`` is the largest scratch of any program that may run. Bytes already pinned
(weights loaded before) come off the pool. A program loaded later is probed and the budget re-resolved with
:meth:`Budget.update`, which only ever raises the scratch ceiling: a budget never grows back because one
program turned out smaller.

Pure arithmetic: no JAX import.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from xlakit._units import _shown, check_int, check_number, is_int
from xlakit.memory._display import fmt_bytes, html_table

__all__ = ["Budget", "weight_budget", "DEFAULT_FRACTION", "DEFAULT_WIGGLE"]

DEFAULT_FRACTION = 0.9
DEFAULT_WIGGLE = 0.05


@dataclasses.dataclass(frozen=True)
class Budget:
    """A resolved weight budget (all bytes, ``int``).

    arena_bytes: the memory the budget divides (e.g. a device's ``bytes_limit``). scratch_bytes: the scratch
    ceiling (largest probed scratch). fraction, wiggle: the rule's parameters. pinned_bytes: bytes already
    holding weights. pool_bytes: the rule's pool, floored to whole bytes (may be <= 0). available_bytes:
    ``pool_bytes - pinned_bytes`` (negative = over by that much). overcommitted: ``pool_bytes <= 0`` or
    ``pinned_bytes > pool_bytes``. limited_by: ``"fraction"`` or ``"scratch"`` — which term set the pool.
    """

    arena_bytes: int
    scratch_bytes: int
    fraction: float
    wiggle: float
    pinned_bytes: int
    pool_bytes: int
    available_bytes: int
    overcommitted: bool
    limited_by: str

    def update(self, new_scratch: int | Iterable[int]) -> Budget:
        """A new Budget with the scratch ceiling raised to ``new_scratch`` if larger (never lowered).

        Raises:
          ValueError: a negative scratch.
        """
        scratch = _max_scratch(new_scratch)
        return weight_budget(self.arena_bytes, max(scratch, self.scratch_bytes), fraction=self.fraction,
                             wiggle=self.wiggle, pinned_bytes=self.pinned_bytes)

    def with_pinned(self, pinned_bytes: int) -> Budget:
        """A new Budget with ``pinned_bytes`` replaced (weights loaded or unloaded)."""
        return weight_budget(self.arena_bytes, self.scratch_bytes, fraction=self.fraction, wiggle=self.wiggle,
                             pinned_bytes=pinned_bytes)

    def fits(self, nbytes: int) -> bool:
        """True when ``nbytes`` more weights fit in the available pool.

        Raises:
          TypeError / ValueError: ``nbytes`` is not an int from 0 to 2**63-1.
        """
        nbytes = check_int(nbytes, "nbytes")  # checked even when overcommitted: a wrong value is never ignored
        return not self.overcommitted and nbytes <= self.available_bytes

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_frame(self):
        """One-row ``pandas.DataFrame`` of :meth:`to_dict`."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])

    def __repr__(self) -> str:
        state = "OVERCOMMITTED" if self.overcommitted else f"{fmt_bytes(self.available_bytes)} available"
        return (f"Budget(pool {fmt_bytes(self.pool_bytes)} of arena {fmt_bytes(self.arena_bytes)}, limited by "
                f"{self.limited_by}; scratch {fmt_bytes(self.scratch_bytes)}, pinned "
                f"{fmt_bytes(self.pinned_bytes)}; {state})")

    def _repr_html_(self) -> str:
        # each number with what it is: "wiggle 0.05" and "limited by fraction" said nothing on their own
        limit = ("fraction: the weights' share cap is the smaller term" if self.limited_by == "fraction" else
                 "scratch: the arena less the margin and the largest scratch is the smaller term")
        rows = [("arena", f"{fmt_bytes(self.arena_bytes)}: the device memory the rule divides"),
                ("scratch ceiling", f"{fmt_bytes(self.scratch_bytes)}: the largest scratch a program probed needs"),
                ("fraction", f"{self.fraction}: the weights' share of the arena at most"),
                ("wiggle", f"{self.wiggle}: a share of the arena kept free for fragmentation"),
                ("pool", f"{fmt_bytes(self.pool_bytes)} = min(fraction × arena, (1 − wiggle) × arena − scratch)"),
                ("limited by", limit), ("pinned", f"{fmt_bytes(self.pinned_bytes)}: weights already loaded"),
                ("available", f"{fmt_bytes(self.available_bytes)} = pool − pinned"),
                ("overcommitted", "yes: more pinned than the pool holds" if self.overcommitted else "no")]
        return html_table(rows, title="Weight budget")


def _max_scratch(scratch: int | Iterable[int]) -> int:
    """The largest of ``scratch`` (bytes: an int, a NumPy integer, or an iterable of them), as a Python int."""
    # None or a string is not an iterable of byte counts: said here, not as "'NoneType' object is not iterable"
    if not (is_int(scratch) or isinstance(scratch, Iterable)) or isinstance(scratch, (str, bytes)):
        raise TypeError(f"scratch_bytes must be an int number of bytes or an iterable of them, got "
                        f"{type(scratch).__name__} {_shown(scratch)}")
    values: list[Any] = [scratch] if is_int(scratch) else list(scratch)  # type: ignore[arg-type]
    for v in values:
        if not is_int(v):
            raise TypeError(f"scratch_bytes must be bytes as int (or ints), got {type(v).__name__} {_shown(v)}")
        if v < 0:
            raise ValueError(f"scratch bytes must be >= 0, got {v}")
    return max((check_int(v, "scratch_bytes") for v in values), default=0)


def weight_budget(arena_bytes: int, scratch_bytes: int | Iterable[int], fraction: float = DEFAULT_FRACTION,
                  wiggle: float = DEFAULT_WIGGLE, pinned_bytes: int = 0) -> Budget:
    """Resolve ``pool = min(fraction * arena, (1 - wiggle) * arena - max_scratch)`` minus pinned bytes.

    Args:
      arena_bytes: bytes the budget divides (> 0), e.g. ``allocator_stats(d).bytes_limit``. Every byte count
        here is an int or a NumPy integer (not a bool).
      scratch_bytes: the largest scratch of the programs that may run, or an iterable of scratches (the max
        is taken), e.g. ``[probe(f, x).scratch_bytes for f in programs]``.
      fraction: the weights' largest share of the arena, in (0, 1]. Default 0.9.
      wiggle: the margin kept free, in [0, 1). Default 0.05.
      pinned_bytes: bytes already holding weights (>= 0).

    Returns:
      :class:`Budget`; ``overcommitted`` is set when the pool is <= 0 or the pinned bytes exceed it.

    Raises:
      ValueError: a value out of range, a byte count over 2**63-1 and a NaN included (the message says which).
        TypeError: a byte count that is not int, a ``fraction`` or ``wiggle`` that is not a number.
    """
    for label, value in (("arena_bytes", arena_bytes), ("pinned_bytes", pinned_bytes)):
        if not is_int(value):  # an int or a NumPy integer (np.int64 from an array's nbytes); not a bool
            raise TypeError(f"{label} must be an int number of bytes, got {type(value).__name__}")
    if arena_bytes <= 0:
        raise ValueError(f"arena_bytes must be > 0, got {arena_bytes}")
    if pinned_bytes < 0:
        raise ValueError(f"pinned_bytes must be >= 0, got {pinned_bytes}")
    # 400 digits: "int too large to convert to float" below, not named; a NumPy integer becomes a Python int
    arena_bytes = check_int(arena_bytes, "arena_bytes", minimum=1)
    pinned_bytes = check_int(pinned_bytes, "pinned_bytes")
    fraction = check_number(fraction, "fraction", 0, 1, low_open=True)  # '0.9' or None: named, not a bare TypeError
    wiggle = check_number(wiggle, "wiggle", 0, 1, high_open=True)
    scratch = _max_scratch(scratch_bytes)
    by_fraction = math.floor(fraction * arena_bytes)
    by_scratch = math.floor((1 - wiggle) * arena_bytes) - scratch
    pool = min(by_fraction, by_scratch)
    return Budget(arena_bytes=arena_bytes, scratch_bytes=scratch, fraction=fraction, wiggle=wiggle,
                  pinned_bytes=pinned_bytes, pool_bytes=pool, available_bytes=pool - pinned_bytes,
                  overcommitted=pool <= 0 or pinned_bytes > pool,
                  limited_by="fraction" if by_fraction <= by_scratch else "scratch")
