"""TieredStore: local in front of a shared remote — read-through, write-behind, trust, failing open, exit drain.

The proofs run against a real S3 server (SeaweedFS on loopback) with a counting proxy in front, so "no write
request" and "one GET" are counted on the wire; the failure-mode unit tests use in-memory doubles."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
import warnings

import pytest
from fleet_helpers import BrokenStore, Recorder, sign, verifier
from s3_server import CountingProxy, s3_server  # noqa: F401  (fixture)

from xlakit.store.base import MemoryStore, Store
from xlakit.store.remote import RemoteStore
from xlakit.store.tiered import RemoteUnavailableWarning, TieredStore

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1 << 20


@pytest.fixture
def proxied(s3_server):  # noqa: F811
    """(url, storage_options through a counting proxy, proxy) for a fresh prefix of the shared bucket."""
    proxy = CountingProxy(s3_server.port)
    yield s3_server.url(f"tier-{uuid.uuid4().hex[:8]}"), s3_server.storage_options(proxy.endpoint), proxy
    proxy.close()


def test_machine_b_reads_what_machine_a_uploaded(proxied):
    """A writes locally and uploads in the background; B (empty local store) gets each entry with one GET,
    keeps it locally, and serves the next read without touching the remote."""
    url, opts, proxy = proxied
    events_a, events_b = Recorder(), Recorder()
    a = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events_a)
    blobs = {f"k{i}": sign(f"program {i}".encode() * 100, key=f"k{i}") for i in range(3)}
    for key, blob in blobs.items():
        assert a.put("cpu-test", key, blob, compile_s=2.0) is True
    assert a.drain(30) == 0
    assert [(e.key, e.created) for e in events_a.of("upload")] == [("k0", True), ("k1", True), ("k2", True)]
    assert isinstance(a, Store)

    b_local = MemoryStore()
    b = TieredStore(b_local, RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events_b)
    proxy.counts.clear()
    for key, blob in blobs.items():
        assert b.get("cpu-test", key, MB) == blob
    assert dict(proxy.counts) == {"GET": 3}
    assert events_b.kinds() == ["remote_hit"] * 3
    assert [e.nbytes for e in events_b.events] == [len(b) for b in blobs.values()]
    assert {k for (_, k) in b_local.objects} == set(blobs)  # written through into B's local store
    for key, blob in blobs.items():  # now local: no request at all
        assert b.get("cpu-test", key, MB) == blob
    assert dict(proxy.counts) == {"GET": 3}
    assert b.get("cpu-test", "absent", MB) is None  # a miss is one GET, no HEAD, no write
    assert dict(proxy.counts) == {"GET": 4}
    assert events_b.kinds()[-1] == "remote_miss"
    # B's own puts of an entry A already uploaded: create-only says "exists", which is success
    b.put("cpu-test", "k0", blobs["k0"], compile_s=2.0)
    assert b.drain(30) == 0
    assert [(e.kind, e.created) for e in events_b.of("upload")] == [("upload", False)]
    a.close(), b.close()


def test_ro_worker_sends_no_write_request(proxied):
    """mode='ro' (untrusted workers): reads hit the remote, local writes work, and not one PUT/POST/DELETE
    reaches the server — counted on the wire by the proxy."""
    url, opts, proxy = proxied
    writer = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts))
    writer.put("cpu-test", "shared", sign(b"shared program", key="shared"))
    assert writer.drain(30) == 0
    writer.close()

    proxy.counts.clear()
    events = Recorder()
    ro_local = MemoryStore()
    ro = TieredStore(ro_local, RemoteStore(url, storage_options=opts), mode="ro", verify=verifier(), on_event=events,
                     probe_on_start=True)
    assert ro.ready()
    assert dict(proxy.counts) == {"GET": 1}  # the start-up probe: a read of a name no entry has
    assert ro.get("cpu-test", "shared", MB) == sign(b"shared program", key="shared")
    assert ro.get("cpu-test", "mine", MB) is None
    for i in range(3):
        assert ro.put("cpu-test", f"mine{i}", sign(b"x%d" % i, key=f"mine{i}"), compile_s=10.0) is True
    assert ro.drain(5) == 0
    ro.close()
    assert proxy.writes() == 0
    assert dict(proxy.counts) == {"GET": 3}
    assert [e.reason for e in events.of("upload_skip")] == ["read-only remote (mode='ro')"] * 3
    assert len(ro_local.objects) == 4  # the remote hit and three own entries, all local


def test_upload_thresholds(proxied):
    """Programs that compiled faster than the threshold, or blobs over the byte bound, stay local only."""
    url, opts, _ = proxied
    remote = RemoteStore(url, storage_options=opts)
    events = Recorder()
    tier = TieredStore(MemoryStore(), remote, on_event=events, min_upload_compile_s=1.0, max_upload_bytes=1000)
    tier.put("p", "fast", b"f" * 10, compile_s=0.2)
    tier.put("p", "big", b"b" * 1001, compile_s=5.0)
    tier.put("p", "unknown-time", b"u" * 10)
    tier.put("p", "slow", b"s" * 10, compile_s=1.5)
    assert tier.drain(30) == 0
    tier.close()
    assert sorted(o.key for o in remote.list()) == ["slow", "unknown-time"]
    skips = {e.key: e.reason for e in events.of("upload_skip")}
    assert "under the 1.0 s upload threshold" in skips["fast"]
    assert "over the 1000-byte upload threshold" in skips["big"]


def test_tampered_object_refused_remembered_and_left_alone(proxied, s3_server):  # noqa: F811
    """An object changed in the bucket fails ``verify``: never returned, never written into the local store,
    remembered (no second GET), reported; the object stays in the bucket (a reader never deletes)."""
    url, opts, proxy = proxied
    owner = RemoteStore(url, storage_options=s3_server.storage_options())
    owner.put("cpu-test", "victim", sign(b"good program", key="victim"))
    tampered = bytearray(sign(b"good program", key="victim"))
    tampered[-1] ^= 1
    owner.delete("cpu-test", "victim")  # someone with bucket access swaps the object
    owner.put("cpu-test", "victim", bytes(tampered))

    events = Recorder()
    local = MemoryStore()
    tier = TieredStore(local, RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events)
    proxy.counts.clear()
    assert tier.get("cpu-test", "victim", MB) is None
    assert tier.get("cpu-test", "victim", MB) is None
    assert dict(proxy.counts) == {"GET": 1}  # the second read did not ask again
    assert events.kinds() == ["remote_corrupt"]
    assert "HMAC mismatch" in events.events[0].reason
    assert tier.refused() == {("cpu-test", "victim"): events.events[0].reason}
    assert local.objects == {}
    assert owner.get("cpu-test", "victim", MB) == bytes(tampered)
    # a reader with another secret: refused the same way, and the owners' object is untouched
    other = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts), verify=verifier(b"another secret"))
    owner.delete("cpu-test", "victim")
    owner.put("cpu-test", "victim", sign(b"good program", key="victim"))
    assert other.get("cpu-test", "victim", MB) is None
    assert owner.get("cpu-test", "victim", MB) == sign(b"good program", key="victim")
    tier.close(), other.close()


def test_oversized_remote_object_is_refused(proxied, s3_server):  # noqa: F811
    url, opts, _ = proxied
    RemoteStore(url, storage_options=s3_server.storage_options()).put("p", "huge", b"z" * 5000)
    events = Recorder()
    tier = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts), on_event=events)
    assert tier.get("p", "huge", 4096) is None
    assert events.kinds() == ["remote_corrupt"] and "bound" in events.events[0].reason
    tier.close()


# -- failure modes with in-memory doubles ----------------------------------------------------------------------

def test_breaker_switches_the_remote_off_once():
    """N consecutive remote errors: one warning, one remote_off event, no more remote calls, every read and
    write answered from the local store, no exception to the caller."""
    remote, events = BrokenStore(), Recorder()
    local = MemoryStore()
    tier = TieredStore(local, remote, max_failures=3, on_event=events)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [tier.get("p", f"k{i}", MB) for i in range(5)]
        tier.put("p", "local-only", b"v")
        assert tier.get("p", "local-only", MB) == b"v"
    assert results == [None] * 5
    assert remote.calls == 3
    assert not tier.remote_on
    assert [w.category for w in caught] == [RemoteUnavailableWarning]
    assert "3 consecutive remote errors" in str(caught[0].message)
    assert events.kinds() == ["remote_error"] * 3 + ["remote_off", "upload_skip"]
    tier.close()


def test_success_resets_the_failure_count():
    class Flaky(MemoryStore):
        def __init__(self):
            super().__init__()
            self.n = 0

        def get(self, partition, key, max_bytes):
            self.n += 1
            if self.n % 2:
                raise ConnectionError("connection reset")  # a quick failure: the remote may recover
            return None

    tier = TieredStore(MemoryStore(), Flaky(), max_failures=2)
    for i in range(10):
        tier.get("p", f"k{i}", MB)
    assert tier.remote_on  # never two failures in a row
    tier.close()


def test_broken_observer_and_verifier_cannot_break_a_read():
    remote = MemoryStore()
    remote.put("p", "k", b"blob")

    def observer(event):
        raise RuntimeError("observer bug")

    def verify(blob, partition, key):
        raise ValueError("verifier bug")

    tier = TieredStore(MemoryStore(), remote, verify=verify, on_event=observer)
    assert tier.get("p", "k", MB) is None
    assert "verifier bug" in tier.refused()[("p", "k")]
    tier.close()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="'rw' or 'ro'"):
        TieredStore(MemoryStore(), MemoryStore(), mode="readonly")
    with pytest.raises(ValueError):
        TieredStore(MemoryStore(), MemoryStore(), max_failures=0)


_EXIT = r"""
import sys, time
sys.path.insert(0, {tests!r})
from fleet_helpers import SlowStore
from xlakit.store.base import MemoryStore
from xlakit.store.remote import RemoteStore
from xlakit.store.tiered import TieredStore
mode = sys.argv[1]
if mode == "stalled":
    tier = TieredStore(MemoryStore(), SlowStore(30.0), drain_timeout_s=1.0,
                       on_event=lambda e: print(e.kind, e.reason, flush=True) if e.kind == "upload_skip" else None)
