"""Reading many small protobuf records made only of varint fields, with numpy instead of a Python loop per field.

A buffer assignment holds one ``LogicalBufferProto`` per logical buffer and one ``BufferAllocationProto`` per
allocation (tens of thousands in a large program), and as XLA writes them nearly every field is a varint or a
message of varints: an id, a size, flags, the ``defined_at`` location (an instruction id), the ``assigned``
slices (buffer id, offset, size). Every byte of such a record is part of a varint (a byte ``>= 0x80`` continues
one, a byte ``< 0x80`` ends it), so the varints of thousands of records are found and valued at once, and they
alternate key, value (a nested message's length is its key's value; its fields follow as pairs of their own).

:func:`pairs` gives those (key, value) pairs with the record and the bytes they come from; :func:`levels` says
which nested message each pair lies in and which records are read here. A record whose bytes are not such a
sequence — a string or a packed repeated field (a location's shape index, a parameter's shape index), a key the
caller does not expect or twice, a nested message not tiled exactly by its pairs — is marked ``bad``, and the
caller reads it with the per-field reader (:mod:`xlakit.memory._assignment_decode`). What this reads is therefore
exactly what that reader reads. :func:`packed_ints` and :func:`packed_many` value packed ids (a schedule's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["Pairs", "pairs", "levels", "packed_ints", "packed_many"]


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


def pairs(data: bytes, spans: Any) -> Pairs:
    """The pairs of the records at ``spans`` (``(start, end)`` offsets into ``data``, in order, not overlapping,
    each after the varint length that delimits it; a sequence of pairs or an ``(n, 2)`` array); a record that is not
    a whole number of (key, value) varint pairs, or has a varint that does not fit 64 bits, is ``bad``."""
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
    # Each record's varints: those that start inside it (a record starts right after its length, so a varint
    # starts there); the last must end at the record's end.
    begin = np.searchsorted(first, starts - lo)
    stop = np.searchsorted(first, ends - lo)
    count = stop - begin
    bad |= (count % 2 == 1) | (count == 0)
    bad[~bad] |= (first[begin[~bad]] != (starts - lo)[~bad]) | (last[stop[~bad] - 1] != (ends - lo)[~bad] - 1)
    # a varint of more than 10 bytes, or of 10 whose last byte passes 64 bits
    too_long = np.flatnonzero((length > 10) | ((length == 10) & (raw[last] > 1)))
    if len(too_long):
        at = np.searchsorted(starts - lo, first[too_long], side="right") - 1
        bad[at[at >= 0]] = True
    good = np.flatnonzero(~bad)
    count = count[good]
    total = int(count.sum())
    # the varints of the good records, in order: record k's are begin[k] ... stop[k] - 1
    taken = np.arange(total, dtype=np.int64) + np.repeat(begin[good] - (np.cumsum(count) - count), count)
    # Value them a byte at a time: most take one or two bytes, ids five.
    at = first[taken]
    value = raw[at].astype(np.uint64) & np.uint64(0x7F)
    more = np.flatnonzero(length[taken] > 1)
    shift = 7
    while len(more):
        value[more] |= (raw[at[more] + shift // 7] & 0x7F).astype(np.uint64) << np.uint64(shift)
        shift += 7
        more = more[length[taken[more]] > shift // 7]
    keys, values = taken[0::2], taken[1::2]
    return Pairs(np.repeat(good, count // 2), value[0::2].astype(np.int64), value[1::2], first[keys] + lo,
                 last[values] + 1 + lo, bad)


def _none(n: int) -> Pairs:
    import numpy as np

    empty = np.zeros(0, dtype=np.int64)
    return Pairs(empty, empty, empty.astype(np.uint64), empty, empty, np.ones(n, dtype=bool))


def levels(found: Pairs, opener_key: int, top_keys: tuple[int, ...], inner_keys: tuple[int, ...],
           repeated: bool = False) -> tuple[Any, Any]:
    """``(inside, good)``: which opener (a pair whose key is ``opener_key``, opening a nested message of varint
    pairs) each pair of ``found`` lies inside (-1: the record's own level), and per pair whether its record is read
    with numpy: a record is when every pair at its own level has a key of ``top_keys``, every pair inside an opener
    one of ``inner_keys``, no key repeats where it lies (but the opener's, when ``repeated``: a repeated message
    field), no value needs more than 63 bits, and each nested message is tiled exactly by the pairs inside it (no
    opener inside another). The keys must have distinct field numbers, at most 62."""
    import numpy as np

    record, key, value, start, end = found.record, found.key, found.value, found.start, found.end
    bad = found.bad.copy()
    n = len(key)
    if not n:
        return np.full(0, -1, dtype=np.int64), np.zeros(0, dtype=bool)
    # A record's pairs tile its bytes, so the pairs inside an opener are the ones right after it that start
    # before its payload ends (payload: from the opener pair's end, its value bytes long).
    opens = key == opener_key
    index = np.arange(n, dtype=np.int64)
    last_open = np.maximum.accumulate(np.where(opens, index, -1))
    near = np.maximum(last_open, 0)
    payload_end = end + value.astype(np.int64)
    inside = np.where((last_open >= 0) & ~opens & (record == record[near]) & (start < payload_end[near]), near, -1)
    at = np.flatnonzero(opens)
    if len(at):
        # an opener inside the previous one
        prev = np.maximum(last_open[np.maximum(at - 1, 0)], 0)
        nested_open = (at > 0) & (last_open[np.maximum(at - 1, 0)] >= 0) & (record[prev] == record[at]) & (
            start[at] < payload_end[prev])
        # the last pair inside each opener ends where its payload does (or it is empty)
        held = np.bincount(inside[inside >= 0], minlength=n)[at]
        closing = np.minimum(at + held, n - 1)
        untiled = np.where(held > 0, end[closing] != payload_end[at], value[at] != 0)
        bad[record[at[nested_open | untiled]]] = True
    top = inside < 0
    allowed_top, allowed_inner = np.zeros(256, dtype=bool), np.zeros(256, dtype=bool)
    allowed_top[list(top_keys)] = True
    allowed_inner[list(inner_keys)] = True
    small = np.clip(key, 0, 255)
    wrong = (key != small) | np.where(top, ~allowed_top[small], ~allowed_inner[small])
    wrong |= value >= np.uint64(1 << 63)  # a negative int64: read by the per-field reader
    bad[record[wrong]] = True
    # A key twice at one level: over each level's pairs (consecutive in byte order), the sum of 1 << field differs
    # from their bitwise or.
    weight = np.int64(1) << np.minimum(small >> 3, 62)
    for mask, group in ((top & ~opens if repeated else top, record), (~top, inside)):
        where = np.flatnonzero(mask)
        if len(where):
            groups = group[where]
            first = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))
            w = weight[where]
            twice = np.add.reduceat(w, first) != np.bitwise_or.reduceat(w, first)
            bad[record[where[first[twice]]]] = True
    return inside, ~bad[record]


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


def packed_many(data: bytes, spans: Sequence[tuple[int, int]]) -> list[list[int]]:
    """:func:`packed_ints` of each payload at ``spans`` (a schedule's sequences: one per scheduled computation,
    hundreds in a large program), valued together: one numpy pass instead of one per payload. Payloads this does
    not read as :func:`xlakit.memory._proto.packed` does (a varint past 64 bits, one cut at the payload's end) are
    left to that reader, as are a few short ones."""
    import numpy as np

    from xlakit.memory._proto import packed

    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    sizes = bounds[:, 1] - bounds[:, 0]
    total = int(sizes.sum()) if len(bounds) else 0
    if total <= _SHORT or (sizes < 0).any():
        return [packed(data, start, end) for start, end in spans]
    before = np.cumsum(sizes) - sizes  # where each payload begins in the joined bytes
    raw = np.frombuffer(data, dtype=np.uint8)[np.repeat(bounds[:, 0] - before, sizes) + np.arange(total)]
    if (raw[(before + sizes - 1)[sizes > 0]] >= 0x80).any():  # a varint cut at a payload's end
        return [packed(data, start, end) for start, end in spans]
    last = np.flatnonzero(raw < 0x80)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    length = last - first + 1
    owner = np.searchsorted(before + sizes, last, side="right")
    wide = np.zeros(len(bounds), dtype=bool)  # past 64 bits: as the reader reads it
    wide[owner[(length > 10) | ((length == 10) & (raw[last] > 1))]] = True
    value = (raw[first] & 0x7F).astype(np.uint64)
    more = np.flatnonzero((length > 1) & ~wide[owner])
    for k in range(1, 10):
        if not len(more):
            break
        value[more] |= (raw[first[more] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        more = more[length[more] > k + 1]
    every = value.view(np.int64).tolist()  # int64 wraps as the reader does
    at = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=len(bounds))))).tolist()
    out = list(map(every.__getitem__, map(slice, at[:-1], at[1:])))
    for k in np.flatnonzero(wide).tolist():
        out[k] = packed(data, *spans[k])
    return out
