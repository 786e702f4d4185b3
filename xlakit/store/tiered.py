"""A local store in front of a shared remote one: read-through, write-behind, failing open. No JAX.

:class:`TieredStore` is itself a :class:`~xlakit.store.base.Store`, so the cache feature uses it exactly like the local
folder. What it adds:

- **Reads** ask the local tier; on a local miss, the remote tier with one GET (not found = miss); a remote object that
  passes ``verify`` is written through into the local tier and returned. A read never writes to the remote tier.
- **Writes** go to the local tier first (the caller's result is the local one); then the blob is queued for a
  background, create-only upload. "Already exists" on the remote is success. Uploads are skipped when the program
  compiled faster than ``min_upload_compile_s`` or the blob is over ``max_upload_bytes``, and always in ``mode="ro"``.
- **Failing open:** every remote error becomes an event and a local-only answer. After ``max_failures`` consecutive
  remote errors the remote tier is switched off for the life of this object: one :class:`RemoteUnavailableWarning`, one
  ``remote_off`` event; the program never fails because of it.
- **One deadline per remote operation:** a read (waiting for the client's set-up, every request and every body byte) and
  an upload (the same) each end within ``timeout_s`` seconds, in the caller's thread as in the uploader's. A missed
  deadline switches the remote off at once (a server that does not answer in ``timeout_s`` is treated as dark), and so
  does a timeout of any layer below (botocore's own) or a failure that took over half the deadline. So a black-holed
  bucket costs a thread at most one ``timeout_s``, and interpreter exit at most ``drain_timeout_s`` more.
- **Trust:** ``verify(blob, partition, key) -> reason | None`` comes from the layer that knows the envelope (HMAC, key
  id, and that the header names this partition and key: a valid object copied under another key must be refused too); a
  refused remote object is never written into the local tier, is remembered for the process (no second GET) and reported
  by :meth:`TieredStore.refused`. The remote object itself is left alone: a reader with another secret must not delete
  an object its owners can use.
- **Exit:** pending uploads are drained at interpreter exit for at most ``drain_timeout_s`` seconds; what is left is
  abandoned (the uploader is a daemon thread) and reported as one ``upload_skip`` event.

Events are :class:`TierEvent` values given to ``on_event`` (from the caller's thread for reads, from the uploader thread
for uploads); an exception in ``on_event`` is swallowed so it cannot break a read.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from xlakit._sources import user_stacklevel

from ._deadline import _describe, _timed_out, _with_deadline
from .base import ObjectRefused, ObjectStat, Store

__all__ = ["TieredStore", "TierEvent", "RemoteUnavailableWarning"]

EVENT_KINDS = ("remote_hit", "remote_miss", "remote_error", "remote_corrupt", "remote_off",
               "upload", "upload_skip", "upload_error")


_T = TypeVar("_T")


class RemoteUnavailableWarning(RuntimeWarning):
    """The remote tier failed too often and was switched off for this process (local caching continues)."""


@dataclass(frozen=True)
class TierEvent:
    """What the tiered store did. kind: one of ``EVENT_KINDS``; seconds: wall time of the remote call (s);
    nbytes: bytes moved (None when nothing moved); created: for ``upload``, whether this call created the object
    (False: it already existed, which is success); reason: why, for misses, errors, skips and refusals."""

    kind: str
    partition: str
    key: str
    seconds: float | None = None
    nbytes: int | None = None
    created: bool | None = None
    reason: str | None = None


def _register_exit_hook(hook: Callable[[], None]) -> None:
    """Run ``hook`` at interpreter exit *before* thread pools refuse work.

    Plain ``atexit`` runs too late: by then ``concurrent.futures`` has shut its executors down, and the HTTP
    stacks under fsspec (DNS lookups in asyncio's default executor) fail every upload with "cannot schedule
    new futures after shutdown". ``threading._register_atexit`` hooks run in reverse order of registration,
    so a hook registered after ``concurrent.futures.thread`` is imported runs before its shutdown hook."""
    import concurrent.futures.thread  # noqa: F401  (its exit hook must be registered before ours)

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(hook)
            return
    except RuntimeError:  # interpreter already shutting down
        return
    atexit.register(hook)


def _unregister_exit_hook(hook: Callable[[], None]) -> None:
    atexit.unregister(hook)
    hooks = getattr(threading, "_threading_atexits", None)
    if isinstance(hooks, list):
        try:
            hooks.remove(hook)
        except ValueError:
            pass


class TieredStore:
    """``local`` in front of ``remote`` (both :class:`~xlakit.store.base.Store`).

    Args:
      local: the machine's own store (the local folder, or a MemoryStore in tests).
      remote: the shared store (usually :class:`~xlakit.store.remote.RemoteStore`).
      mode: ``"rw"`` (read and upload) or ``"ro"`` (read only: no write request ever reaches the remote).
      verify: ``verify(blob, partition, key) -> None`` if the remote blob may be used as that entry, else a
        reason string; an exception counts as a refusal. None accepts every blob (only for tests: the cache layer
        always passes one).
      on_event: called with each :class:`TierEvent`.
      max_failures: consecutive remote errors (reads and uploads together) that switch the remote off.
      min_upload_compile_s: blobs whose program compiled in fewer seconds are not uploaded (None: unknown, uploaded).
      max_upload_bytes: blobs over this many bytes are not uploaded.
      drain_timeout_s: the most seconds interpreter exit waits for pending uploads.
      max_pending: uploads queued at once; more are skipped (reported), so memory stays bounded.
      timeout_s: the deadline of one remote operation in seconds (read or upload, the wait for the client's
        set-up included); missing it switches the remote off. None: the backend's own timeouts only.
      reader: ``reader(partition, key, max_bytes) -> bytes | None`` reads one remote object (default
        ``remote.get``); the cache layer passes one that proves the header before asking for the payload
        (:func:`xlakit.store.remote.read_object`).
      probe_on_start: while setting the remote client up in the background, also send one GET of a name no
        entry has (see ``RemoteStore.connect``), so the first real read does not pay for opening the connection.

    Raises:
      ValueError: an unknown mode, a bound out of range (a count < 1, negative, NaN or infinite seconds).
        TypeError: a count or a number of seconds that is not a number (a string included).
    """

    def __init__(self, local: Store, remote: Store, *, mode: str = "rw",
                 verify: Callable[[bytes, str, str], str | None] | None = None,
                 on_event: Callable[[TierEvent], None] | None = None, max_failures: int = 3,
                 min_upload_compile_s: float = 0.0, max_upload_bytes: int = 1 << 30,
                 drain_timeout_s: float = 10.0, max_pending: int = 256, timeout_s: float | None = 30.0,
                 probe_on_start: bool = False, reader: Callable[[str, str, int], bytes | None] | None = None) -> None:
        from xlakit._units import check_int, check_seconds

        if mode not in ("rw", "ro"):
            raise ValueError(f"remote mode {mode!r} is not 'rw' or 'ro'")
        # each by name: '3' raised "'<' not supported", NaN seconds passed every comparison
        check_int(max_failures, "max_failures", minimum=1, what="number of errors")
        check_int(max_pending, "max_pending", minimum=1, what="number of uploads")
        check_int(max_upload_bytes, "max_upload_bytes")
        min_upload_compile_s = check_seconds(min_upload_compile_s, "min_upload_compile_s")
        drain_timeout_s = check_seconds(drain_timeout_s, "drain_timeout_s")
        if timeout_s is not None:
            timeout_s = check_seconds(timeout_s, "timeout_s", positive=True)
        self.local, self.remote, self.mode = local, remote, mode
        self.verify, self.on_event = verify, on_event
        self.max_failures, self.min_upload_compile_s = max_failures, min_upload_compile_s
        self.max_upload_bytes, self.drain_timeout_s = max_upload_bytes, drain_timeout_s
        self.timeout_s, self.probe_on_start = timeout_s, probe_on_start
        self.reader = reader if reader is not None else remote.get
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._pending: set[tuple[str, str]] = set()
        self._idle = threading.Condition()
        self._lock = threading.Lock()
        self._failures = 0
        self._remote_on = True
        self._refused: dict[tuple[str, str], str] = {}
        self._worker: threading.Thread | None = None
        self._closed = False
        _register_exit_hook(self._at_exit)
        self._connecting: threading.Thread | None = None
        if callable(getattr(remote, "connect", None)):
            # The remote client's set-up (botocore: ~0.3 s) overlaps the program's tracing and lowering.
            self._connecting = threading.Thread(target=self._connect, name="xlakit-remote-connect", daemon=True)
            self._connecting.start()

    def __repr__(self) -> str:
        state = "on" if self._remote_on else "off"
        return f"TieredStore(local={self.local!r}, remote={self.remote!r}, mode={self.mode!r}, remote {state})"

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def remote_on(self) -> bool:
        """False once ``max_failures`` consecutive remote errors switched the remote tier off."""
        return self._remote_on

    def refused(self) -> dict[tuple[str, str], str]:
        """Remote objects refused in this process: ``{(partition, key): reason}``."""
        with self._lock:
            return dict(self._refused)

    def pending(self) -> int:
        """Uploads queued or in flight."""
        with self._idle:
            return len(self._pending)

    def _connect(self) -> None:
        try:
            if self.probe_on_start:
                self.remote.connect(probe=True)  # type: ignore[attr-defined]
            else:
                self.remote.connect()  # type: ignore[attr-defined]
        except Exception:
            pass  # the first real call reports the problem as an event

    def ready(self, timeout_s: float = 30.0) -> bool:
        """Wait (at most ``timeout_s``) for the background set-up of the remote client; True when it is done."""
        thread = self._connecting
        if thread is not None:
            thread.join(timeout_s)
            return not thread.is_alive()
        return True

    def _connected(self) -> None:
        self.ready(self.timeout_s or 30.0)  # bounded: a hung set-up must not hang a read

    def _bounded(self, call: Callable[[], _T]) -> _T:
        """``call()`` after the client's set-up, both within one ``timeout_s`` (DeadlineExceeded after it)."""
        def run() -> _T:
            self._connected()
            return call()

        return _with_deadline(run, self.timeout_s)

    def _emit(self, kind: str, partition: str, key: str, **fields) -> None:
        if self.on_event is not None:
            try:
                self.on_event(TierEvent(kind, partition, key, **fields))
            except Exception:  # a broken observer must not break a read or the uploader
                pass

    def _succeeded(self) -> None:
        with self._lock:
            self._failures = 0

    def _failed(self, partition: str, key: str, e: BaseException, seconds: float = 0.0) -> None:
        # A timeout at any layer, or a failure slower than half the deadline, is a dark server, not a hiccup:
        # waiting on it again would cost another deadline.
        dark = _timed_out(e) or (self.timeout_s is not None and seconds >= self.timeout_s / 2)
        with self._lock:
            self._failures += 1
            trip = self._remote_on and (self._failures >= self.max_failures or dark)
            if trip:
                self._remote_on = False
        if trip:
            what = ("no answer within the deadline" if dark else f"{self.max_failures} consecutive remote errors")
            reason = (f"{what}, the last: {_describe(e)}; the remote {self.remote!r} is off for this process, "
                      "local caching continues")
            warnings.warn(reason, RemoteUnavailableWarning, stacklevel=user_stacklevel())
            self._emit("remote_off", partition, key, reason=reason)

    # -- Store ------------------------------------------------------------------------------------------------
    def get(self, partition: str, key: str, max_bytes: int) -> bytes | None:
        """Local bytes, else verified remote bytes (then kept locally), else None. Raises what ``local`` raises.

        Remote errors never raise: they are events, and count towards switching the remote off."""
        blob = self.local.get(partition, key, max_bytes)
        if blob is not None or not self._remote_on:
            return blob
        with self._lock:
            if (partition, key) in self._refused:
                return None
        start = time.perf_counter()
        try:
            blob = self._bounded(lambda: self.reader(partition, key, max_bytes))
        except ObjectRefused as e:
            self._refuse(partition, key, e.reason)
            return None
        except Exception as e:  # network, auth, a backend's own exception types: fail open
            self._emit("remote_error", partition, key, seconds=time.perf_counter() - start, reason=_describe(e))
            self._failed(partition, key, e, time.perf_counter() - start)
            return None
        seconds = time.perf_counter() - start
        self._succeeded()
        if blob is None:
            self._emit("remote_miss", partition, key, seconds=seconds, reason="not in the remote store")
            return None
        reason = self._check(blob, partition, key)
        if reason is not None:
            self._refuse(partition, key, reason, nbytes=len(blob))
            return None
        try:
            self.local.put(partition, key, blob)
        except Exception as e:  # a full or read-only local folder still serves this read
            self._emit("remote_hit", partition, key, seconds=seconds, nbytes=len(blob),
                       reason=f"not kept locally: {_describe(e)}")
            return blob
        self._emit("remote_hit", partition, key, seconds=seconds, nbytes=len(blob))
        return blob

    def get_split(self, partition: str, key: str, max_bytes: int, *cuts: Any) -> tuple | None:
        """:meth:`get`, read in parts where the local tier can (``FolderStore.get_split``), else ``(object, None)``."""
        split = getattr(self.local, "get_split", None)
        found = split(partition, key, max_bytes, *cuts) if split is not None else None
        blob = self.get(partition, key, max_bytes) if found is None else None
        return found if found is not None else None if blob is None else (blob, None)

    def _check(self, blob: bytes, partition: str, key: str) -> str | None:
        if self.verify is None:
            return None
        try:
            return self.verify(blob, partition, key)
        except Exception as e:
            return f"verification failed: {_describe(e)}"

    def _refuse(self, partition: str, key: str, reason: str, nbytes: int | None = None) -> None:
        with self._lock:
            self._refused[(partition, key)] = reason
        self._emit("remote_corrupt", partition, key, nbytes=nbytes, reason=reason)

    def put(self, partition: str, key: str, blob: bytes, *, compile_s: float | None = None, sync: bool = False) -> bool:
        """Store locally (the result is the local ``put``'s), then upload: queued in the background, or in this
        thread with ``sync=True`` (a coordination claimant must upload before it tells the waiters).

        compile_s: seconds the program took to compile, for the upload threshold (None: unknown, uploaded).
        Raises what ``local.put`` raises; upload problems are events only."""
        try:
            created = self.local.put(partition, key, blob)
        except OSError:  # a full or read-only local folder: the fleet still gets the program
            self._schedule(partition, key, bytes(blob), compile_s, sync)
            raise
        self._schedule(partition, key, bytes(blob), compile_s, sync)
        return created

    def upload(self, partition: str, key: str, blob: bytes, *, compile_s: float | None = None,
               sync: bool = False) -> None:
        """Upload a blob already in the local tier (a store that publishes locally on its own, then calls this):
        the same thresholds, modes and events as :meth:`put`'s upload. Never raises for remote problems."""
        self._schedule(partition, key, bytes(blob), compile_s, sync)

    def quarantine_object(self, partition: str, key: str, reason: str):
        """Quarantine the *local* copy (the entry layer's reject hook); remote objects are never touched by a
        reader. Falls back to deleting the local copy when the local tier has no quarantine."""
        quarantine = getattr(self.local, "quarantine_object", None)
        if quarantine is not None:
            return quarantine(partition, key, reason)
        self.local.delete(partition, key)
        return None

    def _schedule(self, partition: str, key: str, blob: bytes, compile_s: float | None, sync: bool = False) -> None:
        skip = None
        if self.mode == "ro":
            skip = "read-only remote (mode='ro')"
        elif not self._remote_on:
            skip = "remote switched off for this process"
        elif compile_s is not None and compile_s < self.min_upload_compile_s:
            skip = f"compiled in {compile_s:.3f} s, under the {self.min_upload_compile_s} s upload threshold"
        elif len(blob) > self.max_upload_bytes:
            skip = f"{len(blob)} bytes, over the {self.max_upload_bytes}-byte upload threshold"
        if skip is not None:
            self._emit("upload_skip", partition, key, nbytes=len(blob), reason=skip)
            return
        if sync:
            self._upload(partition, key, blob)
            return
        with self._idle:
            if (partition, key) in self._pending or self._closed:
                return
            try:
                self._queue.put_nowait((partition, key, blob))
            except queue.Full:
                self._emit("upload_skip", partition, key, nbytes=len(blob), reason="upload queue full")
                return
            self._pending.add((partition, key))
            if self._worker is None:
                self._worker = threading.Thread(target=self._upload_loop, name="xlakit-upload", daemon=True)
                self._worker.start()

    def _upload_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            partition, key, blob = item
            try:
                self._upload(partition, key, blob)
            finally:
                with self._idle:
                    self._pending.discard((partition, key))
                    self._idle.notify_all()

    def _upload(self, partition: str, key: str, blob: bytes) -> None:
        if not self._remote_on:
            self._emit("upload_skip", partition, key, nbytes=len(blob), reason="remote switched off for this process")
            return
        start = time.perf_counter()
        try:
            created = self._bounded(lambda: self.remote.put(partition, key, blob))
        except Exception as e:
            self._emit("upload_error", partition, key, seconds=time.perf_counter() - start, nbytes=len(blob),
                       reason=_describe(e))
            self._failed(partition, key, e, time.perf_counter() - start)
            return
        self._succeeded()
        self._emit("upload", partition, key, seconds=time.perf_counter() - start, nbytes=len(blob), created=created)

    def delete(self, partition: str, key: str) -> bool:
        """Remove the local copy only (remote objects are pruned by maintenance commands, never by a reader)."""
        return self.local.delete(partition, key)

    def stat(self, partition: str, key: str) -> ObjectStat | None:
        """The local copy's size and time."""
        return self.local.stat(partition, key)

    def list(self, partition: str | None = None) -> Iterator[ObjectStat]:
        """The local tier's objects."""
        return self.local.list(partition)

    # -- lifetime ---------------------------------------------------------------------------------------------
    def drain(self, timeout_s: float | None = None) -> int:
        """Wait until no upload is pending, at most ``timeout_s`` seconds (None: ``drain_timeout_s``).

        Returns the number of uploads still pending (0 when all finished). Raises TypeError / ValueError for a
        ``timeout_s`` that is not a finite number of seconds >= 0 (inf overflowed the wait)."""
        from xlakit._units import check_seconds

        wait = self.drain_timeout_s if timeout_s is None else check_seconds(timeout_s, "timeout_s")
        deadline = time.monotonic() + wait
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            return len(self._pending)

    def close(self, timeout_s: float | None = None) -> int:
        """Drain (bounded), stop the uploader and forget the exit hook. Returns uploads abandoned."""
        left = self.drain(timeout_s)
        with self._idle:
            abandoned = sorted(self._pending)
            self._closed = True
        if left:
            self._emit("upload_skip", abandoned[0][0], abandoned[0][1],
                       reason=f"{left} upload(s) abandoned: not finished within the drain bound")
        if self._worker is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass  # the daemon thread ends with the process
        _unregister_exit_hook(self._at_exit)
        return left

    def _at_exit(self) -> None:
        if not self._closed:
            self.close()
