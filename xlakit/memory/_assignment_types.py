"""The values of a decoded buffer assignment: logical buffers, slices, allocations, heap events, and the parts
of the HLO module that name them (see :mod:`xlakit.memory.buffer_assignment` for the terms)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from xlakit.memory._display import fmt_bytes
from xlakit.memory._proto import Message, _varint, last, scan, text, to_int64
from xlakit.memory._xla_fields import _F

__all__ = ["DTYPES", "HOST_MEMORY_COLOR", "LogicalBuffer", "Slice", "Allocation", "HeapEvent"]

# xla.PrimitiveType -> JAX/NumPy dtype name (values from xla_data.proto).
DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16", 8: "uint32",
          9: "uint64", 10: "float16", 11: "float32", 12: "float64", 13: "tuple", 14: "opaque", 15: "complex64",
          16: "bfloat16", 17: "token", 18: "complex128", 19: "float8_e5m2", 20: "float8_e4m3fn", 21: "int4",
          22: "uint4", 23: "float8_e4m3b11fnuz", 24: "float8_e5m2fnuz", 25: "float8_e4m3fnuz", 26: "int2",
          27: "uint2", 28: "float8_e4m3", 29: "float8_e3m4", 30: "int1", 31: "uint1", 32: "float4_e2m1fn",
          33: "float8_e8m0fnu", 34: "buffer", 35: "float6_e3m2fn", 36: "float6_e2m3fn"}
HOST_MEMORY_COLOR = 5  # xla::Layout::kHostMemorySpace: buffers of this color live in host memory
_SEQUENTIAL_CALLERS = ("while", "call", "conditional")  # run their computations as steps of the program
_OP_NAME_KEY, _FRAME_KEY = _F.MD_OP_NAME << 3 | 2, _F.MD_STACK_FRAME_ID << 3  # OpMetadata's keys



@dataclasses.dataclass(frozen=True)
class LogicalBuffer:
    """One array value defined by an HLO instruction.

    id: XLA's logical buffer id. size: bytes. instruction / opcode / computation: the defining HLO
    instruction, its opcode and computation (None without the module). shape_index: the tuple index within
    the instruction's shape (``()`` for a plain array). shape / dtype: of this leaf (None when unknown).
    color: XLA's memory color (5 = host memory).
    """

    id: int
    size: int
    instruction: str | None
    opcode: str | None
    computation: str | None
    shape_index: tuple[int, ...]
    shape: tuple[int, ...] | None
    dtype: str | None
    color: int
    instruction_id: int | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class Slice:
    """A logical buffer placed in an allocation at ``offset`` with ``size`` bytes."""

    buffer: LogicalBuffer
    offset: int
    size: int


class _PeakBufferIds:
    """The ``peak_buffer_ids`` field of :class:`Allocation`: a tuple of buffer ids, which a decoded allocation
    reads from XLA's ``peak_buffers`` records when the field is first read (one record per allocation, needed only
    by :meth:`~xlakit.memory.BufferAssignment.largest`), so decoding a large program does not read them."""

    def __get__(self, obj: Any, owner: Any = None) -> tuple[int, ...]:
        if obj is None:
            return ()  # the dataclass field's default
        state = obj.__dict__
        found = state.get("peak_buffer_ids")
        if found is None:
            lookup = state.get("_peak_lookup")
            found = state["peak_buffer_ids"] = lookup(state["index"]) if lookup is not None else ()
            state.pop("_peak_lookup", None)
        return found

    def __set__(self, obj: Any, value: tuple[int, ...]) -> None:
        obj.__dict__["peak_buffer_ids"] = tuple(value)


@dataclasses.dataclass(frozen=True)
class Allocation:
    """A block XLA reserves before the run.

    index: XLA's allocation index. size: bytes. kind: the primary kind (see the module docstring).
    kinds: every applicable tag, including ``"maybe-live-out"`` and ``"tuple"``. parameter_number /
    parameter_shape_index: for parameters. aliased_with_output: a donated parameter reused as an output.
    color / memory_space: XLA's color and ``"host"`` (color 5) or ``"device"``. slices: the logical buffers
    in it. peak_buffer_ids: XLA's logical buffers live when this allocation's heap peaks (empty when absent).
    """

    index: int
    size: int
    kind: str
    kinds: tuple[str, ...]
    parameter_number: int | None
    parameter_shape_index: tuple[int, ...]
    aliased_with_output: bool
    maybe_live_out: bool
    is_thread_local: bool
    is_constant: bool
    is_tuple: bool
    color: int
    slices: tuple[Slice, ...]
    peak_buffer_ids: tuple[int, ...] = _PeakBufferIds()  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        _ = self.peak_buffer_ids  # read now: a pickle carries no lookup
        return dict(self.__dict__)

    def __repr__(self) -> str:
        param = f" #{self.parameter_number}" if self.parameter_number is not None else ""
        return (f"Allocation({self.index}: {self.kind}{param}, {fmt_bytes(self.size)}, {len(self.slices)} "
                f"buffer(s), {self.memory_space})")

    @property
    def memory_space(self) -> str:
        return "host" if self.color == HOST_MEMORY_COLOR else "device"

    @property
    def is_parameter(self) -> bool:
        return self.kind == "parameter"


@dataclasses.dataclass(frozen=True)
class HeapEvent:
    """One step of XLA's heap simulator trace: ``kind`` is alloc, free or share_with."""

    kind: str
    buffer_id: int
    computation: str
    instruction: str
    share_with: int | None


