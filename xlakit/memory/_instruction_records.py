"""Reading a computation's ``HloInstructionProto`` records all at once with numpy, instead of a Python loop per field.

An entry computation holds thousands of instruction records of about ten fields each; a Python loop over their
bytes (:func:`xlakit.memory._hlo_module._instruction`) was half of decoding a module. Here every record is walked in
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

from xlakit.memory._xla_fields import _F

__all__ = ["instruction_fields", "InstructionColumns"]

_NAME, _OPCODE, _SHAPE, _METADATA = (f << 3 | 2 for f in (_F.INS_NAME, _F.INS_OPCODE, _F.INS_SHAPE, _F.INS_METADATA))
_ID, _PARAMETER_NUMBER, _TUPLE_INDEX = _F.INS_ID << 3, _F.INS_PARAMETER_NUMBER << 3, _F.INS_TUPLE_INDEX << 3
_OPERANDS, _CALLED = _F.INS_OPERANDS << 3 | 2, _F.INS_CALLED << 3 | 2
_UNPACKED = (_F.INS_OPERANDS << 3, _F.INS_CALLED << 3)  # a repeated field written unpacked: the per-record reader
_OP_NAME_KEY, _FRAME_KEY = _F.MD_OP_NAME << 3 | 2, _F.MD_STACK_FRAME_ID << 3  # OpMetadata's keys
_WIDE = 10  # bytes looked at for one varint


def _slots() -> Any:
    """Key -> the slot :func:`instruction_fields` keeps its field in (-1: not kept), for keys of up to two bytes."""
    import numpy as np

    out = np.full(1 << 14, -1, dtype=np.int64)
    out[[_NAME, _OPCODE, _SHAPE, _METADATA, _ID, _PARAMETER_NUMBER, _TUPLE_INDEX]] = np.arange(7)
    return out


_SLOTS: Any = None  # made when first needed: importing this module imports no numpy


def _varints(buf: Any, at: Any) -> tuple[Any, Any]:
    """``(value, length)`` of the varint starting at each of ``at`` in ``buf`` (padded with ``_WIDE`` zero bytes);
    length 0 where it has ten bytes or more (its value may pass 63 bits: not read here)."""
    import numpy as np

    b0 = buf[at].astype(np.int64)
    b1 = buf[at + 1].astype(np.int64)
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    value = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    length = np.where(one, 1, 2)
    longer = np.flatnonzero(~one & ~two)
    if len(longer):  # ids, mostly: five or six bytes
        window = buf[at[longer, None] + np.arange(_WIDE)].astype(np.int64)
        stop = window < 0x80
        size = stop.argmax(axis=1) + 1
        size[~stop.any(axis=1) | (size >= _WIDE)] = 0
        bits = (window & 0x7F) << (7 * np.arange(_WIDE))
        bits[np.arange(_WIDE) >= size[:, None]] = 0
        value[longer] = np.bitwise_or.reduce(bits, axis=1)
        length[longer] = size
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


def instruction_fields(data: bytes, records: list[tuple[int, int]]) -> InstructionColumns:
    """The fields of the HloInstructionProto records at ``records`` (``(start, end)`` offsets into ``data``, in
    order, not overlapping; at least one), read together: :class:`InstructionColumns`."""
    import numpy as np

    global _SLOTS
    if _SLOTS is None:
        _SLOTS = _slots()
    n = len(records)
    bounds = np.asarray(records, dtype=np.int64).reshape(-1, 2)
    lo, hi = int(bounds[0, 0]), int(bounds[-1, 1])
    buf = np.zeros(hi - lo + 2 * _WIDE, dtype=np.uint8)  # zeros past the end: a read there ends a varint
    buf[:hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
    limit = hi - lo + _WIDE  # a position past every record, still inside buf
    pos, end = bounds[:, 0] - lo, bounds[:, 1] - lo
    bad = end < pos
    open_ = np.flatnonzero(pos < end)
    got: list[tuple[Any, Any, Any, Any]] = []  # per step: record, key, value (a length for wire 2), payload start
    previous = np.full(n, -1, dtype=np.int64)  # each record's key of the step before
    while len(open_):
        at = pos[open_]
        key, key_len = _varints(buf, at)
        # XLA writes fields in order: a key not above the one before (a key twice, which the reader keeps the last
        # of or joins) leaves the record to the reader
        bad[open_[key <= previous[open_]]] = True
        previous[open_] = key
        after = np.minimum(at + key_len, limit)
        wire = key & 7
        value, value_len = _varints(buf, after)
        payload = after + value_len
        step = np.where(wire == 2, payload + value, np.where(wire == 1, after + 8, np.where(wire == 5, after + 4,
                                                                                           payload)))
        wrong = (key_len == 0) | ((wire != 1) & (wire != 5) & (value_len == 0)) | ((wire > 2) & (wire != 5))
        bad[open_[wrong]] = True
        got.append((open_, key, value, payload))
        pos[open_] = np.minimum(step, limit)
        open_ = open_[(pos[open_] < end[open_]) & ~wrong]
    bad |= pos > end
    record, key, value, start = (np.concatenate([g[k] for g in got]) for k in range(4))
    bad[record[(key == _UNPACKED[0]) | (key == _UNPACKED[1])]] = True  # a repeated field unpacked

    # The fields kept, each record's in one scatter: the start and end of name, opcode, shape, metadata (offsets
    # into data; -1 where absent), then id, parameter number (0 where absent) and tuple index (-1 where absent).
    slot = _SLOTS[np.minimum(key, len(_SLOTS) - 1)]
    hit = np.flatnonzero(slot >= 0)
    where, slot, at, size = record[hit], slot[hit], start[hit] + lo, value[hit]
    spans = np.full((2, 4, n), -1, dtype=np.int64)
    text = slot < 4
    spans[0, slot[text], where[text]] = at[text]
    spans[1, slot[text], where[text]] = at[text] + size[text]
    scalars = np.zeros((3, n), dtype=np.int64)
    scalars[2] = -1
    scalars[slot[~text] - 4, where[~text]] = size[~text]

    def ids(k: int) -> tuple[Any, Any]:
        """The ids packed in field key ``k``: all records' in one array, record by record, and where each
        record's begin (``offsets[r]:offsets[r + 1]``)."""
        mask = (key == k) & ~bad[record]  # a bad record's lengths may be anything
        order = np.argsort(record[mask], kind="stable")
        where, begin, size = record[mask][order], start[mask][order], value[mask][order]
        offsets = np.zeros(n + 1, dtype=np.int64)
        total = int(size.sum())
        if not total:
            return np.zeros(0, dtype=np.int64), offsets
        before = np.cumsum(size) - size  # where each payload begins in the joined bytes
        raw = buf[np.repeat(begin - before, size) + np.arange(total)]
        last = np.flatnonzero(raw < 0x80)  # the byte that ends each varint
        if raw[-1] >= 0x80 or (raw[(before + size - 1)[size > 0]] >= 0x80).any():
            bad[where] = True  # a payload that ends inside a varint: all of them to the reader
            return np.zeros(0, dtype=np.int64), offsets
        first = np.empty_like(last)
        first[0] = 0
        first[1:] = last[:-1] + 1
        length = last - first + 1
        owner = where[np.searchsorted(before + size, last, side="right")]
        bad[owner[length > 9]] = True  # may pass 63 bits: the reader's
        # valued a byte at a time (ids take five or six), up to the ninth
        values = (raw[first] & 0x7F).astype(np.int64)
        more = np.flatnonzero(length > 1)
        for k in range(1, 9):
            if not len(more):
                break
            values[more] |= (raw[first[more] + k] & 0x7F).astype(np.int64) << (7 * k)
            more = more[length[more] > k + 1]
        np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
        return values, offsets

    name, opcode, shape, meta = zip(spans[0], spans[1], strict=True)
    operands, operands_at = ids(_OPERANDS)
    called, called_at = ids(_CALLED)
    # OpMetadata as XLA writes it for JAX: an op name (one-byte length), then no frame id or one of 1-2 bytes
    meta_start, meta_end = meta[0] - lo, meta[1] - lo
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
                              called_at, read, np.where(read, m0 + 2 + lo, 0), np.where(read, stop + lo, 0), frame, bad,
                              scalars[2])
