"""Decoding XLA's ``BufferAssignmentProto`` (and, by :mod:`xlakit.memory._hlo_module`, the parts of the
``HloModuleProto`` that name its buffers) with :mod:`xlakit.memory._proto`, by the field numbers of XLA's public
``hlo.proto`` / ``xla_data.proto`` (:class:`~xlakit.memory._xla_fields._F`).

Records are read in place (:func:`~xlakit.memory._proto.scan` gives offsets, not copies) and only the fields
the data model holds are decoded; a shape is read only for the leaf a logical buffer names.
"""

from __future__ import annotations

from typing import Any

from xlakit.memory._assignment_types import (
    HeapEvent,
    LogicalBuffer,
)
from xlakit.memory._hlo_module import decode_module
from xlakit.memory._proto import (
    ProtoDecodeError,
    last,
    scan,
    text,
    to_int64,
)
from xlakit.memory._xla_fields import _F as _F

__all__ = ["decode_parts"]

from xlakit.memory._assignment_records import (  # noqa: F401 - the per-record readers
    _AL_BOOL,
    _AL_SIZE,
    _AS_KEYS,
    _AS_SIZE,
    _DEFINED_AT_KEY,
    _EVENT_KINDS,
    _LB_KEYS,
    _LB_SIZE,
    _LOC_ID_KEY,
    _LOC_SIZE,
    _PEAK_SIZE,
    _SHAPE_SIZE,
    _allocation,
    _allocation_fields,
    _allocation_table,
    _assigned,
    _location,
    _logical_buffer,
    _message_leaf,
    _peak_buffers,
    _Shapes,
    _slice_dtypes,
)


def decode_parts(data: bytes, hlo_module: bytes | None = None) -> dict[str, Any]:
    """Decode serialized ``BufferAssignmentProto`` bytes into the fields of a
    :class:`~xlakit.memory.BufferAssignment` (``BufferAssignment(**parts, reported=...)``).

    Args:
      data: ``memory_analysis().serialized_buffer_assignment_proto``.
      hlo_module: the program's serialized ``HloModuleProto`` (for names, shapes, dtypes, the schedule), or
        None — then only ids, sizes and slice dtypes are known.

    Raises:
      ValueError (``ProtoDecodeError``): the bytes are empty or malformed.
    """
    if not data:
        raise ValueError("empty buffer assignment: this backend does not report one (memory_analysis() "
                         "returned no serialized_buffer_assignment_proto)")
    data = bytes(data)
    module = decode_module(bytes(hlo_module)) if hlo_module else None
    try:
        return _decode(data, module)
    except IndexError:
        raise ProtoDecodeError("truncated buffer assignment") from None