class _Instr:
    """One HLO instruction: name, opcode, its computation's id, operand and called-computation ids, parameter
    number (for a ``parameter``; else -1), tuple index (for a ``get-tuple-element``; else -1), and from its
    ``OpMetadata``: ``op_name`` (JAX's name stack, ``"jit(f)/transpose(jvp())/dot_general"``) and ``frame_id``
    (``stack_frame_id`` into the module's stack frame index, 0 = none); ``shape``: its ShapeProto. Made by
    :mod:`xlakit.memory._hlo_module`, which leaves the metadata, the shape and the called computations in the
    proto until they are first read (``_raw``: the module's bytes, the start and end of the metadata and of the
    shape in them, -1 where absent; kept as ``_src`` alone, or as row ``_row`` of the columns of the records read
    with it, :class:`~xlakit.memory._instruction_records.InstructionRows`: no tuple per instruction)."""

    __slots__ = ("name", "opcode", "computation_id", "operands", "_called", "parameter_number", "tuple_index",
                 "_shape", "_op_name", "_frame_id", "_src", "_row")

    def __init__(self, name: str, opcode: str, computation_id: int, shape: Message | None,
                 operands: tuple[int, ...], called: tuple[int, ...] | None, op_name: str | None = "",
                 frame_id: int = 0, parameter_number: int = -1, raw: Any = None, tuple_index: int = -1,
                 row: int = -1) -> None:
        self.name, self.opcode, self.computation_id = name, opcode, computation_id
        self.operands, self._called, self.parameter_number = operands, called, parameter_number
        self.tuple_index = tuple_index
        self._shape: Message | None = shape
        self._op_name: str | None = op_name
        self._frame_id = frame_id
        self._src, self._row = raw, row  # called None: row ``row`` of the columns ``raw`` has them

    @property
    def called(self) -> tuple[int, ...]:
        called = self._called
        if called is None:
            called = self._called = self._src.called(self._row)
        return called

    @property
    def _raw(self) -> tuple[bytes, int, int, int, int] | None:
        return self._src if self._row < 0 else self._src.raw(self._row)

    def _read_metadata(self) -> None:
        """op_name and stack_frame_id from the OpMetadata record (one-byte keys and lengths inline)."""
        self._op_name, self._frame_id = "", 0
        raw = self._raw
        if raw is None or raw[1] < 0:
            return
        data, pos, end = raw[0], raw[1], raw[2]
        # What XLA writes for JAX: op_name alone, or op_name then a stack_frame_id of one or two bytes.
        if end - pos >= 2 and data[pos] == _OP_NAME_KEY and data[pos + 1] < 0x80:
            stop = pos + 2 + data[pos + 1]
            if stop == end or (stop + 2 == end and data[stop] == _FRAME_KEY and data[stop + 1] < 0x80):
                self._op_name = data[pos + 2:stop].decode("utf-8", errors="replace")
                self._frame_id = data[stop + 1] if stop < end else 0
                return
            if stop + 3 == end and data[stop] == _FRAME_KEY and data[stop + 1] >= 0x80 and data[stop + 2] < 0x80:
                self._op_name = data[pos + 2:stop].decode("utf-8", errors="replace")
                self._frame_id = (data[stop + 1] & 0x7F) | data[stop + 2] << 7
                return
        try:
            self._read_common(data, pos, end)
            return
        except LookupError:  # not the common encoding (or truncated): the general reader
            pass
        fields = scan(data, pos, end, (_F.MD_OP_NAME, _F.MD_STACK_FRAME_ID))
        name = fields.get(_F.MD_OP_NAME)
        self._op_name = text(data, name[-1]) if name else ""
        self._frame_id = to_int64(last(fields, _F.MD_STACK_FRAME_ID))

    def _read_common(self, data: bytes, pos: int, end: int) -> None:
        """OpMetadata fields 1-15 of wire types 0 and 2, as XLA writes them; LookupError for anything else."""
        while pos < end:
            key = data[pos]
            wire = key & 7
            if key >= 0x80 or wire not in (0, 2):
                raise LookupError(key)  # a field past 15 or a fixed-width one
            value = data[pos + 1]
            if value < 0x80:
                pos += 2
            else:
                value, pos = _varint(data, pos + 1)
            if wire == 2:
                if key == _OP_NAME_KEY:
                    self._op_name = data[pos:pos + value].decode("utf-8", errors="replace")
                pos += value
            elif key == _FRAME_KEY:
                self._frame_id = value
        if pos > end:
            raise IndexError("the metadata runs past its end")

    @property
    def op_name(self) -> str:
        if self._op_name is None:
            self._read_metadata()
        return self._op_name  # type: ignore[return-value]

    @property
    def frame_id(self) -> int:
        if self._op_name is None:
            self._read_metadata()
        return self._frame_id

    @property
    def shape(self) -> Message | None:
        raw = self._raw
        if self._shape is None and raw is not None and raw[3] >= 0:
            self._shape = Message(raw[0][raw[3]:raw[4]], lazy=True)
        return self._shape

    def __repr__(self) -> str:
        return f"_Instr({self.name!r}, {self.opcode!r}, computation {self.computation_id})"


