"""Entries over any :class:`~xlakit.store.base.Store`: seal and open envelopes, check expectations, reject.

This is the one place that decides what an object's bytes mean. A tier (local folder, memory, fsspec)
only moves bytes; :class:`EntryLayer` turns them into :class:`GetResult` values:

=================  ==========================================================  ===================
status             meaning                                                     what happens to it
=================  ==========================================================  ===================
hit                authenticated, intact, for this key, partition, environment  used
absent             no object                                                   -
corrupt            damaged, or refused by the tier (link, FIFO, too large)     quarantined
unauthenticated    a MAC mismatch under this process's key id (modified)       quarantined
mismatch           another partition or environment than expected              quarantined
foreign            signed with another key (another user sharing the folder)   left in place
stale              written by another xlakit format version                    left in place
error              the medium failed (OSError) or no secret is available       left in place
=================  ==========================================================  ===================

"Quarantined" is the tier's ``quarantine(partition, key, reason)`` when it has one, else ``delete``.
Nothing here raises for a bad object; only ValueError for an invalid partition or empty key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import ObjectRefused, Store
from .envelope import EntryError, head_length, open_envelope, payload_cut, seal
from .split import SplitPayload

__all__ = ["MAX_ENTRY_BYTES", "EntryInfo", "EntryLayer", "GetResult", "PutResult", "check_expect", "entry_info"]

MAX_ENTRY_BYTES = 2 * 1024**3  # largest envelope a read accepts (bytes); larger objects are refused unread
_MAX_CREATED = 1e11  # seconds since 1970 (year ~5100): later "created" times are shown as unknown
_MAX_SECONDS = 1e9


@dataclass(frozen=True)
class EntryInfo:
    """One row of a listing, from the entry's header, authenticated by its header MAC.

    size_bytes: on-disk bytes of the .xlk; created, last_used: unix seconds; compile_s: seconds.
    Entries whose header cannot be authenticated or parsed have name None and header {"error": reason};
    nothing in such a header is shown or trusted.
    """

    partition: str
    key: str
    path: Path
    name: str | None
    size_bytes: int
    created: float | None
    last_used: float
    compile_s: float | None
    header: dict


@dataclass(frozen=True)
class PutResult:
    """Outcome of a put. size_bytes: envelope bytes; reason: why not stored; header: what was sealed."""

    stored: bool
    path: Path | None
    size_bytes: int
    evicted: tuple[EntryInfo, ...]
    reason: str | None
    header: dict | None = None


@dataclass(frozen=True)
class GetResult:
    """Outcome of a get.

    status: "hit" | "absent" | "corrupt" | "unauthenticated" | "mismatch" | "foreign" | "stale" | "error"
    (table in :mod:`xlakit.store.entries`). payload (decompressed bytes, or a
    :class:`~xlakit.store.split.SplitPayload` for an entry sealed with ``payload_split``) is set only on a hit.
    """

    status: str
    header: dict | None
    payload: bytes | SplitPayload | None
    reason: str | None
    path: Path | None
    quarantined_to: Path | None
    left_why: str | None = None  # why a rejected object stayed where it was (read-only folder, vanished...)
    note_problem: str | None = None  # moved, but its reason note could not be written (why)

    @property
    def hit(self) -> bool:
        return self.status == "hit"

    @property
    def disposition(self) -> str:
        """What happened to a rejected object, for messages: ``"moved to <path>"`` (followed by "without its reason
        note, which could not be written (<why>)" when the quarantine was too full for it) or
        ``"left in place: <why>"`` (a read-only cache, an object that changed or vanished, a tier that
        deletes instead: ``"deleted"``)."""
        if self.quarantined_to is not None:
            missing = f" without its reason note, which could not be written ({self.note_problem})" \
                if self.note_problem else ""
            return f"moved to {self.quarantined_to}{missing}"
        return f"left in place: {self.left_why or 'nothing was moved'}"


def _reason(e: BaseException) -> str:
    return f"OSError: {e}" if isinstance(e, OSError) else f"{type(e).__name__}: {e}"


def _number(value: Any, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and low <= value < high else None


def entry_info(partition: str, stem: str, path: Path, size_bytes: int, last_used: float, header: dict) -> EntryInfo:
    """An :class:`EntryInfo` from a parsed header (or ``{"error": ...}``); numbers outside plausible ranges
    (negative, non-finite, a "created" after year 5000) become None."""
    key, name = header.get("key"), header.get("name")
    last = _number(last_used, -_MAX_CREATED, _MAX_CREATED)
    return EntryInfo(
        partition=partition,
        key=key if isinstance(key, str) and key else stem,
        path=path,
        name=name if isinstance(name, str) and "error" not in header else None,
        size_bytes=int(size_bytes),
        created=_number(header.get("created"), 0.0, _MAX_CREATED),
        last_used=last if last is not None else 0.0,
        compile_s=_number(header.get("compile_s"), 0.0, _MAX_SECONDS),
        header=header,
    )


def check_expect(header: dict, partition: str, expect: dict | None) -> str | None:
    """Why an authenticated header does not fit ``partition`` and ``expect`` (field -> value, looked up in
    header["environment"] first, then the header), or None if it fits."""
    if header.get("partition") != partition:
        return f"entry belongs to partition {header.get('partition')!r}, not {partition!r}"
    env = header.get("environment")
    env = env if isinstance(env, dict) else {}
    for field, want in (expect or {}).items():
        got = env[field] if field in env else header.get(field)
        if got != want:
            return f"{field}: entry says {got!r}, this environment is {want!r}"
    return None


class EntryLayer:
    """Sealed entries in any :class:`Store`.

    Args:
      store: the tier that moves bytes.
      secret: a callable returning the HMAC secret (called lazily; may raise SecretUnavailable, an OSError).
      max_entry_bytes: reads refuse larger objects unread (default :data:`MAX_ENTRY_BYTES`).
      path_of: ``(partition, key) -> Path | None`` for results (local tiers); default None.
    """

    def __init__(self, store: Store, secret: Callable[[], bytes], *, max_entry_bytes: int = MAX_ENTRY_BYTES,
                 path_of: Callable[[str, str], Path | None] | None = None) -> None:
        self.store = store
        self._secret = secret
        self.max_entry_bytes = max_entry_bytes
        self._path_of = path_of or (lambda partition, key: None)

    def get(self, partition: str, key: str, *, expect: dict | None = None) -> GetResult:
        """Read and fully verify one entry (statuses in the module table). Raises only ValueError."""
        path = self._path_of(partition, key)
        split = getattr(self.store, "get_split", None)  # a tier that reads the payload apart: no copy of it
        try:
            if split is not None:
                found = split(partition, key, self.max_entry_bytes, 20, head_length, self._payload_cut)
            else:
                blob = self.store.get(partition, key, self.max_entry_bytes)
                found = None if blob is None else (blob, None)
        except ObjectRefused as e:
            return self.reject(partition, key, path, "corrupt", e.reason, None)
        except (OSError, MemoryError) as e:
            return GetResult("error", None, None, _reason(e), path, None)
        if found is None:
            return GetResult("absent", None, None, None, path, None)
        try:
            header, payload = open_envelope(found[0], self._secret(), found[1])
        except EntryError as e:
            if e.kind in ("foreign", "stale"):
                return GetResult(e.kind, None, None, e.reason, path, None)
            return self.reject(partition, key, path, e.kind, e.reason, None)
        except (OSError, MemoryError) as e:  # SecretUnavailable
            return GetResult("error", None, None, _reason(e), path, None)
        if header.get("key") != key:
            return self.reject(partition, key, path, "corrupt", f"header names key {header.get('key')!r}", header)
        problem = check_expect(header, partition, expect)
        if problem is not None:
            return self.reject(partition, key, path, "mismatch", problem, header)
        return GetResult("hit", header, payload, None, path, None)

    def _payload_cut(self, head: bytes) -> int | None:
        """:func:`~xlakit.store.envelope.payload_cut` under this layer's secret (None when it is unavailable: the
        payload is then read as one object, and opening it reports the error)."""
        try:
            secret = self._secret()
        except OSError:
            return None
        return payload_cut(head, secret)

    def reject(self, partition: str, key: str, path: Path | None, status: str, reason: str,
               header: dict | None) -> GetResult:
        """Quarantine (or delete) the object and return the result saying so."""
        quarantine = getattr(self.store, "quarantine_object", None)
        moved, why, note = None, None, None
        try:
            if quarantine is not None:
                went = quarantine(partition, key, f"{status}: {reason}")
                # a Quarantined (the local folder's hook) or a plain path (another store's)
                moved, note = getattr(went, "path", went), getattr(went, "note_problem", None)
                if moved is None:
                    why = ("it could not be moved to the quarantine (a read-only or full folder, or the file "
                           "changed or vanished since it was read)")
            else:
                self.store.delete(partition, key)
                why = "deleted (this tier has no quarantine)"
        except OSError as e:
            why = f"it could not be moved: {e}"  # the reader still gets its miss; the next reader tries again
        return GetResult(status, header, None, reason, path, moved, why, note)

    def seal(self, partition: str, key: str, header: dict, raw_payload: bytes) -> tuple[bytes, dict]:
        """The envelope for one entry and the header it carries (with key, partition, created set).

        Raises ValueError/TypeError for a header that is not JSON, OSError (SecretUnavailable).
        """
        full = dict(header, key=key, partition=partition)
        full.setdefault("created", time.time())
        blob = seal(full, raw_payload, self._secret())
        from .envelope import read_header

        return blob, read_header(blob)

    def put(self, partition: str, key: str, header: dict, raw_payload: bytes) -> PutResult:
        """Seal and create one entry (create-only: an existing object is kept, reported as stored=False
        with reason "already exists"). Raises ValueError/TypeError for a bad key/partition/header."""
        path = self._path_of(partition, key)
        try:
            blob, sealed = self.seal(partition, key, header, raw_payload)
        except OSError as e:
            return PutResult(False, None, 0, (), _reason(e))
        try:
            created = self.store.put(partition, key, blob)
        except OSError as e:
            return PutResult(False, None, len(blob), (), _reason(e), sealed)
        if not created:
            return PutResult(False, path, len(blob), (), "already exists", sealed)
        return PutResult(True, path, len(blob), (), None, sealed)

    def verify(self, partition: str, key: str) -> str | None:
        """Open one entry fully (quarantining a bad one, leaving foreign/stale ones); None if it is good,
        else "<status>: <reason>". The key is checked against the header's own key."""
        found = self.get(partition, key)
        if found.status in ("hit", "absent"):
            return None
        return f"{found.status}: {found.reason}"
