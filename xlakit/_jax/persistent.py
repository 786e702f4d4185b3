"""The JAX settings transparent mode needs while it is enabled (an adapter: no cache policy here).

* ``jax_enable_compilation_cache`` True, so JAX computes a key for every compile;
* ``jax_compilation_cache_dir`` None, so no folder path reaches the compile options (JAX 0.10 puts the autotune
  sub-cache path there, which makes every key depend on where the cache lives). JAX's own directory cache is
  therefore never initialised while xlakit is enabled;
* JAX's min compile time and min entry size zeroed: xlakit applies its own threshold and records each skip.

:func:`apply_config` returns what it replaced; :func:`restore_config` puts it back. Both reset JAX's memoised
"is the cache used" answer (``jax._src.compilation_cache.reset_cache``).

The transparent cache itself (``TransparentCache``, ``enable``, ``disable``, ``active``) is
:mod:`xlakit.cache.transparent`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONFIG", "apply_config", "restore_config", "set_aside_cache_dir", "compiles_so_far"]

CONFIG = {
    "jax_enable_compilation_cache": True,
    "jax_compilation_cache_dir": None,
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}
_CONFIG = CONFIG


def apply_config() -> dict[str, Any]:
    """Set :data:`CONFIG`; returns the previous values."""
    import jax
    from jax._src import compilation_cache

    saved = {name: getattr(jax.config, name) for name in CONFIG}
    for name, value in CONFIG.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()  # forget a memoised "cache unused" answer
    return saved


def set_aside_cache_dir() -> None:
    """Set ``jax_compilation_cache_dir`` back to None (set again while transparent mode is enabled)."""
    import jax
    from jax._src import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()


def restore_config(saved: dict[str, Any]) -> None:
    """Put back the values :func:`apply_config` returned."""
    import jax
    from jax._src import compilation_cache

    for name, value in saved.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()



def compiles_so_far() -> int | None:
    """How many XLA compiles JAX has asked for in this process so far (``jit`` programs and JAX's own op-by-op
    ones alike): the misses of JAX's in-memory executable cache (``pxla._cached_compilation.cache_info()``).
    None when this JAX does not expose that count. A program compiled before the persistent cache was enabled
    stays in that in-memory cache: its later calls never reach a persistent cache."""
    try:
        from jax._src.interpreters import pxla

        return int(pxla._cached_compilation.cache_info().misses)
    except Exception:  # noqa: BLE001 - a private name: an unknown count is not an error
        return None
