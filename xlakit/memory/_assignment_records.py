"""The records of XLA's ``BufferAssignmentProto`` one by one: logical buffers, their locations, allocations, assigned
slices and peak buffers, read in place by the field numbers of XLA's ``hlo.proto`` (:class:`~xlakit.memory.
_xla_fields._F`). :mod:`xlakit.memory._assignment_decode` reads whole tables of them at once where they are made of
varints only, and falls back to these readers for the rest; :func:`_buffer_columns` names and shapes the
logical buffers, and :func:`_logical_buffers` and :func:`_allocations` make the objects from those tables."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from typing import Any

from xlakit.memory._assignment_types import (
    DTYPES,
    Allocation,
    LogicalBuffer,
    Slice,
    _Instr,
)
from xlakit.memory._proto import (
    ProtoDecodeError,
    _varint,
    one,
    packed,
    repeated_ints,
    table,
    text,
    to_int64,
)
from xlakit.memory._xla_fields import _F as _F

__all__: list[str] = []  # private readers, used by _assignment_decode

_EVENT_KINDS = {0: "alloc", 1: "free", 2: "share_with"}
# table() sizes: one more than the highest field number read from each message
_LOC_SIZE = max(_F.LOC_NAME, _F.LOC_SHAPE_INDEX, _F.LOC_INSTRUCTION_ID) + 1
_LB_SIZE = max(_F.LB_ID, _F.LB_SIZE, _F.LB_DEFINED_AT, _F.LB_COLOR) + 1
_AL_SIZE = max(_F.AL_INDEX, _F.AL_SIZE, _F.AL_THREAD_LOCAL, _F.AL_PARAMETER, _F.AL_PARAMETER_NUMBER, _F.AL_LIVE_OUT,
               _F.AL_COLOR, _F.AL_ASSIGNED, _F.AL_PARAMETER_INDEX, _F.AL_TUPLE, _F.AL_CONSTANT, _F.AL_ALIASED) + 1
_AS_SIZE = max(_F.AS_BUFFER, _F.AS_OFFSET, _F.AS_SIZE, _F.AS_ELEMENT_TYPE) + 1
_PEAK_SIZE = max(_F.PEAK_INDEX, _F.PEAK_IDS) + 1
_SHAPE_SIZE = max(_F.SH_ELEMENT_TYPE, _F.SH_DIMS, _F.SH_TUPLE) + 1


class _Shapes:
    """The leaf shapes of the module's instructions, reading each ShapeProto once (a root tuple of 2,000
    outputs is scanned once, not once per output)."""

    def __init__(self) -> None:
        self._read: dict[tuple[int, int], list[Any]] = {}
        self._leaves: dict[bytes, tuple[tuple[int, ...], str | None]] = {}

    def _fields(self, data: bytes, span: tuple[int, int]) -> list[Any]:
        found = self._read.get(span)
        if found is None:
            found = self._read[span] = table(data, span[0], span[1], _SHAPE_SIZE)
        return found

    def _leaf(self, data: bytes, span: tuple[int, int]) -> tuple[tuple[int, ...], str | None]:
        """(dims, dtype) of an array ShapeProto; equal shapes (most of a program's) are read once."""
        raw = data[span[0]:span[1]]
        found = self._leaves.get(raw)
        if found is None:
            fields = self._fields(data, span)
            found = self._leaves[raw] = (tuple(repeated_ints(data, fields[_F.SH_DIMS])),
                                         DTYPES.get(one(fields[_F.SH_ELEMENT_TYPE])))
        return found

    def leaf(self, ins: _Instr, index: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str | None]:
        raw = ins._raw
        if raw is None or raw[3] < 0:  # an instruction made without its proto, or without a shape
            return _message_leaf(ins.shape, index)
        data, span = raw[0], (raw[3], raw[4])
        for i in index:
            tuples = self._fields(data, span)[_F.SH_TUPLE] or ()
            if not 0 <= i < len(tuples):
                return None, None
            span = tuples[i]
        return self._leaf(data, span)


def _message_leaf(shape: Any, index: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str | None]:
    for i in index:
        if shape is None:
            return None, None
        tuples = shape.messages(_F.SH_TUPLE)
        shape = tuples[i] if 0 <= i < len(tuples) else None
    if shape is None:
        return None, None
    return tuple(shape.ints(_F.SH_DIMS)), DTYPES.get(shape.int(_F.SH_ELEMENT_TYPE))


_LB_KEYS = {_F.LB_ID << 3: 0, _F.LB_SIZE << 3: 1, _F.LB_COLOR << 3: 2}
_DEFINED_AT_KEY = _F.LB_DEFINED_AT << 3 | 2


def _logical_buffer(data: bytes, pos: int, end: int) -> tuple[int, int, int, tuple[int, int] | None]:
    """(id, size, color, span of ``defined_at``) of a LogicalBufferProto, its common encoding read inline
    (anything else goes through :func:`table`)."""
    values = [0, 0, 0]
    defined = None
    start = pos
    while pos < end:
        key = data[pos]
        slot = _LB_KEYS.get(key)
        if slot is None and key != _DEFINED_AT_KEY:
            lb = table(data, start, end, _LB_SIZE)  # the whole record, the general way
            for field, k in ((_F.LB_ID, 0), (_F.LB_SIZE, 1), (_F.LB_COLOR, 2)):
                values[k] = one(lb[field])
            defined = lb[_F.LB_DEFINED_AT][-1] if lb[_F.LB_DEFINED_AT] else None
            return values[0], values[1], values[2], defined
        value = data[pos + 1]
        pos += 2
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
        if slot is None:  # defined_at: value is its length
            defined = (pos, pos + value)
            pos += value
        else:
            values[slot] = value
    if pos > end:
        raise ProtoDecodeError("a logical buffer's record runs past its end")
    return to_int64(values[0]), to_int64(values[1]), to_int64(values[2]), defined


_LOC_NAME_KEY, _LOC_INDEX_KEY = _F.LOC_NAME << 3 | 2, _F.LOC_SHAPE_INDEX << 3 | 2
_LOC_ID_KEY = _F.LOC_INSTRUCTION_ID << 3


def _location(data: bytes, span: tuple[int, int] | None) -> tuple[int | None, tuple[int, ...], str | None]:
    """(instruction id or None, shape index, instruction name or None) of a LogicalBufferProto.Location; its
    common encoding (name, packed index, id; the computation's name stepped over) read inline."""
    if span is None:
        return None, (), None
    pos, end = span
    iid = name = None
    index: tuple[int, ...] = ()
    while pos < end:
        key = data[pos]
        wire = key & 7
        if key >= 0x80 or (wire != 2 and key != _LOC_ID_KEY):
            break  # not the common encoding: read the whole record the general way below
        value = data[pos + 1]
        pos += 2
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
        if wire != 2:
            iid = value
            continue
        start, pos = pos, pos + value
        if key == _LOC_NAME_KEY:
            name = data[start:pos].decode("utf-8", errors="replace") or None
        elif key == _LOC_INDEX_KEY:
            index = tuple(packed(data, start, pos))
    else:
        if pos > end:
            raise ProtoDecodeError("a buffer's location runs past its end")
        return (None if iid is None else to_int64(iid)), index, name
    loc = table(data, span[0], span[1], _LOC_SIZE)
    name = loc[_F.LOC_NAME]
    return (None if loc[_F.LOC_INSTRUCTION_ID] is None else one(loc[_F.LOC_INSTRUCTION_ID]),
            tuple(repeated_ints(data, loc[_F.LOC_SHAPE_INDEX])), text(data, name[-1]) or None if name else None)


def _buffer_columns(ids: list[int], sizes: list[int], colors: list[int], iids: list[int | None],
                    indexes: list[tuple[int, ...]], loc_names: list[str | None], module: Any,
                    slice_dtype: Callable[[int], str | None]) -> dict[str, list[Any]]:
    """The fields of each logical buffer read (columns as
    :func:`~xlakit.memory._assignment_decode._logical_buffer_columns` gives them), in the order read: one list per
    :class:`LogicalBuffer` field, keyed and ordered as its fields; named, shaped and typed by the instruction that
    defines it where the module has it."""
    shapes = _Shapes()
    leaf, leaves, read_leaf = shapes.leaf, shapes._leaves, shapes._leaf
    instructions = module.instructions if module is not None else {}
    known = getattr(instructions, "known", {})  # instructions already decoded (the entry's), by id
    read_homes = getattr(instructions, "read_homes", None)
    if read_homes is not None:  # the instructions of computations besides the entry, read together
        read_homes([iid for iid in iids if iid is not None and iid not in known])
    names: dict[int, str | None] = {}
    made: list[tuple[Any, ...]] = []
    for bid, iid, index, loc_name in zip(ids, iids, indexes, loc_names, strict=True):
        ins = known.get(iid) or (instructions.get(iid) if iid is not None else None)
        if ins is not None:
            src, row = ins._src, ins._row
            start = src.shape_start[row] if row >= 0 and not index else -1
            if start < 0:
                shape, dtype = leaf(ins, index)
            else:  # a plain array's shape (most buffers'): _Shapes.leaf inline, each distinct shape read once
                end = src.shape_end[row]
                found = leaves.get(src.data[start:end])
                shape, dtype = found if found is not None else read_leaf(src.data, (start, end))
            cid = ins.computation_id
            computation = names[cid] if cid in names else names.setdefault(cid, _computation_name(module, cid))
            made.append((ins.name, ins.opcode, computation, shape, dtype or slice_dtype(bid)))
        else:
            made.append((loc_name, None, None, None, slice_dtype(bid)))
    read: list[list[Any]] = list(map(list, zip(*made, strict=True))) if made else [[], [], [], [], []]
    return {"id": ids, "size": sizes, "instruction": read[0], "opcode": read[1], "computation": read[2],
            "shape_index": indexes, "shape": read[3], "dtype": read[4], "color": colors, "instruction_id": iids}


def _logical_buffers(columns: dict[str, list[Any]]) -> dict[int, LogicalBuffer]:
    """Buffer id -> the :class:`LogicalBuffer` of each logical buffer of :func:`_buffer_columns`."""
    keys = tuple(columns)
    fields = [dict(zip(keys, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    return dict(zip(columns["id"], _made(LogicalBuffer, fields), strict=True))


def _made(cls: Any, fields: list[dict[str, Any]]) -> list[Any]:
    """One ``cls`` per dict of ``fields``, its ``__dict__`` that dict: the frozen dataclass made without its
    ``object.__setattr__`` per field, by C-level ``map`` (a program has thousands of buffers, slices and
    allocations)."""
    made = list(map(object.__new__, itertools.repeat(cls, len(fields))))
    collections.deque(map(object.__setattr__, made, itertools.repeat("__dict__"), fields), maxlen=0)
    return made


def _computation_name(module: Any, cid: int) -> str | None:
    name_of = getattr(module.computations, "name_of", None)  # a lazy module names it without decoding it
    if name_of is not None:
        return name_of(cid)
    return module.computations[cid][0] if cid in module.computations else None


_KINDS: dict[tuple[bool, ...], tuple[str, list[str]]] = {}  # an allocation's flags -> its kind and kinds


def _kinds(parameter: bool, constant: bool, thread_local: bool, live_out: bool, is_tuple: bool,
           aliased: bool) -> tuple[str, list[str]]:
    kind = ("parameter" if parameter else "constant" if constant else "thread-local" if thread_local
            else "output" if live_out else "temporary")
    kinds = [kind]
    if live_out:
        kinds.append("maybe-live-out")
    if is_tuple:
        kinds.append("tuple")
    if aliased:
        kinds.append("aliased-with-output")
    return kind, kinds


def _allocations(columns: Any, peaks: Callable[[int], tuple[int, ...]], buffers: dict[int, LogicalBuffer],
                 slice_dtype: Callable[[int], str | None]) -> list[Allocation]:
    """The :class:`Allocation` of each BufferAllocationProto read (columns as
    :func:`~xlakit.memory._assignment_decode._allocation_columns` gives them), in order; a slice of a buffer
    the logical buffers do not list gets a buffer of its own."""
    held = list(map(buffers.get, columns.buffers))
    if not buffers.keys() >= set(columns.buffers):  # a buffer the logical buffers do not list (`None in held`
        # would call the dataclass's __eq__ per buffer)
        for k, (buf, bid, size) in enumerate(zip(held, columns.buffers, columns.sizes, strict=True)):
            if buf is None:
                held[k] = LogicalBuffer(bid, size, None, None, None, (), None, slice_dtype(bid), 0)
    slices = _made(Slice, [{"buffer": buf, "offset": offset, "size": size}
                           for buf, offset, size in zip(held, columns.offsets, columns.sizes, strict=True)])
    at = columns.at
    groups = map(tuple(slices).__getitem__, map(slice, at[:-1], at[1:]))  # slices of a tuple are tuples
    f = columns.fields
    flags = list(zip(*(f[field - 1] for field in (_F.AL_PARAMETER, _F.AL_CONSTANT, _F.AL_THREAD_LOCAL, _F.AL_LIVE_OUT,
                                                  _F.AL_TUPLE, _F.AL_ALIASED)), strict=True))
    for new in set(flags).difference(_KINDS):  # a program has a few combinations of flags: each named once
        _KINDS[new] = _kinds(*new)
    fields = []
    for index, size, thread_local, parameter, number, live_out, color, is_tuple, constant, aliased, \
            parameter_index, group, (kind, kinds) in zip(*(f[field - 1] for field in (
                _F.AL_INDEX, _F.AL_SIZE, _F.AL_THREAD_LOCAL, _F.AL_PARAMETER, _F.AL_PARAMETER_NUMBER, _F.AL_LIVE_OUT,
                _F.AL_COLOR, _F.AL_TUPLE, _F.AL_CONSTANT, _F.AL_ALIASED)), columns.indexes, groups,
                                                         map(_KINDS.__getitem__, flags), strict=True):
        # kinds: a tuple of its own per allocation, as one by one (so a pickle of them is the same)
        fields.append({"index": index, "size": size, "kind": kind, "kinds": tuple(kinds),
                       "parameter_number": number if parameter else None, "parameter_shape_index": parameter_index,
                       "aliased_with_output": aliased, "maybe_live_out": live_out, "is_thread_local": thread_local,
                       "is_constant": constant, "is_tuple": is_tuple, "color": color, "slices": group,
                       "_peak_lookup": peaks})
    return _made(Allocation, fields)


# A BufferAllocationProto's fields as _allocation_fields gives them: field number -> slot (fields 1-13, 4 unused)
_AL_BOOL = frozenset({_F.AL_THREAD_LOCAL, _F.AL_PARAMETER, _F.AL_LIVE_OUT, _F.AL_TUPLE, _F.AL_CONSTANT,
                      _F.AL_ALIASED})


def _allocation_fields(data: bytes, pos: int, end: int) -> list[Any] | None:
    """The fields of the BufferAllocationProto at ``data[pos:end]`` as a list indexed by field number - 1
    (:data:`_F` ``AL_*``): ints (flags as bools; the last occurrence wins), the ``assigned`` slices as a list of
    (buffer id, offset, size), the parameter shape index as a tuple; read inline (a program has one allocation per
    argument and output, one slice per logical buffer). None for an encoding this fast path does not read (a
    field past 15, a fixed-width field): then :func:`_allocation_table` reads it."""
    out: list[Any] = [0, 0, False, 0, False, 0, False, 0, [], (), False, False, False]
    assigned = out[_F.AL_ASSIGNED - 1]
    while pos < end:
        key = data[pos]
        field, wire = key >> 3, key & 7
        if key >= 0x80 or field > 13 or field < 1:
            return None
        value = data[pos + 1]
        pos += 2
        if value >= 0x80:  # a varint of two bytes or more
            value &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
        if wire == 0:
            if field == _F.AL_ASSIGNED or field == _F.AL_PARAMETER_INDEX:
                return None
            out[field - 1] = bool(value) if field in _AL_BOOL else value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            if field == _F.AL_ASSIGNED:
                assigned.append(_assigned(data, pos, pos + value))
            elif field == _F.AL_PARAMETER_INDEX:
                out[field - 1] = (*out[field - 1], *packed(data, pos, pos + value))
            else:
                return None
            pos += value
        else:
            return None
    if pos > end:
        raise ProtoDecodeError("an allocation's record runs past its end")
    return out


def _allocation_table(data: bytes, span: tuple[int, int]) -> list[Any]:
    """:func:`_allocation_fields` of any encoding, through :func:`~xlakit.memory._proto.table`."""
    al = table(data, span[0], span[1], _AL_SIZE)
    out: list[Any] = [0 if f in (_F.AL_ASSIGNED, _F.AL_PARAMETER_INDEX) else one(al[f]) for f in range(1, 14)]
    for f in _AL_BOOL:
        out[f - 1] = bool(out[f - 1])
    assigned = al[_F.AL_ASSIGNED] or []
    if not isinstance(assigned, list) or not all(isinstance(span, tuple) for span in assigned):
        raise ProtoDecodeError("an allocation's assigned slices are not messages")
    out[_F.AL_ASSIGNED - 1] = [_assigned(data, *span) for span in assigned]
    out[_F.AL_PARAMETER_INDEX - 1] = tuple(repeated_ints(data, al[_F.AL_PARAMETER_INDEX]))
    return out


_AS_KEYS = {_F.AS_BUFFER << 3: 0, _F.AS_OFFSET << 3: 1, _F.AS_SIZE << 3: 2, _F.AS_ELEMENT_TYPE << 3: 3}


def _assigned(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(buffer id, offset, size) of a BufferAllocationProto.Assigned: four varint fields, read inline (a
    program has one per logical buffer); anything else goes through :func:`table`."""
    values = [0, 0, 0, 0]
    start = pos
    while pos < end:
        slot = _AS_KEYS.get(data[pos])
        if slot is None:
            asg = table(data, start, end, _AS_SIZE)  # the whole record, the general way
            return one(asg[_F.AS_BUFFER]), one(asg[_F.AS_OFFSET]), one(asg[_F.AS_SIZE])
        value = data[pos + 1]
        pos += 2
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
        values[slot] = value
    if pos > end:
        raise ProtoDecodeError("an assigned slice runs past its allocation")
    return to_int64(values[0]), to_int64(values[1]), to_int64(values[2])


def _peak_buffers(data: bytes, pos: int, end: int) -> tuple[int, tuple[int, ...]]:
    """(allocation index, logical buffer ids) of a BufferAssignmentProto.PeakBuffers; the common encoding
    (index, then one packed list) is read inline."""
    index = 0
    if pos < end and data[pos] == _F.PEAK_INDEX << 3:
        index = data[pos + 1]
        if index < 0x80:
            pos += 2
        elif data[pos + 2] < 0x80:  # two bytes
            index = (index & 0x7F) | data[pos + 2] << 7
            pos += 3
        else:
            index, pos = _varint(data, pos + 1)
    if pos < end and data[pos] == _F.PEAK_IDS << 3 | 2 and data[pos + 1] < 0x80 and pos + 2 + data[pos + 1] == end:
        return index, tuple(packed(data, pos + 2, end))
    pk = table(data, pos, end, _PEAK_SIZE)  # anything else, the general way
    return (index if pk[_F.PEAK_INDEX] is None else one(pk[_F.PEAK_INDEX]),
            tuple(repeated_ints(data, pk[_F.PEAK_IDS])))


def _slice_dtypes(data: bytes, allocations: list[tuple[int, int]]) -> dict[int, str]:
    """Logical buffer id -> the dtype its slice records (``Assigned.element_type``), for buffers the module
    does not describe."""
    out: dict[int, str] = {}
    for span in allocations:
        for asg_span in table(data, span[0], span[1], _AL_SIZE)[_F.AL_ASSIGNED] or ():
            asg = table(data, asg_span[0], asg_span[1], _AS_SIZE)
            if asg[_F.AS_ELEMENT_TYPE] is not None:
                out[one(asg[_F.AS_BUFFER])] = DTYPES.get(one(asg[_F.AS_ELEMENT_TYPE]), "unknown")
    return out
