"""How :func:`xlakit.memory.max_batch` searches, and what it says it compiled (``MaxBatch.notes``).

XLA's footprint is not monotonic in the batch size: its layouts and tiles favour multiples of 8, 16, 128...
(f32 (n, 1024) ``cumsum(sin(a))`` on CPU: 50.3 MB at 4000 rows, 65.7 MB at 4001, 50.5 MB at 4016, 51.4 MB at
4096, and every multiple of 16 fits 60 MB up to 4768). So the search has three passes, each run once:

1. from ``lo``: doubling until a size does not fit (or ``hi`` is reached), then halving the gap, to the answer
   ``a``: ``a`` fits and ``a + 1`` does not;
2. the *round* sizes above ``a`` (:func:`round_sizes`: the next multiple of 8, 16, ..., 256 and the next power
   of two, within ``2a``, at most ``hi``; seven at most) — or, where ``lo`` itself does not fit, the round sizes
   above ``lo`` and ``hi``: eight at most;
3. where one of those fits, above the largest that fits, ``r``: with ``step`` the smallest power of two (8 to
   256) that divides a round size that fits (16 when 4016 fits: XLA's cheap sizes), halving the gap from ``r`` to
   the smallest multiple of ``step`` above it known not to fit, on multiples of ``step`` while one lies between,
   then on every size, so the answer ``b`` fits and ``b + 1`` does not. Where no such multiple is known, the one
   above the smallest larger size that does not fit (or ``2r``) is compiled first, doubling while it fits. No
   round sizes are checked again.

Pass 3 costs one program per halving: at most ``ceil(log2 g)`` for a gap ``g``, whatever the step (11 programs
from 4096 to 6000 in steps of 16), plus the doubling where it is needed, plus the sizes passed over below one
that cannot be made (:data:`STEPS_DOWN` at most each).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from xlakit.memory._display import fmt_bytes

#: The smallest power-of-two step whose multiples :func:`round_sizes` checks, and the largest.
ROUND_STEPS = (8, 256)
STEPS_DOWN = 64  # sizes tried below one that cannot be made (a sharding over up to 64 devices)
SHOWN = 8  # sizes a note lists before "and N more"


def round_sizes(n: int, limit: int) -> list[int]:
    """The "round" batch sizes above ``n`` that XLA may lay out in less memory than ``n + 1`` (its layouts and
    tiles favour multiples of 8, 16, 128...: f32 (n, 1024) cumsum needs 65.7 MB at 4001 rows, 50.5 MB at 4016):
    the next multiple of 8, 16, 32, ..., 256 above ``n`` and the next power of two, all in ``(n, 2n]``, at most
    ``limit``. Seven sizes at most, whatever ``n``."""
    out = {1 << n.bit_length()}  # the next power of two above n
    step = ROUND_STEPS[0]
    while step <= min(ROUND_STEPS[1], 2 * n):
        out.add((n // step + 1) * step)
        step *= 2
    return sorted(s for s in out if n < s <= 2 * n and s <= limit)


def listed(sizes: list[Any], shown: int = SHOWN) -> str:
    """``"4001, 4008, 4016"``; past ``shown`` items, the first ones and how many more."""
    more = f" and {len(sizes) - shown} more" if len(sizes) > shown else ""
    return ", ".join(map(str, sizes[:shown])) + more


class Search:
    """The sizes one :func:`~xlakit.memory.max_batch` call compiled (``tried``: size -> row with ``fits``), those
    whose program could not be made (``unbuilt``: size -> the error), and the moves of the search over them.
    ``row(fn, make_args, batch, cache, probe)`` compiles one size (``xlakit.memory.sweep._row``)."""

    def __init__(self, row: Callable[..., dict[str, Any]], fn: Any, make_args: Any, budget_bytes: int, cache: Any,
                 limit: int) -> None:
        self.row, self.fn, self.make_args, self.cache = row, fn, make_args, cache
        self.budget_bytes, self.limit = budget_bytes, limit
        self.tried: dict[int, dict[str, Any]] = {}
        self.unbuilt: dict[int, str] = {}  # a sharding that does not split the rows, a make_args that raises

    def fits(self, size: int) -> bool:
        return bool(self.tried[size]["fits"])

    def misses(self, size: int) -> bool:
        """``size`` was compiled and does not fit."""
        return size in self.tried and not self.fits(size)

    def built(self, b: int, floor: int) -> int | None:
        """The largest size in ``(floor, b]`` whose program can be made and compiled (its row in ``tried``),
        at most :data:`STEPS_DOWN` sizes down: over 4 devices a batch sharded by rows is made of multiples of 4
        only, as the user's own run is."""
        for size in range(b, max(floor, b - STEPS_DOWN), -1):
            if size in self.tried:
                return size
            if size in self.unbuilt:
                continue
            try:
                row = self.row(self.fn, self.make_args, size, self.cache, False)
            except Exception as exc:  # noqa: BLE001 - make_args(size) or its program cannot be made: skip the size
                self.unbuilt[size] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                continue
            row["fits"] = max(row["total_bytes"], row["peak_bytes"]) <= self.budget_bytes
            self.tried[size] = row
            return size
        return None

    def climb(self, start: int, good: int | None) -> tuple[int | None, int | None]:
        """``(good, bad)`` doubling from ``start`` until a size does not fit (``bad``) or ``limit`` is reached
        (``bad`` None); ``good``: the largest size that fit on the way (or the ``good`` given)."""
        b = start
        while True:
            size = self.built(b, good if good is not None else start - 1)
            if size is not None and not self.fits(size):
                return good, size
            good = size if size is not None else good
            if b >= self.limit:
                return good, None
            b = min(b * 2, self.limit)

    def bisect(self, good: int, bad: int, step: int = 1) -> int:
        """The largest size in ``[good, bad)`` that fits, such that the next size up does not fit or cannot be
        made (``good`` fits, ``bad`` does not): halving the gap on ``good`` plus multiples of ``step`` while one
        lies between, then on every size."""
        low = good
        for stride in sorted({step, 1}, reverse=True):
            while (between := (bad - low - 1) // stride) >= 1:
                mid = low + stride * ((between + 1) // 2)
                size = self.built(mid, low)
                if size is None or self.fits(size):
                    good, low = (size or good), mid
                else:
                    bad = size
        return good

    def check(self, sizes: Iterable[int]) -> None:
        """Compile each of ``sizes`` not tried yet (no stepping down)."""
        for size in sorted({s for s in sizes if s not in self.tried and s not in self.unbuilt}):
            self.built(size, size - 1)

    def above(self, top: int, step: int) -> int:
        """Pass 3 (module docstring): the answer at or above ``top``, a size that fits."""
        if top >= self.limit:
            return top
        over = [s for s in self.tried if s > top and not self.fits(s)]
        bad = min((s for s in over if s % step == 0), default=None)
        good: int | None = top
        if bad is None:  # no multiple of step above top known not to fit: the next one above a size that does not
            start = -(-min(over) // step) * step if over else 2 * top
            good, bad = self.climb(min(start, self.limit), top)
        good = top if good is None else good  # climb keeps the good it is given: never None here
        return self.bisect(good, bad, step) if bad is not None else good


@dataclasses.dataclass
class Passes:
    """What passes 2 and 3 did (module docstring), for the notes: ``first``, pass 1's answer (None: its first
    size, ``base``, did not fit); ``rounds``, the round sizes above ``base`` (and ``hi``) that were compiled;
    ``top``, the largest of them that fits; ``step``; ``later``, the sizes pass 3 compiled."""

    first: int | None
    base: int
    rounds: list[int]
    with_hi: bool
    top: int | None = None
    step: int = 1
    later: list[int] = dataclasses.field(default_factory=list)


def search(found: Search, lo: int, hi: int | None) -> tuple[int | None, Passes]:
    """The three passes of the module docstring: the answer (None: nothing tried fits) and what was done."""
    good, bad = found.climb(lo, None)
    if good is not None and bad is not None:
        good = found.bisect(good, bad)
    base = good if good is not None else (bad if bad is not None else lo)
    with_hi = good is None and hi is not None and hi > base and hi not in round_sizes(base, found.limit)
    rounds = [*round_sizes(base, found.limit), *([hi] if with_hi and hi is not None else [])]
    found.check(rounds)
    passes = Passes(good, base, [s for s in rounds if s in found.tried], with_hi)
    fitting = [s for s in passes.rounds if found.fits(s)]
    if fitting:
        known = set(found.tried)
        passes.top = max(fitting)
        passes.step = min(min(s & -s, ROUND_STEPS[1]) for s in fitting)  # 16 for 4016, 256 for 4096
        good = found.above(passes.top, passes.step)
        passes.later = sorted(set(found.tried) - known)
    return good, passes


def fit_words(found: Search, sizes: list[int]) -> str:
    """``"4008 (does not fit), 4016 (fits)"``: each size and whether it fits, the first :data:`SHOWN`."""
    return listed([f"{s} ({'fits' if found.fits(s) else 'does not fit'})" for s in sizes])


def _next_misses(found: Search, size: int) -> str:
    return f" and {size + 1} does not" if found.misses(size + 1) else ""


def _needs(found: Search, *sizes: int) -> str:
    """``"4016 needs 48.1 MiB, 4008 needs 62.7 MiB"``, in bytes where the rounded figures are the same."""
    totals = [int(found.tried[s]["total_bytes"]) for s in sizes]
    shown = [fmt_bytes(t) for t in totals]
    shown = shown if len(set(shown)) == len(shown) else [f"{t:,} B" for t in totals]
    return ", ".join(f"{s} needs {t}" for s, t in zip(sizes, shown, strict=True))


def notes(found: Search, passes: Passes, good: int | None, lo: int, hi: int | None) -> tuple[str, ...]:
    """What :func:`~xlakit.memory.max_batch` says beside its answer: every size compiled past pass 1, each once,
    a footprint that drops, sizes that could not be made."""
    out: list[str] = []
    base = passes.base
    if passes.rounds:
        if passes.first is not None:
            head = f"{base} fits{_next_misses(found, base)}"
        elif base == lo:
            head = f"lo={lo} does not fit" if base in found.tried else f"lo={lo} could not be made"
        else:
            head = f"{base}, the first size from lo={lo} that could be made, does not fit"
        also = f", and hi={hi}" if passes.with_hi else ""
        out.append(f"{head}; sizes above {base} that XLA may lay out in less memory were checked too (the next "
                   f"multiples of 8 to 256 and the next power of two, up to twice {base}{also}): "
                   f"{fit_words(found, passes.rounds)}")
    top = passes.top
    if top is not None and top >= found.limit:
        out.append(f"{top}, the largest size searched ({'hi' if hi is not None else '2**20'}), fits: the answer")
    elif top is not None and good is not None:
        tried = f": {fit_words(found, passes.later)}" if passes.later else " (all tried already)"
        multiples = f", multiples of {passes.step} first" if passes.step > 1 else ""
        out.append(f"{top} is the largest of those that fits, so sizes above it were tried too{multiples}{tried}; "
                   f"the answer: {good} fits{_next_misses(found, good)}")
    sizes = sorted(found.tried)
    total = {s: found.tried[s]["total_bytes"] for s in sizes}
    drops = [(total[a] - total[b], a, b) for a, b in zip(sizes, sizes[1:], strict=False) if total[b] < total[a]]
    if drops:
        _, a, b = max(drops)
        where = f"above {good} " if good is not None else ""
        out.append(f"the footprint is not monotonic in the batch size ({_needs(found, b, a)}: XLA lays some sizes "
                   f"out in less memory): a size {where}that was not tried may still fit; sweep() around it to see")
    if found.unbuilt:
        sizes = sorted(found.unbuilt)
        out.append(f"sizes {listed(sizes, 6)} could not be made ({found.unbuilt[sizes[0]]}); the answer is the "
                   "largest size that could be made and fits")
    return tuple(out)
