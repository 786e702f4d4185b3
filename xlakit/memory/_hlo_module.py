"""Reading the parts of an ``HloModuleProto`` that name a buffer assignment's values, by the field numbers of
XLA's public ``hlo.proto`` (:class:`~xlakit.memory._xla_fields._F`), decoding only what is read.

A module is mostly the bodies of fusions and reduction regions (a 500-layer MLP train step: 22,498
instructions, 4,500 of them in the entry computation). Buffers are defined by the instructions that are program
steps (the entry's, and those of the while bodies and called computations it runs), so the entry is decoded up
front and the computations it runs when first walked; any other computation is read when one of its instructions
is first asked for, from its last record backwards (XLA writes instructions in post order: a fusion's root comes
last, its operands just before), and a computation's root opcode is read from that one record alone
(:meth:`Instructions.root_opcode`). Current XLA puts a computation's id in the high 32 bits of its
instructions' ids, which finds the computation to read; without that, every computation is decoded once. A
computation decoded whole has its records read together with numpy (:mod:`xlakit.memory._instruction_records`;
the entry of a 150-layer MLP train step: 2,707 records, in about half the time of a Python loop per field). Each
instruction's shape, and its ``OpMetadata`` where not of the common encoding, stay in the bytes until first used
(:class:`~xlakit.memory._assignment_types._Instr`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from xlakit.memory._assignment_types import _Instr, _Module
from xlakit.memory._computation_heads import _INSTRUCTION_KEY, _computation_head, _head, _heads
from xlakit.memory._decoding import without_gc
from xlakit.memory._instruction_records import _OPCODES, _opcodes
from xlakit.memory._module_tables import _input_output_alias, _schedule
from xlakit.memory._proto import (
    Message,
    ProtoDecodeError,
    _varint,
    last,
    packed,
    scan,
    span_bounds,
    text,
)
from xlakit.memory._xla_fields import _F

__all__ = ["decode_module", "Instructions", "Computations"]

# Keys (field << 3 | wire type 2) of the length-delimited fields read from every instruction.
_NAME_KEY, _OPCODE_KEY, _SHAPE_KEY, _METADATA_KEY = (f << 3 | 2 for f in (_F.INS_NAME, _F.INS_OPCODE, _F.INS_SHAPE,
                                                                         _F.INS_METADATA))
_ID, _OPERANDS, _CALLED, _PARAMETER_NUMBER = _F.INS_ID, _F.INS_OPERANDS, _F.INS_CALLED, _F.INS_PARAMETER_NUMBER
_TUPLE_INDEX = _F.INS_TUPLE_INDEX


def _instruction(data: bytes, pos: int, end: int, cid: int) -> tuple[int, _Instr]:
    """``(id, instruction)`` from the HloInstructionProto at ``data[pos:end]``: name, opcode, operands, called
    computations, parameter number; the spans of its shape and metadata, read later. Keys of one or two bytes and
    varints of any length are read inline (a large module has ~10^5 instruction records)."""
    name = opcode = ""
    iid = pnum = tidx = 0  # proto3 leaves out fields equal to 0
    operands: list[int] = []
    called: list[int] = []
    shape_start = shape_end = meta_start = meta_end = -1  # absent
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:  # fields 16-2047 (id, operand_ids, called_computation_ids...)
            key = (key & 0x7F) | data[pos + 1] << 7
            pos += 2
        else:
            key, pos = _varint(data, pos)
        wire = key & 7
        if wire != 0 and wire != 2:
            if wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ProtoDecodeError(f"field {key >> 3}: unsupported wire type {wire}")
            continue
        value = data[pos]  # a varint's value, or a length
        pos += 1
        if value >= 0x80:
            value &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ProtoDecodeError("varint longer than 10 bytes")
        if wire == 2:
            stop = pos + value
            if key == _NAME_KEY:
                name = data[pos:stop].decode("utf-8", errors="replace")
            elif key == _OPCODE_KEY:
                raw = data[pos:stop]
                opcode = _OPCODES.get(raw) or _OPCODES.setdefault(raw, raw.decode("utf-8", errors="replace"))
            elif key == _SHAPE_KEY:
                shape_start, shape_end = pos, stop
            elif key == _METADATA_KEY:
                meta_start, meta_end = pos, stop
            else:
                field = key >> 3
                if field == _OPERANDS:
                    operands += packed(data, pos, stop)
                elif field == _CALLED:
                    called += packed(data, pos, stop)
            pos = stop
        else:
            field = key >> 3
            if field == _ID:
                iid = value
            elif field == _PARAMETER_NUMBER:
                pnum = value
            elif field == _TUPLE_INDEX:
                tidx = value
            elif field == _OPERANDS:  # an unpacked repeated field
                operands.append(value)
            elif field == _CALLED:
                called.append(value)
    if pos > end:
        raise ProtoDecodeError("an instruction's record runs past its end")
    ins = _Instr(name, opcode, cid, None, tuple(operands), tuple(called), "", 0, pnum if opcode == "parameter" else -1,
                 None, tidx if opcode == "get-tuple-element" else -1)
    ins._raw = (data, meta_start, meta_end, shape_start, shape_end)
    ins._op_name = None
    return iid, ins


_AT_ONCE = 32  # records from which reading them together with numpy beats one by one


def _instructions(data: bytes, records: Any, cid: int | list[int]) -> list[tuple[int, _Instr]]:
    """:func:`_instruction` of each record at ``records`` (``(start, end)`` pairs, or an ``(n, 2)`` array), in
    order, of computation ``cid`` (or of ``cid[k]`` each): where there are many, their fields read together by
    :func:`~xlakit.memory._instruction_records.instruction_fields` and the instructions made by C-level ``map`` (no
    Python loop per record); the records it leaves (and all of a few) one by one."""
    cids = cid if isinstance(cid, list) else [cid] * len(records)
    if len(records) < _AT_ONCE:
        return [_instruction(data, start, end, home) for (start, end), home in zip(
            records.tolist() if hasattr(records, "tolist") else records, cids, strict=True)]
    import numpy as np

    from xlakit.memory._instruction_records import instruction_fields

    f = instruction_fields(data, records)
    n = len(records)
    cut = data.__getitem__

    def strings(start: Any, end: Any) -> list[str]:  # an absent field reads data[-1:-1]: ""
        raw = list(map(cut, map(slice, start.tolist(), end.tolist())))
        try:
            return list(map(bytes.decode, raw))
        except UnicodeDecodeError:
            return [r.decode("utf-8", errors="replace") for r in raw]

    def groups(values: Any, at: Any) -> list[tuple[int, ...]]:  # slices of one tuple are tuples: no copy
        return list(map(tuple(values.tolist()).__getitem__, map(slice, at[:-1].tolist(), at[1:].tolist())))

    opcodes, parameter, gte = _opcodes(data, f.opcode_start, f.opcode_end)
    op_names: list[Any] = strings(f.op_name_start, f.op_name_end)
    for k in np.flatnonzero(~f.op_name_read).tolist():  # absent: "" (read); not the common encoding: when asked
        op_names[k] = "" if f.metadata_start[k] < 0 else None
    made = list(map(_Instr, strings(f.name_start, f.name_end), opcodes, cids,
                    itertools.repeat(None, n), groups(f.operands, f.operands_at), groups(f.called, f.called_at),
                    op_names, f.frame_id.tolist(), np.where(parameter, f.parameter_number, -1).tolist(),
                    zip(itertools.repeat(data, n), *(column.tolist() for column in (
                        f.metadata_start, f.metadata_end, f.shape_start, f.shape_end)), strict=False),
                    np.where(gte, np.maximum(f.tuple_index, 0), -1).tolist()))
    out = list(zip(f.id.tolist(), made, strict=True))
    for k in np.flatnonzero(f.bad).tolist():
        start, end = records[k]
        out[k] = _instruction(data, int(start), int(end), cids[k])
    return out


class _Index:
    """The computations of one serialized module, decoded on demand (see the module docstring)."""

    def __init__(self, data: bytes, comps: dict[int, tuple[str, int, int, int, tuple[int, int] | None]]) -> None:
        self.data = data
        self.comps = comps  # computation id -> (name, start, end, root id, span of its last instruction)
        self.instructions: dict[int, _Instr] = {}
        self.members: dict[int, tuple[int, ...]] = {}  # fully decoded computation id -> its instruction ids
        self._partial: dict[int, tuple[list[int], list[int]]] = {}  # records (flat starts, ends), ids read from the end
        self.root_opcodes: dict[int, str] = {}  # computation id -> its root's opcode, read alone
        self.complete = False
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}  # a lock does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.RLock())

    def _read(self, cid: int, wanted: int | None) -> _Instr | None:
        """Decode ``cid``'s records from the last one read backwards until ``wanted`` (None: all of them); one
        thread at a time (two threads attributing one program share this index)."""
        with self._lock:
            if cid in self.members:  # read meanwhile by another thread
                return self.instructions.get(wanted) if wanted is not None else None
            return self._read_records(cid, wanted)

    def _read_records(self, cid: int, wanted: int | None) -> _Instr | None:
        state = self._partial.get(cid)
        if state is None:
            _name, start, end, _root, _last = self.comps[cid]
            state = self._partial[cid] = (span_bounds(self.data, start, end, _INSTRUCTION_KEY), [])
        bounds, ids = state
        count = len(bounds) // 2
        data, found = self.data, self.instructions
        try:
            if wanted is None:  # the rest of the computation, in one pass
                rest = bounds[:2 * (count - len(ids))]
                if len(rest) >= 2 * _AT_ONCE:
                    import numpy as np

                    records: Any = np.fromiter(rest, dtype=np.int64, count=len(rest)).reshape(-1, 2)
                else:
                    records = list(zip(rest[0::2], rest[1::2], strict=True))
                self._keep(_instructions(data, records, cid), ids)
            while len(ids) < count:
                at = 2 * (count - 1 - len(ids))
                iid, ins = _instruction(data, bounds[at], bounds[at + 1], cid)
                found.setdefault(iid, ins)
                ids.append(iid)
                if iid == wanted:
                    return ins
        except IndexError:
            raise ProtoDecodeError(f"computation {cid}: a truncated instruction") from None
        self._done(cid, ids)
        return found.get(wanted) if wanted is not None else None

    def _keep(self, read: list[tuple[int, _Instr]], ids: list[int]) -> None:
        """Keep the instructions ``read`` of a computation's records (in order), after those of ``ids``."""
        found = self.instructions
        read.reverse()  # from the last record, as one by one: where an id repeats, the last record's wins
        new_ids = [iid for iid, _ins in read]
        if len(set(new_ids)) == len(read) and found.keys().isdisjoint(new_ids):
            found.update(read)
            ids += new_ids
        else:
            for iid, ins in read:
                if iid not in found:
                    found[iid] = ins
                ids.append(iid)

    def _done(self, cid: int, ids: list[int]) -> None:
        self.members[cid] = tuple(reversed(ids))
        del self._partial[cid]
        self.complete = len(self.members) == len(self.comps)

    def read_homes(self, iids: list[int]) -> None:
        """Decode together the computations not read yet that hold ``iids`` by their ids (current XLA: the high
        half names the computation, as :meth:`find` looks first), in the order of the ids: a program's small
        computations (a reduction's region: two parameters and a root) read as one table, not one by one."""
        with self._lock:
            self._read_homes(iids)

    def _read_homes(self, iids: list[int]) -> None:
        homes = [cid for cid in dict.fromkeys(iid >> 32 for iid in iids)
                 if cid in self.comps and cid not in self.members and cid not in self._partial]
        import numpy as np

        try:  # a malformed computation or record: each read when asked for, as before (or never)
            bounds = [span_bounds(self.data, *self.comps[cid][1:3], _INSTRUCTION_KEY) for cid in homes]
            if sum(map(len, bounds)) // 2 < 2 * _AT_ONCE:  # a few records: read when asked for, one by one
                return
            flat = [v for part in bounds for v in part]
            records: Any = np.fromiter(flat, dtype=np.int64, count=len(flat)).reshape(-1, 2)
            read = _instructions(self.data, records, [cid for cid, part in zip(homes, bounds, strict=True)
                                                      for _ in range(len(part) // 2)])
        except (IndexError, ValueError):
            return
        at = 0
        for cid, part in zip(homes, bounds, strict=True):
            self._partial[cid] = (part, [])
            ids: list[int] = []
            self._keep(read[at:at + len(part) // 2], ids)
            at += len(part) // 2
            self._done(cid, ids)

    def decode(self, cid: int) -> tuple[int, ...]:
        """The ids of ``cid``'s instructions in the module's order, all decoded."""
        ids = self.members.get(cid)
        if ids is None:
            self._read(cid, None)
            ids = self.members[cid]
        return ids

    def find(self, iid: int) -> _Instr | None:
        ins = self.instructions.get(iid)
        if ins is not None or self.complete:
            return ins
        home = iid >> 32  # current XLA: an instruction's unique id carries its computation's id
        if home in self.comps and home not in self.members:
            ins = self._read(home, iid)
            if ins is not None:
                return ins
        for cid in self.comps:
            self.decode(cid)
        return self.instructions.get(iid)

    def root_opcode(self, cid: int) -> str | None:
        """The opcode of computation ``cid``'s root, reading only its record (None: unknown computation)."""
        if cid not in self.comps:
            return None
        _name, start, end, root_id, last_record = self.comps[cid]
        ins = self.instructions.get(root_id)
        if ins is not None:
            return ins.opcode
        known = self.root_opcodes.get(cid)
        if known is not None:
            return known
        if last_record is None:  # a quick head leaves the last record to be found when asked for
            last_record = _computation_head(self.data, start, end)[3]
        if last_record is not None:  # XLA writes the root last
            try:
                iid, opcode = _head(self.data, *last_record)
            except IndexError:
                raise ProtoDecodeError(f"computation {cid}: a truncated instruction") from None
            if iid == root_id:
                self.root_opcodes[cid] = opcode
                return opcode
        root = self.root(cid)
        return root.opcode if root is not None else None

    def root(self, cid: int) -> _Instr | None:
        """The root of computation ``cid``, reading no more than the records after it."""
        if cid not in self.comps:
            return None
        root_id = self.comps[cid][3]
        ins = self.instructions.get(root_id)
        if ins is None and cid not in self.members:
            ins = self._read(cid, root_id)
        return ins


class Instructions(Mapping):
    """Instruction id -> :class:`~xlakit.memory._assignment_types._Instr`, decoding computations on demand;
    iterating decodes them all."""

    def __init__(self, index: _Index) -> None:
        self._index = index

    @property
    def known(self) -> dict[int, _Instr]:
        """The instructions decoded so far, by id (a plain dict: the fastest lookup where most are known)."""
        return self._index.instructions

    def __getitem__(self, iid: int) -> _Instr:
        ins = self._index.find(iid) if isinstance(iid, int) else None
        if ins is None:
            raise KeyError(iid)
        return ins

    def read_homes(self, iids: list[int]) -> None:
        """Decode the computations that hold these instruction ids, together (:meth:`_Index.read_homes`)."""
        self._index.read_homes(iids)

    def get(self, iid: Any, default: Any = None) -> Any:
        ins = self._index.instructions.get(iid)
        if ins is not None:
            return ins
        ins = self._index.find(iid) if isinstance(iid, int) else None
        return default if ins is None else ins

    def __contains__(self, iid: object) -> bool:
        return self.get(iid) is not None

    def _all(self) -> dict[int, _Instr]:
        for cid in self._index.comps:
            self._index.decode(cid)
        return self._index.instructions

    def __iter__(self) -> Iterator[int]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def root(self, cid: int) -> _Instr | None:
        return self._index.root(cid)

    def may_hold(self, opcode: str) -> bool:
        """False when no instruction record of the module has this opcode: its ``opcode`` field's bytes
        (key, length, name) occur nowhere in the module (a search at C speed; True may be a false alarm)."""
        name = opcode.encode()
        return len(name) >= 0x80 or bytes((_OPCODE_KEY, len(name))) + name in self._index.data

    def root_opcode(self, cid: int) -> str | None:
        return self._index.root_opcode(cid)


class Computations(Mapping):
    """Computation id -> ``(name, instruction ids, root id)``; a computation's instructions are decoded when its
    entry is first read."""

    def __init__(self, index: _Index) -> None:
        self._index = index

    def __getitem__(self, cid: int) -> tuple[str, tuple[int, ...], int]:
        name, _start, _end, root, _last = self._index.comps[cid]
        return name, self._index.decode(cid), root

    def __contains__(self, cid: object) -> bool:
        return cid in self._index.comps

    def __iter__(self) -> Iterator[int]:
        return iter(self._index.comps)

    def __len__(self) -> int:
        return len(self._index.comps)

    def root_id(self, cid: int) -> int:
        return self._index.comps[cid][3]

    def name_of(self, cid: int) -> str | None:
        span = self._index.comps.get(cid)
        return span[0] if span is not None else None


def decode_module(data: bytes) -> _Module:
    """The :class:`~xlakit.memory._assignment_types._Module` of a serialized ``HloModuleProto``: the entry
    computation decoded, the others on demand.

    Raises:
      ProtoDecodeError: malformed bytes.
    """
    return without_gc(_decode_module, data)  # ~10^4 objects made, none in a cycle (xlakit.memory._decoding)


def _decode_module(data: bytes) -> _Module:
    top = scan(data, 0, len(data), (_F.MOD_NAME, _F.MOD_COMPUTATIONS, _F.MOD_ENTRY_ID, _F.MOD_SCHEDULE,
                                    _F.MOD_STACK_FRAME_INDEX, _F.MOD_INPUT_OUTPUT_ALIAS))
    comp_spans = _heads(data, top.get(_F.MOD_COMPUTATIONS, []))
    schedule: dict[int, tuple[int, ...]] = {}
    for span in top.get(_F.MOD_SCHEDULE, [])[-1:]:
        schedule = _schedule(data, span)
    entry_id = last(top, _F.MOD_ENTRY_ID)
    if entry_id not in comp_spans and comp_spans:
        entry_id = list(comp_spans)[-1]  # computations are in dependency order: the entry comes last
    index = _Index(data, comp_spans)
    if entry_id in comp_spans:
        index.decode(entry_id)
    frames = top.get(_F.MOD_STACK_FRAME_INDEX)
    stack_frames = Message(data[frames[-1][0]:frames[-1][1]], lazy=True) if frames else None
    module_name = top.get(_F.MOD_NAME)
    return _Module(text(data, module_name[-1]) if module_name else "", Instructions(index), Computations(index),
                   schedule, entry_id, stack_frames, _input_output_alias(data, top.get(_F.MOD_INPUT_OUTPUT_ALIAS)))
