"""Transparent mode: xlakit's store becomes the persistent compilation cache of every ``jax.jit``.

How it hooks in (private API, guarded by :func:`xlakit._jax.versions.check_transparent_hooks`):

* ``jax._src.compiler._cache_read`` and ``_cache_write`` are replaced. JAX calls them around every backend
  compile once a cache key exists, passing the module name, the key, the compile options, the backend and
  — on write — the loaded executable and the *measured* compile seconds (a float). Owning both gives names
  on every event, exact compile times, and the decision to store programs JAX would silently drop.
* ``jax_enable_compilation_cache`` is set True so JAX computes keys; ``jax_compilation_cache_dir`` is set
  to None so that no folder path reaches the compile options (JAX 0.10 puts the autotune sub-cache path
  there, which makes every key depend on where the cache lives — case C2). JAX's own directory cache is
  therefore never initialised while xlakit is enabled.
* The per-part hashes of JAX's key (module, jaxlib version, backend, XLA flags, compile options,
  accelerator config, compression, custom hook) are captured from the ``jax._src.cache_key`` DEBUG records
  through a logger filter that swallows those records, and stored in each entry for explaining misses.

Payloads here are XLA's own serialized executables (``LoadedExecutable.serialize()``), not pickles; they
reach ``backend.deserialize_executable`` only after the envelope's SHA-256 and HMAC checks pass and the
entry's recorded environment equals this one.

Nothing here raises into the user's program: every failure becomes an event and a normal compile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from xlakit import events as _events
from xlakit._jax import versions
from xlakit._jax.environment import Environment, current_environment
from xlakit.store import LocalStore

__all__ = ["TransparentCache", "enable", "disable", "active"]

_KEY_LOGGER = "jax._src.cache_key"
_PART_PREFIX = "get_cache_key hash of serialized "


class _KeyPartCapture(logging.Filter):
    """Collects JAX's per-part cache-key hashes for the current thread and hides those DEBUG records."""

    def __init__(self, passthrough_level: int) -> None:
        super().__init__()
        self.passthrough_level = passthrough_level
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "get_cache_key hash of serialized %s: %s" and len(record.args or ()) == 2:
            part, digest = record.args  # type: ignore[misc]
            parts = getattr(self.local, "parts", None)
            if parts is None or part == "computation":  # a new key starts with the computation
                parts = self.local.parts = {}
            parts[str(part)] = str(digest)
        # Records below the level the user had configured were never meant to be shown.
        return record.levelno >= self.passthrough_level

    def take(self) -> dict[str, str]:
        parts = getattr(self.local, "parts", None) or {}
        self.local.parts = None
        return parts


