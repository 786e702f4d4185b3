"""A minimal reader for the protobuf wire format (no schema, no dependency).

XLA hands out its ``BufferAssignmentProto`` and ``HloModuleProto`` as serialized bytes, and jaxlib ships no
Python classes for them. Pulling in ``protobuf`` plus generated code for two messages would be heavy and
version-fragile, so this module reads the wire format directly; the typed views in
:mod:`xlakit.memory.buffer_assignment` name the fields by number (from XLA's public ``hlo.proto``).

Wire format: a message is a sequence of ``(key, value)`` records with ``key = field_number << 3 | wire_type``
as a base-128 varint. Wire types: 0 varint, 1 fixed 64-bit, 2 length-delimited (bytes, strings, nested
messages, packed repeated scalars), 5 fixed 32-bit. Unknown fields are kept, so a newer XLA that adds fields
still decodes.

Two ways to read: :class:`Message` (:func:`parse`) groups every record of a message by field number, for the
small or rarely read parts; :func:`scan`, :func:`spans` and :func:`table` read a message in place — nested
messages as ``(start, end)`` offsets into one buffer, nothing copied, unwanted records stepped over — for the
~10^5 records of a large program's buffer assignment and module, where the cost is the Python work per record
(one- and two-byte keys, lengths and values are read inline; :mod:`xlakit.memory._assignment_records` and
:mod:`xlakit.memory._hlo_module` read their hottest messages with the same inline steps).
"""

from __future__ import annotations

import builtins  # Message has methods named int/bool/str; annotations in its body name the builtins
from collections.abc import Container, Iterator
from typing import Any

