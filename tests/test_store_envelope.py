"""The entry envelope and the HMAC secret (no JAX)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import struct
import threading
import time

import pytest
import zstandard

from xlakit.store import (
    FORMAT_VERSION,
    MAGIC,
    CorruptEntry,
    EntryError,
    SecretUnavailable,
    UnauthenticatedEntry,
    load_secret,
    open_envelope,
    read_header,
    read_header_file,
    seal,
    secret_location,
)

SECRET = b"s" * 32
HEADER = {"key": "jit_f-abc", "name": "f", "compile_s": 1.5, "environment": {"jaxlib_version": "0.10.2"}}


def _assemble(header: dict, payload: bytes, secret: bytes = SECRET) -> bytes:
    """Build an envelope by hand, so tests can sign arbitrary (bad) contents."""
    encoded = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    signed = MAGIC + struct.pack(">I", len(encoded)) + encoded
    return signed + hmac.new(secret, signed + payload, hashlib.sha256).digest() + payload


def _split(blob: bytes) -> tuple[dict, int, bytes]:
    (length,) = struct.unpack(">I", blob[8:12])
    return json.loads(blob[12 : 12 + length]), length, blob[44 + length :]


def _integrity(payload: bytes, raw_bytes: int) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
        "raw_bytes": raw_bytes,
    }


# -- envelope ---------------------------------------------------------------


def test_round_trip_and_layout():
    raw = b"executable bytes " * 1000
    blob = seal(HEADER, raw, SECRET)
    assert blob[:8] == MAGIC == b"XLAKIT\x00\x01"
    header, length, payload = _split(blob)
    encoded = blob[12 : 12 + length]
    assert encoded == json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    assert header["format_version"] == FORMAT_VERSION == 1
    assert header["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    assert header["payload_bytes"] == len(payload) < len(raw)
    assert header["raw_bytes"] == len(raw)
    assert zstandard.ZstdDecompressor().decompress(payload) == raw
    assert blob[12 + length : 44 + length] == hmac.new(SECRET, blob[: 12 + length] + payload, hashlib.sha256).digest()

    got_header, got_raw = open_envelope(blob, SECRET)
    assert got_raw == raw
    assert got_header == header
    assert {k: got_header[k] for k in HEADER} == HEADER
    assert "payload_sha256" not in HEADER  # the caller's dict is not modified


def test_seal_overwrites_integrity_fields_and_handles_empty_payload():
    blob = seal({"raw_bytes": 99, "payload_sha256": "bogus"}, b"", SECRET)
    header, raw = open_envelope(blob, SECRET)
    assert raw == b""
    assert header["raw_bytes"] == 0 and header["payload_sha256"] != "bogus"


def test_seal_rejects_unserializable_header():
    with pytest.raises(TypeError):
        seal({"x": object()}, b"abc", SECRET)


def test_read_header_needs_only_the_prefix(tmp_path):
    blob = seal(HEADER, os.urandom(50_000), SECRET)
    _, length, _ = _split(blob)
    assert read_header(blob[: 12 + length])["key"] == "jit_f-abc"
    with pytest.raises(CorruptEntry, match="truncated"):
        read_header(blob[: 12 + length - 1])
    path = tmp_path / "e.xlk"
    path.write_bytes(blob)
    assert read_header_file(path) == read_header(blob)
    path.write_bytes(blob[:20])
    with pytest.raises(CorruptEntry, match="truncated"):
        read_header_file(path)
    with pytest.raises(FileNotFoundError):
        read_header_file(tmp_path / "missing.xlk")


def test_flipped_payload_bit_is_a_sha_mismatch():
    blob = bytearray(seal(HEADER, os.urandom(4000), SECRET))
    blob[-10] ^= 0x01
    with pytest.raises(CorruptEntry) as info:
        open_envelope(bytes(blob), SECRET)
    assert info.value.kind == "corrupt"
    assert info.value.reason.startswith("payload SHA-256 mismatch (expected ")
    assert ", got " in info.value.reason


def test_flipped_header_bit_is_rejected():
    blob = seal(HEADER, b"payload", SECRET)
    _, length, _ = _split(blob)
    offset = 12 + bytes(blob[12 : 12 + length]).index(b"jit_f")
    bad = bytearray(blob)
    bad[offset] ^= 0x01  # "jit_f" -> "kit_f": still valid JSON
    with pytest.raises(UnauthenticatedEntry) as info:
        open_envelope(bytes(bad), SECRET)
    assert info.value.reason == "HMAC mismatch: written with a different secret or modified"
    bad = bytearray(blob)
    bad[12] ^= 0xFF  # breaks the JSON itself
    with pytest.raises((CorruptEntry, UnauthenticatedEntry)):
        open_envelope(bytes(bad), SECRET)


def test_truncation_is_reported_with_lengths():
    blob = seal(HEADER, os.urandom(8000), SECRET)
    _, length, payload = _split(blob)
    with pytest.raises(CorruptEntry, match=r"^truncated: file is 100 bytes"):
        open_envelope(blob[:100], SECRET)
    with pytest.raises(CorruptEntry) as info:
        open_envelope(blob[:-1], SECRET)
    assert info.value.reason == (
        f"truncated: file is {len(blob) - 1} bytes, header says 12+{length}+32+{len(payload)}"
    )
    with pytest.raises(CorruptEntry, match="trailing bytes"):
        open_envelope(blob + b"x", SECRET)
    for cut in (0, 5, 11):
        with pytest.raises(CorruptEntry, match="truncated"):
            open_envelope(blob[:cut], SECRET)


def test_wrong_secret_is_unauthenticated():
    blob = seal(HEADER, b"payload", SECRET)
    with pytest.raises(UnauthenticatedEntry) as info:
        open_envelope(blob, b"another secret")
    assert info.value.kind == "unauthenticated"
    assert isinstance(info.value, EntryError)


def test_tampered_payload_with_recomputed_sha_is_unauthenticated():
    blob = seal(HEADER, b"honest payload", SECRET)
    header, _, _ = _split(blob)
    evil = zstandard.ZstdCompressor().compress(b"evil payload!!")
    header.update(_integrity(evil, 14))
    forged = _assemble(header, evil, secret=b"attacker does not know the secret")
    with pytest.raises(UnauthenticatedEntry):
        open_envelope(forged, SECRET)


def test_bad_magic_version_and_header_length():
    blob = seal(HEADER, b"payload", SECRET)
    with pytest.raises(CorruptEntry, match="bad magic"):
        open_envelope(b"NOTXLAKI" + blob[8:], SECRET)
    with pytest.raises(CorruptEntry, match="unsupported format version 2"):
        open_envelope(blob[:7] + b"\x02" + blob[8:], SECRET)
    with pytest.raises(CorruptEntry, match="exceeds"):
        read_header(MAGIC + struct.pack(">I", 16 * 1024 * 1024 + 1) + b"{}")


def test_header_must_be_a_json_object_with_integrity_fields():
    with pytest.raises(CorruptEntry, match="not an object"):
        read_header(MAGIC + struct.pack(">I", 2) + b"[]")
    with pytest.raises(CorruptEntry, match="not valid UTF-8 JSON"):
        read_header(MAGIC + struct.pack(">I", 2) + b"{x")
    with pytest.raises(CorruptEntry, match="lacks payload_sha256"):
        open_envelope(_assemble({"format_version": 1, "payload_bytes": 0, "raw_bytes": 0}, b""), SECRET)


def test_signed_but_undecompressable_payload_is_corrupt():
    garbage = b"not a zstd frame at all"
    with pytest.raises(CorruptEntry, match="decompression failed"):
        open_envelope(_assemble(_integrity(garbage, 10), garbage), SECRET)


def test_signed_payload_with_wrong_raw_length_is_corrupt():
    payload = zstandard.ZstdCompressor().compress(b"x" * 1000)
    with pytest.raises(CorruptEntry, match="length mismatch"):
        open_envelope(_assemble(_integrity(payload, 10), payload), SECRET)
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 1000)
    with pytest.raises(CorruptEntry):
        open_envelope(_assemble(_integrity(no_size, 10), no_size), SECRET)
    header, raw = open_envelope(_assemble(_integrity(no_size, 1000), no_size), SECRET)
    assert raw == b"x" * 1000


# -- secret -----------------------------------------------------------------


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    path = tmp_path / "config" / "xlakit"
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(path))
    return path


def test_secret_file_is_created_private_and_reused(config_dir):
    first = load_secret()
    path = config_dir / "secret"
    assert secret_location() == str(path)
    assert len(first) == 64 and bytes.fromhex(first.decode())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    assert path.read_bytes() == first
    assert load_secret() == first
    assert load_secret(config_dir) == first


def test_explicit_config_dir_wins_over_env(config_dir, tmp_path):
    other = tmp_path / "other"
    assert load_secret(other) != load_secret()
    assert secret_location(other) == str(other / "secret")


def test_env_secret_overrides_file(config_dir, monkeypatch):
    file_secret = load_secret()
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "fleet-secret")
    assert load_secret() == b"fleet-secret"
    assert secret_location() == "env:XLAKIT_CACHE_SECRET"
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "")
    assert load_secret() == file_secret


def test_loose_secret_permissions_are_tightened(config_dir):
    load_secret()
    path = config_dir / "secret"
    os.chmod(path, 0o644)
    load_secret()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_unwritable_config_dir_raises_secret_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    blocker = tmp_path / "afile"
    blocker.write_text("")
    with pytest.raises(SecretUnavailable) as info:
        load_secret(blocker / "config")
    assert isinstance(info.value, OSError)
    assert "XLAKIT_CACHE_SECRET" in str(info.value) and "XLAKIT_CONFIG_DIR" in str(info.value)


def test_racing_creator_empty_file_is_waited_for(config_dir):
    config_dir.mkdir(parents=True)
    path = config_dir / "secret"
    path.write_bytes(b"")  # another process has O_EXCL-created it but not written yet

    def finish():
        time.sleep(0.1)
        path.write_bytes(b"ab" * 32)

    t = threading.Thread(target=finish)
    t.start()
    try:
        assert load_secret() == b"ab" * 32
    finally:
        t.join()


def test_concurrent_first_use_agrees(config_dir):
    results = []
    threads = [threading.Thread(target=lambda: results.append(load_secret())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len(set(results)) == 1
