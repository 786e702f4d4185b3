"""Whose program is it? ``Event.origin`` and ``Event.site`` from the Python stack at the moment the event is emitted.

Events of a program (trace, lower, compile, hit, miss, store, ...) are emitted on the thread that traces or
compiles it, while the caller's frames are still on the stack. The stack is read only then — never on a call
that JAX's in-process cache answers, which emits nothing — and one walk costs microseconds.

The rule (library files as :mod:`xlakit._sources` defines them):

* ``site`` is the first user frame, innermost first: the line of user code that led to the program.
* ``origin`` is ``"user"`` when the traced Python function is user code (the ``fun`` JAX's ``pjit`` frames
  trace), or when the user frame called JAX's jit machinery (``jax.jit(f)(x)``, ``.lower``, ``.compile``) or
  xlakit directly; ``"library"`` when the user frame called into jax/flax/optax/... and the program was
  jitted in there (JAX's helpers such as ``jit_broadcast_in_dim``, ``jit__threefry_split``, ``jit__normal``
  from ``jnp.ones``, ``jax.random``, ``model.init``).
* Events emitted with no JAX frame on the stack (folder maintenance, a bundle's background thread) take the
  attribution last seen for the same name, else None.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
from types import FrameType

from xlakit._sources import Frame, describe, library_package

__all__ = ["attribute", "remember", "PROGRAM_KINDS"]

#: Kinds that belong to one program's trace, compile or lookup (the ones attributed).
PROGRAM_KINDS = frozenset({"hit", "miss", "compile", "store", "skip", "trace", "lower", "recompile", "remote_hit",
                           "remote_miss", "upload", "claim", "wait", "load_error", "corrupt"})

# Files of JAX's jit entry points: a user frame calling one of these called a jitted function itself.
_JIT_ENTRY = ("/jax/_src/traceback_util.py", "/jax/_src/pjit.py", "/jax/_src/api.py", "/jax/_src/stages.py",
              "/jax/_src/api_util.py", "/jax/_src/linear_util.py")
_PJIT = "/jax/_src/pjit.py"
_MAX_FRAMES = 200
_MAX_NAMES = 4096

_lock = threading.Lock()
_by_name: collections.OrderedDict[str, tuple[str | None, str | None]] = collections.OrderedDict()


def _norm(path: str) -> str:
    return path.replace("\\", "/")


@functools.lru_cache(maxsize=4096)
def _is_entry(path: str) -> bool:
    p = _norm(path)
    return library_package(path) == "xlakit" or p.endswith(_JIT_ENTRY)


def _traced_function(frame: FrameType) -> Frame | None:
    """The user-code function a ``pjit`` frame is tracing (its ``fun`` local), or None."""
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
    if fcode is None or library_package(fcode.co_filename) is not None:
        return None
    return Frame(fcode.co_filename, fcode.co_firstlineno, getattr(fun, "__qualname__", fcode.co_name))


def _walk(start: FrameType | None) -> tuple[str | None, str | None, bool]:
    """``(origin, site, saw_jax)`` for the stack from ``start`` outwards."""
    saw_jax = False
    traced: Frame | None = None
    inner: FrameType | None = None
    frame = start
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        path = frame.f_code.co_filename
        package = library_package(path)
        if package is None:  # the first user frame
            site = describe(Frame(path, frame.f_lineno, frame.f_code.co_qualname
                                  if hasattr(frame.f_code, "co_qualname") else frame.f_code.co_name))
            called_jit = inner is not None and _is_entry(inner.f_code.co_filename)
            user = traced is not None or called_jit or not saw_jax
            return ("user" if user else "library"), site, saw_jax
        if package in ("jax", "jaxlib"):
            saw_jax = True
            if traced is None:
                traced = _traced_function(frame)
        inner = frame
        frame = frame.f_back
    if traced is not None:  # no user frame (a worker thread) but the traced function is the user's
        return "user", describe(traced), saw_jax
    return None, None, saw_jax


def attribute(name: str | None, depth: int = 2) -> tuple[str | None, str | None]:
    """``(origin, site)`` for an event of program ``name`` emitted now (see the module docstring).

    Args:
      depth: frames to skip (the caller's own frames in the event log).
    """
    try:
        origin, site, saw_jax = _walk(sys._getframe(depth))
    except Exception:  # noqa: BLE001 - attribution is a label; never fail the event for it
        origin, site, saw_jax = None, None, False
    if not saw_jax:
        if name is not None:
            with _lock:
                known = _by_name.get(name)
            if known is not None:
                return known
        return None, None
    if name is not None and origin is not None:
        remember(name, origin, site)
    return origin, site


def remember(name: str, origin: str | None, site: str | None) -> None:
    """Keep ``(origin, site)`` for ``name`` (the newest 4096 names), for its events emitted off JAX's stack."""
    with _lock:
        _by_name[name] = (origin, site)
        _by_name.move_to_end(name)
        while len(_by_name) > _MAX_NAMES:
            _by_name.popitem(last=False)
