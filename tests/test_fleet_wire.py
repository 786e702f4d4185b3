"""The cache wired to a shared bucket: enable_cache(remote=...) against a real S3 server (SeaweedFS on loopback).

Machines are subprocesses with their own empty local folders and the same bucket prefix (as users would set
it: XLAKIT_CACHE_REMOTE*); requests are counted on the wire by a proxy. The trust tests run the cache's one
fetch path (CachePath over a SharedStore) in-process, with a load function that records whether any program
bytes reached it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import fresh_process
import pytest
from conftest import worker_env
from s3_server import CountingProxy, s3_server  # noqa: F401  (fixture)

from xlakit.cache import open_store
from xlakit.cache.path import CachePath
from xlakit.cache.remote import RefusedObjectWarning, SharedStore
from xlakit.events import EventLog
from xlakit.store import LocalStore

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fleet_wire_worker.py"
PROGRAMS = ("add_one", "matmul", "mlp")
SECRET = b"fleet-wire-secret-0123456789abcdef"
PARTITION = "cpu-test"


def run_machine(cache: Path, url: str, options: dict, *programs: str, mode: str = "rw") -> dict:
    env = worker_env({"XLAKIT_CACHE_REMOTE": url, "XLAKIT_CACHE_REMOTE_MODE": mode,
                      "XLAKIT_CACHE_REMOTE_OPTIONS": json.dumps(options),
                      "XLAKIT_CACHE_SECRET": SECRET.hex()})
    proc = fresh_process.run([sys.executable, str(WORKER), "--cache", str(cache), *programs], capture_output=True,
                             text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def of(report: dict, kind: str) -> list[dict]:
    return [e for e in report["events"] if e["kind"] == kind]


@pytest.fixture(scope="module")
def machine_a(s3_server, tmp_path_factory):  # noqa: F811
    """Machine A ran the programs cold with its own empty folder and uploaded them: (url, report)."""
    url = s3_server.url(f"wire-{uuid.uuid4().hex[:8]}")
    report = run_machine(tmp_path_factory.mktemp("machine-a"), url, s3_server.storage_options(), *PROGRAMS)
    return url, report


def test_machine_b_starts_warm_from_the_bucket(machine_a, s3_server, tmp_path):  # noqa: F811
    """Fault: a second machine compiles everything again. B (another empty folder, same bucket) must get every
    program with one remote_hit and no compile, with bit-identical results."""
    url, a = machine_a
    assert len(of(a, "compile")) == len(PROGRAMS)
    uploads = of(a, "upload")
    assert len(uploads) == len(PROGRAMS) and all(e["reason"] is None and e["bytes"] > 0 for e in uploads)
    assert all(e["folder"] == url for e in uploads)

    b = run_machine(tmp_path / "machine-b", url, s3_server.storage_options(), *PROGRAMS)
    assert of(b, "compile") == [] and of(b, "miss") == []
    assert sorted(e["name"] for e in of(b, "remote_hit")) == sorted(e["name"] for e in of(a, "compile"))
    assert len(of(b, "hit")) == len(PROGRAMS)
    assert b["results"] == a["results"]
    # kept locally: B's next start is a local hit without a remote request
    again = run_machine(tmp_path / "machine-b", url, s3_server.storage_options(), *PROGRAMS)
    assert of(again, "remote_hit") == [] and of(again, "remote_miss") == [] and len(of(again, "hit")) == 3


def test_ro_worker_sends_no_write_request(machine_a, s3_server, tmp_path):  # noqa: F811
    """Fault: a read-only (untrusted) worker uploads what it compiles. Counted on the wire: no PUT/POST/DELETE,
    while it still reads shared programs and caches its own locally."""
    url, _ = machine_a
    proxy = CountingProxy(s3_server.port)
    try:
        ro = run_machine(tmp_path / "student", url, s3_server.storage_options(proxy.endpoint), "add_one", "sin3",
                         mode="ro")
    finally:
        proxy.close()
    assert proxy.writes() == 0, proxy.requests
    assert proxy.counts["GET"] >= 2  # add_one and sin3 were looked up
    assert [e["name"] for e in of(ro, "remote_hit")] == ["jit_add_one"]
    assert [e["name"] for e in of(ro, "compile")] == ["jit_sin"] and len(of(ro, "store")) == 1
    assert of(ro, "upload") == [] and of(ro, "upload_error") == []



def test_dead_server_never_fails_a_program(machine_a, s3_server, tmp_path):  # noqa: F811
    """Fault: an unreachable bucket fails or slows every program. With the S3 endpoint refusing connections the
    programs still compile, store locally and give machine A's results; the remote is switched off after 3
    errors with one warning, and each error is an event."""
    _, a = machine_a
    options = dict(s3_server.storage_options(), endpoint_url=f"http://127.0.0.1:{_free_port()}")  # nothing listens
    dead = run_machine(tmp_path / "offline", s3_server.url("offline"), options, *PROGRAMS)
    assert dead["results"] == a["results"]
    assert len(of(dead, "compile")) == len(PROGRAMS) and len(of(dead, "store")) == len(PROGRAMS)
    assert [w for w in dead["warnings"] if "off for this process" in w] and len(dead["warnings"]) == 1
    errors = [e for e in of(dead, "load_error") if e["folder"] == s3_server.url("offline")]
    assert 1 <= len(errors) <= 4 and any("off for this process" in e["reason"] for e in errors)
    assert of(dead, "upload") == []

# -- trust, in-process over the real bucket -------------------------------------------------------------------

def _shared(root: Path, url: str, opts: dict, secret: bytes = SECRET, mode: str = "rw") -> tuple[SharedStore, EventLog]:
    log = EventLog()
    return SharedStore(root, remote=url, mode=mode, storage_options=opts, secret=secret, log=log), log


def _published(tmp_path: Path, url: str, opts: dict, key: str) -> bytes:
    """Machine A publishes one entry and uploads it (synchronously); returns the object's bytes."""
    a, _ = _shared(tmp_path / "a", url, opts)
    with a.sync_uploads():
        assert a.put(PARTITION, key, {"name": "jit_f", "compile_s": 1.0}, b"\x01program bytes" * 100).stored
    blob = a.remote.get(PARTITION, key, 1 << 20)
    assert blob is not None
    a.close()
    return blob


