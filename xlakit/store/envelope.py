"""The on-disk entry format: an authenticated envelope whose header is checked before it is parsed.

Byte layout, format 3 (all offsets in bytes)::

    offset  size  field
    0       8     magic b"XLAKIT\\x00\\x03" (last byte = the format version)
    8       8     key id: HMAC-SHA256(secret, b"xlakit key id")[:8], names the key that signed (see key_id)
    16      4     H = header length, big-endian uint32 (H <= 16 MiB)
    20      32    header MAC: HMAC-SHA256(secret, b"xlakit header\\x00" + bytes[0 : 20] + header)
    52      H     header: UTF-8 JSON object, sorted keys, compact separators
    52+H    32    MAC: HMAC-SHA256(secret, bytes[0 : 52+H] + payload)
    84+H    ...   payload: zstd-compressed bytes, or the bytes as given (header ``compression``)

Format 2 (xlakit before format 3; still read) has the same layout with version byte 2, no ``compression`` field,
and a payload that is always zstd. Format 3 stores a payload that zstd does not shrink by at least
:data:`MIN_COMPRESSION_SAVING` as it is: loading it then costs a read and the MAC, where decompressing it cost
~2.5x a copy of the bytes (measured: 64 MiB of executable bytes, 0.09-0.12 s to decompress at any ratio from 0.1
to 0.93, against 0.04 s to copy them, on the reference machine). xlakit before format 3 reads a format-3 entry
as :class:`StaleEntry` (a miss that leaves it alone) instead of failing on a payload that is not zstd.

Order of checks when reading (:func:`open_envelope`, :func:`read_header`): magic and version, key id
(another key -> :class:`ForeignKeyEntry`, a miss that leaves the entry alone), lengths, header MAC, and only
then the header JSON (:mod:`.safejson`: bounded depth, finite bounded numbers). The payload is checked by the
full MAC before a single byte of it is used or decompressed, and decompression is bounded
(:func:`decompress_bounded`). A format-1 entry (xlakit before the header MAC) is :class:`StaleEntry`.

Integrity fields that :func:`seal` writes into the header:

- ``format_version``: the format (3); ``key_id``: the signing key's id (16 hex characters)
- ``payload_sha256``: hex SHA-256 of the payload as stored
- ``payload_bytes``: payload length as stored, in bytes
- ``raw_bytes``: uncompressed payload length in bytes
- ``compression``: ``"zstd"`` or ``"none"`` (format 3)

Written only when the caller's header carries it (checked here, like the fields above, whenever present):

- ``payload_split``: a raw offset (``0 <= payload_split <= raw_bytes``) where the payload is cut in two: opened, it
  is a :class:`~xlakit.store.split.SplitPayload` (its first ``payload_split`` bytes and the rest, each its own
  ``bytes``), and a payload stored as it is (of 1 MiB or more: :data:`xlakit.store._fs.MIN_CUT_BYTES`) is read from
  the file in those two parts (:func:`payload_cut`), so that the rest (an XLA executable after its pickle frame)
  reaches its reader without ever being copied out of the payload. xlakit before this field ignores it and reads
  the payload as one object, as before.

The MACs catch entries modified on purpose, and any damage: a payload whose full MAC matches is the payload
that was sealed, so its SHA-256 is computed only when the MAC does not match, to tell accidental damage
(:class:`CorruptEntry`, the SHA-256 differs too, with a precise message) from a modification
(:class:`UnauthenticatedEntry`) — one pass over the payload on every good read instead of two.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import re
import struct
from collections.abc import Sequence

import zstandard

from . import safejson
from .entry_errors import CorruptEntry, EntryError, ForeignKeyEntry, StaleEntry, UnauthenticatedEntry
from .split import SplitPayload, from_parts
from .zstd_payload import decompress_bounded, decompress_in_two

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MIN_COMPRESSION_SAVING",
    "READ_VERSIONS",
    "MAX_HEADER_BYTES",
    "PREFIX_BYTES",
    "CorruptEntry",
    "EntryError",
    "ForeignKeyEntry",
    "StaleEntry",
    "UnauthenticatedEntry",
    "check_prefix",
    "decompress_bounded",
    "head_length",
    "key_id",
    "open_envelope",
    "payload_cut",
    "read_header",
    "read_header_file",
    "seal",
]

FORMAT_VERSION = 3
READ_VERSIONS = (2, 3)  # formats this xlakit reads: 2 (payload always zstd) and 3
MAGIC = b"XLAKIT\x00" + bytes([FORMAT_VERSION])
#: :func:`seal` keeps the zstd compression of a payload only when it is at most half the payload's size; else the
#: payload is stored as it is (``compression: "none"``). Decompressing costs ~2.5x a copy of the raw bytes whatever
#: the ratio (module docstring), on every load, while what it saves is disk and transfer: worth it for the
#: executables that shrink to a tenth (XLA:CPU's: 0.09-0.4 measured), not for ones that shrink by a few tens of
#: percent (a 68 MB executable costs ~0.1 s more to load compressed, most of issue 33's 0.15 s margin).
MIN_COMPRESSION_SAVING = 0.5
COMPRESSIONS = ("zstd", "none")
MAX_HEADER_BYTES = 16 * 1024 * 1024
KEY_ID_BYTES = 8
MAC_BYTES = 32
PREFIX_BYTES = 8 + KEY_ID_BYTES + 4 + MAC_BYTES  # 52: everything before the header

_MAGIC_STEM = MAGIC[:-1]
_LENGTH = struct.Struct(">I")
_INTEGRITY_FIELDS = {2: ("format_version", "payload_sha256", "payload_bytes", "raw_bytes"),
                     3: ("format_version", "payload_sha256", "payload_bytes", "raw_bytes", "compression")}
_HEADER_DOMAIN = b"xlakit header\x00"


def key_id(secret: bytes) -> bytes:
    """The 8-byte id of ``secret`` written into every envelope: HMAC-SHA256(secret, b"xlakit key id")[:8].

    It names the key without revealing it, so a reader can tell "signed with another key" (a miss, left in
    place) from "modified" (quarantined). Remembered per secret (a process uses one or two; every envelope
    opened or sealed needs it).
    """
    return _key_id(bytes(secret))


@functools.lru_cache(maxsize=8)
def _key_id(secret: bytes) -> bytes:
    return hmac.new(secret, b"xlakit key id", hashlib.sha256).digest()[:KEY_ID_BYTES]


def _short(hex_digest: str) -> str:
    return hex_digest[:8] + "…"


def _check_prefix(prefix: bytes | memoryview, secret: bytes | None) -> int:
    """Validate magic, version and key id in ``prefix`` (>= 20 bytes); return H. Raises EntryError."""
    n = min(len(prefix), 7)
    if len(prefix) < 8 and bytes(prefix[:n]) == _MAGIC_STEM[:n]:
        raise CorruptEntry(f"truncated: file is {len(prefix)} bytes, shorter than the {PREFIX_BYTES}-byte prefix")
    if bytes(prefix[:7]) != _MAGIC_STEM:
        raise CorruptEntry(f"bad magic {bytes(prefix[:8])!r}: not an xlakit entry")
    version = prefix[7]
    if version not in READ_VERSIONS:
        age = "an older" if version < FORMAT_VERSION else "a newer"
        reads = " and ".join(map(str, READ_VERSIONS))
        raise StaleEntry(f"written by {age} xlakit format (version {version}; this xlakit reads {reads})", version)
    if len(prefix) < 20:
        raise CorruptEntry(f"truncated: file is {len(prefix)} bytes, shorter than the {PREFIX_BYTES}-byte prefix")
    if secret is not None:
        theirs, ours = bytes(prefix[8:16]), key_id(secret)
        if theirs != ours:
            raise ForeignKeyEntry(f"signed with another key (key id {theirs.hex()}, this process {ours.hex()})")
    (length,) = _LENGTH.unpack_from(prefix, 16)
    if length > MAX_HEADER_BYTES:
        raise CorruptEntry(f"header length {length} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    return length


def check_prefix(prefix: bytes, secret: bytes | None) -> int:
    """H, the header length in bytes, from the first 20 bytes of an envelope, after checking its magic, format
    and (with ``secret``) key id; nothing in it is authenticated yet. Raises CorruptEntry, StaleEntry,
    ForeignKeyEntry."""
    return _check_prefix(prefix[:20], secret)


def head_length(prefix: bytes) -> int | None:
    """How many bytes of an envelope come before its payload (52 + H + 32), from its first 20 bytes; None when
    they are not the start of an envelope this xlakit reads (the whole object is then read as one). Nothing is
    authenticated here: a store uses it only to read the payload apart from the head (:func:`open_envelope`'s
    ``payload``), so that a payload stored as it is reaches its reader without a copy."""
    if len(prefix) < 20 or bytes(prefix[:7]) != _MAGIC_STEM or prefix[7] not in READ_VERSIONS:
        return None
    (length,) = _LENGTH.unpack_from(prefix, 16)
    return PREFIX_BYTES + length + MAC_BYTES if length <= MAX_HEADER_BYTES else None


def _header_mac(secret: bytes, fixed: bytes, encoded: bytes) -> bytes:
    mac = hmac.new(secret, _HEADER_DOMAIN, hashlib.sha256)
    mac.update(fixed)
    mac.update(encoded)
    return mac.digest()


def _authenticated_header(view: memoryview | bytes, length: int, secret: bytes | None) -> dict:
    """Check the header MAC (when ``secret`` is given), then parse the header with bounds."""
    end = PREFIX_BYTES + length
    if len(view) < end:
        raise CorruptEntry(f"truncated: file is {len(view)} bytes, header says {PREFIX_BYTES}+{length}+…")
    encoded = view[PREFIX_BYTES:end]
    if secret is not None and not hmac.compare_digest(
        _header_mac(secret, bytes(view[:20]), bytes(encoded)), bytes(view[20:PREFIX_BYTES])
    ):
        raise UnauthenticatedEntry("header MAC mismatch: the header was modified")
    try:
        header = safejson.loads(encoded)
    except safejson.UnsafeJson as e:
        raise CorruptEntry(f"header is not acceptable JSON: {e}") from None
    if not isinstance(header, dict):
        raise CorruptEntry(f"header is a JSON {type(header).__name__}, not an object")
    return header


def _encode_header(header: dict) -> bytes:
    import json

    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def seal(header: dict, raw_payload: bytes, secret: bytes, level: int = 3) -> bytes:
    """The whole envelope (format 3, layout in the module docstring) of ``raw_payload``, compressed with zstd at
    ``level`` when that saves at least :data:`MIN_COMPRESSION_SAVING` of its bytes, else stored as it is.

    ``header`` is copied; the integrity fields are added (overwriting any the caller passed); a ``payload_split``
    it carries is kept (module docstring). ``raw_payload``: bytes, or a :class:`~xlakit.store.split.SplitPayload`.
    Raises TypeError/ValueError if the header is not JSON-serializable or holds NaN/Infinity, ValueError if the
    encoded header exceeds 16 MiB or its ``payload_split`` is not an offset within the payload.
    """
    raw = bytes(raw_payload)
    split = header.get("payload_split")
    if "payload_split" in header and not _offset_within(split, len(raw)):
        raise ValueError(f"header payload_split must be an int from 0 to the payload's {len(raw)} bytes, got "
                         f"{_short_repr(split)}")
    payload, compression = zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw), "zstd"
    if len(payload) > len(raw) * (1 - MIN_COMPRESSION_SAVING):
        payload, compression = raw, "none"
    kid = key_id(secret)
    full = dict(header)
    full.update(
        format_version=FORMAT_VERSION,
        key_id=kid.hex(),
        payload_sha256=hashlib.sha256(payload).hexdigest(),
        payload_bytes=len(payload),
        raw_bytes=len(raw),
        compression=compression,
    )
    encoded = _encode_header(full)
    if len(encoded) > MAX_HEADER_BYTES:
        raise ValueError(f"header of {len(encoded)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    fixed = MAGIC + kid + _LENGTH.pack(len(encoded))
    signed = fixed + _header_mac(secret, fixed, encoded) + encoded
    mac = hmac.new(secret, signed, hashlib.sha256)
    mac.update(payload)
    return b"".join((signed, mac.digest(), payload))


def read_header(blob_or_prefix: bytes, secret: bytes | None = None) -> dict:
    """The header of an envelope, authenticated by its header MAC when ``secret`` is given.

    ``blob_or_prefix`` needs at least the first 52+H bytes. Without ``secret`` the header is parsed with
    bounds but NOT authenticated: use it only to display, never to decide. Raises CorruptEntry,
    UnauthenticatedEntry, ForeignKeyEntry, StaleEntry.
    """
    length = _check_prefix(blob_or_prefix[:20], secret)
    return _authenticated_header(memoryview(blob_or_prefix), length, secret)


def read_header_file(path: str | os.PathLike, secret: bytes | None = None, *, at: int | None = None) -> dict:
    """Like :func:`read_header`, reading only the 52+H-byte prefix of ``path`` (relative to the folder descriptor
    ``at`` when given).

    The file is opened without following a symlink and without blocking (a FIFO is refused), and must be a
    regular file. Raises EntryError, or OSError (including FileNotFoundError) from reading.
    """
    from ._fs import open_regular

    with open_regular(path, at=at) as f:
        prefix = f.read(20)
        length = _check_prefix(prefix, secret)
        rest = f.read(PREFIX_BYTES - 20 + length)
    return _authenticated_header(prefix + rest, length, secret)


_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX16 = re.compile(r"[0-9a-f]{16}")


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _offset_within(value: object, size: int) -> bool:
    return type(value) is int and 0 <= value <= size


def _check_integrity_fields(header: dict, magic_version: int) -> tuple[str, int | None]:
    """The payload's compression (``"zstd"`` or ``"none"``) and ``payload_split`` (None when absent); raise
    CorruptEntry unless every field :func:`open_envelope` uses has its type and format: format_version the int of
    the magic's version, payload_bytes/raw_bytes ints >= 0 (not bool), payload_sha256 64 lowercase hex digits (a
    str), key_id 16 hex digits when present, compression one of :data:`COMPRESSIONS` (format 3; format 2 is always
    zstd), for ``"none"`` payload_bytes equal to raw_bytes, and payload_split, when present, an int from 0 to
    raw_bytes. A header signed by any holder of the secret may carry anything, so nothing reaches
    ``compare_digest`` or arithmetic unchecked."""
    version = header["format_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != magic_version:
        raise CorruptEntry(f"header format_version is {_short_repr(version)}, magic says {magic_version}")
    lengths = (header["payload_bytes"], header["raw_bytes"])
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths):
        raise CorruptEntry(f"header has invalid lengths payload_bytes={_short_repr(lengths[0])} "
                           f"raw_bytes={_short_repr(lengths[1])}")
    sha = header["payload_sha256"]
    if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
        raise CorruptEntry(f"header payload_sha256 is {_short_repr(sha)}, not 64 lowercase hex digits")
    kid = header.get("key_id")
    if kid is not None and not (isinstance(kid, str) and _HEX16.fullmatch(kid)):
        raise CorruptEntry(f"header key_id is {_short_repr(kid)}, not 16 lowercase hex digits")
    compression = header.get("compression", "zstd") if version >= 3 else "zstd"
    if compression not in COMPRESSIONS:  # a str in the tuple: anything else (a list, a dict) is refused
        raise CorruptEntry(f"header compression is {_short_repr(compression)}, not one of {list(COMPRESSIONS)}")
    if compression == "none" and lengths[0] != lengths[1]:
        raise CorruptEntry(f"length mismatch: payload stored uncompressed is {lengths[0]} bytes, header says "
                           f"{lengths[1]} raw bytes")
    split = header.get("payload_split")
    if "payload_split" in header and not _offset_within(split, lengths[1]):
        raise CorruptEntry(f"header payload_split is {_short_repr(split)}, not an offset within the payload's "
                           f"{lengths[1]} raw bytes")
    return compression, split


def payload_cut(head: bytes, secret: bytes) -> int | None:
    """Where a store should cut the payload it reads after ``head`` (an envelope's first 52 + H + 32 bytes,
    :func:`head_length`): the ``payload_split`` of a header that authenticates under ``secret``, for a payload
    stored as it is; else None (read the payload as one object). It only decides where a read stops, so that
    :func:`open_envelope` gets the payload's two parts as the ``bytes`` it returns; :func:`open_envelope` checks
    everything. Never raises."""
    try:
        length = _check_prefix(head[:20], secret)
        header = _authenticated_header(memoryview(head), length, secret)
        compression, split = _check_integrity_fields(header, head[7])
    except (EntryError, KeyError):
        return None
    return split if compression == "none" else None


def open_envelope(blob: bytes, secret: bytes, payload: bytes | Sequence[bytes] | None = None
                  ) -> tuple[dict, bytes | SplitPayload]:
    """Verify an envelope completely and return ``(header, raw_payload)``.

    ``blob`` is the whole envelope, or (with ``payload``) its head, the 52 + H + 32 bytes before the payload
    (:func:`head_length`), with ``payload`` the rest, read apart by the store as one ``bytes`` object or as the
    parts :func:`payload_cut` named: a payload stored as it is is then returned as those very objects, with no
    copy. ``raw_payload`` is a :class:`~xlakit.store.split.SplitPayload` when the header has ``payload_split``,
    else ``bytes``.

    Checks, in order: magic/version, key id, lengths, header MAC, header JSON (bounded), payload length, full
    MAC (and, only when it does not match, the payload SHA-256, to tell damage from a modification), then
    decompression bounded by ``raw_bytes``. Nothing is parsed before its MAC matches and nothing is used or
    decompressed before the full MAC matches.

    Raises CorruptEntry, UnauthenticatedEntry, ForeignKeyEntry or StaleEntry.
    """
    parts = () if payload is None else (payload,) if isinstance(payload, (bytes, bytearray, memoryview)) \
        else tuple(payload)
    if parts and len(blob) != head_length(blob[:20]):  # the file changed between the reads: as one
        blob, parts = b"".join((blob, *parts)), ()
    view = memoryview(blob)
    length = _check_prefix(view[:20], secret)
    body = PREFIX_BYTES + length
    size = len(view) + sum(len(p) for p in parts)
    if size < body + MAC_BYTES:
        raise CorruptEntry(
            f"truncated: file is {size} bytes, header length says at least {PREFIX_BYTES}+{length}+{MAC_BYTES}"
        )
    header = _authenticated_header(view, length, secret)

    version = view[7]
    missing = [k for k in _INTEGRITY_FIELDS[version] if k not in header]
    if missing:
        raise CorruptEntry(f"header lacks {', '.join(missing)}")
    compression, split = _check_integrity_fields(header, version)
    payload_bytes, raw_bytes, want_sha = header["payload_bytes"], header["raw_bytes"], header["payload_sha256"]
    expected = body + MAC_BYTES + payload_bytes
    if size != expected:
        what = "truncated" if size < expected else "trailing bytes"
        raise CorruptEntry(
            f"{what}: file is {size} bytes, header says {PREFIX_BYTES}+{length}+{MAC_BYTES}+{payload_bytes}"
        )

    stored = parts or (view[body + MAC_BYTES :],)
    mac = hmac.new(secret, view[:body], hashlib.sha256)
    for part in stored:
        mac.update(part)
    if not hmac.compare_digest(mac.digest(), bytes(view[body : body + MAC_BYTES])):
        sha = hashlib.sha256()
        for part in stored:
            sha.update(part)
        got_sha = sha.hexdigest()
        if not hmac.compare_digest(got_sha, want_sha):
            raise CorruptEntry(f"payload SHA-256 mismatch (expected {_short(want_sha)}, got {_short(got_sha)})")
        raise UnauthenticatedEntry("HMAC mismatch: the entry was modified")

    if compression == "none":
        return header, from_parts(stored, split)
    whole = stored[0] if len(stored) == 1 else b"".join(stored)  # a store cuts only payloads stored as they are
    try:
        declared = zstandard.frame_content_size(whole)
    except zstandard.ZstdError as e:
        raise CorruptEntry(f"zstd decompression failed: {e}") from None
    if declared != -1 and declared != raw_bytes:
        raise CorruptEntry(f"length mismatch: zstd frame says {declared} bytes, header says {raw_bytes}")
    if split is not None:  # decompressed straight into its two parts: the large one is never copied out
        head, tail = decompress_in_two(whole, raw_bytes, split)
        if len(head) + len(tail) != raw_bytes:
            raise CorruptEntry(f"length mismatch: decompressed {len(head) + len(tail)} bytes, header says "
                               f"{raw_bytes}")
        return header, SplitPayload(head, tail)
    raw = decompress_bounded(whole, raw_bytes)  # the authenticated view itself: no copy of the payload
    if len(raw) != raw_bytes:
        raise CorruptEntry(f"length mismatch: decompressed {len(raw)} bytes, header says {raw_bytes}")
    return header, raw
