"""The store side of a compile: look a program up before XLA compiles it, store it after.

:class:`StoreHandler` answers xlakit's hooks (:mod:`xlakit._jax.hooks`) for one
:class:`~xlakit.store.LocalStore`. Transparent mode and :class:`xlakit.ExecutableCache` are both
StoreHandlers. Payloads are XLA's own serialized executables (``LoadedExecutable.serialize()``), not
pickles; they reach ``backend.deserialize_executable`` only after the envelope's SHA-256 and HMAC checks
pass and the entry's recorded environment equals this one.

Nothing here raises into the user's program: every failure becomes an event and a normal compile.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

from xlakit import events as _events
from xlakit._jax.environment import Environment, current_environment
from xlakit._jax.hooks import CompileContext
from xlakit.store import LocalStore

__all__ = ["StoreHandler"]


class StoreHandler:
    """Looks programs up in, and stores them to, one store; records every outcome as an event.

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

    @property
    def path(self) -> Path:
        """The cache folder."""
        return self.store.root

    # -- hooks called by JAX -------------------------------------------------------------------------
    def read(self, ctx: CompileContext, compile_options: Any, backend: Any, executable_devices: Any,
             host_callbacks: Any = ()) -> tuple[Any, int | None]:
        """Answer JAX's ``_cache_read``: ``(executable, compile_seconds)`` on a hit, else ``(None, None)``."""
        module_name, cache_key = ctx.module_name, ctx.key
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

    def write(self, ctx: CompileContext, compile_time_secs: float, backend: Any, executable: Any,
              host_callbacks: Any = ()) -> None:
        """Answer JAX's ``_cache_write``: store the executable, or record why not."""
        module_name, cache_key = ctx.module_name, ctx.key
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
                "key_parts": ctx.parts(),
                "memory": _memory_stats(executable),
                **self._extra_header(ctx),
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

    def _extra_header(self, ctx: CompileContext) -> dict[str, Any]:
        """More header fields for an entry about to be stored (ExecutableCache adds explain data)."""
        return {}

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
