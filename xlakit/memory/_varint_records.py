"""Reading many small protobuf records made only of varint fields, with numpy instead of a Python loop per field.

A buffer assignment holds one ``LogicalBufferProto`` per logical buffer and one ``BufferAllocationProto`` per
allocation (tens of thousands in a large program), and as XLA writes them nearly every field is a varint or a
message of varints: an id, a size, flags, the ``defined_at`` location (an instruction id), the ``assigned``
slices (buffer id, offset, size). Every byte of such a record is part of a varint (a byte ``>= 0x80`` continues
one, a byte ``< 0x80`` ends it), so the varints of thousands of records are found and valued at once, and they
alternate key, value (a nested message's length is its key's value; its fields follow as pairs of their own).

:func:`pairs` gives those (key, value) pairs with the record and the bytes they come from; :func:`nested` says
which nested message each pair lies in. A record whose bytes are not such a sequence — a string or a packed
repeated field (a location's shape index, a parameter's shape index), a key the caller does not expect, a nested
message not tiled exactly by its pairs — is marked ``bad``, and the caller reads it with the per-field reader
(:mod:`xlakit.memory._assignment_decode`). What this reads is therefore exactly what that reader reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["Pairs", "pairs", "nested", "packed_ints"]


class Pairs(NamedTuple):
    """The (key, value) pairs of the good records of a run, as numpy arrays of one entry per pair, in byte order:
    ``record`` (index into the spans given), ``key``, ``value`` (uint64; a length for a nested message), ``start``
    (offset of the key's first byte) and ``end`` (one past the value's last byte); and ``bad``, one bool per
    record: not read here (its pairs are left out)."""

    record: Any
    key: Any
    value: Any
    start: Any
    end: Any
    bad: Any


def pairs(data: bytes, spans: Sequence[tuple[int, int]]) -> Pairs:
    """The pairs of the records at ``spans`` (``(start, end)`` offsets into ``data``, in order, not overlapping,
    each after the varint length that delimits it); a record that is not a whole number of (key, value) varint
    pairs, or has a varint longer than 10 bytes, is ``bad``."""
    import numpy as np

    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    n = len(bounds)
    bad = ends <= starts
    if not n or bad.all():
        return _none(n)
    lo, hi = int(starts[0]), int(ends[-1])
    raw = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
    last = np.flatnonzero(raw < 0x80)  # one per varint, in order: the byte that ends it
    if not len(last):
        return _none(n)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    length = last - first + 1
    # The value of each varint: the 7 low bits of its bytes, least significant first (a longer one is bad below).
    within = np.arange(last[-1] + 1, dtype=np.int64) - np.repeat(first, length)
    bits = (raw[:last[-1] + 1] & 0x7F).astype(np.uint64) << (7 * np.minimum(within, 9)).astype(np.uint64)
    value = np.bitwise_or.reduceat(bits, first)
    # The varints that start inside a record; the others are the enclosing message's keys and lengths.
    record = np.searchsorted(starts - lo, first, side="right") - 1
    ok = record >= 0
    inside = ok & (first < (ends - lo)[np.where(ok, record, 0)])
    record, value, first, last, length = (a[inside] for a in (record, value, first, last, length))
    bad = bad.copy()
    bad[record[(last >= (ends - lo)[record]) | (length > 10)]] = True  # runs past its record; too long
    counts = np.bincount(record, minlength=n)
    bad |= counts % 2 == 1
    bad[(counts == 0) & (ends > starts)] = True
    # A record's bytes past its last varint (not ending one) are no varint: that record is bad.
    ends_at = np.zeros(n, dtype=np.int64)
    np.maximum.at(ends_at, record, last + 1 + lo)
    bad |= (ends_at != ends) & (counts > 0)
    keep = ~bad[record]
    record, value, first, last = record[keep], value[keep], first[keep], last[keep]
    return Pairs(record[0::2], value[0::2].astype(np.int64), value[1::2], first[0::2] + lo, last[1::2] + 1 + lo,
                 bad)


def _none(n: int) -> Pairs:
    import numpy as np

    empty = np.zeros(0, dtype=np.int64)
    return Pairs(empty, empty, empty.astype(np.uint64), empty, empty, np.ones(n, dtype=bool))


def nested(found: Pairs, opener: Any) -> tuple[Any, Any]:
    """``(inside, bad)``: for each pair, the index of the pair opening the nested message it lies in (-1: the
    record's own level), ``opener`` being a boolean mask over ``found`` of the pairs whose key opens one; and per
    record, whether a nested message there is not tiled exactly by the pairs inside it, or an opener lies inside
    another."""
    import numpy as np

    bad = np.zeros(len(found.bad), dtype=bool)
    inside = np.full(len(found.key), -1, dtype=np.int64)
    at = np.flatnonzero(opener)
    if not len(at):
        return inside, bad
    begin = found.end[at]  # a nested message starts right after its length
    finish = begin + found.value[at].astype(np.int64)
    which = np.searchsorted(begin, found.start, side="right") - 1
    cand = np.where(which >= 0, which, 0)
    hit = (which >= 0) & (found.start < finish[cand]) & (found.record == found.record[at[cand]])
    inside[hit] = at[which[hit]]
    bad[found.record[at[inside[at] >= 0]]] = True  # an opener inside another nested message
    # The pairs inside each opener must add up to its length exactly (a length past its record's end cannot).
    covered = np.zeros(len(at), dtype=np.int64)
    np.add.at(covered, which[hit], found.end[hit] - found.start[hit])
    bad[found.record[at[covered != finish - begin]]] = True
    return inside, bad


_SHORT = 256  # bytes of a packed payload below which the Python loop is faster


def packed_ints(data: bytes, start: int, end: int) -> list[int]:
    """A packed ``repeated int64`` payload at ``data[start:end]`` as signed ints, as
    :func:`xlakit.memory._proto.packed` reads it, its varints valued at once (a program's schedule: one instruction
    id of five to eight bytes per step). Malformed bytes are left to that reader, which says what is wrong, and so
    are short payloads (the schedule of a reduction's few steps), where numpy's fixed cost is more than the loop."""
    import numpy as np

    from xlakit.memory._proto import packed

    if end - start < _SHORT:
        return packed(data, start, end)
    raw = np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start)
    last = np.flatnonzero(raw < 0x80)
    if not len(raw) or not len(last) or last[-1] != len(raw) - 1:
        return packed(data, start, end)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    length = last - first + 1
    if (length > 10).any() or (raw[last[length == 10]] > 1).any():  # past 64 bits: as the reader reads it
        return packed(data, start, end)
    within = np.arange(len(raw), dtype=np.int64) - np.repeat(first, length)
    bits = (raw & 0x7F).astype(np.uint64) << (7 * within).astype(np.uint64)
    return np.bitwise_or.reduceat(bits, first).view(np.int64).tolist()  # int64 wraps as the reader does
