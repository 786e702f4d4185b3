"""RemoteStore: the Store contract on memory://, file:// and a real S3 server (SeaweedFS on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from s3_server import CountingProxy, s3_server  # noqa: F401  (fixture)

from xlakit.store.base import ObjectRefused, Store
from xlakit.store.remote import RemoteStore

HERE = os.path.dirname(os.path.abspath(__file__))


def _check_contract(store: RemoteStore) -> None:
    assert isinstance(store, Store)
    assert store.get("cpu-p1", "k1", 1 << 20) is None
    assert store.stat("cpu-p1", "k1") is None
    assert store.put("cpu-p1", "k1", b"first") is True
    # create-only: the second writer is told "exists" and the object keeps the first bytes
    assert store.put("cpu-p1", "k1", b"second") is False
    assert store.get("cpu-p1", "k1", 1 << 20) == b"first"
    st = store.stat("cpu-p1", "k1")
    assert (st.partition, st.key, st.size_bytes) == ("cpu-p1", "k1", 5)
    assert abs(st.mtime - time.time()) < 600
    assert store.put("cpu-p1", "k2", b"x" * 100) is True
    assert store.put("cpu-p2", "k1", b"other partition") is True
    assert [(o.partition, o.key, o.size_bytes) for o in store.list()] == [
        ("cpu-p1", "k1", 5), ("cpu-p1", "k2", 100), ("cpu-p2", "k1", 15)]
    assert [o.key for o in store.list("cpu-p1")] == ["k1", "k2"]
    assert list(store.list("absent")) == []
    # bounded read: an object over the bound is refused, never returned whole
    with pytest.raises(ObjectRefused, match="bound"):
        store.get("cpu-p1", "k2", 99)
    assert store.get("cpu-p1", "k2", 100) == b"x" * 100
    assert store.delete("cpu-p1", "k1") is True
    assert store.delete("cpu-p1", "k1") is False
    assert store.get("cpu-p1", "k1", 100) is None
    assert store.put("cpu-p1", "k1", b"again") is True  # a deleted key can be created again


def test_contract_memory():
    _check_contract(RemoteStore(f"memory://xlakit-{uuid.uuid4().hex}/pfx"))


def test_contract_file(tmp_path):
    _check_contract(RemoteStore(f"file://{tmp_path}/shared"))
    assert sorted(os.listdir(tmp_path / "shared" / "v1")) == ["cpu-p1", "cpu-p2"]


def test_names_cannot_leave_the_prefix(tmp_path):
    store = RemoteStore(f"file://{tmp_path}/shared")
    for bad in ("..", "a/b", "", "a\x00", "k" * 256):
        with pytest.raises(ValueError, match="cannot name a remote object"):
            store.put("p", bad, b"x")
        with pytest.raises(ValueError):
            store.get(bad, "k", 10)
    assert not (tmp_path / "shared").exists() or not any((tmp_path / "shared").rglob("*x*"))


def test_bad_urls_are_explained():
    with pytest.raises(ValueError, match="not a URL"):
        RemoteStore("bucket/prefix")
    with pytest.raises(ValueError, match="names no bucket"):
        RemoteStore("s3://")


def test_file_refuses_links_and_fifos_and_skips_temps(tmp_path):
    """A planted symlink (to a huge or endless file) or FIFO is refused at once, never read or waited on."""
    store = RemoteStore(f"file://{tmp_path}/shared")
    assert store.put("p", "real", b"abc")
    folder = tmp_path / "shared" / "v1" / "p"
    os.symlink("/dev/zero", folder / "link")
    os.mkfifo(folder / "fifo")
    (folder / ".tmp-dead-writer").write_bytes(b"partial")
    with pytest.raises(ObjectRefused, match="symbolic link"):
        store.get("p", "link", 1 << 20)
    t0 = time.monotonic()
    with pytest.raises(ObjectRefused, match="not a regular file"):
        store.get("p", "fifo", 1 << 20)
    assert time.monotonic() - t0 < 2
    assert [o.key for o in store.list()] == ["real"]


def test_file_put_leaves_no_temp(tmp_path):
    store = RemoteStore(f"file://{tmp_path}/shared")
    store.put("p", "k", b"1")
    store.put("p", "k", b"2")
    assert sorted(os.listdir(tmp_path / "shared" / "v1" / "p")) == ["k"]


# -- the real S3 server ---------------------------------------------------------------------------------------

def test_s3_contract(s3_server):  # noqa: F811
    store = RemoteStore(s3_server.url(f"contract-{uuid.uuid4().hex[:8]}"), storage_options=s3_server.storage_options())
    _check_contract(store)


def test_s3_second_put_is_refused_by_the_server(s3_server):  # noqa: F811
    """Create-only is enforced by the server (If-None-Match: *), not by a check before the write: the second PUT
    goes over the wire and SeaweedFS answers 412, which is reported as "exists"; the object is unchanged."""
    proxy = CountingProxy(s3_server.port)
    try:
        store = RemoteStore(s3_server.url(f"once-{uuid.uuid4().hex[:8]}"),
                            storage_options=s3_server.storage_options(proxy.endpoint))
        assert store.put("p", "k", b"one") is True
        before = proxy.counts["PUT"]
        assert store.put("p", "k", b"two") is False
        assert proxy.counts["PUT"] == before + 1
        assert store.get("p", "k", 100) == b"one"
        # a read is one GET and nothing else (no HEAD, no write); a missing object is one GET too
        proxy.counts.clear()
        assert store.get("p", "k", 100) == b"one"
        assert store.get("p", "absent", 100) is None
        assert dict(proxy.counts) == {"GET": 2}
    finally:
        proxy.close()


def test_s3_empty_object_reads_as_empty_bytes(s3_server):  # noqa: F811
    """S3 answers a ranged GET of a zero-byte object with 416: that is an (empty, invalid) entry for the verifier
    to refuse, not a failure of the server that would count towards switching the remote off."""
    store = RemoteStore(s3_server.url(f"empty-{uuid.uuid4().hex[:8]}"), storage_options=s3_server.storage_options())
    assert store.put("p", "empty", b"") is True
    assert store.get("p", "empty", 100) == b""


_RACE = r"""
import json, sys, time
from xlakit.store.remote import RemoteStore
url, endpoint, me, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
store = RemoteStore(url, storage_options={"endpoint_url": endpoint, "key": "xlakit-test", "secret": "xlakit-test",
                                          "client_kwargs": {"region_name": "us-east-1"}})
