"""Which function a JAX trace is of, and whether it is a trace that counts (:mod:`xlakit._jax.retrace`): a function
is told apart by the chain of code it wraps; a trace that raised, or one of ``jax.eval_shape`` / ``jax.make_jaxpr``
(nothing is compiled from it), is not the user's retrace."""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["identity", "trace_failed", "abstract_only"]


def identity(fun: Any, fun_name: str | None) -> tuple:
    """``(name shown, the chain of what is wrapped)``: each link by its code (name, file, line and a digest of the
    bytes: two lambdas on one line share the first three) or, for a callable object, by its class and ``__call__``;
    followed through ``__wrapped__`` and ``functools.partial`` only. So a decorator's wrapper made again is the same
    function, while ``jax.jit(jax.vmap(f))``, ``jax.jit(jf)`` and two instances of unrelated classes are not."""
    chain: list[tuple] = []
    for _ in range(8):
        code = getattr(fun, "__code__", None)
        if code is not None:
            chain.append((getattr(fun, "__qualname__", code.co_name), code.co_filename, code.co_firstlineno,
                          _code_digest(code)))
        else:
            kind = type(fun)
            call = getattr(vars(kind).get("__call__") or next(
                (vars(k)["__call__"] for k in kind.__mro__ if "__call__" in vars(k)), None), "__code__", None)
            chain.append((kind.__qualname__, kind.__module__, _code_digest(call) if call is not None else ""))
        inner = fun.func if isinstance(fun, functools.partial) else getattr(fun, "__wrapped__", None)
        if inner is None:
            break
        fun = inner
    shown = next((link[0] for link in reversed(chain) if len(link) == 4), None) or fun_name
    return (shown, tuple(chain))


def _code_digest(code: Any) -> str:
    """A digest of a code object's bytecode, names and constants (nested code objects by their own digest, not by
    their address): the same source gives the same digest, in a re-run cell too."""
    import hashlib

    h = hashlib.sha1(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        h.update(_code_digest(const).encode() if hasattr(const, "co_code") else repr(const).encode("utf-8", "replace"))
    return h.hexdigest()[:16]


def trace_failed(frame: Any) -> bool:
    """Whether the trace timed in ``frame`` is ending with an exception (JAX's timer reports on the way out):
    the exception being handled passes through that very frame."""
    if frame is None:
        return False
    tb = getattr(sys.exc_info()[1], "__traceback__", None)
    while tb is not None:
        if tb.tb_frame is frame:
            return True
        tb = tb.tb_next
    return False


#: JAX's functions that trace a jitted function without compiling it: (file ending, function name).
_ABSTRACT = (("jax/_src/api.py", "eval_shape"), ("jax/_src/api.py", "make_jaxpr_f"), ("jax/_src/api.py", "make_jaxpr"))


def abstract_only(frame: Any) -> bool:
    """Whether the trace timed in ``frame`` runs under ``jax.eval_shape`` or ``jax.make_jaxpr``: JAX times it as a
    trace (its jaxpr cache may even answer it), but nothing is compiled from it, so it is no recompile and no
    signature of the user's. Looked for in the 40 frames above the trace."""
    f = frame.f_back if frame is not None else None
    for _ in range(40):
        if f is None:
            return False
        name, file = f.f_code.co_name, f.f_code.co_filename.replace("\\", "/")
        if any(file.endswith(ending) and name == fn for ending, fn in _ABSTRACT):
            return True
        f = f.f_back
    return False
