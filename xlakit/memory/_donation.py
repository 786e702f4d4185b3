"""Donation in the user's terms: which argument became which result, and the bytes it reused (what that saved is
the footprint's change: XLA may hold a copy of the argument among the temporaries).

A result XLA writes into a donated argument's bytes (``jax.jit(..., donate_argnums=...)``) needs no
allocation of its own: its bytes are the donation's saving. Which argument became which result is read from
XLA's own record, the compiled module's ``input_output_alias`` (result shape index -> parameter), and the bytes
from the argument's allocation, so the savings add up to ``memory_analysis().alias_size_in_bytes`` — also
where the result has no buffer of its own (an argument returned as it was passed) or is a loop's carry.
The argument's row names the result it became (``output['w1']``, ``output[0]['w1']``, from
``Compiled.out_tree``); a result with a buffer of its own in the argument's bytes has the role ``aliased`` and
names the argument in its ``parameter`` column. From the step the result is written, the shared bytes are
charged to it, not to the argument (see :mod:`xlakit.memory._charging`), so every byte is still counted once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from xlakit.memory._display import fmt_bytes

try:
    from pandas import NA as _NA
except ImportError:  # pragma: no cover - pandas comes with xlakit's memory views
    _NA = None

__all__ = ["output_index", "output_of", "name_donations", "dropped_donations", "donations", "DONATION_COLUMNS",
           "donation_summary"]

DONATION_COLUMNS = ["argument", "output", "bytes", "allocation", "reason"]
_PASS_ON = frozenset({"bitcast", "opt-barrier", "optimization-barrier"})  # share their operand's buffer
_ARGUMENT_ROLES = frozenset({"parameter", "optimizer state"})


def output_index(mod: Any, root_id: int, paths: list[str]) -> dict[Any, str]:
    """Position -> the result it holds: the entry root's element ``k`` (or the root itself for one result), and
    what it passes on without a buffer of its own (a ``bitcast``'s operand; a ``call``'s computation's root,
    XLA:CPU's wrapper of a small loop), keyed by instruction id; through a ``get-tuple-element`` (a loop's
    result is an element of the ``while``'s tuple) keyed by ``(instruction id, shape index)``, the element the
    tuple index names. Named ``paths[k]`` when the root has one element per path, else ``output k``."""
    root = mod.instructions.get(root_id)
    if root is None:
        return {}
    elements = list(root.operands) if root.opcode == "tuple" else [root_id]
    names = paths if len(paths) == len(elements) else _element_names(mod, paths, len(elements))
    out: dict[Any, str] = {}
    for iid, name in zip(elements, names, strict=True):
        index: tuple[int, ...] = ()  # the element of iid's tuple that holds the result
        for _ in range(64):  # a chain of pass-throughs is short; a malformed module's cycle ends here
            key = (iid, index) if index else iid
            if iid is None or key in out:
                break
            out[key] = name
            ins = mod.instructions.get(iid)
            if ins is None:
                break
            if ins.opcode == "call":
                iid = next((mod.computations[c][2] for c in ins.called if c in mod.computations), None)
            elif ins.opcode == "get-tuple-element" and ins.operands and getattr(ins, "tuple_index", -1) >= 0:
                iid, index = ins.operands[0], (ins.tuple_index, *index)
            elif ins.opcode in _PASS_ON and ins.operands:
                iid = ins.operands[0]
            else:
                break
    return out


def output_of(outputs: dict[Any, str], iid: Any, index: Any, more: Any, positions: Sequence[int]) -> str | None:
    """The result a buffer holds (:func:`output_index`'s names): by the element of a tuple it is (``(instruction,
    shape index)``: a loop's result), else by an instruction that holds it whole."""
    if not index and not more:  # most results: an instruction that holds it whole
        return next((outputs[i] for i in positions if i in outputs), None)
    for key in ((iid, tuple(index)) if index else None, *(((i, tuple(x)) if x else None) for i, x in more or ())):
        if key is not None and key in outputs:
            return outputs[key]
    return next((outputs[i] for i in positions if i in outputs), None)


def donations(rows: Any):
    """``pandas.DataFrame``, one row per donated argument leaf (columns :data:`DONATION_COLUMNS`): argument
    (its pytree path), output (the result XLA writes into its bytes; None when it reused them for none), bytes
    (reused: the size of the argument's allocation, which the result needed no allocation of its own for; 0
    when not reused; their sum is XLA's ``alias_size_in_bytes``; what that saved is the footprint's change, less
    where XLA holds a copy of the argument among the temporaries), allocation (the argument's), reason (why a
    donated argument was not reused, when known; else None). From :func:`name_donations`' rows."""
    import pandas as pd

    columns = list(zip(*rows, strict=True)) if rows else [()] * len(DONATION_COLUMNS)
    return pd.DataFrame({"argument": pd.Series(columns[0], dtype=object),
                         "output": pd.Series(columns[1], dtype=object),  # None where nothing was reused
                         "bytes": pd.Series(columns[2], dtype="int64"),
                         "allocation": pd.Series(columns[3], dtype="Int64"),
                         "reason": pd.Series(columns[4], dtype=object)})


def _known(value: Any) -> Any:
    """None for a missing value (None, NaN, pandas' NA), else the value."""
    return None if value is None or value is _NA or value != value else value


def _pairs(frame: Any) -> dict[tuple[Any, Any], int]:
    return {(_known(r.argument), _known(r.output)): int(r.bytes) for r in frame.itertuples()}


def donation_summary(before: Any, after: Any, shown: int = 3) -> str:
    """What donation changed between two programs' :func:`donations` frames: ``"donation: p['w1'] →
    output['w1'] aliased, 2.0 MiB reused"`` (the argument's bytes the result is written into; what that saves
    is the footprint's change, which a copy XLA adds can cancel) for each pair of ``after`` not in ``before`` (the
    ``shown`` largest, then a count and the total), the same for pairs ``before`` had and ``after`` lost (``"no
    longer aliased"``), and donated arguments XLA reused for nothing, each with its reason when known
    (``"donated but not reused: p['odd'] (no result the size of float32[7,3])"``); ``""`` when nothing
    changed."""
    a, b = _pairs(before), _pairs(after)
    parts = []
    for pairs, what in ((_new(b, a), "aliased"), (_new(a, b), "no longer aliased")):
        if not pairs:
            continue
        items = sorted(pairs.items(), key=lambda kv: -kv[1])
        text = ", ".join(_pair_text(arg, out, what) + (f", {fmt_bytes(n)} reused" if what == "aliased" else "")
                         for (arg, out), n in items[:shown])
        if len(items) > shown:
            text += f"; {len(items)} pairs, {fmt_bytes(sum(pairs.values()))} in all"
        parts.append("donation: " + text)
    reasons = {_known(r.argument): _known(getattr(r, "reason", None)) for r in after.itertuples()
               if _known(r.output) is None}
    unused = [arg for (arg, out), _n in b.items() if out is None and (arg, None) not in a]
    if unused:
        parts.append("donated but not reused: " + ", ".join(
            f"{arg} ({reasons[arg]})" if reasons.get(arg) else str(arg) for arg in unused[:shown])
                     + (f" (+{len(unused) - shown} more)" if len(unused) > shown else ""))
    return "; ".join(parts)


def _pair_text(arg: Any, out: Any, what: str) -> str:
    """``"p['w1'] → output['w1'] aliased"``; a graph node's leaf whose new value took its bytes (``nnx.jit``
    names it ``"<leaf> (new)"``): ``"model['l1']['kernel'] updated in place"``."""
    if out == f"{arg} (new)":
        return f"{arg} {'updated in place' if what == 'aliased' else 'no longer updated in place'}"
    return f"{arg} → {out} {what}"


def _new(x: dict[tuple[Any, Any], int], y: dict[tuple[Any, Any], int]) -> dict[tuple[Any, Any], int]:
    return {k: v for k, v in x.items() if k[1] is not None and k not in y}


def name_donations(cols: dict[str, list[Any]], mod: Any = None, allocations: Any = (), paths: list[str] | None = None,
                   dropped: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Which argument became which result, from XLA's own record of it: the compiled module's
    ``input_output_alias`` (result shape index -> entry parameter number and shape index), each parameter's
    bytes from its allocation. Whether a result has a buffer of its own does not matter: a loop's carry, a
    result returned as it was passed (its bytes are the argument's, with no buffer of their own) or a result of
    another leaf of the same size are read as XLA aliased them.

    Names both sides in ``cols`` (the buffers' columns): the argument's row names the result (``output``), and
    an ``aliased`` result (a buffer of its own in the argument's allocation) names the argument
    (``parameter``: grouping by parameter shows the old and the new value of ``params['w']`` together).

    Returns the rows of :func:`donations`: one per alias entry, then one per donated argument leaf XLA did not
    reuse, with the reason when known (``dropped``: the paths of donated leaves the compiled program does not
    take, JAX having left them out as unused). A donated argument whose allocation XLA marks aliased with an
    output where the module records no entry (a module decoded without it) counts its bytes, its result
    named ``"a result"``. ``allocations``: the assignment's, or a callable that gives them (called only where a
    donation is to be named)."""
    roles, allocs = cols["role"], cols["allocation"]
    arguments = [i for i, role in enumerate(roles) if role in _ARGUMENT_ROLES]  # thousands of rows, few arguments
    argument_of: dict[Any, int] = {}  # allocation index -> the row of the argument that owns it
    for i in arguments:
        if allocs[i] is not None:
            argument_of.setdefault(allocs[i], i)
    aliases = getattr(mod, "input_output_alias", ())
    # the root's shapes only where a donation is to be named (902 results of a 150-layer adam step: 13 ms)
    results = _result_shapes(mod) if aliases or any(cols["donated"]) else {}
    names = _result_names(results, paths or [])
    rows: list[tuple[Any, ...]] = []
    reused: set[int] = set()  # argument rows XLA writes a result into
    taken: set[tuple[int, ...]] = set()  # the results written into an argument's bytes
    if callable(allocations) and (aliases or any(cols["donated"])):  # read only where a donation is named
        allocations = allocations()
    by_param = {(a.parameter_number, tuple(a.parameter_shape_index)): a for a in allocations
                if a.is_parameter} if aliases else {}
    for out_index, number, param_index in aliases:
        alloc = by_param.get((number, tuple(param_index)))
        row = argument_of.get(alloc.index) if alloc is not None else None
        output = names.get(tuple(out_index)) or _index_text("output", out_index)
        size = alloc.size if alloc is not None else 0
        if row is None:  # no buffer row for the parameter: name it as the attribution names one without a path
            argument = _index_text(f"parameter {number}", param_index)
        else:
            argument = cols["parameter"][row]
            cols["output"][row] = output
            reused.add(row)
        taken.add(tuple(out_index))
        rows.append((argument, output, int(size), alloc.index if alloc is not None else None, None))
    for i in [i for i, role in enumerate(roles) if role == "aliased"]:  # an aliased result names the argument
        arg = argument_of.get(allocs[i])  # whose bytes it was written into
        if arg is not None:
            cols["parameter"][i] = cols["parameter"][arg]
    by_index: dict[Any, Any] = {}
    for i in arguments:
        if not cols["donated"][i] or i in reused:
            continue
        alloc = allocs[i]
        by_index = by_index or {a.index: a for a in allocations}
        shared = by_index.get(alloc)
        if shared is not None and shared.aliased_with_output:  # XLA's allocation says so, the module not which
            rows.append((cols["parameter"][i], "a result", int(shared.size), alloc, None))
            continue
        rows.append((cols["parameter"][i], None, 0, alloc, _not_reused(cols["shape"][i], cols["dtype"][i], results,
                                                                       taken)))
    rows += [(path, None, 0, None, "the program does not read it: JAX left it out") for path in dropped or ()]
    return rows


def _result_shapes(mod: Any) -> dict[tuple[int, ...], tuple[Any, Any]]:
    """Result shape index -> (dims, dtype) per device, from the entry root's shape as XLA compiled it."""
    from xlakit.memory._assignment_records import _message_leaf
    from xlakit.memory._xla_fields import _F

    root = mod.root(mod.entry_id) if mod is not None and hasattr(mod, "root") else None
    shape = root.shape if root is not None else None
    if shape is None:
        return {}
    parts = shape.messages(_F.SH_TUPLE)
    if not parts:
        return {(): _message_leaf(shape, ())}
    return {(k,): _message_leaf(part, ()) for k, part in enumerate(parts)}


def _element_names(mod: Any, paths: list[str], count: int) -> list[str]:
    """The name of each of the entry root's ``count`` elements when they are not one per path: the paths in order
    beside the tokens JAX adds for ordered effects (named ``token``), else ``output k``."""
    results = _result_shapes(mod) if paths else {}
    by_index = _result_names(results, paths) if len(results) == count else {}
    if by_index:
        return [by_index.get((k,), "token (ordered effects)") for k in range(count)]
    return [f"output {k}" for k in range(count)]


def _result_names(results: dict[tuple[int, ...], Any], paths: list[str]) -> dict[tuple[int, ...], str]:
    """Result shape index -> its pytree path (``output[0]['w']``), when the root has one element per path
    besides the tokens JAX adds for ordered effects."""
    arrays = [k for k, (_dims, dtype) in results.items() if dtype != "token"]
    if len(arrays) != len(paths):
        return {}
    return dict(zip(arrays, paths, strict=True))


def _index_text(prefix: str, index: Any) -> str:
    """A position named as the attribution names positions without a path: ``output 1``, ``parameter 0[2]``."""
    if not index:
        return prefix
    head = f"{prefix} {index[0]}" if prefix == "output" else prefix + f"[{index[0]}]"
    return head + "".join(f"[{i}]" for i in index[1:])


def _not_reused(shape: Any, dtype: Any, results: dict[tuple[int, ...], tuple[Any, Any]],
                taken: set[tuple[int, ...]]) -> str | None:
    """Why XLA wrote no result into a donated argument, when the shapes say: a result takes an argument's bytes
    only if it is as large (JAX offers a donated argument to a result with as many elements, XLA aliases
    equal byte sizes); None when such a result was free (XLA's own choice)."""
    if shape is None or not results:
        return None
    size = _nbytes(shape, dtype)
    same = [k for k, (dims, kind) in results.items() if dims is not None and _nbytes(dims, kind) == size]
    what = f"{dtype}[{','.join(map(str, shape))}]"
    if not same:
        return f"no result the size of {what}"
    if all(k in taken for k in same):
        return f"each result the size of {what} took another argument's bytes"
    return None


def _nbytes(dims: tuple[int, ...], dtype: Any) -> float:
    """Bytes of an array (its element count where the dtype is unknown to numpy)."""
    import numpy as np

    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        return float(math.prod(dims))
    return float(math.prod(dims) * itemsize)


def dropped_donations(compiled: Any, fn: Any, example: tuple[tuple, dict] | None, leaves: dict[int, Any],
                      donated: list[bool]) -> list[str]:
    """The paths of donated argument leaves the compiled program does not take (JAX leaves unused ones out):
    donated, so listed, but nothing can be written into them."""
    import types

    from xlakit._jax.arguments import argument_leaves

    kept = {leaf.index for leaf in leaves.values()}
    if not leaves or not any(d for i, d in enumerate(donated) if i not in kept):
        return []
    # the whole argument tree, kept or not: argument_leaves reads the kept record from _executable
    every = argument_leaves(types.SimpleNamespace(in_tree=getattr(compiled, "in_tree", None)), fn, example)
    return [leaf.path for leaf in every.values() if leaf.index not in kept and leaf.index < len(donated)
            and donated[leaf.index]]