@dataclasses.dataclass(frozen=True)
class _Module:
    """What is used from the HloModuleProto: instructions by id, computations, schedule, entry, input/output
    aliases."""

    name: str
    instructions: Mapping[int, _Instr]
    computations: Mapping[int, tuple[str, tuple[int, ...], int]]  # id -> (name, instruction ids, root id)
    schedule: Mapping[int, tuple[int, ...]]
    entry_id: int
    stack_frames: Message | None = None  # HloModuleProto.stack_frame_index (decoded by memory._hlo_frames)
    # HloModuleProto.input_output_alias: (output shape index, parameter number, parameter shape index) per
    # result XLA writes into an entry parameter's buffer (donation, as the compiled module records it)
    input_output_alias: tuple[tuple[tuple[int, ...], int, tuple[int, ...]], ...] = ()

    def sequential_computations(self) -> list[int]:
        """Ids of the computations whose instructions are program steps: the entry and, through its ``while``,
        ``call`` and ``conditional`` instructions, the scheduled computations they run (as
        :mod:`xlakit.memory._assignment_liveness` flattens the schedule); every computation when the module
        has no schedule. A value's users are in its own computation; fusion bodies and reduction regions run
        inside one step and are read only when asked for."""
        return list(self._sequential)

    @functools.cached_property
    def _sequential(self) -> tuple[int, ...]:
        if not self.schedule:
            return tuple(self.computations)
        found = [self.entry_id] if self.entry_id in self.computations else []
        known = getattr(self.instructions, "known", {})  # decoded instructions by id: a plain dict
        for cid in found:  # grows while it is walked
            for iid in self.computations[cid][1]:
                ins = known.get(iid) or self.instructions.get(iid)
                if ins is not None and ins.opcode in _SEQUENTIAL_CALLERS:
                    found += [c for c in ins.called if c in self.schedule and c in self.computations
                              and c not in found]
        return tuple(found)

    @functools.cached_property
    def users(self) -> dict[int, list[int]]:
        """Instruction id -> the ids of its users, over the :meth:`sequential_computations` (a value's users are in
        its own computation), each in the order of its computation."""
        known = getattr(self.instructions, "known", {})
        out: dict[int, list[int]] = {}
        for cid in self._sequential:
            for iid in self.computations[cid][1]:
                ins = known.get(iid) or self.instructions[iid]
                for op in ins.operands:
                    found = out.get(op)
                    if found is None:
                        out[op] = [iid]
                    else:
                        found.append(iid)
        return out

    def may_hold(self, opcode: str) -> bool:
        """False when no instruction of the module has this opcode (True may be a false alarm): a lazily decoded
        module answers from its bytes at once (the opcode's record is ``0x12, len, name``), without decoding a
        computation."""
        found = getattr(self.instructions, "may_hold", None)
        if found is not None:
            return found(opcode)
        return any(ins.opcode == opcode for ins in self.instructions.values())

    def root_opcode(self, cid: int) -> str | None:
        """The opcode of computation ``cid``'s root (None when unknown), reading only the root's record."""
        read = getattr(self.instructions, "root_opcode", None)
        if read is not None:
            return read(cid)
        root = self.root(cid)
        return root.opcode if root is not None else None

    def root(self, cid: int) -> _Instr | None:
        """The root instruction of computation ``cid`` (None when unknown), reading no more of the module than
        it needs."""
        read = getattr(self.instructions, "root", None)
        if read is not None:
            return read(cid)
        return self.instructions.get(self.computations[cid][2]) if cid in self.computations else None
