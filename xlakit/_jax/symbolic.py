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
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SymbolicTrace", "trace_symbolic", "is_symbolic"]

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


def _where(frame) -> str | None:
    """``file:line`` of ``frame`` unless it belongs to JAX itself (then None).

    A dunder method made from a string (a dataclass's or namedtuple's ``__eq__``: file ``<string>``) is not
    where a decision is written: its caller is. JAX compares its own dataclasses holding shapes (a cache key
    against one of batch 2), and that read as the user's ``batch == 2 at <string>:4``."""
    from xlakit._sources import library_package

    for _ in range(8):
        if frame is None:
            return None
        code = frame.f_code
        if not (code.co_filename.startswith("<") and code.co_name.startswith("__") and code.co_name.endswith("__")):
            break
        frame = frame.f_back
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


def brief_error(e: BaseException, limit: int = 200) -> str:
    """``Type: message`` for one reason line: the message's first paragraph on one line, without the links JAX
    appends ("Please see https://..."), cut at a word (with "…") within ``limit`` characters, never inside a
    link (a cut link read "https://docs.jax.dev/e)")."""
    import re

    text = str(e).strip().split("\n\n")[0]
    text = re.sub(r"\s*(For more (information|details)[^.]*|Please see|See)\s+https?://\S+\s*", " ", text)
    text = " ".join(re.sub(r"https?://\S+", "", text).split())
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    return f"{type(e).__name__}: {text}"


def trace_symbolic(fn: Callable[..., Any], *args: Any) -> SymbolicTrace:
    """``jax.make_jaxpr(fn)(*args)`` where ``args`` hold ``jax.ShapeDtypeStruct`` with symbolic dimensions;
    never raises (a failure is :attr:`SymbolicTrace.problem`). Traces only: nothing is lowered or compiled."""
    import jax

    found: list[str] = []
    try:
        with _size_guesses(found):
            jaxpr = jax.make_jaxpr(fn)(*args)
    except Exception as e:  # noqa: BLE001 - InconclusiveDimensionOperation, TypeError from NumPy on a symbol...
        return SymbolicTrace(None, brief_error(e, 300), tuple(dict.fromkeys(found)))
    return SymbolicTrace(jaxpr, None, tuple(dict.fromkeys(found)))