while time.time() < start_at:
    time.sleep(0.005)
created, errors = [], []
for i in range(50):
    try:
        created.append(store.put("race", f"k{i:02d}", f"writer {me} key {i}".encode()))
    except Exception as e:
        errors.append(repr(e))
print(json.dumps({"created": created, "errors": errors}))
"""


def test_s3_four_writers_one_object_per_key(s3_server):  # noqa: F811
    """4 processes x 50 create-only puts of the same 50 keys at the same moment: no error reaches a writer,
    each key ends as exactly one object, and its bytes are those of the one writer told it created it."""
    url = s3_server.url(f"race-{uuid.uuid4().hex[:8]}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    start_at = time.time() + 3
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, url, s3_server.endpoint, str(i), str(start_at)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(4)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["errors"] for r in reports] == [[], [], [], []]
    store = RemoteStore(url, storage_options=s3_server.storage_options())
    objects = list(store.list())
    assert [o.key for o in objects] == [f"k{i:02d}" for i in range(50)]
    for i in range(50):
        winners = [w for w in range(4) if reports[w]["created"][i]]
        assert len(winners) == 1, f"key {i}: writers {winners} were each told they created it"
        assert store.get("race", f"k{i:02d}", 100) == f"writer {winners[0]} key {i}".encode()


# -- settings and maintenance planning ------------------------------------------------------------------------

def test_remote_settings_from_arguments_and_environment():
    from xlakit.store.remote import remote_settings

    assert remote_settings(environ={}) is None
    assert remote_settings(environ={"XLAKIT_CACHE_REMOTE": ""}) is None
    assert remote_settings(environ={"XLAKIT_CACHE_REMOTE": "s3://b/p"}) == ("s3://b/p", "rw", {})
    env = {"XLAKIT_CACHE_REMOTE": "s3://b/p", "XLAKIT_CACHE_REMOTE_MODE": "ro",
           "XLAKIT_CACHE_REMOTE_OPTIONS": '{"endpoint_url": "http://127.0.0.1:1"}'}
    assert remote_settings(environ=env) == ("s3://b/p", "ro", {"endpoint_url": "http://127.0.0.1:1"})
    assert remote_settings("gs://x/y", "rw", environ=env) == ("gs://x/y", "rw", {"endpoint_url": "http://127.0.0.1:1"})
    with pytest.raises(ValueError, match="XLAKIT_CACHE_REMOTE_MODE='readonly'"):
        remote_settings(environ={"XLAKIT_CACHE_REMOTE": "s3://b", "XLAKIT_CACHE_REMOTE_MODE": "readonly"})
    with pytest.raises(ValueError, match="remote_mode='w'"):
        remote_settings("s3://b", "w", environ={})
    with pytest.raises(ValueError, match="XLAKIT_CACHE_REMOTE_OPTIONS is not JSON"):
        remote_settings(environ={"XLAKIT_CACHE_REMOTE": "s3://b", "XLAKIT_CACHE_REMOTE_OPTIONS": "endpoint=x"})
    with pytest.raises(ValueError, match="JSON object"):
        remote_settings(environ={"XLAKIT_CACHE_REMOTE": "s3://b", "XLAKIT_CACHE_REMOTE_OPTIONS": "[1]"})
    # 100,000 nested brackets raised RecursionError out of enable_cache (and the CLI's --remote-options)
    with pytest.raises(ValueError, match="XLAKIT_CACHE_REMOTE_OPTIONS is not JSON .*nested deeper than 64"):
        remote_settings(environ={"XLAKIT_CACHE_REMOTE": "s3://b", "XLAKIT_CACHE_REMOTE_OPTIONS": "[" * 100_000})


def test_remote_options_flag_nested_too_deep_is_a_usage_error(tmp_path, capsys):
    from xlakit.cli import main

    code = main(["cache", "ls", "--remote", (tmp_path / "r").as_uri(), "--remote-options", "[" * 100_000])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("xlakit: error: --remote-options: nested deeper than 64") and len(err) < 300


def test_plan_prune_by_age_then_size():
    from xlakit.store.base import ObjectStat
    from xlakit.store.remote import plan_prune

    day = 86400.0
    objs = [ObjectStat("p", f"k{i}", 100, 1000 * day - i * day) for i in range(5)]  # k4 oldest (4 days)
    now = 1000 * day
    assert [o.key for o in plan_prune(objs, older_than_s=2.5 * day, now=now)] == ["k4", "k3"]
    assert [o.key for o in plan_prune(objs, max_bytes=250, now=now)] == ["k4", "k3", "k2"]
    assert [o.key for o in plan_prune(objs, older_than_s=3.5 * day, max_bytes=250, now=now)] == ["k4", "k3", "k2"]
    assert plan_prune(objs, max_bytes=500, now=now) == []
    assert plan_prune(objs, now=now) == []


def test_connect_sends_no_request_unless_probing(s3_server):  # noqa: F811
    proxy = CountingProxy(s3_server.port)
    try:
        store = RemoteStore(s3_server.url("connect"), storage_options=s3_server.storage_options(proxy.endpoint))
        store.connect()
        assert sum(proxy.counts.values()) == 0
        store.connect(probe=True)  # one read of a name no entry can have, nothing else
        assert dict(proxy.counts) == {"GET": 1}
        assert list(store.list()) == []
        RemoteStore(f"memory://x-{uuid.uuid4().hex}").connect()  # no session to set up: a no-op
    finally:
        proxy.close()


# -- the shared folder is hostile: links, user files, other teams' objects, odd kinds, dead temps -------------

_OURS, _THEIRS = b"our team's secret value", b"another team's secret"
_PART = "cpu-p1"


def _sealed(key: str, secret: bytes = _OURS, size: int = 100) -> bytes:
    from xlakit.store import seal

    return seal({"name": "jit_f", "key": key, "partition": _PART}, b"y" * size, secret)


def test_maintenance_never_follows_a_linked_v1_or_partition(tmp_path):
    """Fault: prune/verify --fix followed <prefix>/v1 -> ~/home (or v1/<part> -> ~/home2) and deleted user
    files outside the prefix; an upload wrote into a linked partition's target."""
    from xlakit.cache import remote_maintenance as rm

    home = tmp_path / "home"
    (home / _PART).mkdir(parents=True)
    (home / _PART / "thesis").write_bytes(_sealed("thesis"))  # even an envelope out there is never touched
    (tmp_path / "bucket").mkdir()
    os.symlink(home, tmp_path / "bucket" / "v1")
    store = RemoteStore(f"file://{tmp_path}/bucket")
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        rm.prune(store, _OURS, older_than_s=0)
    with pytest.raises(NotADirectoryError):
        rm.verify(store, _OURS, fix=True)
    assert (home / _PART / "thesis").exists()
    os.unlink(tmp_path / "bucket" / "v1")
    (tmp_path / "bucket" / "v1").mkdir()
    os.symlink(home / _PART, tmp_path / "bucket" / "v1" / _PART)
    assert rm.verify(store, _OURS, fix=True, partition=_PART) == []
    assert rm.prune(store, _OURS, max_bytes=0).deleted == []
    assert "skipped, never followed" in store.scan().skipped[0].why
    with pytest.raises(OSError, match="refused for writes"):
        store.put(_PART, "new", _sealed("new"))
    assert sorted(os.listdir(home / _PART)) == ["thesis"]
    with pytest.raises(ObjectRefused):  # readers refuse the linked partition too
        store.get(_PART, "thesis", 1 << 20)


