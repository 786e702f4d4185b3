"""A :class:`~xlakit.store.base.Store` on object storage or a shared folder, through fsspec. No JAX.

Layout: one object per entry at ``<prefix>/v1/<partition>/<key>``; the object holds the sealed envelope
exactly as the local store keeps it (this module never looks inside). ``v1`` is the layout version, so a
later layout can live beside this one in the same bucket.

URLs (``RemoteStore("s3://bucket/prefix")``):

- ``s3://`` needs ``s3fs`` (extra ``xlakit[s3]``); credentials and ``endpoint_url`` come from the usual AWS
  settings or from ``storage_options``. Create-only writes send ``If-None-Match: *``.
- ``gs://`` needs ``gcsfs`` (extra ``xlakit[gcs]``). Create-only writes send ``ifGenerationMatch=0``.
- ``file://`` is a shared folder (NFS, a mounted volume): create-only by ``link(2)`` of a fully written temp
  file, reads refuse links and non-regular files, and no link below the prefix is ever followed (see
  :mod:`xlakit.store._remote_file`). Done with ``os`` calls because fsspec's local filesystem checks
  existence and then writes, which two writers can interleave.
- ``memory://`` (fsspec's in-process filesystem) for tests and demos.
- Any other fsspec protocol is accepted when its ``pipe_file`` takes ``mode="create"``.

Contract details (see :mod:`xlakit.store.base`): ``get`` is one ranged GET of at most ``max_bytes + 1`` bytes
(no HEAD first, no write, no access-time touch); absent = ``None``. ``put`` is create-only and returns
``False`` when the object already exists, whatever the backend calls that: ``FileExistsError`` (AWS through
s3fs, GCS through gcsfs, fsspec memory) or ``OSError(EINVAL)`` (SeaweedFS answers a failed ``If-None-Match``
with 412 and no ``Condition`` field, which s3fs maps to errno 22; confirmed with one HEAD before it is
taken as "exists"). Partition and key names are restricted to ``[A-Za-z0-9_.=-]`` (no ``.``/``..``, at
most 255 characters) so an object name can never leave the prefix.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from ._remote_file import FileBackend as _FileBackend
from ._remote_file import Scan, is_upload_temp, temp_age
from .base import ObjectRefused, ObjectStat
from .layout import valid_partition

__all__ = ["verify_object", "RemoteStore", "LAYOUT", "validate_name", "remote_settings", "plan_prune", "Scan",
           "temp_age", "is_upload_temp"]

LAYOUT = "v1"
_NAME = re.compile(r"[A-Za-z0-9_.=-]{1,255}")
# Short network bounds by default: a cache must never make a program wait long on a dead server.
# Each can be overridden through ``storage_options``.
_S3_DEFAULTS: dict[str, Any] = {
    "retries": 1,  # s3fs's own retry loop; botocore below retries once more
    "config_kwargs": {"connect_timeout": 3, "read_timeout": 15, "retries": {"total_max_attempts": 2}},
}
_PROTOCOL_EXTRA = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


def validate_name(name: str, what: str) -> str:
    """Return ``name`` if it is safe as one path segment of an object name; else raise ValueError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{what} {name!r} cannot name a remote object: use 1-255 characters from "
                         "A-Z a-z 0-9 _ . = - (and not '.' or '..')")
    return name


def _mtime(info: dict) -> float:
    for field in ("LastModified", "mtime", "updated", "created", "time"):
        value = info.get(field)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return 0.0


def _precondition_failed(e: OSError) -> bool:
    text = str(e).lower()
    return e.errno == errno.EINVAL or "precondition" in text or "412" in text


