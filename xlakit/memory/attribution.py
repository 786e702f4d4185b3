"""Every logical buffer of a compiled program in the user's terms: which line and layer made it, which
parameter it is, and what role it plays (parameter, optimizer state, residual, temporary, ...).

Sources, all from the compiled program itself (nothing is guessed; what is missing is ``"unknown"``):

* the buffer assignment (:func:`xlakit.memory.buffer_assignment`): bytes, allocation, kind, and the live
  range of each buffer over the module's schedule (``start``/``end``: program steps, as XLA orders them);
* each defining instruction's ``OpMetadata``: ``op_name`` (JAX's name stack, read by
  :func:`~xlakit.memory._hlo_frames.parse_op_name`) and ``stack_frame_id`` into the module's stack frame
  index, whose first frame outside jax/flax/optax/Python is the ``source`` (``model.py:42 (MLP.__call__ ›
  self.l1(x))``; a notebook cell reads ``cell [7], line 3``). An instruction XLA added without metadata
  (``copy``, ``bitcast``, ``get-tuple-element``...) takes the metadata of the value it copies; a fusion whose
  own metadata has no stack frame (XLA merged it from several instructions) takes the frame of the fused
  instruction with its op name, else of the one nearest the fused root; a buffer with no metadata anywhere
  (a constant XLA broadcast into a buffer of its own for a fusion) takes the line of its readers when they are
  all on one user line (scope ``made by XLA for › ...``), else stays ``"unknown"``;
* the jitted function's argument tree (``Compiled.in_tree``) for each entry parameter's pytree path, else the
  parameter's own op name (JAX records the argument path there).

Roles:

================= ===================================================================================
parameter         an entry argument (``parameter``: its pytree path; ``donated``: XLA may reuse it)
optimizer state   an entry argument under an optax state node, ``nnx.Optimizer`` or an ``opt_state`` key
aliased           a result written into a donated argument's buffer (``parameter``: that argument;
                  ``output``: which result). From the step it is written, the bytes it shares with the
                  argument are charged to it, not to the argument: each byte once, and the donation is
                  seen as what it is (:attr:`Attribution.donations`: argument → result, bytes saved)
output            a result (a position of the entry's root), not in an argument's buffer; a temporary XLA
                  placed in an output's allocation earlier in the program is not an output
residual          a forward-pass value (op name under ``jvp``) read by the backward pass (under
                  ``transpose``): what a gradient keeps alive, what ``jax.checkpoint`` trades for compute
recomputed        a forward-pass value recomputed in the backward pass (remat): JAX traced it under the
                  ``rematted_computation`` scope of a ``jax.checkpoint``
temporary         any other value in XLA's scratch (or one XLA placed in a donated argument's bytes after
                  the argument's last use)
constant          a literal compiled into the program
thread-local      a small per-thread value (not device memory)
================= ===================================================================================
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xlakit._jax.call_options import DEFAULT
from xlakit.memory._buffer_columns import BUFFER_COLUMNS
from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._hlo_frames import FrameTable, NameStack, layer_of, parse_op_name, source_of, stack_text, user_frame
from xlakit.memory._speaking import (
    argument_columns,
    copied_argument,
    fused_frame,
    last_reader,
    metadata_source,
    phases_of,
    read_by_backward,
    readers_line,
    results_of,
    writes_into,
)

__all__ = ["Attribution", "attribute", "ROLES", "BUFFER_COLUMNS"]

ROLES = ("parameter", "optimizer state", "aliased", "output", "residual", "recomputed", "temporary", "constant",
         "thread-local")


@dataclasses.dataclass(frozen=True)
class Attribution:
    """The logical buffers of one compiled program, attributed.

    Attributes:
      buffers: ``pandas.DataFrame``, one row per logical buffer, columns :data:`BUFFER_COLUMNS`: bytes (int),
        shape (tuple or None), dtype, role (:data:`ROLES`), scope (``"backward › MLP/Dense_0"``; ``"argument"``
        for entry arguments; ``"unknown"`` without an op name), phase (forward/backward/""), layer
        (``"MLP.__call__ › self.l1(x)"``), source (``"model.py:42 (...)"``, ``"argument params['l1']"``,
        ``"XLA's copy of donated params['w'], read last at model.py:12 (step)"`` for a copy XLA inserted,
        ``"unknown"``), file/line of the first user frame, parameter (pytree path of an argument; for an aliased
        result, the donated argument whose buffer it takes; else None), output (for a result, its pytree path in the
        function's return value, ``output['w1']``; for a donated argument, the result written into its bytes; else
        None), donated (bool: the caller donated the argument, or XLA reuses its bytes), allocation/offset, start/end
        (program steps of its live range, ints; -1 when XLA
        gives the buffer no place in the schedule, e.g. thread-local values), stack (every frame, innermost
        first, one per line), block (``"blocks[2]"``: the indexed container of the parameters the value is made
        from, :mod:`xlakit.memory._blocks`; ``"all 8 iterations (stacked)"`` for a scan's stacked value; None
        when not told apart) — a value's block also leads its layer (``"blocks[2] › Block.__call__ › ..."``).
      liveness: ``pandas.DataFrame``, one row per program step: step, instruction, opcode, one column per
        role of :data:`ROLES` (bytes of that role live at the step, shared bytes charged once as
        :class:`~xlakit.memory.Peak` charges them, so at the peak step they equal ``Peak.by("role")``), and
        live_bytes (bytes occupied at that step, the roles' sum). ``attrs["stacked_by"]`` is ``"role"``.
      steps: number of program steps (instructions of the flattened entry schedule).
      name: HLO module name. platform: ``"cpu"``, ``"gpu"``... memory: the
        :class:`~xlakit.memory.CompiledMemory`. assignment: the :class:`~xlakit.memory.BufferAssignment`.
      method: how liveness was obtained.
    """

    buffers: Any
    liveness: Any
    steps: int
    name: str | None
    platform: str | None
    memory: Any = dataclasses.field(repr=False)
    assignment: Any = dataclasses.field(repr=False)
    method: str = ""
    _donation_rows: tuple[tuple[Any, ...], ...] = dataclasses.field(default=(), repr=False)

    @property
    def donations(self):
        """``pandas.DataFrame``, one row per donated argument leaf: argument, output (the result XLA wrote into its
        bytes, as the compiled module's ``input_output_alias`` records it; None when it reused them for none),
        bytes (saved by the donation: the argument's allocation, which the result needed none of its own for;
        they add up to ``memory_analysis().alias_size_in_bytes``), allocation, reason (why a donated argument
        was not reused, when known). Empty without donation."""
        from xlakit.memory._donation import donations

        return donations(self._donation_rows)

    def by(self, column: str):
        """Bytes of all logical buffers grouped by ``column`` (role, scope, source, layer, parameter...):
        ``pandas.DataFrame`` group, bytes, count, share, sorted by bytes descending, shown and folded as
        :meth:`Peak.by <xlakit.memory.Peak.by>` (``.raw``: every group unfolded). Buffers that share bytes are
        each counted here; :class:`~xlakit.memory.Peak` counts shared bytes once."""
        from xlakit.memory._grouping import grouped

        out = grouped(self.buffers, column, "bytes")
        out.notes = [*out.notes, _SUMMED]
        return out

    def __repr__(self) -> str:
        roles = self.buffers.groupby("role")["bytes"].sum().sort_values(ascending=False)
        shown = ", ".join(f"{r} {fmt_bytes(int(b))}" for r, b in roles.items())
        return (f"Attribution({self.name or '?'}: {len(self.buffers)} logical buffers over {self.steps} steps; "
                f"{shown}; {_SUMMED})")

    def _repr_html_(self) -> str:
        rows = [(r, fmt_bytes(int(b))) for r, b in
                self.buffers.groupby("role")["bytes"].sum().sort_values(ascending=False).items()]
        return html_table([*rows, ("note", _SUMMED)],
                          title=f"Attributed buffers: {self.name or '?'} ({self.steps} steps)")


#: What an Attribution's totals are, said wherever they are shown (a trial read a 32.7 MiB "by layer" total
#: against a 15.6 MiB footprint)
_SUMMED = ("every buffer of the whole run summed, those live at different times each counted: not the memory "
           "in use at one time (memory.peak() gives that)")


def _entry_parameters(mod: Any) -> dict[int, Any]:
    """Entry parameter number -> instruction id."""
    _name, ids, _root = mod.computations[mod.entry_id]
    out = {}
    get, known = mod.instructions.get, getattr(mod.instructions, "known", {})  # decoded ones: a plain dict
    for iid in ids:
        ins = known.get(iid) or get(iid)
        if ins is not None and ins.opcode == "parameter":
            out[ins.parameter_number] = iid
    return out


def _beside_tokens(mod: Any, params: dict[int, Any], leaves: dict[int, Any]) -> dict[int, Any]:
    """Entry parameter number -> argument leaf when the parameters are the leaves plus the tokens JAX adds for
    ordered effects (``jax.debug.print(..., ordered=True)``, ``io_callback``); else ``{}`` (tupled arguments: op
    names only)."""
    from xlakit.memory._assignment_records import _message_leaf

    def token(iid: Any) -> bool:
        ins = mod.instructions.get(iid)
        return ins is not None and _message_leaf(ins.shape, ())[1] == "token"

    arrays = [num for num in sorted(params) if not token(params[num])]
    if len(arrays) != len(leaves):
        return {}
    return {num: leaves[k] for k, num in enumerate(arrays)}


_ARGUMENT_NAMES = NameStack("", (), "", ())  # an argument's op name, its path without "/" or "(": no phase, unparsed

def _role(alloc: Any, constant: bool, thread_local: bool, is_result: bool, kind: str, live_out: bool, phase: str,
          recomputed: bool, reads: tuple) -> str:
    """The role of a buffer that is not an argument: by its allocation first, then whether it is a result, then
    a forward value the backward pass reads (``reads``: :func:`read_by_backward`'s arguments, asked only here)."""
    if alloc is None:
        return "temporary"
    if constant:
        return "constant"
    if thread_local:
        return "thread-local"
    if is_result and kind == "parameter":
        return "aliased"
    if is_result and live_out:
        return "output"
    if phase == "forward" and read_by_backward(*reads):
        return "residual"
    return "recomputed" if recomputed else "temporary"


def attribute(x: Any, /, *args: Any, cache: Any = DEFAULT, **kwargs: Any) -> Attribution:
    """Attribute every logical buffer of a compiled program (see the module docstring for the sources).

    Args:
      x: a ``jax.stages.Compiled``; a jitted (or plain) function followed by example arguments (compiled
        with ``jax.jit(...).lower(...).compile()``, or through ``cache`` when given); a cache entry or key
        (with ``cache=``); or a ``LoadedBundle`` (``batch=``, ``variant=`` pick the program). Positional only.
      *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``), only with a function; every
        keyword but ``cache`` goes to the function as ``jax.jit(fn)(*args, **kwargs)`` passes it (``x=``,
        ``batch=`` included; ``batch=`` / ``variant=`` are xlakit's only with a bundle, which takes no
        arguments).
      cache: keyword only: an :class:`~xlakit.cache.ExecutableCache` (or the cache ``xlakit.enable_cache()``
        returned) to compile through or load from; not passed: none.

    Returns:
      :class:`Attribution`.

    Raises:
      TypeError: unsupported input, a function without example arguments, ``cache=`` that is no cache, or
        ``cache=`` passed for a function that takes an argument named ``cache`` itself (ambiguous: pass the
        function's positionally, or wrap the function; :mod:`xlakit._jax.call_options`).
      ValueError: the backend reports no buffer assignment, or the program's HLO module is unavailable
        (liveness needs its schedule).
    """
    return attribute_program("attribute", x, args, kwargs, cache)


def attribute_program(where: str, x: Any, args: tuple, kwargs: dict, cache: Any) -> Attribution:
    """:func:`attribute` called as ``where`` (the name its errors give): ``cache`` is the option as passed
    (:data:`~xlakit._jax.call_options.DEFAULT` where it was not)."""
    from xlakit._jax.call_options import program_cache
    from xlakit.memory._programs import resolve_program

    kwargs = dict(kwargs)  # a bundle's batch=/variant= are taken out of it: the caller's dict stays whole
    compiled, fn = resolve_program(x, args, kwargs, program_cache(where, x, args, cache))
    # no example call for a program given compiled or lowered (a flax.nnx one still names its function)
    return attribute_compiled(compiled, fn, (args, kwargs) if fn is not None and (args or kwargs) else None)


def attribute_compiled(compiled: Any, fn: Any = None, example: tuple[tuple, dict] | None = None) -> Attribution:
    """:func:`attribute` of a ``jax.stages.Compiled``; ``fn`` (the jitted function) and ``example`` (the
    ``(args, kwargs)`` it was compiled with: flax.nnx graph nodes under ``nnx.jit``) name its arguments."""
    from xlakit.memory._decoding import without_gc
    from xlakit.memory.buffer_assignment import buffer_assignment

    ba = buffer_assignment(compiled)
    if ba._module is None:
        raise ValueError("the program's HLO module is unavailable, so its buffers cannot be placed in program "
                         "order; pass the jax.stages.Compiled that runtime_executable() can describe")
    return without_gc(_attribute, ba, compiled, fn, example)


def _attribute(ba: Any, compiled: Any, fn: Any, example: tuple[tuple, dict] | None) -> Attribution:
    from xlakit._jax.arguments import argument_leaves, donated_leaves, output_paths
    from xlakit.memory._blocks import add_blocks
    from xlakit.memory._buffer_columns import buffer_columns, buffer_frame
    from xlakit.memory._donation import dropped_donations, name_donations, output_index, output_of
    from xlakit.memory._role_liveness import liveness_frame
    from xlakit.memory._speaking import stacked_value

    mod = ba._module
    order, ranges = ba._schedule_ranges()
    frames = FrameTable(mod.stack_frames)
    params = _entry_parameters(mod)
    leaves = argument_leaves(compiled, fn, example)
    if len(leaves) != len(params):
        leaves = _beside_tokens(mod, params, leaves)
    donated_flags = donated_leaves(compiled) or []
    phase, users, phases = phases_of(mod)
    rows = ba._rows()  # the buffers and their allocations as columns (no object per buffer made)
    aliases = ba._aliases
    param_ids = {iid: num for num, iid in params.items()}
    root_id = mod.computations[mod.entry_id][2]
    results = results_of(mod, root_id)
    out_paths = output_paths(compiled, fn, example)
    outputs = output_index(mod, root_id, out_paths)
    shown_files: dict[str, str] = {}
    by_frame: dict[int, tuple[Any, Any]] = {}  # frame id -> (stack, first user frame)
    texts: dict[tuple[int, int], tuple[str, str, str]] = {}  # ids of (stack, user) -> (source, layer, stack)
    stack_texts: dict[int, str] = {}  # id of a stack -> its text
    # (frame id, op name) -> (the text columns of a buffer its instruction speaks for, recomputed): the layers of
    # a deep model repeat a few hundred of these over thousands of buffers
    spoken: dict[tuple[int, str], tuple[tuple[Any, ...], bool]] = {}
    table: list[tuple[Any, ...]] = []  # per row: role, parameter, output, donated, text columns (TEXT_COLUMNS)
    apart: dict[int, tuple[list[int], bool]] = {}  # rows not at their own instruction alone: (positions, stacked)
    param_paths: dict[int, str] = {}
    copies: dict[int, int] = {}  # row of XLA's copy of an argument -> the argument's instruction id
    instructions = mod.instructions
    known = getattr(instructions, "known", {})  # decoded instructions by id: the common lookups, at dict speed
    may_stack = mod.may_hold("dynamic-update-slice")  # no scan stacks a value without one

    def frame_of(frame_id: int) -> tuple[Any, Any]:
        found = by_frame.get(frame_id)
        if found is None:
            chain = frames.chain(frame_id) if frame_id else ()
            found = by_frame[frame_id] = (chain, user_frame(chain))
        return found

    def stack_text_of(stack: Any) -> str:  # an argument's stack text, once per stack
        text = stack_texts.get(id(stack))
        if text is None:
            text = stack_texts[id(stack)] = stack_text(stack, shown_files)
        return text

    def shown_of(stack: Any, user: Any) -> tuple[str, str, str]:
        key = (id(stack), id(user))  # both come from the frame table's cache: one object per frame
        shown = texts.get(key)
        if shown is None:
            shown = texts[key] = (source_of(user, shown_files), layer_of(user), stack_text(stack, shown_files))
        return shown

    for row, (bid, iid, shape_index, alloc, kind, constant, thread_local, live_out, aliased) in enumerate(zip(
            rows.ids, rows.instruction_ids, rows.shape_indexes, rows.allocations, rows.kinds, rows.constant,
            rows.thread_local, rows.live_out, rows.aliased, strict=True)):
        ins = (known.get(iid) or instructions.get(iid)) if iid is not None else None
        more = aliases.get(bid)
        if ins is not None and not more and iid in param_ids:  # an argument: named by its path, not by a line
            num = param_ids[iid]
            op_name, frame_id = ins.op_name, ins.frame_id
            path, role, donated = argument_columns(num, op_name, leaves.get(num), shape_index, donated_flags,
                                                   bool(alloc is not None and aliased))
            param_paths[iid] = path
            names = _ARGUMENT_NAMES if "/" not in op_name and "(" not in op_name else parse_op_name(op_name)
            if op_name or frame_id:  # its own op name: the phase name_blocks asks for
                phases[iid] = names.phase
            stack, user = frame_of(frame_id)
            text = stack_text_of(stack)
            output = output_of(outputs, iid, shape_index, None, (iid,)) if iid in results else None
            table.append((role, path, output, donated, (names.phase, "argument", "argument", f"argument {path}",
                                                        user.file if user else None, user.line if user else None,
                                                        text)))
            continue  # (no entry in apart: an argument's block is read from its path)
        if ins is not None and not more:
            op_name, frame_id = ins.op_name, ins.frame_id  # each read once
            # most buffers: one position, whose own metadata speaks for it (not a fusion without a frame, nor a
            # scan's stacked result)
            if (frame_id or (op_name and ins.opcode != "fusion")) and not (
                    may_stack and stacked_value(mod, iid) is not None):
                found = spoken.get((frame_id, op_name))
                if found is None:
                    stack, user = frame_of(frame_id)
                    names = parse_op_name(op_name)
                    source, layer, text = shown_of(stack, user)
                    found = spoken[(frame_id, op_name)] = ((
                        names.phase, names.scope, layer, source, user.file if user else None,
                        user.line if user else None, text), names.recomputed)
                info, recomputed = found
                phases[iid] = info[0]  # its own op name: the phase name_blocks and residuals ask for
                role = _role(alloc, constant, thread_local, iid in results, kind, live_out, info[0], recomputed,
                             ((iid,), mod, phase, users))
                output = None if role != "output" and role != "aliased" else outputs.get(iid) if not shape_index \
                    else output_of(outputs, iid, shape_index, None, (iid,))
                table.append((role, None, output, bool(alloc is not None and aliased), info))
                continue
        if ins is not None and not more and (ins.op_name or ins.frame_id):
            positions = [iid]
            meta = framed = ins
            frame_id, op_name = ins.frame_id, ins.op_name
            if not frame_id and ins.opcode == "fusion":  # a fusion XLA built or merged: its fused
                framed = fused_frame(mod, ins) or ins  # instructions speak
                frame_id = framed.frame_id
        else:
            positions = [i for i in (iid, *(i for i, _ in more)) if i is not None] if more else (
                [iid] if iid is not None else [])
            # The first position with metadata speaks for the buffer (a loop body's parameter has none; the
            # loop's operand or result that holds the same buffer has).
            sources = [metadata_source(mod, i) for i in positions]
            meta = next((m for m in sources if m is not None and (m.op_name or m.frame_id)), None)
            framed = meta
            if meta is None or not meta.frame_id:  # a fusion XLA built or merged: its fused instructions speak
                fusion = meta if meta is not None else next((f for f in sources if f is not None), None)
                if fusion is not None and fusion.opcode == "fusion":
                    framed = fused_frame(mod, fusion) or meta
            frame_id, op_name = (framed.frame_id, framed.op_name) if framed is not None else (0, "")
            op_name = meta.op_name if meta is not None and meta.op_name else op_name
        stack, user = frame_of(frame_id)
        stacked = None
        for i in positions if may_stack else ():
            stacked = stacked_value(mod, i)
            if stacked is not None:  # a scan's stacked result: the line of the value stacked, not of the scan
                inner = frames.chain(stacked.frame_id)
                if user_frame(inner) is not None:
                    stack, user = inner, user_frame(inner)
                break
        plain = iid in param_ids and "/" not in op_name and "(" not in op_name
        names = _ARGUMENT_NAMES if plain else parse_op_name(op_name)
        if meta is ins and ins is not None:  # its own op name: the phase name_blocks and residuals ask for
            phases[iid] = names.phase
        made_for, copied = "", None
        if user is None and iid not in param_ids:  # (a copy's metadata is its argument's, read through it)
            copied = copied_argument(ins, param_ids, leaves, mod, donated_flags)
            if copied:  # its block is its argument's
                copies[row] = params[copied[2]]
            reader = last_reader(mod, iid, users, order, ranges.get(bid)) if copied else None
            if reader is not None and copied is not None:  # the line that reads the copy last: what holds it
                stack, user = frame_of(reader[1].frame_id)
                if writes_into(mod, reader[0], copied[2]):  # the update itself, not a later read of the user's
                    copied = (copied[0].replace("{}", ", read last by its own update{}"), copied[1], copied[2])
            readers = () if copied or meta is not None else readers_line(mod, positions, users, frames)
            if readers:  # XLA made it, without metadata, for one line's ops: that line holds it
                stack, user, reader_op = readers
                made_for = parse_op_name(reader_op).scope
        parameter = output = None
        role = "temporary"
        is_result = False
        for i in positions:
            if i in results:
                is_result = True
                output = output_of(outputs, iid, shape_index, more, positions)
                break
        if iid in param_ids:
            num = param_ids[iid]
            parameter, role, donated = argument_columns(num, ins.op_name if ins is not None else "", leaves.get(num),
                                                        shape_index, donated_flags, bool(alloc is not None and aliased))
            scope, source, layer = "argument", f"argument {parameter}", "argument"
            param_paths[params[num]] = parameter
            text = stack_text_of(stack)
        else:
            source, layer, text = shown_of(stack, user)
            scope = f"made by XLA for › {made_for}" if made_for else names.scope
            if copied:  # no line of the user's made it, but the argument it copies says why it exists
                scope = copied[1]
                source = copied[0].format((" at " if "by its own update" in copied[0] else ", read last at ")
                                          + source if user is not None else "")
            donated = bool(alloc is not None and aliased)
            role = _role(alloc, constant, thread_local, is_result, kind, live_out, names.phase, names.recomputed,
                         (positions, mod, phase, users))
            if role not in ("output", "aliased"):  # another element of a result's tuple (a loop's counter)
                output = None
        table.append((role, parameter, output, donated, (names.phase, scope, layer, source, user.file if user else
                                                        None, user.line if user else None, text)))
        apart[row] = (positions, stacked is not None)
    cols = buffer_columns(rows, ranges, table)
    donation_rows = name_donations(cols, mod, ba._allocation_facts, out_paths, dropped_donations(
        compiled, fn, example, leaves, donated_flags))
    add_blocks(cols, rows.instruction_ids, apart, mod, param_paths, phase, copies)
    buffers, swept = buffer_frame(cols)
    liveness = liveness_frame(order, mod, {"role": cols["role"], **swept}, ROLES)
    method = "reconstructed from the HLO schedule and buffer aliases"
    if ba.heap_traces:
        method += " (XLA's heap simulator trace also shipped; Peak uses it for the step)"
    memory = ba.reported
    return Attribution(buffers=buffers, liveness=liveness, steps=len(order), name=ba.name,
                       platform=getattr(memory, "platform", None), memory=memory, assignment=ba, method=method,
                       _donation_rows=tuple(donation_rows))
