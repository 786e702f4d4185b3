"""The heads of a serialized ``HloModuleProto``'s computations — name, id, root id — read without decoding their
instructions (:mod:`xlakit.memory._hlo_module` decodes those on demand): forwards, stepping over the instruction
records (:func:`_computation_head`), or from the computation's last fields read backwards (:func:`_quick_head`), for
all computations at once with numpy (:func:`_quick_heads`: a large module has thousands, mostly fusion bodies);
:func:`_heads` gives them by id. :func:`_head` reads a computation's root (its last record): id and opcode.
"""

from __future__ import annotations

import itertools
from typing import Any

from xlakit.memory._proto import ProtoDecodeError, _varint
from xlakit.memory._xla_fields import _F

__all__: list[str] = []  # read by xlakit.memory._hlo_module only


_COMP_NAME_KEY, _INSTRUCTION_KEY = _F.COMP_NAME << 3 | 2, _F.COMP_INSTRUCTIONS << 3 | 2
_COMP_ID_KEY, _COMP_ROOT_KEY = _F.COMP_ID << 3, _F.COMP_ROOT_ID << 3


def _computation_head(data: bytes, pos: int, end: int) -> tuple[str, int, int, tuple[int, int] | None]:
    """(name, id, root id, span of the last instruction record) of the HloComputationProto at
    ``data[pos:end]``, stepping over its instruction records unread."""
    name, cid, root, last_record = "", 0, 0, None
    try:
        while pos < end:
            key = data[pos]
            if key < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes
                key = (key & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                key, pos = _varint(data, pos)
            wire = key & 7
            if wire == 2:
                size = data[pos]
                if size < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    size = (size & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    size, pos = _varint(data, pos)
                if key == _INSTRUCTION_KEY:
                    last_record = (pos, pos + size)
                elif key == _COMP_NAME_KEY:
                    name = data[pos:pos + size].decode("utf-8", errors="replace")
                pos += size
            elif wire == 0:
                value, pos = _varint(data, pos)
                if key == _COMP_ID_KEY:
                    cid = value
                elif key == _COMP_ROOT_KEY:
                    root = value
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ProtoDecodeError(f"field {key >> 3}: unsupported wire type {wire}")
    except IndexError:
        raise ProtoDecodeError("truncated computation") from None
    if pos > end:
        raise ProtoDecodeError("a computation's record runs past its end")
    return name, cid, root, last_record


_COMP_TAIL_KEYS = (_COMP_ROOT_KEY, _COMP_ID_KEY)  # the last two fields XLA writes (fields 5 and 6)
_COMP_FLAG_KEY = 7 << 3  # is_fusion_computation, written after them when set


def _quick_head(data: bytes, start: int, end: int) -> tuple[str, int, int, None] | None:
    """(name, id, root id, None) of the HloComputationProto at ``data[start:end]`` without stepping over its
    instructions: the name is its first record and the id and root id its last ones (XLA writes fields in order:
    ..., id, root id[, is_fusion_computation]), read backwards — a varint's bytes before its last are all >= 0x80,
    so the one-byte key before it is the first byte below 0x80. Trusted only when the root's id carries the
    computation's id in its high 32 bits, as current XLA numbers instructions; else None (read it forwards)."""
    if end - start < 6 or data[start] != _COMP_NAME_KEY or data[start + 1] >= 0x80:
        return None
    found: list[int] = []
    pos = end
    while len(found) < 2:
        last = pos - 1
        if last <= start or data[last] >= 0x80:
            return None
        first = last
        while data[first - 1] >= 0x80:
            first -= 1
            if last - first > 9:
                return None
        key_at = first - 1
        value = 0
        for shift, b in enumerate(data[first:last + 1]):
            value |= (b & 0x7F) << (7 * shift)
        key = data[key_at]
        if key == _COMP_FLAG_KEY and not found and pos == end:
            pos = key_at  # is_fusion_computation: stepped over
            continue
        if key != _COMP_TAIL_KEYS[len(found)]:
            return None
        found.append(value)
        pos = key_at
    root, cid = found
    if cid <= 0 or root >> 32 != cid:
        return None
    name_end = start + 2 + data[start + 1]
    return data[start + 2:name_end].decode("utf-8", errors="replace"), cid, root, None


def _quick_heads(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[str, int, int, None] | None]:
    """:func:`_quick_head` of every computation at ``spans`` at once: the varints of their last fields are found
    and valued with numpy (a large module has thousands of computations, mostly fusion bodies). A computation
    this reads differently from :func:`_quick_head` in any way (its tail is not the plain ``id, root id[, flag]``
    of one-byte keys, a varint of ten bytes) gets that function's answer instead."""
    import numpy as np

    n = len(spans)
    if not n:
        return []
    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    raw = np.frombuffer(data, dtype=np.uint8)
    top = len(raw) - 1
    ok = ((ends - starts >= 6) & (raw[np.minimum(starts, top)] == _COMP_NAME_KEY)
          & (raw[np.minimum(starts + 1, top)] < 0x80))
    # the optional is_fusion_computation flag: ``0x38, v`` with v < 0x80 right at the end, stepped over
    flag = ok & (raw[ends - 2] == _COMP_FLAG_KEY) & (raw[ends - 1] < 0x80) & (raw[ends - 3] < 0x80)
    pos = np.where(flag, ends - 2, ends)
    values = []
    for key in _COMP_TAIL_KEYS:  # read backwards: the root id, then the computation's id
        last = pos - 1
        ok &= (last > starts) & (raw[np.maximum(last, 0)] < 0x80)
        first = last.copy()
        for _ in range(9):  # a varint's bytes before its last are >= 0x80
            more = ok & (raw[np.maximum(first - 1, 0)] >= 0x80)
            if not more.any():
                break
            first[more] -= 1
        ok &= raw[np.maximum(first - 1, 0)] < 0x80  # no longer than 10 bytes, and a key before it
        ok &= last - first < 9  # 10 bytes may pass 64 bits: left to the scalar reader
        key_at = np.maximum(first - 1, 0)
        ok &= raw[key_at] == key
        value = np.zeros(n, dtype=np.uint64)
        for shift in range(9):
            at = first + shift
            inside = ok & (at <= last)
            if not inside.any():
                break
            value[inside] |= (raw[at[inside]] & 0x7F).astype(np.uint64) << np.uint64(7 * shift)
        values.append(value)
        pos = key_at
    root, cid = values
    ok &= (cid > 0) & (cid < (1 << 31)) & ((root >> np.uint64(32)) == cid)
    names = _names(data, starts, raw[np.minimum(starts + 1, top)])
    out: list[tuple[str, int, int, None] | None] = list(zip(names, cid.tolist(), root.tolist(), itertools.repeat(None)))
    for k in np.flatnonzero(~ok).tolist():
        out[k] = _quick_head(data, *spans[k])
    return out


def _names(data: bytes, starts: Any, sizes: Any) -> list[str]:
    """The names (field 1, first) of the computations at ``starts``, ``sizes`` bytes each, decoded by C-level
    ``map``."""
    import numpy as np

    begin = (starts + 2).tolist()
    raw = list(map(data.__getitem__, map(slice, begin, (starts + 2 + sizes.astype(np.int64)).tolist())))
    try:
        return list(map(bytes.decode, raw))
    except UnicodeDecodeError:
        return [name.decode("utf-8", errors="replace") for name in raw]


def _heads(data: bytes, spans: list[tuple[int, int]]) -> dict[int, tuple[str, int, int, int, tuple[int, int] | None]]:
    """Computation id -> ``(name, start, end, root id, span of its last instruction or None)`` of the computations
    at ``spans`` (:func:`_quick_heads`, else :func:`_computation_head`), in order (a later one of an id wins)."""
    heads = _quick_heads(data, spans)
    if heads and None not in heads:  # all read at once (current XLA): made by C-level zip
        names, ids, roots, _none = zip(*heads, strict=True)
        starts, ends = zip(*spans, strict=True)
        return dict(zip(ids, zip(names, starts, ends, roots, itertools.repeat(None), strict=False), strict=True))
    ids, made = [], []
    for (start, end), head in zip(spans, heads, strict=True):
        name, cid, root, last_record = head or _computation_head(data, start, end)
        ids.append(cid)
        made.append((name, start, end, root, last_record))
    return dict(zip(ids, made, strict=True))


_INS_OPCODE_KEY = _F.INS_OPCODE << 3 | 2


def _head(data: bytes, pos: int, end: int) -> tuple[int, str]:
    """(id, opcode) of the HloInstructionProto at ``data[pos:end]`` (a computation's root: its last record), stepping
    over everything else."""
    opcode = ""
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:  # two bytes
            key = (key & 0x7F) | data[pos + 1] << 7
            pos += 2
        else:
            key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 2:
            size = data[pos]
            if size < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes
                size = (size & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                size, pos = _varint(data, pos)
            if key == _INS_OPCODE_KEY:
                opcode = data[pos:pos + size].decode("utf-8", errors="replace")
            pos += size
        elif wire == 0:
            value, pos = _varint(data, pos)
            if key >> 3 == _F.INS_ID:
                return value, opcode
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtoDecodeError(f"field {key >> 3}: unsupported wire type {wire}")
    return 0, opcode
