"""Compiles that JAX's in-process memo cannot answer.

JAX memoizes executables per lowered module (``jax._src.interpreters.pxla._cached_compilation``), so
``jit(f).lower(x).compile()`` after ``jit(f)(x)`` returns the executable that already ran. On XLA:CPU
(jaxlib 0.10.2) an executable with a sort serializes before its first run and fails after it
("``LessThan`` is not serializable"). Anything that must serialize an executable takes it from
:func:`compile_fresh`, which XLA compiles again and which has never run.

Private JAX names used here: ``pxla._cached_compilation`` (``evict_weakref`` / ``cache_clear``) and
``jax.stages.Lowered._lowering._hlo``.
"""

from __future__ import annotations

from typing import Any

from xlakit._jax import hooks

__all__ = ["compile_fresh", "PassThrough"]


class PassThrough:
    """A hooks handler that finds nothing and stores nothing: the compile goes to XLA."""

    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        return None, None

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):
        return None


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
        except Exception:  # noqa: BLE001 - fall back to forgetting every memoized executable
            pass
    memo.cache_clear()


def compile_fresh(lowered: Any):
    """Compile ``lowered`` (a ``jax.stages.Lowered``) into a ``jax.stages.Compiled`` that has never run.

    JAX's in-process memo is bypassed and every persistent cache too (a pass-through route): XLA compiles.

    Raises:
      Errors of the compile itself pass through. Where xlakit's hooks cannot be installed on this JAX the memo
      is still bypassed, but JAX's own persistent cache, if configured, may answer.
    """
    _forget(lowered)
    try:
        hooks.acquire()
    except Exception:  # noqa: BLE001 - an unsupported JAX: compile without the routing
        return lowered.compile(compiler_options={})
    try:
        with hooks.route(PassThrough()):
            # compiler_options={}: the same key as a plain compile; skips the executable the Lowered memoizes.
            return lowered.compile(compiler_options={})
    finally:
        hooks.release()
