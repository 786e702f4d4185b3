"""Transparent mode: xlakit's store becomes the persistent compilation cache of every ``jax.jit``.

:class:`TransparentCache` is a :class:`~xlakit._jax.handler.StoreHandler` installed as the default handler
of xlakit's hooks (:mod:`xlakit._jax.hooks`), plus the JAX settings it needs while enabled:

* ``jax_enable_compilation_cache`` True, so JAX computes a key for every compile;
* ``jax_compilation_cache_dir`` None, so no folder path reaches the compile options (JAX 0.10 puts the
  autotune sub-cache path there, which makes every key depend on where the cache lives — case C2). JAX's
  own directory cache is therefore never initialised while xlakit is enabled;
* JAX's min compile time and min entry size zeroed: xlakit applies its own threshold and records each skip.

Every setting, hook and logger level is restored by :meth:`TransparentCache.uninstall`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from xlakit._jax import hooks
from xlakit._jax.handler import StoreHandler
from xlakit.store import LocalStore

__all__ = ["TransparentCache", "enable", "disable", "active"]

# JAX settings while transparent mode is on (restored by uninstall).
_CONFIG = {
    "jax_enable_compilation_cache": True,
    "jax_compilation_cache_dir": None,
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


class TransparentCache(StoreHandler):
    """The installed transparent cache: answers every compile no explicit cache claims.

    Use :func:`xlakit.enable_cache` to create one. See :class:`~xlakit._jax.handler.StoreHandler` for
    ``store``, ``min_compile_time_s``, ``log`` and ``path``.
    """

    _saved_config: dict[str, Any] | None = None

    def install(self) -> None:
        """Hook into JAX. Raises :class:`~xlakit._jax.versions.UnsupportedJaxVersion` on an unsupported JAX."""
        import jax
        from jax._src import compilation_cache

        hooks.acquire()
        self._saved_config = {name: getattr(jax.config, name) for name in _CONFIG}
        for name, value in _CONFIG.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()  # forget a memoised "cache unused" answer
        hooks.set_default(self)

    def uninstall(self) -> None:
        """Restore JAX's functions, settings and logger exactly as :meth:`install` found them."""
        if self._saved_config is None:
            return
        import jax
        from jax._src import compilation_cache

        hooks.set_default(None)
        for name, value in self._saved_config.items():
            jax.config.update(name, value)
        self._saved_config = None
        compilation_cache.reset_cache()
        hooks.release()


_lock = threading.Lock()
_active: TransparentCache | None = None


def active() -> TransparentCache | None:
    """The installed :class:`TransparentCache`, or None."""
    return _active


def enable(path: str | Path | None = None, max_bytes: int | None = None, min_compile_time_s: float = 0.0,
           *, secret: bytes | None = None) -> TransparentCache:
    """See :func:`xlakit.enable_cache`."""
    global _active
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive number of bytes or None, got {max_bytes}")
    store = LocalStore(path, max_bytes=max_bytes, secret=secret)
    cache = TransparentCache(store, min_compile_time_s=min_compile_time_s)
    with _lock:
        if _active is not None:
            _active.uninstall()
            _active = None
        cache.install()
        _active = cache
    return cache


def disable() -> bool:
    """See :func:`xlakit.disable_cache`. Returns True if a cache was enabled."""
    global _active
    with _lock:
        if _active is None:
            return False
        _active.uninstall()
        _active = None
        return True