def test_user_files_and_other_teams_objects_are_left_alone(tmp_path):
    """Fault: verify --fix and prune deleted user files (v1/userdir/notes.txt, v1/<part>/model.ckpt), and
    another team's prune --max-bytes 0 deleted our objects."""
    from xlakit.cache import remote_maintenance as rm

    store = RemoteStore(f"file://{tmp_path}/bucket")
    assert store.put(_PART, "ours-1", _sealed("ours-1"))
    assert store.put(_PART, "theirs-1", _sealed("theirs-1", _THEIRS))
    v1 = tmp_path / "bucket" / "v1"
    (v1 / "userdir").mkdir()
    (v1 / "userdir" / "notes.txt").write_bytes(b"user")
    (v1 / _PART / "model.ckpt").write_bytes(b"user weights")
    (v1 / _PART / "odd name;x").write_bytes(b"user")
    assert {o.key for o in store.list()} == {"ours-1", "theirs-1", "model.ckpt", "notes.txt"}
    assert any("odd name" in s.name for s in store.scan().skipped)
    found = {r.key: r for r in rm.verify(store, _OURS, fix=True)}
    assert found["model.ckpt"].reason == rm.NOT_XLAKIT and not found["model.ckpt"].deleted
    assert found["ours-1"].reason is None and found["theirs-1"].reason.startswith("foreign:")
    result = rm.prune(store, _THEIRS, max_bytes=0)  # the other team prunes everything it can
    assert [r.key for r in result.deleted] == ["theirs-1"] and result.other_key == 1 and result.not_xlakit == 2
    assert store.stat(_PART, "ours-1") is not None
    assert rm.prune(store, _OURS, older_than_s=0, now=time.time() + 10).deleted[0].key == "ours-1"
    assert (v1 / "userdir" / "notes.txt").read_bytes() == b"user"
    assert sorted(os.listdir(v1 / _PART)) == ["model.ckpt", "odd name;x"]