def _decode(data: bytes, module: Any) -> dict[str, Any]:
    ba = scan(data, 0, len(data), (_F.BA_LOGICAL_BUFFERS, _F.BA_ALIASES, _F.BA_ALLOCATIONS, _F.BA_TRACES,
                                   _F.BA_PEAK_BUFFERS))
    allocation_spans = ba.get(_F.BA_ALLOCATIONS, [])
    # Only buffers the module cannot describe take their slice's dtype (with a module, rarely any): read them
    # when first needed.
    slice_dtypes: list[dict[int, str]] = []

    def slice_dtype(bid: int) -> str | None:
        if not slice_dtypes:
            slice_dtypes.append(_slice_dtypes(data, allocation_spans))
        return slice_dtypes[0].get(bid)

    leaf = _Shapes().leaf
    instructions = module.instructions if module is not None else {}
    known = getattr(instructions, "known", {})  # instructions already decoded (the entry's), by id
    names: dict[int, str | None] = {}
    buffers: dict[int, LogicalBuffer] = {}
    new = object.__new__
    for bid, size, color, iid, index, loc_name in _logical_buffers_at_once(data, ba.get(_F.BA_LOGICAL_BUFFERS, [])):
        ins = known.get(iid) or (instructions.get(iid) if iid is not None else None)
        if ins is not None:
            shape, dtype = leaf(ins, index)
            cid = ins.computation_id
            computation = names[cid] if cid in names else names.setdefault(cid, _computation_name(module, cid))
            name, opcode = ins.name, ins.opcode
        else:
            shape = dtype = computation = opcode = None
            name = loc_name
        # LogicalBuffer(...) without the frozen dataclass's object.__setattr__ per field (thousands of buffers)
        buffer = buffers[bid] = new(LogicalBuffer)
        buffer.__dict__.update(id=bid, size=size, instruction=name, opcode=opcode, computation=computation,
                               shape_index=index, shape=shape, dtype=dtype or slice_dtype(bid), color=color,
                               instruction_id=iid)

    aliases: dict[int, list[tuple[int | None, tuple[int, ...]]]] = {}
    for span in ba.get(_F.BA_ALIASES, ()):
        al = scan(data, span[0], span[1], (_F.ALIAS_SOURCE, _F.ALIAS_LOCATION))
        loc = al.get(_F.ALIAS_LOCATION)
        if loc:
            iid, index, _name = _location(data, loc[-1])
            aliases.setdefault(to_int64(last(al, _F.ALIAS_SOURCE)), []).append((iid, index))

    peak_spans = ba.get(_F.BA_PEAK_BUFFERS, ())
    peak_ids: list[dict[int, tuple[int, ...]]] = []  # XLA's peak buffers per allocation, read when first asked

    def peaks(index: int) -> tuple[int, ...]:
        if not peak_ids:
            found: dict[int, tuple[int, ...]] = {}
            try:
                for span in peak_spans:
                    allocation_index, ids = _peak_buffers(data, *span)
                    found[allocation_index] = ids
            except IndexError:
                raise ProtoDecodeError("truncated peak buffers in the buffer assignment") from None
            peak_ids.append(found)
        return peak_ids[0].get(index, ())

    allocations = [_allocation(al, peaks, buffers, slice_dtype) for al in _allocations_at_once(data, allocation_spans)]

    traces = []
    for span in ba.get(_F.BA_TRACES, ()):
        tr = scan(data, span[0], span[1], (_F.TR_EVENTS, _F.TR_ALLOCATION))
        events = []
        for ev_span in tr.get(_F.TR_EVENTS, ()):
            ev = scan(data, ev_span[0], ev_span[1], (_F.EV_KIND, _F.EV_BUFFER, _F.EV_COMPUTATION, _F.EV_INSTRUCTION,
                                                     _F.EV_SHARE_WITH))
            kind = last(ev, _F.EV_KIND)
            in_computation, at_instruction = ev.get(_F.EV_COMPUTATION), ev.get(_F.EV_INSTRUCTION)
            events.append(HeapEvent(_EVENT_KINDS.get(kind, f"kind{kind}"), to_int64(last(ev, _F.EV_BUFFER)),
                                    text(data, in_computation[-1]) if in_computation else "",
                                    text(data, at_instruction[-1]) if at_instruction else "",
                                    to_int64(last(ev, _F.EV_SHARE_WITH)) if _F.EV_SHARE_WITH in ev else None))
        traces.append((to_int64(last(tr, _F.TR_ALLOCATION)), tuple(events)))

    return {"allocations": tuple(sorted(allocations, key=lambda a: a.index)),
            "logical_buffers": tuple(buffers[k] for k in sorted(buffers)), "heap_traces": tuple(traces),
            "name": module.name if module else None,
            "_aliases": {k: tuple(v) for k, v in aliases.items()}, "_module": module}


# The keys (field << 3 | wire type) a record read at once may hold, at its own level and in its nested messages.
_LB_TOP_KEYS = (_F.LB_ID << 3, _F.LB_SIZE << 3, _F.LB_DEFINED_AT << 3 | 2, _F.LB_COLOR << 3)
_AL_TOP_KEYS = tuple(f << 3 for f in (_F.AL_INDEX, _F.AL_SIZE, _F.AL_THREAD_LOCAL, _F.AL_PARAMETER,
                                      _F.AL_PARAMETER_NUMBER, _F.AL_LIVE_OUT, _F.AL_COLOR, _F.AL_TUPLE,
                                      _F.AL_CONSTANT, _F.AL_ALIASED)) + (_F.AL_ASSIGNED << 3 | 2,)
_AS_KEYS_AT_ONCE = tuple(f << 3 for f in (_F.AS_BUFFER, _F.AS_OFFSET, _F.AS_SIZE, _F.AS_ELEMENT_TYPE))


def _levels(found: Any, opener_key: int, top_keys: tuple[int, ...], inner_keys: tuple[int, ...],
            repeated: bool = False) -> tuple[Any, Any]:
    """``(inside, good)``: which opener (a pair whose key is ``opener_key``) each pair of ``found`` lies inside
    (-1: the record's own level), and per pair whether its record is read here: a record is when every pair at its
    own level has a key of ``top_keys``, every pair inside an opener one of ``inner_keys``, no key repeats where it
    lies (but the opener's, when ``repeated``: a repeated message field), no value needs more than 63 bits, and
    :func:`~xlakit.memory._varint_records.nested` finds its nested messages whole."""
    import numpy as np

    from xlakit.memory._varint_records import nested

    inside, bad = nested(found, found.key == opener_key)
    bad |= found.bad
    top = inside < 0
    wrong = np.where(top, ~np.isin(found.key, top_keys), ~np.isin(found.key, inner_keys))
    wrong |= found.value >= np.uint64(1 << 63)  # a negative int64: read by the per-field reader
    bad[found.record[wrong]] = True
    # where a pair lies: its record (at the record's own level) or its opener; keys must not repeat there
    where = np.where(top, found.record, len(found.bad) + inside)
    counted = found.key != opener_key if repeated else np.ones(len(found.key), dtype=bool)
    seen = (where * 256 + found.key)[counted]
    _, first, counts = np.unique(seen, return_index=True, return_counts=True)
    bad[found.record[np.flatnonzero(counted)[first[counts > 1]]]] = True
    return inside, ~bad[found.record]


