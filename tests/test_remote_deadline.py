"""Every remote operation ends within one deadline, whatever the server does: a bucket that accepts and never
answers, one that drips a byte at a time, one that ignores ``Range`` and streams more than asked. The servers are
sockets on 127.0.0.1 (benchmarks/fake_s3.py) spoken to through s3fs, with a 1 s deadline so the bound is
measured in seconds, not waited for at its 30 s default."""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
pytest.importorskip("s3fs")
from fake_s3 import FakeS3  # noqa: E402

from xlakit.cache.remote import SharedStore  # noqa: E402
from xlakit.events import EventLog  # noqa: E402
from xlakit.store import seal  # noqa: E402
from xlakit.store.base import ObjectRefused  # noqa: E402
from xlakit.store.envelope import MAGIC, key_id  # noqa: E402
from xlakit.store.remote import FIRST_READ_BYTES, RemoteStore, read_object, remote_timeout_s  # noqa: E402

SECRET = b"deadline-test-secret-0123456789ab"
PART = "cpu-deadline"
DEADLINE_S = 1.0
SLACK_S = 1.5  # thread start-up and the loop's cancellation on a loaded 2-core machine


def _key(i: int) -> str:
    return f"jit_f-{i:064x}"


@pytest.fixture
def server():
    made = []

    def make(mode, **kw):
        made.append(FakeS3(mode, **kw))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def _shared(tmp_path, srv, monkeypatch) -> SharedStore:
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_TIMEOUT_S", str(DEADLINE_S))  # the setting a user would change
    return SharedStore(tmp_path / "cache", remote="s3://bkt/pre", storage_options=srv.options(), secret=SECRET,
                       log=EventLog())


