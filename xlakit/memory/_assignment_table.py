"""A decoded buffer assignment's logical buffers and allocations kept as the decoder's columns: the attribution
and the liveness read them per buffer (:class:`BufferRows`), and the :class:`~xlakit.memory.LogicalBuffer`,
:class:`~xlakit.memory.Slice` and :class:`~xlakit.memory.Allocation` objects (thousands of them) are made only when
a caller first reads ``BufferAssignment.logical_buffers`` or ``allocations`` (:class:`Deferred`, :class:`Built`);
:func:`apart_on_chip` makes them at once where on-chip allocations are to be kept apart (TPU)."""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from xlakit.memory._xla_fields import _F

__all__: list[str] = []  # private: used by _assignment_decode and buffer_assignment


class BufferRows(NamedTuple):
    """One list per column, one entry per logical buffer (in ``logical_buffers`` order): the buffer's fields,
    then its allocation's (None, or False for a flag, where the buffer has no slice) and its slice's."""

    ids: list[int]
    instruction_ids: list[int | None]
    shape_indexes: list[tuple[int, ...]]
    instructions: list[str | None]
    opcodes: list[str | None]
    sizes: list[int]
    shapes: list[tuple[int, ...] | None]
    dtypes: list[str | None]
    allocations: list[int | None]  # the allocation's index
    kinds: list[str | None]
    constant: list[bool]
    thread_local: list[bool]
    live_out: list[bool]
    aliased: list[bool]
    offsets: list[int | None]
    slice_sizes: list[int | None]


def rows_of(logical_buffers: Sequence[Any], placement: Mapping[int, tuple[Any, Any]]) -> BufferRows:
    """:class:`BufferRows` of made objects (an assignment whose objects exist: on-chip memory kept apart)."""
    unplaced = (None, None)
    rows = []
    for b in logical_buffers:
        a, s = placement.get(b.id, unplaced)
        rows.append((b.id, b.instruction_id, b.shape_index, b.instruction, b.opcode, b.size, b.shape, b.dtype) + (
            (None, None, False, False, False, False, None, None) if a is None else
            (a.index, a.kind, a.is_constant, a.is_thread_local, a.maybe_live_out, a.aliased_with_output, s.offset,
             s.size)))
    if not rows:
        return BufferRows(*([] for _ in BufferRows._fields))
    return BufferRows(*map(list, zip(*rows, strict=True)))