__all__ = ["ProtoDecodeError", "Message", "iter_fields", "parse", "to_int64", "unpack_varints", "scan", "spans",
           "span_bounds", "table", "one", "repeated_ints", "packed", "text", "last"]

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class ProtoDecodeError(ValueError):
    """The bytes are not a well-formed protobuf message (truncated, or an unsupported wire type)."""


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """``(value, position after it)`` of the base-128 varint at ``pos`` (one- and two-byte values, most of a
    module's, take the short path)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        value = b & 0x7F
        b = buf[pos + 1]
        if b < 0x80:
            return value | b << 7, pos + 2
        value |= (b & 0x7F) << 7
        shift, pos = 14, pos + 2
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                raise ProtoDecodeError("varint longer than 10 bytes")
    except IndexError:
        raise ProtoDecodeError("truncated varint") from None


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)`` for each record: ints for varints and fixed widths
    (unsigned, little-endian), ``bytes`` for length-delimited fields.

    Raises:
      ProtoDecodeError: truncated input or a wire type other than 0, 1, 2, 5 (groups are not used by XLA).
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos, end = 0, len(data)
    try:
        while pos < end:
            # One-byte keys and lengths (fields 1-15, payloads under 128 bytes) are most records: read them
            # inline; a serialized HLO module has ~10^5 records, so this is where decoding spends its time.
            key = data[pos]
            if key < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes
                key = (key & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                key, pos = _varint(data, pos)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise ProtoDecodeError("field number 0")
            value: int | bytes
            if wire == LEN:
                if pos >= end:
                    raise ProtoDecodeError(f"field {field}: truncated length")
                size = data[pos]
                if size < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    size = (size & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    size, pos = _varint(data, pos)
                if pos + size > end:
                    raise ProtoDecodeError(f"field {field}: length {size} runs past the end")
                value, pos = data[pos:pos + size], pos + size
            elif wire == VARINT:
                if pos < end and data[pos] < 0x80:
                    value, pos = data[pos], pos + 1
                else:
                    value, pos = _varint(data, pos)
            elif wire in (FIXED64, FIXED32):
                width = 8 if wire == FIXED64 else 4
                if pos + width > end:
                    raise ProtoDecodeError(f"field {field}: truncated fixed{width * 8}")
                value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
            else:
                raise ProtoDecodeError(f"field {field}: unsupported wire type {wire}")
            yield field, wire, value
    except IndexError:
        raise ProtoDecodeError("truncated message") from None


def scan(data: bytes, start: int, end: int, wanted: Container[int]) -> dict[int, list[Any]]:
    """The records of the message ``data[start:end]`` whose field numbers are in ``wanted``, without copying:
    ``{field: [value, ...]}`` in order, a varint or fixed-width value as an unsigned int, a length-delimited
    one as its ``(start, end)`` offsets into ``data`` (read it with :func:`text`, :func:`packed` or another
    ``scan``). Other records are stepped over unread, so reading a few fields of a large message costs one
    pass over its keys and lengths.

    Raises:
      ProtoDecodeError: truncated input or a wire type other than 0, 1, 2, 5.
    """
    out: dict[int, list[Any]] = {}
    pos = start
    try:
        while pos < end:
            key = data[pos]
            if key < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:  # fields 16-2047: two-byte keys
                key = (key & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                key, pos = _varint(data, pos)
            wire = key & 7
            value: Any
            if wire == LEN:
                size = data[pos]
                if size < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    size = (size & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    size, pos = _varint(data, pos)
                if key >> 3 not in wanted:
                    pos += size
                    continue
                value = (pos, pos + size)
                pos += size
            elif wire == VARINT:
                value = data[pos]
                if value < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    value = (value & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    value, pos = _varint(data, pos)
            elif wire == FIXED64 or wire == FIXED32:
                width = 8 if wire == FIXED64 else 4
                value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
            else:
                raise ProtoDecodeError(f"field {key >> 3}: unsupported wire type {wire}")
            field = key >> 3
            if field in wanted:
                found = out.get(field)
                if found is None:
                    out[field] = [value]
                else:
                    found.append(value)
    except IndexError:
        raise ProtoDecodeError("truncated message") from None
    if pos > end:
        raise ProtoDecodeError("a record runs past the end of its message")
    return out


def table(data: bytes, start: int, end: int, size: int) -> list[Any]:
    """The fields ``1 .. size-1`` of the small message ``data[start:end]`` as a list indexed by field number
    (fields outside that range are stepped over): a varint or fixed-width field as its unsigned int, a
    length-delimited field as the list of its ``(start, end)`` spans, None when absent. A varint field that
    occurs more than once (an unpacked repeated field) becomes the list of its values; read a singular field
    with :func:`one`. Faster than :func:`scan` for the many small messages of a buffer assignment.

    Raises:
      ProtoDecodeError: as :func:`scan`.
    """
    out: list[Any] = [None] * size
    pos = start
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
            field, wire = key >> 3, key & 7
            if wire == VARINT:
                value = data[pos]
                if value < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    value = (value & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    value, pos = _varint(data, pos)
            elif wire == LEN:
                n = data[pos]
                if n < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    n = (n & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    n, pos = _varint(data, pos)
                if field < size:
                    found = out[field]
                    if found is None:
                        out[field] = [(pos, pos + n)]
                    elif isinstance(found, list):
                        found.append((pos, pos + n))
                    else:
                        out[field] = [found, (pos, pos + n)]
                pos += n
                continue
            elif wire == FIXED64 or wire == FIXED32:
                width = 8 if wire == FIXED64 else 4
                value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
            else:
                raise ProtoDecodeError(f"field {field}: unsupported wire type {wire}")
            if field < size:
                found = out[field]
                out[field] = value if found is None else [*found, value] if isinstance(found, list) else [found, value]
    except IndexError:
        raise ProtoDecodeError("truncated message") from None
    if pos > end:
        raise ProtoDecodeError("a record runs past the end of its message")
    return out


def one(value: Any, default: int = 0) -> int:
    """A singular varint field of :func:`table` as a signed int64 (the last occurrence wins)."""
    if value is None:
        return default
    if isinstance(value, list):
        value = value[-1]
        if isinstance(value, tuple):
            raise ProtoDecodeError("expected a scalar, found a length-delimited field")
    return value - (1 << 64) if value >= 1 << 63 else value


def repeated_ints(data: bytes, value: Any) -> list[int]:
    """A ``repeated int64`` field of :func:`table`, packed (spans) or not (ints), as signed ints."""
    if value is None:
        return []
    out: list[int] = []
    for v in value if isinstance(value, list) else [value]:
        out += packed(data, *v) if isinstance(v, tuple) else [v - (1 << 64) if v >= 1 << 63 else v]
    return out


def spans(data: bytes, start: int, end: int, key: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of the length-delimited records with this one-byte ``key``
    (``field << 3 | 2``, fields 1-15) in ``data[start:end]``: the elements of a repeated message field, found
    by stepping over every other record unread.

    Raises:
      ProtoDecodeError: as :func:`scan`.
    """
    flat = span_bounds(data, start, end, key)
    return list(zip(flat[0::2], flat[1::2], strict=True))