def test_a_black_holed_bucket_costs_a_process_one_deadline(tmp_path, server, monkeypatch):
    """Fault: the first read paid the 30 s connect wait and then a 30 s read (60 s), and each later read paid
    again (137 s for a two-program run). Now the first operation (its wait for the client's set-up, whose probe
    hangs too, included) ends at the deadline and switches the remote off; every later read and upload, sync or
    not, is local at once; closing waits for nothing."""
    srv = server("hang")
    store = _shared(tmp_path, srv, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        first = store.layer.get(PART, _key(1))
        first_s = time.perf_counter() - t0
        with store.sync_uploads():  # the coordination claimant's upload
            store.put(PART, _key(1), {"name": "f", "compile_s": 3.0}, b"x" * 1000)
        second = store.layer.get(PART, _key(2))
        store.put(PART, _key(2), {"name": "g", "compile_s": 3.0}, b"y" * 1000)  # background upload
        abandoned = store.close(timeout_s=10)
        total_s = time.perf_counter() - t0
    assert first.status == "absent" and second.status == "absent"
    assert DEADLINE_S * 0.9 <= first_s <= DEADLINE_S + SLACK_S, first_s
    assert total_s <= DEADLINE_S + SLACK_S + 0.5, total_s  # the whole run: one deadline, not one per operation
    assert not store.tier.remote_on and abandoned == 0
    off = store.log.events("load_error")
    assert any("within the deadline" in (e.reason or "") for e in off)


def test_a_dripping_server_cannot_hold_a_synchronous_upload(tmp_path, server, monkeypatch):
    """Fault: a server sending one byte every few seconds never tripped botocore's per-recv read timeout, so the
    coordination claimant's synchronous upload never returned. The whole upload now has one deadline."""
    srv = server("drip", drip_s=0.2)
    store = _shared(tmp_path, srv, monkeypatch)
    store.tier.ready(5)  # the set-up (its probe drips too) has had its deadline: the upload alone is measured
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        with store.sync_uploads():
            store.put(PART, _key(3), {"name": "f", "compile_s": 3.0}, b"x" * 1000)
        upload_s = time.perf_counter() - t0
    assert upload_s <= DEADLINE_S + SLACK_S, upload_s
    assert store.log.events("upload_error") or not store.tier.remote_on
    store.close(timeout_s=0)


def test_a_server_that_ignores_range_cannot_stream_more_than_asked(server):
    """Fault: a server answering a ranged GET with the whole 64 MB body (200, not 206) streamed all of it into
    the reader, whatever the cap. The reader stops at the range: what the server managed to send is what the
    kernel's socket buffers took, a few MB, and the object is refused."""
    srv = server("ignore_range", flood=64 << 20)
    remote = RemoteStore("s3://bkt/pre", storage_options=srv.options(), timeout_s=30)  # bytes measured, not time
    with pytest.raises(ObjectRefused, match="magic"):
        read_object(remote, PART, _key(4), 2 << 30, SECRET)
    time.sleep(0.3)
    assert srv.sent < 16 << 20, srv.sent
    assert len(remote.read_range(PART, _key(4), 0, 1000)) == 1000


def test_a_forged_object_costs_a_reader_its_first_read_only(server):
    """Fault: the reader's byte cap was the 2 GiB entry bound, so anyone able to write the bucket could make every
    reader pull 2 GiB. A reader now proves the header (key id, header MAC, this partition and key) from the
    first 256 KiB before asking for more, and asks for exactly the length the authenticated header gives."""
    srv = server("ok")
    remote = RemoteStore("s3://bkt/pre", storage_options=srv.options(), timeout_s=30)  # bytes measured, not time
    forged = MAGIC + key_id(SECRET) + (16).to_bytes(4, "big") + os.urandom(8 << 20)  # our public key id, 8 MB
    assert remote.put(PART, _key(5), forged)
    genuine = seal({"key": _key(6), "partition": PART, "name": "f"}, os.urandom(1 << 20), SECRET)
    assert remote.put(PART, _key(6), genuine)
    srv.sent = 0
    with pytest.raises(ObjectRefused, match="unauthenticated"):
        read_object(remote, PART, _key(5), 2 << 30, SECRET)
    assert srv.sent <= FIRST_READ_BYTES, srv.sent
    srv.sent, requests = 0, srv.requests
    assert read_object(remote, PART, _key(6), 2 << 30, SECRET) == genuine
    assert srv.sent == len(genuine) and srv.requests - requests == 2  # header first, then exactly the rest


def test_deadline_setting_is_checked():
    assert remote_timeout_s(environ={}) == 30.0
    assert remote_timeout_s(environ={"XLAKIT_CACHE_REMOTE_TIMEOUT_S": "2.5"}) == 2.5
    for bad in ("0", "-1", "soon", "nan", "inf", "1e10"):  # 1e10 s overflowed threading.Event.wait
        with pytest.raises(ValueError, match="XLAKIT_CACHE_REMOTE_TIMEOUT_S"):
            remote_timeout_s(environ={"XLAKIT_CACHE_REMOTE_TIMEOUT_S": bad})


def test_housekeeping_against_a_hung_bucket_is_a_clear_error_within_the_deadline(server, monkeypatch, capsys):
    """Fault: ``xlakit cache ls|prune --remote`` against a bucket that never answers either hung or, once
    bounded, said "the cache is locked by another process". It must end at the deadline, exit 2, and say the
    remote did not answer."""
    import json

    from xlakit.cli import main

    srv = server("hang")
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_TIMEOUT_S", str(DEADLINE_S))
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_OPTIONS", json.dumps(srv.options()))
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", SECRET.decode())
    for argv in (["cache", "ls", "--remote", "s3://bkt/pre"], ["cache", "prune", "--remote", "s3://bkt/pre",
                                                               "--max-bytes", "1"]):
        t0 = time.perf_counter()
        assert main(argv) == 2
        assert time.perf_counter() - t0 <= DEADLINE_S + SLACK_S + 1.0  # s3fs builds its client on the first call
        err = capsys.readouterr().err
        assert "did not answer" in err and "locked" not in err


def test_verify_reads_junk_no_further_than_its_header(server):
    """Fault: ``verify --remote`` read every object whole, up to the 2 GiB bound: a bucket writer's junk made
    it pull gigabytes. An object whose header does not authenticate is judged from its first 64 KiB."""
    from xlakit.cache import remote_maintenance as rm

    srv = server("ok")
    remote = RemoteStore("s3://bkt/pre", storage_options=srv.options(), timeout_s=30)  # bytes measured, not time
    srv.objects[f"bkt/pre/v1/{PART}/{_key(7)}"] = MAGIC + key_id(SECRET) + (16).to_bytes(4, "big") + bytes(8 << 20)
    srv.sent = 0
    [report] = rm.verify(remote, SECRET, fix=True)
    assert report.reason.startswith("unauthenticated: header") and not report.deleted
    assert srv.sent <= rm.HEAD_BYTES + 4096, srv.sent


def test_prune_of_a_bucket_that_lists_but_never_serves_costs_one_deadline_and_deletes_nothing(server, monkeypatch,
                                                                                             capsys):
    """Fault: remote prune read each listed object's header under its own deadline and skipped the ones that did
    not answer: 20 listed objects cost 20 deadlines (1,000 objects at the 30 s default: hours), then it printed
    "Deleted 0 objects" and exited 0. The first missed deadline now stops the whole command (exit 2, nothing
    deleted)."""
    import json

    from xlakit.cli import main

    srv = server("ok")
    for i in range(8):
        srv.objects[f"bkt/pre/v1/{PART}/{_key(i)}"] = b"x" * 100
    srv.mode = "hang_get"  # the listing answers, every object read hangs
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_TIMEOUT_S", str(DEADLINE_S))
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_OPTIONS", json.dumps(srv.options()))
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", SECRET.decode())
    t0 = time.perf_counter()
    assert main(["cache", "prune", "--remote", "s3://bkt/pre", "--max-bytes", "1"]) == 2
    assert time.perf_counter() - t0 <= 2 * DEADLINE_S + SLACK_S + 1.0  # not 8 deadlines
    assert "did not answer" in capsys.readouterr().err
    assert len(srv.objects) == 8
