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

__all__ = ["RemoteReport", "open_remote", "listing", "totals", "verify", "prune", "parse_age"]

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


def listing(remote, partition: str | None = None) -> list:
    """Every entry object (:class:`~xlakit.store.ObjectStat`), oldest first. Raises OSError."""
    return sorted(remote.list(partition), key=lambda o: (o.mtime, o.partition, o.key))


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
           max_bytes: int | None = None) -> list[RemoteReport]:
    """Read and check every object as a reader would (:func:`xlakit.store.remote.verify_object`: key id, header
    MAC, partition and key, length, full MAC; nothing is decompressed). With ``fix``, delete the bad ones;
    objects signed with another key or written by another format are reported and never deleted.

    Raises:
      PermissionError: ``fix`` in ``ro`` mode. OSError: listing failed (a failed read of one object is reported
        as that object's reason).
    """
    from xlakit.store.base import ObjectRefused
    from xlakit.store.entries import MAX_ENTRY_BYTES
    from xlakit.store.remote import verify_object

    if fix:
        _refuse_writes(mode, "verify --fix")
    limit = max_bytes or MAX_ENTRY_BYTES
    out = []
    for o in listing(remote, partition):
        try:
            blob = remote.get(o.partition, o.key, limit)
            reason = "absent: deleted while verifying" if blob is None else verify_object(blob, o.partition, o.key,
                                                                                          secret)
        except ObjectRefused as e:
            reason = f"corrupt: {e.reason}"
        except OSError as e:
            out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, f"error: {e}"))
            continue
        deleted = False
        if fix and reason is not None and not reason.startswith(("foreign:", "stale:", "absent:")):
            deleted = remote.delete(o.partition, o.key)
        out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, reason, deleted))
    return out


def prune(remote, *, older_than_s: float | None = None, max_bytes: int | None = None, mode: str = "rw",
          dry_run: bool = False, now: float | None = None) -> list[RemoteReport]:
    """Delete objects older than ``older_than_s`` seconds, then the oldest until at most ``max_bytes`` remain
    (:func:`xlakit.store.remote.plan_prune`, from one listing). Returns what was (or, with ``dry_run``, would
    be) deleted, oldest first.

    Raises:
      ValueError: neither bound given. PermissionError: ``ro`` mode (unless ``dry_run``). OSError: listing.
    """
    from xlakit.store.remote import plan_prune

    if older_than_s is None and max_bytes is None:
        raise ValueError("prune needs --older-than AGE or --max-bytes N (or both)")
    if not dry_run:
        _refuse_writes(mode, "prune")
    doomed = plan_prune(listing(remote), older_than_s=older_than_s, max_bytes=max_bytes,
                        now=time.time() if now is None else now)
    return [RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, None,
                         False if dry_run else remote.delete(o.partition, o.key)) for o in doomed]
