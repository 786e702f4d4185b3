"""Whose program is it? ``Event.origin`` and ``Event.site`` from the Python stack at the moment the event is emitted.

Events of a program (trace, lower, compile, hit, miss, store, ...) are emitted on the thread that traces or
compiles it, while the caller's frames are still on the stack. The stack is read only then — never on a call
that JAX's in-process cache answers, which emits nothing — and one walk costs microseconds.

The rule (library files as :mod:`xlakit._sources` defines them):

* ``site`` is the first user frame, innermost first: the line of user code that led to the program.
* ``origin`` is ``"user"`` when the traced Python function is user code (the ``fun`` of the innermost JAX
  ``pjit`` frame); ``"library"`` when it is JAX's own (its jitted helpers: ``jit_broadcast_in_dim``,
  ``jit__threefry_split``, ``jit__normal``, ``jit_relu`` from ``jnp.ones``, ``jax.random``, ``nn.relu``,
  ``model.init``); for another library's function (``jax.jit(model.apply)``) it is ``"user"`` when the user
  frame called JAX's jit machinery (``jax.jit(f)(x)``, ``.lower``, ``.compile``) or xlakit directly, and
  ``"library"`` when it called into that library, which jitted it.
* Events emitted with no JAX frame on the stack (folder maintenance, a bundle's background thread, events a
  test or a tool emits itself) get None for both: nothing says whose program they are.
"""

from __future__ import annotations

import functools
import sys
from types import FrameType

from xlakit._sources import Frame, describe, library_package

__all__ = ["attribute", "PROGRAM_KINDS"]

#: Kinds that belong to one program's trace, compile or lookup (the ones attributed).
PROGRAM_KINDS = frozenset({"hit", "miss", "compile", "store", "skip", "trace", "lower", "recompile", "remote_hit",
                           "remote_miss", "upload", "claim", "wait", "load_error", "corrupt"})

# Files of JAX's jit entry points: a user frame calling one of these called a jitted function itself.
_JIT_ENTRY = ("/jax/_src/traceback_util.py", "/jax/_src/pjit.py", "/jax/_src/api.py", "/jax/_src/stages.py",
              "/jax/_src/api_util.py", "/jax/_src/linear_util.py")
_PJIT = "/jax/_src/pjit.py"
_MAX_FRAMES = 200


def _norm(path: str) -> str:
    return path.replace("\\", "/")


@functools.lru_cache(maxsize=4096)
def _is_entry(path: str) -> bool:
    package = library_package(path)  # where the file is installed: a user's own jax/_src/api.py is no entry
    return package == "xlakit" or (package == "jax" and _norm(path).endswith(_JIT_ENTRY))


def _traced_function(frame: FrameType) -> tuple[str | None, Frame] | None:
    """``(library package or None for user code, definition)`` of the function a ``pjit`` frame traces or
    compiles (its ``fun`` local), or None when the frame has no such function."""
    code = frame.f_code
    if "fun" not in code.co_varnames or not _norm(code.co_filename).endswith(_PJIT):
        return None
    fun = frame.f_locals.get("fun")
    for _ in range(8):  # functools.partial / wrappers around the user's function
        inner = getattr(fun, "func", None) or getattr(fun, "__wrapped__", None)
        if inner is None:
            break
        fun = inner
    fcode = getattr(fun, "__code__", None)
    if fcode is None:
        return None
    return library_package(fcode.co_filename), Frame(fcode.co_filename, fcode.co_firstlineno,
                                                      getattr(fun, "__qualname__", fcode.co_name))


@functools.lru_cache(maxsize=4096)
def _site(path: str, line: int, function: str) -> str:
    return describe(Frame(path, line, function))


def _walk(start: FrameType | None) -> tuple[str | None, str | None, bool]:
    """``(origin, site, saw_jax)`` for the stack from ``start`` outwards (``site`` only when ``saw_jax``)."""
    saw_jax = False
    traced: tuple[str | None, Frame] | None = None  # the innermost pjit frame's function decides
    callers: set[str] = set()  # library packages on the stack outside the tracing frame (they called jit)
    inner: FrameType | None = None
    frame = start
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        path = frame.f_code.co_filename
        package = library_package(path)
        if traced is not None and package not in (None, "jax", "jaxlib", "xlakit"):
            callers.add(package)
        if package is None:  # the first user frame
            if not saw_jax:
                return None, None, False  # no program is being traced or compiled here
            code = frame.f_code
            site = _site(path, frame.f_lineno, getattr(code, "co_qualname", code.co_name))
            if traced is not None and traced[0] is None:
                return "user", site, True  # the traced function is user code
            if traced is not None and traced[0] in ("jax", "jaxlib"):
                return "library", site, True  # JAX's own jitted helpers (jax.nn.relu, jnp ufuncs, ...)
            if traced is not None and traced[0] in callers:
                return "library", site, True  # flax's own eval_shape/jit of its own function, inside model.init
            called_jit = inner is not None and _is_entry(inner.f_code.co_filename)
            return ("user" if called_jit else "library"), site, True
        if package in ("jax", "jaxlib"):
            saw_jax = True
            if traced is None:
                traced = _traced_function(frame)
        inner = frame
        frame = frame.f_back
    if traced is not None and traced[0] is None:  # no user frame (a worker thread), the user's function
        return "user", describe(traced[1]), saw_jax
    return None, None, saw_jax


def attribute(name: str | None = None, depth: int = 2) -> tuple[str | None, str | None]:
    """``(origin, site)`` for an event of program ``name`` emitted now (see the module docstring).

    Args:
      depth: frames to skip (the caller's own frames in the event log).
    """
    try:
        origin, site, _ = _walk(sys._getframe(depth))
    except Exception:  # noqa: BLE001 - attribution is a label; never fail the event for it
        return None, None
    return origin, site