else:
    options = dict(endpoint_url=sys.argv[3], key="xlakit-test", secret="xlakit-test",
                   client_kwargs={{"region_name": "us-east-1"}})
    tier = TieredStore(MemoryStore(), RemoteStore(sys.argv[2], storage_options=options))
for i in range(5):
    tier.put("p", f"k{{i}}", b"program %d" % i)
print("exiting", flush=True)
"""


def _run_exit(*args) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _EXIT.format(tests=HERE), *args], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc, time.monotonic() - t0


def test_exit_drains_pending_uploads(s3_server):  # noqa: F811
    """A process that writes and exits at once still uploads everything (the exit hook drains the queue)."""
    url = s3_server.url(f"exit-{uuid.uuid4().hex[:8]}")
    proc, _ = _run_exit("s3", url, s3_server.endpoint)
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = RemoteStore(url, storage_options=s3_server.storage_options())
    assert [o.key for o in remote.list("p")] == [f"k{i}" for i in range(5)]


def test_exit_waits_no_longer_than_the_bound():
    """Uploads stalled on the network: exit waits drain_timeout_s (1 s), reports what it abandoned, exits 0."""
    proc, seconds = _run_exit("stalled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "upload(s) abandoned" in proc.stdout
    assert seconds < 10, f"exit took {seconds:.1f} s with a 1 s drain bound (stalled upload: 30 s)"


def test_valid_object_under_another_name_is_refused(proxied, s3_server):  # noqa: F811
    """An authentic object copied to another key (or partition) must not be used as that entry: verify gets
    the requested partition and key, and the toy envelope binds them."""
    url, opts, _ = proxied
    owner = RemoteStore(url, storage_options=s3_server.storage_options())
    owner.put("cpu-test", "other-program", sign(b"program A", key="program-a"))  # authentic, but for program-a
    events = Recorder()
    tier = TieredStore(MemoryStore(), RemoteStore(url, storage_options=opts), verify=verifier(), on_event=events)
    assert tier.get("cpu-test", "other-program", MB) is None
    assert events.kinds() == ["remote_corrupt"]
    tier.close()


def test_sync_put_uploads_before_returning(proxied):
    """A coordination claimant uploads in its own thread, so the object exists when it publishes the pointer."""
    url, opts, _ = proxied
    remote = RemoteStore(url, storage_options=opts)
    events = Recorder()
    tier = TieredStore(MemoryStore(), remote, on_event=events)
    tier.put("p", "claimed", b"exe", compile_s=3.0, sync=True)
    assert tier.pending() == 0
    assert remote.get("p", "claimed", 10) == b"exe"
    assert [(e.kind, e.created) for e in events.events] == [("upload", True)]
    tier.close()


def test_full_local_disk_still_uploads():
    """The local put fails (disk full): the caller sees the OSError as with a plain local store, and the
    program still reaches the shared store for the other machines."""
    class Full(MemoryStore):
        def put(self, partition, key, blob):
            raise OSError(28, "No space left on device")

    remote = MemoryStore()
    tier = TieredStore(Full(), remote)
    with pytest.raises(OSError, match="No space"):
        tier.put("p", "k", b"exe", compile_s=5.0)
    assert tier.drain(10) == 0
    assert remote.get("p", "k", 10) == b"exe"
    tier.close()