class AssignmentTable:
    """The columns :mod:`xlakit.memory._assignment_decode` read: ``buffers`` (one list per
    :class:`~xlakit.memory.LogicalBuffer` field, by its name, each buffer in the order read:
    :func:`~xlakit.memory._assignment_records._buffer_columns`), ``allocations`` (its ``_AllocationColumns``), and
    ``make``, which makes the objects from them: (allocations by index, logical buffers by id)."""

    def __init__(self, buffers: dict[str, list[Any]], allocations: Any,
                 make: Callable[[], tuple[tuple[Any, ...], tuple[Any, ...]]]) -> None:
        self.buffers, self.columns, self._make = buffers, allocations, make
        self._objects: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        self._lock = threading.Lock()

    def objects(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(allocations, logical buffers), made once — also where two threads first read them at once, so every
        slice's buffer is the very object ``logical_buffers`` holds."""
        if self._objects is None:
            with self._lock:
                if self._objects is None:
                    self._objects = self._make()
        return self._objects

    def colors(self) -> set[int]:
        return set(self.columns.fields[_F.AL_COLOR - 1])

    def rows(self) -> BufferRows:
        """:class:`BufferRows` from the columns, equal to :func:`rows_of` the objects: a buffer id read twice
        is the last one read (as a dict of them keeps it), and a buffer placed twice is placed where the
        allocations by index last place it (as :meth:`~xlakit.memory.BufferAssignment.allocation_of` does)."""
        import numpy as np

        from xlakit.memory._assignment_records import _kinds

        cols, b = self.columns, self.buffers
        columns = (b["id"], b["instruction_id"], b["shape_index"], b["instruction"], b["opcode"], b["size"],
                   b["shape"], b["dtype"])
        if (np.diff(np.asarray(b["id"], dtype=np.int64)) > 0).all():  # as XLA writes them: by id, each once
            picked = list(columns)
        else:
            last = {bid: k for k, bid in enumerate(b["id"])}
            order = [last[bid] for bid in sorted(last)]
            picked = [[column[k] for k in order] for column in columns]
        f = cols.fields
        n = len(cols.at) - 1
        ranked = np.empty(n, dtype=np.int64)
        ranked[np.argsort(np.asarray(f[_F.AL_INDEX - 1], dtype=np.int64), kind="stable")] = np.arange(n)
        counts: Any = np.diff(np.asarray(cols.at, dtype=np.int64))
        owner = np.repeat(np.arange(n), counts)  # each slice's allocation
        slices = np.argsort(ranked[owner], kind="stable")  # the slices as the allocations by index hold them
        where = dict(zip(np.asarray(cols.buffers, dtype=np.int64)[slices].tolist(), slices.tolist(), strict=True))
        # each allocation's kind, as _kinds names it: each combination of the flags that decide it named once
        decides = np.zeros(n, dtype=np.int64)
        for bit, field in enumerate((_F.AL_PARAMETER, _F.AL_CONSTANT, _F.AL_THREAD_LOCAL, _F.AL_LIVE_OUT)):
            decides |= np.asarray(f[field - 1], dtype=bool).astype(np.int64) << bit
        named = {code: _kinds(bool(code & 1), bool(code & 2), bool(code & 4), bool(code & 8), False, False)[0]
                 for code in set(decides.tolist())}
        per_allocation = [f[_F.AL_INDEX - 1], list(map(named.__getitem__, decides.tolist())),
                          *(f[field - 1] for field in (_F.AL_CONSTANT, _F.AL_THREAD_LOCAL, _F.AL_LIVE_OUT,
                                                       _F.AL_ALIASED))]
        at = list(map(where.get, picked[0]))  # each buffer's slice
        if None not in at:  # every buffer placed (as a program's are): gathered with numpy
            j: Any = np.asarray(at, dtype=np.int64)
            p = owner[j]
            tail = [np.asarray(column, dtype=object)[p].tolist() for column in per_allocation] + [
                np.asarray(column, dtype=object)[j].tolist() for column in (cols.offsets, cols.sizes)]
            return BufferRows(*picked, *tail)
        owners = owner.tolist()
        placed: list[tuple[Any, ...]] = []
        for k in at:
            if k is None:
                placed.append((None, None, False, False, False, False, None, None))
                continue
            placed.append((*(column[owners[k]] for column in per_allocation), cols.offsets[k], cols.sizes[k]))
        tail = list(map(list, zip(*placed, strict=True))) if placed else [[] for _ in range(8)]
        return BufferRows(*picked, *tail)


class AllocationFacts(NamedTuple):
    """What :func:`~xlakit.memory._donation.name_donations` reads of an :class:`~xlakit.memory.Allocation`."""

    index: int  # type: ignore[assignment]  # Allocation.index (a tuple's method otherwise)
    size: int
    parameter_number: int | None
    parameter_shape_index: tuple[int, ...]
    is_parameter: bool
    aliased_with_output: bool


def facts(table: AssignmentTable) -> list[AllocationFacts]:
    """:class:`AllocationFacts` of the allocations by index, from the columns."""
    f, made = table.columns.fields, functools.partial(tuple.__new__, AllocationFacts)  # _make, without its checks
    index, parameter = f[_F.AL_INDEX - 1], f[_F.AL_PARAMETER - 1]
    numbers = [n if p else None for n, p in zip(f[_F.AL_PARAMETER_NUMBER - 1], parameter, strict=True)]
    rows = sorted(zip(index, f[_F.AL_SIZE - 1], numbers, table.columns.indexes, parameter, f[_F.AL_ALIASED - 1],
                      strict=True), key=operator.itemgetter(0))
    return list(map(made, rows))


class Deferred:
    """The value of ``BufferAssignment.allocations`` (``part`` 0) or ``logical_buffers`` (1) until first read."""

    __slots__ = ("table", "part")

    def __init__(self, table: AssignmentTable, part: int) -> None:
        self.table, self.part = table, part

    def get(self) -> tuple[Any, ...]:
        return self.table.objects()[self.part]


class Built:
    """A field of the frozen ``BufferAssignment`` whose :class:`Deferred` value is made when first read (and
    then kept in its place in the instance's ``__dict__``, so equality, repr and pickles see the objects)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # a field without a default, as the dataclass leaves it
        value = obj.__dict__[self.name]
        if type(value) is Deferred:
            value = obj.__dict__[self.name] = value.get()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value


def apart_on_chip(parts: dict[str, Any], platform: str | None) -> dict[str, Any]:
    """Move the allocations of on-chip memory spaces (:mod:`xlakit._jax.platforms`) to ``on_chip``, with their
    logical buffers and heap traces out of the device-memory views."""
    from xlakit._jax.platforms import rules

    rule = rules(platform)
    # a program has thousands of allocations and a few colours: each colour's space looked up once
    table = parts.get("_memo", {}).get("table")
    colors = table.colors() if table is not None else {a.color for a in parts["allocations"]}
    if not any(rule.space(color).kind == "on-chip" for color in colors):
        return parts
    if table is not None:  # the objects, filtered below (the columns are of every allocation)
        parts = {**parts, "allocations": table.objects()[0], "logical_buffers": table.objects()[1], "_memo": {}}
    chip = [a for a in parts["allocations"] if rule.space(a.color).kind == "on-chip"]
    if not chip:
        return parts
    gone = {s.buffer.id for a in chip for s in a.slices}
    indices = {a.index for a in chip}
    return {**parts, "allocations": tuple(a for a in parts["allocations"] if a.index not in indices),
            "logical_buffers": tuple(b for b in parts["logical_buffers"] if b.id not in gone),
            "heap_traces": tuple((i, ev) for i, ev in parts["heap_traces"]
                                 if i not in indices and not any(e.buffer_id in gone for e in ev[:1])),
            "on_chip": tuple(chip)}
