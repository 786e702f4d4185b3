"""Refuse, before lowering, a program with a value too large for XLA to describe: XLA ends the process on it.

Lowering a value whose bytes overflow int64 does not raise: MLIR's shape check aborts the process ("overflow in
static extent product", jax 0.10.2 on CPU: ``f32[2**61]``, ``f32[2**30, 2**31]``; an ``outer`` of two
``f32[2**31]`` vectors inside the program too), which kills a notebook's kernel. xlakit lowers user functions
itself (``sweep``/``max_batch`` over batch sizes, ``peak(f, *args)``, ``probe``, ``cache.compile(f, ...)``,
``export_bundle``), so it traces first, checks every value of the program (arguments, intermediates, results,
inside loops and branches) and refuses one of :data:`LIMIT_BYTES` or more with a ``ValueError`` naming its shape,
and values that hold that much together (byte counts past int64 overflow in XLA's memory figures and in xlakit's:
six f32[2**59] outputs read as a 6 EiB peak).
The limit (4 EiB) is far above any device and below the overflow (the largest seen to lower and compile:
``f32[2**58]``, 1 EiB).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["LIMIT_BYTES", "check_jaxpr", "lower", "trace"]

#: Bytes of one value at or above which a program is refused before lowering.
LIMIT_BYTES = 1 << 62


def _value_bytes(aval: Any) -> int | None:
    shape = getattr(aval, "shape", None)
    dtype = getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        dims = [int(d) for d in shape]  # a symbolic dimension (shape polymorphism) has no size yet
        itemsize = int(getattr(dtype, "itemsize", 0) or 0)
    except Exception:  # noqa: BLE001 - JAX's InconclusiveDimensionOperation, or a dtype without a size
        return None
    return math.prod(dims) * max(itemsize, 1)


def _inner_jaxprs(value: Any) -> list[Any]:
    """The jaxprs an equation parameter holds (a loop body, cond branches, a closed call)."""
    if hasattr(value, "eqns"):
        return [value]
    inner = getattr(value, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns"):
        return [inner]
    if isinstance(value, (tuple, list)):
        return [j for v in value for j in _inner_jaxprs(v)]
    return []


def check_jaxpr(jaxpr: Any, where: str = "this program") -> None:
    """Raise ``ValueError`` when a value of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``; nested jaxprs searched)
    holds :data:`LIMIT_BYTES` or more."""
    todo = _inner_jaxprs(jaxpr)
    seen: set[int] = set()
    total = 0  # every value of the program once: byte counts beyond int64 overflow in XLA and in xlakit
    while todo:
        j = todo.pop()
        if id(j) in seen:
            continue
        seen.add(id(j))
        values = [*j.invars, *getattr(j, "constvars", ())]
        for eqn in j.eqns:
            values.extend(eqn.outvars)
            for param in eqn.params.values():
                todo.extend(_inner_jaxprs(param))
        for v in values:
            aval: Any = getattr(v, "aval", None)
            size = _value_bytes(aval)
            total += size or 0
            if size is not None and size >= LIMIT_BYTES:
                raise ValueError(
                    f"{where} holds a value of shape {tuple(aval.shape)} {aval.dtype} ({size:.3e} bytes, 2**"
                    f"{size.bit_length() - 1} or more): no device holds it, and XLA would end the process (abort, "
                    "not an error) while lowering it, so xlakit stops here. Use smaller example shapes (for "
                    "sweep / max_batch: smaller batch sizes or hi=).")
    if total >= LIMIT_BYTES:
        raise ValueError(f"{where} holds values of {total:.3e} bytes together (2**{total.bit_length() - 1} or more): "
                         "no device holds them, and byte counts this large overflow int64 in XLA's memory figures "
                         "and in xlakit's, so xlakit stops here. Use smaller example shapes.")


def trace(jitted: Any, args: tuple, kwargs: dict, where: str = "this program") -> Any:
    """``jitted.trace(*args, **kwargs)`` checked by :func:`check_jaxpr` (JAX's ``Traced``), or None where the
    object has no ``trace`` (then the caller lowers it unchecked, as before)."""
    tracer = getattr(jitted, "trace", None)
    if tracer is None:
        return None
    traced = tracer(*args, **kwargs)
    jaxpr = getattr(traced, "jaxpr", None)
    if jaxpr is not None:
        check_jaxpr(jaxpr, where)
    return traced


def lower(jitted: Any, args: tuple, kwargs: dict, where: str = "this program", own: bool = False) -> Any:
    """``jitted.lower(*args, **kwargs)``, refused first by :func:`check_jaxpr` where XLA would abort: one trace,
    as ``lower`` itself does (JAX's ``lower`` is ``trace(...).lower()``). ``own``: the trace is xlakit's own (a
    memory tool looking at the program), not the user's: no recompile event, and the function's history stays the
    user's (:func:`xlakit._jax.retrace.quiet_recompiles`).

    Raises:
      ValueError: a value of :data:`LIMIT_BYTES` or more. Whatever ``trace``/``lower`` raise passes through.
    """
    if own:
        from xlakit._jax.retrace import quiet_recompiles

        with quiet_recompiles():
            return lower(jitted, args, kwargs, where)
    traced = trace(jitted, args, kwargs, where)
    if traced is None or not hasattr(traced, "lower"):
        return jitted.lower(*args, **kwargs)
    return traced.lower()
