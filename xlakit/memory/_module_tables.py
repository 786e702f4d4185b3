"""The tables of a serialized ``HloModuleProto`` beside its computations, read by
:func:`xlakit.memory._hlo_module.decode_module`: the schedule (each scheduled computation's instruction ids in
order: one sequence per computation, hundreds in a large program) and the input/output aliases (donation, as the
compiled module records it)."""

from __future__ import annotations

from typing import Any

from xlakit.memory._proto import ProtoDecodeError, _varint, last, repeated_ints, scan
from xlakit.memory._varint_records import packed_ints, packed_many
from xlakit.memory._xla_fields import _F

__all__: list[str] = []  # read by xlakit.memory._hlo_module only

_SCHED_KEY, _SCHED_VALUE, _SEQ_IDS = _F.SCHED_KEY << 3, _F.SCHED_VALUE << 3 | 2, _F.SEQ_IDS << 3 | 2


def _schedule(data: bytes, span: tuple[int, int]) -> dict[int, tuple[int, ...]]:
    """Computation id -> its instruction ids in order, from the HloScheduleProto at ``span``. An entry as XLA writes
    it (``key, value { instruction_ids: packed }``) is read inline and the ids of all of them valued together
    (:func:`~xlakit.memory._varint_records.packed_many`); any other encoding field by field."""
    keys: list[int] = []
    payloads: list[tuple[int, int]] = []
    slow: dict[int, list[int]] = {}  # entry number -> its ids, read field by field
    for entry_start, entry_end in scan(data, span[0], span[1], (_F.SCHED_SEQUENCES,)).get(_F.SCHED_SEQUENCES, ()):
        quick = _quick_entry(data, entry_start, entry_end)
        if quick is not None:
            keys.append(quick[0])
            payloads.append(quick[1])
            continue
        entry = scan(data, entry_start, entry_end, (_F.SCHED_KEY, _F.SCHED_VALUE))
        ids: list[int] = []
        for seq in entry.get(_F.SCHED_VALUE, [])[-1:]:
            for value in scan(data, seq[0], seq[1], (_F.SEQ_IDS,)).get(_F.SEQ_IDS, ()):
                ids += packed_ints(data, *value) if isinstance(value, tuple) else [value]
        slow[len(keys)] = ids
        keys.append(last(entry, _F.SCHED_KEY))
        payloads.append((0, 0))
    values = packed_many(data, payloads)
    for k, ids in slow.items():
        values[k] = ids
    return dict(zip(keys, map(tuple, values), strict=True))


def _quick_entry(data: bytes, pos: int, end: int) -> tuple[int, tuple[int, int]] | None:
    """(key, span of the packed ids) of a schedule entry of exactly ``key, value { ids }`` (or an empty value);
    None for anything else."""
    try:
        if data[pos] != _SCHED_KEY:
            return None
        key, pos = _varint(data, pos + 1)
        if data[pos] != _SCHED_VALUE:
            return None
        size, pos = _varint(data, pos + 1)
        if pos + size != end:
            return None
        if pos == end:
            return key, (end, end)
        if data[pos] != _SEQ_IDS:
            return None
        size, pos = _varint(data, pos + 1)
        return (key, (pos, end)) if pos + size == end else None
    except (IndexError, ProtoDecodeError):
        return None


def _input_output_alias(data: bytes, found: list[Any] | None
                        ) -> tuple[tuple[tuple[int, ...], int, tuple[int, ...]], ...]:
    """``(output shape index, parameter number, parameter shape index)`` of each entry of the module's
    ``HloInputOutputAliasProto``: the results XLA writes into an entry parameter's buffer."""
    out = []
    for span in (found or [])[-1:]:
        for entry in scan(data, span[0], span[1], (_F.IOA_ENTRIES,)).get(_F.IOA_ENTRIES, ()):
            f = scan(data, entry[0], entry[1], (_F.IOA_OUTPUT_INDEX, _F.IOA_PARAMETER, _F.IOA_PARAMETER_INDEX))
            out.append((tuple(repeated_ints(data, f.get(_F.IOA_OUTPUT_INDEX))), last(f, _F.IOA_PARAMETER),
                        tuple(repeated_ints(data, f.get(_F.IOA_PARAMETER_INDEX)))))
    return tuple(out)
