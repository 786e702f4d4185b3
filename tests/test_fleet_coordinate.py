"""One compile per program across processes: claims and pointers in jax.distributed's key-value store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import fresh_process
import pytest

from xlakit._jax.coordinate import MAX_POINTER, Coordinator

HERE = os.path.dirname(os.path.abspath(__file__))


class FakeKV:
    """The three key-value calls of jax's DistributedRuntimeClient, with its error texts, for thread tests."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.cond = threading.Condition()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.cond:
            if key in self.data and not allow_overwrite:
                raise RuntimeError(f"ALREADY_EXISTS: key {key} already exists.")
            self.data[key] = value
            self.cond.notify_all()

    def key_value_try_get(self, key):
        with self.cond:
            if key not in self.data:
                raise RuntimeError(f"NOT_FOUND: Config key {key} not found.")
            return self.data[key]

    def blocking_key_value_get(self, key, timeout_in_ms):
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.data, timeout_in_ms / 1000):
                raise RuntimeError(f"DEADLINE_EXCEEDED: GetKeyValue() timed out with key: {key}")
            return self.data[key]


def _threads(n, target):
    out = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, target(i))) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_one_claimant_and_waiters_load_its_program():
    kv, shared, compiles, events = FakeKV(), {}, [], []

    def worker(i):
        coord = Coordinator(kv, i, wait_s=10, poll_s=0.05, on_event=events.append)

        def produce():
            compiles.append(i)
            time.sleep(0.2)
            shared["k"] = b"exe"
            return b"exe"

        return coord.run("p", "k", fetch=lambda: shared.get("k"), produce=produce)

    assert _threads(4, worker) == [b"exe"] * 4
    assert len(compiles) == 1
    kinds = sorted(e.kind for e in events)
    assert kinds == ["claim", "wait", "wait", "wait"]
    assert {e.pointer for e in events} == {"p/k"}
    assert {e.owner for e in events} == {compiles[0]}
    assert set(kv.data) == {"xlakit/v1/claim/p/k", "xlakit/v1/done/p/k"}  # pointers only


def test_dead_claimant_waiters_compile_after_the_bound():
    """A claimant that never publishes (killed): the others wait wait_s, then compile themselves."""
    kv, events = FakeKV(), []
    kv.key_value_set("xlakit/v1/claim/p/k", "7")
    coord = Coordinator(kv, 1, wait_s=0.5, poll_s=0.1, on_event=events.append)
    t0 = time.monotonic()
    assert coord.run("p", "k", fetch=lambda: None, produce=lambda: b"own compile") == b"own compile"
    assert 0.5 <= time.monotonic() - t0 < 10  # waited the bound, then compiled (roomy: the machine may be loaded)
    assert [(e.kind, e.owner) for e in events] == [("wait_timeout", 7)]
    assert "no program from process 7 within 0.5 s" in events[0].reason


def test_a_program_already_shared_is_loaded_without_a_claim():
    kv = FakeKV()
    coord = Coordinator(kv, 0)
    assert coord.run("p", "k", fetch=lambda: b"old", produce=lambda: pytest.fail("compiled")) == b"old"
    assert kv.data == {}


def test_pointers_are_small_and_settings_checked():
    coord = Coordinator(FakeKV(), 0)
    with pytest.raises(ValueError, match="never the program"):
        coord.publish("p", "k", "x" * (MAX_POINTER + 1))
    with pytest.raises(ValueError):
        Coordinator(FakeKV(), 0, poll_s=0)


def test_broken_key_value_store_means_an_uncoordinated_compile():
    class Down(FakeKV):
        def key_value_set(self, *a, **k):
            raise RuntimeError("UNAVAILABLE: coordination service is gone")

    events = []
    coord = Coordinator(Down(), 0, on_event=events.append)
    assert coord.run("p", "k", fetch=lambda: None, produce=lambda: b"exe") == b"exe"
    assert [e.kind for e in events] == ["claim_error"]