def test_tampered_object_is_refused_never_loaded_and_remembered(s3_server, tmp_path):  # noqa: F811
    """Fault: a modified object in the bucket reaches XLA. It must be refused before any byte is decompressed or
    loaded, reported (corrupt event, one warning), remembered (no second GET), not kept locally, and left in
    the bucket (a reader never deletes)."""
    proxy = CountingProxy(s3_server.port)
    url, opts = s3_server.url(f"tamper-{uuid.uuid4().hex[:8]}"), s3_server.storage_options(proxy.endpoint)
    key = "jit_f-" + "a" * 64
    blob = _published(tmp_path, url, opts, key)
    bad = bytearray(blob)
    bad[-5] ^= 0xFF  # inside the compressed payload
    b, log = _shared(tmp_path / "b", url, opts)
    b.remote.fs.pipe_file(b.remote.object_name(PARTITION, key), bytes(bad))  # the attacker overwrites it
    loaded = []
    path = CachePath(b, log)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            program, decision = path.fetch(PARTITION, key, name="jit_f", load=lambda h, p: loaded.append(p) or p)
            gets = proxy.counts["GET"]
            again, _ = path.fetch(PARTITION, key, name="jit_f", load=lambda h, p: loaded.append(p) or p)
        assert program is None and again is None and loaded == []
        assert decision.kind == "miss" and "refused" in decision.reason and "HMAC mismatch" in decision.reason
        corrupt = log.events("corrupt")
        assert len(corrupt) == 1 and corrupt[0].folder == url and "left in the bucket" in corrupt[0].reason
        assert sum(issubclass(w.category, RefusedObjectWarning) for w in caught) == 1
        assert proxy.counts["GET"] == gets  # remembered: the second lookup sent no request
        assert b.objects.get(PARTITION, key, 1 << 20) is None  # never kept locally
        assert proxy.counts["DELETE"] == 0 and b.remote.get(PARTITION, key, 1 << 20) == bytes(bad)
    finally:
        proxy.close()
        b.close()


def test_another_secret_is_a_miss_that_leaves_the_object(s3_server, tmp_path):  # noqa: F811
    """Fault: a reader with another secret deletes or quarantines an object its owners can use. It must see a
    miss "signed with another key" (remote_miss event and decision), and the object stays byte-identical."""
    url, opts = s3_server.url(f"foreign-{uuid.uuid4().hex[:8]}"), s3_server.storage_options()
    key = "jit_f-" + "b" * 64
    blob = _published(tmp_path, url, opts, key)
    other, log = _shared(tmp_path / "other", url, opts, secret=b"another secret, another team")
    try:
        loaded = []
        program, decision = CachePath(other, log).fetch(PARTITION, key, name="jit_f",
                                                        load=lambda h, p: loaded.append(p) or p)
        assert program is None and loaded == [] and decision.kind == "miss"
        assert decision.reason.startswith("signed with another key")
        misses = log.events("remote_miss")
        assert len(misses) == 1 and "signed with another key" in misses[0].reason
        assert log.events("corrupt") == []
        assert other.remote.get(PARTITION, key, 1 << 20) == blob
        # the owners still read it
        owner, owner_log = _shared(tmp_path / "owner", url, opts)
        found, hit = CachePath(owner, owner_log).fetch(PARTITION, key, name="jit_f", load=lambda h, p: p)
        assert hit.kind == "hit" and found == b"\x01program bytes" * 100
        owner.close()
    finally:
        other.close()