def span_bounds(data: bytes, start: int, end: int, key: int) -> list[int]:
    """:func:`spans` as one flat list, ``[start, end, start, end, ...]`` (for numpy: no tuple per record)."""
    out: list[int] = []
    pos = start
    try:
        while pos < end:
            k = data[pos]
            if k < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes
                k = (k & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                k, pos = _varint(data, pos)
            wire = k & 7
            if wire == LEN:
                size = data[pos]
                if size < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes
                    size = (size & 0x7F) | data[pos + 1] << 7
                    pos += 2
                else:
                    size, pos = _varint(data, pos)
                if k == key:
                    out.append(pos)
                    out.append(pos + size)
                pos += size
            elif wire == VARINT:
                if data[pos] < 0x80:
                    pos += 1
                else:
                    _value, pos = _varint(data, pos)
            elif wire == FIXED64:
                pos += 8
            elif wire == FIXED32:
                pos += 4
            else:
                raise ProtoDecodeError(f"field {k >> 3}: unsupported wire type {wire}")
    except IndexError:
        raise ProtoDecodeError("truncated message") from None
    if pos > end:
        raise ProtoDecodeError("a record runs past the end of its message")
    return out


def last(fields: dict[int, list[Any]], number: int, default: Any = 0) -> Any:
    """The value of a singular field from :func:`scan` (proto semantics: the last occurrence wins)."""
    found = fields.get(number)
    return found[-1] if found else default


def text(data: bytes, span: tuple[int, int]) -> str:
    """A string field's value from its :func:`scan` span."""
    return data[span[0]:span[1]].decode("utf-8", errors="replace")


def packed(data: bytes, start: int, end: int) -> list[int]:
    """A packed ``repeated int64`` payload at ``data[start:end]`` as signed ints (see :func:`unpack_varints`);
    the varints are read inline (instruction ids take five or six bytes each)."""
    out = []
    pos = start
    try:
        while pos < end:
            b = data[pos]
            pos += 1
            if b < 0x80:
                out.append(b)
                continue
            value, shift = b & 0x7F, 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
            out.append(value - (1 << 64) if value >= 1 << 63 else value)
    except IndexError:
        raise ProtoDecodeError("truncated packed varints") from None
    if pos > end:
        raise ProtoDecodeError("packed varints run past their field")
    return out


def to_int64(value: int) -> int:
    """Reinterpret an unsigned varint as a signed int64 (protobuf encodes negative int64 as 10 bytes)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def unpack_varints(data: bytes) -> list[int]:
    """Decode a packed ``repeated int64`` payload into signed ints."""
    out, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        out.append(to_int64(value))
    return out


class Message:
    """One decoded message: its records grouped by field number, with typed getters.

    Proto3 omits fields equal to their default, so every getter takes the default XLA would use (0, False,
    empty). ``repeated`` scalar fields may arrive packed (one LEN record) or unpacked; :meth:`ints` accepts
    both.

    A nested message is decoded when first read (:meth:`messages` keeps what it decoded), so a large module
    whose shapes and metadata are mostly never looked at costs little more than one pass over its records.
    """

    __slots__ = ("_buf", "_decoded", "_children")

    def __init__(self, buf: bytes | memoryview, *, lazy: builtins.bool = False) -> None:
        self._buf = buf
        self._decoded: dict[builtins.int, list[builtins.int | bytes]] | None = None
        self._children: dict[builtins.int, list[Message]] = {}
        if not lazy:
            self._decode()

    def _decode(self) -> dict[builtins.int, list[builtins.int | bytes]]:
        fields: dict[builtins.int, list[builtins.int | bytes]] = {}
        for number, _wire, value in iter_fields(self._buf):
            fields.setdefault(number, []).append(value)
        self._decoded = fields
        self._buf = b""
        return fields

    @property
    def _fields(self) -> dict[builtins.int, list[builtins.int | bytes]]:
        return self._decoded if self._decoded is not None else self._decode()

    def has(self, number: builtins.int) -> builtins.bool:
        return number in self._fields

    def int(self, number: builtins.int, default: builtins.int = 0) -> builtins.int:
        values = self._fields.get(number)
        if not values:
            return default
        value = values[-1]  # proto semantics: the last occurrence wins
        if isinstance(value, bytes):
            raise ProtoDecodeError(f"field {number}: expected a scalar, found bytes")
        return to_int64(value)

    def bool(self, number: builtins.int) -> builtins.bool:
        return bool(self.int(number))

    def str(self, number: builtins.int, default: builtins.str = "") -> builtins.str:
        values = self._fields.get(number)
        if not values:
            return default
        value = values[-1]
        if not isinstance(value, bytes):
            raise ProtoDecodeError(f"field {number}: expected a string, found a scalar")
        return value.decode("utf-8", errors="replace")

    def ints(self, number: builtins.int) -> list[builtins.int]:
        out: list[builtins.int] = []
        for value in self._fields.get(number, ()):
            out.extend(unpack_varints(value) if isinstance(value, bytes) else [to_int64(value)])
        return out

    def messages(self, number: builtins.int) -> list[Message]:
        cached = self._children.get(number)
        if cached is not None:
            return cached
        out = []
        for value in self._fields.get(number, ()):
            if not isinstance(value, bytes):
                raise ProtoDecodeError(f"field {number}: expected a message, found a scalar")
            out.append(Message(value, lazy=True))
        self._children[number] = out
        return out

    def message(self, number: builtins.int) -> Message | None:
        found = self.messages(number)
        return found[-1] if found else None

    def numbers(self) -> list[builtins.int]:
        return sorted(self._fields)


def parse(buf: bytes | memoryview) -> Message:
    """Decode one message; see :class:`Message`. Raises :class:`ProtoDecodeError` on malformed bytes."""
    return Message(buf)