def _field(found: Any, mask: Any, n: int) -> Any:
    """Per record, the value of the pairs in ``mask`` (at most one per record), 0 where none."""
    import numpy as np

    out = np.zeros(n, dtype=np.int64)
    out[found.record[mask]] = found.value[mask].astype(np.int64)
    return out


def _logical_buffers_at_once(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """``(id, size, color, instruction id or None, shape index, instruction name or None)`` of every
    LogicalBufferProto at ``spans``: those made of varints only read with numpy
    (:mod:`xlakit.memory._varint_records`), the others (a location with a shape index or an instruction name) one by
    one."""
    import numpy as np

    from xlakit.memory._varint_records import pairs

    n = len(spans)
    if not n:
        return []
    found = pairs(data, spans)
    inside, good = _levels(found, _F.LB_DEFINED_AT << 3 | 2, _LB_TOP_KEYS, (_F.LOC_INSTRUCTION_ID << 3,))
    top = (inside < 0) & good
    ids, sizes, colors = (_field(found, top & (found.key == f << 3), n) for f in (_F.LB_ID, _F.LB_SIZE, _F.LB_COLOR))
    placed = (inside >= 0) & good  # the instruction id, inside the location
    has_iid = np.zeros(n, dtype=bool)
    has_iid[found.record[placed]] = True
    read = np.zeros(n, dtype=bool)
    read[found.record[good]] = True
    iids = _field(found, placed, n)
    out: list[tuple[Any, ...]] = []
    for k, (bid, size, color, iid, has, ok) in enumerate(zip(ids.tolist(), sizes.tolist(), colors.tolist(),
                                                             iids.tolist(), has_iid.tolist(), read.tolist(),
                                                             strict=True)):
        if ok:
            out.append((bid, size, color, iid if has else None, (), None))
        else:  # not varints only (or empty): the per-field reader
            lb = _logical_buffer(data, *spans[k])
            out.append((*lb[:3], *_location(data, lb[3])))
    return out


def _allocations_at_once(data: bytes, spans: list[tuple[int, int]]) -> list[list[Any]]:
    """:func:`_allocation_fields` of every BufferAllocationProto at ``spans``: those made of varints only read with
    numpy (:mod:`xlakit.memory._varint_records`), the others (a parameter shape index) one by one."""
    import numpy as np

    from xlakit.memory._varint_records import pairs

    n = len(spans)
    if not n:
        return []
    found = pairs(data, spans)
    opener = _F.AL_ASSIGNED << 3 | 2
    inside, good = _levels(found, opener, _AL_TOP_KEYS, _AS_KEYS_AT_ONCE, repeated=True)
    top = (inside < 0) & good
    columns = []
    for f in range(1, 14):  # the slots of _allocation_fields
        out = _field(found, top & (found.key == f << 3), n)
        columns.append(out.astype(bool).tolist() if f in _AL_BOOL else out.tolist())
    # the slices: (buffer id, offset, size) of each assigned message, in order, by allocation
    at = np.flatnonzero((found.key == opener) & top)
    slot = np.searchsorted(at, inside)
    triples = np.zeros((len(at), 3), dtype=np.int64)
    for k, f in enumerate((_F.AS_BUFFER, _F.AS_OFFSET, _F.AS_SIZE)):
        mask = (inside >= 0) & good & (found.key == f << 3)
        triples[slot[mask], k] = found.value[mask].astype(np.int64)
    slices: list[list[tuple[int, ...]]] = [[] for _ in range(n)]
    for record, triple in zip(found.record[at].tolist(), triples.tolist(), strict=True):
        slices[record].append(tuple(triple))
    read = np.zeros(n, dtype=bool)
    read[found.record[good]] = True
    rows: list[list[Any]] = []
    for k, (row, ok) in enumerate(zip(zip(*columns, strict=True), read.tolist(), strict=True)):
        if ok:
            fields = list(row)
            fields[_F.AL_ASSIGNED - 1] = slices[k]
            fields[_F.AL_PARAMETER_INDEX - 1] = ()
        else:  # not varints only (or empty): the per-field reader
            fields = _allocation_fields(data, *spans[k]) or _allocation_table(data, spans[k])
        rows.append(fields)
    return rows


def _computation_name(module: Any, cid: int) -> str | None:
    name_of = getattr(module.computations, "name_of", None)  # a lazy module names it without decoding it
    if name_of is not None:
        return name_of(cid)
    return module.computations[cid][0] if cid in module.computations else None
