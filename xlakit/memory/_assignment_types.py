"""The values of a decoded buffer assignment: logical buffers, slices, allocations, heap events, and the parts
of the HLO module that name them (see :mod:`xlakit.memory.buffer_assignment` for the terms)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from xlakit.memory._display import fmt_bytes
from xlakit.memory._proto import Message

__all__ = ["DTYPES", "HOST_MEMORY_COLOR", "LogicalBuffer", "Slice", "Allocation", "HeapEvent"]

# xla.PrimitiveType -> JAX/NumPy dtype name (values from xla_data.proto).
DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16", 8: "uint32",
          9: "uint64", 10: "float16", 11: "float32", 12: "float64", 13: "tuple", 14: "opaque", 15: "complex64",
          16: "bfloat16", 17: "token", 18: "complex128", 19: "float8_e5m2", 20: "float8_e4m3fn", 21: "int4",
          22: "uint4", 23: "float8_e4m3b11fnuz", 24: "float8_e5m2fnuz", 25: "float8_e4m3fnuz", 26: "int2",
          27: "uint2", 28: "float8_e4m3", 29: "float8_e3m4", 30: "int1", 31: "uint1", 32: "float4_e2m1fn",
          33: "float8_e8m0fnu", 34: "buffer", 35: "float6_e3m2fn", 36: "float6_e2m3fn"}
HOST_MEMORY_COLOR = 5  # xla::Layout::kHostMemorySpace: buffers of this color live in host memory



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
    peak_buffer_ids: tuple[int, ...] = ()

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


@dataclasses.dataclass(frozen=True)
class _Instr:
    name: str
    opcode: str
    computation_id: int
    shape: Message | None
    operands: tuple[int, ...]
    called: tuple[int, ...]
    op_name: str = ""  # OpMetadata.op_name: JAX's name stack ("jit(f)/transpose(jvp())/dot_general")
    frame_id: int = 0  # OpMetadata.stack_frame_id into the module's stack frame index (0 = none)
    parameter_number: int = -1  # for a ``parameter`` instruction


@dataclasses.dataclass(frozen=True)
class _Module:
    """What is used from the HloModuleProto: instructions by id, computations, schedule, entry."""

    name: str
    instructions: Mapping[int, _Instr]
    computations: Mapping[int, tuple[str, tuple[int, ...], int]]  # id -> (name, instruction ids, root id)
    schedule: Mapping[int, tuple[int, ...]]
    entry_id: int
    stack_frames: Message | None = None  # HloModuleProto.stack_frame_index (decoded by memory._hlo_frames)
