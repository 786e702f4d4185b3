"""The S3 server killed mid-run, then restarted: the tiered store fails open and resumes with a new tier."""

from __future__ import annotations

import time
import uuid
import warnings

from fleet_helpers import Recorder, sign, verifier
from s3_server import s3_server  # noqa: F401  (fixture)

from xlakit.store.base import MemoryStore
from xlakit.store.remote import RemoteStore
from xlakit.store.tiered import RemoteUnavailableWarning, TieredStore

MB = 1 << 20


def test_server_killed_then_restarted(s3_server):  # noqa: F811
    """While the server is dead (SIGKILL): reads are misses, writes stay local, every answer is immediate
    enough, nothing raises; after 3 consecutive errors one warning and one remote_off event switch the remote
    off. After a restart, a new tier uploads again and reads what was stored before the outage."""
    url, opts = s3_server.url(f"outage-{uuid.uuid4().hex[:8]}"), s3_server.storage_options()
    local, events = MemoryStore(), Recorder()
    tier = TieredStore(local, RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events,
                       max_failures=3)
    tier.put("p", "before", sign(b"before", partition="p", key="before"), compile_s=2.0)
    assert tier.drain(30) == 0
    other_machine = sign(b"from another machine", partition="p", key="remote-only")
    RemoteStore(url, storage_options=opts).put("p", "remote-only", other_machine)
    assert events.kinds() == ["upload"]

    s3_server.kill()
    # the killed server's Unix sockets (/tmp/seaweedfs-<service>-<port>.sock) go with it: they piled up run after run
    assert s3_server.socket_files() == []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.monotonic()
            assert tier.get("p", "remote-only", MB) is None  # fails open: a miss, no exception
            assert tier.put("p", "during", sign(b"during", partition="p", key="during"), compile_s=2.0) is True
            assert tier.drain(30) == 0
            assert tier.get("p", "during", MB) == sign(b"during", partition="p", key="during")  # local copy serves it
            assert tier.get("p", "absent", MB) is None  # third consecutive error: remote off
            calls_done = len(events.events)
            for i in range(5):  # no more remote calls: answered locally at once
                assert tier.get("p", f"x{i}", MB) is None
            elapsed = time.monotonic() - t0
        assert len(events.events) == calls_done
        assert events.kinds()[1:] == ["remote_error", "upload_error", "remote_error", "remote_off"]
        assert [w.category for w in caught] == [RemoteUnavailableWarning]
        assert not tier.remote_on
        assert elapsed < 30, f"the outage cost {elapsed:.1f} s of waiting"
        tier.put("p", "while-off", sign(b"off", partition="p", key="while-off"), compile_s=2.0)
        assert events.of("upload_skip")[-1].reason == "remote switched off for this process"
        tier.close()
    finally:
        s3_server.start()

    events2 = Recorder()
    tier2 = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events2)
    tier2.put("p", "after", sign(b"after", partition="p", key="after"), compile_s=2.0)
    assert tier2.drain(30) == 0
    assert [(e.kind, e.created) for e in events2.of("upload")] == [("upload", True)]
    assert tier2.get("p", "remote-only", MB) == other_machine  # data survived the restart
    assert sorted(o.key for o in RemoteStore(url, storage_options=opts).list("p")) == ["after", "before",
                                                                                      "remote-only"]
    tier2.close()


def test_hung_server_costs_a_bounded_wait(s3_server):  # noqa: F811
    """A server that accepts connections and never answers (SIGSTOP): the first read gives up after timeout_s,
    which switches the remote off at once (a missed deadline is a dark server), and later reads are
    local-only at once."""
    url, opts = s3_server.url(f"hung-{uuid.uuid4().hex[:8]}"), s3_server.storage_options()
    events = Recorder()
    tier = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts, timeout_s=1.0), on_event=events,
                       max_failures=2, timeout_s=1.0)
    assert tier.get("p", "warm-up", MB) is None  # connection set up while the server answers
    s3_server.pause()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.monotonic()
            assert [tier.get("p", f"k{i}", MB) for i in range(4)] == [None] * 4
            elapsed = time.monotonic() - t0
    finally:
        s3_server.resume()
    assert 1.0 <= elapsed < 3.0, elapsed
    assert events.kinds() == ["remote_miss", "remote_error", "remote_off"]
    assert "within 1" in events.events[1].reason
    assert [w.category for w in caught] == [RemoteUnavailableWarning]
    tier.close(timeout_s=0)
