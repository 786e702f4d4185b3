"""Which instruction's metadata speaks for a logical buffer: XLA inserts carriers (copies, bitcasts, tuples) without
metadata, builds fusions whose own metadata names no stack frame, broadcasts constants for the fusions that read
them, and stacks a scan's per-iteration values with ``dynamic-update-slice``; each of these is followed here to
the instruction that names the user's line (used by :mod:`xlakit.memory.attribution`)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

from xlakit.memory._hlo_frames import parse_op_name, user_frame

__all__ = ["CARRIERS", "argument_path", "argument_columns", "copied_argument", "last_reader", "writes_into",
           "metadata_source", "fused_frame", "readers_line", "stacked_value", "read_by_backward", "results_of",
           "phases_of"]

# Ops XLA inserts that move or re-view a value; they inherit the metadata of the value they carry.
CARRIERS = frozenset({"copy", "bitcast", "get-tuple-element", "tuple", "copy-start", "copy-done", "reshape",
                       "transpose", "bitcast-convert", "opt-barrier", "optimization-barrier"})
_STACKING = CARRIERS | {"dynamic-update-slice"}  # fusion roots that may stack a slice (see stacked_value)


def metadata_source(mod: Any, iid: int | None) -> Any:
    """The instruction whose metadata speaks for ``iid``: itself, or for an XLA-inserted carrier without
    metadata, the value it carries (followed through at most 8 carriers)."""
    for _ in range(8):
        ins = mod.instructions.get(iid) if iid is not None else None
        if ins is None or ins.op_name or ins.frame_id or ins.opcode not in CARRIERS or not ins.operands:
            return ins
        iid = ins.operands[0]
    return mod.instructions.get(iid) if iid is not None else None


def fused_frame(mod: Any, fusion: Any) -> Any:
    """For a fusion whose metadata names no stack frame, the fused instruction whose frame speaks for it: the
    first with the fusion's own op name, else the first met walking from the fused root through operands
    (nested fusions included); None when no fused instruction has a frame."""
    own = fusion.op_name.split(";", 1)[0]
    order: list[Any] = []
    queue = collections.deque(mod.computations[c][2] for c in fusion.called if c in mod.computations)
    # (a fusion without a frame of its own is rare: reading its body in full is fine)
    seen: set[int] = set()
    while queue:  # breadth-first from the root: the nearest value to what the fusion writes comes first
        iid = queue.popleft()
        ins = mod.instructions.get(iid)
        if iid in seen or ins is None:
            continue
        seen.add(iid)
        order.append(ins)
        queue.extend(ins.operands)
        if ins.opcode == "fusion":
            queue.extend(mod.computations[c][2] for c in ins.called if c in mod.computations)
    framed = [i for i in order if i.frame_id]
    same = [i for i in framed if own and i.op_name.split(";", 1)[0] == own]
    return (same or framed or [None])[0]


def readers_line(mod: Any, positions: list[int], users: dict[int, list[int]], frames: Any) -> tuple:
    """For a value with no metadata at any of its ``positions`` (a constant XLA broadcast into a buffer of its
    own for the fusions that read it): ``(stack, first user frame, op name)`` of the one user line every reader
    is on (readers looked through carriers; a fusion without a frame speaks by its fused instructions), else
    ``()``: readers on two lines, or one without a user frame, leave the value ``unknown``."""
    todo, seen, found = list(positions), set(positions), None
    while todo:
        for uid in users.get(todo.pop(), ()):
            ins = mod.instructions.get(uid)
            if uid in seen or ins is None:
                continue
            seen.add(uid)
            if ins.opcode in CARRIERS and not ins.frame_id and not ins.op_name:
                todo.append(uid)
                continue
            framed = ins if ins.frame_id else fused_frame(mod, ins) if ins.opcode == "fusion" else None
            if framed is None or not framed.frame_id:
                return ()
            chain = frames.chain(framed.frame_id)
            user = user_frame(chain)
            if user is None or (found is not None and (found[1].file, found[1].line) != (user.file, user.line)):
                return ()
            found = found or (chain, user, ins.op_name or framed.op_name)
    return found or ()


def stacked_value(mod: Any, iid: int) -> Any:
    """For a ``dynamic-update-slice`` (or a fusion rooted in one: how ``lax.scan`` stacks each iteration's
    residual into one array), the instruction whose metadata speaks for the slice written — it names the line
    inside the loop body (``self.up(x)``), where the stacking op's own metadata names the ``scan`` call;
    else None."""
    ins = mod.instructions.get(iid)
    if ins is None or (ins.opcode != "fusion" and ins.opcode not in _STACKING):
        return None
    root = ins
    if ins.opcode == "fusion" and ins.called and ins.called[0] in mod.computations:
        if mod.root_opcode(ins.called[0]) not in _STACKING:
            return None  # most fusions: only the root's opcode is read
        root = mod.root(ins.called[0])
    while root is not None and root.opcode in CARRIERS and root.operands:
        root = mod.instructions.get(root.operands[0])
    if root is None or root.opcode != "dynamic-update-slice" or len(root.operands) < 2:
        return None
    update_id: int | None = root.operands[1]
    update = mod.instructions.get(update_id)
    if update is not None and update.opcode == "parameter" and root is not ins:
        k = update.parameter_number  # a fused computation's parameter k is the fusion's operand k
        update_id = ins.operands[k] if 0 <= k < len(ins.operands) else None
    meta = metadata_source(mod, update_id)
    return meta if meta is not None and meta.frame_id else None


def read_by_backward(ids: Sequence[int], mod: Any, phase: Callable[[int], str], users: dict[int, list[int]]) -> bool:
    """True when a user of any of ``ids`` (the positions of one buffer; looking through the carriers that
    pass it on, e.g. the ``get-tuple-element`` of a scan's stacked results) is a backward-pass op."""
    stack, seen = list(ids), set(ids)
    while stack:
        for user in users.get(stack.pop(), ()):
            if user in seen:
                continue
            seen.add(user)
            if phase(user) == "backward":
                return True
            if mod.instructions[user].opcode in CARRIERS:
                stack.append(user)
    return False


_SHARING = frozenset({"bitcast", "tuple", "opt-barrier", "optimization-barrier"})


def results_of(mod: Any, root_id: int) -> set[int]:
    """The entry's root and what it passes on without a buffer of its own (a root ``tuple``'s elements, a
    ``bitcast``'s operand, a ``get-tuple-element``'s tuple — a loop's result is an element of the ``while``'s —,
    a ``call``'s computation's root, followed down): a buffer at one of these positions may be a result of the
    program; which one is, the caller reads from its allocation (live out, or a donated argument's)."""
    out, stack = {root_id}, [root_id]
    while stack:
        ins = mod.instructions.get(stack.pop())
        if ins is not None and (ins.opcode in _SHARING or ins.opcode == "get-tuple-element"):
            nxt = list(ins.operands)
        elif ins is not None and ins.opcode == "call":  # XLA:CPU wraps a small loop in a call: its root's
            nxt = [mod.computations[c][2] for c in ins.called if c in mod.computations]
        else:
            nxt = []
        for op in nxt:
            if op not in out:
                out.add(op)
                stack.append(op)
    return out


def phases_of(mod: Any) -> tuple[Callable[[int], str], dict[int, list[int]], dict[int, str]]:
    """(instruction id -> its phase, read when first asked; instruction id -> its users; the phases read so far,
    which a caller that has read an instruction's op name may fill) over the computations that run in sequence
    (a value's users are in its own computation)."""
    memo: dict[int, str] = {}
    instructions = mod.instructions

    def phase(iid: int) -> str:
        found = memo.get(iid)
        if found is None:
            ins = instructions.get(iid)
            found = memo[iid] = parse_op_name(ins.op_name).phase if ins is not None else ""
        return found

    users = getattr(mod, "users", None)
    if users is None:  # a module made without the decoder's _Module
        users = {}
        for cid in mod.sequential_computations():
            for iid in mod.computations[cid][1]:
                for op in instructions[iid].operands:
                    users.setdefault(op, []).append(iid)
    return phase, users, memo


def argument_path(num: int, recorded: str, leaf: Any) -> str:
    """An entry argument's name: the op name JAX recorded on its parameter where that is a path (no ``/``, not a
    graph node's), else the argument tree's path for it (``leaf``), else ``"parameter N"``."""
    if recorded and "/" not in recorded and not (leaf and leaf.graph):
        return recorded
    return leaf.path if leaf else f"parameter {num}"


def argument_columns(num: int, recorded: str, leaf: Any, shape_index: Any, donated_flags: list,
                     aliased: bool) -> tuple[str, str, bool]:
    """``(parameter, role, donated)`` of entry argument ``num``'s buffer at ``shape_index`` of it: its name
    (:func:`argument_path`), optimizer state or parameter, and whether the caller donated it (``aliased``: XLA
    reuses its bytes)."""
    parameter = argument_path(num, recorded, leaf)
    if shape_index:
        parameter += "".join(f"[{i}]" for i in shape_index)
    role = "optimizer state" if (leaf.optimizer_state if leaf else "opt_state" in parameter) else "parameter"
    return parameter, role, aliased or bool(leaf is not None and leaf.index < len(donated_flags)
                                            and donated_flags[leaf.index])


def copied_argument(ins: Any, param_ids: dict[int, int], leaves: dict, mod: Any,
                    donated_flags: list) -> tuple[str, str, int] | None:
    """For a ``copy`` XLA inserted of an entry argument (no metadata: copy insertion): its ``(source, scope)``
    words — the source short (chart labels and groupings show it), the scope saying, for a donated argument, why
    XLA copies it: a result is written into its buffer while the argument's value is still read (the
    interference copy insertion resolves); the source is a format string whose ``{}`` takes where it is read
    last; and the argument's parameter number. Else None."""
    if ins is None or ins.opcode != "copy" or len(ins.operands) != 1 or ins.operands[0] not in param_ids:
        return None
    num = param_ids[ins.operands[0]]
    leaf = leaves.get(num)
    argument = mod.instructions.get(ins.operands[0])
    path = argument_path(num, getattr(argument, "op_name", ""), leaf).replace("{", "{{").replace("}", "}}")
    mine, its = (getattr(getattr(i, "shape", None), "_buf", None) for i in (ins, argument))
    if mine is not None and its is not None and bytes(mine) != bytes(its):  # same dims and type: another layout
        return f"XLA's copy of argument {path} in another layout{{}}", "made by XLA › copy of an argument in " \
            "another layout", num
    if leaf is not None and leaf.index < len(donated_flags) and donated_flags[leaf.index]:
        return (f"XLA's copy of donated {path}{{}}", "made by XLA › copy of a donated argument, kept apart from the "
                "result written into its buffer", num)
    return f"XLA's copy of argument {path}{{}}", "made by XLA › copy of an argument", num


_VIEWS = frozenset({"bitcast", "reshape"})  # carriers that hold the same bytes as their operand


def last_reader(mod: Any, iid: int, users: dict[int, list[int]], order: list[int], span: Any) -> tuple[int, Any] | None:
    """``(id, instruction with a stack frame)`` (a fusion: its fused instruction) of what reads ``iid`` at the last step
    of its live range ``span`` (first, last step of ``order``), directly or through bitcasts and reshapes; None
    when that step's instruction is not such a reader."""
    if not span or not 0 <= span[1] < len(order):
        return None
    last = order[span[1]]
    # through views of the same bytes only, and a few of them: a walk through tuples and loops could reach the
    # whole program from each of many argument copies
    todo, seen = [iid], {iid}
    while todo and len(seen) < 64:
        for uid in users.get(todo.pop(), ()):
            if uid in seen:
                continue
            seen.add(uid)
            ins = mod.instructions.get(uid)
            if ins is not None and uid == last:
                framed = ins if ins.frame_id else fused_frame(mod, ins) if ins.opcode == "fusion" else None
                return (uid, framed) if framed is not None and framed.frame_id else None
            if ins is not None and ins.opcode in _VIEWS:
                todo.append(uid)
    return None


def writes_into(mod: Any, uid: int, num: int) -> bool:
    """Whether instruction ``uid`` makes the result XLA writes into entry parameter ``num``'s buffer
    (``input_output_alias``): the argument's own update."""
    root_id = mod.computations[mod.entry_id][2]
    root = mod.instructions.get(root_id)
    for out_index, parameter, _ in getattr(mod, "input_output_alias", ()):
        if parameter != num:
            continue
        if not out_index and root_id == uid:
            return True
        if out_index and root is not None and root.opcode == "tuple" and out_index[0] < len(root.operands) \
                and root.operands[out_index[0]] == uid:
            return True
    return False
