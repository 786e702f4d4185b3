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
    ForeignKeyEntry,
    SecretUnavailable,
    StaleEntry,
    UnauthenticatedEntry,
    head_length,
    key_id,
    load_secret,
    open_envelope,
    read_header,
    read_header_file,
    seal,
    secret_location,
)

SECRET = b"s" * 32
HEADER = {"key": "jit_f-abc", "name": "f", "compile_s": 1.5, "environment": {"jaxlib_version": "0.10.2"}}


def _assemble(header: dict | bytes, payload: bytes, secret: bytes = SECRET, magic: bytes = MAGIC) -> bytes:
    """Build an envelope by hand, so tests can sign arbitrary (bad) contents with the real key."""
    encoded = (header if isinstance(header, bytes)
               else json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    fixed = magic + key_id(secret) + struct.pack(">I", len(encoded))
    header_mac = hmac.new(secret, b"xlakit header\x00" + fixed + encoded, hashlib.sha256).digest()
    signed = fixed + header_mac + encoded
    return signed + hmac.new(secret, signed + payload, hashlib.sha256).digest() + payload


def _split(blob: bytes) -> tuple[dict, int, bytes]:
    (length,) = struct.unpack(">I", blob[16:20])
    return json.loads(blob[52 : 52 + length]), length, blob[84 + length :]


def _integrity(payload: bytes, raw_bytes: int, compression: str = "zstd") -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "payload_bytes": len(payload),
        "raw_bytes": raw_bytes,
        "compression": compression,
    }


# -- envelope ---------------------------------------------------------------


