"""Field numbers of the XLA messages xlakit decodes (``xla/service/hlo.proto``, ``xla/xla_data.proto``), in one
place: ``tests/test_memory_proto.py`` checks them against the descriptor the installed jaxlib embeds."""

from __future__ import annotations

__all__ = ["_F"]


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
    MOD_NAME, MOD_COMPUTATIONS, MOD_ENTRY_ID, MOD_SCHEDULE, MOD_INPUT_OUTPUT_ALIAS = 1, 3, 6, 7, 8
    COMP_NAME, COMP_INSTRUCTIONS, COMP_ID, COMP_ROOT_ID = 1, 2, 5, 6
    INS_NAME, INS_OPCODE, INS_SHAPE, INS_ID, INS_OPERANDS, INS_CALLED = 1, 2, 3, 35, 36, 38
    INS_METADATA, INS_PARAMETER_NUMBER, INS_TUPLE_INDEX, MOD_STACK_FRAME_INDEX = 7, 9, 13, 17
    # HloInputOutputAliasProto / .AliasEntryProto
    IOA_ENTRIES, IOA_OUTPUT_INDEX, IOA_PARAMETER, IOA_PARAMETER_INDEX = 1, 1, 2, 3
    # OpMetadata
    MD_OP_NAME, MD_STACK_FRAME_ID = 2, 15
    SCHED_SEQUENCES, SCHED_KEY, SCHED_VALUE, SEQ_IDS = 1, 1, 2, 1
    # ShapeProto, LayoutProto
    SH_ELEMENT_TYPE, SH_DIMS, SH_TUPLE, SH_LAYOUT, LAYOUT_MEMORY_SPACE = 2, 3, 4, 5, 8
