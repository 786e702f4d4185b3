"""The protobuf wire reader, the schema's field numbers, and decoding of a hand-built BufferAssignmentProto.

The field numbers in xlakit.memory.buffer_assignment are checked against the descriptor of xla/service/hlo.proto
that the installed jaxlib embeds in its shared library, so a jaxlib that renumbers a field fails here.
"""

from __future__ import annotations

import mmap
import pathlib

import pytest

from xlakit.memory._proto import ProtoDecodeError, iter_fields, parse, unpack_varints
from xlakit.memory.buffer_assignment import _F, decode_buffer_assignment


# -- a tiny encoder, for building test messages ---------------------------------------------------------------
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 -> two's complement, 10 bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_int(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def f_len(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(field << 3 | 2) + varint(len(data)) + data


def test_varints_fixed_and_lengths_round_trip():
    msg = f_int(1, 300) + f_len(2, "abc") + f_int(3, -2) + varint(4 << 3 | 5) + (7).to_bytes(4, "little")
    assert list(iter_fields(msg)) == [(1, 0, 300), (2, 2, b"abc"), (3, 0, (1 << 64) - 2), (4, 5, 7)]
    m = parse(msg)
    assert (m.int(1), m.str(2), m.int(3), m.int(9, default=-7)) == (300, "abc", -2, -7)


def test_packed_and_unpacked_repeated_ints_read_the_same():
    packed = f_len(5, varint(1) + varint(2) + varint(-1))
    unpacked = f_int(5, 1) + f_int(5, 2) + f_int(5, -1)
    assert parse(packed).ints(5) == parse(unpacked).ints(5) == [1, 2, -1]
    assert unpack_varints(varint(150)) == [150]


@pytest.mark.parametrize("bad", [b"\x08", b"\x12\x05ab", b"\x0b", b"\x00\x01", b"\x08" + b"\xff" * 11])
def test_malformed_input_raises_a_clear_error(bad):
    with pytest.raises(ProtoDecodeError):
        parse(bad)


def test_unknown_fields_are_kept_and_ignored():
    m = parse(f_int(99, 5) + f_int(1, 2))
    assert m.int(1) == 2 and m.numbers() == [1, 99]


