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
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from xlakit.memory._assignment_decode import _F as _F  # XLA's field numbers (tests build protos with them)
from xlakit.memory._assignment_decode import decode_parts
from xlakit.memory._assignment_liveness import schedule_liveness, schedule_ranges, trace_rows
from xlakit.memory._assignment_table import BufferRows, Built, apart_on_chip, facts, rows_of
from xlakit.memory._assignment_types import (
    DTYPES,
    HOST_MEMORY_COLOR,
    Allocation,
    HeapEvent,
    LogicalBuffer,
    Slice,
    _Module,
)
from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._proto import ProtoDecodeError

__all__ = ["BufferAssignment", "Allocation", "LogicalBuffer", "Slice", "HeapEvent", "buffer_assignment",
           "decode_buffer_assignment", "DTYPES", "HOST_MEMORY_COLOR"]

# Compiled program -> its decoded BufferAssignment, kept while the program lives: peak(), compare() and the views
# often look at the same program again, and an executable's buffer assignment never changes.
_DECODED: weakref.WeakKeyDictionary[Any, BufferAssignment] = weakref.WeakKeyDictionary()


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
      platform: the platform it was compiled for (names its memory spaces), or None.
      on_chip: allocations in the chip's own memory spaces (TPU VMEM, SMEM, sync flags: memory inside the chip,
        not device memory); kept apart from ``allocations``, and their buffers and heap traces left out of
        ``logical_buffers``, ``heap_traces``, liveness and the peak, which are about device memory (and host
        memory, colour 5, marked per allocation).
    """

    allocations: tuple[Allocation, ...]
    logical_buffers: tuple[LogicalBuffer, ...]
    heap_traces: tuple[tuple[int, tuple[HeapEvent, ...]], ...]
    name: str | None = None
    reported: Any = dataclasses.field(default=None, repr=False, compare=False)
    platform: str | None = None
    on_chip: tuple[Allocation, ...] = ()
    _aliases: Mapping[int, tuple[tuple[int | None, tuple[int, ...]], ...]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)
    _module: _Module | None = dataclasses.field(default=None, repr=False, compare=False)
    _memo: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)  # derived once

    def __post_init__(self) -> None:
        # Each assignment derives its own (dataclasses.replace passes the memo on): the decoder's columns are kept
        # only with the fields still to be made from them, so a replaced assignment is read from what it holds.
        table = self._memo.get("table")
        own = table is not None and all(getattr(self.__dict__.get(name), "table", None) is table
                                        for name in ("allocations", "logical_buffers"))
        object.__setattr__(self, "_memo", {"table": table} if own else {})

    # -- lookups ------------------------------------------------------------------------------------
    def buffer(self, buffer_id: int) -> LogicalBuffer:
        """The logical buffer with this id. Raises KeyError."""
        for b in self.logical_buffers:
            if b.id == buffer_id:
                return b
        raise KeyError(f"no logical buffer {buffer_id}")

    def allocation_of(self) -> dict[int, tuple[Allocation, Slice]]:
        """Logical buffer id -> (allocation, slice)."""
        return dict(self._placement())

    def __getstate__(self) -> dict[str, Any]:
        memo = {k: v for k, v in self._memo.items() if k not in ("table", "rows")}  # the decoder's columns stay
        return {**{k: getattr(self, k) for k in self.__dict__}, "_memo": memo}  # the objects made

    def _rows(self) -> BufferRows:
        """Each logical buffer's fields and its allocation's and slice's, as columns (read from the decoder's
        columns without making the objects where this assignment has them)."""
        if "rows" not in self._memo:
            table = self._memo.get("table")
            self._memo["rows"] = table.rows() if table is not None else rows_of(self.logical_buffers,
                                                                                self._placement())
        return self._memo["rows"]

    def _allocation_facts(self) -> Sequence[Any]:
        """The allocations by index as the attribution's donations read them (no object made where this
        assignment has the decoder's columns)."""
        table = self._memo.get("table")
        return facts(table) if table is not None else self.allocations

    def _placement(self) -> dict[int, tuple[Allocation, Slice]]:
        """:meth:`allocation_of`, made once (not to be changed by the caller)."""
        if "placement" not in self._memo:
            self._memo["placement"] = {s.buffer.id: (a, s) for a in self.allocations for s in a.slices}
        return self._memo["placement"]

    # -- totals -------------------------------------------------------------------------------------
    def totals(self) -> dict[str, int]:
        """Byte totals computed from the allocations the way XLA fills ``CompiledMemoryStats``.

        argument = parameter allocations; alias = those aliased with an output; output = maybe-live-out
        allocations (including a donated parameter's); temp = allocations that are none of parameter,
        maybe-live-out, thread-local, constant. Host (color 5) allocations go to the ``host_*`` keys.
        Keys match :class:`~xlakit.memory.CompiledMemory` fields. Where XLA shipped a heap simulator trace of the
        device temporaries (TPU), also ``peak_bytes``: arguments + outputs − aliases + constants + the
        trace's highest live bytes, which is how XLA fills ``peak_memory_in_bytes`` there (checked on a TPU v5e:
        equal to the byte). On-chip allocations (:attr:`on_chip`) add ``on_chip_bytes``, outside every other key.
        """
        out = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "host_argument_bytes",
                             "host_output_bytes", "host_alias_bytes", "host_temp_bytes"), 0)
        peak = self._trace_peak()
        if peak is not None:
            device = [a for a in self.allocations if a.memory_space != "host"]
            out["peak_bytes"] = (sum(a.size for a in device if a.is_parameter)
                                        + sum(a.size for a in device if a.maybe_live_out and not a.is_parameter)
                                        + sum(a.size for a in device if a.is_constant) + peak)
        if self.on_chip:
            out["on_chip_bytes"] = sum(a.size for a in self.on_chip)
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
            value = getattr(reported, key, None)
            rows.append((key, decoded, value, None if value is None else decoded == value))
        return pd.DataFrame(rows, columns=["field", "decoded", "reported", "equal"]).set_index("field")

    def _trace_peak(self) -> int | None:
        """The highest live bytes of the heap trace of the device temporary allocation, or None without one."""
        temp = {a.index for a in self.allocations if a.kind == "temporary" and a.memory_space != "host"}
        sizes = {b.id: b.size for b in self.logical_buffers}
        best = None
        for index, events in self.heap_traces:
            if index not in temp:
                continue
            rows = trace_rows(self.logical_buffers, [(index, events)])
            top = max((r["live_bytes"] for r in rows), default=0) if sizes else 0
            best = top if best is None else max(best, top)
        return best

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
            frame = pd.DataFrame(trace_rows(self.logical_buffers, self.heap_traces))
            frame.attrs["source"] = "XLA heap simulator trace (BufferAssignmentProto.heap_simulator_traces)"
            return frame
        if self._module is None:
            raise ValueError("this buffer assignment has no heap simulator trace and no HLO module to "
                             "reconstruct liveness from; call buffer_assignment() on the Compiled program")
        rows, _ = self._schedule_liveness()
        frame = pd.DataFrame(rows)
        frame.attrs["source"] = "reconstructed from the HLO schedule and buffer aliases (no heap trace shipped)"
        return frame

    def largest(self, n: int = 10):
        """The ``n`` largest logical buffers live at the peak, as a ``pandas.DataFrame`` sorted by bytes.

        "At the peak" uses XLA's own answer when the proto has it (``peak_buffers``: for each allocation, the
        buffers live at the earliest point where that allocation's live bytes peak — together they are what
        sets each allocation's size); otherwise the buffers live at the step where the reconstructed
        :meth:`live_bytes_by_step` peaks. Columns: id, instruction, opcode, shape, dtype, bytes, allocation,
        kind, offset. ``attrs["source"]`` names the method.

        Raises:
          TypeError: ``n`` is not an int (a bool or a string such as ``"5"`` included).
          ValueError: ``n`` < 1, or neither peak buffers nor a module to reconstruct from.
        """
        import pandas as pd

        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int count of buffers (e.g. largest(5)), got {type(n).__name__} {n!r}")
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

    def _schedule_liveness(self) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]]]:
        assert self._module is not None
        if "liveness" not in self._memo:
            self._memo["liveness"] = schedule_liveness(self._module, self._rows(), self._aliases)
        return self._memo["liveness"]

    def _schedule_ranges(self) -> tuple[list[int], dict[int, tuple[int, int]]]:
        """(instruction ids in program order, buffer id -> (first step, last step)), without the sweep."""
        assert self._module is not None
        if "ranges" not in self._memo:
            self._memo["ranges"] = schedule_ranges(self._module, self._rows(), self._aliases)
        return self._memo["ranges"]

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


