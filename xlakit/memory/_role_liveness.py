"""Live bytes per role at every program step, each byte charged once: the liveness of an attribution in the
user's terms (residual, recomputed, optimizer state ...) rather than XLA's buffer kinds.

Charging rule (the same at every step, so the peak step's split equals :meth:`xlakit.memory.Peak.by`
``("role")``): within one allocation, buffers live at once that share bytes (an in-place update, a value and
its alias) are charged largest first, each only for the bytes no larger one already covers; a buffer with no
allocation is charged in full. The charges at a step sum to the bytes occupied there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["charge", "role_columns"]


def charge(sizes: Sequence[int], allocs: Sequence[int | None], offsets: Sequence[int | None]) -> list[int]:
    """Bytes charged to each of a set of buffers live at one step (see the module docstring): ``sizes`` in
    bytes, ``allocs`` allocation indices (None: unplaced), ``offsets`` byte offsets in the allocation. Ties in
    size go to the earlier buffer."""
    out = [0] * len(sizes)
    by_alloc: dict[int, list[int]] = {}
    for i, (a, o) in enumerate(zip(allocs, offsets, strict=True)):
        if a is None or o is None:
            out[i] = sizes[i]
        else:
            by_alloc.setdefault(a, []).append(i)
    for members in by_alloc.values():
        for i, c in _charge_one(members, sizes, offsets).items():
            out[i] = c
    return out


def _charge_one(members: list[int], sizes: Sequence[int], offsets: Sequence[Any]) -> dict[int, int]:
    """Buffer index -> bytes charged, for the buffers ``members`` (indices into ``sizes``/``offsets``) of one
    allocation live at once."""
    spans = sorted((offsets[i], offsets[i] + sizes[i]) for i in members)
    if all(spans[k][1] <= spans[k + 1][0] for k in range(len(spans) - 1)):  # disjoint: the common case
        return {i: sizes[i] for i in members}
    out: dict[int, int] = {}
    covered: list[tuple[int, int]] = []  # disjoint, sorted
    for i in sorted(members, key=lambda j: (-sizes[j], j)):
        lo, hi = offsets[i], offsets[i] + sizes[i]
        out[i] = sizes[i] - sum(max(0, min(hi, b) - max(lo, a)) for a, b in covered)
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*covered, (lo, hi)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        covered = merged
    return out


def role_columns(buffers: Any, steps: int, roles: Sequence[str]) -> dict[str, list[int]]:
    """``{role: [bytes at step 0, 1, ...]}`` for every role in ``roles`` (and any other role the frame holds),
    from an attribution's buffers frame (columns ``bytes``, ``role``, ``allocation``, ``offset``, ``start``,
    ``end``; a buffer with ``start`` < 0 has no place in the schedule and is left out). Only the allocations
    whose live set changes at a step are charged anew, so the cost is that of the schedule sweep itself."""
    sizes = [int(v) for v in buffers["bytes"]]
    allocs = [None if v is None or str(v) == "<NA>" else int(v) for v in buffers["allocation"]]
    offsets = [None if v is None or str(v) == "<NA>" else int(v) for v in buffers["offset"]]
    role_of = [str(r) for r in buffers["role"]]
    names = list(dict.fromkeys([*roles, *role_of]))
    cols = {r: [0] * steps for r in names}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for i, (s, e) in enumerate(zip(buffers["start"], buffers["end"], strict=True)):
        s, e = int(s), int(e)
        if 0 <= s <= e < steps:
            starts.setdefault(s, []).append(i)
            ends.setdefault(e + 1, []).append(i)
    active: dict[Any, set[int]] = {}
    held: dict[Any, dict[str, int]] = {}  # allocation (or ("unplaced", i)) -> bytes charged per role now
    total = dict.fromkeys(names, 0)
    for step in range(steps):
        touched = set()
        for i in ends.get(step, ()):
            key = allocs[i] if allocs[i] is not None and offsets[i] is not None else ("unplaced", i)
            active[key].discard(i)
            touched.add(key)
        for i in starts.get(step, ()):
            key = allocs[i] if allocs[i] is not None and offsets[i] is not None else ("unplaced", i)
            active.setdefault(key, set()).add(i)
            touched.add(key)
        for key in touched:
            members = sorted(active[key])
            charged = ({i: sizes[i] for i in members} if isinstance(key, tuple)
                       else _charge_one(members, sizes, offsets))
            now: dict[str, int] = {}
            for i, c in charged.items():
                now[role_of[i]] = now.get(role_of[i], 0) + c
            before = held.get(key, {})
            for r in set(before) | set(now):
                total[r] += now.get(r, 0) - before.get(r, 0)
            held[key] = now
        for r in names:
            cols[r][step] = total[r]
    return cols
