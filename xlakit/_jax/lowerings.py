"""Which ``Lowered`` a ``jax.stages.Compiled`` was compiled from, kept where that is the only way to its buffer
assignment: on a platform whose ``memory_analysis()`` carries none (TPU), xlakit compiles the program once more
with XLA's dump (:mod:`xlakit._jax.compiler_dump`), which needs the Lowered, and JAX's Compiled keeps no link to
it. xlakit's hooks (:mod:`xlakit._jax.hooks`, while a cache is enabled) note each ``Lowered.compile()``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["note_lowering", "lowering_of", "options_of", "platform_of"]

_lock = threading.Lock()
# Compiled -> the Lowered it was compiled from, for programs of a platform whose memory_analysis() holds no buffer
# assignment: JAX's Compiled keeps no link to its lowering, and without one a bare Compiled cannot be compiled again
# with the dump. Filled by xlakit's hooks (jax.stages.Lowered.compile, while a cache is enabled); weakly keyed,
# so a Lowered lives as long as its Compiled.
_lowerings: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def note_lowering(compiled: Any, lowered: Any, options: Any = None) -> None:
    """Keep ``lowered`` (and the ``compiler_options`` it was compiled with, which change the program) beside
    ``compiled`` when their platform's ``memory_analysis()`` carries no buffer assignment
    (:attr:`xlakit._jax.platforms.Platform.assignment_in_memory_analysis`); nothing elsewhere. Never raises."""
    from xlakit._jax import platforms

    try:
        if platforms.rules(platform_of(lowered)).assignment_in_memory_analysis:
            return
        with _lock:
            _lowerings[compiled] = (lowered, dict(options) if options else None)
    except Exception:  # noqa: BLE001 - a program that cannot be weakly referenced: only its own Lowered helps
        pass


def lowering_of(compiled: Any) -> Any:
    """The ``Lowered`` :func:`note_lowering` kept for ``compiled``, else None."""
    return _kept(compiled)[0]


def options_of(compiled: Any) -> dict | None:
    """The ``compiler_options`` ``compiled`` was compiled with, as :func:`note_lowering` kept them, else None."""
    return _kept(compiled)[1]


def _kept(compiled: Any) -> tuple[Any, Any]:
    with _lock:
        try:
            return _lowerings.get(compiled) or (None, None)
        except TypeError:
            return None, None


def platform_of(lowered: Any) -> str | None:
    """The platform a ``jax.stages.Lowered`` was lowered for (its first device's), else JAX's default backend."""
    try:
        devices = lowered._lowering.compile_args.get("device_assignment")  # noqa: SLF001
        if devices:
            return str(next(iter(devices)).platform)
    except Exception:  # noqa: BLE001 - fall back to the default backend
        pass
    try:
        import jax

        return jax.default_backend()
    except Exception:  # noqa: BLE001
        return None