def test_without_jax_distributed_there_is_no_coordinator():
    assert Coordinator.from_jax() is None  # this test process never initialized jax.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_three_jax_processes_compile_each_program_once(tmp_path):
    """3 CPU processes under jax.distributed run the same programs at the same moment: one claimant per
    program; the other two get its pointer and load its bytes from the shared file:// store; a claimant whose
    compile fails tells the others at once; a claimant slower than the wait bound makes the others compile."""
    n, port = 3, _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)
    worker = os.path.join(HERE, "fleet_coord_worker.py")
    procs = [fresh_process.Popen([sys.executable, worker, str(port), str(n), str(i), str(tmp_path / "shared")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(n)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for key in ("prog0", "prog1", "prog2", "prog3"):
        claimants = [r["me"] for r in reports if key in r["compiled"]]
        assert len(claimants) == 1, f"{key} compiled by {claimants}"
        for r in reports:
            assert r["values"][key] == f"executable {key}"
            (event,) = [e for e in r["events"] if e["key"] == key]
            if r["me"] == claimants[0]:
                assert event["kind"] == "claim"
            else:
                assert (event["kind"], event["pointer"], event["owner"]) == ("wait", f"cpu/{key}", claimants[0])
    # the claimant's compile raised: the others were told (no 60 s wait) and compiled themselves
    broken = [[e for e in r["events"] if e["key"] == "broken"] for r in reports]
    assert [(r["compiled"].count("broken"), r["compiled"].count("slow")) for r in reports] == [(1, 1)] * 3
    waiters = [evs[0] for evs in broken if evs and evs[0]["kind"] == "claim_failed"]
    assert len(waiters) == 2 and all("cannot serialize" in e["reason"] and e["seconds"] < 30 for e in waiters)
    # the claimant took 3 s, the bound was 1 s: the others compiled too, after about a second
    slow = [e for r in reports for e in r["events"] if e["key"] == "slow"]
    assert sorted(e["kind"] for e in slow) == ["claim", "wait_timeout", "wait_timeout"]
    assert all(1.0 <= e["seconds"] < 3.0 for e in slow if e["kind"] == "wait_timeout")
    assert all(r["values"]["broken"] == "executable broken" and r["values"]["slow"] == "executable slow"
               for r in reports)


def test_claimant_that_uploaded_but_never_published_is_found_in_the_store():
    """The claimant stored the program and died before publishing: the waiter finds it by polling the store."""
    kv, events = FakeKV(), []
    kv.key_value_set("xlakit/v1/claim/p/k", "3")
    shared = {}
    threading.Timer(0.2, lambda: shared.update(k=b"exe")).start()
    coord = Coordinator(kv, 1, wait_s=10, poll_s=0.05, store_poll_s=0.3, on_event=events.append)
    t0 = time.monotonic()
    assert coord.run("p", "k", fetch=lambda: shared.get("k"), produce=lambda: pytest.fail("compiled")) == b"exe"
    assert time.monotonic() - t0 < 8  # found by polling the store, well before the 10 s bound
    assert [(e.kind, e.pointer, e.owner) for e in events] == [("wait", None, 3)]


def test_a_process_never_waits_on_its_own_claim():
    """Fault: a claim left by this process (its earlier compile raised) made it wait ``wait_s`` on itself."""
    import time

    from xlakit._jax.coordinate import Coordinator

    kv = FakeKV()
    coord = Coordinator(kv, 3, wait_s=20, poll_s=0.05)
    assert coord.claim("p", "k") == (True, 3)
    start = time.perf_counter()
    assert coord.run("p", "k", fetch=lambda: None, produce=lambda: "compiled") == "compiled"
    assert time.perf_counter() - start < 10  # at once, not after the 20 s bound
    assert kv.data["xlakit/v1/done/p/k"] == "p/k"
