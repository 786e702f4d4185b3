"""Buffer assignment: which HLO values occupy which bytes of a compiled program, decoded from XLA's proto.

Source: ``Compiled.memory_analysis().serialized_buffer_assignment_proto`` — XLA's ``BufferAssignmentProto``
(``xla/service/hlo.proto``), decoded by :mod:`xlakit.memory._proto` from the public schema's field numbers
(checked against the descriptor embedded in jaxlib 0.10.2). Names, shapes and dtypes of the logical buffers
are not in that proto: they come from the program's ``HloModuleProto``
(``runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()``), matched by instruction id; the
dtype also comes from the proto's per-slice ``element_type`` when the module is not available.

Terms (XLA's): a *logical buffer* is one array value an HLO instruction defines (one per leaf of a tuple
shape); an *allocation* is a contiguous block that XLA reserves before the program runs, holding one or more
logical buffers at byte offsets (buffers whose lifetimes do not overlap share bytes). Allocation kinds:

=============== =====================================================================================
parameter       an entry-computation argument (``aliased_with_output``: donated, reused as an output)
output          may be live out of the program (XLA: ``maybe_live_out``), not a parameter
temporary       scratch preallocated for one run (the ``temp_size_in_bytes`` of memory_analysis)
constant        a literal compiled into the program
thread-local    a small per-thread value (``alloca``), not part of device memory accounting
=============== =====================================================================================

Liveness over program order (:meth:`BufferAssignment.live_bytes_by_step`) comes from XLA's heap simulator
trace when the proto carries one. jaxlib 0.10.2 on CPU ships none, so it is then reconstructed from the
module's schedule: a buffer is live from the step that defines it to the last step that reads it or any of
its aliases (parameters and outputs stay live to the end), and each step counts the union of the byte ranges
its live buffers occupy, so buffers that share bytes in place are counted once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._proto import Message, ProtoDecodeError, parse

__all__ = ["BufferAssignment", "Allocation", "LogicalBuffer", "Slice", "HeapEvent", "buffer_assignment",
           "decode_buffer_assignment", "DTYPES", "HOST_MEMORY_COLOR"]

# xla.PrimitiveType -> JAX/NumPy dtype name (values from xla_data.proto).
DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16", 8: "uint32",
          9: "uint64", 10: "float16", 11: "float32", 12: "float64", 13: "tuple", 14: "opaque", 15: "complex64",
          16: "bfloat16", 17: "token", 18: "complex128", 19: "float8_e5m2", 20: "float8_e4m3fn", 21: "int4",
          22: "uint4", 23: "float8_e4m3b11fnuz", 24: "float8_e5m2fnuz", 25: "float8_e4m3fnuz", 26: "int2",
          27: "uint2", 28: "float8_e4m3", 29: "float8_e3m4", 30: "int1", 31: "uint1", 32: "float4_e2m1fn",
          33: "float8_e8m0fnu", 34: "buffer", 35: "float6_e3m2fn", 36: "float6_e2m3fn"}
HOST_MEMORY_COLOR = 5  # xla::Layout::kHostMemorySpace: buffers of this color live in host memory


class _F:
    """Field numbers of the messages read here (xla/service/hlo.proto, xla/xla_data.proto)."""

    # BufferAssignmentProto
    BA_LOGICAL_BUFFERS, BA_ALIASES, BA_ALLOCATIONS, BA_TRACES, BA_PEAK_BUFFERS = 1, 2, 3, 4, 5
    # LogicalBufferProto / .Location
    LB_ID, LB_SIZE, LB_DEFINED_AT, LB_COLOR = 1, 2, 3, 4
    LOC_NAME, LOC_SHAPE_INDEX, LOC_INSTRUCTION_ID = 2, 3, 4
    # BufferAssignmentProto.BufferAlias, .PeakBuffers
    ALIAS_SOURCE, ALIAS_LOCATION = 1, 2
    PEAK_INDEX, PEAK_IDS = 1, 2
    # BufferAllocationProto / .Assigned
    AL_INDEX, AL_SIZE, AL_THREAD_LOCAL, AL_PARAMETER, AL_PARAMETER_NUMBER = 1, 2, 3, 5, 6
    AL_LIVE_OUT, AL_COLOR, AL_ASSIGNED, AL_PARAMETER_INDEX, AL_TUPLE, AL_CONSTANT, AL_ALIASED = 7, 8, 9, 10, 11, 12, 13
    AS_BUFFER, AS_OFFSET, AS_SIZE, AS_ELEMENT_TYPE = 1, 2, 3, 4
    # HeapSimulatorTrace / .Event
    TR_EVENTS, TR_WHOLE_MODULE, TR_ALLOCATION = 1, 2, 3
    EV_KIND, EV_BUFFER, EV_COMPUTATION, EV_INSTRUCTION, EV_SHARE_WITH = 1, 2, 3, 4, 5
    # HloModuleProto, HloComputationProto, HloInstructionProto, HloScheduleProto
    MOD_NAME, MOD_COMPUTATIONS, MOD_ENTRY_ID, MOD_SCHEDULE = 1, 3, 6, 7
    COMP_NAME, COMP_INSTRUCTIONS, COMP_ID, COMP_ROOT_ID = 1, 2, 5, 6
    INS_NAME, INS_OPCODE, INS_SHAPE, INS_ID, INS_OPERANDS, INS_CALLED = 1, 2, 3, 35, 36, 38
    SCHED_SEQUENCES, SCHED_KEY, SCHED_VALUE, SEQ_IDS = 1, 1, 2, 1
    # ShapeProto, LayoutProto
    SH_ELEMENT_TYPE, SH_DIMS, SH_TUPLE, SH_LAYOUT, LAYOUT_MEMORY_SPACE = 2, 3, 4, 5, 8


_EVENT_KINDS = {0: "alloc", 1: "free", 2: "share_with"}


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


@dataclasses.dataclass(frozen=True)
class _Module:
    """What is used from the HloModuleProto: instructions by id, computations, schedule, entry."""

    name: str
    instructions: Mapping[int, _Instr]
    computations: Mapping[int, tuple[str, tuple[int, ...], int]]  # id -> (name, instruction ids, root id)
    schedule: Mapping[int, tuple[int, ...]]
    entry_id: int


@dataclasses.dataclass(frozen=True)
class BufferAssignment:
    """XLA's buffer assignment of one compiled program.

    Attributes:
      allocations: every :class:`Allocation`, by index.
      logical_buffers: every :class:`LogicalBuffer`, by id order.
      heap_traces: XLA's heap simulator traces, one tuple of :class:`HeapEvent` per trace, with the index
        of the allocation each one packed (empty on jaxlib 0.10.2 CPU, which ships no trace).
      name: the HLO module name, or None without the module.
      reported: ``memory_analysis()`` of the same program, for :meth:`compare` (None when not known).
    """

    allocations: tuple[Allocation, ...]
    logical_buffers: tuple[LogicalBuffer, ...]
    heap_traces: tuple[tuple[int, tuple[HeapEvent, ...]], ...]
    name: str | None = None
    reported: Any = dataclasses.field(default=None, repr=False, compare=False)
    _aliases: Mapping[int, tuple[tuple[int | None, tuple[int, ...]], ...]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)
    _module: _Module | None = dataclasses.field(default=None, repr=False, compare=False)

    # -- lookups ------------------------------------------------------------------------------------
    def buffer(self, buffer_id: int) -> LogicalBuffer:
        """The logical buffer with this id. Raises KeyError."""
        for b in self.logical_buffers:
            if b.id == buffer_id:
                return b
        raise KeyError(f"no logical buffer {buffer_id}")

    def allocation_of(self) -> dict[int, tuple[Allocation, Slice]]:
        """Logical buffer id -> (allocation, slice)."""
        return {s.buffer.id: (a, s) for a in self.allocations for s in a.slices}

    # -- totals -------------------------------------------------------------------------------------
    def totals(self) -> dict[str, int]:
        """Byte totals computed from the allocations the way XLA fills ``CompiledMemoryStats``.

        argument = parameter allocations; alias = those aliased with an output; output = maybe-live-out
        allocations (including a donated parameter's); temp = allocations that are none of parameter,
        maybe-live-out, thread-local, constant. Host (color 5) allocations go to the ``host_*`` keys.
        Keys match :class:`~xlakit.memory.CompiledMemory` fields.
        """
        out = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "host_argument_bytes",
                             "host_output_bytes", "host_alias_bytes", "host_temp_bytes"), 0)
        for a in self.allocations:
            pre = "host_" if a.memory_space == "host" else ""
            if a.is_parameter:
                out[pre + "argument_bytes"] += a.size
                if a.aliased_with_output:
                    out[pre + "alias_bytes"] += a.size
            if a.maybe_live_out:
                out[pre + "output_bytes"] += a.size
            if a.kind == "temporary":
                out[pre + "temp_bytes"] += a.size
        return out

    def compare(self, reported: Any = None):
        """``pandas.DataFrame`` of decoded totals vs. ``memory_analysis()`` (columns decoded, reported, equal).

        Args:
          reported: a :class:`~xlakit.memory.CompiledMemory`; default: the one this assignment came with.

        Raises:
          ValueError: no reported numbers to compare with.
        """
        import pandas as pd

        reported = reported if reported is not None else self.reported
        if reported is None:
            raise ValueError("no memory_analysis() to compare with: pass compare(compiled_memory(compiled))")
        rows = []
        for key, decoded in self.totals().items():
            value = getattr(reported, key)
            rows.append((key, decoded, value, None if value is None else decoded == value))
        return pd.DataFrame(rows, columns=["field", "decoded", "reported", "equal"]).set_index("field")

    # -- tables -------------------------------------------------------------------------------------
    def to_frame(self):
        """One row per allocation: index, kind, kinds, bytes, memory_space, parameter_number,
        aliased_with_output, buffers (count), largest_buffer (instruction name)."""
        import pandas as pd

        rows = []
        for a in self.allocations:
            biggest = max(a.slices, key=lambda s: s.size, default=None)
            rows.append({"index": a.index, "kind": a.kind, "kinds": ",".join(a.kinds), "bytes": a.size,
                         "memory_space": a.memory_space, "parameter_number": a.parameter_number,
                         "aliased_with_output": a.aliased_with_output, "buffers": len(a.slices),
                         "largest_buffer": biggest.buffer.instruction if biggest else None})
        if not rows:
            return pd.DataFrame()
        frame = pd.DataFrame(rows).set_index("index")
        frame["parameter_number"] = frame["parameter_number"].astype("Int64")
        return frame

    def buffers_frame(self):
        """One row per logical buffer: id, instruction, opcode, computation, shape_index, shape, dtype, bytes,
        allocation, offset, kind (its allocation's), memory_space."""
        import pandas as pd

        placed = self.allocation_of()
        rows = []
        for b in self.logical_buffers:
            alloc, sl = placed.get(b.id, (None, None))
            rows.append({"id": b.id, "instruction": b.instruction, "opcode": b.opcode, "computation": b.computation,
                         "shape_index": b.shape_index, "shape": b.shape, "dtype": b.dtype, "bytes": b.size,
                         "allocation": alloc.index if alloc else None, "offset": sl.offset if sl else None,
                         "kind": alloc.kind if alloc else None,
                         "memory_space": alloc.memory_space if alloc else None})
        return pd.DataFrame(rows)

    # -- liveness -----------------------------------------------------------------------------------
    def live_bytes_by_step(self):
        """Live bytes over program order, as a ``pandas.DataFrame``.

        With XLA's heap simulator trace (GPU/TPU builds that ship it): one row per trace event — columns
        trace, allocation, step, event, buffer_id, instruction, computation, delta_bytes, live_bytes — live
        bytes within the traced (temporary) allocation, counting a shared buffer once, as XLA does.

        Without a trace (jaxlib 0.10.2 CPU): reconstructed from the module schedule — one row per
        instruction in program order (the bodies of while/call/conditional flattened in before their
        instruction, as XLA's live-range analysis does): step, instruction, opcode, then bytes occupied at that step
        by kind (parameter, output, temporary, constant) and live_bytes (their sum). Thread-local buffers
        are left out. Needs the HLO module (pass a Compiled to :func:`buffer_assignment`).

        The frame's ``attrs["source"]`` names the method.

        Raises:
          ValueError: no trace and no module to reconstruct from.
        """
        import pandas as pd

        if self.heap_traces:
            frame = pd.DataFrame(self._trace_rows())
            frame.attrs["source"] = "XLA heap simulator trace (BufferAssignmentProto.heap_simulator_traces)"
            return frame
        if self._module is None:
            raise ValueError("this buffer assignment has no heap simulator trace and no HLO module to "
                             "reconstruct liveness from; call buffer_assignment() on the Compiled program")
        rows, _ = self._schedule_liveness()
        frame = pd.DataFrame(rows)
        frame.attrs["source"] = "reconstructed from the HLO schedule and buffer aliases (no heap trace shipped)"
        return frame

    def _trace_rows(self) -> list[dict[str, Any]]:
        sizes = {b.id: b.size for b in self.logical_buffers}
        names = {b.id: b.instruction for b in self.logical_buffers}
        rows = []
        for t, (alloc_index, events) in enumerate(self.heap_traces):
            live, owners, charged = 0, {}, {}
            for step, e in enumerate(events):
                if e.kind == "alloc":
                    owners[e.buffer_id] = 1
                    delta = charged[e.buffer_id] = sizes.get(e.buffer_id, 0)
                elif e.kind == "share_with":  # reuses the canonical buffer's bytes: no new memory unless alone
                    canon = e.share_with if e.share_with is not None else e.buffer_id
                    owners[canon] = owners.get(canon, 0) + 1
                    delta = charged[e.buffer_id] = sizes.get(e.buffer_id, 0) if owners[canon] == 1 else 0
                else:
                    delta = -charged.pop(e.buffer_id, 0)
                live += delta
                rows.append({"trace": t, "allocation": alloc_index, "step": step, "event": e.kind,
                             "buffer_id": e.buffer_id, "instruction": e.instruction or names.get(e.buffer_id),
                             "computation": e.computation, "delta_bytes": delta, "live_bytes": live})
        return rows

    def _schedule_liveness(self) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
        """(rows, buffer id -> (first step, last step)) from the entry schedule; see live_bytes_by_step."""
        mod = self._module
        assert mod is not None
        _entry_name, entry_ids, root_id = mod.computations[mod.entry_id]
        order = _flatten(mod, mod.entry_id, entry_ids, set())
        step_of = {iid: s for s, iid in enumerate(order)}
        last = len(order) - 1
        # Instructions of computations not in the flat order (fusion bodies, reduce/sort regions) run during
        # the step of the instruction that calls them.
        comp_step: dict[int, int] = {}
        stack = [(iid, step_of[iid]) for iid in order]
        while stack:
            iid, s = stack.pop()
            ins = mod.instructions.get(iid)
            for cid in ins.called if ins else ():
                if cid not in comp_step and cid in mod.computations:
                    comp_step[cid] = s
                    stack.extend((child, s) for child in mod.computations[cid][1] if child not in step_of)

        def pos(iid: int | None) -> int | None:
            if iid is None:
                return None
            if iid in step_of:
                return step_of[iid]
            ins = mod.instructions.get(iid)
            return comp_step.get(ins.computation_id) if ins else None

        users: dict[int, list[int]] = {}
        for iid, ins in mod.instructions.items():
            for op in ins.operands:
                users.setdefault(op, []).append(iid)

        placed = self.allocation_of()
        ranges: dict[int, tuple[int, int]] = {}
        for b in self.logical_buffers:
            alloc = placed.get(b.id, (None, None))[0]
            if alloc is None or alloc.is_thread_local:
                continue
            locations = [(b.instruction_id, b.shape_index), *self._aliases.get(b.id, ())]
            steps = [p for p in (pos(i) for i, _ in locations) if p is not None]
            if alloc.is_parameter or alloc.is_constant:
                ranges[b.id] = (0, last)
                continue
            if not steps:
                continue
            end = max(steps)
            for loc_iid, _ in locations:
                for user in users.get(loc_iid, ()) if loc_iid is not None else ():
                    p = pos(user)
                    if p is not None:
                        end = max(end, p)
                if loc_iid == root_id:
                    end = last
            ranges[b.id] = (min(steps), end)

        # Sweep: at each step, the union of byte ranges of live slices, per allocation.
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for bid, (first, last_step) in ranges.items():
            starts.setdefault(first, []).append(bid)
            ends.setdefault(last_step + 1, []).append(bid)
        active: dict[int, set[int]] = {}
        occupied: dict[int, int] = {}
        alloc_by_index = {a.index: a for a in self.allocations}
        kinds = ("parameter", "output", "temporary", "constant")
        by_kind = dict.fromkeys(kinds, 0)
        rows = []
        for s, iid in enumerate(order):
            touched = set()
            for bid in ends.get(s, ()):
                a = placed[bid][0].index
                active[a].discard(bid)
                touched.add(a)
            for bid in starts.get(s, ()):
                a = placed[bid][0].index
                active.setdefault(a, set()).add(bid)
                touched.add(a)
            for a in touched:  # only allocations whose live set changed are recomputed
                now = _union_bytes([placed[bid][1] for bid in active[a]])
                kind = alloc_by_index[a].kind
                by_kind[kind] = by_kind.get(kind, 0) + now - occupied.get(a, 0)
                occupied[a] = now
            ins = mod.instructions.get(iid)
            rows.append({"step": s, "instruction": ins.name if ins else None, "opcode": ins.opcode if ins else None,
                         **{k: by_kind[k] for k in kinds}, "live_bytes": sum(by_kind.values())})
        return rows, ranges

    def largest(self, n: int = 10):
        """The ``n`` largest logical buffers live at the peak, as a ``pandas.DataFrame`` sorted by bytes.

        "At the peak" uses XLA's own answer when the proto has it (``peak_buffers``: for each allocation, the
        buffers live at the earliest point where that allocation's live bytes peak — together they are what
        sets each allocation's size); otherwise the buffers live at the step where the reconstructed
        :meth:`live_bytes_by_step` peaks. Columns: id, instruction, opcode, shape, dtype, bytes, allocation,
        kind, offset. ``attrs["source"]`` names the method.

        Raises:
          ValueError: ``n`` < 1, or neither peak buffers nor a module to reconstruct from.
        """
        import pandas as pd

        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        placed = self.allocation_of()
        if any(a.peak_buffer_ids for a in self.allocations):
            ids = [bid for a in self.allocations for bid in a.peak_buffer_ids]
            source = "XLA peak_buffers (per allocation)"
        elif self._module is not None:
            rows, ranges = self._schedule_liveness()
            peak = max(rows, key=lambda r: r["live_bytes"])["step"] if rows else 0
            ids = [bid for bid, (a, b) in ranges.items() if a <= peak <= b]
            source = f"reconstructed liveness at step {peak}"
        else:
            raise ValueError("no peak buffers in the proto and no HLO module; pass the Compiled program")
        by_id = {b.id: b for b in self.logical_buffers}
        out = []
        for bid in dict.fromkeys(ids):
            b = by_id.get(bid)
            if b is None:
                continue
            alloc, sl = placed.get(bid, (None, None))
            out.append({"id": b.id, "instruction": b.instruction, "opcode": b.opcode, "shape": b.shape,
                        "dtype": b.dtype, "bytes": b.size, "allocation": alloc.index if alloc else None,
                        "kind": alloc.kind if alloc else None, "offset": sl.offset if sl else None})
        frame = pd.DataFrame(out, columns=["id", "instruction", "opcode", "shape", "dtype", "bytes", "allocation",
                                           "kind", "offset"])
        frame = frame.sort_values("bytes", ascending=False, kind="stable").head(n).reset_index(drop=True)
        frame.attrs["source"] = source
        return frame

    # -- display ------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        t = self.totals()
        return (f"BufferAssignment({self.name or '?'}: {len(self.allocations)} allocations, "
                f"{len(self.logical_buffers)} logical buffers; argument {fmt_bytes(t['argument_bytes'])}, "
                f"output {fmt_bytes(t['output_bytes'])}, alias {fmt_bytes(t['alias_bytes'])}, "
                f"temp {fmt_bytes(t['temp_bytes'])})")

    def _repr_html_(self) -> str:
        rows = [(k, fmt_bytes(v)) for k, v in self.totals().items()]
        rows += [(f"allocation {a.index} ({a.kind})", f"{fmt_bytes(a.size)} in {len(a.slices)} buffer(s)")
                 for a in sorted(self.allocations, key=lambda a: -a.size)[:10]]
        return html_table(rows, title=f"Buffer assignment: {self.name or '?'}")


_SEQUENTIAL_CALLERS = ("while", "call", "conditional")


def _flatten(mod: _Module, comp_id: int, default: Sequence[int], seen: set[int]) -> list[int]:
    """Instruction ids in program order, as XLA's HloLiveRange flattens a schedule: the computations a
    while/call/conditional runs come right before the instruction itself (a while: condition, then body)."""
    out: list[int] = []
    seen.add(comp_id)
    for iid in mod.schedule.get(comp_id, default):
        ins = mod.instructions.get(iid)
        if ins is not None and ins.opcode in _SEQUENTIAL_CALLERS:
            called = list(reversed(ins.called)) if ins.opcode == "while" else list(ins.called)
            for cid in called:
                if cid in mod.schedule and cid not in seen and cid in mod.computations:
                    out.extend(_flatten(mod, cid, mod.computations[cid][1], seen))
        out.append(iid)
    return out


def _union_bytes(slices: Sequence[Slice]) -> int:
    total, cur_start, cur_end = 0, None, None
    for lo, hi in sorted((s.offset, s.offset + s.size) for s in slices):
        if cur_end is None or lo > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = lo, hi
        else:
            cur_end = max(cur_end, hi)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


# -- decoding ---------------------------------------------------------------------------------------------
def _decode_module(data: bytes) -> _Module:
    m = parse(data)
    instructions: dict[int, _Instr] = {}
    computations: dict[int, tuple[str, tuple[int, ...], int]] = {}
    for comp in m.messages(_F.MOD_COMPUTATIONS):
        cid = comp.int(_F.COMP_ID)
        ids = []
        for ins in comp.messages(_F.COMP_INSTRUCTIONS):
            iid = ins.int(_F.INS_ID)
            ids.append(iid)
            instructions[iid] = _Instr(ins.str(_F.INS_NAME), ins.str(_F.INS_OPCODE), cid, ins.message(_F.INS_SHAPE),
                                       tuple(ins.ints(_F.INS_OPERANDS)), tuple(ins.ints(_F.INS_CALLED)))
        computations[cid] = (comp.str(_F.COMP_NAME), tuple(ids), comp.int(_F.COMP_ROOT_ID))
    schedule: dict[int, tuple[int, ...]] = {}
    sched = m.message(_F.MOD_SCHEDULE)
    for entry in sched.messages(_F.SCHED_SEQUENCES) if sched else ():
        seq = entry.message(_F.SCHED_VALUE)
        schedule[entry.int(_F.SCHED_KEY)] = tuple(seq.ints(_F.SEQ_IDS)) if seq else ()
    entry_id = m.int(_F.MOD_ENTRY_ID)
    if entry_id not in computations and computations:
        entry_id = list(computations)[-1]  # computations are in dependency order: the entry comes last
    return _Module(m.str(_F.MOD_NAME), instructions, computations, schedule, entry_id)


def _leaf(shape: Message | None, index: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str | None]:
    for i in index:
        if shape is None:
            return None, None
        tuples = shape.messages(_F.SH_TUPLE)
        shape = tuples[i] if 0 <= i < len(tuples) else None
    if shape is None:
        return None, None
    return tuple(shape.ints(_F.SH_DIMS)), DTYPES.get(shape.int(_F.SH_ELEMENT_TYPE))


def decode_buffer_assignment(data: bytes, hlo_module: bytes | None = None, *, reported: Any = None
                             ) -> BufferAssignment:
    """Decode serialized ``BufferAssignmentProto`` bytes.

    Args:
      data: ``memory_analysis().serialized_buffer_assignment_proto``.
      hlo_module: the program's serialized ``HloModuleProto`` (for names, shapes, dtypes, the schedule), or
        None — then only ids, sizes and slice dtypes are known.
      reported: the :class:`~xlakit.memory.CompiledMemory` of the same program, for :meth:`~BufferAssignment.compare`.

    Raises:
      ValueError (``ProtoDecodeError``): the bytes are empty or malformed.
    """
    if not data:
        raise ValueError("empty buffer assignment: this backend does not report one (memory_analysis() "
                         "returned no serialized_buffer_assignment_proto)")
    module = _decode_module(hlo_module) if hlo_module else None
    ba = parse(data)
    slice_dtype: dict[int, str] = {}
    for al in ba.messages(_F.BA_ALLOCATIONS):
        for asg in al.messages(_F.AL_ASSIGNED):
            if asg.has(_F.AS_ELEMENT_TYPE):
                slice_dtype[asg.int(_F.AS_BUFFER)] = DTYPES.get(asg.int(_F.AS_ELEMENT_TYPE), "unknown")

    buffers: dict[int, LogicalBuffer] = {}
    for lb in ba.messages(_F.BA_LOGICAL_BUFFERS):
        loc = lb.message(_F.LB_DEFINED_AT)
        iid = loc.int(_F.LOC_INSTRUCTION_ID) if loc and loc.has(_F.LOC_INSTRUCTION_ID) else None
        index = tuple(loc.ints(_F.LOC_SHAPE_INDEX)) if loc else ()
        ins = module.instructions.get(iid) if module and iid is not None else None
        name = ins.name if ins else (loc.str(_F.LOC_NAME) or None if loc else None)
        shape, dtype = _leaf(ins.shape, index) if ins else (None, None)
        bid = lb.int(_F.LB_ID)
        buffers[bid] = LogicalBuffer(
            id=bid, size=lb.int(_F.LB_SIZE), instruction=name, opcode=ins.opcode if ins else None,
            computation=module.computations[ins.computation_id][0] if ins and module else None,
            shape_index=index, shape=shape, dtype=dtype or slice_dtype.get(bid), color=lb.int(_F.LB_COLOR),
            instruction_id=iid)

    aliases: dict[int, list[tuple[int | None, tuple[int, ...]]]] = {}
    for al in ba.messages(_F.BA_ALIASES):
        loc = al.message(_F.ALIAS_LOCATION)
        if loc is not None:
            iid = loc.int(_F.LOC_INSTRUCTION_ID) if loc.has(_F.LOC_INSTRUCTION_ID) else None
            aliases.setdefault(al.int(_F.ALIAS_SOURCE), []).append((iid, tuple(loc.ints(_F.LOC_SHAPE_INDEX))))

    peaks: dict[int, tuple[int, ...]] = {}
    for pk in ba.messages(_F.BA_PEAK_BUFFERS):
        peaks[pk.int(_F.PEAK_INDEX)] = tuple(pk.ints(_F.PEAK_IDS))

    allocations = []
    for al in ba.messages(_F.BA_ALLOCATIONS):
        al_index = al.int(_F.AL_INDEX)
        flags = {"parameter": al.bool(_F.AL_PARAMETER), "thread_local": al.bool(_F.AL_THREAD_LOCAL),
                 "live_out": al.bool(_F.AL_LIVE_OUT), "constant": al.bool(_F.AL_CONSTANT),
                 "tuple": al.bool(_F.AL_TUPLE), "aliased": al.bool(_F.AL_ALIASED)}
        if flags["parameter"]:
            kind = "parameter"
        elif flags["constant"]:
            kind = "constant"
        elif flags["thread_local"]:
            kind = "thread-local"
        elif flags["live_out"]:
            kind = "output"
        else:
            kind = "temporary"
        kinds = [kind]
        if flags["live_out"]:
            kinds.append("maybe-live-out")
        if flags["tuple"]:
            kinds.append("tuple")
        if flags["aliased"]:
            kinds.append("aliased-with-output")
        slices = []
        for asg in al.messages(_F.AL_ASSIGNED):
            bid = asg.int(_F.AS_BUFFER)
            buf = buffers.get(bid) or LogicalBuffer(bid, asg.int(_F.AS_SIZE), None, None, None, (), None,
                                                    slice_dtype.get(bid), 0)
            slices.append(Slice(buf, asg.int(_F.AS_OFFSET), asg.int(_F.AS_SIZE)))
        allocations.append(Allocation(
            index=al_index, size=al.int(_F.AL_SIZE), kind=kind, kinds=tuple(kinds),
            parameter_number=al.int(_F.AL_PARAMETER_NUMBER) if flags["parameter"] else None,
            parameter_shape_index=tuple(al.ints(_F.AL_PARAMETER_INDEX)), aliased_with_output=flags["aliased"],
            maybe_live_out=flags["live_out"], is_thread_local=flags["thread_local"], is_constant=flags["constant"],
            is_tuple=flags["tuple"], color=al.int(_F.AL_COLOR), slices=tuple(slices),
            peak_buffer_ids=peaks.get(al_index, ())))

    traces = []
    for tr in ba.messages(_F.BA_TRACES):
        events = tuple(HeapEvent(_EVENT_KINDS.get(ev.int(_F.EV_KIND), f"kind{ev.int(_F.EV_KIND)}"),
                                 ev.int(_F.EV_BUFFER), ev.str(_F.EV_COMPUTATION), ev.str(_F.EV_INSTRUCTION),
                                 ev.int(_F.EV_SHARE_WITH) if ev.has(_F.EV_SHARE_WITH) else None)
                       for ev in tr.messages(_F.TR_EVENTS))
        traces.append((tr.int(_F.TR_ALLOCATION), events))

    return BufferAssignment(
        allocations=tuple(sorted(allocations, key=lambda a: a.index)),
        logical_buffers=tuple(buffers[k] for k in sorted(buffers)), heap_traces=tuple(traces),
        name=module.name if module else None, reported=reported,
        _aliases={k: tuple(v) for k, v in aliases.items()}, _module=module)


def buffer_assignment(compiled: Any, *args: Any, **kwargs: Any) -> BufferAssignment:
    """Decode the buffer assignment of a compiled program.

    Args:
      compiled: a ``jax.stages.Compiled`` (best: names, shapes, dtypes and the schedule come from its HLO
        module), a jitted function followed by example arguments (compiled here), or a
        :class:`~xlakit.memory.CompiledMemory` that carries the proto (ids, sizes and dtypes only).
      *args, **kwargs: example arguments, only with a function.

    Returns:
      :class:`BufferAssignment`; its :meth:`~BufferAssignment.compare` checks the decoded totals against
      ``memory_analysis()``.

    Raises:
      TypeError: unsupported input (a cache entry stores no buffer assignment: load and pass the program).
      ValueError: the backend reports no buffer assignment, or the bytes are malformed.
    """
    from xlakit.memory.compiled import CompiledMemory, _compile, compiled_memory

    if isinstance(compiled, CompiledMemory):
        if not compiled.serialized_buffer_assignment:
            raise ValueError(f"{compiled.source} carries no buffer assignment (cache entries do not store it); "
                             "pass the jax.stages.Compiled program instead")
        return decode_buffer_assignment(compiled.serialized_buffer_assignment, reported=compiled)
    if isinstance(compiled, (bytes, bytearray, memoryview)):
        return decode_buffer_assignment(bytes(compiled))
    if isinstance(compiled, Mapping) or hasattr(compiled, "header"):
        raise TypeError("a cache entry stores the memory totals but not the buffer assignment; load the program "
                        "(or compile it) and pass the jax.stages.Compiled")
    program = _compile(compiled, args, kwargs)
    memory = compiled_memory(program)
    module_bytes = None
    try:
        module_bytes = program.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:  # noqa: BLE001 - without the module only names/shapes are lost
        pass
    data = memory.serialized_buffer_assignment
    if not data:
        raise ValueError(f"memory_analysis() of {memory.name or 'this program'} on {memory.platform} carries no "
                         "buffer assignment")
    try:
        return decode_buffer_assignment(data, module_bytes, reported=memory)
    except ProtoDecodeError as exc:
        raise ValueError(f"could not decode the buffer assignment of {memory.name}: {exc}") from exc
