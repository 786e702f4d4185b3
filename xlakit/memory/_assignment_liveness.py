"""Liveness over program order of a decoded buffer assignment: from XLA's heap simulator trace when the proto
carries one, else reconstructed from the HLO module's schedule (see
:meth:`xlakit.memory.BufferAssignment.live_bytes_by_step` for the method and its caveats)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlakit.memory._assignment_types import Allocation, HeapEvent, LogicalBuffer, Slice, _Module

__all__ = ["trace_rows", "schedule_liveness"]

_SEQUENTIAL_CALLERS = ("while", "call", "conditional")


def _flatten(mod: _Module, comp_id: int, default: Sequence[int], seen: set[int]) -> list[int]:
    """Instruction ids in program order, as XLA's HloLiveRange flattens a schedule: the computations a
    while/call/conditional runs come right before the instruction itself (a while: condition, then body)."""
    out: list[int] = []
    seen.add(comp_id)
    for iid in mod.schedule.get(comp_id, default):
        ins = mod.instructions.get(iid)
        if ins is not None and ins.opcode in _SEQUENTIAL_CALLERS:
            called = list(reversed(ins.called)) if ins.opcode == "while" else list(ins.called)
            for cid in called:
                if cid in mod.schedule and cid not in seen and cid in mod.computations:
                    out.extend(_flatten(mod, cid, mod.computations[cid][1], seen))
        out.append(iid)
    return out


def _union_bytes(slices: Sequence[Slice]) -> int:
    total, cur_start, cur_end = 0, None, None
    for lo, hi in sorted((s.offset, s.offset + s.size) for s in slices):
        if cur_end is None or lo > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = lo, hi
        else:
            cur_end = max(cur_end, hi)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def trace_rows(logical_buffers: Sequence[LogicalBuffer],
               heap_traces: Sequence[tuple[int, Sequence[HeapEvent]]]) -> list[dict[str, Any]]:
    """One row per heap simulator event with the live bytes of its allocation (a shared buffer counted
    once, as XLA does); see :meth:`~xlakit.memory.BufferAssignment.live_bytes_by_step`."""
    sizes = {b.id: b.size for b in logical_buffers}
    names = {b.id: b.instruction for b in logical_buffers}
    rows: list[dict[str, Any]] = []
    for t, (alloc_index, events) in enumerate(heap_traces):
        live, owners, charged = 0, {}, {}
        for step, e in enumerate(events):
            if e.kind == "alloc":
                owners[e.buffer_id] = 1
                delta = charged[e.buffer_id] = sizes.get(e.buffer_id, 0)
            elif e.kind == "share_with":  # reuses the canonical buffer's bytes: no new memory unless alone
                canon = e.share_with if e.share_with is not None else e.buffer_id
                owners[canon] = owners.get(canon, 0) + 1
                delta = charged[e.buffer_id] = sizes.get(e.buffer_id, 0) if owners[canon] == 1 else 0
            else:
                delta = -charged.pop(e.buffer_id, 0)
            live += delta
            rows.append({"trace": t, "allocation": alloc_index, "step": step, "event": e.kind,
                         "buffer_id": e.buffer_id, "instruction": e.instruction or names.get(e.buffer_id),
                         "computation": e.computation, "delta_bytes": delta, "live_bytes": live})
    return rows


def schedule_liveness(mod: _Module, logical_buffers: Sequence[LogicalBuffer],
                      allocations: Sequence[Allocation],
                      aliases: Mapping[int, tuple[tuple[int | None, tuple[int, ...]], ...]],
                      ) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
    """(rows, buffer id -> (first step, last step)) from the entry schedule; see
    :meth:`~xlakit.memory.BufferAssignment.live_bytes_by_step`."""
    placed = {s.buffer.id: (a, s) for a in allocations for s in a.slices}
    _entry_name, entry_ids, root_id = mod.computations[mod.entry_id]
    order = _flatten(mod, mod.entry_id, entry_ids, set())
    step_of = {iid: s for s, iid in enumerate(order)}
    last = len(order) - 1
    # Instructions of computations not in the flat order (fusion bodies, reduce/sort regions) run during
    # the step of the instruction that calls them.
    comp_step: dict[int, int] = {}
    stack = [(iid, step_of[iid]) for iid in order]
    while stack:
        iid, s = stack.pop()
        ins = mod.instructions.get(iid)
        for cid in ins.called if ins else ():
            if cid not in comp_step and cid in mod.computations:
                comp_step[cid] = s
                stack.extend((child, s) for child in mod.computations[cid][1] if child not in step_of)

    def pos(iid: int | None) -> int | None:
        if iid is None:
            return None
        if iid in step_of:
            return step_of[iid]
        ins = mod.instructions.get(iid)
        return comp_step.get(ins.computation_id) if ins else None

    users: dict[int, list[int]] = {}
    for iid, ins in mod.instructions.items():
        for op in ins.operands:
            users.setdefault(op, []).append(iid)

    ranges: dict[int, tuple[int, int]] = {}
    for b in logical_buffers:
        alloc = placed.get(b.id, (None, None))[0]
        if alloc is None or alloc.is_thread_local:
            continue
        locations = [(b.instruction_id, b.shape_index), *aliases.get(b.id, ())]
        steps = [p for p in (pos(i) for i, _ in locations) if p is not None]
        if alloc.is_parameter or alloc.is_constant:
            ranges[b.id] = (0, last)
            continue
        if not steps:
            continue
        end = max(steps)
        for loc_iid, _ in locations:
            for user in users.get(loc_iid, ()) if loc_iid is not None else ():
                p = pos(user)
                if p is not None:
                    end = max(end, p)
            if loc_iid == root_id:
                end = last
        ranges[b.id] = (min(steps), end)

    # Sweep: at each step, the union of byte ranges of live slices, per allocation.
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for bid, (first, last_step) in ranges.items():
        starts.setdefault(first, []).append(bid)
        ends.setdefault(last_step + 1, []).append(bid)
    active: dict[int, set[int]] = {}
    occupied: dict[int, int] = {}
    alloc_by_index = {a.index: a for a in allocations}
    kinds = ("parameter", "output", "temporary", "constant")
    by_kind = dict.fromkeys(kinds, 0)
    rows = []
    for s, iid in enumerate(order):
        touched = set()
        for bid in ends.get(s, ()):
            a = placed[bid][0].index
            active[a].discard(bid)
            touched.add(a)
        for bid in starts.get(s, ()):
            a = placed[bid][0].index
            active.setdefault(a, set()).add(bid)
            touched.add(a)
        for a in touched:  # only allocations whose live set changed are recomputed
            now = _union_bytes([placed[bid][1] for bid in active[a]])
            kind = alloc_by_index[a].kind
            by_kind[kind] = by_kind.get(kind, 0) + now - occupied.get(a, 0)
            occupied[a] = now
        ins = mod.instructions.get(iid)
        rows.append({"step": s, "instruction": ins.name if ins else None, "opcode": ins.opcode if ins else None,
                     **{k: by_kind[k] for k in kinds}, "live_bytes": sum(by_kind.values())})
    return rows, ranges
