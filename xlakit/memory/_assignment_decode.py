"""Decoding XLA's ``BufferAssignmentProto`` (and, by :mod:`xlakit.memory._hlo_module`, the parts of the
``HloModuleProto`` that name its buffers) with :mod:`xlakit.memory._proto`, by the field numbers of XLA's public
``hlo.proto`` / ``xla_data.proto`` (:class:`~xlakit.memory._xla_fields._F`).

Records are read in place (offsets, not copies) and only the fields the data model holds are decoded; a shape is
read only for the leaf a logical buffer names. The top level (tens of thousands of records) is walked by a loop of a
few steps per record (:func:`_top_level`); the logical buffers and allocations, made of varints only as XLA writes
them, are read as columns with numpy (:mod:`xlakit.memory._varint_records`: one pass over all records, no Python
loop per field), the few others one by one (:mod:`xlakit.memory._assignment_records`). The objects are made from
those columns when first read (:mod:`xlakit.memory._assignment_table`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xlakit.memory._assignment_table import AssignmentTable, Deferred
from xlakit.memory._assignment_types import HeapEvent
from xlakit.memory._decoding import without_gc
from xlakit.memory._hlo_module import decode_module
from xlakit.memory._proto import (
    ProtoDecodeError,
    _varint,
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
    _allocation_fields,
    _allocation_table,
    _allocations,
    _assigned,
    _buffer_columns,
    _location,
    _logical_buffer,
    _logical_buffers,
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
    return without_gc(_decode_parts, bytes(data), bytes(hlo_module) if hlo_module else None)


def _decode_parts(data: bytes, hlo_module: bytes | None) -> dict[str, Any]:
    # With the collector paused (xlakit.memory._decoding): ~10^4 objects made, none in a cycle.
    # The logical buffers first, so that the module reads the computations defining them with its entry, in one
    # pass; an error met here is met again by _decode, after the module's own (the order of the errors kept).
    try:
        top = _top_level(data)
        buffers = _logical_buffer_columns(data, top[_F.BA_LOGICAL_BUFFERS])
    except (IndexError, ValueError):
        top, buffers = None, None
    module = decode_module(hlo_module, buffers[3] if buffers is not None else None) if hlo_module else None
    try:
        return _decode(data, module, top, buffers)
    except IndexError:
        raise ProtoDecodeError("truncated buffer assignment") from None


# What _logical_buffer_columns reads: ids, sizes, colours, instruction ids, shape indexes, instruction names.
_Buffers = tuple[list[int], list[int], list[int], list[int | None], list[tuple[int, ...]], list[str | None]]
_TOP_FIELDS = (_F.BA_LOGICAL_BUFFERS, _F.BA_ALIASES, _F.BA_ALLOCATIONS, _F.BA_TRACES, _F.BA_PEAK_BUFFERS)


def _top_level(data: bytes) -> dict[int, Any]:
    """Field -> the ``(start, end)`` spans of the BufferAssignmentProto's records of that field (``_TOP_FIELDS``,
    all messages), as an ``(n, 2)`` int64 array. As XLA writes them (one-byte keys, records back to back; tens of
    thousands) a loop of a few steps per record finds where each begins, and numpy reads their keys and lengths;
    anything else (another field, a scalar, a truncated record) is read by :func:`~xlakit.memory._proto.scan`, which
    says what is wrong."""
    import numpy as np

    heads: list[int] = []  # where each record's key is
    append = heads.append
    pos, end = 0, len(data)
    try:
        while pos < end:
            append(pos)
            size = data[pos + 1]
            if size < 0x80:
                pos += 2 + size
            else:
                size, pos = _varint(data, pos + 1)
                pos += size
    except (IndexError, ProtoDecodeError):
        pos = -1
    if pos == end and heads:
        raw = np.frombuffer(data, dtype=np.uint8)
        at = np.fromiter(heads, dtype=np.int64, count=len(heads))
        keys = raw[at]
        # a length of one byte (most), or more: its bytes up to the first below 0x80
        after = at + 2
        more = np.flatnonzero(raw[at + 1] >= 0x80)
        while len(more):
            after[more] += 1
            more = more[raw[after[more] - 1] >= 0x80]
        spans = np.stack((after, np.append(at[1:], end)), axis=1)
        found = {field: spans[keys == (field << 3 | 2)] for field in _TOP_FIELDS}
        if sum(map(len, found.values())) == len(at):  # every record one of them, each a message
            return found
    flat = scan(data, 0, end, _TOP_FIELDS)
    for field, spans_of in flat.items():
        if not all(isinstance(span, tuple) for span in spans_of):
            raise ProtoDecodeError(f"field {field} of the buffer assignment: expected a message, found a scalar")
    lists = [[v for span in flat.get(field, ()) for v in span] for field in _TOP_FIELDS]
    return {field: np.fromiter(found, dtype=np.int64, count=len(found)).reshape(-1, 2)
            for field, found in zip(_TOP_FIELDS, lists, strict=True)}


def _decode(data: bytes, module: Any, top: dict[int, Any] | None = None, buffers: _Buffers | None = None,
            ) -> dict[str, Any]:
    """The parts of the assignment (``top``, ``buffers``: its records and logical buffers, where already read)."""
    ba = top if top is not None else _top_level(data)
    allocation_spans = ba[_F.BA_ALLOCATIONS]
    # Only buffers the module cannot describe take their slice's dtype (with a module, rarely any): read them
    # when first needed.
    slice_dtypes: list[dict[int, str]] = []

    def slice_dtype(bid: int) -> str | None:
        if not slice_dtypes:
            slice_dtypes.append(_slice_dtypes(data, allocation_spans.tolist()))
        return slice_dtypes[0].get(bid)

    if buffers is None:
        buffers = _logical_buffer_columns(data, ba[_F.BA_LOGICAL_BUFFERS])
    buffer_columns = _buffer_columns(*buffers, module, slice_dtype)

    aliases: dict[int, list[tuple[int | None, tuple[int, ...]]]] = {}
    for span in ba[_F.BA_ALIASES].tolist():
        al = scan(data, span[0], span[1], (_F.ALIAS_SOURCE, _F.ALIAS_LOCATION))
        loc = al.get(_F.ALIAS_LOCATION)
        if loc:
            iid, index, _name = _location(data, loc[-1])
            aliases.setdefault(to_int64(last(al, _F.ALIAS_SOURCE)), []).append((iid, index))

    peak_spans = ba[_F.BA_PEAK_BUFFERS]
    peak_ids: list[dict[int, tuple[int, ...]]] = []  # XLA's peak buffers per allocation, read when first asked

    def peaks(index: int) -> tuple[int, ...]:
        if not peak_ids:
            found: dict[int, tuple[int, ...]] = {}
            try:
                for span in peak_spans.tolist():
                    allocation_index, ids = _peak_buffers(data, *span)
                    found[allocation_index] = ids
            except IndexError:
                raise ProtoDecodeError("truncated peak buffers in the buffer assignment") from None
            peak_ids.append(found)
        return peak_ids[0].get(index, ())

    allocation_columns = _allocation_columns(data, allocation_spans)
    if not set(buffer_columns["id"]).issuperset(allocation_columns.buffers):
        slice_dtype(-1)  # slices of buffers not listed take their dtype: read now, so bad bytes fail here

    def objects() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        buffers = _logical_buffers(buffer_columns)
        allocations = _allocations(allocation_columns, peaks, buffers, slice_dtype)
        return tuple(sorted(allocations, key=lambda a: a.index)), tuple(buffers[k] for k in sorted(buffers))

    # the objects are made when a caller first reads them; the attribution reads the columns
    table = AssignmentTable(buffer_columns, allocation_columns, objects)

    traces = []
    for span in ba[_F.BA_TRACES].tolist():
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

    return {"allocations": Deferred(table, 0), "logical_buffers": Deferred(table, 1), "heap_traces": tuple(traces),
            "name": module.name if module else None,
            "_aliases": {k: tuple(v) for k, v in aliases.items()}, "_module": module, "_memo": {"table": table}}


# The keys (field << 3 | wire type) a record read at once may hold, at its own level and in its nested messages.
_LB_TOP_KEYS = (_F.LB_ID << 3, _F.LB_SIZE << 3, _F.LB_DEFINED_AT << 3 | 2, _F.LB_COLOR << 3)
_AL_TOP_KEYS = tuple(f << 3 for f in (_F.AL_INDEX, _F.AL_SIZE, _F.AL_THREAD_LOCAL, _F.AL_PARAMETER,
                                      _F.AL_PARAMETER_NUMBER, _F.AL_LIVE_OUT, _F.AL_COLOR, _F.AL_TUPLE,
                                      _F.AL_CONSTANT, _F.AL_ALIASED)) + (_F.AL_ASSIGNED << 3 | 2,)
_AS_KEYS_AT_ONCE = tuple(f << 3 for f in (_F.AS_BUFFER, _F.AS_OFFSET, _F.AS_SIZE, _F.AS_ELEMENT_TYPE))
_FLAGS = sorted(_AL_BOOL)  # an allocation's bool fields


def _table(record: Any, key: Any, value: Any, mask: Any, n: int, size: int) -> Any:
    """``out[f, r]``: the value of record ``r``'s field ``f`` (< ``size``) among the pairs in ``mask`` (at most one
    per field and record), 0 where none: every field of every record in one scatter."""
    import numpy as np

    out = np.zeros((size, n), dtype=np.int64)
    out[key[mask] >> 3, record[mask]] = value[mask].astype(np.int64)
    return out


def _logical_buffer_columns(data: bytes, spans: Any) -> _Buffers:
    """``(ids, sizes, colors, instruction ids (None where absent), shape indexes, instruction names (None where
    absent))`` of the LogicalBufferProtos at ``spans``: those made of varints only read with numpy
    (:mod:`xlakit.memory._varint_records`), the others (a location with a shape index or an instruction name) one
    by one."""
    import numpy as np

    from xlakit.memory._varint_records import levels, pairs

    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    n = len(spans)
    if not n:
        return [], [], [], [], [], []
    found = pairs(data, spans)
    inside, good = levels(found, _F.LB_DEFINED_AT << 3 | 2, _LB_TOP_KEYS, (_F.LOC_INSTRUCTION_ID << 3,))
    record, key, value = found.record[good], found.key[good], found.value[good]  # the pairs of records read here
    top = inside[good] < 0
    table = _table(record, key, value, top & (key != _F.LB_DEFINED_AT << 3 | 2), n, _LB_SIZE).tolist()
    ids, sizes, colors = table[_F.LB_ID], table[_F.LB_SIZE], table[_F.LB_COLOR]
    placed = ~top  # the instruction id, inside the location
    iids: list[int | None] = _table(record, key, value, placed, n, _LOC_SIZE)[_F.LOC_INSTRUCTION_ID].tolist()
    has_iid = np.zeros(n, dtype=bool)
    has_iid[record[placed]] = True
    read = np.zeros(n, dtype=bool)
    read[record] = True
    for k in np.flatnonzero(~has_iid).tolist():
        iids[k] = None
    indexes: list[tuple[int, ...]] = [()] * n
    names: list[str | None] = [None] * n
    for k in np.flatnonzero(~read).tolist():  # not varints only (or empty): the per-field reader
        lb = _logical_buffer(data, *spans[k].tolist())
        ids[k], sizes[k], colors[k] = lb[:3]
        iids[k], indexes[k], names[k] = _location(data, lb[3])
    return ids, sizes, colors, iids, indexes, names


def _logical_buffers_at_once(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """``(id, size, color, instruction id or None, shape index, instruction name or None)`` of every
    LogicalBufferProto at ``spans``, as :func:`_logical_buffer_columns` reads them."""
    return list(zip(*_logical_buffer_columns(data, spans), strict=True))


class _AllocationColumns(NamedTuple):
    """What :func:`_allocation_columns` reads: ``fields``, one list per field number 1-13 (slot ``f - 1``, as
    :func:`_allocation_fields` gives them; the ``assigned`` and parameter-index slots left empty), ``indexes``
    (the parameter shape index of each), and the slices of all allocations in order: ``buffers``, ``offsets``,
    ``sizes`` (one entry per slice), allocation ``k``'s at ``[at[k]:at[k + 1]]``."""

    fields: list[list[Any]]
    indexes: list[tuple[int, ...]]
    buffers: list[int]
    offsets: list[int]
    sizes: list[int]
    at: list[int]


