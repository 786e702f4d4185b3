"""A cache folder that others can write: planted files, links and leftovers never break, hang or harm.

Each test plants one kind of hostile or mistaken file and checks the store refuses it, stays usable, and
touches nothing outside the folder. No JAX.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from xlakit.store import LocalStore, NotACacheFolder, key_id
from xlakit.store.layout import TAG_NAME, TAG_SIGNATURE

SECRET = b"hostile-test-secret-of-32-bytes!"
PART = "cpu-p"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def store(tmp_path):
    s = LocalStore(tmp_path / "cache", secret=SECRET)
    assert s.put(PART, "good", {"name": "f"}, b"payload").stored
    return s


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the suite) if the test blocks for more than 20 s."""
    def fire(*_):
        raise TimeoutError("blocked: a planted file was opened blocking")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def signed(header: bytes, payload: bytes = b"", secret: bytes = SECRET) -> bytes:
    """An envelope whose header bytes are exactly ``header``, correctly signed: the secret's holder wrote junk."""
    fixed = b"XLAKIT\x00\x02" + key_id(secret) + struct.pack(">I", len(header))
    signed_prefix = fixed + hmac.new(secret, b"xlakit header\x00" + fixed + header, hashlib.sha256).digest() + header
    return signed_prefix + hmac.new(secret, signed_prefix + payload, hashlib.sha256).digest() + payload


def round_one(header: bytes) -> bytes:
    """An entry in the first format (no header MAC), as anyone could plant it without the secret."""
    return b"XLAKIT\x00\x01" + struct.pack(">I", len(header)) + header + bytes(32)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        for name in sorted(files + dirs):
            p = Path(dirpath, name)
            h.update(str(p.relative_to(root)).encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


# -- headers: authenticated before parsing, parsed with bounds -----------------------------------------


@pytest.mark.parametrize("header", [
    b"[" * 100_000 + b"]" * 100_000,  # RecursionError in json
    b'{"created":' + b"9" * 400 + b',"key":"x"}',  # OverflowError in float()
    b'{"created":NaN,"key":"x"}',
    b'{"created":1e308,"key":"x"}',
    b'{"compile_s":Infinity,"key":"x"}',
])
def test_unauthenticated_junk_header_is_a_stale_miss_and_listed(store, header):
    """Without the secret a planted header is never parsed: a round-1 envelope is 'stale', listed with an error,
    and the rest of the cache keeps working."""
    bad = store.root / PART / "planted.xlk"
    bad.write_bytes(round_one(header))
    got = store.get(PART, "planted")
    assert got.status == "stale" and "older xlakit format" in got.reason
    infos = {i.key: i for i in store.entries()}
    assert infos["planted"].name is None and "older xlakit format" in infos["planted"].header["error"]
    assert infos["good"].name == "f"
    assert {i.key: p for i, p in store.verify()}["planted"].startswith("stale:")
    assert store.get(PART, "good").hit
    assert store.put(PART, "planted", {"name": "g"}, b"new").stored  # a stale entry is replaced by the next write
    assert store.get(PART, "planted").hit


@pytest.mark.parametrize("header", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"created":' + b"9" * 400 + b',"key":"planted"}',
    b'{"created":NaN,"key":"planted"}',
    b'{"compile_s":Infinity,"key":"planted"}',
])
def test_signed_junk_header_is_corrupt_and_quarantined(store, header):
    """Defence in depth: a header signed with the real secret but nested 100,000 deep or holding 10**400 / NaN /
    Infinity is corrupt and quarantined, never an exception out of get/entries/verify/prune."""
    bad = store.root / PART / "planted.xlk"
    bad.write_bytes(signed(header))
    infos = {i.key: i for i in store.entries()}
    assert infos["planted"].name is None and "not acceptable JSON" in infos["planted"].header["error"]
    got = store.get(PART, "planted")
    assert got.status == "corrupt" and got.quarantined_to is not None and not bad.exists()
    bad.write_bytes(signed(header))
    assert next(p for i, p in store.verify() if i.key == "planted").startswith("corrupt:")
    assert not bad.exists()
    store.prune(0)
    assert store.entries() == []


