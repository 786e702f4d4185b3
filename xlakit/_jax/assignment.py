"""Read the compile options stored inside a serialized XLA:CPU executable, and their device assignment.

Serialized layout (PjRt CPU, jaxlib 0.10-0.12): an optional IFRT header (a varint length, then that many bytes),
then an ``ExecutableAndOptionsProto`` {1: executable bytes, 2: ``CompileOptionsProto``}. The protobuf wire format
is read here by hand (jaxlib ships no decoder for it). Used by :mod:`xlakit._jax.serialize` to place a program
on other devices.
"""

from __future__ import annotations

__all__ = ["_stored_compile_options", "_assignment_grid", "_proto_fields", "_varint"]


def _stored_compile_options(exec_bytes: bytes):
    """Yield each ``CompileOptions`` that the serialized executable bytes may hold (unknown format: none)."""
    from jax._src.lib import xla_client as xc

    candidates = [exec_bytes]
    try:
        header_len, pos = _varint(exec_bytes, 0)
        candidates.append(exec_bytes[pos + header_len:])
    except IndexError:
        pass
    for buf in candidates:
        fields = _proto_fields(buf)
        if not fields or not any(num == 1 and wire == 2 for num, wire, _ in fields):
            continue
        for num, wire, value in fields:
            if num == 2 and wire == 2:
                try:
                    yield xc.CompileOptions.ParseFromString(value)
                except Exception:  # not a CompileOptionsProto
                    continue


def _assignment_grid(options):
    """The device assignment as an int array [replica, computation], parsed from ``DeviceAssignmentProto``
    ``{1: replica_count, 2: computation_count, 3: repeated {1: repeated int64 replica_device_ids}}``."""
    import numpy as np

    assignment = options.executable_build_options.device_assignment
    if assignment is None:
        return None
    fields = _proto_fields(assignment.serialize())
    if fields is None:
        return None
    columns = []
    for num, wire, value in fields:
        if num == 3 and wire == 2:
            ids: list[int] = []
            for n2, w2, v2 in _proto_fields(value) or []:
                if n2 == 1 and w2 == 0:
                    ids.append(v2)
                elif n2 == 1 and w2 == 2:  # packed repeated
                    pos = 0
                    while pos < len(v2):
                        x, pos = _varint(v2, pos)
                        ids.append(x)
            columns.append(ids)
    if not columns or len({len(c) for c in columns}) != 1:
        return None
    grid = np.array(columns, dtype=np.int64).T  # rows: replicas, columns: computations
    if grid.shape != (assignment.replica_count(), assignment.computation_count()):
        return None
    return grid


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, pos
        if shift > 63:
            raise IndexError("varint too long")


def _proto_fields(buf: bytes):
    """Top-level protobuf wire fields ``[(number, wire_type, value)]``, or ``None`` if ``buf`` does not parse."""
    fields = []
    pos = 0
    try:
        while pos < len(buf):
            key, pos = _varint(buf, pos)
            num, wire = key >> 3, key & 7
            if num == 0:
                return None
            if wire == 0:
                value: int | bytes
                value, pos = _varint(buf, pos)
            elif wire == 2:
                n, pos = _varint(buf, pos)
                if pos + n > len(buf):
                    return None
                value, pos = buf[pos:pos + n], pos + n
            elif wire in (1, 5):
                n = 8 if wire == 1 else 4
                if pos + n > len(buf):
                    return None
                value, pos = buf[pos:pos + n], pos + n
            else:
                return None
            fields.append((num, wire, value))
    except IndexError:
        return None
    return fields
