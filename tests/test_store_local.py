"""LocalStore: a folder of entries shared by many processes (no JAX)."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from xlakit.store import LocalStore, file_stem, resolve_root, validate_partition

SECRET = b"test-secret-of-32-bytes-length!!"
PART = "cpu-jaxlib0.10.2-x86_64-avx512-3f2a9c1e"
ENV = {"jaxlib_version": "0.10.2", "platform": "cpu"}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "default-cache"))


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "cache", secret=SECRET)


def _header(name="f", **extra):
    return {"name": name, "compile_s": 0.25, "environment": dict(ENV), **extra}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- basics -------------------------------------------------------------------


def test_constructor_creates_nothing(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=1000)
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "config").exists()  # the secret is loaded lazily
    assert store.get(PART, "k").status == "absent"
    assert store.entries() == [] and store.partitions() == [] and store.total_bytes() == 0
    assert not (tmp_path / "cache").exists()


def test_resolve_root(tmp_path, monkeypatch):
    assert resolve_root(tmp_path / "x") == tmp_path / "x"
    assert resolve_root() == tmp_path / "default-cache"
    assert LocalStore().root == tmp_path / "default-cache"
    monkeypatch.delenv("XLAKIT_CACHE_DIR")
    assert resolve_root().name == "xlakit"


def test_put_get_hit(store):
    payload = os.urandom(5000)
    res = store.put(PART, "jit_f-1", _header(), payload)
    assert res.stored and res.reason is None and res.evicted == ()
    assert res.path == store.root / PART / "jit_f-1.xlk"
    assert res.size_bytes == res.path.stat().st_size
    got = store.get(PART, "jit_f-1", expect={"jaxlib_version": "0.10.2", "name": "f"})
    assert got.status == "hit" and got.hit
    assert got.payload == payload
    assert got.header["key"] == "jit_f-1" and got.header["partition"] == PART
    assert got.header["compile_s"] == 0.25 and isinstance(got.header["created"], float)
    assert got.reason is None and got.quarantined_to is None
    assert (store.root / PART / "jit_f-1.used").exists()
    assert store.get(PART, "other").status == "absent"


def test_payload_stored_as_is_reaches_the_reader_without_a_copy(store, monkeypatch):
    """An executable zstd cannot halve is stored as it is; the folder reads it apart from the envelope's head, and
    the hit's payload is that very bytes object (no slice of the file's bytes, no decompression)."""
    from xlakit.store import _fs

    reads = []
    real = _fs.read_bounded_split
    monkeypatch.setattr(_fs, "read_bounded_split", lambda *a, **k: reads.append(real(*a, **k)) or reads[-1])
    payload = os.urandom(300_000)
    assert store.put(PART, "big", _header(), payload).stored
    got = store.get(PART, "big")
    assert got.hit and got.header["compression"] == "none" and got.payload == payload
    head, (rest,), _ = reads[-1]
    assert got.payload is rest and len(head) + len(rest) == (store.root / PART / "big.xlk").stat().st_size
    assert store.put(PART, "small", _header(), b"compressible " * 1000).stored
    got = store.get(PART, "small")
    assert got.hit and got.header["compression"] == "zstd" and got.payload == b"compressible " * 1000


def test_split_payload_is_read_in_its_two_parts(store, monkeypatch):
    """An entry sealed with ``payload_split`` (an executable payload: where the executable starts after its pickle
    frame) is read from the file in two parts, and the hit's payload holds those very objects: XLA gets the tail
    with no copy. Compressed, it is read as one object and decompressed into its two parts; damage in either part
    is refused as before."""
    from xlakit.store import SplitPayload, _fs

    reads = []
    real = _fs.read_bounded_split
    monkeypatch.setattr(_fs, "read_bounded_split", lambda *a, **k: reads.append(real(*a, **k)) or reads[-1])
    frame, executable = b"frame" * 20, os.urandom(_fs.MIN_CUT_BYTES)  # smaller ones are read as one: a copy is cheap
    assert store.put(PART, "exe", _header(payload_split=len(frame)), frame + executable).stored
    got = store.get(PART, "exe")
    head, parts, _ = reads[-1]
    assert got.hit and got.header["payload_split"] == 100 and isinstance(got.payload, SplitPayload)
    assert got.payload.head is parts[0] and got.payload.tail is parts[1] and parts == (frame, executable)
    assert got.payload == frame + executable and bytes(got.payload) == frame + executable
    assert store.put(PART, "packed", _header(payload_split=3), b"abc" + b"compressible " * 1000).stored
    got = store.get(PART, "packed")
    assert got.header["compression"] == "zstd" and len(reads[-1][1]) == 1  # read whole, decompressed in two
    assert (got.payload.head, got.payload.tail) == (b"abc", b"compressible " * 1000)
    path = store.root / PART / "exe.xlk"
    damaged = bytearray(path.read_bytes())
    damaged[-7] ^= 1
    path.write_bytes(bytes(damaged))
    assert store.get(PART, "exe").status == "corrupt"
    with pytest.raises(ValueError, match="payload_split must be an int from 0 to"):
        store.put(PART, "bad", _header(payload_split=11), b"0123456789")


def test_read_bounded_split(tmp_path, monkeypatch):
    from xlakit.store import _fs
    from xlakit.store.base import ObjectRefused

    monkeypatch.setattr(_fs, "MIN_CUT_BYTES", 0)  # a 16-byte file: its rest is cut when asked

    path = tmp_path / "f"
    path.write_bytes(b"0123456789abcdef")
    assert _fs.read_bounded_split(path, 100, 4, lambda first: 6)[:2] == (b"012345", (b"6789abcdef",))
    cut = _fs.read_bounded_split(path, 100, 4, lambda first: 6, payload_cut=lambda head: 3)[:2]
    assert cut == (b"012345", (b"678", b"9abcdef"))
    for past in (0, 10, 11):  # no cut at either end, or past it
        uncut = _fs.read_bounded_split(path, 100, 4, lambda first: 6, payload_cut=lambda head, n=past: n)
        assert uncut[1] == (b"6789abcdef",)
    assert _fs.read_bounded_split(path, 100, 4, lambda first: None)[:2] == (b"0123456789abcdef", None)
    assert _fs.read_bounded_split(path, 100, 4, lambda first: 17)[:2] == (b"0123456789abcdef", None)  # past the end
    assert _fs.read_bounded_split(path, 100, 32, lambda first: 40)[:2] == (b"0123456789abcdef", None)  # short file
    with pytest.raises(ObjectRefused, match="over the 15-byte bound"):
        _fs.read_bounded_split(path, 15, 4, lambda first: 6)


def test_secret_loaded_lazily_from_config_dir(tmp_path):
    writer = LocalStore(tmp_path / "cache")
    assert writer.put(PART, "k", _header(), b"x").stored
    assert (tmp_path / "config" / "secret").exists()
    assert LocalStore(tmp_path / "cache").get(PART, "k").status == "hit"
    other = LocalStore(tmp_path / "cache", config_dir=tmp_path / "elsewhere")
    res = other.get(PART, "k")
    # Another key is another user sharing the folder: a miss naming both key ids, and the entry stays.
    assert res.status == "foreign" and "signed with another key" in res.reason
    assert res.quarantined_to is None and (tmp_path / "cache" / PART / "k.xlk").exists()


def test_listing_and_partition_info(store):
    store.put(PART, "b-key", _header("g"), b"1" * 100)
    store.put(PART, "a-key", _header("f", created=123.0), b"2" * 100)
    store.put("other-part", "c", {"name": "h"}, b"3")
    assert store.partitions() == [PART, "other-part"]
    infos = store.entries(PART)
    assert [i.key for i in infos] == ["a-key", "b-key"]
    a = infos[0]
    assert a.partition == PART and a.name == "f" and a.created == 123.0 and a.compile_s == 0.25
    assert a.size_bytes >= a.path.stat().st_size and a.header["key"] == "a-key"
    assert a.last_used == pytest.approx((a.path.with_suffix(".used")).stat().st_mtime)
    assert len(store.entries()) == 3

    info = {"platform": "cpu", "jaxlib_version": "0.10.2"}
    assert store.read_partition_info(PART) is None
    assert store.write_partition_info(PART, info) is True
    path = store.root / PART / "partition.json"
    mtime = path.stat().st_mtime_ns
    assert store.read_partition_info(PART) == info
    assert store.write_partition_info(PART, dict(info)) is True
    assert path.stat().st_mtime_ns == mtime  # identical content is not rewritten
    assert json.loads(path.read_text()) == info
    assert store.read_partition_info("other-part") is None


def test_unreadable_header_is_listed_with_error(store):
    store.put(PART, "good", _header(), b"x")
    (store.root / PART / "bad.xlk").write_bytes(b"garbage that is not an envelope")
    infos = {i.key: i for i in store.entries()}
    assert infos["good"].name == "f"
    assert infos["bad"].name is None and "bad magic" in infos["bad"].header["error"]


def test_remove_and_touch(store):
    store.put(PART, "k", _header(), b"x")
    used = store.root / PART / "k.used"
    os.utime(used, (1000, 1000))
    store.touch(PART, "k")
    assert used.stat().st_mtime > 1000
    store.touch(PART, "missing")
    assert not (store.root / PART / "missing.used").exists()
    assert store.remove(PART, "k") is True
    assert not used.exists() and store.get(PART, "k").status == "absent"
    assert store.remove(PART, "k") is False


def test_file_stem():
    assert file_stem("jit_f-3f2a.v1") == "jit_f-3f2a.v1"
    assert file_stem("a/b c:d") == "a_b_c_d"
    assert file_stem(".hidden") == "_hidden"
    long = "x" * 151
    stem = file_stem(long)
    assert len(stem) == 97 and stem.startswith("x" * 80 + "-")
    assert file_stem(long) != file_stem(long + "y")
    assert file_stem("y" * 150) == "y" * 150
    with pytest.raises(ValueError):
        file_stem("")


@pytest.mark.parametrize("bad", ["", ".", "..", ".hidden", "quarantine", "a/b", "a b", "../x", "x" * 201, "é"])
def test_partition_validation(store, bad):
    with pytest.raises(ValueError):
        validate_partition(bad)
    with pytest.raises(ValueError):
        store.put(bad, "k", {}, b"x")
    with pytest.raises(ValueError):
        store.get(bad, "k")


def test_valid_partition_names():
    for good in (PART, "a", "A.b_c-9", "x" * 200):
        assert validate_partition(good) == good


def test_modes(store):
    store.put(PART, "k", _header(), b"x")
    store.write_partition_info(PART, {"a": 1})
    (store.root / PART / "k.xlk").write_bytes(b"junk")
    assert store.get(PART, "k").status == "corrupt"
    for d in (store.root, store.root / PART, store.root / "quarantine", store.root / "quarantine" / PART):
        assert _mode(d) == 0o700, d
    quarantined = list((store.root / "quarantine" / PART).iterdir())
    assert len(quarantined) == 2
    store.put(PART, "k", _header(), b"x")
    for f in [store.root / PART / n for n in ("k.xlk", "k.used", "partition.json")] + quarantined:
        assert _mode(f) == 0o600, f


def test_existing_root_keeps_its_mode(tmp_path):
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    LocalStore(root, secret=SECRET).put(PART, "k", {}, b"x")
    assert _mode(root) == 0o755 and _mode(root / PART) == 0o700


# -- verification and quarantine ----------------------------------------------


def test_corrupt_entry_is_quarantined_then_rewritten(store):
    store.put(PART, "k", _header(), b"payload" * 100)
    path = store.root / PART / "k.xlk"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))

    res = store.get(PART, "k")
    assert res.status == "corrupt" and res.payload is None
    assert res.reason.startswith("payload SHA-256 mismatch")
    assert not path.exists() and not path.with_suffix(".used").exists()
    q = res.quarantined_to
    assert q.parent == store.root / "quarantine" / PART and q.name.startswith("k.") and q.suffix == ".xlk"
    assert q.read_bytes() == bytes(data)
    reason_file = q.with_name(q.name.removesuffix(".xlk") + ".reason.txt")
    assert "payload SHA-256 mismatch" in reason_file.read_text()
    assert store.entries() == []

    assert store.get(PART, "k").status == "absent"
    assert store.put(PART, "k", _header(), b"fresh").stored
    assert store.get(PART, "k").payload == b"fresh"


def _no_cross_device_moves(monkeypatch):
    """The quarantine on another filesystem: link(2) and rename(2) fail with EXDEV (no second filesystem needed)."""
    import errno

    def exdev(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    for name in ("link", "rename", "replace"):
        monkeypatch.setattr(os, name, exdev)


def test_a_quarantine_on_another_filesystem_gets_the_entry_by_copy_with_its_note(store, monkeypatch):
    """Fault: with EXDEV the bad entry stayed in place without its note, was re-read and rejected on every run,
    and verify said "0 moved". Now it is copied there (fsynced, then the original unlinked), note included."""
    store.put(PART, "k", _header(), b"payload" * 100)
    store.put(PART, "k2", _header(), b"payload" * 100)
    path, path2 = store.root / PART / "k.xlk", store.root / PART / "k2.xlk"
    damaged = {}
    for p in (path, path2):
        data = bytearray(p.read_bytes())
        data[-3] ^= 0x40
        p.write_bytes(damaged.setdefault(p, bytes(data)))
    _no_cross_device_moves(monkeypatch)
    res = store.get(PART, "k")
    assert res.status == "corrupt" and not path.exists() and res.quarantined_to.read_bytes() == damaged[path]
    assert "payload SHA-256 mismatch" in res.quarantined_to.with_name(
        res.quarantined_to.name.removesuffix(".xlk") + ".reason.txt").read_text()
    assert store.get(PART, "k").status == "absent"  # not re-read and rejected on the next run
    [(info, reason)] = [r for r in store.verify() if r[1]]
    assert info.key == "k2" and "[not quarantined" not in reason and not path2.exists()


def test_an_entry_the_quarantine_cannot_take_says_exactly_what_happened(store, monkeypatch, tmp_path, capsys):
    """EXDEV and the copy fails too (the quarantine's filesystem is full): the entry stays, the read says why, and
    verify says how many moved and how many stayed (it said "0 moved (they will not be loaded)")."""
    import errno

    from xlakit.cli import main

    store.put(PART, "k", _header(), b"payload" * 100)
    path = store.root / PART / "k.xlk"
    path.write_bytes(path.read_bytes()[:-5])
    _no_cross_device_moves(monkeypatch)
    real_fsync = os.fsync

    def full(fd):
        if os.fstat(fd).st_size:  # the copy, not a folder
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    res = store.get(PART, "k")
    assert res.status == "corrupt" and res.quarantined_to is None and path.exists()
    assert "No space left on device" in res.disposition and "left in place" in res.disposition
    assert not any(store.root.joinpath("quarantine", PART).glob("k.*"))  # the partial copy is removed
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", SECRET.decode())
    code = main(["cache", "verify", "--path", str(store.root)])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "1 of 1 entries failed verification and will not be loaded; 0 moved to" in out
    assert "1 could not be moved and stay where they are, rejected again on every read" in out
    assert "No space left on device" in out


def test_a_huge_sparse_file_is_not_copied_to_a_quarantine_on_another_filesystem(store, monkeypatch):
    """Fault: a 64 GiB sparse file at an entry's name (free to plant) is refused unread, then copied byte by byte to
    a quarantine on another filesystem: one lookup wrote zeros until that filesystem was full (2 GiB of tmpfs: 6.8 s).
    Over the entry bound it is not copied: it stays, the read says why, and the next write replaces it."""
    store.put(PART, "k", _header(), b"payload" * 100)
    path = store.root / PART / "k.xlk"
    size = 2 * 1024**3 + 1  # one byte over the bound (a larger file only made the unfixed copy longer)
    with open(path, "r+b") as f:
        f.truncate(size)
    _no_cross_device_moves(monkeypatch)
    res = store.get(PART, "k")
    assert res.status == "corrupt" and res.quarantined_to is None and path.stat().st_size == size
    assert "over the 2147483648-byte bound of a copy to a quarantine on another filesystem" in res.disposition
    assert not any(store.root.joinpath("quarantine", PART).glob("k.*"))
    monkeypatch.undo()
    assert store.put(PART, "k", _header(), b"fresh").stored and store.get(PART, "k").payload == b"fresh"


def test_truncated_entry_is_corrupt(store):
    store.put(PART, "k", _header(), os.urandom(1000))
    path = store.root / PART / "k.xlk"
    path.write_bytes(path.read_bytes()[:100])
    res = store.get(PART, "k")
    assert res.status == "corrupt" and res.reason.startswith("truncated: file is 100 bytes")


def test_expect_mismatch_quarantines_with_field_and_values(store):
    store.put(PART, "k", _header(), b"x")
    res = store.get(PART, "k", expect={"platform": "cpu", "jaxlib_version": "0.11.0"})
    assert res.status == "mismatch"
    assert res.reason == "jaxlib_version: entry says '0.10.2', this environment is '0.11.0'"
    assert res.header["key"] == "k" and res.payload is None
    assert res.quarantined_to is not None and res.quarantined_to.exists()
    assert store.get(PART, "k").status == "absent"

    store.put(PART, "k2", _header(), b"x")
    res = store.get(PART, "k2", expect={"name": "g"})  # falls back to top-level header fields
    assert res.status == "mismatch" and res.reason == "name: entry says 'f', this environment is 'g'"


def test_entry_under_wrong_key_or_partition(store):
    store.put(PART, "k", _header(), b"x")
    src = store.root / PART / "k.xlk"
    os.replace(src, store.root / PART / "other.xlk")
    res = store.get(PART, "other")
    assert res.status == "corrupt" and res.reason == "header names key 'k'"

    store.put(PART, "k", _header(), b"x")
    (store.root / "p2").mkdir()
    os.replace(src, store.root / "p2" / "k.xlk")
    res = store.get("p2", "k")
    assert res.status == "mismatch" and PART in res.reason and "'p2'" in res.reason
    assert res.quarantined_to.parent.name == "p2"


def test_verify(store):
    for i in range(3):
        store.put(PART, f"k{i}", _header(), b"x" * i)
    bad = store.root / PART / "k1.xlk"
    data = bytearray(bad.read_bytes())
    data[20] ^= 0x01
    bad.write_bytes(bytes(data))
    results = {info.key: problem for info, problem in store.verify()}
    assert results["k0"] is None and results["k2"] is None
    assert results["k1"].startswith(("corrupt", "unauthenticated"))
    assert not bad.exists()
    assert [problem for _, problem in store.verify()] == [None, None]


def test_folder_at_entry_name_is_moved_aside_so_the_key_works_again(store):
    """A folder at an entry's name used to make every read an error and every write fail, forever."""
    (store.root / PART / "k.xlk" / "inner").mkdir(parents=True)
    (store.root / PART / "k.xlk" / "inner" / "user.txt").write_text("mine")
    res = store.get(PART, "k")
    assert res.status == "corrupt" and "is a folder" in res.reason and "in-the-way" in res.reason
    moved = [p for p in (store.root / PART).iterdir() if p.name.endswith(".in-the-way")]
    assert len(moved) == 1 and (moved[0] / "inner" / "user.txt").read_text() == "mine"  # never entered
    assert any("k.xlk" in note for note in store.displaced)
    assert store.put(PART, "k", _header(), b"v").stored and store.get(PART, "k").payload == b"v"
    (store.root / PART / "j.xlk").mkdir()  # an empty one is simply removed by the write
    assert store.put(PART, "j", _header(), b"w").stored and store.get(PART, "j").payload == b"w"


# -- failures never raise -------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [None, 1_000_000])
def test_unwritable_root_reports_oserror(tmp_path, max_bytes):
    # We may run as root, which ignores chmod 0500: a path below a regular file always fails.
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    store = LocalStore(blocker / "cache", max_bytes=max_bytes, secret=SECRET)
    res = store.put(PART, "k", _header(), b"x" * 100)
    assert res.stored is False and res.path is None
    assert res.reason.startswith("OSError:") and "Errno" in res.reason
    assert store.get(PART, "k").status in ("absent", "error")
    assert store.write_partition_info(PART, {"a": 1}) is False
    assert store.entries() == [] and store.total_bytes() == 0


def test_unavailable_secret_reports_oserror(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    store = LocalStore(tmp_path / "cache", config_dir=blocker / "cfg")
    res = store.put(PART, "k", {}, b"x")
    assert not res.stored and "XLAKIT_CACHE_SECRET" in res.reason
    assert not (tmp_path / "cache" / PART / "k.xlk").exists()


def test_failed_write_leaves_no_temp_file(store, monkeypatch):
    store.put(PART, "seed", {}, b"x")

    def boom(fd):
        raise OSError(27, "File too large")

    monkeypatch.setattr(os, "fsync", boom)
    res = store.put(PART, "k", {}, b"y" * 1000)
    assert not res.stored and res.reason == "OSError: [Errno 27] File too large"
    assert sorted(p.name for p in (store.root / PART).iterdir()) == ["seed.used", "seed.xlk"]


def test_lock_timeout_is_reported(tmp_path):
    import filelock

    root = tmp_path / "cache"
    store = LocalStore(root, max_bytes=1_000_000, secret=SECRET, lock_timeout_s=0.1)
    root.mkdir()
    with filelock.FileLock(root / ".lock"):
        res = store.put(PART, "k", {}, b"x")
    assert not res.stored and res.reason == "could not take the eviction lock within 0.1 s"


# -- size cap and eviction ------------------------------------------------------


def test_entry_larger_than_cap_is_refused(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=2_000_000, secret=SECRET)
    res = store.put(PART, "big", {}, os.urandom(3_100_000))
    assert not res.stored
    assert res.reason == "entry of 3.1 MB exceeds the cache cap of 2.0 MB"
    assert store.total_bytes() == 0


def test_cap_evicts_least_recently_used(tmp_path):
    cap = 200_000
    store = LocalStore(tmp_path / "cache", max_bytes=cap, secret=SECRET)
    payloads = {}
    evicted = set()
    for i in range(100):
        key = f"k{i:03d}"
        payloads[key] = os.urandom(10_000)
        res = store.put(PART, key, _header(), payloads[key])
        assert res.stored, res.reason
        assert store.total_bytes() <= cap
        new = {e.key for e in res.evicted}
        assert "k000" not in new and key not in new and not new & evicted
        assert all(e.partition == PART and e.name == "f" for e in res.evicted)
        evicted |= new
        assert store.get(PART, "k000").status == "hit"  # keeps k000 the most recently used
        time.sleep(0.003)  # coarse filesystem timestamps
    present = {i.key for i in store.entries()}
    assert present | evicted == set(payloads) and not present & evicted
    assert len(present) >= 10
    assert "k000" in present and {"k097", "k098", "k099"} <= present
    for key in present:
        assert store.get(PART, key).payload == payloads[key]


def test_replacing_an_entry_counts_its_old_size(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=50_000, secret=SECRET)
    for key in ("a", "b", "c"):
        store.put(PART, key, {}, os.urandom(10_000))
    res = store.put(PART, "c", {}, os.urandom(10_000))
    assert res.stored and res.evicted == ()
    assert {i.key for i in store.entries()} == {"a", "b", "c"}


def test_damaged_bookkeeping_does_not_block_eviction(tmp_path):
    cap = 60_000
    store = LocalStore(tmp_path / "cache", max_bytes=cap, secret=SECRET)
    for i in range(4):
        store.put(PART, f"k{i}", {}, os.urandom(10_000))
        time.sleep(0.003)
    pdir = store.root / PART
    (pdir / "k0.used").unlink()
    (pdir / "k1.used").write_bytes(b"garbage in a bookkeeping file")
    os.unlink(pdir / "k2.used")
    (pdir / "k2.used").mkdir()  # even a folder where the .used file should be
    (pdir / "k3.xlk").write_bytes(b"garbled entry" * 1000)
    for i in range(4, 12):
        res = store.put(PART, f"k{i}", {}, os.urandom(10_000))
        assert res.stored, res.reason
        assert store.total_bytes() <= cap
    assert not (pdir / "k3.xlk").exists()  # an unreadable entry is still evictable


def test_quarantine_is_evicted_before_entries(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=60_000, secret=SECRET)
    for i in range(4):
        store.put(PART, f"k{i}", {}, os.urandom(10_000))
    (store.root / PART / "k0.xlk").write_bytes(b"junk" * 2500)
    assert store.get(PART, "k0").status == "corrupt"
    res = store.put(PART, "k4", {}, os.urandom(10_000))
    assert res.stored and res.evicted == ()
    assert not any((store.root / "quarantine").rglob("*.xlk"))


def test_prune_and_clear(store):
    for i in range(5):
        store.put(PART, f"k{i}", {}, os.urandom(10_000))
        time.sleep(0.003)
    store.put("p2", "x", {}, b"x")
    store.get(PART, "k0")
    (store.root / PART / "k1.xlk").write_bytes(b"junk")
    store.get(PART, "k1")  # quarantined
    evicted = store.prune(40_000)
    assert store.total_bytes() <= 40_000
    assert "k0" not in {e.key for e in evicted} and "k2" in {e.key for e in evicted}
    assert store.prune(10**9) == []

    remaining = len(store.entries(PART))
    store.write_partition_info(PART, {"a": 1})
    assert store.clear(PART) == remaining
    assert store.entries(PART) == [] and [i.key for i in store.entries()] == ["x"]
    assert store.clear() == 1
    tag = (store.root / "CACHEDIR.TAG").stat()  # the cache marker stays, and occupies its block
    assert store.entries() == [] and store.total_bytes() == max(tag.st_size, tag.st_blocks * 512)
    assert sorted(os.listdir(store.root)) == [".lock", "CACHEDIR.TAG"]
    assert store.put(PART, "k", {}, b"again").stored  # the store still works after clearing


def test_killed_writer_temp_file(store):
    store.put(PART, "k", {}, b"x")
    tmp = store.root / PART / f".k.{os.getpid()}.deadbeef.tmp"
    tmp.write_bytes(b"half an entry")
    assert [i.key for i in store.entries()] == ["k"]
    assert store.get(PART, "k").status == "hit"
    assert store.cleanup_temp() == 0  # young: may belong to a live writer
    os.utime(tmp, (time.time() - 7200,) * 2)
    assert store.cleanup_temp() == 1 and not tmp.exists()


def test_stale_temp_is_evicted_under_the_cap(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=40_000, secret=SECRET)
    store.put(PART, "a", {}, os.urandom(10_000))
    tmp = store.root / PART / ".b.123.abcd.tmp"
    tmp.write_bytes(os.urandom(20_000))
    os.utime(tmp, (time.time() - 7200,) * 2)
    res = store.put(PART, "c", {}, os.urandom(10_000))
    assert res.stored and res.evicted == () and not tmp.exists()


# -- many processes -------------------------------------------------------------


def _worker(root: str, cap: int | None, seed: int, queue) -> None:
    store = LocalStore(root, max_bytes=cap, secret=SECRET)
    statuses = []
    for _round in range(2):
        for j in range(20):
            key = f"key{(j + seed) % 20:02d}"
            payload = (key.encode() * 1000)[:8000] + os.urandom(2000)
            res = store.put(PART, key, {"name": key}, payload)
            if not res.stored:
                statuses.append(f"put failed: {res.reason}")
            got = store.get(PART, key)
            statuses.append(got.status)
            if got.status == "hit" and not got.payload.startswith(key.encode()):
                statuses.append("wrong payload")
    queue.put(statuses)


# The writers are forked from this pytest process, which runs JAX's threads: Python (3.12+) and JAX warn that a
# fork of a threaded process may deadlock. The children only run xlakit.store's file code (no JAX, no lock another
# thread could hold); a forkserver would avoid the warning but leaves its temp folder to a finaliser that runs
# after pytest has removed it.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning", "ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.parametrize("cap", [None, 60_000])
def test_concurrent_processes(tmp_path, cap):
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    queue = ctx.Queue()
    root = str(tmp_path / "cache")
    procs = [ctx.Process(target=_worker, args=(root, cap, seed, queue)) for seed in range(8)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    statuses = [s for r in results for s in r]
    assert set(statuses) <= {"hit", "absent"}, sorted(set(statuses))
    assert statuses.count("hit") > 0
    store = LocalStore(root, max_bytes=cap, secret=SECRET)
    checked = store.verify()
    assert checked and all(problem is None for _, problem in checked)
    assert not (tmp_path / "cache" / "quarantine").exists()
    assert not list((tmp_path / "cache" / PART).glob(".*.tmp"))
    if cap is not None:
        assert store.total_bytes() <= cap
    else:
        assert len(checked) == 20


def test_eviction_and_clear_never_remove_another_keys_entries(tmp_path):
    """Fault: in a folder shared by two users with different secrets, one user's byte cap evicted (and its
    ``cache clear`` deleted) the other's entries, on nothing but their names. Another key's entries are not
    this key's to remove, nor to count against its cap."""
    other = LocalStore(tmp_path / "cache", secret=b"another-users-secret-32-bytes!!!")
    for i in range(3):
        other.put(PART, f"theirs{i}", {}, os.urandom(10_000))
    time.sleep(0.01)
    store = LocalStore(tmp_path / "cache", max_bytes=35_000, secret=SECRET)
    for i in range(6):
        assert store.put(PART, f"ours{i}", {}, os.urandom(10_000)).stored
        time.sleep(0.003)
    names = {p.name for p in (store.root / PART).glob("*.xlk")}
    assert {f"theirs{i}.xlk" for i in range(3)} <= names  # the oldest, yet never evicted
    ours = sorted(n for n in names if n.startswith("ours"))
    assert "ours5.xlk" in ours and "ours0.xlk" not in ours  # the cap still evicts our own oldest
    assert store.clear() == len(ours)
    left = {p.name for p in (store.root / PART).iterdir() if p.name.endswith(".xlk")}
    assert left == {f"theirs{i}.xlk" for i in range(3)}
    assert other.get(PART, "theirs0").status == "hit"
