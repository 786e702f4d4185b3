"""One compile per program across the processes of a ``jax.distributed`` job: :class:`CoordinatedCompiles`.

JAX's hooks split a compile in two calls (``read`` before XLA compiles, ``write`` after), so the protocol of
:class:`xlakit._jax.coordinate.Coordinator` is used in its two halves:

* ``read`` missed the local folder and the shared store: :meth:`CoordinatedCompiles.on_miss` claims the key in
  the distributed runtime's key-value store (create-only). The first process to claim returns the miss, so JAX
  compiles; the others wait (at most ``wait_s`` seconds) for the claimant's pointer, then load the entry from
  the store (a ``wait`` event, then the usual ``hit``). On a timeout, or when the claimant reports that it could
  not store the program, they compile themselves (a ``wait`` event with the reason).
* ``write`` of a claimed key: :meth:`publish` stores the entry, uploads it *before returning* (a
  :class:`~xlakit.cache.remote.SharedStore`), then publishes the pointer (a ``claim`` event with the seconds
  from the claim to the pointer). A claimant that does not store the program tells the waiters at once
  (:meth:`give_up`), so no one waits for nothing.

Only small pointers (``<partition>/<key>``) go into the key-value store, never executables. The key is JAX's
cache key as xlakit's hooks see it (``ctx.key``): coordination saves compiles only when that key is the same
in every process — when it is not (JAX's own key contains device ids under ``jax.distributed``), every process
claims its own key and compiles, as without coordination. A claimant that dies before publishing leaves the
others waiting ``wait_s`` seconds, then they compile.

Coordination needs a shared store (``remote=``; for a folder shared over NFS use ``remote="file:///nfs/path"``):
with only per-process local folders a waiter could not load what the claimant stored, so nothing is claimed.
Without ``jax.distributed`` nothing here does anything either: each process may compile a program, and with a shared
store the first upload wins (the others' uploads are told "already exists", which is success).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CoordinatedCompiles", "ENV_WAIT_S"]

#: Seconds a process waits for another's compile before compiling itself (default 120).
ENV_WAIT_S = "XLAKIT_CACHE_WAIT_S"


class CoordinatedCompiles:
    """Claims and waits for one handler (see the module docstring).

    Args:
      store: the handler's store (``get(partition, key, expect=)``; ``sync_uploads()`` when it has a remote).
      io: the handler's :class:`~xlakit.cache.path.CachePath` (records the hit after a wait).
      log: the event log (``claim`` and ``wait`` events).
      wait_s: most seconds to wait for another process; default ``$XLAKIT_CACHE_WAIT_S`` or 120.
      coordinator: a :class:`~xlakit._jax.coordinate.Coordinator` to use (tests); default the one over the
        initialized ``jax.distributed`` runtime, looked up on the first miss (None: no coordination).
    """

    def __init__(self, store: Any, io: Any, log: Any, *, wait_s: float | None = None, coordinator: Any = None,
                 poll_s: float = 0.2, store_poll_s: float = 1.0) -> None:
        from xlakit._units import finite_seconds

        if wait_s is None:  # "1e999" or "nan" would wait for ever or never: refused, naming the variable
            wait_s = finite_seconds(os.environ.get(ENV_WAIT_S) or 120.0, ENV_WAIT_S, positive=False)
        else:
            wait_s = finite_seconds(wait_s, "wait_s", positive=False)
        self.store, self.io, self.log = store, io, log
        self.wait_s, self.poll_s, self.store_poll_s = float(wait_s), poll_s, store_poll_s
        self._coordinator = coordinator
        self._looked = coordinator is not None
        # (partition, key) -> (perf_counter at claim, id of the claiming thread)
        self._claims: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._exit_hook = False

    def coordinator(self) -> Any:
        """The coordinator in use, or None without ``jax.distributed`` (looked up once, after initialization)."""
        if not self._looked:
            if getattr(self.store, "sync_uploads", None) is None:
                return None  # no shared store: a waiter could not load the claimant's program, only wait for it
            from xlakit._jax.coordinate import Coordinator, distributed_client

            if distributed_client() is None:
                return None  # looked up again on the next miss: jax.distributed may be initialized later
            self._coordinator = Coordinator.from_jax(wait_s=self.wait_s, poll_s=self.poll_s,
                                                     store_poll_s=self.store_poll_s)
            self._looked = True
        return self._coordinator

    # -- read side -------------------------------------------------------------------------------------
    def on_miss(self, partition: str, key: str, name: str | None, load: Callable, expect: Any,
                miss: Any) -> tuple[Any, Any]:
        """After a miss in every tier: ``(program, decision)`` — the other process's program and its ``hit``,
        or ``(None, miss)`` when this process must compile (it claimed the key, or waiting did not help)."""
        coord = self.coordinator()
        if coord is None or not key:
            return None, miss
        self.release_abandoned(threading.get_ident())
        start = time.perf_counter()
        try:
            mine, owner = coord.claim(partition, key)
        except Exception as e:  # noqa: BLE001 - the coordination service failed: compile, uncoordinated
            self.log.emit("claim", name=name, key=key, partition=partition, source="xlakit",
                          reason=f"coordination failed, compiling uncoordinated: {type(e).__name__}: {e}"[:300])
            return None, miss
        if mine or owner == getattr(coord, "process_id", None):
            # An earlier claim of this process (its compile failed or was interrupted) is this process's to
            # honour: compile now, never wait on yourself.
            with self._lock:
                self._claims[(partition, key)] = (start, threading.get_ident())
                hook, self._exit_hook = not self._exit_hook, True
            if hook:
                import atexit

                atexit.register(self.release_all, "the claimant exited before storing it")
            return None, miss

        def present() -> bool | None:
            found = self.store.get(partition, key, expect=dict(expect or {}))  # local, then the shared store
            return True if found.status == "hit" else None

        try:
            arrived, pointer = coord.wait(partition, key, present)
        except Exception as e:  # noqa: BLE001
            arrived, pointer = None, f"failed:coordination failed: {type(e).__name__}: {e}"
        waited = time.perf_counter() - start
        if arrived:
            program, decision = self.io.fetch(partition, key, name=name, load=load, expect=expect)
            if program is not None:
                self.log.emit("wait", name=name, key=key, partition=partition, duration_s=waited,
                              bytes=decision.bytes, source="xlakit",
                              reason=None if owner is None else f"compiled by process {owner}")
                return program, decision
        if pointer is not None and pointer.startswith("failed:"):
            why = f"process {owner} did not store it ({pointer.removeprefix('failed:')}); compiling here"
        elif pointer is None:
            why = f"no program from process {owner} within {self.wait_s:g} s; compiling here"
        else:
            why = f"process {owner} published {pointer!r} but it could not be loaded here; compiling here"
        self.log.emit("wait", name=name, key=key, partition=partition, duration_s=waited, source="xlakit",
                      reason=why)
        return None, miss

    # -- write side ------------------------------------------------------------------------------------
    def claimed(self, partition: str, key: str) -> bool:
        """Whether this process claimed ``key`` and owes the others an entry or a ``give_up``."""
        with self._lock:
            return (partition, key) in self._claims

    def publish(self, partition: str, key: str, store: Callable[[], Any]) -> Any:
        """Run ``store()`` (publishes the entry; a shared store uploads it before returning), then tell the
        waiters where it is. Returns ``store()``'s decision."""
        with self._lock:
            claim = self._claims.pop((partition, key), None)
        start = None if claim is None else claim[0]
        sync = getattr(self.store, "sync_uploads", None)
        coord = self._coordinator
        try:
            if sync is not None:
                with sync():
                    decision = store()
            else:
                decision = store()
        except BaseException as e:  # Ctrl-C or a failure while storing: the waiters must not wait for nothing
            try:
                coord.publish(partition, key, f"failed:{type(e).__name__} while storing"[:1000])
            except Exception:  # noqa: BLE001
                pass
            raise
        ok = getattr(decision, "kind", None) == "store"
        pointer = f"{partition}/{key}" if ok else f"failed:{getattr(decision, 'reason', None) or 'not stored'}"
        try:
            coord.publish(partition, key, pointer[:1000])
        except Exception as e:  # noqa: BLE001 - waiters then time out and compile: slower, never wrong
            pointer = f"not published ({type(e).__name__}: {e})"
        self.log.emit("claim", name=getattr(decision, "name", None), key=key, partition=partition,
                      duration_s=None if start is None else time.perf_counter() - start,
                      bytes=getattr(decision, "bytes", None), source="xlakit",
                      reason=None if ok else f"compiled here; waiters told: {pointer}"[:300])
        return decision

    def give_up(self, partition: str, key: str, reason: str) -> None:
        """This process claimed ``key`` but will not store it: the waiters compile themselves, now."""
        with self._lock:
            claim = self._claims.pop((partition, key), None)
        if claim is None or self._coordinator is None:
            return
        start = claim[0]
        try:
            self._coordinator.publish(partition, key, f"failed:{reason}"[:1000])
        except Exception:  # noqa: BLE001
            pass
        self.log.emit("claim", key=key, partition=partition, duration_s=time.perf_counter() - start,
                      source="xlakit", reason=f"compiled here, not stored: {reason}")

    def release_abandoned(self, thread_id: int) -> int:
        """Give up the claims made on thread ``thread_id`` whose write never came.

        JAX's compile path runs read, compile, write on one thread with no other read in between, so a claim
        still held by a thread that starts another lookup belongs to a compile that raised (a failed compile,
        a KeyboardInterrupt): its waiters are told at once instead of after ``wait_s``. Returns how many."""
        with self._lock:
            stale = [pk for pk, (_, tid) in self._claims.items() if tid == thread_id]
        for partition, key in stale:
            self.give_up(partition, key, "the claimant's compile failed or was interrupted")
        return len(stale)

    def release_all(self, reason: str) -> int:
        """Give up every claim this process still holds (at exit); returns how many."""
        with self._lock:
            held = list(self._claims)
        for partition, key in held:
            self.give_up(partition, key, reason)
        return len(held)
