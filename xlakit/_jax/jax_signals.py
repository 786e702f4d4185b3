"""JAX's own signals, by name: ``jax.monitoring`` event names, the loggers and log-message templates the listeners
read, and the per-thread record of one compile step. Data and small pure helpers for :mod:`xlakit._jax.listeners`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

# jax.monitoring names (jax._src.dispatch / compiler / compilation_cache).
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_USE_CACHE = "/jax/compilation_cache/compile_requests_use_cache"
_CACHE_HITS = "/jax/compilation_cache/cache_hits"
_CACHE_WRITES = "/jax/compilation_cache/cache_misses"  # JAX fires it only when an entry is written
_SAVED = "/jax/compilation_cache/compile_time_saved_sec"
_RETRIEVAL = "/jax/compilation_cache/cache_retrieval_time_sec"

# Logger -> the level a record must reach to be created there (what we need to see).
_LOGGERS = {
    "jax._src.compiler": logging.DEBUG,
    "jax._src.compilation_cache": logging.DEBUG,
    "jax._src.lru_cache": logging.DEBUG,
    "jax._src.interpreters.partial_eval": logging.WARNING,  # TRACING CACHE MISS (jax 0.10)
    "jax._src.pjit": logging.WARNING,  # where other JAX versions explain tracing-cache misses
}

# JAX's log message templates (``record.msg``), matched exactly.
_MSG_HIT = "Persistent compilation cache hit for '%s' with key %r"
_MSG_MISS = "PERSISTENT COMPILATION CACHE MISS for '%s' with key %r"
_MSG_TOOK = "'%s' took at least %.2f seconds to compile (%.2fs)"
_MSG_TOO_FAST = ("Not writing persistent cache entry for '%s' because it took < %.2f seconds to compile "
                 "(%.2fs)")
_MSG_CALLBACKS = ("Not writing persistent cache entry for '%s' because it uses host callbacks (e.g. from "
                  "jax.debug.print or breakpoint)")
_MSG_NOT_PROCESS_0 = "Not writing persistent cache entry since process_id != 0"
_MSG_WRITING = "Writing %s to persistent compilation cache with key %r"
_MSG_TOO_SMALL = ("Not writing persistent cache entry with key %r since its size (%d bytes) is less than "
                  "threshold (%d bytes)")
_MSG_NO_CACHE = "get_executable_and_time: cache is disabled/not initialized"
_MSG_EVICT = "Evicting cache entry %r: file size %d bytes, target cache size %d bytes"
_TRACING_MISS = "TRACING CACHE MISS "

def module_name(fun_name: str | None, wrap: str | None = None) -> str | None:
    """The name JAX gives the module it compiles for ``fun_name`` (``jit(f)`` -> ``jit_f``).

    Mirrors ``jax._src.interpreters.mlir.sanitize_name(...).rstrip("_")``; ``wrap`` adds the transform
    (``"jit"``) for names JAX reports before it wraps them (the traced function's own name).
    """
    if not fun_name:
        return None
    if wrap and not re.fullmatch(r"\w+\(.*\)", fun_name):
        fun_name = f"{wrap}({fun_name})"
    return re.sub(r"[^\w.-]", "_", fun_name).rstrip("_") or None


def _registered(monitoring: Any, getter: str, callback: Callable[..., None]) -> bool:
    """Whether ``callback`` is in JAX's listener list (read through ``getter``, or the private list)."""
    get = getattr(monitoring, getter, None)
    if get is not None:
        return callback in get()
    private = {"get_event_listeners": "_event_listeners",
               "get_event_duration_listeners": "_event_duration_secs_listeners"}[getter]
    return callback in getattr(monitoring, private, ())


def _name_from_key(key: Any) -> str | None:
    """JAX's keys are ``<module name>-<sha256 hex>``."""
    if isinstance(key, str) and "-" in key:
        return key.rsplit("-", 1)[0] or None
    return None


class _Step:
    """What one thread has seen of one JAX compile step (cache lookup ... backend compile duration)."""

    __slots__ = ("layer", "keyed", "missed", "served", "compile_recorded", "xlakit_compiled", "xlakit_elsewhere",
                 "hit_name", "hit_key", "jax_saved_s", "hit_pending", "write_name", "write_key", "pending")

    def __init__(self, layer: str | None, keyed: bool = False, xlakit_elsewhere: bool = False) -> None:
        self.layer = layer  # "xlakit", "jax-persistent", or None (no persistent cache in use)
        self.keyed = keyed  # JAX computed a cache key and asked a cache before compiling
        self.missed = False  # JAX logged a persistent-cache miss: the lookup returned, a compile follows
        self.served = False  # a cache hit: the step loaded a program instead of compiling it
        self.compile_recorded = False  # the listeners already emitted this step's compile
        self.xlakit_compiled = False  # xlakit's handler recorded the compile (seen on the log)
        self.xlakit_elsewhere = xlakit_elsewhere  # xlakit's handler writes to another log: trust it
        self.hit_name: str | None = None
        self.hit_key: str | None = None
        self.jax_saved_s: float | None = None
        self.hit_pending: dict[str, Any] | None = None  # a hit waiting for a name
        self.write_name: str | None = None
        self.write_key: str | None = None
        self.pending: list[dict[str, Any]] = []  # events to emit after this step's compile


def _compiled_unrecorded(step: _Step) -> bool:
    """Whether a step ending now compiled a program that no event records yet.

    JAX reports the backend-compile duration even when the step loaded a program (a hit) or the lookup
    raised (xlakit's explain probe stops a compile that way, before JAX logs a miss).
    """
    if step.served or step.compile_recorded:
        return False
    if step.layer == "xlakit":
        if step.xlakit_compiled or step.xlakit_elsewhere:
            return False  # xlakit's handler recorded JAX's measured compile seconds itself
        return step.missed or not step.keyed  # e.g. a pass-through handler: a compile nobody recorded
    return True


def _jax_cache_enabled() -> bool:
    """Whether JAX's own persistent cache is configured (it may still fail to initialise)."""
    import jax
    from jax._src import compilation_cache

    enabled = getattr(compilation_cache, "is_persistent_cache_enabled", None)
    if enabled is not None:
        return bool(enabled())
    return (jax.config.jax_compilation_cache_dir is not None  # type: ignore[attr-defined]
            and jax.config.jax_enable_compilation_cache)  # type: ignore[attr-defined]


def _miss_reason() -> str:
    import jax

    folder = getattr(jax.config, "jax_compilation_cache_dir", None)
    return (f"no entry for this key in JAX's persistent cache at {folder} "
            "(JAX does not say whether it was absent or unreadable)")


def tracing_miss_name(text: str) -> str | None:
    """The function a "TRACING CACHE MISS" explanation is about (its "for f defined at ..." or "never seen
    function: f id=..." line), or None."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"\s+for (.+?)(?: defined at .*)?$", line)
        if m:
            return m.group(1)
        if line.strip() == "never seen function:" and i + 1 < len(lines):
            m = re.match(r"\s+(.+?) id=\d+", lines[i + 1])
            return m.group(1) if m else None
    return None
