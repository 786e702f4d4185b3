"""Liveness over program order of a decoded buffer assignment: from XLA's heap simulator trace when the proto
carries one, else reconstructed from the HLO module's schedule (see
:meth:`xlakit.memory.BufferAssignment.live_bytes_by_step` for the method and its caveats)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlakit.memory._assignment_table import BufferRows
from xlakit.memory._assignment_types import _SEQUENTIAL_CALLERS, HeapEvent, LogicalBuffer, _Module
from xlakit.memory._charging import step_totals

__all__ = ["trace_rows", "schedule_ranges", "schedule_liveness"]



def _flatten(mod: _Module, comp_id: int, default: Sequence[int], seen: set[int]) -> list[int]:
    """Instruction ids in program order, as XLA's HloLiveRange flattens a schedule: the computations a
    while/call/conditional runs come right before the instruction itself (a while: condition, then body)."""
    out: list[int] = []
    seen.add(comp_id)
    instructions = mod.instructions
    known = getattr(instructions, "known", {})  # decoded instructions by id: a plain dict
    for iid in mod.schedule.get(comp_id, default):
        ins = known.get(iid) or instructions.get(iid)
        if ins is not None and ins.opcode in _SEQUENTIAL_CALLERS:
            called = list(reversed(ins.called)) if ins.opcode == "while" else list(ins.called)
            for cid in called:
                if cid in mod.schedule and cid not in seen and cid in mod.computations:
                    out.extend(_flatten(mod, cid, mod.computations[cid][1], seen))
        out.append(iid)
    return out


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


def _users(mod: _Module, ids: Sequence[int]) -> dict[int, list[int]]:
    users: dict[int, list[int]] = {}
    instructions = mod.instructions
    for iid in ids:
        ins = instructions.get(iid)
        for op in ins.operands if ins is not None else ():
            users.setdefault(op, []).append(iid)
    return users


def _nested_steps(mod: _Module, order: Sequence[int], step_of: Mapping[int, int]) -> dict[int, int]:
    """Computation id -> step, for computations not in the flat order (fusion bodies, reduce/sort regions): they
    run during the step of the instruction that calls them (decodes every computation: only needed when a
    buffer is placed inside one)."""
    comp_step: dict[int, int] = {}
    stack = [(iid, step_of[iid]) for iid in order]
    while stack:
        iid, s = stack.pop()
        ins = mod.instructions.get(iid)
        for cid in ins.called if ins else ():
            if cid not in comp_step and cid in mod.computations:
                comp_step[cid] = s
                stack.extend((child, s) for child in mod.computations[cid][1] if child not in step_of)
    return comp_step


def schedule_ranges(mod: _Module, buffers: BufferRows,
                    aliases: Mapping[int, tuple[tuple[int | None, tuple[int, ...]], ...]],
                    ) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """(instruction ids in program order, buffer id -> (first step, last step)) from the entry schedule: a
    buffer is live from the step that defines it (or any of its aliases) to the last step that reads one of
    them; an entry parameter, a constant and a result live through the whole program (the caller holds
    arguments and outputs); a value XLA placed in a donated argument's bytes lives as any other value.
    ``buffers``: the logical buffers with their allocations (:class:`~xlakit.memory._assignment_table.BufferRows`)."""
    _entry_name, entry_ids, root_id = mod.computations[mod.entry_id]
    order = _flatten(mod, mod.entry_id, entry_ids, set())
    step_of = {iid: s for s, iid in enumerate(order)}
    last = len(order) - 1
    sequential = set(mod.sequential_computations())
    nested: list[dict[int, int]] = []  # built when a buffer sits outside the scheduled computations
    nested_users: list[dict[int, list[int]]] = []
    instructions = mod.instructions
    known = getattr(instructions, "known", {})

    def pos(iid: int | None) -> int | None:
        if iid is None:
            return None
        step = step_of.get(iid)
        if step is not None:
            return step
        ins = instructions.get(iid)
        if ins is None:
            return None
        if not nested:
            nested.append(_nested_steps(mod, order, step_of))
        return nested[0].get(ins.computation_id)

    # The last step that reads each value of the scheduled computations (its users are in its own computation).
    last_read: dict[int, int] = {}
    step_at = step_of.__getitem__
    for op, readers in mod.users.items():
        try:  # every reader in the flat order (all but a reader in a computation that is not scheduled)
            last_read[op] = max(map(step_at, readers))
            continue
        except (KeyError, ValueError):  # ValueError: no reader
            pass
        found = -1
        for user in readers:
            p = step_of.get(user)
            if p is None:
                p = pos(user)
            if p is not None and p > found:
                found = p
        if found >= 0:
            last_read[op] = found

    def read_until(iid: int) -> int:
        """The last step reading ``iid`` (-1: none)."""
        ins = known.get(iid) or instructions.get(iid)
        if ins is None or ins.computation_id in sequential:
            return last_read.get(iid, -1)
        if not nested_users:
            nested_users.append(_users(mod, list(instructions)))
        return max((p for p in map(pos, nested_users[0].get(iid, ())) if p is not None), default=-1)

    entry_id = mod.entry_id

    def _is_argument(iid: int | None) -> bool:
        ins = (known.get(iid) or instructions.get(iid)) if iid is not None else None
        return ins is not None and ins.opcode == "parameter" and ins.computation_id == entry_id

    ranges: dict[int, tuple[int, int]] = {}
    for bid, iid, shape_index, index, kind, constant, thread_local in zip(
            buffers.ids, buffers.instruction_ids, buffers.shape_indexes, buffers.allocations, buffers.kinds,
            buffers.constant, buffers.thread_local, strict=True):
        if index is None or thread_local:
            continue
        if constant:
            ranges[bid] = (0, last)
            continue
        is_parameter = kind == "parameter"
        if is_parameter:
            ins = (known.get(iid) or instructions.get(iid)) if iid is not None else None
            if ins is None or (ins.opcode == "parameter" and ins.computation_id == entry_id):
                ranges[bid] = (0, last)  # the argument itself
                continue
        more = aliases.get(bid)
        if not more and not is_parameter:  # most buffers: one position, in the schedule
            first = step_of.get(iid) if iid is not None else None
            if first is not None and iid is not None:
                end = last if iid == root_id else max(first, last_read.get(iid, -1))
                ranges[bid] = (first, end)
                continue
        locations = [(iid, shape_index), *(more or ())]
        if is_parameter:  # a result written into a donated argument: the argument's position holds the
            locations = [loc for loc in locations if not _is_argument(loc[0])]  # argument, not this value
        steps = [p for p in (pos(i) for i, _ in locations) if p is not None]
        if not steps:
            if is_parameter:
                ranges[bid] = (0, last)
            continue
        end = max(steps)
        for loc_iid, _ in locations:
            if loc_iid is not None:
                end = max(end, read_until(loc_iid))
            if loc_iid == root_id:
                end = last
        ranges[bid] = (min(steps), end)
    return order, ranges


def schedule_liveness(mod: _Module, buffers: BufferRows,
                      aliases: Mapping[int, tuple[tuple[int | None, tuple[int, ...]], ...]],
                      ) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
    """(rows, buffer id -> (first step, last step)) from the entry schedule (:func:`schedule_ranges`); see
    :meth:`~xlakit.memory.BufferAssignment.live_bytes_by_step`. The bytes per step are swept once
    (:func:`xlakit.memory._charging.step_totals`): linear in the schedule and the buffers."""
    order, ranges = schedule_ranges(mod, buffers, aliases)
    # Sweep: at each step, the union of byte ranges of live slices, per allocation, summed by kind.
    kinds = ("parameter", "output", "temporary", "constant")
    label = {k: n for n, k in enumerate(kinds)}
    placed = {bid: k for k, bid in enumerate(buffers.ids)}  # each buffer's row
    at = [placed[bid] for bid in ranges]  # the placed buffers' (the others have no range)
    cols = step_totals(len(order), list(ranges.values()), [buffers.slice_sizes[k] or 0 for k in at],
                       [buffers.allocations[k] or 0 for k in at], [buffers.offsets[k] or 0 for k in at],
                       [label.get(buffers.kinds[k] or "", len(kinds)) for k in at], len(kinds) + 1)
    rows = []
    instructions = mod.instructions
    for s, iid in enumerate(order):
        ins = instructions.get(iid)
        row = {"step": s, "instruction": ins.name if ins else None, "opcode": ins.opcode if ins else None}
        row.update((k, cols[n][s]) for n, k in enumerate(kinds))
        row["live_bytes"] = sum(col[s] for col in cols)
        rows.append(row)
    return rows, ranges
