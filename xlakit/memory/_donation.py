"""Donation in the user's terms: which argument became which result, and the bytes that saved.

A result XLA writes into a donated argument's bytes (``jax.jit(..., donate_argnums=...)``) needs no
allocation of its own: its bytes are the donation's saving. The attribution gives such a result the role
``aliased``, names the argument in its ``parameter`` column and the result in its ``output`` column
(``output['w1']``, ``output[0]['w1']``, from ``Compiled.out_tree``), and the argument's row names the result it
became. From the step the result is written, the shared bytes are charged to it, not to the argument (see
:mod:`xlakit.memory._charging`), so every byte is still counted once.
"""

from __future__ import annotations

from typing import Any

from xlakit.memory._display import fmt_bytes

try:
    from pandas import NA as _NA
except ImportError:  # pragma: no cover - pandas comes with xlakit's memory views
    _NA = None

__all__ = ["output_index", "name_donations", "donations", "DONATION_COLUMNS", "donation_summary"]

DONATION_COLUMNS = ["argument", "output", "bytes", "allocation"]
_PASS_ON = frozenset({"bitcast", "opt-barrier", "optimization-barrier"})  # share their operand's buffer


def output_index(mod: Any, root_id: int, paths: list[str]) -> dict[int, str]:
    """Instruction id -> the result it holds: the entry root's element ``k`` (or the root itself for one
    result), and what it passes on without a buffer of its own (a ``bitcast``'s operand), named
    ``paths[k]`` when the root has one element per path, else ``output k``."""
    root = mod.instructions.get(root_id)
    if root is None:
        return {}
    elements = list(root.operands) if root.opcode == "tuple" else [root_id]
    names = paths if len(paths) == len(elements) else [f"output {k}" for k in range(len(elements))]
    out: dict[int, str] = {}
    for iid, name in zip(elements, names, strict=True):
        while iid is not None and iid not in out:
            out[iid] = name
            ins = mod.instructions.get(iid)
            iid = ins.operands[0] if ins is not None and ins.opcode in _PASS_ON and ins.operands else None
    return out


def donations(buffers: Any):
    """``pandas.DataFrame``, one row per donated argument leaf (columns :data:`DONATION_COLUMNS`): argument
    (its pytree path), output (the result written into its bytes; None when XLA reused them for none),
    bytes (saved: the result's bytes, which needed no allocation of their own; 0 when not reused),
    allocation. From an attribution's buffers frame (roles ``aliased`` and donated parameters)."""
    import pandas as pd

    aliased = buffers[buffers["role"] == "aliased"]
    rows = [(_known(r.parameter), _known(r.output), int(r.bytes), r.allocation) for r in aliased.itertuples()]
    reused = set(aliased["allocation"].dropna().tolist())
    args = buffers[buffers["role"].isin(["parameter", "optimizer state"]) & buffers["donated"].astype(bool)]
    rows += [(_known(r.parameter), None, 0, r.allocation) for r in args.itertuples() if r.allocation not in reused]
    columns = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return pd.DataFrame({"argument": pd.Series(columns[0], dtype=object),
                         "output": pd.Series(columns[1], dtype=object),  # None where nothing was reused
                         "bytes": pd.Series(columns[2], dtype="int64"),
                         "allocation": pd.Series(columns[3], dtype="Int64")})


def _known(value: Any) -> Any:
    """None for a missing value (None, NaN, pandas' NA), else the value."""
    return None if value is None or value is _NA or value != value else value


def _pairs(frame: Any) -> dict[tuple[Any, Any], int]:
    return {(_known(r.argument), _known(r.output)): int(r.bytes) for r in frame.itertuples()}


def donation_summary(before: Any, after: Any, shown: int = 3) -> str:
    """What donation changed between two programs' :func:`donations` frames: ``"donation: p['w1'] →
    output['w1'] aliased, 2.0 MiB saved"`` for each pair of ``after`` not in ``before`` (the ``shown``
    largest, then a count and the total), the same for pairs ``before`` had and ``after`` lost (``"no
    longer donated"``), and donated arguments XLA reused for nothing; ``""`` when nothing changed."""
    a, b = _pairs(before), _pairs(after)
    parts = []
    for pairs, what in ((_new(b, a), "aliased"), (_new(a, b), "no longer aliased")):
        if not pairs:
            continue
        items = sorted(pairs.items(), key=lambda kv: -kv[1])
        text = ", ".join(_pair_text(arg, out, what) + (f", {fmt_bytes(n)} saved" if what == "aliased" else "")
                         for (arg, out), n in items[:shown])
        if len(items) > shown:
            text += f"; {len(items)} pairs, {fmt_bytes(sum(pairs.values()))} in all"
        parts.append("donation: " + text)
    unused = [arg for (arg, out), _n in b.items() if out is None and (arg, None) not in a]
    if unused:
        parts.append(f"donated but not reused: {', '.join(map(str, unused[:shown]))}"
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


def name_donations(cols: dict[str, list[Any]]) -> None:
    """An aliased result takes a donated argument's bytes: its ``parameter`` names that argument (grouping by
    parameter shows the old and the new value of ``params['w']`` together) and the argument's ``output``
    names the result it became."""
    argument_of: dict[Any, int] = {}
    for i, (role, alloc) in enumerate(zip(cols["role"], cols["allocation"], strict=True)):
        if role in ("parameter", "optimizer state") and alloc is not None:
            argument_of[alloc] = i
    for i, (role, alloc) in enumerate(zip(cols["role"], cols["allocation"], strict=True)):
        if role == "aliased" and alloc in argument_of:
            arg = argument_of[alloc]
            cols["parameter"][i] = cols["parameter"][arg]
            if cols["output"][i] is not None:
                cols["output"][arg] = cols["output"][i]
