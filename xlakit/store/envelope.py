"""The on-disk entry format: an authenticated, compressed envelope.

Byte layout (all offsets in bytes)::

    offset  size  field
    0       8     magic b"XLAKIT\\x00\\x01" (last byte = FORMAT_VERSION)
    8       4     H = header length, big-endian uint32 (H <= 16 MiB)
    12      H     header: UTF-8 JSON object, sorted keys, compact separators
    12+H    32    HMAC-SHA256(secret, bytes[0 : 12+H] + payload)
    44+H    ...   payload: zstd-compressed bytes

Integrity fields that :func:`seal` writes into the header:

- ``format_version``: ``FORMAT_VERSION``
- ``payload_sha256``: hex SHA-256 of the *compressed* payload
- ``payload_bytes``: compressed payload length in bytes
- ``raw_bytes``: uncompressed payload length in bytes

The SHA-256 catches accidental damage with a precise message; the HMAC
catches entries written with another secret or modified on purpose.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct

import zstandard

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "EntryError",
    "CorruptEntry",
    "UnauthenticatedEntry",
    "seal",
    "read_header",
    "read_header_file",
    "open_envelope",
]

FORMAT_VERSION = 1
MAGIC = b"XLAKIT\x00" + bytes([FORMAT_VERSION])
MAX_HEADER_BYTES = 16 * 1024 * 1024
PREFIX_BYTES = 12  # magic + header length
MAC_BYTES = 32

_MAGIC_STEM = MAGIC[:-1]
_LENGTH = struct.Struct(">I")
_INTEGRITY_FIELDS = ("format_version", "payload_sha256", "payload_bytes", "raw_bytes")


class EntryError(Exception):
    """An entry that must not be used.

    Attributes:
        reason: short human-readable explanation.
        kind: machine-readable category ("corrupt" or "unauthenticated").
    """

    kind = "error"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CorruptEntry(EntryError):
    """Damaged entry: bad magic/version, truncated, bad header, SHA or length mismatch."""

    kind = "corrupt"


class UnauthenticatedEntry(EntryError):
    """HMAC mismatch: written with a different secret, or modified."""

    kind = "unauthenticated"


def _short(hex_digest: str) -> str:
    return hex_digest[:8] + "…"


def _header_length(prefix: bytes) -> int:
    """Validate magic and version in ``prefix`` (>= 12 bytes); return H."""
    if len(prefix) < PREFIX_BYTES:
        raise CorruptEntry(f"truncated: file is {len(prefix)} bytes, shorter than the {PREFIX_BYTES}-byte prefix")
    if prefix[:7] != _MAGIC_STEM:
        raise CorruptEntry(f"bad magic {bytes(prefix[:8])!r}: not an xlakit entry")
    if prefix[7] != FORMAT_VERSION:
        raise CorruptEntry(f"unsupported format version {prefix[7]} (this xlakit reads {FORMAT_VERSION})")
    (length,) = _LENGTH.unpack_from(prefix, 8)
    if length > MAX_HEADER_BYTES:
        raise CorruptEntry(f"header length {length} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    return length


def _parse_header(raw: bytes) -> dict:
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptEntry(f"header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise CorruptEntry(f"header is a JSON {type(header).__name__}, not an object")
    return header


def _encode_header(header: dict) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _mac(secret: bytes, signed_prefix: bytes, payload: bytes) -> bytes:
    mac = hmac.new(secret, signed_prefix, hashlib.sha256)
    mac.update(payload)
    return mac.digest()


def seal(header: dict, raw_payload: bytes, secret: bytes, level: int = 3) -> bytes:
    """Compress ``raw_payload`` with zstd and return the whole envelope.

    ``header`` is copied; the integrity fields are added (overwriting any the
    caller passed). Raises TypeError/ValueError if the header is not
    JSON-serializable, ValueError if the encoded header exceeds 16 MiB.
    """
    raw = bytes(raw_payload)
    payload = zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)
    full = dict(header)
    full.update(
        format_version=FORMAT_VERSION,
        payload_sha256=hashlib.sha256(payload).hexdigest(),
        payload_bytes=len(payload),
        raw_bytes=len(raw),
    )
    encoded = _encode_header(full)
    if len(encoded) > MAX_HEADER_BYTES:
        raise ValueError(f"header of {len(encoded)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    signed = MAGIC + _LENGTH.pack(len(encoded)) + encoded
    return b"".join((signed, _mac(secret, signed, payload), payload))


def read_header(blob_or_prefix: bytes) -> dict:
    """Parse magic and header only, without any integrity check (for listings).

    ``blob_or_prefix`` needs at least the first 12+H bytes. Raises CorruptEntry.
    """
    length = _header_length(blob_or_prefix)
    end = PREFIX_BYTES + length
    if len(blob_or_prefix) < end:
        raise CorruptEntry(f"truncated: file is {len(blob_or_prefix)} bytes, header says {PREFIX_BYTES}+{length}+…")
    return _parse_header(blob_or_prefix[PREFIX_BYTES:end])


def read_header_file(path: str | os.PathLike) -> dict:
    """Like :func:`read_header`, reading only the 12+H-byte prefix of ``path``.

    Raises CorruptEntry, or OSError (including FileNotFoundError) from reading.
    """
    with open(path, "rb") as f:
        prefix = f.read(PREFIX_BYTES)
        length = _header_length(prefix)
        raw = f.read(length)
    if len(raw) < length:
        size = PREFIX_BYTES + len(raw)
        raise CorruptEntry(f"truncated: file is {size} bytes, header says {PREFIX_BYTES}+{length}+…")
    return _parse_header(raw)


def open_envelope(blob: bytes, secret: bytes) -> tuple[dict, bytes]:
    """Verify ``blob`` completely and return ``(header, raw_payload)``.

    Checks, in order: magic/version, lengths, header JSON, payload SHA-256,
    HMAC, then decompression (bounded by ``raw_bytes``) and its length.
    Nothing is decompressed before the HMAC matches.

    Raises CorruptEntry or UnauthenticatedEntry.
    """
    view = memoryview(blob)
    length = _header_length(view[:PREFIX_BYTES])
    body = PREFIX_BYTES + length
    if len(view) < body + MAC_BYTES:
        raise CorruptEntry(
            f"truncated: file is {len(view)} bytes, header length says at least {PREFIX_BYTES}+{length}+{MAC_BYTES}"
        )
    header = _parse_header(view[PREFIX_BYTES:body])

    missing = [k for k in _INTEGRITY_FIELDS if k not in header]
    if missing:
        raise CorruptEntry(f"header lacks {', '.join(missing)}")
    if header["format_version"] != FORMAT_VERSION:
        raise CorruptEntry(f"header says format version {header['format_version']!r}, magic says {FORMAT_VERSION}")
    payload_bytes, raw_bytes, want_sha = header["payload_bytes"], header["raw_bytes"], header["payload_sha256"]
    if not (isinstance(payload_bytes, int) and isinstance(raw_bytes, int) and payload_bytes >= 0 and raw_bytes >= 0):
        raise CorruptEntry(f"header has invalid lengths payload_bytes={payload_bytes!r} raw_bytes={raw_bytes!r}")
    expected = body + MAC_BYTES + payload_bytes
    if len(view) != expected:
        what = "truncated" if len(view) < expected else "trailing bytes"
        raise CorruptEntry(
            f"{what}: file is {len(view)} bytes, header says {PREFIX_BYTES}+{length}+{MAC_BYTES}+{payload_bytes}"
        )

    payload = view[body + MAC_BYTES :]
    got_sha = hashlib.sha256(payload).hexdigest()
    if not isinstance(want_sha, str) or not hmac.compare_digest(got_sha, want_sha):
        raise CorruptEntry(f"payload SHA-256 mismatch (expected {_short(str(want_sha))}, got {_short(got_sha)})")

    if not hmac.compare_digest(_mac(secret, view[:body], payload), view[body : body + MAC_BYTES]):
        raise UnauthenticatedEntry("HMAC mismatch: written with a different secret or modified")

    # A frame's declared content size overrides max_output_size, so check it first.
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as e:
        raise CorruptEntry(f"zstd decompression failed: {e}") from None
    if declared != -1 and declared != raw_bytes:
        raise CorruptEntry(f"length mismatch: zstd frame says {declared} bytes, header says {raw_bytes}")
    try:
        raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw_bytes)
    except zstandard.ZstdError as e:
        raise CorruptEntry(f"zstd decompression failed: {e}") from None
    if len(raw) != raw_bytes:
        raise CorruptEntry(f"length mismatch: decompressed {len(raw)} bytes, header says {raw_bytes}")
    return header, raw