def test_capped_put_evicts_a_planted_entry(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=64 * 1024, secret=SECRET)
    for i in range(3):
        assert store.put(PART, f"good{i}", {}, os.urandom(5000)).stored
    bad = store.root / PART / "planted.xlk"
    bad.write_bytes(round_one(b"[" * 100_000 + b"]" * 100_000))
    os.utime(bad, (1, 1))
    res = store.put(PART, "new", {}, os.urandom(40_000))
    assert res.stored and not bad.exists()


# -- file kinds: never followed, never blocking, bounded --------------------------------------------------


def test_fifo_entry_is_refused_at_once(store, no_hang):
    entry = store.root / PART / "good.xlk"
    entry.unlink()
    os.mkfifo(entry)
    assert "FIFO" in {i.key: i for i in store.entries()}["good"].header["error"]
    got = store.get(PART, "good")
    assert got.status == "corrupt" and "a FIFO" in got.reason
    assert not entry.exists()  # moved into quarantine (a rename never opens it)
    os.mkfifo(entry)
    store.verify()
    store.clear()


def test_symlink_to_dev_zero_and_huge_sparse_file_are_refused_unread(tmp_path, no_hang):
    store = LocalStore(tmp_path / "cache", secret=SECRET, max_entry_bytes=1 << 20)
    store.put(PART, "k", {}, b"payload")
    entry = store.root / PART / "k.xlk"
    entry.unlink()
    os.symlink("/dev/zero", entry)
    got = store.get(PART, "k")
    assert got.status == "corrupt" and "symlink" in got.reason
    assert os.path.exists("/dev/zero")
    entry = store.root / PART / "k.xlk"
    with open(entry, "wb") as f:
        f.write(b"XLAKIT\x00\x02")
    os.truncate(entry, 4 * 2**30)  # sparse: no disk used
    got = store.get(PART, "k")
    assert got.status == "corrupt" and "over the 1048576-byte bound" in got.reason
    assert not entry.exists()


