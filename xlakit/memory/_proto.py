"""A minimal reader for the protobuf wire format (no schema, no dependency).

XLA hands out its ``BufferAssignmentProto`` and ``HloModuleProto`` as serialized bytes, and jaxlib ships no
Python classes for them. Pulling in ``protobuf`` plus generated code for two messages would be heavy and
version-fragile, so this module reads the wire format directly; the typed views in
:mod:`xlakit.memory.buffer_assignment` name the fields by number (from XLA's public ``hlo.proto``).

Wire format: a message is a sequence of ``(key, value)`` records with ``key = field_number << 3 | wire_type``
as a base-128 varint. Wire types: 0 varint, 1 fixed 64-bit, 2 length-delimited (bytes, strings, nested
messages, packed repeated scalars), 5 fixed 32-bit. Unknown fields are kept, so a newer XLA that adds fields
still decodes.
"""

from __future__ import annotations

import builtins  # Message has methods named int/bool/str; annotations in its body name the builtins
from collections.abc import Iterator

__all__ = ["ProtoDecodeError", "Message", "iter_fields", "parse", "to_int64", "unpack_varints"]

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class ProtoDecodeError(ValueError):
    """The bytes are not a well-formed protobuf message (truncated, or an unsupported wire type)."""


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise ProtoDecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ProtoDecodeError("varint longer than 10 bytes")


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)`` for each record: ints for varints and fixed widths
    (unsigned, little-endian), ``bytes`` for length-delimited fields.

    Raises:
      ProtoDecodeError: truncated input or a wire type other than 0, 1, 2, 5 (groups are not used by XLA).
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos, end = 0, len(data)
    while pos < end:
        # One-byte keys and lengths (fields 1-15, payloads under 128 bytes) are most records: read them
        # inline; a serialized HLO module has ~10^5 records, so this is where decoding spends its time.
        key = data[pos]
        if key < 0x80:
            pos += 1
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