def test_verify_lists_links_fifos_and_folders_at_object_names_and_fix_leaves_them(tmp_path):
    """Fault: a symlink to /dev/zero, a FIFO or a folder at an object name (refused by every reader) was
    invisible to verify. They must be listed; and since xlakit never writes one, --fix must not delete them
    (nothing is deleted that is not provably xlakit's)."""
    from xlakit.cache import remote_maintenance as rm

    store = RemoteStore(f"file://{tmp_path}/bucket")
    assert store.put(_PART, "good", _sealed("good"))
    folder = tmp_path / "bucket" / "v1" / _PART
    target = tmp_path / "target"
    target.write_bytes(_sealed("link"))
    os.symlink(target, folder / "link")
    os.mkfifo(folder / "fifo")
    (folder / "emptydir").mkdir()
    (folder / "fulldir").mkdir()
    (folder / "fulldir" / "inner").write_bytes(b"x")
    bad = {r.key: r for r in rm.verify(store, _OURS) if r.reason}
    assert set(bad) == {"link", "fifo", "emptydir", "fulldir"} and "a symlink" in bad["link"].reason
    fixed = {r.key: r for r in rm.verify(store, _OURS, fix=True) if r.reason}
    assert not any(r.deleted for r in fixed.values()) and "left in place" in fixed["fifo"].reason
    assert sorted(os.listdir(folder)) == ["emptydir", "fifo", "fulldir", "good", "link"] and target.exists()