# -- the schema, as the installed jaxlib has it ---------------------------------------------------------------
def _embedded_descriptor(name: bytes) -> list[tuple[int, bytes]] | None:
    """The serialized FileDescriptorProto for ``name`` inside jaxlib's shared library, field by field."""
    import jaxlib

    libs = sorted(pathlib.Path(jaxlib.__file__).parent.glob("libjax_common*.so"))
    if not libs:
        return None
    with open(libs[0], "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(b"\n" + bytes([len(name)]) + name)
        if at < 0:
            return None
        buf = bytes(data[at:at + 400_000])
    fields, pos = [], 0
    while pos < len(buf):  # read records until something that is not a plausible FileDescriptorProto field
        try:
            number, wire, value = next(iter_fields(buf[pos:pos + 200_000]))
        except (ProtoDecodeError, StopIteration):
            break
        if wire != 2 or number > 12:
            break
        fields.append((number, value))
        pos += len(varint(number << 3 | 2)) + len(varint(len(value))) + len(value)
    return fields


def _message_fields(raw: bytes, prefix: str, out: dict[str, dict[str, int]]) -> None:
    name = prefix
    fields: dict[str, int] = {}
    nested: list[bytes] = []
    for number, _wire, value in iter_fields(raw):
        if number == 1:
            name = prefix + value.decode()
        elif number == 2:
            f = parse(value)
            fields[f.str(1)] = f.int(3)
        elif number == 3:
            nested.append(value)
    out[name] = fields
    for n in nested:
        _message_fields(n, name + ".", out)


def test_field_numbers_match_the_descriptor_in_the_installed_jaxlib():
    descriptor = _embedded_descriptor(b"xla/service/hlo.proto")
    if descriptor is None:
        pytest.skip("this jaxlib does not embed the hlo.proto descriptor where expected")
    msgs: dict[str, dict[str, int]] = {}
    for number, value in descriptor:
        if number == 4:
            _message_fields(value, "", msgs)
    expected = {
        "BufferAssignmentProto": {"logical_buffers": _F.BA_LOGICAL_BUFFERS, "buffer_aliases": _F.BA_ALIASES,
                                  "buffer_allocations": _F.BA_ALLOCATIONS, "heap_simulator_traces": _F.BA_TRACES,
                                  "peak_buffers": _F.BA_PEAK_BUFFERS},
        "BufferAssignmentProto.PeakBuffers": {"index": _F.PEAK_INDEX, "logical_buffer_ids": _F.PEAK_IDS},
        "BufferAssignmentProto.BufferAlias": {"source_buffer_id": _F.ALIAS_SOURCE, "location": _F.ALIAS_LOCATION},
        "LogicalBufferProto": {"id": _F.LB_ID, "size": _F.LB_SIZE, "defined_at": _F.LB_DEFINED_AT,
                               "color": _F.LB_COLOR},
        "LogicalBufferProto.Location": {"instruction_name": _F.LOC_NAME, "shape_index": _F.LOC_SHAPE_INDEX,
                                        "instruction_id": _F.LOC_INSTRUCTION_ID},
        "BufferAllocationProto": {"index": _F.AL_INDEX, "size": _F.AL_SIZE, "is_thread_local": _F.AL_THREAD_LOCAL,
                                  "is_entry_computation_parameter": _F.AL_PARAMETER,
                                  "parameter_number": _F.AL_PARAMETER_NUMBER, "maybe_live_out": _F.AL_LIVE_OUT,
                                  "color": _F.AL_COLOR, "assigned": _F.AL_ASSIGNED,
                                  "parameter_shape_index": _F.AL_PARAMETER_INDEX, "is_tuple": _F.AL_TUPLE,
                                  "is_constant": _F.AL_CONSTANT, "is_parameter_aliased_with_output": _F.AL_ALIASED},
        "BufferAllocationProto.Assigned": {"logical_buffer_id": _F.AS_BUFFER, "offset": _F.AS_OFFSET,
                                           "size": _F.AS_SIZE, "element_type": _F.AS_ELEMENT_TYPE},
        "HeapSimulatorTrace": {"events": _F.TR_EVENTS, "whole_module_simulation": _F.TR_WHOLE_MODULE,
                               "buffer_allocation_index": _F.TR_ALLOCATION},
        "HeapSimulatorTrace.Event": {"kind": _F.EV_KIND, "buffer_id": _F.EV_BUFFER,
                                     "computation_name": _F.EV_COMPUTATION, "instruction_name": _F.EV_INSTRUCTION,
                                     "share_with_canonical_id": _F.EV_SHARE_WITH},
        "HloModuleProto": {"name": _F.MOD_NAME, "computations": _F.MOD_COMPUTATIONS,
                           "entry_computation_id": _F.MOD_ENTRY_ID, "schedule": _F.MOD_SCHEDULE},
        "HloComputationProto": {"name": _F.COMP_NAME, "instructions": _F.COMP_INSTRUCTIONS, "id": _F.COMP_ID,
                                "root_id": _F.COMP_ROOT_ID},
        "HloInstructionProto": {"name": _F.INS_NAME, "opcode": _F.INS_OPCODE, "shape": _F.INS_SHAPE,
                                "id": _F.INS_ID, "operand_ids": _F.INS_OPERANDS,
                                "called_computation_ids": _F.INS_CALLED},
    }
    for message, fields in expected.items():
        assert message in msgs, f"{message} not in the embedded descriptor"
        for field, number in fields.items():
            assert msgs[message].get(field) == number, f"{message}.{field}: jaxlib has {msgs[message].get(field)}"


# -- a hand-built proto with a heap simulator trace (XLA:CPU in jaxlib 0.10.2 ships none) ---------------------
def _trace_proto() -> bytes:
    def buffer(bid: int, size: int) -> bytes:
        return f_len(_F.BA_LOGICAL_BUFFERS, f_int(_F.LB_ID, bid) + f_int(_F.LB_SIZE, size)
                     + f_len(_F.LB_DEFINED_AT, f_len(_F.LOC_NAME, f"op{bid}")))

    def assigned(bid: int, offset: int, size: int) -> bytes:
        return f_len(_F.AL_ASSIGNED, f_int(_F.AS_BUFFER, bid) + f_int(_F.AS_OFFSET, offset) + f_int(_F.AS_SIZE, size)
                     + f_int(_F.AS_ELEMENT_TYPE, 11))

    def event(kind: int, bid: int, share: int | None = None) -> bytes:
        body = f_int(_F.EV_KIND, kind) + f_int(_F.EV_BUFFER, bid) + f_len(_F.EV_INSTRUCTION, f"op{bid}")
        return f_len(_F.TR_EVENTS, body + (f_int(_F.EV_SHARE_WITH, share) if share is not None else b""))

    param = f_len(_F.BA_ALLOCATIONS, f_int(_F.AL_SIZE, 64) + f_int(_F.AL_PARAMETER, 1) + assigned(0, 0, 64))
    temp = f_len(_F.BA_ALLOCATIONS, f_int(_F.AL_INDEX, 1) + f_int(_F.AL_SIZE, 300)
                 + assigned(1, 0, 100) + assigned(2, 100, 200) + assigned(3, 0, 100))
    trace = f_len(_F.BA_TRACES, event(0, 1) + event(0, 2) + event(2, 3, share=1) + event(1, 1) + event(1, 3)
                  + event(1, 2) + f_int(_F.TR_ALLOCATION, 1))
    peak = f_len(_F.BA_PEAK_BUFFERS, f_int(_F.PEAK_INDEX, 1) + f_len(_F.PEAK_IDS, varint(1) + varint(2)))
    return b"".join(buffer(i, s) for i, s in ((0, 64), (1, 100), (2, 200), (3, 100))) + param + temp + trace + peak


def test_a_heap_trace_gives_live_bytes_counting_shared_buffers_once():
    ba = decode_buffer_assignment(_trace_proto())
    assert [a.kind for a in ba.allocations] == ["parameter", "temporary"]
    assert ba.totals()["argument_bytes"] == 64 and ba.totals()["temp_bytes"] == 300
    frame = ba.live_bytes_by_step()
    assert "heap simulator" in frame.attrs["source"]
    # alloc 1 (+100), alloc 2 (+200), share 3 with 1 (+0), free 1 (-100), free 3 (-0), free 2 (-200)
    assert frame["live_bytes"].tolist() == [100, 300, 300, 200, 200, 0]
    assert frame["event"].tolist() == ["alloc", "alloc", "share_with", "free", "free", "free"]
    top = ba.largest(1)
    assert top.loc[0, "id"] == 2 and top.loc[0, "bytes"] == 200 and top.loc[0, "dtype"] == "float32"
    assert top.attrs["source"].startswith("XLA peak_buffers")


def test_empty_or_garbage_assignment_bytes_raise():
    with pytest.raises(ValueError, match="does not report"):
        decode_buffer_assignment(b"")
    with pytest.raises(ValueError):
        decode_buffer_assignment(b"\x1a\x05ab")


def test_records_in_an_unusual_layout_decode_as_the_usual_ones():
    """The readers take the layout XLA writes on a fast path; unknown fields (also with two-byte keys), unpacked
    repeated fields, long names and multi-byte values go the general way and decode the same."""
    long_name = "op" + "x" * 200
    location = (f_len(_F.LOC_NAME, long_name) + f_int(_F.LOC_SHAPE_INDEX, 1) + f_int(_F.LOC_SHAPE_INDEX, 0)
                + f_int(_F.LOC_INSTRUCTION_ID, 1 << 40) + f_len(99, b"future"))
    buffer = (f_int(_F.LB_ID, 300) + f_len(20, b"??") + f_int(_F.LB_SIZE, 70000) + f_len(_F.LB_DEFINED_AT, location)
              + f_int(_F.LB_COLOR, 5))
    assigned = f_int(_F.AS_BUFFER, 300) + f_len(17, b"new") + f_int(_F.AS_OFFSET, 1 << 20) + f_int(_F.AS_SIZE, 70000)
    allocation = (f_int(_F.AL_INDEX, 2) + f_int(_F.AL_SIZE, (1 << 20) + 70000) + f_len(_F.AL_ASSIGNED, assigned))
    peak = f_int(_F.PEAK_INDEX, 2) + f_int(_F.PEAK_IDS, 300) + f_int(_F.PEAK_IDS, 7)
    ba = decode_buffer_assignment(f_len(_F.BA_LOGICAL_BUFFERS, buffer) + f_len(_F.BA_ALLOCATIONS, allocation)
                                  + f_len(_F.BA_PEAK_BUFFERS, peak))
    (b,) = ba.logical_buffers
    assert (b.id, b.size, b.color, b.instruction, b.shape_index, b.instruction_id) == (
        300, 70000, 5, long_name, (1, 0), 1 << 40)
    (a,) = ba.allocations
    assert [(s.buffer.id, s.offset, s.size) for s in a.slices] == [(300, 1 << 20, 70000)]
    assert a.index == 2 and a.peak_buffer_ids == (300, 7) and a.slices[0].buffer is b
    with pytest.raises(ProtoDecodeError):  # a record cut short inside a nested message
        decode_buffer_assignment(f_len(_F.BA_LOGICAL_BUFFERS, buffer[:-3]))
