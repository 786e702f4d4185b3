"""Compiles that JAX's in-process memo cannot answer, and the cache key of a program without compiling it.

JAX memoizes executables per lowered module (``jax._src.interpreters.pxla._cached_compilation``, a
``weakref_lru_cache`` keyed by the ``ir.Module``), so ``jit(f).lower(x).compile()`` after ``jit(f)(x)`` returns
the executable that already ran. On XLA:CPU (jaxlib 0.10.2) an executable with a sort serializes before its
first run and fails after it ("``LessThan`` is not serializable"); and an executable loaded from a cache can
re-serialize to different (on 0.12, broken) bytes. Anything that must *store* an executable therefore takes it
from :func:`compile_fresh`: the memo entry of this one module is evicted (``evict_weakref``; other programs keep
theirs) and XLA compiles it again, never run.

:func:`probe_key` computes JAX's cache key of a lowered program exactly as a compile would, and stops there.

Private JAX names used here (checked by :func:`supported`): ``pxla._cached_compilation`` (``evict_weakref``,
``cache_clear``) and ``jax.stages.Lowered._lowering`` (``_hlo``, ``compile(compiler_options=...)``).
"""

from __future__ import annotations

from typing import Any

from xlakit._jax import hooks
from xlakit._jax.hooks import CompileContext

__all__ = ["compile_fresh", "probe_key", "PassThrough", "supported"]


class PassThrough:
    """A hooks handler that finds nothing and stores nothing: the compile goes to XLA (and bypasses JAX's own
    persistent cache and xlakit's transparent mode)."""

    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        return None, None

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):
        return None


def supported() -> bool:
    """Whether this JAX has the private names this module relies on."""
    try:
        from jax._src.interpreters import pxla
    except ImportError:  # pragma: no cover
        return False
    memo = getattr(pxla, "_cached_compilation", None)
    return memo is not None and hasattr(memo, "cache_clear")


def _forget(lowered: Any) -> None:
    """Drop JAX's memoized executable of this lowered module (only this one when JAX allows it)."""
    from jax._src.interpreters import pxla

    memo = getattr(pxla, "_cached_compilation", None)
    if memo is None:
        return
    hlo = getattr(getattr(lowered, "_lowering", None), "_hlo", None)
    if hlo is not None and hasattr(memo, "evict_weakref"):
        try:
            memo.evict_weakref(hlo)
            return
        except Exception:  # noqa: BLE001 - fall back to forgetting everything below
            pass
    memo.cache_clear()


def compile_fresh(lowered: Any, handler: hooks.Handler | None = None, compiler_options: dict | None = None):
    """Compile ``lowered`` (a ``jax.stages.Lowered``) into a ``jax.stages.Compiled`` that has never run.

    Bypasses JAX's in-process memo (see the module docstring) and, with the default ``handler``, every
    persistent cache: XLA compiles. With a ``handler`` (an xlakit cache) the compile is routed there instead,
    so it may be a load from that cache — never JAX's in-memory executable. ``compiler_options``: XLA debug
    options for this compile (e.g. a dump folder; JAX leaves dump options out of its cache key, which is why a
    dump needs a compile that no cache answers).

    Raises:
      Errors of the compile itself pass through. When xlakit's hooks cannot be installed on this JAX
      (:class:`~xlakit._jax.versions.UnsupportedJaxVersion`), the memo is still bypassed but JAX's own
      persistent cache, if configured, may answer.
    """
    options = dict(compiler_options or {})
    _forget(lowered)
    try:
        hooks.acquire()
    except Exception:  # noqa: BLE001 - an unsupported JAX: compile without the routing
        return lowered.compile(compiler_options=options)
    try:
        with hooks.route(handler if handler is not None else PassThrough()):
            # compiler_options={}: the same key as a plain compile, and it skips the executable the Lowered
            # object memoizes on itself.
            return lowered.compile(compiler_options=options)
    finally:
        hooks.release()


class _Probe(Exception):
    def __init__(self, ctx: CompileContext, backend: Any) -> None:
        super().__init__("xlakit key probe")
        self.ctx, self.backend = ctx, backend


class _ProbeHandler:
    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        raise _Probe(ctx, backend)

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):  # pragma: no cover
        return None


def probe_key(lowered: Any) -> tuple[CompileContext, Any]:
    """``(context, backend)`` of the lookup a compile of ``lowered`` would make: JAX's own key code runs, XLA
    does not. The hooks must be installed (:func:`xlakit._jax.hooks.acquire`).

    Raises:
      RuntimeError: JAX never reached its cache (e.g. ``jax_enable_compilation_cache`` is False).
    """
    for _ in range(2):
        try:
            with hooks.route(_ProbeHandler()):
                lowered._lowering.compile(compiler_options={})
        except _Probe as probe:
            return probe.ctx, probe.backend
        _forget(lowered)  # JAX answered from its in-process memo without computing a key
    raise RuntimeError("could not compute the cache key of this program (JAX did not reach its cache)")
