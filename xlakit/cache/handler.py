"""Answer JAX's compile hooks from one store: look a program up before XLA compiles it, store it after.

:class:`StoreHandler` is what :mod:`xlakit._jax.hooks` calls (``read`` before a compile, ``write`` after).
Transparent mode and :class:`~xlakit.cache.ExecutableCache` are both StoreHandlers. The policy lives here
(thresholds, which programs are stored, what a header holds); the JAX work is done by adapters
(:mod:`xlakit._jax.executables`, :mod:`xlakit._jax.environment`), and every store result goes through the one
:class:`~xlakit.cache.path.CachePath`, which returns a :class:`~xlakit.cache.decision.Decision`.

Payloads reach ``backend.deserialize_executable`` only after the envelope's HMAC checks pass (integrity and
authenticity) and the entry's recorded environment equals this one. Nothing here raises into the user's program.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Imported here, not on first use: the first warm hit of a process would pay for them (~1 ms each where no
# bytecode cache is written). None of them imports JAX.
from xlakit._jax import cache_signals, executables, keys
from xlakit._jax.environment import current_environment, expectations
from xlakit.cache import entry as _entry
from xlakit.cache.coordinated import CoordinatedCompiles
from xlakit.cache.decision import Decision
from xlakit.cache.folder import CacheFolder
from xlakit.cache.path import CachePath

__all__ = ["StoreHandler"]


@dataclasses.dataclass
class _Capture:
    """Decisions made on one thread while a block runs; with ``defer`` a write is kept, not published."""

    defer: bool
    decisions: list[Decision] = dataclasses.field(default_factory=list)
    pending: tuple[str, str, dict, bytes] | None = None  # (partition, key, header, xla payload)


class StoreHandler(CacheFolder):
    """Looks programs up in, and stores them to, one store; each outcome is a Decision and an event.

    Attributes:
      store: the directory store (``store.root`` is the cache folder).
      min_compile_time_s: programs that compiled faster than this (seconds) are not stored; each such
        program is recorded as a ``skip`` event naming the threshold. Default 0.0: store everything.
      log: the :class:`~xlakit.events.EventLog` events go to.
      io: the :class:`~xlakit.cache.path.CachePath` every lookup and write goes through.

    The folder methods (``entries``, ``stats``, ``verify``, ``prune``, ``clear``) come from
    :class:`~xlakit.cache.folder.CacheFolder`.
    """

    xlakit_cache = True  # what the memory functions' cache= option recognises (xlakit._jax.call_options)

    def __init__(self, store: Any, min_compile_time_s: float = 0.0, log: Any = None) -> None:
        if min_compile_time_s < 0:
            raise ValueError(f"min_compile_time_s must be >= 0 seconds, got {min_compile_time_s}")
        super().__init__(store=store, log=log)
        self.min_compile_time_s = float(min_compile_time_s)
        self.io = CachePath(self.store, self.log)
        self._local = threading.local()
        self.coordination = CoordinatedCompiles(self.store, self.io, self.log)
        self._described: tuple[Any, str, dict[str, Any], dict[str, Any]] | None = None

    @property
    def path(self) -> Path:
        """The cache folder."""
        return self.store.root

    # -- hooks called by JAX -------------------------------------------------------------------------
    def read(self, ctx: Any, compile_options: Any, backend: Any, executable_devices: Any,
             host_callbacks: Any = ()) -> tuple[Any, int | None]:
        """Answer JAX's ``_cache_read``: ``(executable, compile_seconds)`` on a hit, else ``(None, None)``."""
        partition = expect = None
        try:
            env = current_environment(backend.platform)  # memoized: the same object while nothing changed
            described = self._described
            if described is None or described[0] is not env:  # name, expectations and info once per environment
                described = self._described = (env, env.partition_name(), expectations(env), env.to_dict())
            _, partition, expect, info = described
            self.io.ensure_partition(partition, info)
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            self._keep(self.io.failed("load_error", partition, ctx.key, ctx.module_name,
                                      f"{type(exc).__name__}: {exc}"))
            return None, None

        def load(header, payload):
            # The key holds no device ids: the executable may have been compiled for other devices of the same
            # kind. Check its stored assignment against the caller's before XLA sees it (a wrong count aborts
            # the process); the caller's compile options carry the caller's assignment, so XLA places the
            # loaded program on the caller's devices.
            xla_bytes = _entry.xla_payload(header, payload)
            keys.check_loadable(xla_bytes, compile_options, executable_devices)
            loaded = executables.deserialize(backend, xla_bytes, executable_devices, compile_options, host_callbacks)
            _entry.keep_assignment(header, loaded)  # XLA's dump kept with the entry (TPU): peak() decodes it
            return loaded

        executable, decision = self.io.fetch(partition, ctx.key, name=ctx.module_name, load=load, expect=expect)
        if executable is None and decision.kind == "miss":
            # Missed in every tier: under jax.distributed one process compiles, the others wait for its entry.
            executable, decision = self.coordination.on_miss(partition, ctx.key, ctx.module_name, load, expect,
                                                             decision)
        self._keep(decision)
        if executable is None:
            return None, None
        # JAX's own value (whole seconds, truncated): JAX reports compile_time_saved_sec from it.
        return executable, cache_signals.stored_compile_s(decision.compile_s)

    def write(self, ctx: Any, compile_time_secs: float, backend: Any, executable: Any,
              host_callbacks: Any = ()) -> None:
        """Answer JAX's ``_cache_write``: store the executable, or record why not."""
        from xlakit._jax.signature import module_text

        name, key, partition = ctx.module_name, ctx.key, None
        claimed = False
        try:
            env = current_environment(backend.platform)
            partition = env.partition_name()
            self.io.compiled(partition, key, name, compile_time_secs)
            claimed = self.coordination.claimed(partition, key)
            reason, why = self._skip_reason(compile_time_secs, host_callbacks, claimed)
            if reason:
                cache_signals.not_written(name, why, threshold_s=self.min_compile_time_s, compile_s=compile_time_secs)
                self._keep(self.io.skip(partition, key, name, reason, compile_time_secs))
                return
            cache_signals.took_at_least(name, self.min_compile_time_s, compile_time_secs)
            try:
                payload = executables.serialize(executable)
            except Exception as exc:  # noqa: BLE001
                self._keep(self.io.skip(partition, key, name, f"XLA cannot serialize this executable: "
                                        f"{type(exc).__name__}: {exc}", compile_time_secs))
                return
            header = _entry.program_header(name=name, compile_s=compile_time_secs, environment=env.to_dict(),
                                           key_parts=ctx.parts(), memory=executables.memory_stats(executable),
                                           module_text=module_text(ctx.module),
                                           runtime=_entry.runtime_fields(executable, env, payload))
            header.update(_entry.assignment_fields(executable, header))
            cache_signals.writing(name, key)  # JAX's signals of a write, given where JAX gives them: before the put
            capture = self._capture_now()
            if capture is not None and capture.defer and not claimed:
                capture.pending = (partition, key, header, payload)  # published by the caller, with more in it
                return
            if claimed:  # the waiters load what is in the shared store once this returns
                decision = self.coordination.publish(partition, key, lambda: self.io.publish(partition, key, header,
                                                                                              payload))
                claimed = False
            else:
                decision = self.io.publish(partition, key, header, payload)
            self._keep(decision)
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            self._keep(self.io.failed("store_error", partition, key, name, f"{type(exc).__name__}: {exc}"))
        finally:
            if claimed and partition is not None:  # compiled but not stored: the waiters compile themselves now
                self.coordination.give_up(partition, key, "the claimant compiled it but did not store it")

    # -- decisions as values ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def capture(self, defer: bool = False) -> Iterator[_Capture]:
        """Collect the decisions this handler makes on this thread while the block runs.

        With ``defer=True`` a program to be stored is not published; it is left in ``capture.pending`` so the
        caller can publish one entry with more in it (the JAX-level executable).
        """
        stack = getattr(self._local, "captures", None)
        if stack is None:
            stack = self._local.captures = []
        capture = _Capture(defer)
        stack.append(capture)
        try:
            yield capture
        finally:
            stack.pop()

    def _capture_now(self) -> _Capture | None:
        stack = getattr(self._local, "captures", None)
        return stack[-1] if stack else None

    def _keep(self, decision: Decision) -> None:
        capture = self._capture_now()
        if capture is not None:
            capture.decisions.append(decision)

    # -- policy ----------------------------------------------------------------------------------------
    def _skip_reason(self, compile_time_secs: float, host_callbacks: Any,
                     claimed: bool = False) -> tuple[str | None, str]:
        """``(reason, which of JAX's own reasons it is)``; ``(None, "")`` when the program is to be stored."""
        index = executables.process_index()
        if index != 0 and not claimed:  # a coordination claimant stores for every process
            return f"only process 0 writes the cache (this is process {index})", "process"
        if host_callbacks:  # only passed by JAX <= 0.10, which cannot rebind callbacks on load
            return ("the program uses host callbacks (jax.debug.print, io_callback, pure_callback); "
                    "their Python functions cannot be serialized"), "callbacks"
        if compile_time_secs < self.min_compile_time_s:
            return (f"compiled in {compile_time_secs:.3f} s, under min_compile_time_s="
                    f"{self.min_compile_time_s:g} s"), "too_fast"
        return None, ""
