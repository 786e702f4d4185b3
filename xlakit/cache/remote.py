"""A cache folder in front of a shared bucket: :class:`SharedStore` and :func:`open_store`. No JAX here.

``xlakit.enable_cache(remote="s3://bucket/prefix")``, ``ExecutableCache(remote=...)`` and
``load_bundle(remote=...)`` all build their store with :func:`xlakit.cache.open_store`. Without a remote (no argument
and no ``XLAKIT_CACHE_REMOTE``) it is a plain :class:`~xlakit.store.LocalStore` and this module is not imported; with
one it is a :class:`SharedStore`:
the same local folder, whose raw reads go through a :class:`~xlakit.store.tiered.TieredStore` (local, then one
GET of ``<prefix>/v1/<partition>/<key>``, verified, then kept locally) and whose successful local writes are
uploaded in the background, create-only.

Trust: the remote object is checked by :func:`xlakit.store.remote.verify_object` (magic, key id, header MAC,
partition and key, length, full MAC) before a byte is decompressed or reaches XLA; then the entry layer opens it
again as it does every local entry. The HMAC secret stays on this machine (only its public 8-byte key id is in
each object). An object signed with another key is a ``remote_miss`` "signed with another key", left alone; a
modified one is a ``corrupt`` event (with one warning), never used, remembered for the process, and left in the
bucket for ``xlakit cache verify --remote URL --fix``.

Tier events become event-log events (``source="xlakit"``, ``folder`` = the remote URL): ``remote_hit``,
``remote_miss``, ``upload``, ``upload_error``; a refused object is ``corrupt``; a failing remote is
``load_error`` (and, after 3 in a row, one warning and the remote is off for the process).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from xlakit._sources import user_stacklevel
from xlakit.store import LocalStore

__all__ = ["SharedStore", "RefusedObjectWarning"]


class RefusedObjectWarning(RuntimeWarning):
    """An object in the shared store failed its integrity or authenticity check; it was not used."""


class SharedStore(LocalStore):
    """A :class:`~xlakit.store.LocalStore` whose misses are read from, and whose writes are uploaded to, a
    shared store.

    Args:
      root, max_bytes, secret: as for :class:`~xlakit.store.LocalStore`.
      remote: the URL (``s3://bucket/prefix``, ``gs://...``, ``file:///...``, ``memory://...``).
      mode: ``"rw"`` (read and upload) or ``"ro"`` (read only: no write request is ever sent).
      storage_options: fsspec storage options (``endpoint_url``, credentials...).
      log: the :class:`~xlakit.events.EventLog` tier events go to (default the process-wide log).
      min_upload_compile_s: programs that compiled in fewer seconds stay local (default 0: upload all).
      max_upload_bytes: larger entries stay local (bytes; default the largest entry a read accepts).
      fs: an fsspec filesystem to use (tests wrap one to count requests).
      timeout_s: the deadline of one remote operation, seconds (connect, requests and whole body of a read or
        an upload; default ``$XLAKIT_CACHE_REMOTE_TIMEOUT_S`` or 30). Missing it switches the remote off for the
        process, so a bucket that stops answering costs a thread at most one deadline (and exit at most the
        10 s upload drain).

    Attributes:
      tier: the :class:`~xlakit.store.tiered.TieredStore` (``drain()``, ``refused()``, ``remote_on``).
      remote: the :class:`~xlakit.store.remote.RemoteStore`.

    Raises:
      ValueError: a bad URL (an unsupported scheme: s3, gs, file and memory are) or mode. TypeError: ``remote``
        not a string or ``storage_options`` not a mapping. ImportError: the URL's fsspec package is missing (names
        the extra).
    """

    def __init__(self, root: Any = None, *, remote: str, mode: str = "rw", storage_options: dict | None = None,
                 max_bytes: int | None = None, secret: bytes | None = None, log: Any = None,
                 min_upload_compile_s: float = 0.0, max_upload_bytes: int | None = None, fs: Any = None,
                 timeout_s: float | None = None) -> None:
        from xlakit.store.remote import RemoteStore, read_object
        from xlakit.store.tiered import TieredStore

        super().__init__(root, max_bytes=max_bytes, secret=secret)
        if log is None:
            from xlakit import events

            log = events.log()
        self.log = log
        self.remote = RemoteStore(remote, storage_options=storage_options, fs=fs, timeout_s=timeout_s)
        self.remote_url = self.remote.url
        self.mode = mode
        self._sync = threading.local()
        self._warned = False
        self._upload_warned = False
        self.tier = TieredStore(self.objects, self.remote, mode=mode, verify=self._verify, on_event=self._on_event,
                                min_upload_compile_s=min_upload_compile_s,
                                max_upload_bytes=max_upload_bytes or self.layer.max_entry_bytes, probe_on_start=True,
                                timeout_s=self.remote.timeout_s,
                                reader=lambda p, k, n: read_object(self.remote, p, k, n, self.secret))
        self.layer.store = self.tier  # every entry read now asks the tier: local folder, then the bucket

    def __repr__(self) -> str:
        return f"SharedStore({str(self.root)!r}, remote={self.remote_url!r}, mode={self.mode!r})"

    # -- trust -----------------------------------------------------------------------------------------
    def _verify(self, blob: bytes, partition: str, key: str) -> str | None:
        from xlakit.store.remote import verify_object

        return verify_object(blob, partition, key, self.secret)

    def remote_reason(self, partition: str, key: str) -> str | None:
        """Why the shared object for this entry was not used in this process (another key, modified), or None."""
        reason = self.tier.refused().get((partition, key))
        if reason is None:
            return None
        if reason.startswith("foreign: "):
            return reason.removeprefix("foreign: ") + f"; the object at {self.remote_url} is left for its owners"
        return f"the object at {self.remote_url} was refused ({reason}); not used in this process"

    # -- writing ---------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def sync_uploads(self) -> Iterator[None]:
        """Within the block, :meth:`put` uploads in the calling thread before returning (a coordination claimant
        must have the object in the bucket before it tells the waiters)."""
        before = getattr(self._sync, "on", False)
        self._sync.on = True
        try:
            yield
        finally:
            self._sync.on = before

    def put(self, partition: str, key: str, header: dict, raw_payload: bytes):
        """:meth:`LocalStore.put <xlakit.store.LocalStore.put>`, then (when stored) an upload of the sealed entry
        as written (background unless inside :meth:`sync_uploads`; never in ``ro`` mode)."""
        result = super().put(partition, key, header, raw_payload)
        if result.stored and self.mode == "rw":
            try:
                blob = self.objects.get(partition, key, self.layer.max_entry_bytes)
            except OSError:
                blob = None
            if blob is not None:
                compile_s = header.get("compile_s")
                compile_s = float(compile_s) if isinstance(compile_s, (int, float)) else None
                self.tier.upload(partition, key, blob, compile_s=compile_s, sync=getattr(self._sync, "on", False))
        return result

    def close(self, timeout_s: float | None = None) -> int:
        """Wait (bounded) for pending uploads and stop the uploader; returns uploads abandoned."""
        return self.tier.close(timeout_s)

    # -- events ----------------------------------------------------------------------------------------
    def _on_event(self, ev: Any) -> None:
        kind, reason = ev.kind, ev.reason
        head, sep, tail = (ev.key or "").rpartition("-")
        name = head if sep and len(tail) == 64 else None  # keys are "<module name>-<sha256 hex>"
        fields: dict[str, Any] = {"name": name, "key": ev.key, "partition": ev.partition, "duration_s": ev.seconds,
                                  "bytes": ev.nbytes, "source": "xlakit", "folder": self.remote_url}
        if kind == "remote_corrupt":
            if reason and reason.startswith("foreign: "):
                kind, reason = "remote_miss", self.remote_reason(ev.partition, ev.key) or reason
            else:
                kind = "corrupt"
                reason = f"remote object refused, not used and left in the bucket: {reason}"
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"xlakit refused an object in {self.remote_url} ({ev.key}): {ev.reason}. It was "
                                  "not used; `xlakit cache verify --remote URL` lists such objects.",
                                  RefusedObjectWarning, stacklevel=user_stacklevel())
        elif kind == "upload":
            held = None if ev.created else self.tier.refused().get((ev.partition, ev.key))
            if held is not None:  # the name is taken by the object this process refused: it can never be shared
                kind = "upload_error"
                reason = (f"not uploaded: the name is held by an object this process refused ({held}); every "
                          f"process compiles this program until `xlakit cache verify --remote {self.remote_url} --fix` "
                          "removes it")
            else:
                reason = None if ev.created else "already existed (another process uploaded it first)"
        elif kind in ("remote_error", "remote_off"):
            kind, reason = "load_error", f"remote {self.remote_url}: {reason}"
        elif kind == "upload_skip":
            if not (reason or "").startswith(tuple("0123456789")):  # thresholds and ro mode are not failures
                return
            kind = "upload_error"  # uploads abandoned at exit
        # The bucket refused the write (not there, credentials refused, a name held by a refused object): said
        # once, then events. An outage is not: three errors in a row turn the remote off with a warning of its own.
        refused = (reason or "").startswith(("PermissionError", "FileNotFoundError", "not uploaded: the name is held"))
        if kind == "upload_error" and refused and not self._upload_warned:
            self._upload_warned = True
            why = (reason or "?").rstrip(".")
            warnings.warn(f"xlakit could not upload a program to {self.remote_url}: {why}. Programs compiled here "
                          "still run and are kept in the local folder; other machines compile them again. Each "
                          "failure is an 'upload_error' event; this is the only warning.", RuntimeWarning,
                          stacklevel=user_stacklevel())
        self.log.emit(kind, reason=reason, **fields)
