"""Who is charged for each byte an allocation holds: the rule behind every per-step and per-role figure of
the memory attribution, and the sweep that applies it at every program step in time linear in the program.

Rule: buffers live at once in the same allocation that share bytes (an in-place update; a donated argument
and the result written into it; a buffer XLA reused after another one died, where the reconstructed live
ranges overlap) are charged byte by byte: each byte goes to the live buffer that covers it and ranks first,
so a byte is charged once and the charges at a step sum to the bytes occupied there (the union of the live
byte ranges). Ranking: a buffer with priority first (the attribution gives it to a result written into a
donated argument, which takes the argument's bytes over once it is written), then the larger, then the
earlier. A buffer without a place in an allocation is charged in full.

Sweep: only buffers that overlap need the rule, so the live buffers of each allocation are kept as sorted,
disjoint *blocks* (connected groups of overlapping byte ranges). A buffer that starts in free bytes — the
common case — is one new block, found by bisection; only a block that gains or loses a member is charged anew,
so the cost is that of the blocks that change, not of every member of a large allocation at every step.
:func:`step_array` sweeps only the buffers that may share bytes with another live one: a buffer alone in its
allocation (an argument, most outputs), in none, or never live together with one whose bytes it overlaps is charged
in full while it lives, which numpy adds up at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

__all__ = ["charge", "charge_block", "step_totals", "step_array"]


def charge_block(members: Sequence[int], sizes: Sequence[int], offsets: Sequence[Any],
                 rank: Sequence[Any] | None = None) -> dict[int, int]:
    """Buffer index -> bytes charged, for ``members`` (indices into ``sizes``/``offsets``) of one allocation,
    live at once, by the rule above (``rank[i]``: sort key, lower ranks first; default larger then earlier)."""
    if len(members) == 1:
        return {members[0]: sizes[members[0]]}
    order = sorted(members, key=(lambda j: rank[j]) if rank is not None else (lambda j: (-sizes[j], j)))
    out: dict[int, int] = {}
    starts: list[int] = []  # covered bytes so far: disjoint [starts[k], ends[k]) sorted by start
    ends: list[int] = []
    for i in order:
        lo, hi = offsets[i], offsets[i] + sizes[i]
        k = bisect.bisect_right(ends, lo)  # the first covered range ending after lo
        j = k
        covered = 0
        new_lo, new_hi = lo, hi
        while j < len(starts) and starts[j] < hi:  # covered ranges overlapping [lo, hi): merged into one
            covered += min(hi, ends[j]) - max(lo, starts[j])
            new_lo, new_hi = min(new_lo, starts[j]), max(new_hi, ends[j])
            j += 1
        out[i] = sizes[i] - covered
        starts[k:j] = [new_lo]
        ends[k:j] = [new_hi]
    return out


def _blocks(members: list[int], sizes: Sequence[int], offsets: Sequence[Any]) -> list[tuple[int, int, list[int]]]:
    """``members`` grouped into connected blocks of overlapping byte ranges, sorted: (lo, hi, members)."""
    out: list[tuple[int, int, list[int]]] = []
    for i in sorted(members, key=lambda j: offsets[j]):
        lo, hi = offsets[i], offsets[i] + sizes[i]
        if out and lo < out[-1][1]:
            b_lo, b_hi, group = out[-1]
            group.append(i)
            out[-1] = (b_lo, max(b_hi, hi), group)
        else:
            out.append((lo, hi, [i]))
    return out


def charge(sizes: Sequence[int], allocs: Sequence[int | None], offsets: Sequence[int | None],
           priority: Sequence[bool] | None = None) -> list[int]:
    """Bytes charged to each of a set of buffers live at one step (see the module docstring): ``sizes`` in
    bytes, ``allocs`` allocation indices (None: unplaced), ``offsets`` byte offsets in the allocation,
    ``priority`` (optional) buffers ranked first. Ties in size go to the earlier buffer."""
    out = list(sizes)
    by_alloc: dict[int, list[int]] = {}
    for i, (a, o) in enumerate(zip(allocs, offsets, strict=True)):
        if a is not None and o is not None and sizes[i] > 0:
            by_alloc.setdefault(a, []).append(i)
    rank = _ranks(sizes, priority)
    for members in by_alloc.values():
        if len(members) == 1:  # most allocations hold one live buffer
            continue
        for _lo, _hi, group in _blocks(members, sizes, offsets):
            if len(group) > 1:
                for i, c in charge_block(group, sizes, offsets, rank).items():
                    out[i] = c
    return out


def _ranks(sizes: Sequence[int], priority: Sequence[bool] | None) -> list[tuple[int, int, int]]:
    first = priority if priority is not None else [False] * len(sizes)
    return [(0 if p else 1, -s, i) for i, (s, p) in enumerate(zip(sizes, first, strict=True))]


class _Allocation:
    """The live buffers of one allocation as disjoint blocks: their start offsets sorted in one list, and per
    live start: end, members, bytes charged per label. A block that ends leaves its start in the list (dead: not
    in ``blocks``) until a later block covers it or dead starts outnumber live ones, so ending a block moves no
    list; no dead start lies inside a live block, so the live block holding an offset is the nearest start at or
    before it."""

    __slots__ = ("los", "blocks")

    def __init__(self) -> None:
        self.los: list[int] = []
        self.blocks: dict[int, tuple[int, list[int], dict[int, int]]] = {}

    def compact(self) -> None:
        if len(self.los) > 2 * len(self.blocks) + 64:
            self.los = [lo for lo in self.los if lo in self.blocks]


def step_totals(steps: int, ranges: Sequence[tuple[int, int] | None], sizes: Sequence[int],
                allocs: Sequence[int | None], offsets: Sequence[int | None], labels: Sequence[int], n_labels: int,
                priority: Sequence[bool] | None = None) -> list[list[int]]:
    """Bytes charged per label at every step: ``out[label][step]``.

    Args:
      steps: number of program steps.
      ranges: per buffer, ``(first step, last step)`` of its live range, or None (never live).
      sizes, allocs, offsets: per buffer, bytes, allocation index (None: unplaced, charged in full) and byte
        offset in the allocation.
      labels: per buffer, a label in ``range(n_labels)`` (a role, an allocation kind) its charge counts to.
      priority: per buffer, ranked first (see the module docstring); default none.

    Cost: O(n log n) for n buffers, plus for a buffer that starts in the middle of its allocation's live blocks
    the move of one list's tail (C speed: ~1 µs per 10,000 blocks); only a block that gains or loses a member
    is charged anew.
    """
    rows = [totals for totals, count in _step_runs(steps, ranges, sizes, allocs, offsets, labels, n_labels, priority)
            for _ in range(count)]
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(n_labels)]


def _step_runs(steps: int, ranges: Sequence[tuple[int, int] | None], sizes: Sequence[int],
               allocs: Sequence[int | None], offsets: Sequence[int | None], labels: Sequence[int], n_labels: int,
               priority: Sequence[bool] | None = None) -> list[tuple[list[int], int]]:
    """:func:`step_totals` as runs of steps with the same totals, from step 0: ``(totals per label, steps)``. The
    totals change only where a buffer starts or ends, so only those steps are swept."""
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for i, r in enumerate(ranges):
        if r is not None and 0 <= r[0] <= r[1] < steps and sizes[i] > 0:
            starts.setdefault(r[0], []).append(i)
            ends.setdefault(r[1] + 1, []).append(i)
    rank = _ranks(sizes, priority)
    total = [0] * n_labels
    state: dict[int, _Allocation] = {}

    def charge_blocks(a: _Allocation, blocks: list[tuple[int, int, list[int]]]) -> list[int]:
        """Charge ``blocks`` and hold them live in ``a``; their starts."""
        for lo, hi, group in blocks:
            charged: dict[int, int] = {}
            for i, c in charge_block(group, sizes, offsets, rank).items():
                charged[labels[i]] = charged.get(labels[i], 0) + c
            for lab, c in charged.items():
                total[lab] += c
            a.blocks[lo] = (hi, group, charged)
        return [lo for lo, _hi, _group in blocks]

    def uncharge(a: _Allocation, lo: int) -> list[int]:
        """Drop the live block starting at ``lo`` (its start stays in ``a.los``, dead); its members."""
        _hi, group, charged = a.blocks.pop(lo)
        for lab, c in charged.items():
            total[lab] -= c
        return group

    events = sorted(step for step in {*starts, *ends} if step < steps)  # the steps where a buffer starts or ends
    runs: list[tuple[list[int], int]] = [([0] * n_labels, events[0] if events else steps)]  # (totals, steps)
    for step, upto in zip(events, [*events[1:], steps] if events else [], strict=True):
        for i in ends.get(step, ()):
            alloc, off = allocs[i], offsets[i]
            if alloc is None or off is None:
                total[labels[i]] -= sizes[i]
                continue
            a = state[alloc]
            k = bisect.bisect_right(a.los, off) - 1  # the live block holding i: the nearest start before it
            rest = uncharge(a, a.los[k])
            if len(rest) > 1:
                rest.remove(i)
                a.los[k:k + 1] = charge_blocks(a, _blocks(rest, sizes, offsets))
            else:
                a.compact()
        for i in starts.get(step, ()):
            alloc, off = allocs[i], offsets[i]
            if alloc is None or off is None:
                total[labels[i]] += sizes[i]
                continue
            a = state.get(alloc) or state.setdefault(alloc, _Allocation())
            lo, hi = off, off + sizes[i]
            los, blocks = a.los, a.blocks
            first = bisect.bisect_right(los, lo)
            if first and (los[first - 1] == lo or (los[first - 1] in blocks and blocks[los[first - 1]][0] > lo)):
                first -= 1  # a live block holding lo, or a dead start at lo itself
            last = first
            group = []
            while last < len(los) and los[last] < hi:  # starts inside [lo, hi): live blocks merge, dead ones go
                if los[last] in blocks:
                    group += uncharge(a, los[last])
                last += 1
            if not group:  # free bytes: a block of its own
                los[first:last] = [lo]
                blocks[lo] = (hi, [i], {labels[i]: sizes[i]})
                total[labels[i]] += sizes[i]
                continue
            group.append(i)
            los[first:last] = charge_blocks(a, _blocks(group, sizes, offsets))
        runs.append((total[:], upto - step))  # the totals hold until the next step where a buffer starts or ends
    return runs


_SMALL = 8  # allocations of up to this many buffers are checked pair by pair; larger ones are swept


def _sharing(placed: Any, starts: Any, ends: Any, sizes: Any, allocs: Any, offsets: Any) -> Any:
    """Which of the ``placed`` buffers may share bytes with another one live at the same step (the sweep decides
    their charges): those of an allocation holding more than :data:`_SMALL` of them, and in a smaller one those
    overlapping another in bytes and in steps. Any other buffer is charged in full whenever it lives (most of a
    small allocation's buffers: XLA reuses bytes for values that are not live together)."""
    import numpy as np

    shared = np.zeros(len(placed), dtype=bool)
    at = np.flatnonzero(placed)
    if not len(at):
        return shared
    order = at[np.lexsort((starts[at], allocs[at]))]  # by allocation, then by first step
    a = allocs[order]
    edges = np.flatnonzero(np.diff(a)) + 1  # where the next allocation starts (a is sorted)
    counts = np.diff(np.concatenate(([0], edges, [len(a)])))
    size = np.repeat(counts, counts)  # the number of placed buffers in each one's allocation
    shared[order[size > _SMALL]] = True
    small = (size > 1) & (size <= _SMALL)  # whole allocations: the pairs of one stay neighbours
    order, a = order[small], a[small]
    s, e, lo = starts[order], ends[order], offsets[order]
    hi = lo + sizes[order]
    for d in range(1, min(_SMALL, len(order))):  # every pair (i, i + d) of one small allocation
        i = np.arange(len(order) - d)
        j = i + d
        both = (a[i] == a[j]) & (s[j] <= e[i]) & (lo[i] < hi[j]) & (lo[j] < hi[i])
        shared[order[i[both]]] = True
        shared[order[j[both]]] = True
    return shared


def step_array(steps: int, starts: Any, ends: Any, sizes: Any, allocs: Any, offsets: Any, labels: Any,
               n_labels: int, priority: Any = None) -> Any:
    """:func:`step_totals` as a ``numpy`` array ``[label, step]`` (int64), from per-buffer numpy arrays: starts,
    ends (first and last step; a buffer with start < 0, start > end or end >= steps is never live), sizes, allocs
    and offsets (-1: unplaced, charged in full), labels, priority (bool, optional). The same numbers; only the
    buffers that may share bytes with another live one (:func:`_sharing`) go through the sweep."""
    import numpy as np

    starts, ends, sizes = (np.asarray(a, dtype=np.int64) for a in (starts, ends, sizes))
    allocs, offsets, labels = (np.asarray(a, dtype=np.int64) for a in (allocs, offsets, labels))
    live = (starts >= 0) & (starts <= ends) & (ends < steps) & (sizes > 0)
    placed = live & (allocs >= 0) & (offsets >= 0)
    shared = _sharing(placed, starts, ends, sizes, allocs, offsets)
    alone = live & ~shared
    width = steps + 1  # one step past the last, where every buffer has ended
    at = labels[alone] * width
    delta = (np.bincount(at + starts[alone], weights=sizes[alone], minlength=n_labels * width)
             - np.bincount(at + ends[alone] + 1, weights=sizes[alone], minlength=n_labels * width))
    # float64 holds these sums exactly below 2**53 bytes; the running totals are taken in int64
    out = np.cumsum(delta.astype(np.int64).reshape(n_labels, width), axis=1)[:, :steps]
    chosen = np.flatnonzero(shared)
    if len(chosen):
        first = priority[chosen].tolist() if priority is not None else None
        runs = _step_runs(steps, list(zip(starts[chosen].tolist(), ends[chosen].tolist(), strict=True)),
                          sizes[chosen].tolist(), allocs[chosen].tolist(), offsets[chosen].tolist(),
                          labels[chosen].tolist(), n_labels, first)
        totals = np.array([totals for totals, _count in runs], dtype=np.int64).reshape(len(runs), n_labels)
        out = out + np.repeat(totals, [count for _totals, count in runs], axis=0).T
    return out
