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
- Any other scheme is refused (:func:`check_url`), naming the setting and these four: fsspec's other
  filesystems do not write create-only, and their own errors (FTP's "missing argument 'host'", ``zip://`` opening
  the working folder) named neither the URL nor the setting. A test may still hand :class:`RemoteStore` any
  filesystem whose ``pipe_file`` takes ``mode="create"`` through ``fs=``.

Contract details (see :mod:`xlakit.store.base`): ``get`` is one ranged GET of at most ``max_bytes + 1`` bytes
(no HEAD first, no write, no access-time touch); absent = ``None``. ``put`` is create-only and returns
``False`` when the object already exists, whatever the backend calls that: ``FileExistsError`` (AWS through
s3fs, GCS through gcsfs, fsspec memory) or ``OSError(EINVAL)`` (SeaweedFS answers a failed ``If-None-Match``
with 412 and no ``Condition`` field, which s3fs maps to errno 22; confirmed with one HEAD before it is
taken as "exists"). Every S3/GCS request runs under one deadline (``timeout_s``, default
``$XLAKIT_CACHE_REMOTE_TIMEOUT_S`` or 30 s: connect, retries and whole body) and an S3 body is never read past
its range (:mod:`xlakit.store._remote_fsspec`); :func:`read_object` proves a header before asking for more than
256 KiB. Partition and key names are restricted to ``[A-Za-z0-9_.=-]`` (no ``.``/``..``, at
most 255 characters) so an object name can never leave the prefix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._remote_file import FileBackend as _FileBackend
from ._remote_file import Scan, file_root, is_upload_temp, temp_age
from ._remote_fsspec import DeadlineExceeded
from ._remote_fsspec import FsspecBackend as _FsspecBackend
from .base import ObjectRefused, ObjectStat
from .layout import valid_partition

__all__ = ["verify_object", "RemoteStore", "LAYOUT", "SCHEMES", "check_url", "validate_name", "remote_settings",
           "plan_prune", "Scan", "temp_age", "is_upload_temp", "remote_timeout_s", "parse_options", "DeadlineExceeded",
           "ENV_TIMEOUT_S", "DEFAULT_TIMEOUT_S"]

LAYOUT = "v1"
_NAME = re.compile(r"[A-Za-z0-9_.=-]{1,255}")
# Short network bounds by default: a cache must never make a program wait long on a dead server.
# Each can be overridden through ``storage_options``.
_S3_DEFAULTS: dict[str, Any] = {
    "retries": 1,  # s3fs's own retry loop; botocore below retries once more
    "config_kwargs": {"connect_timeout": 3, "read_timeout": 15, "retries": {"total_max_attempts": 2}},
}
_PROTOCOL_EXTRA = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
#: The URL schemes a remote may have (README "Sharing a cache"; s3a and gcs are fsspec's aliases of s3 and gs).
SCHEMES = ("s3", "s3a", "gs", "gcs", "file", "memory")
_BUCKET_SCHEMES = ("s3", "s3a", "gs", "gcs")
#: Storage options of s3fs whose type xlakit checks before the filesystem is made: a wrong one failed later, at the
#: first request, in the library's words ("'int' object is not iterable" for an endpoint_url of 5).
_S3_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "endpoint_url": (str,), "key": (str,), "secret": (str,), "token": (str,), "profile": (str,), "anon": (bool,),
    "client_kwargs": (Mapping,), "s3_additional_kwargs": (Mapping,),
}
_USE = "use s3://bucket/prefix, gs://bucket/prefix, file:///shared/folder or memory://name"
#: One deadline per remote operation (connect + request + whole body, reads and uploads alike), seconds.
ENV_TIMEOUT_S = "XLAKIT_CACHE_REMOTE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0


def remote_timeout_s(value: float | None = None, environ: Mapping[str, str] = os.environ) -> float:
    """The deadline of one remote operation in seconds: ``value``, else ``$XLAKIT_CACHE_REMOTE_TIMEOUT_S``, else
    30. Raises ValueError (naming the setting) for anything but a positive finite number."""
    from xlakit._units import finite_seconds

    source = "timeout_s" if value is not None else ENV_TIMEOUT_S
    text = value if value is not None else (environ.get(ENV_TIMEOUT_S) or DEFAULT_TIMEOUT_S)
    return finite_seconds(text, source)  # 10**400 too: a ValueError naming the setting, not an OverflowError