class _FsspecBackend:
    """Any fsspec filesystem whose ``pipe_file`` takes ``mode="create"`` (s3fs, gcsfs, memory)."""

    def __init__(self, fs, root: str = "") -> None:
        self.fs = fs
        self._root = root
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        # S3 and GCS enforce create-only on the server; other fsspec filesystems check, then write: a lock
        # makes that atomic within this process at least (fsspec's memory filesystem is process-local anyway).
        self._server_checked = bool({"s3", "s3a", "gs", "gcs"} & set(protocols))
        self._lock = threading.Lock()

    def get(self, path: str, max_bytes: int) -> bytes | None:
        try:
            data = self.fs.cat_file(path, start=0, end=max_bytes + 1)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise ObjectRefused("the object is a folder, not an entry") from None
        except OSError as e:
            if "range" in str(e).lower() and "satisf" in str(e).lower():
                return b""  # S3 answers a ranged GET of a zero-byte object with 416; the verifier refuses it
            raise
        if len(data) > max_bytes:
            raise ObjectRefused(f"object is over the {max_bytes}-byte bound")
        return bytes(data)

    def put(self, path: str, blob: bytes) -> bool:
        try:
            if self._server_checked:
                self.fs.pipe_file(path, blob, mode="create")
            else:
                with self._lock:
                    self.fs.pipe_file(path, blob, mode="create")
            return True
        except FileExistsError:
            return False
        except OSError as e:
            # SeaweedFS: 412 without the Condition field -> OSError(EINVAL). Only "exists" if it does exist.
            if _precondition_failed(e) and self.info(path) is not None:
                return False
            raise

    def delete(self, path: str) -> bool:
        if self.info(path) is None:
            return False
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def info(self, path: str) -> tuple[int, float] | None:
        try:
            self.fs.invalidate_cache(path)
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        if info.get("type") not in (None, "file"):
            return None
        return int(info.get("size") or 0), _mtime(info)

    def peek(self, path: str, n: int) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path, start=0, end=n))
        except FileNotFoundError:
            return None

    def scan(self, layout: str, partition: str | None, valid_part, valid_key) -> Scan:
        out = Scan()
        base = f"{self._root}/{layout}" + (f"/{partition}" if partition is not None else "")
        for rel, size, mtime in self.find(base):
            parts = rel.split("/")
            if partition is not None:
                parts = [partition, *parts]
            if len(parts) == 2 and parts[1].startswith(".tmp-"):
                # this backend publishes in one request and writes no temps: such a name is someone else's
                out.skipped.append(f"{layout}/{rel}: named like an upload temp, which xlakit writes only to "
                                   "file:// (left alone)")
            elif len(parts) != 2 or not valid_part(parts[0]) or not valid_key(parts[1]):
                out.skipped.append(f"{layout}/{rel}: not an xlakit object name (left alone)")
            else:
                out.objects.append((parts[0], parts[1], size, mtime))
        return out

    def find(self, base: str) -> Iterator[tuple[str, int, float]]:
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return
        prefix = base.rstrip("/") + "/"
        for name in sorted(found):
            info = found[name]
            rel = name[len(prefix):] if name.startswith(prefix) else None
            if rel is None or info.get("type", "file") != "file":
                continue
            yield rel, int(info.get("size") or 0), _mtime(info)