def _allocation_columns(data: bytes, spans: Any) -> _AllocationColumns:
    """The fields of every BufferAllocationProto at ``spans`` (:class:`_AllocationColumns`): those made of varints
    only read with numpy (:mod:`xlakit.memory._varint_records`), the others (a parameter shape index) one by one."""
    import numpy as np

    from xlakit.memory._varint_records import levels, pairs

    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    n = len(spans)
    if not n:
        return _AllocationColumns([[] for _ in range(13)], [], [], [], [], [0])
    found = pairs(data, spans)
    opener = _F.AL_ASSIGNED << 3 | 2
    inside, good = levels(found, opener, _AL_TOP_KEYS, _AS_KEYS_AT_ONCE, repeated=True)
    record, key, value, inside = found.record[good], found.key[good], found.value[good], inside[good]
    top = inside < 0
    table = _table(record, key, value, top & (key != opener), n, 14)
    columns = table.tolist()
    for f, row in zip(_FLAGS, table[_FLAGS].astype(bool).tolist(), strict=True):
        columns[f] = row
    del columns[0]  # field f in slot f - 1, as _allocation_fields gives them
    # the slices: (buffer id, offset, size) of each assigned message, in byte order, so by allocation
    at = np.flatnonzero((key == opener) & top)
    inner = ~top
    slot = np.searchsorted(at, np.flatnonzero(inner), side="right") - 1  # slice k's pairs follow its opener at[k]
    triples = np.zeros((3, len(at)), dtype=np.int64)
    for k, f in enumerate((_F.AS_BUFFER, _F.AS_OFFSET, _F.AS_SIZE)):
        mask = key[inner] == f << 3
        triples[k, slot[mask]] = value[inner][mask].astype(np.int64)
    counts = np.bincount(record[at], minlength=n)
    read = np.zeros(n, dtype=bool)
    read[record] = True
    buffers: list[int]
    offsets: list[int]
    sizes: list[int]
    buffers, offsets, sizes = triples.tolist()
    indexes: list[tuple[int, ...]] = [()] * n
    if not read.all():  # not varints only (or empty): the per-field reader, its slices put in their place
        starts = np.concatenate(([0], np.cumsum(counts))).tolist()
        pieces: list[list[list[int]]] = [[], [], []]
        for k in range(n):
            if read[k]:
                for piece, column in zip(pieces, (buffers, offsets, sizes), strict=True):
                    piece.append(column[starts[k]:starts[k + 1]])
                continue
            span = tuple(spans[k].tolist())
            fields = _allocation_fields(data, *span) or _allocation_table(data, span)
            for f, column in enumerate(columns):
                column[k] = fields[f]
            indexes[k] = fields[_F.AL_PARAMETER_INDEX - 1]
            assigned = fields[_F.AL_ASSIGNED - 1]
            counts[k] = len(assigned)
            for piece, got in zip(pieces, zip(*assigned, strict=True) if assigned else ((), (), ()), strict=True):
                piece.append(list(got))
        buffers, offsets, sizes = ([v for part in piece for v in part] for piece in pieces)
    for f in (_F.AL_ASSIGNED, _F.AL_PARAMETER_INDEX):
        columns[f - 1] = []
    return _AllocationColumns(columns, indexes, buffers, offsets, sizes,
                              np.concatenate(([0], np.cumsum(counts))).tolist())


def _allocations_at_once(data: bytes, spans: list[tuple[int, int]]) -> list[list[Any]]:
    """:func:`_allocation_fields` of every BufferAllocationProto at ``spans``, as :func:`_allocation_columns`
    reads them."""
    got = _allocation_columns(data, spans)
    rows = []
    for k in range(len(spans)):
        row = [column[k] if column else None for column in got.fields]
        row[_F.AL_ASSIGNED - 1] = list(zip(got.buffers[got.at[k]:got.at[k + 1]], got.offsets[got.at[k]:got.at[k + 1]],
                                           got.sizes[got.at[k]:got.at[k + 1]], strict=True))
        row[_F.AL_PARAMETER_INDEX - 1] = got.indexes[k]
        rows.append(row)
    return rows