def test_settings_come_from_arguments_or_environment(tmp_path, monkeypatch):
    """Fault: XLAKIT_CACHE_REMOTE is ignored, or a bad mode is accepted silently."""
    monkeypatch.delenv("XLAKIT_CACHE_REMOTE", raising=False)
    assert type(open_store(tmp_path / "plain", secret=SECRET)) is LocalStore
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE", f"file://{tmp_path / 'bucket'}")
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_MODE", "ro")
    store = open_store(tmp_path / "local", secret=SECRET)
    assert isinstance(store, SharedStore) and store.mode == "ro" and store.remote_url.endswith("bucket")
    store.close()
    with pytest.raises(ValueError, match="remote_mode"):
        open_store(tmp_path / "x", secret=SECRET, remote="file:///tmp/b", remote_mode="rwx")
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_OPTIONS", "[1]")
    with pytest.raises(ValueError, match="XLAKIT_CACHE_REMOTE_OPTIONS"):
        open_store(tmp_path / "y", secret=SECRET)


# -- one compile per program across processes -------------------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path: Path, url: str, options: dict, n: int, *programs: str) -> list[dict]:
    """``n`` processes of one jax.distributed job, each with its own empty local folder, started together."""
    port = _free_port()
    env = worker_env({"XLAKIT_CACHE_REMOTE": url, "XLAKIT_CACHE_REMOTE_OPTIONS": json.dumps(options),
                      "XLAKIT_CACHE_SECRET": SECRET.hex(), "XLAKIT_CACHE_WAIT_S": "60"})
    procs = [fresh_process.Popen([sys.executable, str(WORKER), "--cache", str(tmp_path / f"p{i}"),
                               "--distributed", str(port), str(n), str(i), *programs],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(n)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, f"process failed:\n{out[-2000:]}\n{err[-4000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def _same_key_everywhere() -> str | None:
    """None when xlakit's keys are the same in every process of a job, else why coordination cannot help yet."""
    from xlakit._jax import keys  # noqa: F401  (the placement-independent keys)

    return None


try:
    _PLACEMENT = _same_key_everywhere()
except ImportError:
    _PLACEMENT = ("xlakit's keys still contain concrete device ids (JAX's own key differs in every process of a "
                  "jax.distributed job), so every process claims its own key; needs xlakit/_jax/keys.py")


@pytest.mark.skipif(_PLACEMENT is not None, reason=_PLACEMENT or "")
def test_three_processes_compile_each_program_once(s3_server, tmp_path):  # noqa: F811
    """Fault: every process of a job compiles every program. Three processes with jax.distributed start cold
    together (own empty folders, one bucket): exactly one compile per program across all three, the others
    wait and load it; every result equal."""
    n = 3
    url = s3_server.url(f"job-{uuid.uuid4().hex[:8]}")
    reports = run_job(tmp_path, url, s3_server.storage_options(), n, *PROGRAMS)
    compiles = sorted(e["name"] for r in reports for e in of(r, "compile"))
    assert len(compiles) == len(PROGRAMS) and len(set(compiles)) == len(PROGRAMS), compiles
    assert sum(len(of(r, "claim")) for r in reports) == len(PROGRAMS)
    for r in reports:  # every program once per process: compiled (the claimant) or loaded from the shared store
        assert len(of(r, "compile")) + len(of(r, "hit")) == len(PROGRAMS), [e["kind"] for e in r["events"]]
    # the other two got each program from the bucket once: after waiting for the claimant, or late enough
    # to find its upload straight away
    assert sum(len(of(r, "remote_hit")) for r in reports) == (n - 1) * len(PROGRAMS)
    waits = [e for r in reports for e in of(r, "wait")]
    assert len(waits) <= (n - 1) * len(PROGRAMS)
    assert all(e["reason"].startswith("compiled by process ") for e in waits), waits
    assert all(r["results"] == reports[0]["results"] for r in reports)


def _process(tmp_path: Path, url: str, kv, pid: int):
    from xlakit._jax.coordinate import Coordinator
    from xlakit.cache.coordinated import CoordinatedCompiles

    store, log = _shared(tmp_path / f"local{pid}", url, {})
    path = CachePath(store, log)
    coord = CoordinatedCompiles(store, path, log, coordinator=Coordinator(kv, pid, wait_s=20, poll_s=0.05),
                                wait_s=20)
    return store, log, path, coord


def test_claimant_compiles_waiter_loads_its_entry(tmp_path):
    """Fault: the waiting half of the hook protocol never loads what the claimant stored (or waits for nothing).
    Process 0 claims on its miss and publishes after its "compile"; process 1, which missed too, waits and then
    loads the entry from the shared store: a wait event naming process 0, then a hit; no compile of its own.
    (Runs the real CachePath and SharedStore; only the key-value store is a double.)"""
    import threading
    import time

    from test_fleet_coordinate import FakeKV

    url, kv, key = f"file://{tmp_path / 'bucket'}", FakeKV(), "jit_f-" + "c" * 64
    s0, log0, path0, coord0 = _process(tmp_path, url, kv, 0)
    s1, log1, path1, coord1 = _process(tmp_path, url, kv, 1)
    load = lambda h, p: p  # noqa: E731
    _, miss0 = path0.fetch(PARTITION, key, name="jit_f", load=load)
    assert coord0.on_miss(PARTITION, key, "jit_f", load, None, miss0) == (None, miss0)
    assert coord0.claimed(PARTITION, key)
    got = {}

    def waiter():
        _, miss1 = path1.fetch(PARTITION, key, name="jit_f", load=load)
        got["result"] = coord1.on_miss(PARTITION, key, "jit_f", load, None, miss1)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)  # the compile
    stored = coord0.publish(PARTITION, key, lambda: path0.publish(PARTITION, key, {"name": "jit_f", "compile_s": 0.5},
                                                                  b"the program"))
    t.join(30)
    assert stored.kind == "store" and not coord0.claimed(PARTITION, key)
    program, decision = got["result"]
    assert program == b"the program" and decision.kind == "hit"
    assert [e.reason for e in log1.events("wait")] == ["compiled by process 0"]
    assert log1.events("wait")[0].duration_s >= 0.4 and len(log0.events("claim")) == 1
    s0.close(), s1.close()


def test_claimant_that_does_not_store_releases_the_waiters_at_once(tmp_path):
    """Fault: a program the claimant cannot store (unserializable, under the threshold) leaves the others waiting
    the whole bound. They must be told at once and compile themselves."""
    import threading
    import time

    from test_fleet_coordinate import FakeKV

    url, kv, key = f"file://{tmp_path / 'bucket'}", FakeKV(), "jit_g-" + "d" * 64
    s0, log0, path0, coord0 = _process(tmp_path, url, kv, 0)
    s1, log1, path1, coord1 = _process(tmp_path, url, kv, 1)
    load = lambda h, p: p  # noqa: E731
    _, miss0 = path0.fetch(PARTITION, key, name="jit_g", load=load)
    coord0.on_miss(PARTITION, key, "jit_g", load, None, miss0)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("r", coord1.on_miss(PARTITION, key, "jit_g", load, None, miss0)))
    start = time.perf_counter()
    t.start()
    time.sleep(0.2)
    coord0.give_up(PARTITION, key, "XLA cannot serialize this executable")
    t.join(30)
    assert got["r"] == (None, miss0) and time.perf_counter() - start < 10  # not the 20 s bound
    [wait] = log1.events("wait")
    assert "did not store it" in wait.reason and "cannot serialize" in wait.reason
    assert "not stored" in log0.events("claim")[0].reason
    s0.close(), s1.close()