class RemoteStore:
    """Sealed entries as objects under ``<url>/v1/<partition>/<key>``; a :class:`~xlakit.store.base.Store`.

    Args:
      url: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///shared/folder``, ``memory://name``.
      storage_options: passed to the fsspec filesystem (``endpoint_url``, ``key``, ``secret``, ``anon``...);
        for S3 they are merged over short defaults (connect timeout 3 s, read timeout 15 s, 2 attempts).
      fs: an fsspec filesystem to use instead of building one from the URL (tests wrap one to count calls).

    Raises:
      ValueError: a URL without a protocol or bucket, or a protocol fsspec does not know.
      ImportError: the protocol's package is missing; the message names the extra to install.

    Every method raises :class:`OSError` for errors of the medium (unreachable server, denied access) and
    :class:`~xlakit.store.base.ObjectRefused` for an object that is not safe to read.
    """

    def __init__(self, url: str, *, storage_options: dict | None = None, fs=None) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(f"remote {url!r} is not a URL: use s3://bucket/prefix, gs://bucket/prefix, "
                             "file:///shared/folder or memory://name")
        self.url = url.rstrip("/")
        protocol, _, rest = self.url.partition("://")
        self.protocol = protocol.lower()
        if not rest.strip("/"):
            raise ValueError(f"remote {url!r} names no bucket or folder")
        self._backend: _FileBackend | _FsspecBackend
        if self.protocol == "file" and fs is None:
            self._root = os.path.abspath("/" + rest.lstrip("/"))
            self._backend = _FileBackend(self._root)
        else:
            if fs is None:
                fs = self._make_fs(storage_options)
            self._root = fs._strip_protocol(self.url).rstrip("/")
            self._backend = _FsspecBackend(fs, self._root)

    def _make_fs(self, storage_options: dict | None):
        import fsspec

        options = dict(storage_options or {})
        if self.protocol in ("s3", "s3a"):
            for name, value in _S3_DEFAULTS.items():
                if isinstance(value, dict):
                    options[name] = {**value, **options.get(name, {})}
                else:
                    options.setdefault(name, value)
        options.setdefault("use_listings_cache", False)
        retries = options.pop("retries", None)  # s3fs keeps its retry count as an attribute, not an argument
        try:
            fs = fsspec.filesystem(self.protocol, **options)
        except ImportError as e:
            extra = _PROTOCOL_EXTRA.get(self.protocol)
            hint = f"pip install 'xlakit[{extra}]'" if extra else "install the fsspec package for it"
            raise ImportError(f"the remote {self.url!r} needs a package that is missing ({e}); {hint}") from e
        except ValueError as e:
            raise ValueError(f"fsspec does not know the protocol of {self.url!r}: {e}") from e
        if retries is not None:
            fs.retries = retries
        return fs

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r})"

    @property
    def fs(self):
        """The fsspec filesystem in use (None for ``file://``, which uses plain ``os`` calls)."""
        return getattr(self._backend, "fs", None)

    def connect(self, probe: bool = False) -> None:
        """Set up the client session now (s3fs builds its botocore client on first use: about 0.3 s).

        probe: also send one GET of ``<prefix>/v1/.probe`` (a name no entry can have, so a miss): it opens the
        connection and readies the client's request path, which otherwise adds ~40 ms to the first real read.
        A read, never a write. Without it no request is sent.
        The tiered store calls this in a background thread at start, so the first read of a program does not
        pay for it. Raises OSError (or the backend's error) when the set-up fails."""
        connect = getattr(self.fs, "connect", None)
        if callable(connect):
            connect()
        if probe:
            try:
                self._backend.get(f"{self._root}/{LAYOUT}/.probe", 0)
            except ObjectRefused:
                pass

    def object_name(self, partition: str, key: str) -> str:
        """Full object path (without protocol) of one entry: ``<root>/v1/<partition>/<key>``."""
        return f"{self._root}/{LAYOUT}/{validate_name(partition, 'partition')}/{validate_name(key, 'key')}"

    def get(self, partition: str, key: str, max_bytes: int) -> bytes | None:
        """The object's bytes (at most ``max_bytes``) or None when absent; one GET. Raises ObjectRefused, OSError."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        return self._backend.get(self.object_name(partition, key), max_bytes)

    def put(self, partition: str, key: str, blob: bytes) -> bool:
        """Create the object; True if this call created it, False if it existed (left unchanged). Raises OSError."""
        return self._backend.put(self.object_name(partition, key), bytes(blob))

    def delete(self, partition: str, key: str) -> bool:
        """Remove the object; True if it existed. Raises OSError."""
        return self._backend.delete(self.object_name(partition, key))

    def stat(self, partition: str, key: str) -> ObjectStat | None:
        """Size (bytes) and creation time (unix seconds) of the object, or None. Raises OSError."""
        found = self._backend.info(self.object_name(partition, key))
        return None if found is None else ObjectStat(partition, key, found[0], found[1])

    def list(self, partition: str | None = None) -> Iterator[ObjectStat]:
        """Every entry object (of one partition, or all), sorted by name, from one listing. Raises OSError.

        Only regular objects at names xlakit writes are listed (see :meth:`scan`)."""
        for part, key, size, mtime in self.scan(partition).objects:
            yield ObjectStat(part, key, size, mtime)

    def scan(self, partition: str | None = None) -> Scan:
        """One listing of ``<prefix>/v1`` sorted into objects, odd kinds at object names (links, FIFOs,
        folders: ``file://`` only), upload temps and names left alone. Partition names must be ones
        :func:`xlakit.store.layout.valid_partition` accepts and keys :func:`validate_name`'s; anything else is
        never listed, counted or deleted. Raises NotADirectoryError when the prefix or ``v1`` is not a
        folder (``file://``), OSError for the medium."""
        if partition is not None:
            validate_name(partition, "partition")
        found = self._backend.scan(LAYOUT, partition, valid_partition, _valid_key)
        found.objects.sort(key=lambda o: (o[0], o[1]))
        return found

    def peek(self, partition: str, key: str, n: int) -> bytes | None:
        """The first ``n`` bytes of the object (one ranged GET), None when absent. Raises ObjectRefused, OSError."""
        return self._backend.peek(self.object_name(partition, key), n)

    def remove_temp(self, partition: str, name: str) -> bool:
        """Delete an upload temp ``.tmp-...`` left by a killed writer. True if removed. Raises OSError."""
        if not is_upload_temp(name):
            raise ValueError(f"{name!r} is not an upload temp xlakit writes")
        path = f"{self._root}/{LAYOUT}/{validate_name(partition, 'partition')}/{name}"
        if isinstance(self._backend, _FileBackend):
            return self._backend.remove_temp(partition, name)
        return self._backend.delete(path)


def _valid_key(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and not name.startswith(".")


def remote_settings(url: str | None = None, mode: str | None = None, storage_options: dict | None = None,
                    environ: Mapping[str, str] = os.environ) -> tuple[str, str, dict] | None:
    """``(url, mode, storage_options)`` from the arguments, else from the environment; None when no remote.

    Variables: ``XLAKIT_CACHE_REMOTE`` (URL), ``XLAKIT_CACHE_REMOTE_MODE`` (``rw``/``ro``, default ``rw``),
    ``XLAKIT_CACHE_REMOTE_OPTIONS`` (a JSON object of fsspec storage options, e.g. an ``endpoint_url``).
    An empty ``XLAKIT_CACHE_REMOTE`` means no remote.

    Raises:
      ValueError: a mode other than rw/ro, or options that are not a JSON object; the message names the setting.
    """
    import json

    url = url if url is not None else (environ.get("XLAKIT_CACHE_REMOTE") or None)
    if not url:
        return None
    source = "remote_mode" if mode is not None else "XLAKIT_CACHE_REMOTE_MODE"
    mode = mode if mode is not None else (environ.get("XLAKIT_CACHE_REMOTE_MODE") or "rw")
    if mode not in ("rw", "ro"):
        raise ValueError(f"{source}={mode!r}: use 'rw' (read and upload) or 'ro' (read only, for untrusted workers)")
    if storage_options is None:
        text = environ.get("XLAKIT_CACHE_REMOTE_OPTIONS") or "{}"
        try:
            storage_options = json.loads(text)
        except ValueError as e:
            raise ValueError(f"XLAKIT_CACHE_REMOTE_OPTIONS is not JSON ({e}); use an object such as "
                             '\'{"endpoint_url": "http://127.0.0.1:8333"}\'') from None
        if not isinstance(storage_options, dict):
            raise ValueError("XLAKIT_CACHE_REMOTE_OPTIONS must be a JSON object of fsspec storage options")
    return url, mode, dict(storage_options)


def verify_object(blob: bytes, partition: str, key: str, secret: bytes) -> str | None:
    """Whether a remote object may be used as entry ``key`` of ``partition``: None if so, else
    ``"<kind>: <reason>"`` (kind as in :mod:`xlakit.store.entries`: ``foreign``, ``stale``, ``corrupt``,
    ``unauthenticated``, ``mismatch``).

    Checks, in order, without decompressing a byte or parsing an unauthenticated one: magic and format version,
    key id (another key -> ``"foreign: signed with another key (key id ..., this process ...)"``), header MAC,
    the header's ``partition`` and ``key`` against the requested ones (an object copied under another name is
    refused), the total length, and the full MAC over header and payload. The secret is only used here, on this
    machine; nothing derived from it but the public key id is ever sent anywhere."""
    import hashlib
    import hmac

    from .envelope import MAC_BYTES, PREFIX_BYTES, EntryError, read_header

    try:
        header = read_header(bytes(blob), secret)
    except EntryError as e:
        return f"{e.kind}: {e.reason}"
    if header.get("partition") != partition:
        return f"mismatch: the object names partition {header.get('partition')!r}, not {partition!r}"
    if header.get("key") != key:
        return f"corrupt: the object names key {header.get('key')!r}, not {key!r}"
    length = int.from_bytes(blob[16:20], "big")
    body = PREFIX_BYTES + length
    payload_bytes = header.get("payload_bytes")
    if not isinstance(payload_bytes, int) or isinstance(payload_bytes, bool) or payload_bytes < 0:
        return "corrupt: header lacks a valid payload_bytes"
    if len(blob) != body + MAC_BYTES + payload_bytes:
        return f"corrupt: object is {len(blob)} bytes, its header says {body + MAC_BYTES + payload_bytes}"
    view = memoryview(blob)
    mac = hmac.new(secret, view[:body], hashlib.sha256)
    mac.update(view[body + MAC_BYTES:])
    if not hmac.compare_digest(mac.digest(), bytes(view[body:body + MAC_BYTES])):
        return "unauthenticated: HMAC mismatch: the object was modified"
    return None


def plan_prune(objects: Iterable[ObjectStat], *, older_than_s: float | None = None, max_bytes: int | None = None,
               now: float | None = None) -> list[ObjectStat]:
    """Which objects to delete, from a listing: those older than ``older_than_s`` seconds, then the oldest of
    the rest until the total is at most ``max_bytes``. Returns them oldest first; deletes nothing.

    Ages come from the objects' creation times (remote reads never touch objects, so there is no last-use time
    on a shared tier: this is first-in first-out, like a bucket lifecycle rule)."""
    now = time.time() if now is None else now
    keep = sorted(objects, key=lambda o: (o.mtime, o.partition, o.key))
    doomed: list[ObjectStat] = []
    if older_than_s is not None:
        doomed = [o for o in keep if now - o.mtime > older_than_s]
        keep = [o for o in keep if now - o.mtime <= older_than_s]
    if max_bytes is not None:
        total = sum(o.size_bytes for o in keep)
        while keep and total > max_bytes:
            oldest = keep.pop(0)
            total -= oldest.size_bytes
            doomed.append(oldest)
    return doomed