# allocations and logical_buffers: made when first read (a decoded assignment holds the decoder's columns)
BufferAssignment.allocations = Built("allocations")  # type: ignore[assignment,misc]
BufferAssignment.logical_buffers = Built("logical_buffers")  # type: ignore[assignment,misc]


def decode_buffer_assignment(data: bytes, hlo_module: bytes | None = None, *, reported: Any = None,
                             platform: str | None = None) -> BufferAssignment:
    """Decode serialized ``BufferAssignmentProto`` bytes (by :mod:`xlakit.memory._assignment_decode`).

    Args:
      data: ``memory_analysis().serialized_buffer_assignment_proto``.
      hlo_module: the program's serialized ``HloModuleProto`` (for names, shapes, dtypes, the schedule), or
        None — then only ids, sizes and slice dtypes are known.
      reported: the :class:`~xlakit.memory.CompiledMemory` of the same program, for
        :meth:`~BufferAssignment.compare`.
      platform: the platform compiled for (default: ``reported.platform``): its memory spaces decide which
        allocations are on-chip (kept apart in ``on_chip``).

    Raises:
      ValueError (``ProtoDecodeError``): the bytes are empty or malformed.
    """
    from xlakit.memory._decoding import without_gc

    platform = platform or getattr(reported, "platform", None)
    return BufferAssignment(**apart_on_chip(without_gc(decode_parts, data, hlo_module), platform),
                            reported=reported, platform=platform)