def check_url(url: object, setting: str = "remote") -> str:
    """``url`` if xlakit can keep a shared cache there: a str ``<scheme>://<bucket or folder>`` with a scheme of
    :data:`SCHEMES`. ``setting`` names where the URL came from (``remote``, ``--remote``, ``XLAKIT_CACHE_REMOTE``),
    so the message says what to change.

    Raises:
      TypeError: not a str. ValueError: no ``://``, no bucket or folder, or another scheme (the message lists
        the supported ones).
    """
    from xlakit._units import _shown

    if not isinstance(url, str):
        raise TypeError(f"{setting} must be a URL string ({_USE}), got {type(url).__name__} {_shown(url)}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"{setting}={_shown(url, 200)} is not a URL: {_USE}")
    if scheme.lower() not in SCHEMES:
        raise ValueError(f"{setting}={_shown(url, 200)}: xlakit cannot keep a cache at {_shown(scheme)[1:-1]}:// "
                         f"URLs; {_USE} (the schemes it supports: {', '.join(s + '://' for s in SCHEMES)})")
    if not rest.strip("/"):
        raise ValueError(f"{setting}={_shown(url, 200)} names no bucket or folder: {_USE}")
    if scheme.lower() == "file":
        file_root(url, setting)  # file://host/... refused
    if scheme.lower() in _BUCKET_SCHEMES and any(part in (".", "..") for part in rest.split("/")):
        # a bucket's object names are not paths: S3 answered "Bad Request" to every request, named as neither
        raise ValueError(f"{setting}={_shown(url, 200)}: a '.' or '..' segment cannot be part of a bucket or prefix "
                         "(object names do not go up or stay at a level); give the bucket and prefix as they are, "
                         f"e.g. {scheme}://bucket/xlakit")
    return url


def validate_name(name: str, what: str) -> str:
    """Return ``name`` if it is safe as one path segment of an object name; else raise ValueError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{what} {name!r} cannot name a remote object: use 1-255 characters from "
                         "A-Z a-z 0-9 _ . = - (and not '.' or '..')")
    return name


class RemoteStore:
    """Sealed entries as objects under ``<url>/v1/<partition>/<key>``; a :class:`~xlakit.store.base.Store`.

    Args:
      url: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///shared/folder``, ``memory://name``.
      storage_options: passed to the fsspec filesystem (``endpoint_url``, ``key``, ``secret``, ``anon``...);
        for S3 they are merged over short defaults (connect timeout 3 s, read timeout 15 s, 2 attempts).
      fs: an fsspec filesystem to use instead of building one from the URL (tests wrap one to count calls).
      timeout_s: the deadline of each request in seconds, connect, retries and whole body included (default
        :func:`remote_timeout_s`: ``$XLAKIT_CACHE_REMOTE_TIMEOUT_S`` or 30); on S3 and GCS the request is
        cancelled at the deadline and :class:`DeadlineExceeded` (a TimeoutError) raised. A ``file://`` call
        has no deadline of its own (the tiered store bounds the caller's wait).

    Raises:
      ValueError: a URL without a protocol or bucket, or a scheme outside :data:`SCHEMES` (unless ``fs`` is
        given), or ``storage_options`` the scheme's filesystem does not take. TypeError: a ``url`` that is not a
        str, ``storage_options`` that are not a dict with str keys.
      ImportError: the protocol's package is missing; the message names the extra to install.

    Every method raises :class:`OSError` for errors of the medium (unreachable server, denied access) and
    :class:`~xlakit.store.base.ObjectRefused` for an object that is not safe to read.
    """

    def __init__(self, url: str, *, storage_options: dict | None = None, fs=None,
                 timeout_s: float | None = None) -> None:
        from xlakit._units import check_options

        if fs is None:
            check_url(url)
        elif not isinstance(url, str) or "://" not in url or not url.partition("://")[2].strip("/"):
            raise ValueError(f"remote {url!r} is not a URL with a bucket or folder: {_USE}")
        storage_options = check_options(storage_options, "storage_options")
        self.url = url.rstrip("/")
        protocol, _, rest = self.url.partition("://")
        self.protocol = protocol.lower()
        self.timeout_s = remote_timeout_s(timeout_s)
        self._backend: _FileBackend | _FsspecBackend
        if self.protocol == "file" and fs is None:
            self._root = file_root(self.url, "remote", storage_options)
            self._backend = _FileBackend(self._root)
        else:
            if fs is None:
                fs = self._make_fs(storage_options)
            self._root = fs._strip_protocol(self.url).rstrip("/")
            self._backend = _FsspecBackend(fs, self._root, self.timeout_s)

    def _make_fs(self, storage_options: dict | None):
        import fsspec

        options = dict(storage_options or {})
        if self.protocol in ("s3", "s3a"):
            for name, kinds in _S3_OPTION_TYPES.items():
                given = options.get(name)
                if given is not None and not isinstance(given, kinds):
                    want = {str: "a string", bool: "true or false", Mapping: "a JSON object"}[kinds[0]]
                    raise TypeError(f"storage option {name!r} must be {want}"
                                    + (" (a URL such as 'http://host:9000')" if name == "endpoint_url" else "")
                                    + f", got {type(given).__name__}"  # the value unsaid: it may be a credential
                                    + "; fix remote_options, --remote-options or XLAKIT_CACHE_REMOTE_OPTIONS")
            for name, value in _S3_DEFAULTS.items():
                if isinstance(value, dict):
                    given = options.get(name, {})
                    if not isinstance(given, Mapping):  # {**defaults, **5} said only "'int' object is not a mapping"
                        raise TypeError(f"storage option {name!r} must be a dict (merged over xlakit's defaults "
                                        f"{value}), got {type(given).__name__}; fix remote_options, --remote-options "
                                        "or XLAKIT_CACHE_REMOTE_OPTIONS")
                    options[name] = {**value, **given}
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
        except TypeError as e:  # an option the filesystem's constructor does not take
            raise ValueError(f"the storage options {sorted(options)} are not accepted by the {self.protocol}:// "
                             f"filesystem ({e}); fix remote_options, --remote-options or XLAKIT_CACHE_REMOTE_OPTIONS"
                             ) from e
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
        fs = self.fs
        if isinstance(self._backend, _FsspecBackend) and getattr(fs, "async_impl", False) and callable(
                getattr(fs, "set_session", None)):
            self._backend._run(fs.set_session())  # under the same deadline as every request
        elif callable(getattr(fs, "connect", None)):
            fs.connect()
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
        """The first ``n`` bytes of the object (one ranged GET, never more read), None when absent. Raises
        ObjectRefused, OSError."""
        return self._backend.peek(self.object_name(partition, key), n)

    def read_range(self, partition: str, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the object (one ranged GET; fewer at its end; never more read, whatever the
        server sends), None when absent. Raises ObjectRefused, OSError."""
        if not 0 <= start <= end:
            raise ValueError(f"invalid range [{start}, {end})")
        return self._backend.get_range(self.object_name(partition, key), start, end)

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
      ValueError: a URL xlakit cannot use (:func:`check_url`: a scheme other than s3, gs, file, memory), a mode
        other than rw/ro (or a mode given with no remote at all), or options that are not a JSON object; the
        message names the setting (``remote``, ``remote_mode``, ``remote_options`` or the variable). TypeError: a
        ``url``, ``mode`` or ``storage_options`` of the wrong type (not a str, not a dict), naming it.
    """
    from xlakit._units import _shown, check_options

    if storage_options is not None:  # checked even without a remote: a wrong value is never ignored silently
        storage_options = check_options(storage_options, "remote_options")
    if url is not None:
        if url == "":
            if mode is not None:
                raise ValueError(f"remote_mode={mode!r} with remote='' (no remote): give a remote URL, or leave "
                                 "remote_mode out")
            return None  # no remote, as an empty XLAKIT_CACHE_REMOTE
        check_url(url, "remote")
    else:
        url = environ.get("XLAKIT_CACHE_REMOTE") or None
        if not url:
            if mode is not None:  # remote_mode="ro" without a remote was taken silently (the CLI refuses it)
                raise ValueError(f"remote_mode={mode!r} without a remote: pass remote= (or set XLAKIT_CACHE_REMOTE), "
                                 "or leave remote_mode out")
            return None
        check_url(url, "XLAKIT_CACHE_REMOTE")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"remote_mode must be 'rw' or 'ro' (or None: $XLAKIT_CACHE_REMOTE_MODE, else rw), got "
                        f"{type(mode).__name__} {_shown(mode)}")
    source = "remote_mode" if mode is not None else "XLAKIT_CACHE_REMOTE_MODE"
    mode = mode if mode is not None else (environ.get("XLAKIT_CACHE_REMOTE_MODE") or "rw")
    if mode not in ("rw", "ro"):
        raise ValueError(f"{source}={mode!r}: use 'rw' (read and upload) or 'ro' (read only, for untrusted workers)")
    if storage_options is None:
        text = environ.get("XLAKIT_CACHE_REMOTE_OPTIONS") or "{}"
        try:
            storage_options = parse_options(text)
        except ValueError as e:
            raise ValueError(f"XLAKIT_CACHE_REMOTE_OPTIONS is not JSON ({e}); use an object such as "
                             '\'{"endpoint_url": "http://127.0.0.1:8333"}\'') from None
        if not isinstance(storage_options, dict):
            raise ValueError("XLAKIT_CACHE_REMOTE_OPTIONS must be a JSON object of fsspec storage options")
    return url, mode, dict(storage_options)


def parse_options(text: str) -> Any:
    """The JSON value of a storage-options setting (``XLAKIT_CACHE_REMOTE_OPTIONS``, ``--remote-options``), parsed
    with bounded nesting and finite numbers (:func:`xlakit.store.safejson.loads`): ``[`` nested 100,000 deep made
    ``json.loads`` raise RecursionError out of ``enable_cache``. Raises ValueError (UnsafeJson) saying why."""
    from .safejson import loads

    return loads(text)


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


FIRST_READ_BYTES = 256 * 1024  # the first ranged GET of a read: whole small objects, the header of big ones


def read_object(remote: RemoteStore, partition: str, key: str, max_bytes: int, secret: bytes) -> bytes | None:
    """One object for a reader, never more bytes pulled than an authenticated header asks for.

    One ranged GET of the first :data:`FIRST_READ_BYTES` (256 KiB): a smaller object is complete. Of a larger one
    the header is proven first (key id and header MAC with ``secret``, its partition and key these; a longer
    header is read exactly, at most :data:`~xlakit.store.envelope.MAX_HEADER_BYTES`), and only then the rest is
    asked for, exactly to the length the authenticated header gives. So someone who can write the bucket but
    lacks the secret makes a reader pull at most 256 KiB per object (52 + H bytes with a header length field
    that large), not ``max_bytes``. The caller still checks the whole object (:func:`verify_object`).
    Returns None when absent. Raises ObjectRefused (``"<kind>: <reason>"``, kinds as in :func:`verify_object`),
    OSError."""
    from .envelope import MAC_BYTES, MAX_HEADER_BYTES, PREFIX_BYTES, EntryError, check_prefix, read_header

    cap = min(FIRST_READ_BYTES, max_bytes + 1)
    first = remote.read_range(partition, key, 0, cap)
    if first is None or len(first) < cap:
        return first
    if cap == max_bytes + 1:
        raise ObjectRefused(f"corrupt: object is over the {max_bytes}-byte bound")
    need = PREFIX_BYTES + int.from_bytes(first[16:20], "big")
    try:
        if len(first) < need <= PREFIX_BYTES + MAX_HEADER_BYTES:
            check_prefix(first, secret)  # magic, format, key id before the longer header is asked for
            first += remote.read_range(partition, key, len(first), need) or b""
        header = read_header(first, secret)
    except EntryError as e:
        raise ObjectRefused(f"{e.kind}: {e.reason}") from None
    if header.get("partition") != partition or header.get("key") != key:
        raise ObjectRefused(f"mismatch: the object names {header.get('partition')!r}/{header.get('key')!r}")
    payload = header.get("payload_bytes")
    if not isinstance(payload, int) or isinstance(payload, bool) or payload < 0:
        raise ObjectRefused("corrupt: header lacks a valid payload_bytes")
    total = need + MAC_BYTES + payload
    if total > max_bytes:
        raise ObjectRefused(f"corrupt: the header says {total} bytes, over the {max_bytes}-byte bound")
    if total <= len(first):
        return first[:total] if len(first) > total else first
    return first + (remote.read_range(partition, key, len(first), total) or b"")


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