def test_prune_removes_dead_upload_temps_and_stats_counts_them(tmp_path, capsys):
    """Fault: a writer killed mid-upload left v1/<part>/.tmp-<uuid> forever, unseen by stats and prune. Only
    names exactly like the writer's (``.tmp-<unix s>-<pid>-<uuid hex>``) are removed: a user's old
    ``.tmp-dead-writer`` is not provably a leftover and survives."""
    from xlakit.cache import remote_maintenance as rm
    from xlakit.cli import main

    store = RemoteStore(f"file://{tmp_path}/bucket")
    assert store.put(_PART, "good", _sealed("good"))
    folder = tmp_path / "bucket" / "v1" / _PART
    old = folder / ".tmp-dead-writer"
    old.write_bytes(b"partial")
    t = time.time() - 7200
    os.utime(old, (t, t))
    (folder / f".tmp-{int(time.time()) - 7200}-1-{'a' * 32}").write_bytes(b"partial")  # its name says it is old
    dead = folder / f".tmp-{int(time.time())}-2-{'b' * 32}"
    dead.write_bytes(b"partial")
    os.utime(dead, (t, t))
    fresh = f".tmp-{int(time.time())}-1-{'d' * 32}"
    (folder / fresh).write_bytes(b"in flight")
    assert main(["cache", "stats", "--remote", f"file://{tmp_path}/bucket", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["temps"] == 4
    result = rm.prune(store, _OURS, older_than_s=86400)
    assert (result.temps_removed, result.temps_left) == (2, 1) and result.deleted == []
    assert sorted(os.listdir(folder)) == sorted([".tmp-dead-writer", fresh, "good"])


@pytest.mark.parametrize("where", ["bucket", "v1"])
def test_a_prefix_or_v1_that_is_a_file_exits_2(tmp_path, capsys, where):
    """Fault: a bucket path (or its v1) that is a file read as an empty bucket."""
    from xlakit.cli import main

    path = tmp_path / "bucket"
    if where == "v1":
        path.mkdir()
        path = path / "v1"
    path.write_bytes(b"hi")
    for cmd in (["ls"], ["stats"], ["verify"], ["prune", "--older-than", "0d"]):
        assert main(["cache", *cmd, "--remote", f"file://{tmp_path}/bucket"]) == 2
        assert "not a folder" in capsys.readouterr().err


def test_prune_and_fix_delete_only_what_authenticates_as_ours(tmp_path):
    """Fault: prune took the public key id in bytes 8:16 as proof of ownership. A put-only writer's junk carrying
    it (or copies of our valid objects under new names, which inflate "our" bytes) made ``prune --max-bytes``
    delete every valid object, and ``verify --fix`` deleted the junk as if it were ours. Ownership must be the
    header MAC with our secret, naming the object, with the listed length."""
    from xlakit.cache import remote_maintenance as rm
    from xlakit.store.envelope import MAGIC, key_id

    store = RemoteStore(f"file://{tmp_path}/bucket")
    for i in range(3):
        assert store.put(_PART, f"ours-{i}", _sealed(f"ours-{i}"))
    time.sleep(0.02)
    ours_bytes = sum(o.size_bytes for o in store.list())
    assert store.put(_PART, "junk", MAGIC + key_id(_OURS) + b"\x00" * 200_000)
    assert store.put(_PART, "copy", store.get(_PART, "ours-0", 1 << 20))  # an authentic envelope, renamed
    big = _sealed("ours-0", size=5000)  # an authentic header of ours-0 whose listed length cannot be its own
    assert store.put("cpu-p2", "ours-0", big)
    dry = rm.prune(store, _OURS, max_bytes=ours_bytes, dry_run=True)
    assert dry.deleted == [] and (dry.unproven, dry.not_xlakit) == (3, 0)
    assert dry.unproven_bytes == sum(o.size_bytes for o in store.list() if not o.key.startswith("ours-")
                                     or o.partition == "cpu-p2")
    assert [r.key for r in rm.prune(store, _OURS, max_bytes=ours_bytes - 1, dry_run=True).deleted] == ["ours-0"]
    found = {(r.partition, r.key): r for r in rm.verify(store, _OURS, fix=True)}
    assert not found[(_PART, "junk")].deleted and "not provably" in found[(_PART, "junk")].reason
    # an envelope under a wrong name is refused by readers, but the bytes read at a name prove nothing about
    # what is stored there (a misrouting server), so --fix leaves it
    assert not found[(_PART, "copy")].deleted and not found[("cpu-p2", "ours-0")].deleted
    damaged = bytearray(store.get(_PART, "ours-2", 1 << 20))
    damaged[-1] ^= 1  # after the header: provably ours, and unusable
    store.delete(_PART, "ours-2")
    assert store.put(_PART, "ours-2", bytes(damaged))
    found = {(r.partition, r.key): r for r in rm.verify(store, _OURS, fix=True)}
    assert found[(_PART, "ours-2")].deleted and found[(_PART, "ours-2")].reason.startswith("unauthenticated")
    assert {o.key for o in store.list()} == {"ours-0", "ours-1", "junk", "copy"}


def test_a_reader_reads_objects_with_long_headers_and_at_the_bounds_exactly():
    """Header-first reads must not break genuine objects: one over 256 KiB whose header alone is over 256 KiB (a
    module text near its cap) reads back whole; one at exactly max_bytes reads, one byte over is refused."""
    import uuid

    from xlakit.store import seal
    from xlakit.store.remote import FIRST_READ_BYTES, read_object

    store = RemoteStore(f"memory://long-headers-{uuid.uuid4().hex}")
    long_header = seal({"key": "k1", "partition": _PART, "text": "t" * (FIRST_READ_BYTES + 5000)},
                       os.urandom(50_000), _OURS)
    assert store.put(_PART, "k1", long_header)
    assert read_object(store, _PART, "k1", 1 << 30, _OURS) == long_header
    exact = seal({"key": "k2", "partition": _PART}, os.urandom(FIRST_READ_BYTES * 2), _OURS)
    assert store.put(_PART, "k2", exact)
    assert read_object(store, _PART, "k2", len(exact), _OURS) == exact
    with pytest.raises(ObjectRefused, match="over the"):
        read_object(store, _PART, "k2", len(exact) - 1, _OURS)
    small = _sealed("k3")
    assert store.put(_PART, "k3", small)
    assert read_object(store, _PART, "k3", len(small), _OURS) == small
    with pytest.raises(ObjectRefused, match="over the"):
        read_object(store, _PART, "k3", len(small) - 1, _OURS)
    with pytest.raises(ObjectRefused, match="foreign"):  # a big object of another key: its header stops the read
        read_object(store, _PART, "k2", 1 << 30, _THEIRS)


def test_prune_ages_objects_by_their_sealed_creation_time_so_replayed_old_objects_go_first(tmp_path):
    """Fault: prune aged objects by the bucket's listing time. Someone who can only create objects re-uploaded
    genuine objects a prune had removed; they were the newest by the listing, so ``prune --max-bytes`` evicted
    the team's current programs instead. The age now comes from the authenticated header's ``created``."""
    from xlakit.cache import remote_maintenance as rm
    from xlakit.store import seal

    store = RemoteStore(f"file://{tmp_path}/bucket")
    now = time.time()
    assert store.put(_PART, "current", seal({"name": "jit_f", "key": "current", "partition": _PART,
                                             "created": now - 60}, b"y" * 100, _OURS))
    time.sleep(0.05)
    assert store.put(_PART, "replayed", seal({"name": "jit_f", "key": "replayed", "partition": _PART,
                                              "created": now - 86400 * 30}, b"y" * 100, _OURS))
    one = max(o.size_bytes for o in store.list())
    assert [r.key for r in rm.prune(store, _OURS, max_bytes=one, dry_run=True).deleted] == ["replayed"]