def buffer_assignment(compiled: Any, /, *args: Any, **kwargs: Any) -> BufferAssignment:
    """Decode the buffer assignment of a compiled program.

    Args:
      compiled: a ``jax.stages.Compiled`` (best: names, shapes, dtypes and the schedule come from its HLO
        module), a jitted function followed by example arguments (compiled here), or a
        :class:`~xlakit.memory.CompiledMemory` that carries the proto (ids, sizes and dtypes only).
        Positional only, so that every keyword is the function's.
      *args, **kwargs: example arguments, only with a function, passed as ``jax.jit(f)(*args, **kwargs)``
        would pass them.

    Returns:
      :class:`BufferAssignment`; its :meth:`~BufferAssignment.compare` checks the decoded totals against
      ``memory_analysis()``. A ``Compiled`` is decoded once: while it lives, asking again returns the same
      object.

    Raises:
      TypeError: unsupported input (a cache entry stores no buffer assignment: load and pass the program), or
        a function that could not be lowered without example arguments (pass them after it).
      ValueError: the backend reports no buffer assignment, or the bytes are malformed.
    """
    from xlakit.memory._assignment_memory import memory_for_assignment, with_assignment_facts
    from xlakit.memory.compiled import CompiledMemory, _compile

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
    import jax

    from xlakit._jax import compiler_dump, lowerings
    from xlakit._jax.stages import jax_stage
    from xlakit.memory._programs import lower, with_assignment

    compiled = jax_stage(compiled)
    needs_args = (not args and not kwargs and callable(compiled)
                  and not isinstance(compiled, (jax.stages.Compiled, jax.stages.Lowered)))
    try:
        if isinstance(compiled, jax.stages.Compiled):  # its Lowered, where xlakit kept it, gives the dump (TPU)
            program = with_assignment(_compile(compiled, args, kwargs), lambda: lowerings.lowering_of(compiled))
        elif isinstance(compiled, jax.stages.Lowered):
            program = with_assignment(None, compiled)
        elif callable(compiled):
            program = with_assignment(None, lower(compiled, args, kwargs))
        else:
            program = _compile(compiled, args, kwargs)
    except TypeError as exc:
        if not needs_args:
            raise
        # A function given without its example arguments fails deep in JAX ("missing 1 required positional
        # argument"); say what buffer_assignment needs instead.
        raise TypeError(f"buffer_assignment() got the function {getattr(compiled, '__name__', compiled)!r} without "
                        "example arguments and could not lower it; pass a jax.stages.Compiled "
                        "(jax.jit(f).lower(x).compile()) or Lowered, or the function followed by example arguments "
                        f"(arrays or jax.ShapeDtypeStruct): buffer_assignment(f, x). JAX said: {exc}") from exc
    try:
        known = _DECODED.get(program)
    except TypeError:  # a program object that cannot be weakly referenced: decoded every time
        known = None
    if known is not None:
        return known
    memory = memory_for_assignment(program)
    module_bytes = None
    data = memory.serialized_buffer_assignment
    dumped = None if data else compiler_dump.remembered(compiled=program)
    if dumped is not None:  # XLA's dump of this executable: assignment and optimized module in one HloProto
        data, module_bytes = compiler_dump.split_hlo_proto(dumped)
    if not data:
        raise ValueError(f"memory_analysis() of {memory.name or 'this program'} on {memory.platform} carries no "
                         "buffer assignment, and this process holds no compiler dump of it; pass the jitted function "
                         "and its example arguments (or its Lowered) instead of the Compiled program, and xlakit "
                         "compiles it once with XLA's dump (xla_dump_to), which carries the buffer assignment. (A "
                         "Compiled made by Lowered.compile() while an xlakit cache is enabled also works: xlakit "
                         "keeps its Lowered.)")
    if module_bytes is None:
        try:
            module_bytes = program.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
        except Exception:  # noqa: BLE001 - without the module only names/shapes are lost
            pass
    try:
        decoded = decode_buffer_assignment(data, module_bytes, reported=memory)
    except ProtoDecodeError as exc:
        raise ValueError(f"could not decode the buffer assignment of {memory.name or 'this program'}: {exc}") \
            from exc
    filled = with_assignment_facts(memory, data, decoded.name)
    if filled is not memory:  # the name and constants the dump's assignment gives (TPU), set before it is shared
        object.__setattr__(decoded, "reported", filled)
    try:
        _DECODED[program] = decoded
    except TypeError:
        pass
    return decoded