def test_fleet_events_in_stats_and_prometheus():
    """Fault: remote reads, uploads, claims and waits are invisible to the metrics. Their counts, seconds and
    bytes must reach CacheStats and the Prometheus collector."""
    pytest.importorskip("prometheus_client")
    from xlakit.events import prometheus_collector

    log = EventLog()
    log.emit("remote_hit", name="jit_f", duration_s=0.25, bytes=1000, folder="s3://b/p")
    log.emit("remote_hit", name="jit_g", duration_s=0.5, bytes=3000, folder="s3://b/p")
    log.emit("upload", name="jit_h", duration_s=1.0, bytes=500)
    log.emit("wait", name="jit_h", duration_s=2.0)
    stats = log.stats()
    assert stats.counts["remote_hit"] == 2 and stats.fleet_s["remote_hit"] == 0.75
    assert stats.fleet_bytes["remote_hit"] == 4000 and stats.fleet_bytes["upload"] == 500
    samples = {(m.name, s.labels.get("kind")): s.value for m in prometheus_collector(log).collect()
               for s in m.samples if m.name.startswith("xlakit_fleet")}
    assert samples[("xlakit_fleet_events", "remote_hit")] == 2
    assert samples[("xlakit_fleet_seconds", "wait")] == 2.0
    assert samples[("xlakit_fleet_bytes", "upload")] == 500