def test_round_trip_and_layout():
    raw = b"executable bytes " * 1000
    blob = seal(HEADER, raw, SECRET)
    assert blob[:8] == MAGIC == b"XLAKIT\x00\x03"
    assert blob[8:16] == key_id(SECRET) == hmac.new(SECRET, b"xlakit key id", hashlib.sha256).digest()[:8]
    header, length, payload = _split(blob)
    encoded = blob[52 : 52 + length]
    assert encoded == json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    assert blob[20:52] == hmac.new(SECRET, b"xlakit header\x00" + blob[:20] + encoded, hashlib.sha256).digest()
    assert header["format_version"] == FORMAT_VERSION == 3 and header["key_id"] == key_id(SECRET).hex()
    assert header["compression"] == "zstd"
    assert header["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    assert header["payload_bytes"] == len(payload) < len(raw)
    assert header["raw_bytes"] == len(raw)
    assert zstandard.ZstdDecompressor().decompress(payload) == raw
    assert blob[52 + length : 84 + length] == hmac.new(SECRET, blob[: 52 + length] + payload, hashlib.sha256).digest()

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
    assert read_header(blob[: 52 + length], SECRET)["key"] == "jit_f-abc"
    with pytest.raises(CorruptEntry, match="truncated"):
        read_header(blob[: 52 + length - 1], SECRET)
    path = tmp_path / "e.xlk"
    path.write_bytes(blob)
    assert read_header_file(path, SECRET) == read_header(blob, SECRET) == read_header(blob)
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
    offset = 52 + bytes(blob[52 : 52 + length]).index(b"jit_f")
    bad = bytearray(blob)
    bad[offset] ^= 0x01  # "jit_f" -> "kit_f": still valid JSON
    with pytest.raises(UnauthenticatedEntry) as info:
        open_envelope(bytes(bad), SECRET)
    assert info.value.reason == "header MAC mismatch: the header was modified"
    with pytest.raises(UnauthenticatedEntry):
        read_header(bytes(bad), SECRET)  # listings authenticate the header too
    bad = bytearray(blob)
    bad[52] ^= 0xFF  # breaks the JSON itself: refused by the MAC before any parsing
    with pytest.raises(UnauthenticatedEntry):
        open_envelope(bytes(bad), SECRET)


def test_truncation_is_reported_with_lengths():
    blob = seal(HEADER, os.urandom(8000), SECRET)
    _, length, payload = _split(blob)
    with pytest.raises(CorruptEntry, match=r"^truncated: file is 100 bytes"):
        open_envelope(blob[:100], SECRET)
    with pytest.raises(CorruptEntry) as info:
        open_envelope(blob[:-1], SECRET)
    assert info.value.reason == (
        f"truncated: file is {len(blob) - 1} bytes, header says 52+{length}+32+{len(payload)}"
    )
    with pytest.raises(CorruptEntry, match="trailing bytes"):
        open_envelope(blob + b"x", SECRET)
    for cut in (0, 5, 11, 19, 51):
        with pytest.raises(CorruptEntry, match="truncated"):
            open_envelope(blob[:cut], SECRET)


def test_another_key_is_named_not_called_tampering():
    """Two users sharing a folder: an entry signed with another key is a 'foreign' miss naming both key ids,
    not an HMAC failure (which would quarantine the other user's entry)."""
    blob = seal(HEADER, b"payload", SECRET)
    other = b"another secret of enough length"
    with pytest.raises(ForeignKeyEntry) as info:
        open_envelope(blob, other)
    assert info.value.kind == "foreign" and isinstance(info.value, EntryError)
    assert info.value.reason == (f"signed with another key (key id {key_id(SECRET).hex()}, "
                                 f"this process {key_id(other).hex()})")
    with pytest.raises(ForeignKeyEntry):
        read_header(blob, other)


def test_same_key_id_with_forged_macs_is_unauthenticated():
    """Tampering under this process's key id (the id copied, MACs made with a guessed key) is modification."""
    blob = bytearray(_assemble(HEADER, b"x", secret=b"attacker-guess-of-the-secret!!"))
    blob[8:16] = key_id(SECRET)
    with pytest.raises(UnauthenticatedEntry, match="header MAC mismatch"):
        open_envelope(bytes(blob), SECRET)


def test_tampered_payload_with_recomputed_sha_is_unauthenticated():
    blob = seal(HEADER, b"honest payload", SECRET)
    header, _, _ = _split(blob)
    evil = zstandard.ZstdCompressor().compress(b"evil payload!!")
    header.update(_integrity(evil, 14))
    forged = bytearray(_assemble(header, evil, secret=b"attacker does not know the secret"))
    forged[8:16] = key_id(SECRET)  # claims to be signed with the victim's key
    with pytest.raises(UnauthenticatedEntry):
        open_envelope(bytes(forged), SECRET)


def test_bad_magic_version_and_header_length():
    blob = seal(HEADER, b"payload", SECRET)
    with pytest.raises(CorruptEntry, match="bad magic"):
        open_envelope(b"NOTXLAKI" + blob[8:], SECRET)
    with pytest.raises(StaleEntry, match=r"written by an older xlakit format \(version 1; this xlakit reads 2 and 3\)"):
        open_envelope(blob[:7] + b"\x01" + blob[8:], SECRET)
    with pytest.raises(StaleEntry, match="newer xlakit format"):
        open_envelope(blob[:7] + b"\x04" + blob[8:], SECRET)
    with pytest.raises(CorruptEntry, match="exceeds"):
        read_header(MAGIC + key_id(SECRET) + struct.pack(">I", 16 * 1024 * 1024 + 1) + bytes(32) + b"{}", SECRET)


def test_round_one_entry_is_a_clean_stale_miss():
    """An entry of the first format (header JSON before its MAC) is never parsed: a stale miss."""
    hdr = b"[" * 100_000 + b"]" * 100_000
    old = b"XLAKIT\x00\x01" + struct.pack(">I", len(hdr)) + hdr + bytes(32)
    with pytest.raises(StaleEntry) as info:
        open_envelope(old, SECRET)
    assert info.value.kind == "stale" and info.value.version == 1


def test_header_must_be_a_json_object_with_integrity_fields():
    with pytest.raises(CorruptEntry, match="not an object"):
        read_header(_assemble(b"[]", b""), SECRET)
    with pytest.raises(CorruptEntry, match="not valid UTF-8 JSON"):
        read_header(_assemble(b"{x", b""), SECRET)
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
    _, raw = open_envelope(_assemble(_integrity(no_size, 1000), no_size), SECRET)
    assert raw == b"x" * 1000


def test_payload_zstd_barely_shrinks_is_stored_as_is_and_returned_without_a_copy():
    """Format 3: an incompressible payload is stored uncompressed (decompressing it cost ~2.5x a copy), recorded
    in the authenticated header; read apart from the head (a store's split read), it is returned as that object."""
    raw = os.urandom(100_000)
    blob = seal(HEADER, raw, SECRET)
    header, length, payload = _split(blob)
    assert header["compression"] == "none" and header["payload_bytes"] == header["raw_bytes"] == len(raw)
    assert payload == raw and header["payload_sha256"] == hashlib.sha256(raw).hexdigest()
    assert open_envelope(blob, SECRET)[1] == raw
    head, rest = blob[: head_length(blob[:20])], blob[head_length(blob[:20]):]
    assert len(head) == 84 + length and rest == raw
    got_header, got = open_envelope(head, SECRET, rest)
    assert got is rest and got_header == header
    assert seal(HEADER, b"a" * 100_000, SECRET)[7] == 3  # compressible: still zstd, also format 3
    assert read_header(seal(HEADER, b"a" * 100_000, SECRET))["compression"] == "zstd"


def test_uncompressed_payload_damage_and_tampering_are_told_apart():
    raw = os.urandom(5000)
    damaged = bytearray(seal(HEADER, raw, SECRET))
    damaged[-10] ^= 0x01
    with pytest.raises(CorruptEntry, match="SHA-256 mismatch"):
        open_envelope(bytes(damaged), SECRET)
    head_len = head_length(bytes(damaged[:20]))
    with pytest.raises(CorruptEntry, match="SHA-256 mismatch"):  # read apart: the same verdict
        open_envelope(bytes(damaged[:head_len]), SECRET, bytes(damaged[head_len:]))
    header, _, _ = _split(seal(HEADER, raw, SECRET))
    evil = os.urandom(5000)
    header.update(_integrity(evil, 5000, "none"))
    forged = bytearray(_assemble(header, evil, secret=b"attacker does not know the secret"))
    forged[8:16] = key_id(SECRET)
    with pytest.raises(UnauthenticatedEntry):
        open_envelope(bytes(forged), SECRET)


def test_format_3_compression_field_is_checked():
    raw = os.urandom(64)
    with pytest.raises(CorruptEntry, match="lacks compression"):
        open_envelope(_assemble({k: v for k, v in _integrity(raw, 64, "none").items() if k != "compression"}, raw),
                      SECRET)
    for bad in ("lz4", ["none"], None):
        with pytest.raises(CorruptEntry, match="header compression is"):
            open_envelope(_assemble(_integrity(raw, 64, bad), raw), SECRET)
    with pytest.raises(CorruptEntry, match="length mismatch"):  # stored as is, yet lengths that differ
        open_envelope(_assemble(_integrity(raw, 65, "none"), raw), SECRET)
    assert open_envelope(_assemble(_integrity(raw, 64, "none"), raw), SECRET)[1] == raw
    for bad in (-1, 65, True, "3", None):  # payload_split, when present: an offset within the payload
        with pytest.raises(CorruptEntry, match="payload_split is"):
            open_envelope(_assemble(dict(_integrity(raw, 64, "none"), payload_split=bad), raw), SECRET)
    whole = open_envelope(_assemble(dict(_integrity(raw, 64, "none"), payload_split=5), raw), SECRET)[1]
    assert (whole.head, whole.tail) == (raw[:5], raw[5:])  # a whole object (a remote's): cut with a copy


def test_format_2_entries_of_earlier_xlakit_still_open():
    """Entries written before format 3 (version byte 2, no compression field, zstd payload) are read as before."""
    raw = b"an executable from before format 3 " * 100
    payload = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    header = dict(HEADER, **_integrity(payload, len(raw)))
    header["format_version"] = 2
    del header["compression"]
    old = _assemble(header, payload, magic=b"XLAKIT\x00\x02")
    assert open_envelope(old, SECRET) == (header, raw)
    assert head_length(old[:20]) == 84 + len(json.dumps(header, sort_keys=True, separators=(",", ":")))
    header["format_version"] = 3  # a header that disagrees with its magic
    with pytest.raises(CorruptEntry, match="format_version is 3, magic says 2"):
        open_envelope(_assemble(header, payload, magic=b"XLAKIT\x00\x02"), SECRET)


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
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", "fleet-secret-of-the-team")
    assert load_secret() == b"fleet-secret-of-the-team"
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


def test_decompression_is_bounded():
    """A 12 kB zstd frame declaring 384 MiB (or hiding its size) is refused at the bound, never expanded."""
    from xlakit.store import decompress_bounded

    n = 384 * 2**20
    c = zstandard.ZstdCompressor(level=1, write_content_size=True).compressobj(size=n)
    bomb = b"".join(c.compress(b"\0" * 2**20) for _ in range(n // 2**20)) + c.flush()
    assert len(bomb) < 64_000
    with pytest.raises(CorruptEntry, match=r"declares 402653184 bytes, over the 1048576-byte bound"):
        decompress_bounded(bomb, 2**20)
    hidden = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (4 * 2**20))
    with pytest.raises(CorruptEntry, match="more than the 1048576-byte bound"):
        decompress_bounded(hidden, 2**20)
    assert decompress_bounded(hidden, 4 * 2**20) == b"\0" * (4 * 2**20)
    with pytest.raises(CorruptEntry, match="zstd decompression failed"):
        decompress_bounded(b"not zstd", 100)


def test_compressed_split_payload_is_decompressed_into_its_two_parts_within_the_bound():
    """A compressed payload with payload_split opens as two objects the decompressor wrote (no cut of one large
    object); a frame that decompresses past the header's size is refused, with or without a declared size."""
    from xlakit.store.envelope import open_envelope, seal
    from xlakit.store.split import SplitPayload
    from xlakit.store.zstd_payload import decompress_in_two

    raw = b"head" + b"executable bytes " * 4096
    header, got = open_envelope(seal({"payload_split": 4}, raw, SECRET), SECRET)
    assert header["compression"] == "zstd" and isinstance(got, SplitPayload)
    assert (got.head, got.tail) == (b"head", raw[4:])
    declared = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert decompress_in_two(streamed, len(raw), 4) == (b"head", raw[4:])
    for frame in (declared, streamed):
        with pytest.raises(CorruptEntry, match="(more than|declares 69636 bytes, over) the 100-byte bound"):
            decompress_in_two(frame, 100, 4)
    with pytest.raises(CorruptEntry, match="zstd decompression failed"):
        decompress_in_two(b"not zstd at all", len(raw), 4)


def test_a_payload_is_one_zstd_frame_and_no_declared_size_outgrows_memory():
    """Found by a red team holding the secret: a second frame after the first meant different bytes with and
    without payload_split (one reader read across frames, the other ignored the rest), and a header naming 2**63
    bytes over a frame that declares no size raised OverflowError out of LocalStore.get instead of a corrupt
    entry. Both are CorruptEntry now, on every path."""
    a, b = os.urandom(1000), os.urandom(1000)
    nosize = zstandard.ZstdCompressor(write_content_size=False)
    two_frames = nosize.compress(a) + nosize.compress(b)
    for split in ({}, {"payload_split": 10}):
        blob = _assemble({**HEADER, **_integrity(two_frames, 2000), **split}, two_frames)
        with pytest.raises(CorruptEntry, match="not one zstd frame: 1009 bytes follow it"):
            open_envelope(blob, SECRET)
    one = nosize.compress(a)
    for raw_bytes in (2**63 - 1, 2**40):
        for split in ({}, {"payload_split": 0}, {"payload_split": raw_bytes}):
            blob = _assemble({**HEADER, **_integrity(one, raw_bytes), **split}, one)
            with pytest.raises(CorruptEntry, match="length mismatch: decompressed 1000 bytes"):
                open_envelope(blob, SECRET)
