"""Answers per function from an event log: the latest decision (:func:`last`) and the recompiles (:func:`recompiles`).

A function is named as in the log, by the module name JAX compiles it under (``jax.jit(step)`` -> ``jit_step``);
:func:`resolve_name` accepts the jitted object, the Python function or the name.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from xlakit.events._model import Event

__all__ = ["CallDecision", "last", "recompiles", "resolve_name", "RECOMPILE_COLUMNS"]

_LOOKUPS = ("xlakit", "jax-persistent")
RECOMPILE_COLUMNS = ["function", "origin", "site", "recompiles", "compile_s", "argument", "what", "values_seen",
                     "last_change"]


def resolve_name(fn: Any, names: Iterable[str | None] = ()) -> str:
    """The event name of ``fn``: a ``jax.jit`` object, the Python function it wraps (or a ``functools.partial``
    of one), or a name (``"step"`` or ``"jit_step"``; a name already in ``names`` is taken as it is).

    Raises:
      TypeError: ``fn`` is neither a string nor a callable.
    """
    from xlakit._jax.jax_signals import module_name  # the naming rule of JAX's listeners (imports no JAX)

    if isinstance(fn, str):
        if fn in set(names) or fn.startswith(("jit_", "pjit_")):
            return fn
        return module_name(fn, wrap="jit") or fn
    if not callable(fn):
        raise TypeError(f"expected a jitted function, a Python function or its name, got {type(fn).__name__}")
    inner = fn
    for _ in range(8):  # jax.jit objects and functools.wraps keep __wrapped__; partials keep .func
        nxt = getattr(inner, "__wrapped__", None) or (inner.func if isinstance(inner, functools.partial) else None)
        if nxt is None:
            break
        inner = nxt
    name = getattr(inner, "__name__", None) or "<unnamed function>"
    return module_name(name, wrap="jit") or name


@dataclasses.dataclass(frozen=True)
class CallDecision:
    """What happened the last time a jitted function needed a program.

    Attributes:
      name: the function's event name (``jit_step``).
      kind: ``"recompiled"`` (retraced because its signature changed, then compiled), ``"compiled"`` (XLA
        compiled it: a first compile or a miss), ``"hit"`` (a cache served the executable, no compile),
        ``"miss"`` (a lookup missed and no compile was recorded yet) or ``"traced"`` (traced, nothing else seen).
      reason: the miss reason (for compiled / miss), what changed (for recompiled), else None.
      changes: for ``recompiled``, the changes (dicts with ``what``, ``path``, ``before``, ``after``); else ().
      compile_s: seconds XLA compiled in this decision (sum of its ``compile`` events), 0.0 when none.
      events: this decision's events, oldest first.

    JAX's in-process cache answers a warm call without emitting anything, so no new decision appears for it:
    pass ``since`` to :func:`last` to ask "did anything happen after this point?".
    """

    name: str
    kind: str
    reason: str | None
    changes: tuple[dict[str, str], ...]
    compile_s: float
    events: tuple[Event, ...]

    @property
    def compiled(self) -> bool:
        """True when XLA compiled in this decision."""
        return self.kind in ("compiled", "recompiled")

    def __repr__(self) -> str:
        extra = f": {self.reason}" if self.reason else ""
        return (f"CallDecision({self.name} {self.kind}{extra}; compile {self.compile_s:.3f} s, "
                f"{len(self.events)} events)")


def _is_lookup(e: Event) -> bool:
    return e.kind in ("hit", "miss") and e.source in _LOOKUPS


def _is_prefix(e: Event) -> bool:
    """Events emitted before a call's trace or lookup: the retrace (``recompile``) and JAX's explained miss."""
    return e.kind == "recompile" or (e.kind == "miss" and e.source == "jit")


def _opens_decision(current: Sequence[Event], e: Event) -> bool:
    """Whether ``e`` starts a new decision after the events ``current`` of the decision under way."""
    if not current:
        return True
    if _is_prefix(e):  # a retrace or an explained miss comes first in a call: one of each per call
        return not all(_is_prefix(c) for c in current) or any(
            c.kind == e.kind and c.source == e.source for c in current)
    if e.kind == "trace":  # one trace per call, after its prefix events
        return not all(_is_prefix(c) for c in current)
    if _is_lookup(e):  # one cache lookup per call, before its compile
        return any(_is_lookup(c) or c.kind == "compile" for c in current)
    return False


def _group(events: Sequence[Event]) -> list[Event]:
    """The events of the newest decision among one function's events (oldest first).

    The events are cut into calls: a call opens with its ``recompile`` (and JAX's explained ``miss``), else
    with its ``trace``, else (JAX's listeners off) with its cache lookup; lowering, compiling and storing
    belong to the call under way. The newest call is the answer, so it never reaches back past the previous
    decision of the same function.
    """
    start = 0
    current: list[Event] = []
    for i, e in enumerate(events):
        if _opens_decision(current, e):
            start, current = i, []
        current.append(e)
    return list(events[start:])


def last(events: Sequence[Event], fn: Any, since: float | None = None) -> CallDecision | None:
    """The latest decision for ``fn`` among ``events`` (see :meth:`xlakit.events.EventLog.last`)."""
    name = resolve_name(fn, (e.name for e in events))
    mine = [e for e in events if e.name == name and (since is None or e.monotonic >= since)]
    if not mine:
        return None
    group = _group(mine)
    kinds = {e.kind for e in group}
    compiles = [e for e in group if e.kind == "compile"]
    recompile = next((e for e in group if e.kind == "recompile"), None)
    miss = next((e for e in group if e.kind == "miss" and e.source in _LOOKUPS), None) or next(
        (e for e in group if e.kind == "miss"), None)
    if compiles and recompile is not None:
        kind, reason = "recompiled", recompile.reason
    elif compiles:
        kind, reason = "compiled", miss.reason if miss is not None else None
    elif "hit" in kinds:
        kind, reason = "hit", None
    elif miss is not None:
        kind, reason = "miss", miss.reason
    else:
        kind, reason = ("recompiled", recompile.reason) if recompile is not None else ("traced", None)
    return CallDecision(name, kind, reason, tuple(recompile.changes or ()) if recompile is not None else (),
                        sum(e.duration_s or 0.0 for e in compiles), tuple(group))


def recompiles(events: Iterable[Event]):
    """One row per function that recompiled (see :func:`xlakit.events.recompiles`)."""
    import pandas as pd

    rows: dict[str, dict[str, Any]] = {}
    pending: set[str] = set()  # functions whose next compile is a recompile's
    for e in events:
        if e.name is None:
            continue
        if e.kind == "recompile":
            row = rows.setdefault(e.name, {"function": e.name, "origin": e.origin, "site": e.site, "recompiles": 0,
                                           "compile_s": 0.0, "_paths": collections.Counter(), "_values": {},
                                           "_with": {}})
            row["recompiles"] += 1
            row["site"] = e.site or row["site"]
            row["last_change"] = e.reason
            keys = list(dict.fromkeys((c.get("path", "?"), c.get("what", "?")) for c in e.changes or ()))
            for key in keys:  # what changed together with it, in every recompile it was part of
                known = row["_with"].get(key)
                row["_with"][key] = [k for k in (keys if known is None else known) if k in keys]
            for c in e.changes or ():
                key = (c.get("path", "?"), c.get("what", "?"))
                row["_paths"][key] += 1
                values = row["_values"].setdefault(key, [])
                for v in (c.get("before"), c.get("after")):
                    if v is not None and (not values or values[-1] != v):
                        values.append(v)
            pending.add(e.name)
        elif e.name in pending and e.kind in ("compile", "hit"):
            if e.kind == "compile":
                rows[e.name]["compile_s"] += e.duration_s or 0.0
            pending.discard(e.name)
    out = []
    for row in rows.values():
        paths, values, together = row.pop("_paths"), row.pop("_values"), row.pop("_with")
        first = paths.most_common(1)[0][0] if paths else ("?", "unknown")
        tied = together.get(first) or [first]
        if len(tied) == 1:
            (path, what), = tied
            shown = ", ".join(dict.fromkeys(values.get((path, what), [])))
        else:  # arguments that changed together in each of those calls: all named, each with its values
            path = ", ".join(dict.fromkeys(p for p, _ in tied))
            what = ", ".join(dict.fromkeys(w for _, w in tied))
            by_path: dict[str, str] = {}  # a path once, with the values of its first change (shape and dtype alike)
            for p, w in tied:
                by_path.setdefault(p, w)
            shown = "; ".join(f"{p}: {', '.join(dict.fromkeys(values.get((p, w), [])))}" for p, w in by_path.items())
        out.append({**row, "argument": path, "what": what, "values_seen": shown})
    frame = pd.DataFrame(out, columns=RECOMPILE_COLUMNS)
    frame["_library"] = frame["origin"].eq("library")  # your functions first, JAX's own helpers after
    frame = frame.sort_values(["_library", "recompiles", "compile_s"], ascending=[True, False, False],
                              ignore_index=True)
    return frame.drop(columns="_library")
