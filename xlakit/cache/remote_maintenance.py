"""Housekeeping of a shared bucket, without JAX: list, total, verify and prune the objects under a prefix.

What ``xlakit cache ls|stats|verify|prune --remote URL`` runs. Everything comes from one listing of
``<prefix>/v1/`` (sizes in bytes, creation times in unix seconds; objects are never rewritten, so creation time
is their age). Only :func:`verify` reads objects (one GET each); only ``verify(fix=True)`` and :func:`prune`
delete, and both refuse in ``ro`` mode.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["RemoteReport", "PruneResult", "open_remote", "survey", "listing", "totals", "verify", "prune",
           "parse_age", "TEMP_MAX_AGE_S", "NOT_XLAKIT"]

TEMP_MAX_AGE_S = 3600.0  # an upload temp this old belongs to a killed writer (uploads take seconds)
NOT_XLAKIT = "not-xlakit: not an xlakit object (left alone)"

_AGE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """Seconds from ``"30d"``, ``"12h"``, ``"90m"``, ``"2w"``, ``"3600"`` (plain number: seconds).

    Raises ValueError naming the accepted forms."""
    m = _AGE.match(text or "")
    if not m:
        raise ValueError(f"invalid age {text!r}: use a number with s, m, h, d or w, e.g. 30d or 12h")
    return float(m.group(1)) * _AGE_UNITS[m.group(2).lower()]


@dataclass(frozen=True)
class RemoteReport:
    """One object and what was found or done. reason: None when good; ``"<kind>: <why>"`` otherwise (kinds as
    in :mod:`xlakit.store.entries`); deleted: whether this run removed it."""

    partition: str
    key: str
    size_bytes: int
    created: float
    reason: str | None = None
    deleted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "key": self.key, "size_bytes": self.size_bytes,
                "created": self.created, "reason": self.reason, "deleted": self.deleted}


def open_remote(url: str, options: dict | None = None, fs: Any = None):
    """A :class:`~xlakit.store.remote.RemoteStore` for ``url`` (options default to
    ``$XLAKIT_CACHE_REMOTE_OPTIONS``). Raises ValueError / ImportError as RemoteStore does."""
    from xlakit.store.remote import RemoteStore, remote_settings

    found = remote_settings(url, None, options)
    assert found is not None
    return RemoteStore(found[0], storage_options=found[2], fs=fs)


def survey(remote, partition: str | None = None):
    """One listing (:meth:`xlakit.store.remote.RemoteStore.scan`). Raises NotADirectoryError when the prefix
    or its ``v1`` is a file or a link, OSError for the medium."""
    return remote.scan(partition)


def listing(remote, partition: str | None = None, scan=None) -> list:
    """Every entry object (:class:`~xlakit.store.ObjectStat`), oldest first. Raises OSError."""
    from xlakit.store.base import ObjectStat

    found = survey(remote, partition) if scan is None else scan
    return sorted((ObjectStat(*o) for o in found.objects), key=lambda o: (o.mtime, o.partition, o.key))


def _peek(remote, o) -> bytes | None:
    try:
        return remote.peek(o.partition, o.key, 16)
    except OSError:
        return None


def _is_envelope(head: bytes | None) -> bool:
    from xlakit.store.envelope import MAGIC

    return head is not None and bytes(head[:7]) == MAGIC[:7]


def totals(objects: list) -> dict[str, Any]:
    """Counts and bytes, overall and per partition, with the oldest and newest creation times."""
    parts: dict[str, dict[str, int]] = {}
    for o in objects:
        p = parts.setdefault(o.partition, {"count": 0, "bytes": 0})
        p["count"] += 1
        p["bytes"] += o.size_bytes
    return {"count": len(objects), "total_bytes": sum(o.size_bytes for o in objects),
            "oldest": min((o.mtime for o in objects), default=None),
            "newest": max((o.mtime for o in objects), default=None), "partitions": parts}


def _refuse_writes(mode: str, what: str) -> None:
    if mode != "rw":
        raise PermissionError(f"{what} deletes objects: not allowed with remote mode {mode!r}; use rw credentials "
                              "and --remote-mode rw (or XLAKIT_CACHE_REMOTE_MODE=rw)")


def verify(remote, secret: bytes, *, fix: bool = False, mode: str = "rw", partition: str | None = None,
           max_bytes: int | None = None, scan=None) -> list[RemoteReport]:
    """Read and check every object as a reader would (:func:`xlakit.store.remote.verify_object`: key id, header
    MAC, partition and key, length, full MAC; nothing is decompressed). With ``fix``, delete the bad ones;
    objects signed with another key or written by another format are reported and never deleted, and so is any
    file without xlakit's envelope magic (``NOT_XLAKIT``). Links, FIFOs and folders at object names (readers
    refuse them) are reported as bad; ``fix`` removes the name itself, never a link's target, a folder only
    when empty. ``scan``: a listing already made (:func:`survey`), so the caller's listing is not repeated.

    Raises:
      PermissionError: ``fix`` in ``ro`` mode. NotADirectoryError: the prefix or ``v1`` is a file or a link.
      OSError: listing failed (a failed read of one object is reported
        as that object's reason).
    """
    from xlakit.store.base import ObjectRefused
    from xlakit.store.entries import MAX_ENTRY_BYTES
    from xlakit.store.remote import verify_object

    if fix:
        _refuse_writes(mode, "verify --fix")
    limit = max_bytes or MAX_ENTRY_BYTES
    scan = survey(remote, partition) if scan is None else scan  # the caller's listing, when it has one
    out = []
    for part, key, what in scan.odd:  # readers refuse these: list them, and --fix removes the name itself
        odd_reason, odd_deleted = f"corrupt: not a regular file ({what})", False
        if fix:
            try:
                odd_deleted = remote.delete(part, key)
            except OSError as e:
                odd_reason = f"{odd_reason}: {e.strerror or e}"
        out.append(RemoteReport(part, key, 0, 0.0, odd_reason, odd_deleted))
    for o in listing(remote, partition, scan):
        blob, reason = None, None  # type: bytes | None, str | None
        try:
            blob = remote.get(o.partition, o.key, limit)
            if blob is None:
                reason = "absent: deleted while verifying"
            elif not _is_envelope(blob):
                reason = NOT_XLAKIT
            else:
                reason = verify_object(blob, o.partition, o.key, secret)
        except ObjectRefused as e:
            reason = f"corrupt: {e.reason}"
        except OSError as e:
            out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, f"error: {e}"))
            continue
        deleted = False
        if fix and reason is not None and not reason.startswith(SKIPPED_KINDS) and _is_envelope(
                blob if blob is not None else _peek(remote, o)):
            deleted = remote.delete(o.partition, o.key)
        out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, reason, deleted))
    return out


SKIPPED_KINDS = ("foreign:", "stale:", "absent:", "not-xlakit:")


@dataclass
class PruneResult:
    """What :func:`prune` did: ``deleted`` (oldest first), objects left because another key signed them
    (``other_key``: count, bytes), objects that are not xlakit's (``not_xlakit``: count), upload temps of
    killed writers removed (``temps_removed``) and temps still fresh (``temps_left``)."""

    deleted: list[RemoteReport]
    other_key: int = 0
    other_key_bytes: int = 0
    not_xlakit: int = 0
    temps_removed: int = 0
    temps_left: int = 0


def prune(remote, secret: bytes, *, older_than_s: float | None = None, max_bytes: int | None = None,
          mode: str = "rw", dry_run: bool = False, now: float | None = None, scan=None) -> PruneResult:
    """Delete this key's objects older than ``older_than_s`` seconds, then its oldest until at most
    ``max_bytes`` of its objects remain (:func:`xlakit.store.remote.plan_prune`, from one listing and one
    16-byte ranged read per object). Objects signed with another key (envelope key id, bytes 8:16) belong to
    another team and are never deleted or counted against the bound; objects without xlakit's envelope magic
    are not xlakit's and are left alone. Upload temps older than :data:`TEMP_MAX_AGE_S` are removed.

    Raises:
      ValueError: neither bound given. PermissionError: ``ro`` mode (unless ``dry_run``). OSError: listing.
    """
    from xlakit.store.envelope import key_id
    from xlakit.store.remote import plan_prune, temp_age

    if older_than_s is None and max_bytes is None:
        raise ValueError("prune needs --older-than AGE or --max-bytes N (or both)")
    if not dry_run:
        _refuse_writes(mode, "prune")
    now = time.time() if now is None else now
    ours_id = key_id(secret)
    scan = survey(remote) if scan is None else scan
    result = PruneResult([])
    ours = []
    for o in listing(remote, scan=scan):
        head = _peek(remote, o)
        if head is None:
            continue
        if not _is_envelope(head):
            result.not_xlakit += 1
        elif bytes(head[8:16]) != ours_id:
            result.other_key += 1
            result.other_key_bytes += o.size_bytes
        else:
            ours.append(o)
    doomed = plan_prune(ours, older_than_s=older_than_s, max_bytes=max_bytes, now=now)
    result.deleted = [RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, None,
                                   False if dry_run else remote.delete(o.partition, o.key)) for o in doomed]
    for part, name, _size, mtime in scan.temps:
        if temp_age(name, mtime, now) > TEMP_MAX_AGE_S:
            if not dry_run and remote.remove_temp(part, name):
                result.temps_removed += 1
        else:
            result.temps_left += 1
    return result
