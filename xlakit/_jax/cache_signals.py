"""JAX's own persistent-cache signals, given for the programs xlakit's store answers.

xlakit replaces ``jax._src.compiler._cache_read`` / ``_cache_write`` (:mod:`xlakit._jax.hooks`), and JAX emits
some of its cache signals from inside those functions. So that tools reading them (``jax.monitoring``
listeners, ``jax_explain_cache_misses`` log readers, JAX's own tests) see the same thing with xlakit on, the
store handler calls these, at the points where JAX's code would have:

* ``/jax/compilation_cache/cache_misses`` (``jax.monitoring.record_event``): JAX (0.10) records it just before
  it puts a new entry in its cache, so once per program *written*, not per lookup that missed.
* The records "Not writing persistent cache entry ..." (process index, host callbacks, compile time under the
  threshold), "'%s' took at least ..." and "Writing %s to persistent compilation cache ..." on JAX's loggers,
  with JAX's priority: WARNING while ``jax_explain_cache_misses`` is on, else DEBUG.
* "PERSISTENT COMPILATION CACHE MISS ..." is logged by JAX's caller, not by the replaced functions, but at
  WARNING only when JAX's *own* directory cache is configured (never, while xlakit answers):
  :func:`log_miss` logs it with the priority JAX uses for a persistent cache (the hooks route JAX's call here).

The compile seconds JAX's ``compile_time_saved_sec`` is computed from (``_cache_read``'s second result) are
JAX's stored value: the compile seconds truncated to a whole number (``int``), see :func:`stored_compile_s`.
Messages are JAX 0.10's templates; the listeners in :mod:`xlakit._jax.listeners` read the same ones.
"""

from __future__ import annotations

import logging
import math

__all__ = ["explain_priority", "not_written", "took_at_least", "writing", "log_miss", "stored_compile_s"]

_COMPILER = "jax._src.compiler"
_CACHE = "jax._src.compilation_cache"
_WRITES = "/jax/compilation_cache/cache_misses"

_NOT_PROCESS_0 = "Not writing persistent cache entry since process_id != 0"
_CALLBACKS = ("Not writing persistent cache entry for '%s' because it uses host callbacks (e.g. from "
              "jax.debug.print or breakpoint)")
_TOO_FAST = ("Not writing persistent cache entry for '%s' because it took < %.2f seconds to compile "
             "(%.2fs)")
_TOOK = "'%s' took at least %.2f seconds to compile (%.2fs)"
_WRITING = "Writing %s to persistent compilation cache with key %r"
_MISS = "PERSISTENT COMPILATION CACHE MISS for '%s' with key %r"


def explain_priority() -> int:
    """WARNING while ``jax_explain_cache_misses`` is on, else DEBUG: the level JAX logs its persistent-cache
    explanations at when a persistent cache is in use (xlakit's store is one)."""
    import jax

    return logging.WARNING if getattr(jax.config, "jax_explain_cache_misses", False) else logging.DEBUG


def not_written(module_name: str, why: str, *, threshold_s: float = 0.0, compile_s: float = 0.0) -> None:
    """Log JAX's "Not writing persistent cache entry" record for ``why`` in ``("process", "callbacks",
    "too_fast")`` (an unknown ``why`` logs nothing): xlakit's reasons with the same meaning as JAX's."""
    logger = logging.getLogger(_COMPILER)
    level = explain_priority()
    if why == "process":
        logger.log(level, _NOT_PROCESS_0)
    elif why == "callbacks":
        logger.log(level, _CALLBACKS, module_name)
    elif why == "too_fast":
        logger.log(level, _TOO_FAST, module_name, threshold_s, compile_s)


def took_at_least(module_name: str, threshold_s: float, compile_s: float) -> None:
    """JAX's DEBUG record for a program compiled at least as long as the store's threshold."""
    logging.getLogger(_COMPILER).debug(_TOOK, module_name, threshold_s, compile_s)


def writing(module_name: str, key: str) -> None:
    """An entry is about to be written: JAX's "Writing ..." record and its ``cache_misses`` event."""
    from jax import monitoring

    logging.getLogger(_CACHE).log(explain_priority(), _WRITING, module_name, key)
    monitoring.record_event(_WRITES)


def log_miss(module_name: str, cache_key: str) -> None:
    """JAX's "PERSISTENT COMPILATION CACHE MISS" record, at WARNING while ``jax_explain_cache_misses`` is on."""
    logging.getLogger(_COMPILER).log(explain_priority(), _MISS, module_name, cache_key)


def stored_compile_s(compile_s: float | None) -> int:
    """The compile seconds to hand back to JAX on a hit: whole seconds, truncated, as JAX stores them
    (``int(compile_time_secs)``). JAX reports ``compile_time_saved_sec`` = this minus the lookup seconds, so
    rounding up would add up to 1 s of "saved" time to every hit."""
    if compile_s is None or not math.isfinite(compile_s) or compile_s < 0:
        return 0
    return int(compile_s)
