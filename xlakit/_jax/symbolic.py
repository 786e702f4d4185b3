"""Tracing a bundle function with a symbolic batch axis, and telling whether its Python code branched on it.

Shape polymorphism (``jax.export.symbolic_shape``) traces one program for every batch size, but a Python
function can still look at the size: ``if x.shape[0] >= 16`` raises ``InconclusiveDimensionOperation``
(fine: the trace fails), while ``x.shape[0] == 7`` and ``if x.shape[0] % 2:`` quietly decide. JAX's
``_DimExpr.__eq__`` answers False when the difference of the two sides is still symbolic ("really
unsound", its own comment says), and a dimension expression has no ``__bool__``, so Python calls every one
true. Either way one branch is baked into the symbolic program although another batch size takes the other.

:func:`trace_symbolic` traces under :func:`_size_guesses`, which wraps those two places of
``jax._src.export.shape_poly._DimExpr`` (the only private names used here) for the duration of the trace and
records each guess made *outside* JAX's own code (JAX's internal shape checks are written to be sound for
every size; the caller's code, flax's or the user's, is not). Checked in JAX 0.10; where the class is missing
the trace fails with that reason, and the function counts as depending on the batch size (never padded).
:func:`jaxprs_agree` compares the symbolic
program, with the batch size substituted, to a concrete trace equation by equation: two traces that agree
compute the same function at that size.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SymbolicTrace", "trace_symbolic", "jaxprs_agree", "is_symbolic", "evaluate_dim"]

_PATCH_LOCK = threading.Lock()
_TRUSTED = ("jax", "jaxlib")  # packages whose shape decisions are made for every size


@dataclass(frozen=True)
class SymbolicTrace:
    """The outcome of :func:`trace_symbolic`.

    Attributes:
      jaxpr: the ``ClosedJaxpr`` traced with the symbolic batch, or None when tracing raised.
      problem: why it could not be traced (the exception, shortened), else None.
      guesses: each place outside JAX that decided something about the batch size the symbolic trace cannot
        know (``"x.shape[0] == 7 at model.py:12"``); non-empty means the program may branch on the size.
    """

    jaxpr: Any
    problem: str | None
    guesses: tuple[str, ...]


def is_symbolic(d: Any) -> bool:
    """True for a symbolic dimension (``jax.export.is_symbolic_dim``)."""
    import jax

    return bool(jax.export.is_symbolic_dim(d))


def evaluate_dim(d: Any, env: dict[str, int]) -> Any:
    """``d`` with its symbols set from ``env`` (an int), or ``d`` itself when it is not symbolic."""
    if not is_symbolic(d):
        return d
    return int(d._evaluate(env))


def _where(frame) -> str | None:
    """``file:line`` of ``frame`` unless it belongs to JAX itself (then None)."""
    from xlakit._sources import library_package

    if frame is None or library_package(frame.f_code.co_filename) in _TRUSTED:
        return None
    from xlakit._sources import display_file

    return f"{display_file(frame.f_code.co_filename)}:{frame.f_lineno}"


@contextlib.contextmanager
def _size_guesses(found: list[str]):
    """Record into ``found`` every undecidable ``==``/``!=``/truth test on a dimension expression made
    outside JAX while the block runs (see the module docstring)."""
    try:
        from jax._src.export import shape_poly

        cls = shape_poly._DimExpr
    except (ImportError, AttributeError):  # another JAX layout: no watch, so no size-independence either
        raise RuntimeError("this JAX has no jax._src.export.shape_poly._DimExpr, so decisions on the batch size "
                           "cannot be watched while tracing") from None
    eq, ne = cls.__eq__, cls.__ne__
    own_bool = cls.__dict__.get("__bool__")  # None in JAX 0.9-0.12: Python then calls every expression true

    inside = threading.local()

    def guessed(self, other) -> bool:
        if getattr(inside, "busy", False):  # the subtraction below compares too
            return False
        inside.busy = True
        try:
            return isinstance(other, (int, cls)) and is_symbolic(self - other)
        except Exception:  # noqa: BLE001 - another scope, a non-dimension: JAX's own answer stands
            return False
        finally:
            inside.busy = False

    def note(op: str, self, other) -> None:
        where = _where(sys._getframe(2))
        if where is not None:
            found.append(f"{self} {op} {other} at {where}")

    def checked_eq(self, other):
        result = eq(self, other)
        if not result and guessed(self, other):
            note("==", self, other)
        return result

    def checked_ne(self, other):
        result = ne(self, other)
        if result and guessed(self, other):
            note("!=", self, other)
        return result

    def checked_bool(self):
        where = _where(sys._getframe(1))
        if where is not None:
            found.append(f"bool({self}) at {where}")
        return True if own_bool is None else own_bool(self)  # without __bool__ Python answers True

    with _PATCH_LOCK:
        cls.__eq__, cls.__ne__ = checked_eq, checked_ne  # type: ignore[method-assign]
        cls.__bool__ = checked_bool  # type: ignore[attr-defined]
        try:
            yield found
        finally:
            cls.__eq__, cls.__ne__ = eq, ne  # type: ignore[method-assign]
            if own_bool is None:
                del cls.__bool__  # type: ignore[attr-defined]
            else:
                cls.__bool__ = own_bool  # type: ignore[attr-defined]


def trace_symbolic(fn: Callable[..., Any], *args: Any) -> SymbolicTrace:
    """``jax.make_jaxpr(fn)(*args)`` where ``args`` hold ``jax.ShapeDtypeStruct`` with symbolic dimensions;
    never raises (a failure is :attr:`SymbolicTrace.problem`). Traces only: nothing is lowered or compiled."""
    import jax

    found: list[str] = []
    try:
        with _size_guesses(found):
            jaxpr = jax.make_jaxpr(fn)(*args)
    except Exception as e:  # noqa: BLE001 - InconclusiveDimensionOperation, TypeError from NumPy on a symbol...
        text = " ".join(str(e).split())
        return SymbolicTrace(None, f"{type(e).__name__}: {text[:300]}", tuple(dict.fromkeys(found)))
    return SymbolicTrace(jaxpr, None, tuple(dict.fromkeys(found)))


# -- comparing a symbolic trace with a concrete one ---------------------------------------------------------

_CALLBACK_PARAMS = frozenset({"jvp_jaxpr_fun", "jvp_jaxpr_thunk", "jvp", "fwd_jaxpr_thunk", "bwd", "out_trees",
                              "transpose_jaxpr_thunk", "debug_info"})  # rules for derivatives, not the forward value


def jaxprs_agree(symbolic: Any, concrete: Any, env: dict[str, int]) -> str | None:
    """None when the ``ClosedJaxpr`` ``symbolic`` with ``env`` substituted is ``concrete`` equation by
    equation (primitives, parameters, shapes, dtypes, literals, constants and wiring, sub-jaxprs included),
    else the first difference in words. Derivative rules (``custom_jvp``/``custom_vjp`` thunks) are not
    compared: they do not change the forward value."""
    try:
        return _closed(symbolic, concrete, env, "program")
    except Exception as e:  # noqa: BLE001 - an unexpected parameter kind: say so, which counts as disagreeing
        return f"could not be compared ({type(e).__name__}: {e})"


def _closed(a, b, env, where) -> str | None:
    import numpy as np

    ca, cb = list(getattr(a, "consts", ())), list(getattr(b, "consts", ()))
    if len(ca) != len(cb):
        return f"{where}: {len(ca)} constants vs {len(cb)}"
    for i, (x, y) in enumerate(zip(ca, cb, strict=True)):
        if not _same_value(np.asarray(x) if _plain(x) else x, np.asarray(y) if _plain(y) else y):
            return f"{where}: constant {i} differs"
    return _open(getattr(a, "jaxpr", a), getattr(b, "jaxpr", b), env, where)


def _plain(x) -> bool:
    try:
        import numpy as np

        np.asarray(x)
        return True
    except Exception:  # noqa: BLE001 - typed keys and other extended values
        return False


def _open(a, b, env, where) -> str | None:
    names: dict[Any, Any] = {}
    for kind in ("constvars", "invars"):
        va, vb = getattr(a, kind), getattr(b, kind)
        if len(va) != len(vb):
            return f"{where}: {len(va)} {kind} vs {len(vb)}"
        for x, y in zip(va, vb, strict=True):
            problem = _same_aval(x.aval, y.aval, env)
            if problem:
                return f"{where}: an input {problem}"
            names[x] = y
    if len(a.eqns) != len(b.eqns):
        return f"{where}: {len(a.eqns)} equations vs {len(b.eqns)} at this size"
    for i, (ea, eb) in enumerate(zip(a.eqns, b.eqns, strict=True)):
        here = f"{where}, equation {i} ({ea.primitive.name})"
        if ea.primitive.name != eb.primitive.name:
            return f"{here}: {eb.primitive.name} at this size"
        if len(ea.invars) != len(eb.invars) or len(ea.outvars) != len(eb.outvars):
            return f"{here}: other operands"
        for x, y in zip(ea.invars, eb.invars, strict=True):
            problem = _same_atom(x, y, names, env)
            if problem:
                return f"{here}: {problem}"
        if set(ea.params) != set(eb.params):
            return f"{here}: other parameters"
        for k in ea.params:
            if k in _CALLBACK_PARAMS:
                continue
            problem = _same_param(ea.params[k], eb.params[k], env, f"{here} parameter {k}")
            if problem:
                return problem
        for x, y in zip(ea.outvars, eb.outvars, strict=True):
            problem = _same_aval(x.aval, y.aval, env)
            if problem:
                return f"{here}: a result {problem}"
            names[x] = y
    if len(a.outvars) != len(b.outvars):
        return f"{where}: {len(a.outvars)} results vs {len(b.outvars)}"
    for x, y in zip(a.outvars, b.outvars, strict=True):
        problem = _same_atom(x, y, names, env)
        if problem:
            return f"{where}: result {problem}"
    return None


def _same_atom(x, y, names, env) -> str | None:
    from jax.extend.core import Literal

    if isinstance(x, Literal) or isinstance(y, Literal):
        if not (isinstance(x, Literal) and isinstance(y, Literal)) or not _same_value(x.val, y.val):
            return "another literal operand"
        return _same_aval(x.aval, y.aval, env)
    if names.get(x, None) is not y:
        return "another operand"
    return None


def _same_aval(a, b, env) -> str | None:
    sa, sb = getattr(a, "shape", None), getattr(b, "shape", None)
    if sa is not None and sb is not None:
        if len(sa) != len(sb) or any(evaluate_dim(d, env) != e for d, e in zip(sa, sb, strict=True)):
            return f"has shape {tuple(sa)} vs {tuple(sb)}"
    elif (sa is None) != (sb is None):
        return "differs in kind"
    if getattr(a, "dtype", None) != getattr(b, "dtype", None):
        return f"has dtype {getattr(a, 'dtype', None)} vs {getattr(b, 'dtype', None)}"
    return None


def _same_param(a, b, env, where) -> str | None:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    if isinstance(a, (ClosedJaxpr, Jaxpr)) or isinstance(b, (ClosedJaxpr, Jaxpr)):
        if type(a) is not type(b):
            return f"{where}: another kind of sub-program"
        return _closed(a, b, env, where)
    if is_symbolic(a):
        return None if evaluate_dim(a, env) == b else f"{where}: {a} is not {b} at this size"
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{where}: {a} vs {b}"
        for x, y in zip(a, b, strict=True):
            problem = _same_param(x, y, env, where)
            if problem:
                return problem
        return None
    if callable(a) and callable(b) and not isinstance(a, type):
        return None if a is b or getattr(a, "__code__", 0) is getattr(b, "__code__", 1) else \
            f"{where}: another function"
    return None if _same_value(a, b) else f"{where}: {a!r} vs {b!r}"


def _same_value(a, b) -> bool:
    import numpy as np

    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or hasattr(a, "__array__"):
            x, y = np.asarray(a), np.asarray(b)
            same = np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
            return x.shape == y.shape and x.dtype == y.dtype and bool(same)
        if type(a) is not type(b):
            return False
        same = a == b
        if isinstance(same, (bool, np.bool_)) and same:
            return True
        text = repr(a)  # objects without a value equality (UnspecifiedValue, a Mesh): by their text
        return " at 0x" not in text and text == repr(b)
    except Exception:  # noqa: BLE001 - values that do not compare: compare their text
        return type(a) is type(b) and str(a) == str(b)


def substitute(avals: Sequence[Any], size: int) -> list[Any]:
    """``avals`` (``jax.ShapeDtypeStruct``) with every symbolic dimension set to ``size``."""
    import jax

    return [jax.ShapeDtypeStruct(tuple(size if is_symbolic(d) else d for d in a.shape), a.dtype) for a in avals]