def test_load_bundle_shares_modules_through_the_remote(tmp_path):
    """Fault: load_bundle(remote=...) ignores the remote. A bundle copy with an empty .cache on another machine
    loads every module from the shared store (remote_hit, report status hit) with identical outputs."""
    import shutil

    import numpy as np
    from test_bundle import tiny_model, xs

    import xlakit
    from xlakit.bundle import load_bundle

    fn, state = tiny_model()
    pristine = tmp_path / "pristine"
    xlakit.export_bundle(fn, state, xs(2), pristine, batch_sizes=(1,))
    url = f"file://{tmp_path / 'bucket'}"
    copies = [tmp_path / "machine-a", tmp_path / "machine-b"]
    for c in copies:
        shutil.copytree(pristine, c)
    log_a, log_b = EventLog(), EventLog()
    a = load_bundle(copies[0], progress=False, remote=url, log=log_a)
    assert [r.status for r in a.reports] == ["miss"] and a._context.store.close() == 0
    assert len(log_a.events("upload")) == 1
    b = load_bundle(copies[1], progress=False, remote=url, log=log_b)
    assert [r.status for r in b.reports] == ["hit"] and len(log_b.events("remote_hit")) == 1
    assert np.array_equal(np.asarray(a(xs(1))), np.asarray(b(xs(1))))
    b._context.store.close()


def test_claimant_whose_compile_failed_neither_waits_on_itself_nor_holds_the_others(tmp_path):
    """Fault: a compile that raises after the claim (a failed compile, Ctrl-C) never reaches the write hook, so the
    claim stayed held: the same process's next lookup found its own claim and waited the whole bound on itself,
    and every other process waited too. The retry must compile at once, and the waiters be told at once."""
    import threading
    import time

    from test_fleet_coordinate import FakeKV

    url, kv, key = f"file://{tmp_path / 'bucket'}", FakeKV(), "jit_h-" + "e" * 64
    s0, log0, path0, coord0 = _process(tmp_path, url, kv, 0)
    s1, log1, path1, coord1 = _process(tmp_path, url, kv, 1)
    load = lambda h, p: p  # noqa: E731
    _, miss0 = path0.fetch(PARTITION, key, name="jit_h", load=load)
    assert coord0.on_miss(PARTITION, key, "jit_h", load, None, miss0) == (None, miss0)  # claimed; compile raises
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("r", coord1.on_miss(PARTITION, key, "jit_h", load, None,
                                                                           miss0)))
    start = time.perf_counter()
    t.start()
    time.sleep(0.2)
    retry = coord0.on_miss(PARTITION, key, "jit_h", load, None, miss0)  # the user calls the function again
    retry_s = time.perf_counter() - start
    t.join(30)
    assert retry == (None, miss0) and retry_s < 10  # compiles now, not after the 20 s bound
    assert coord0.claimed(PARTITION, key)  # and owes the others the entry (or a give_up) again
    assert got["r"] == (None, miss0) and time.perf_counter() - start < 10
    [wait] = log1.events("wait")
    assert "compile failed or was interrupted" in wait.reason
    assert coord0.release_all("exit") == 1 and not coord0.claimed(PARTITION, key)
    s0.close(), s1.close()


def test_claimant_interrupted_while_storing_tells_the_waiters(tmp_path):
    """Fault: Ctrl-C (or any error) during the claimant's store-and-upload left no pointer: every waiter waited
    the whole bound for a program that was never coming."""
    from test_fleet_coordinate import FakeKV

    url, kv, key = f"file://{tmp_path / 'bucket'}", FakeKV(), "jit_i-" + "f" * 64
    s0, log0, path0, coord0 = _process(tmp_path, url, kv, 0)
    load = lambda h, p: p  # noqa: E731
    _, miss0 = path0.fetch(PARTITION, key, name="jit_i", load=load)
    coord0.on_miss(PARTITION, key, "jit_i", load, None, miss0)

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        coord0.publish(PARTITION, key, interrupted)
    assert kv.data[f"xlakit/v1/done/{PARTITION}/{key}"].startswith("failed:KeyboardInterrupt")
    assert not coord0.claimed(PARTITION, key)
    s0.close()
