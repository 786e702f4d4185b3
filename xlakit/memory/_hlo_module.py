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
the entry of a 150-layer MLP train step: 2,707 records, in about half the time of a Python loop per field), and
the small computations that define a buffer assignment's other buffers (its reductions' regions: 151 of three
records) in the same pass as the entry, where the assignment is decoded with the module. Each instruction's shape,
its called computations, and its ``OpMetadata`` where not of the common encoding, stay in the bytes until first used
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
from xlakit.memory._instruction_records import _OPCODE_KEY, _instruction, _opcodes
from xlakit.memory._module_tables import _input_output_alias, _schedule
from xlakit.memory._proto import (
    Message,
    ProtoDecodeError,
    last,
    scan,
    span_bounds,
    text,
)
from xlakit.memory._xla_fields import _F

__all__ = ["decode_module", "Instructions", "Computations"]

_AT_ONCE = 32  # records from which reading them together with numpy beats one by one


def _instructions(data: bytes, records: Any, cid: int | list[int]) -> tuple[list[int], list[_Instr]]:
    """:func:`_instruction` of each record at ``records`` (``(start, end)`` pairs, or an ``(n, 2)`` array), in
    order, of computation ``cid`` (or of ``cid[k]`` each), as ``(ids, instructions)``: where there are many, their
    fields read together by :func:`~xlakit.memory._instruction_records.instruction_fields` and the instructions made
    by C-level ``map`` (no Python loop per record); the records it leaves (and all of a few) one by one."""
    cids = cid if isinstance(cid, list) else [cid] * len(records)
    if len(records) < _AT_ONCE:
        pairs = [_instruction(data, start, end, home) for (start, end), home in zip(
            records.tolist() if hasattr(records, "tolist") else records, cids, strict=True)]
        return [iid for iid, _ins in pairs], [ins for _iid, ins in pairs]
    import numpy as np

    from xlakit.memory._instruction_records import InstructionRows, instruction_fields

    f = instruction_fields(data, records)
    n = len(records)
    every = np.frombuffer(data, dtype=np.uint8)

    def strings(start: Any, end: Any) -> list[str]:  # an absent field spans data[-1:-1]: ""
        # gathered with numpy, a NUL after each, then decoded and split at once: no bytes object each
        size = end - start
        total = int(size.sum())
        if 0 <= size.min() and total <= len(data) and end.max() <= len(data):  # (a bad record's: anything)
            raw = every[np.repeat(start - np.cumsum(size) + size, size) + np.arange(total)]
            if raw.all():  # no NUL inside one, so the split gives each back; joined, each is valid UTF-8 or not
                joined = np.zeros(total + n, dtype=np.uint8)
                joined[np.repeat(np.arange(n), size) + np.arange(total)] = raw
                try:
                    return joined[:-1].tobytes().decode().split("\0")
                except UnicodeDecodeError:
                    pass
        return [r.decode("utf-8", errors="replace") for r in map(data.__getitem__, map(slice, start.tolist(),
                                                                                          end.tolist()))]

    def groups(values: Any, at: Any) -> list[tuple[int, ...]]:  # slices of one tuple are tuples: no copy
        return list(map(tuple(values.tolist()).__getitem__, map(slice, at[:-1].tolist(), at[1:].tolist())))

    opcodes, parameter, gte = _opcodes(data, f.opcode_start, f.opcode_end)
    op_names: list[Any] = strings(f.op_name_start, f.op_name_end)
    for k in np.flatnonzero(~f.op_name_read).tolist():  # absent: "" (read); not the common encoding: when asked
        op_names[k] = "" if f.metadata_start[k] < 0 else None
    made = list(map(_Instr, strings(f.name_start, f.name_end), opcodes, cids,
                    itertools.repeat(None, n), groups(f.operands, f.operands_at), itertools.repeat(None, n),
                    op_names, f.frame_id.tolist(), np.where(parameter, f.parameter_number, -1).tolist(),
                    itertools.repeat(InstructionRows(data, f), n),
                    np.where(gte, np.maximum(f.tuple_index, 0), -1).tolist(), range(n)))
    ids = f.id.tolist()
    for k in np.flatnonzero(f.bad).tolist():
        start, end = records[k]
        ids[k], made[k] = _instruction(data, int(start), int(end), cids[k])
    return ids, made


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
                self._keep(*_instructions(data, records, cid), ids)
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

    def _keep(self, read_ids: list[int], read: list[_Instr], ids: list[int]) -> list[int]:
        """Keep the instructions ``read`` (ids ``read_ids``) of a computation's records (in order), after those of
        ``ids`` (returned)."""
        found = self.instructions
        # from the last record, as one by one: where an id repeats, the last record's wins
        new_ids, new = read_ids[::-1], read[::-1]
        if len(set(new_ids)) == len(new_ids) and found.keys().isdisjoint(new_ids):
            found.update(zip(new_ids, new, strict=True))
            ids += new_ids
        else:
            for iid, ins in zip(new_ids, new, strict=True):
                if iid not in found:
                    found[iid] = ins
                ids.append(iid)
        return ids

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
            read_ids, read = _instructions(self.data, records, [cid for cid, part in zip(homes, bounds, strict=True)
                                                                for _ in range(len(part) // 2)])
        except (IndexError, ValueError):
            return
        at = 0
        for cid, part in zip(homes, bounds, strict=True):
            self._partial[cid] = (part, [])
            ids: list[int] = []
            self._keep(read_ids[at:at + len(part) // 2], read[at:at + len(part) // 2], ids)
            at += len(part) // 2
            self._done(cid, ids)

    def decode_with_homes(self, entry: int, iids: list[int | None]) -> None:
        """Decode the entry and the computations :meth:`read_homes` would then read for the buffers defined at
        ``iids`` in one pass (one numpy read of all their records, not two); where that pass fails, the entry
        alone, as :meth:`decode` (which says what is wrong), and the others as before."""
        with self._lock:
            if not self._decode_with_homes(entry, iids):
                self.decode(entry)

    def _decode_with_homes(self, entry: int, iids: list[int | None]) -> bool:
        import numpy as np

        data, comps = self.data, self.comps
        try:
            parts = {entry: span_bounds(data, *comps[entry][1:3], _INSTRUCTION_KEY)}
        except (IndexError, ValueError):
            return False
        if len(parts[entry]) < 2 * _AT_ONCE:
            return False
        placed = [iid for iid in iids if iid is not None]
        home = (32).__rrshift__  # iid >> 32, by C-level map
        for cid in dict.fromkeys(map(home, placed)):
            if cid in comps and cid != entry:
                try:
                    parts[cid] = span_bounds(data, *comps[cid][1:3], _INSTRUCTION_KEY)
                except (IndexError, ValueError):
                    pass  # read_homes finds it so, and reads none
        counts = [len(part) // 2 for part in parts.values()]
        try:
            read_ids, read = _instructions(
                data, np.fromiter(itertools.chain.from_iterable(parts.values()), dtype=np.int64,
                                  count=2 * sum(counts)).reshape(-1, 2),
                list(itertools.chain.from_iterable(map(itertools.repeat, parts, counts))))
        except (IndexError, ValueError):
            return False
        at = dict(zip(parts, itertools.accumulate(counts, initial=0), strict=False))  # where each one's begin
        self._partial[entry] = (parts[entry], [])
        self._done(entry, self._keep(read_ids[:counts[0]], read[:counts[0]], []))
        # what read_homes would read now, in its order: all of it read above, or none (left to it)
        homes = [cid for cid in dict.fromkeys(map(home, itertools.filterfalse(self.instructions.__contains__, placed)))
                 if cid in comps and cid not in self.members and cid not in self._partial]
        if all(cid in parts for cid in homes) and sum(len(parts[cid]) for cid in homes) // 2 >= 2 * _AT_ONCE:
            for cid in homes:
                self._partial[cid] = (parts[cid], [])
                part = slice(at[cid], at[cid] + len(parts[cid]) // 2)
                self._done(cid, self._keep(read_ids[part], read[part], []))
        return True

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


def decode_module(data: bytes, homes: list[int | None] | None = None) -> _Module:
    """The :class:`~xlakit.memory._assignment_types._Module` of a serialized ``HloModuleProto``: the entry
    computation decoded (with the computations that hold the instructions ``homes``, a buffer assignment's,
    as :meth:`Instructions.read_homes` would read them), the others on demand.

    Raises:
      ProtoDecodeError: malformed bytes.
    """
    return without_gc(_decode_module, data, homes)  # ~10^4 objects made, none in a cycle (xlakit.memory._decoding)


def _decode_module(data: bytes, homes: list[int | None] | None) -> _Module:
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
        index.decode_with_homes(entry_id, homes) if homes else index.decode(entry_id)
    frames = top.get(_F.MOD_STACK_FRAME_INDEX)
    stack_frames = Message(data[frames[-1][0]:frames[-1][1]], lazy=True) if frames else None
    module_name = top.get(_F.MOD_NAME)
    return _Module(text(data, module_name[-1]) if module_name else "", Instructions(index), Computations(index),
                   schedule, entry_id, stack_frames, _input_output_alias(data, top.get(_F.MOD_INPUT_OUTPUT_ALIAS)))
