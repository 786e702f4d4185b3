"""Housekeeping of a shared bucket, without JAX: list, total, verify and prune the objects under a prefix.

What ``xlakit cache ls|stats|verify|prune --remote URL`` runs. Everything comes from one listing of
``<prefix>/v1/`` (sizes in bytes, creation times in unix seconds; objects are never rewritten, so creation time
is their age). Only ``verify(fix=True)`` and :func:`prune` delete, and both refuse in ``ro`` mode.

Nothing is deleted on a guess. An object is this key's own only when its header MAC verifies with this
process's secret *and* the authenticated header names the object's own partition and key *and* its declared
length equals the listed size (:func:`authenticate`): the public key id in bytes 8:16 proves nothing (anyone who
can read one object can copy it into junk), and a valid envelope copied under another name must not count
either (copies would inflate "our" bytes and make ``prune --max-bytes`` delete the real objects). Objects of
another key, of another format, without xlakit's magic, or whose header does not authenticate are reported and
never deleted; so are links, FIFOs and folders at object names, and files named like upload temps that are not
exactly the names xlakit's ``file://`` writer makes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["RemoteReport", "PruneResult", "open_remote", "survey", "listing", "entries", "totals", "verify", "prune",
           "parse_age", "authenticate", "TEMP_MAX_AGE_S", "NOT_XLAKIT", "HEAD_BYTES"]

TEMP_MAX_AGE_S = 3600.0  # an upload temp this old belongs to a killed writer (uploads take seconds)
NOT_XLAKIT = "not-xlakit: not an xlakit object (left alone)"
HEAD_BYTES = 64 * 1024  # one ranged read holds the prefix and the header of every entry xlakit writes


def parse_age(text: str) -> float:
    """Seconds from ``"30d"``, ``"12h"``, ``"90m"``, ``"2w"``, ``"3600"`` (plain number: seconds): the one age
    parser, :func:`xlakit._units.parse_age` (ASCII digits only; at most :data:`xlakit._units.MAX_SECONDS`).

    Raises ValueError naming the accepted forms."""
    from xlakit._units import parse_age as parse

    return parse(text)


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


def entries(remote, secret: bytes, partition: str | None = None, scan=None) -> list[RemoteReport]:
    """Every listed object, oldest first, with ``reason`` None when :func:`authenticate` proves it this key's entry
    at its name and listed length, else why not (``"<kind>: <why>"``: ``not-xlakit``, ``foreign``, ``stale``,
    ``unauthenticated``, ``misplaced``, ``absent``; ``error`` when its header could not be read). What ``ls
    --remote`` lists: a name in the bucket proves nothing (anyone who can write it can put 3,000 random files
    named like entries there). Cost as :func:`prune`'s: one ranged read of the header per object, never a payload.

    Raises:
      TimeoutError: the remote missed its deadline (one for the command, not one per object). OSError: listing.
    """
    from xlakit.store.base import ObjectRefused

    found = survey(remote, partition) if scan is None else scan
    out = []
    for o in listing(remote, partition, found):
        try:
            reason = authenticate(_head(remote, o, quiet=False), o.partition, o.key, o.size_bytes, secret)
        except ObjectRefused as e:
            reason = f"error: {e.reason}"
        except TimeoutError:
            raise
        except OSError as e:
            reason = f"error: {e.strerror or e}"
        out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, reason))
    return out


def _is_envelope(head: bytes | None) -> bool:
    from xlakit.store.envelope import MAGIC

    return head is not None and bytes(head[:7]) == MAGIC[:7]


def authenticate(blob_or_head: bytes | None, partition: str, key: str, size_bytes: int | None,
                 secret: bytes) -> str | None:
    """None when ``blob_or_head`` (the object's first bytes, at least its 52+H-byte prefix and header) proves
    the object at ``partition/key`` is this key's own: header MAC verified with ``secret``, the header naming this
    partition and key, and (``size_bytes`` given) the header's declared total length equal to it. Else
    ``"<kind>: <reason>"``: ``absent``, ``not-xlakit``, ``foreign`` (another key's id), ``stale`` (another
    format), ``unauthenticated`` (the header MAC fails: forged or damaged, not provably ours), ``misplaced`` (an
    authentic envelope at another name or with another length: a copy)."""
    from xlakit.store.envelope import MAC_BYTES, PREFIX_BYTES, EntryError, read_header

    if blob_or_head is None:
        return "absent: deleted meanwhile"
    if not _is_envelope(blob_or_head):
        return NOT_XLAKIT
    try:
        header = read_header(bytes(blob_or_head), secret)
    except EntryError as e:
        kind = e.kind if e.kind in ("foreign", "stale") else "unauthenticated"
        return f"{kind}: {e.reason}"
    if header.get("partition") != partition or header.get("key") != key:
        return (f"misplaced: an authentic envelope of {header.get('partition')!r}/{header.get('key')!r} copied "
                "to this name")
    payload = header.get("payload_bytes")
    length = int.from_bytes(bytes(blob_or_head[16:20]), "big")
    if not isinstance(payload, int) or isinstance(payload, bool):
        return "misplaced: the authentic header has no payload length"
    if size_bytes is not None and size_bytes != PREFIX_BYTES + length + MAC_BYTES + payload:
        return (f"misplaced: {size_bytes} bytes listed, the authentic header says "
                f"{PREFIX_BYTES + length + MAC_BYTES + payload}")
    return None


def _head(remote, o, quiet: bool = True) -> bytes | None:
    """The object's prefix and header: one ranged read of HEAD_BYTES, a second of exactly 52+H bytes when the
    header is longer (H is at most MAX_HEADER_BYTES). None when absent (or, ``quiet``, unreadable; else the
    OSError or ObjectRefused is raised)."""
    from xlakit.store.base import ObjectRefused
    from xlakit.store.envelope import MAX_HEADER_BYTES, PREFIX_BYTES

    try:
        head = remote.peek(o.partition, o.key, HEAD_BYTES)
        if head is not None and len(head) >= 20 and _is_envelope(head):
            need = PREFIX_BYTES + int.from_bytes(head[16:20], "big")
            if len(head) < need <= PREFIX_BYTES + MAX_HEADER_BYTES and len(head) == HEAD_BYTES:
                head = remote.peek(o.partition, o.key, need)
        return head
    except TimeoutError:
        raise  # a missed deadline: the remote is not answering; the whole command stops (one deadline, not N)
    except (OSError, ObjectRefused):
        if not quiet:
            raise
        return None


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
    MAC, partition and key, length, full MAC; nothing is decompressed). With ``fix``, delete the bad ones that
    are provably this key's: the header MAC verifies with ``secret`` and the header names this object (so the
    damage is in the payload, the length or the full MAC). Copies of an envelope under another name, objects signed
    with another key, written by another format, without xlakit's magic (``NOT_XLAKIT``) or whose header does
    not authenticate (forged junk carrying our public key id) are reported and never deleted. Links, FIFOs and
    folders at object names (readers refuse them) are reported as bad and left in place. ``scan``: a listing
    already made (:func:`survey`), so the caller's listing is not repeated.

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
    for part, key, what in scan.odd:  # readers refuse these; xlakit never makes them, so they are not its own
        out.append(RemoteReport(part, key, 0, 0.0, f"corrupt: not a regular file ({what}); readers refuse it, left "
                                                   "in place (xlakit never writes one: remove it by hand)"))
    for o in listing(remote, partition, scan):
        blob, reason = None, None  # type: bytes | None, str | None
        try:
            # The header first (one ranged read): an object whose header does not authenticate is never read
            # whole, so junk in the bucket costs verify 64 KiB, not its size.
            first = authenticate(_head(remote, o, quiet=False), o.partition, o.key, None, secret)
            if first is not None and not first.startswith("misplaced:"):
                reason = NOT_XLAKIT if first == NOT_XLAKIT else first
            else:
                blob = remote.get(o.partition, o.key, min(limit, o.size_bytes) if o.size_bytes > 0 else limit)
                if blob is None:
                    reason = "absent: deleted while verifying"
                elif not _is_envelope(blob):
                    reason = NOT_XLAKIT
                else:
                    reason = verify_object(blob, o.partition, o.key, secret)
        except ObjectRefused as e:
            reason = f"corrupt: {e.reason}"
        except TimeoutError:
            raise  # the remote stopped answering: one deadline for the command, not one per listed object
        except OSError as e:
            out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, f"error: {e}"))
            continue
        deleted = False
        if fix and reason is not None and not reason.startswith(SKIPPED_KINDS) and _ours_but_damaged(
                blob, o, secret):
            deleted = remote.delete(o.partition, o.key)
        elif fix and reason is not None and reason.startswith("unauthenticated: header"):
            reason += " (not provably this key's: left in place)"
        out.append(RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, reason, deleted))
    return out


SKIPPED_KINDS = ("foreign:", "stale:", "absent:", "not-xlakit:")


def _ours_but_damaged(blob: bytes | None, o, secret: bytes) -> bool:
    """``verify --fix`` deletes an object only when its header authenticates with this key and names this very
    object (the damage is after the header: payload, length, full MAC). A copy under another name is left: the
    bytes a server returned for one name are no proof of what is stored at it (a misrouting proxy could
    answer with another object's bytes)."""
    return blob is not None and authenticate(blob, o.partition, o.key, None, secret) is None


@dataclass
class PruneResult:
    """What :func:`prune` did: ``deleted`` (oldest first), objects left because another key signed them
    (``other_key``: count, bytes), objects that are not xlakit's (``not_xlakit``: count), upload temps of
    killed writers removed (``temps_removed``) and temps still fresh (``temps_left``); ``unproven`` (count,
    bytes): objects that carry xlakit's magic but whose header does not authenticate with this key, or authentic
    envelopes copied under another name or length: never counted as ours, never deleted; ``unreadable`` (count,
    bytes): objects whose header could not be read (an error other than a missed deadline, which stops the
    whole prune before anything is deleted); ``vanished``: objects listed but gone when read (another process
    deleted them meanwhile: nothing to do)."""

    deleted: list[RemoteReport]
    other_key: int = 0
    other_key_bytes: int = 0
    not_xlakit: int = 0
    unproven: int = 0
    unproven_bytes: int = 0
    unreadable: int = 0
    unreadable_bytes: int = 0
    temps_removed: int = 0
    temps_left: int = 0
    vanished: int = 0


def _aged_by_header(o, head: bytes, secret: bytes):
    """``o`` with its age taken from its authenticated header's ``created`` time when that is earlier than the
    listing's: someone who can only create objects could re-upload old genuine objects (after a prune removed
    them) and, by the listing's time, make them the newest — so that prune evicts the current programs. The
    header's time is sealed by the MAC; the listing's is the bucket's."""
    import dataclasses
    import math

    from xlakit.store.envelope import read_header

    try:
        created = read_header(bytes(head), secret).get("created")
    except Exception:  # noqa: BLE001 - authenticate() already proved it; never fail a prune on this
        return o
    if isinstance(created, (int, float)) and not isinstance(created, bool) and math.isfinite(created) \
            and 0 < created < o.mtime:
        return dataclasses.replace(o, mtime=float(created))
    return o


def prune(remote, secret: bytes, *, older_than_s: float | None = None, max_bytes: int | None = None,
          mode: str = "rw", dry_run: bool = False, now: float | None = None, scan=None) -> PruneResult:
    """Delete this key's objects older than ``older_than_s`` seconds, then its oldest until at most
    ``max_bytes`` of its objects remain (:func:`xlakit.store.remote.plan_prune`). An object is this key's only
    when :func:`authenticate` proves it (header MAC with ``secret``, the header naming the object, its length
    the listed size); everything else is left alone and not counted against the bound. Cost: one listing and
    one ranged read of at most :data:`HEAD_BYTES` (64 KiB) per object (a second, of exactly the header, when a
    header is longer), never the payloads: the header MAC covers the prefix and the header separately, so the
    header is proven without reading the program. Upload temps older than :data:`TEMP_MAX_AGE_S` whose name is
    exactly one xlakit's ``file://`` writer makes are removed.

    Raises:
      ValueError: neither bound given. PermissionError: ``ro`` mode (unless ``dry_run``). OSError: listing.
    """
    from xlakit.store.base import ObjectRefused
    from xlakit.store.remote import is_upload_temp, plan_prune, temp_age

    if older_than_s is None and max_bytes is None:
        raise ValueError("prune needs --older-than AGE or --max-bytes N (or both)")
    if not dry_run:
        _refuse_writes(mode, "prune")
    now = time.time() if now is None else now
    scan = survey(remote) if scan is None else scan
    result = PruneResult([])
    ours = []
    for o in listing(remote, scan=scan):
        try:  # a missed deadline raises (nothing is deleted: deletions come after the loop)
            head = _head(remote, o, quiet=False)
        except TimeoutError:
            raise
        except (OSError, ObjectRefused):
            result.unreadable += 1  # not proven ours: never counted, never deleted, but said
            result.unreadable_bytes += o.size_bytes
            continue
        if head is None:  # listed, then deleted by another process before it was read: nothing to do
            result.vanished += 1
            continue
        reason = authenticate(head, o.partition, o.key, o.size_bytes, secret)
        if reason is None:
            ours.append(_aged_by_header(o, head, secret))
        elif reason.startswith("foreign:"):
            result.other_key += 1
            result.other_key_bytes += o.size_bytes
        elif reason.startswith(("unauthenticated:", "misplaced:")):
            result.unproven += 1
            result.unproven_bytes += o.size_bytes
        else:
            result.not_xlakit += 1
    doomed = plan_prune(ours, older_than_s=older_than_s, max_bytes=max_bytes, now=now)
    result.deleted = [RemoteReport(o.partition, o.key, o.size_bytes, o.mtime, None,
                                   False if dry_run else remote.delete(o.partition, o.key)) for o in doomed]
    for part, name, _size, mtime in scan.temps:
        if not is_upload_temp(name):
            result.not_xlakit += 1  # named like a temp, but not a name xlakit's writer makes: left alone
        elif temp_age(name, mtime, now) > TEMP_MAX_AGE_S:
            if not dry_run and remote.remove_temp(part, name):
                result.temps_removed += 1
        else:
            result.temps_left += 1
    return result
