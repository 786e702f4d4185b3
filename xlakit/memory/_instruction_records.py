"""Reading a computation's ``HloInstructionProto`` records all at once with numpy, instead of a Python loop per field.

An entry computation holds thousands of instruction records of about ten fields each; a Python loop over their
bytes (:func:`_instruction`, the reader per record) was half of decoding a module. Here every record is walked in
lockstep: one numpy step reads the next field (key, then value or length) of every record still open, so a
computation costs as many steps as its longest record has fields. What is kept per record is what that reader
keeps — id, name, opcode, operand and called-computation ids, parameter number, the spans of the shape and the
``OpMetadata`` — and, where the metadata has the common encoding (an op name, then a stack frame id of one or two
bytes), its op name's span and frame id. A record this does not read exactly as that reader would (a key not above
the one before it — XLA writes fields in order, so a key twice, which the reader keeps the last of, is among them —,
an unpacked repeated field, a varint of ten bytes, a group, a record that runs past its end) is marked ``bad``: the
caller reads it with that reader, which also says what is wrong with a malformed one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from xlakit.memory._assignment_types import _Instr
from xlakit.memory._proto import ProtoDecodeError, _varint, packed
from xlakit.memory._xla_fields import _F

__all__ = ["instruction_fields", "InstructionColumns", "InstructionRows"]  # and _instruction, _opcodes: _hlo_module's

_NAME, _OPCODE, _SHAPE, _METADATA = (f << 3 | 2 for f in (_F.INS_NAME, _F.INS_OPCODE, _F.INS_SHAPE, _F.INS_METADATA))
_ID, _PARAMETER_NUMBER, _TUPLE_INDEX = _F.INS_ID << 3, _F.INS_PARAMETER_NUMBER << 3, _F.INS_TUPLE_INDEX << 3
_OPERANDS, _CALLED = _F.INS_OPERANDS << 3 | 2, _F.INS_CALLED << 3 | 2
_UNPACKED = (_F.INS_OPERANDS << 3, _F.INS_CALLED << 3)  # a repeated field written unpacked: the per-record reader
_OP_NAME_KEY, _FRAME_KEY = _F.MD_OP_NAME << 3 | 2, _F.MD_STACK_FRAME_ID << 3  # OpMetadata's keys
_WIDE = 10  # bytes looked at for one varint
_GAP = 1 << 12  # bytes between two records from which they are copied apart


def _slots() -> Any:
    """Key -> the slot :func:`instruction_fields` keeps its field in (-1: not kept), for keys of up to two bytes."""
    import numpy as np

    out = np.full(1 << 14, -1, dtype=np.int64)
    out[[_NAME, _OPCODE, _SHAPE, _METADATA, _ID, _PARAMETER_NUMBER, _TUPLE_INDEX]] = np.arange(7)
    return out


_SLOTS: Any = None  # made when first needed: importing this module imports no numpy
_OPCODES: dict[bytes, str] = {}  # an opcode's bytes -> its name: a program has a few dozen opcodes
_OPCODE_KEY = _OPCODE  # for _hlo_module


def _instruction(data: bytes, pos: int, end: int, cid: int) -> tuple[int, _Instr]:
    """``(id, instruction)`` from the HloInstructionProto at ``data[pos:end]``: name, opcode, operands, called
    computations, parameter number; the spans of its shape and metadata, read later. Keys of one or two bytes and
    varints of any length are read inline (a large module has ~10^5 instruction records)."""
    name = opcode = ""
    iid = pnum = tidx = 0  # proto3 leaves out fields equal to 0
    operands: list[int] = []
    called: list[int] = []
    shape_start = shape_end = meta_start = meta_end = -1  # absent
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:  # fields 16-2047 (id, operand_ids, called_computation_ids...)
            key = (key & 0x7F) | data[pos + 1] << 7
            pos += 2
        else:
            key, pos = _varint(data, pos)
        wire = key & 7
        if wire != 0 and wire != 2:
            if wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ProtoDecodeError(f"field {key >> 3}: unsupported wire type {wire}")
            continue
        value = data[pos]  # a varint's value, or a length
        pos += 1
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
        if wire == 2:
            stop = pos + value
            if key == _NAME:
                name = data[pos:stop].decode("utf-8", errors="replace")
            elif key == _OPCODE:
                raw = data[pos:stop]
                opcode = _OPCODES.get(raw) or _OPCODES.setdefault(raw, raw.decode("utf-8", errors="replace"))
            elif key == _SHAPE:
                shape_start, shape_end = pos, stop
            elif key == _METADATA:
                meta_start, meta_end = pos, stop
            elif key == _OPERANDS:
                operands += packed(data, pos, stop)
            elif key == _CALLED:
                called += packed(data, pos, stop)
            pos = stop
        else:
            if key == _ID:
                iid = value
            elif key == _PARAMETER_NUMBER:
                pnum = value
            elif key == _TUPLE_INDEX:
                tidx = value
            elif key == _UNPACKED[0]:  # a repeated field written unpacked
                operands.append(value)
            elif key == _UNPACKED[1]:
                called.append(value)
    if pos > end:
        raise ProtoDecodeError("an instruction's record runs past its end")
    return iid, _Instr(name, opcode, cid, None, tuple(operands), tuple(called), None, 0,
                       pnum if opcode == "parameter" else -1, (data, meta_start, meta_end, shape_start, shape_end),
                       tidx if opcode == "get-tuple-element" else -1)


def _varints(buf: Any, at: Any) -> tuple[Any, Any]:
    """``(value, length)`` of the varint starting at each of ``at`` in ``buf`` (padded with ``_WIDE`` zero bytes),
    valued a byte at a time over those that go on (most take one byte, ids five or six); length 0 where it has ten
    bytes or more (its value may pass 63 bits: not read here)."""
    import numpy as np

    first = buf[at]
    value = (first & 0x7F).astype(np.int64)
    length = np.ones(len(at), dtype=np.int64)
    more = np.flatnonzero(first >= 0x80)
    for k in range(1, _WIDE - 1):
        if not len(more):
            return value, length
        b = buf[at[more] + k]
        value[more] |= (b & 0x7F).astype(np.int64) << (7 * k)
        length[more] += 1
        more = more[b >= 0x80]
    length[more] = 0
    return value, length


class InstructionColumns(NamedTuple):
    """What :func:`instruction_fields` reads, one entry per record (numpy arrays; offsets into the data): ``id``;
    the spans ``name``, ``opcode``, ``shape``, ``metadata`` as start and end arrays (-1 where the field is absent);
    ``parameter_number`` (0 where absent); ``operands`` and ``called``: all records' ids in one array, record ``r``'s
    at ``[at[r]:at[r + 1]]`` of ``operands_at`` / ``called_at``; ``op_name`` start and end and ``frame_id`` where
    ``op_name_read`` (the metadata's common encoding); ``bad``: records left to the per-record reader;
    ``tuple_index`` (-1 where absent)."""

    id: Any
    name_start: Any
    name_end: Any
    opcode_start: Any
    opcode_end: Any
    shape_start: Any
    shape_end: Any
    metadata_start: Any
    metadata_end: Any
    parameter_number: Any
    operands: Any
    operands_at: Any
    called: Any
    called_at: Any
    op_name_read: Any
    op_name_start: Any
    op_name_end: Any
    frame_id: Any
    bad: Any
    tuple_index: Any = None  # a get-tuple-element's element (-1 where absent)


class InstructionRows:
    """What the instructions made from one :class:`InstructionColumns` read when first asked, by row: the spans of
    each one's metadata and shape in ``data`` (``raw``) and its called computations (a slice of one tuple)."""

    __slots__ = ("data", "meta_start", "meta_end", "shape_start", "shape_end", "_called", "_called_at")

    def __init__(self, data: bytes, f: InstructionColumns) -> None:
        self.data = data
        self.meta_start, self.meta_end = f.metadata_start.tolist(), f.metadata_end.tolist()
        self.shape_start, self.shape_end = f.shape_start.tolist(), f.shape_end.tolist()
        self._called, self._called_at = tuple(f.called.tolist()), f.called_at.tolist()

    def raw(self, row: int) -> tuple[bytes, int, int, int, int]:
        return self.data, self.meta_start[row], self.meta_end[row], self.shape_start[row], self.shape_end[row]

    def called(self, row: int) -> tuple[int, ...]:
        return self._called[self._called_at[row]:self._called_at[row + 1]]


def instruction_fields(data: bytes, records: list[tuple[int, int]]) -> InstructionColumns:
    """The fields of the HloInstructionProto records at ``records`` (``(start, end)`` offsets into ``data``, in
    order, not overlapping; at least one), read together: :class:`InstructionColumns`."""
    import numpy as np

    global _SLOTS
    if _SLOTS is None:
        _SLOTS = _slots()
    n = len(records)
    bounds = np.asarray(records, dtype=np.int64).reshape(-1, 2)
    # The records' bytes copied run by run: records far apart (the entry and the small computations read with it)
    # copied without the bytes between them. A read past a record's end, which differs, makes the record bad.
    starts, ends = bounds[:, 0], bounds[:, 1]
    cut = np.flatnonzero((starts[1:] < ends[:-1]) | (starts[1:] - ends[:-1] > _GAP)) + 1
    first, last = np.concatenate(([0], cut)), np.concatenate((cut, [n])) - 1
    run_lo, run_hi = starts[first], np.maximum(ends[last], starts[first])
    placed = np.cumsum(run_hi - run_lo) - (run_hi - run_lo)  # where each run begins in buf
    total = int((run_hi - run_lo).sum())
    buf = np.zeros(total + 2 * _WIDE, dtype=np.uint8)  # zeros past the end: a read there ends a varint
    for lo, hi, at in zip(run_lo.tolist(), run_hi.tolist(), placed.tolist(), strict=True):
        buf[at:at + hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
    shift = np.repeat(run_lo - placed, last - first + 1)  # a record's offset in data less its offset in buf
    limit = total + _WIDE  # a position past every record, still inside buf
    pos, end = starts - shift, ends - shift
    bad = end < pos
    open_ = np.flatnonzero(pos < end)
    got: list[tuple[Any, Any, Any, Any]] = []  # per step: record, key, value (a length for wire 2), payload start
    previous = np.full(n, -1, dtype=np.int64)  # each record's key of the step before
    while len(open_):
        at = pos[open_]
        # a key of one or two bytes (fields up to 2047); a longer one leaves the record to the reader
        b0, b1 = buf[at].astype(np.int64), buf[at + 1]
        two = b0 >= 0x80
        key = np.where(two, (b0 & 0x7F) | (b1.astype(np.int64) << 7), b0)
        # XLA writes fields in order: a key not above the one before (a key twice, which the reader keeps the last
        # of or joins) leaves the record to the reader
        bad[open_[key <= previous[open_]]] = True
        previous[open_] = key
        after = at + 1 + two
        wire = key & 7
        value, value_len = _varints(buf, after)
        length = wire == 2  # a length-delimited field: its payload stepped over
        step = after + value_len + np.where(length, value, 0)
        # the reader's alone: a key of three bytes, a varint of ten, a fixed-width field, a group, a length past the
        # records
        wrong = (two & (b1 >= 0x80)) | (value_len == 0) | ((wire != 0) & ~length) | (length & (value > limit))
        bad[open_[wrong]] = True
        got.append((open_, key, value, after + value_len))
        pos[open_] = step
        open_ = open_[(step < end[open_]) & ~wrong]
    bad |= pos > end
    record, key, value, start = (np.concatenate([g[k] for g in got]) for k in range(4))
    bad[record[(key == _UNPACKED[0]) | (key == _UNPACKED[1])]] = True  # a repeated field unpacked

    # The fields kept, each record's in one scatter: the start and end of name, opcode, shape, metadata (offsets
    # into data; -1 where absent), then id, parameter number (0 where absent) and tuple index (-1 where absent).
    slot = _SLOTS[np.minimum(key, len(_SLOTS) - 1)]
    hit = np.flatnonzero(slot >= 0)
    where, slot, size = record[hit], slot[hit], value[hit]
    at = start[hit] + shift[where]
    spans = np.full((2, 4, n), -1, dtype=np.int64)
    text = slot < 4
    spans[0, slot[text], where[text]] = at[text]
    spans[1, slot[text], where[text]] = at[text] + size[text]
    scalars = np.zeros((3, n), dtype=np.int64)
    scalars[2] = -1
    scalars[slot[~text] - 4, where[~text]] = size[~text]

    def ids() -> tuple[Any, Any, Any, Any]:
        """The ids packed in the operand and the called-computation fields, valued together: all records' operands
        in one array, record by record, and where each record's begin (``offsets[r]:offsets[r + 1]``); then the
        same of the called computations."""
        called = key == _CALLED
        mask = ((key == _OPERANDS) | called) & ~bad[record]  # a bad record's lengths may be anything
        group = record[mask] + n * called[mask]  # record r's operands: group r, its called computations: n + r
        order = np.argsort(group, kind="stable")
        where, begin, size = group[order], start[mask][order], value[mask][order]
        offsets = np.zeros(2 * n + 1, dtype=np.int64)
        values = np.zeros(0, dtype=np.int64)
        total = int(size.sum())
        before = np.cumsum(size) - size  # where each payload begins in the joined bytes
        raw = buf[np.repeat(begin - before, size) + np.arange(total)]
        if total and (raw[-1] >= 0x80 or (raw[(before + size - 1)[size > 0]] >= 0x80).any()):
            bad[where % n] = True  # a payload that ends inside a varint: all of them to the reader
        elif total:
            last = np.flatnonzero(raw < 0x80)  # the byte that ends each varint
            first = np.empty_like(last)
            first[0] = 0
            first[1:] = last[:-1] + 1
            length = last - first + 1
            owner = where[np.searchsorted(before + size, last, side="right")]
            bad[owner[length > 9] % n] = True  # may pass 63 bits: the reader's
            # valued a byte at a time (ids take five or six), up to the ninth
            values = (raw[first] & 0x7F).astype(np.int64)
            more = np.flatnonzero(length > 1)
            for k in range(1, 9):
                if not len(more):
                    break
                values[more] |= (raw[first[more] + k] & 0x7F).astype(np.int64) << (7 * k)
                more = more[length[more] > k + 1]
            np.cumsum(np.bincount(owner, minlength=2 * n), out=offsets[1:])
        split = int(offsets[n])
        return values[:split], offsets[:n + 1], values[split:], offsets[n:] - split

    name, opcode, shape, meta = zip(spans[0], spans[1], strict=True)
    operands, operands_at, called, called_at = ids()
    # OpMetadata as XLA writes it for JAX: an op name (one-byte length), then no frame id or one of 1-2 bytes
    meta_start, meta_end = meta[0] - shift, meta[1] - shift
    has_meta = meta[0] >= 0
    m0 = np.where(has_meta, np.minimum(meta_start, limit), 0)
    name_len = buf[m0 + 1].astype(np.int64)
    stop = m0 + 2 + name_len
    stop_c = np.minimum(stop, limit)
    f1, f2 = buf[stop_c + 1].astype(np.int64), buf[stop_c + 2].astype(np.int64)
    common = has_meta & (buf[m0] == _OP_NAME_KEY) & (name_len < 0x80)
    plain = stop == meta_end
    frame1 = (stop + 2 == meta_end) & (buf[stop_c] == _FRAME_KEY) & (f1 < 0x80)
    frame2 = (stop + 3 == meta_end) & (buf[stop_c] == _FRAME_KEY) & (f1 >= 0x80) & (f2 < 0x80)
    read = common & (plain | frame1 | frame2)
    frame = np.where(read & frame1, f1, np.where(read & frame2, (f1 & 0x7F) | (f2 << 7), 0))
    return InstructionColumns(scalars[0], *name, *opcode, *shape, *meta, scalars[1], operands, operands_at, called,
                              called_at, read, np.where(read, m0 + 2 + shift, 0), np.where(read, stop + shift, 0),
                              frame, bad, scalars[2])


def _opcodes(data: bytes, start: Any, end: Any) -> tuple[list[str], Any, Any]:
    """(opcode, is it ``parameter``, is it ``get-tuple-element``) of the records whose opcodes are at ``start`` to
    ``end`` (-1 where absent: ""): a program has a few dozen distinct opcodes, so each record's (up to 24 bytes) is
    hashed with numpy and each distinct one decoded once, instead of a bytes object per record; the rows a hash
    groups are checked equal (else, or for a longer opcode, a bytes object per record)."""
    import numpy as np

    size = end - start
    if len(size) and 0 <= size.min() and size.max() <= 24 and end.max() <= len(data):
        raw = np.frombuffer(data, dtype=np.uint8)
        wide = np.arange(24)
        grid = raw[np.minimum(np.maximum(start, 0)[:, None] + wide, len(raw) - 1)]
        grid[wide >= size[:, None]] = 0
        words = grid.view(np.uint64)
        hashed = (words[:, 0] * np.uint64(0x9E3779B97F4A7C15) + words[:, 1] * np.uint64(0xC2B2AE3D27D4EB4F)
                  + words[:, 2] * np.uint64(0x165667B19E3779F9) + size.astype(np.uint64))
        _, first, group = np.unique(hashed, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        if (size[first][group] == size).all() and (grid[first][group] == grid).all():
            names = []
            for k in first.tolist():
                name = data[int(start[k]):int(end[k])] if size[k] else b""
                names.append(_OPCODES.get(name) or _OPCODES.setdefault(name, name.decode("utf-8", errors="replace")))
            kinds = np.array(names, dtype=object)
            return (kinds[group].tolist(), (kinds == "parameter")[group] & (size == 9),
                    (kinds == "get-tuple-element")[group] & (size == 17))
    raw_opcodes = list(map(data.__getitem__, map(slice, start.tolist(), end.tolist())))
    for name in set(raw_opcodes).difference(_OPCODES):
        _OPCODES[name] = name.decode("utf-8", errors="replace")
    n = len(raw_opcodes)
    return (list(map(_OPCODES.__getitem__, raw_opcodes)),
            np.fromiter(map(b"parameter".__eq__, raw_opcodes), dtype=bool, count=n),
            np.fromiter(map(b"get-tuple-element".__eq__, raw_opcodes), dtype=bool, count=n))