class TransparentCache:
    """The installed transparent cache: a :class:`~xlakit.store.LocalStore` plus JAX hooks.

    Use :func:`xlakit.enable_cache` to create one; attributes are read-only in spirit.

    Attributes:
      store: the directory store (``store.root`` is the cache folder).
      min_compile_time_s: programs that compiled faster than this (seconds) are not stored; each such
        program is recorded as a ``skip`` event naming the threshold. Default 0.0: store everything.
      log: the :class:`~xlakit.events.EventLog` events go to.
    """

    def __init__(self, store: LocalStore, min_compile_time_s: float = 0.0,
                 log: _events.EventLog | None = None) -> None:
        if min_compile_time_s < 0:
            raise ValueError(f"min_compile_time_s must be >= 0 seconds, got {min_compile_time_s}")
        self.store = store
        self.min_compile_time_s = float(min_compile_time_s)
        self.log = log or _events.log()
        self._warned: set[str] = set()
        self._partitions_written: set[str] = set()
        self._capture: _KeyPartCapture | None = None
        self._saved: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        """The cache folder."""
        return self.store.root

    # -- hooks called by JAX -------------------------------------------------------------------------
    def read(self, module_name: str, cache_key: str, compile_options: Any, backend: Any,
             executable_devices: Any, host_callbacks: Any = ()) -> tuple[Any, int | None]:
        """Replacement for ``jax._src.compiler._cache_read``: ``(executable, compile_seconds)`` or ``(None, None)``."""
        start = time.perf_counter()
        partition = None
        try:
            env = current_environment(backend.platform)
            partition = env.partition_name()
            self._ensure_partition(partition, env)
            found = self.store.get(partition, cache_key, expect=_expectations(env))
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            self._emit("load_error", module_name, cache_key, partition, reason=_describe(exc),
                       duration_s=time.perf_counter() - start)
            return None, None

        if found.status == "hit":
            try:
                if host_callbacks:  # JAX >= 0.11 rebinds this process's callbacks to the loaded program
                    executable = backend.deserialize_executable(found.payload, executable_devices,
                                                                compile_options, host_callbacks)
                else:
                    executable = backend.deserialize_executable(found.payload, executable_devices,
                                                                compile_options)
            except Exception as exc:  # noqa: BLE001
                # Integrity held but XLA refused the program: drop it so the rewrite can replace it.
                self.store.remove(partition, cache_key)
                self._emit("load_error", module_name, cache_key, partition,
                           reason=f"XLA could not load the entry: {_describe(exc)}",
                           duration_s=time.perf_counter() - start)
                return None, None
            load_s = time.perf_counter() - start
            compile_s = float(found.header.get("compile_s") or 0.0)
            self._emit("hit", module_name, cache_key, partition, duration_s=load_s,
                       bytes=found.header.get("payload_bytes"), saved_s=max(0.0, compile_s - load_s))
            return executable, int(math.ceil(compile_s))

        took = time.perf_counter() - start
        if found.status in ("corrupt", "unauthenticated"):
            self._emit("corrupt", module_name, cache_key, partition, duration_s=took,
                       reason=f"{found.reason}; moved to {found.quarantined_to}")
        elif found.status == "error":
            self._emit("load_error", module_name, cache_key, partition, duration_s=took, reason=found.reason)
            self._warn_once("read", f"xlakit could not read its cache at {self.store.root}: {found.reason}. "
                                    "Programs still run; they are compiled instead.")
        reason = found.reason if found.status == "mismatch" else _absent_reason(found.status, partition)
        self._emit("miss", module_name, cache_key, partition, duration_s=took, reason=reason)
        return None, None

    def write(self, cache_key: str, compile_time_secs: float, module_name: str, backend: Any,
              executable: Any, host_callbacks: Any = ()) -> None:
        """Replacement for ``jax._src.compiler._cache_write``: store the executable or record why not."""
        parts = self._capture.take() if self._capture else {}
        partition = None
        try:
            env = current_environment(backend.platform)
            partition = env.partition_name()
            self._emit("compile", module_name, cache_key, partition, duration_s=compile_time_secs)
            reason = self._skip_reason(compile_time_secs, host_callbacks)
            if reason:
                self._emit("skip", module_name, cache_key, partition, reason=reason)
                return
            try:
                payload = executable.serialize()
            except Exception as exc:  # noqa: BLE001
                self._emit("skip", module_name, cache_key, partition,
                           reason=f"XLA cannot serialize this executable: {_describe(exc)}")
                return
            header = {
                "name": module_name,
                "payload_kind": "pjrt-executable",
                "compile_s": float(compile_time_secs),
                "created": time.time(),
                "environment": env.to_dict(),
                "key_parts": parts,
                "memory": _memory_stats(executable),
            }
            start = time.perf_counter()
            result = self.store.put(partition, cache_key, header, payload)
            took = time.perf_counter() - start
            for gone in result.evicted:
                self._emit("evict", gone.name, gone.key, gone.partition, bytes=gone.size_bytes,
                           reason=f"least recently used; cap {self.store.max_bytes} bytes")
            if result.stored:
                self._emit("store", module_name, cache_key, partition, duration_s=took, bytes=result.size_bytes)
            else:
                self._emit("store_error", module_name, cache_key, partition, duration_s=took,
                           reason=result.reason)
                self._warn_once("write", f"xlakit could not write to its cache at {self.store.root}: "
                                         f"{result.reason}. Programs still run; they are compiled each time. "
                                         "Each failure is recorded as a 'store_error' event.")
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            self._emit("store_error", module_name, cache_key, partition, reason=_describe(exc))

    # -- helpers --------------------------------------------------------------------------------------
    def _skip_reason(self, compile_time_secs: float, host_callbacks: Any) -> str | None:
        from jax._src import distributed

        if distributed.global_state.process_id != 0:
            return f"only process 0 writes the cache (this is process {distributed.global_state.process_id})"
        if host_callbacks:  # only passed by JAX <= 0.10, which cannot rebind callbacks on load
            return ("the program uses host callbacks (jax.debug.print, io_callback, pure_callback); "
                    "their Python functions cannot be serialized")
        if compile_time_secs < self.min_compile_time_s:
            return (f"compiled in {compile_time_secs:.3f} s, under min_compile_time_s="
                    f"{self.min_compile_time_s:g} s")
        return None

    def _ensure_partition(self, partition: str, env: Environment) -> None:
        if partition not in self._partitions_written:
            self.store.write_partition_info(partition, env.to_dict())
            self._partitions_written.add(partition)

    def _emit(self, kind: str, name: str | None, key: str | None, partition: str | None, **fields: Any) -> None:
        self.log.emit(kind, name=name, key=key, partition=partition, source="xlakit", **fields)

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # -- install / uninstall ----------------------------------------------------------------------
    def install(self) -> None:
        """Hook into JAX. Raises :class:`~xlakit._jax.versions.UnsupportedJaxVersion` on an unsupported JAX."""
        versions.check_transparent_hooks()
        import jax
        from jax._src import compilation_cache, compiler

        key_logger = logging.getLogger(_KEY_LOGGER)
        self._saved = {
            "read": compiler._cache_read,
            "write": compiler._cache_write,
            "config": {name: getattr(jax.config, name) for name in _CONFIG},
            "logger_level": key_logger.level,
        }
        for name, value in _CONFIG.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()  # forget a memoised "cache unused" answer

        self._capture = _KeyPartCapture(passthrough_level=key_logger.getEffectiveLevel())
        key_logger.addFilter(self._capture)
        key_logger.setLevel(logging.DEBUG)
        compiler._cache_read = self.read
        compiler._cache_write = self.write

    def uninstall(self) -> None:
        """Restore JAX's functions, settings and logger exactly as :meth:`install` found them."""
        if self._saved is None:
            return
        import jax
        from jax._src import compilation_cache, compiler

        compiler._cache_read = self._saved["read"]
        compiler._cache_write = self._saved["write"]
        for name, value in self._saved["config"].items():
            jax.config.update(name, value)
        key_logger = logging.getLogger(_KEY_LOGGER)
        if self._capture is not None:
            key_logger.removeFilter(self._capture)
        key_logger.setLevel(self._saved["logger_level"])
        compilation_cache.reset_cache()
        self._saved = None
        self._capture = None


# JAX settings while transparent mode is on (restored by uninstall). The min compile time and entry size
# are zeroed because xlakit applies its own threshold in TransparentCache.write and records every skip.
_CONFIG = {
    "jax_enable_compilation_cache": True,
    "jax_compilation_cache_dir": None,
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}

_EXPECTED_FIELDS = ("jax_version", "jaxlib_version", "jaxlib_build", "platform", "platform_version", "machine",
                    "cpu_flags_hash")


def _expectations(env: Environment) -> dict[str, Any]:
    """Header fields an entry must carry to be loaded here (case C7: other builds are never loaded)."""
    values = env.to_dict()
    return {name: values[name] for name in _EXPECTED_FIELDS}


def _absent_reason(status: str, partition: str | None) -> str:
    if status == "absent":
        return f"no entry for this key in partition {partition}"
    return f"entry unusable ({status})"


def _memory_stats(executable: Any) -> dict[str, int] | None:
    """``LoadedExecutable.get_compiled_memory_stats()`` as a dict of byte counts, or None if unavailable."""
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
              "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
              "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes",
              "peak_memory_in_bytes")
    return {f: int(getattr(stats, f)) for f in fields if isinstance(getattr(stats, f, None), int)}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


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