def test_symlinked_used_file_is_never_followed(store, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    os.utime(outside, (1000, 1000))
    used = store.root / PART / "good.used"
    used.unlink()
    os.symlink(outside, used)
    assert store.get(PART, "good").hit
    assert outside.read_text() == "mine" and outside.stat().st_mtime == 1000
    assert used.is_file() and not used.is_symlink()


def test_clear_never_follows_links(store, tmp_path):
    """A symlinked quarantine/ or partition folder is dropped as a link; the files it points at stay."""
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    (home / "thesis.tex").write_text("years of work")
    (home / "project" / "train.py").write_text("print('hi')")
    (home / "x.xlk").write_text("looks like an entry")
    before = tree_digest(home)
    os.symlink(home, store.root / "quarantine")
    os.symlink(home, store.root / "cpu-linked")
    assert store.clear("cpu-linked") == 0
    assert store.clear() == 1
    assert tree_digest(home) == before


def test_quarantine_note_never_written_through_a_planted_link(store, tmp_path):
    import time

    precious = tmp_path / "precious.txt"
    precious.write_text("PRECIOUS\n")
    q = store.root / "quarantine" / PART
    q.mkdir(parents=True)
    now = int(time.time() * 1000)
    for ms in range(now, now + 5000):
        os.symlink(precious, q / f"good.{ms}.reason.txt")
    entry = store.root / PART / "good.xlk"
    b = bytearray(entry.read_bytes())
    b[-1] ^= 1
    entry.write_bytes(bytes(b))
    got = store.get(PART, "good")
    assert got.status == "corrupt" and got.quarantined_to is not None and got.quarantined_to.exists()
    assert precious.read_text() == "PRECIOUS\n"
    assert Path(str(got.quarantined_to).removesuffix(".xlk") + ".reason.txt").read_text().startswith("corrupt:")


def test_lock_link_does_not_truncate_its_target(store, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("content")
    lock = store.root / ".lock"
    if lock.exists():
        lock.unlink()
    os.symlink(victim, lock)
    store.prune(10**9)
    assert victim.read_text() == "content"


# -- the CACHEDIR.TAG marker ------------------------------------------------------------------------------


def test_new_cache_is_tagged(store):
    assert (store.root / TAG_NAME).read_bytes().startswith(TAG_SIGNATURE + b"\n")
    assert TAG_SIGNATURE == b"Signature: 8a477f597d28d172789f06886806bc55"


def test_destructive_operations_refuse_a_folder_that_is_not_a_cache(tmp_path):
    proj = tmp_path / "proj"
    for rel in ("README.md", "quarantine/notes.txt", "results/run1.used", "results/partition.json"):
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text("user data")
    before = tree_digest(proj)
    store = LocalStore(proj, secret=SECRET)
    for op in (store.clear, lambda: store.prune(0), store.verify):
        with pytest.raises(NotACacheFolder, match=r"proj is not an xlakit cache folder \(no CACHEDIR.TAG, and"):
            op()
    assert tree_digest(proj) == before and not (proj / ".lock").exists()


def test_untagged_round_one_cache_is_adopted(store):
    assert store.write_partition_info(PART, {"backend": "cpu"})
    (store.root / TAG_NAME).unlink()
    (store.root / "quarantine" / PART).mkdir(parents=True)
    (store.root / "quarantine" / PART / "x.1.xlk").write_bytes(b"old")
    assert store.clear() == 1
    assert (store.root / TAG_NAME).exists()


# -- leftovers of killed writers -----------------------------------------------------------------------------


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_dead_writers_temp_never_blocks_the_cap(tmp_path):
    store = LocalStore(tmp_path / "cache", max_bytes=100_000, secret=SECRET)
    store.put(PART, "a", {}, b"x")
    temp = store.root / PART / f".big.xlk.{dead_pid()}.abcd1234.tmp"
    temp.write_bytes(os.urandom(200_000))
    assert store.total_bytes() < 100_000  # temps never count against the cap
    res = store.put(PART, "small", {}, b"y" * 1000)
    assert res.stored and not temp.exists()
    for remove in (lambda s: s.prune(10**9), lambda s: s.verify(), lambda s: s.cleanup_temp()):
        temp.write_bytes(b"left by a killed writer")
        remove(store)
        assert not temp.exists()
    live = store.root / PART / f".c.xlk.{os.getpid()}.abcd1234.tmp"
    live.write_bytes(b"a write in progress")
    store.cleanup_temp()
    assert live.exists()  # a live writer's temp is left alone


def test_untagged_bundle_cache_is_adopted(tmp_path):
    """A bundle's .cache made before its first entry (it holds the module-hash record) is still a cache."""
    cache = tmp_path / "bundle" / ".cache"
    cache.mkdir(parents=True)
    (cache / "module_hashes.json").write_text("{}")
    store = LocalStore(cache, secret=SECRET)
    assert store.put(PART, "k", {}, b"x").stored
    assert (cache / TAG_NAME).exists() and store.clear() == 1


def test_fake_home_whose_names_fit_the_layout_is_never_adopted(tmp_path):
    """A home folder with Downloads/model.xlk, Music/playlist.used and an empty Documents/ fits the layout's
    names; it was tagged and emptied by clear. Names alone never prove a cache: nothing is deleted or tagged."""
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Music").mkdir()
    (home / "Downloads").mkdir()
    (home / "Music" / "playlist.used").write_text("my favourite songs")
    (home / "Downloads" / "model.xlk").write_text("data")
    before = tree_digest(home)
    store = LocalStore(home, secret=SECRET)
    for op in (store.clear, lambda: store.prune(0), store.verify):
        with pytest.raises(NotACacheFolder, match="home is not an xlakit cache folder"):
            op()
    assert store.put("cpu-other", "k", {}, b"x").stored  # a write is not destructive: allowed, but untagged
    assert not (home / TAG_NAME).exists()
    assert store.remove("cpu-other", "k")  # the entry and its .used
    (home / "cpu-other").rmdir()
    assert tree_digest(home) == before


def test_empty_untagged_folder_is_not_adopted_by_a_destructive_op(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    store = LocalStore(empty, secret=SECRET)
    assert store.clear() == 0 and store.prune(0) == [] and store.verify() == []
    assert list(empty.iterdir()) == []  # no tag, no lock


def test_empty_path_is_a_clear_error_not_the_default_cache(monkeypatch):
    from xlakit.store.layout import resolve_root

    with pytest.raises(ValueError, match="empty string"):
        LocalStore("", secret=SECRET)
    monkeypatch.setenv("XLAKIT_CACHE_DIR", "")
    with pytest.raises(ValueError, match="XLAKIT_CACHE_DIR is set but empty"):
        resolve_root()


def test_killed_writers_root_level_temps_are_swept(tmp_path):
    """A killed memo writer's .jaxlib_fingerprints.json.<pid>.<rand>.tmp at the root was never removed."""
    store = LocalStore(tmp_path / "cache", max_bytes=10**6, secret=SECRET)
    assert store.put(PART, "a", {}, b"x").stored
    memo_temp = store.root / f".jaxlib_fingerprints.json.{dead_pid()}.abcd1234.tmp"
    record_temp = store.root / f".module_hashes.json.{dead_pid()}.abcd1234.tmp"
    live = store.root / f".module_hashes.json.{os.getpid()}.abcd1234.tmp"
    for op in (lambda s: s.put(PART, "b", {}, b"y"), lambda s: s.prune(10**9), lambda s: s.verify(),
               lambda s: s.clear(), lambda s: LocalStore(s.root, secret=SECRET).put(PART, "c", {}, b"z")):
        for t in (memo_temp, record_temp, live):
            t.write_bytes(b"left behind")
        op(store)
        assert not memo_temp.exists() and not record_temp.exists(), op
        assert live.exists()  # a live writer's temp is left alone


def test_folder_at_lock_is_moved_aside_and_capped_puts_work(tmp_path):
    """A planted folder at .lock failed every capped put, clear and prune."""
    store = LocalStore(tmp_path / "cache", max_bytes=10**6, secret=SECRET)
    assert store.put(PART, "a", {}, b"x").stored
    (store.root / ".lock").unlink()
    (store.root / ".lock" / "sub").mkdir(parents=True)
    (store.root / ".lock" / "sub" / "user.txt").write_text("mine")
    assert store.put(PART, "b", {}, b"y").stored
    moved = [p for p in store.root.iterdir() if p.name.startswith(".lock.") and p.name.endswith(".in-the-way")]
    assert len(moved) == 1 and (moved[0] / "sub" / "user.txt").read_text() == "mine"
    assert any(".lock" in note and "moved out of the way" in note for note in store.displaced)
    assert store.prune(10**9) == [] and store.clear() == 2
    (store.root / ".lock").unlink()
    (store.root / ".lock").mkdir()  # an empty one is simply removed
    assert store.prune(10**9) == [] and (store.root / ".lock").is_file()


def test_clear_moves_a_folder_at_an_entry_name_aside(store):
    (store.root / PART / "planted.xlk" / "x").mkdir(parents=True)
    (store.root / PART / "planted.used").mkdir()
    assert store.clear() == 1
    assert not (store.root / PART / "planted.xlk").exists() and not (store.root / PART / "planted.used").exists()
    assert any("planted.xlk" in note for note in store.displaced)
    assert any("planted.used" in note and "empty folder" in note for note in store.displaced)


def test_hard_linked_used_file_is_never_touched(store, tmp_path):
    """A <stem>.used hard-linked to a user's file had its mtime changed by every read."""
    user = tmp_path / "userfile.txt"
    user.write_text("mine")
    os.utime(user, (1_000_000, 1_000_000))
    used = store.root / PART / "good.used"
    used.unlink()
    os.link(user, used)
    assert store.get(PART, "good").hit
    assert user.stat().st_mtime == 1_000_000 and user.read_text() == "mine" and user.stat().st_nlink == 1
    assert used.stat().st_nlink == 1 and used.stat().st_mtime > 1_000_000  # a fresh file of the store's own


def test_partition_swapped_for_a_link_mid_write_is_never_written_into(store, tmp_path):
    """Writes work relative to the partition folder's descriptor: a folder swapped for a symlink after it was
    opened cannot redirect the temp, its mode change, or the rename (the race, made deterministic)."""
    from xlakit.store import _fs

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    real_write_at = _fs.write_at

    def swap_then_write(at, name, data, **kw):
        os.rename(store.root / PART, store.root / "moved")
        os.symlink(victim, store.root / PART)
        return real_write_at(at, name, data, **kw)

    _fs.write_at = swap_then_write
    try:
        store.put(PART, "k", {}, b"v")
        store.write_partition_info(PART, {"n": 1})
    finally:
        _fs.write_at = real_write_at
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (store.root / "moved" / "k.xlk").is_file()


def test_write_atomic_refuses_a_symlinked_final_component(tmp_path):
    from xlakit._atomic import write_atomic
    from xlakit.store import ObjectRefused

    target = tmp_path / "user.txt"
    target.write_text("mine")
    (tmp_path / "events.jsonl").symlink_to(target)
    with pytest.raises(ObjectRefused, match="is a symlink"):
        write_atomic(tmp_path / "events.jsonl", b"x")
    assert target.read_text() == "mine"
    assert write_atomic(tmp_path / "plain.txt", "ok").read_text() == "ok"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_corrupt_entry_in_a_read_only_cache_says_where_it_stayed(store):
    data = bytearray((store.root / PART / "good.xlk").read_bytes())
    data[-1] ^= 1  # a bit flip in the payload
    (store.root / PART / "good.xlk").write_bytes(bytes(data))
    os.chmod(store.root / PART, 0o500)
    try:
        found = store.get(PART, "good")
    finally:
        os.chmod(store.root / PART, 0o700)
    assert found.status in ("corrupt", "unauthenticated")
    if os.geteuid() != 0:  # root can write anyway
        assert found.quarantined_to is None and found.disposition.startswith("left in place: ")
    assert "None" not in found.disposition


def test_plain_file_where_a_folder_is_expected_is_named_as_a_regular_file(tmp_path):
    from xlakit.store import ObjectRefused, _fs

    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ObjectRefused, match="is a regular file, not a folder"):
        _fs.ensure_dir(f)


@pytest.mark.parametrize("field,value", [("payload_sha256", "é" * 64), ("payload_sha256", 5),
                                         ("payload_sha256", "A" * 64), ("format_version", "2"),
                                         ("format_version", True), ("raw_bytes", -1), ("payload_bytes", 1.5),
                                         ("key_id", ["x"])])
def test_signed_header_with_a_wrong_field_type_is_corrupt(store, field, value):
    """A non-ASCII payload_sha256 in an authenticated header raised TypeError out of compare_digest."""
    import json

    import zstandard

    payload = zstandard.ZstdCompressor(write_content_size=True).compress(b"hello")
    header = {"format_version": 2, "key_id": key_id(SECRET).hex(), "payload_bytes": len(payload), "raw_bytes": 5,
              "payload_sha256": hashlib.sha256(payload).hexdigest(), "key": "good", "partition": PART}
    header[field] = value
    (store.root / PART / "good.xlk").write_bytes(signed(json.dumps(header).encode(), payload))
    found = store.get(PART, "good")
    assert found.status == "corrupt" and field in found.reason
    assert [p for _, p in store.verify()] == []  # quarantined by the read
