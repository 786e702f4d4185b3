"""Decoding XLA's ``BufferAssignmentProto`` (and the parts of the ``HloModuleProto`` that name its buffers)
with :mod:`xlakit.memory._proto`, by the field numbers of XLA's public ``hlo.proto`` / ``xla_data.proto``."""

from __future__ import annotations

from typing import Any

from xlakit.memory._assignment_types import (
    DTYPES,
    Allocation,
    HeapEvent,
    LogicalBuffer,
    Slice,
    _Instr,
    _Module,
)
from xlakit.memory._proto import Message, parse

__all__ = ["decode_parts"]


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
    INS_METADATA, INS_PARAMETER_NUMBER, MOD_STACK_FRAME_INDEX = 7, 9, 17
    # OpMetadata
    MD_OP_NAME, MD_STACK_FRAME_ID = 2, 15
    SCHED_SEQUENCES, SCHED_KEY, SCHED_VALUE, SEQ_IDS = 1, 1, 2, 1
    # ShapeProto, LayoutProto
    SH_ELEMENT_TYPE, SH_DIMS, SH_TUPLE, SH_LAYOUT, LAYOUT_MEMORY_SPACE = 2, 3, 4, 5, 8


_EVENT_KINDS = {0: "alloc", 1: "free", 2: "share_with"}


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
            md = ins.message(_F.INS_METADATA)
            opcode = ins.str(_F.INS_OPCODE)
            instructions[iid] = _Instr(ins.str(_F.INS_NAME), opcode, cid, ins.message(_F.INS_SHAPE),
                                       tuple(ins.ints(_F.INS_OPERANDS)), tuple(ins.ints(_F.INS_CALLED)),
                                       md.str(_F.MD_OP_NAME) if md else "", md.int(_F.MD_STACK_FRAME_ID) if md else 0,
                                       ins.int(_F.INS_PARAMETER_NUMBER) if opcode == "parameter" else -1)
        computations[cid] = (comp.str(_F.COMP_NAME), tuple(ids), comp.int(_F.COMP_ROOT_ID))
    schedule: dict[int, tuple[int, ...]] = {}
    sched = m.message(_F.MOD_SCHEDULE)
    for entry in sched.messages(_F.SCHED_SEQUENCES) if sched else ():
        seq = entry.message(_F.SCHED_VALUE)
        schedule[entry.int(_F.SCHED_KEY)] = tuple(seq.ints(_F.SEQ_IDS)) if seq else ()
    entry_id = m.int(_F.MOD_ENTRY_ID)
    if entry_id not in computations and computations:
        entry_id = list(computations)[-1]  # computations are in dependency order: the entry comes last
    return _Module(m.str(_F.MOD_NAME), instructions, computations, schedule, entry_id,
                   m.message(_F.MOD_STACK_FRAME_INDEX))


def _leaf(shape: Message | None, index: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str | None]:
    for i in index:
        if shape is None:
            return None, None
        tuples = shape.messages(_F.SH_TUPLE)
        shape = tuples[i] if 0 <= i < len(tuples) else None
    if shape is None:
        return None, None
    return tuple(shape.ints(_F.SH_DIMS)), DTYPES.get(shape.int(_F.SH_ELEMENT_TYPE))

def decode_parts(data: bytes, hlo_module: bytes | None = None) -> dict[str, Any]:
    """Decode serialized ``BufferAssignmentProto`` bytes into the fields of a
    :class:`~xlakit.memory.BufferAssignment` (``BufferAssignment(**parts, reported=...)``).

    Args:
      data: ``memory_analysis().serialized_buffer_assignment_proto``.
      hlo_module: the program's serialized ``HloModuleProto`` (for names, shapes, dtypes, the schedule), or
        None — then only ids, sizes and slice dtypes are known.

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

    return {"allocations": tuple(sorted(allocations, key=lambda a: a.index)),
            "logical_buffers": tuple(buffers[k] for k in sorted(buffers)), "heap_traces": tuple(traces),
            "name": module.name if module else None,
            "_aliases": {k: tuple(v) for k, v in aliases.items()}, "_module": module}
