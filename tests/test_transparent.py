"""Transparent mode end to end: every jax.jit served from xlakit's store, in real JAX subprocesses.

Faults proved: truncated entries never repaired, a folder path inside the key, fast compiles silently dropped,
concurrent writers, entries of another build loaded, host-callback programs, no size cap, bad or forged entries.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import kinds, run_worker, worker_env

from xlakit.store import LocalStore
from xlakit.store.envelope import open_envelope, read_header_file, seal


def entry_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("*/*.xlk") if p.parent.name != "quarantine")


def quarantined(cache: Path) -> list[Path]:
    return sorted((cache / "quarantine").glob("*/*.xlk")) if (cache / "quarantine").exists() else []


def only(report: dict, kind: str) -> list[dict]:
    return [e for e in report["events"] if e["kind"] == kind]


def test_second_process_hits_every_program_bit_identical(tmp_path):
    cache = tmp_path / "cache"
    cold = run_worker(cache, "add_one", "matmul", "mlp")
    assert kinds(cold).count("miss") == 3 and kinds(cold).count("store") == 3
    assert kinds(cold).count("hit") == 0
    assert [e["name"] for e in only(cold, "store")] == ["jit_add_one", "jit_matmul", "jit_net"]
    warm = run_worker(cache, "add_one", "matmul", "mlp")
    assert kinds(warm) == ["hit", "hit", "hit"]
    assert warm["results"] == cold["results"]
    for e in only(warm, "hit"):
        assert e["duration_s"] > 0 and e["saved_s"] >= 0 and e["bytes"] > 0
    # the header keeps the measured compile seconds, the compiled memory and JAX's own key parts
    headers = [read_header_file(p) for p in entry_files(cache)]
    assert len(headers) == 3
    for h in headers:
        assert h["compile_s"] > 0
        assert set(h["key_parts"]) >= {"computation", "jax_lib version", "XLA flags", "compile_options"}
        assert h["memory"]["argument_size_in_bytes"] > 0
    mm = next(h for h in headers if h["name"] == "jit_matmul")
    assert mm["memory"]["argument_size_in_bytes"] == 256 and mm["memory"]["output_size_in_bytes"] == 256


def test_truncated_entry_is_repaired_then_hits(tmp_path):
    cache = tmp_path / "cache"
    first = run_worker(cache, "add_one")
    [entry] = entry_files(cache)
    with open(entry, "r+b") as f:
        f.truncate(100)
    second = run_worker(cache, "add_one")
    assert kinds(second) == ["corrupt", "miss", "compile", "store"]
    corrupt = only(second, "corrupt")[0]
    assert "truncated" in corrupt["reason"] and "quarantine" in corrupt["reason"]
    assert len(quarantined(cache)) == 1 and quarantined(cache)[0].stat().st_size == 100
    assert entry.stat().st_size > 100
    third = run_worker(cache, "add_one")
    assert kinds(third) == ["hit"]
    assert first["results"] == second["results"] == third["results"]


def test_copied_cache_hits_and_no_path_enters_the_key(tmp_path):
    a, b = tmp_path / "A", tmp_path / "elsewhere" / "B"
    filled = run_worker(a, "add_one", "mlp")
    shutil.copytree(a, b)
    moved = run_worker(b, "add_one", "mlp", env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jaxdir")})
    assert kinds(moved) == ["hit", "hit"]
    assert [e["key"] for e in only(moved, "hit")] == [e["key"] for e in only(filled, "store")]
    for path in entry_files(b):
        header_text = json.dumps(read_header_file(path))
        assert str(a) not in header_text and str(tmp_path / "jaxdir") not in header_text


def test_fast_compiles_are_stored_or_skipped_with_the_threshold(tmp_path):
    stored = run_worker(tmp_path / "c", "add_one")
    assert kinds(stored) == ["miss", "compile", "store"]
    assert only(stored, "compile")[0]["duration_s"] < 1.0  # JAX's own default would have dropped it
    skipped = run_worker(tmp_path / "d", "add_one", min_compile=30)
    assert kinds(skipped) == ["miss", "compile", "skip"]
    assert "min_compile_time_s=30" in only(skipped, "skip")[0]["reason"]
    assert entry_files(tmp_path / "d") == []


def test_eight_processes_one_cold_cache(tmp_path):
    """Concurrent writers of one cold cache: four processes compile the same program at once (same key, racing
    publishes), four others compile distinct programs; every result is right and every entry verifies."""
    cache = tmp_path / "cache"
    expected = {p: run_worker(tmp_path / f"ref-{p}", p)["results"][p] for p in ("mlp",)}
    cmd = [sys.executable, str(Path(__file__).parent / "jaxworker.py"), "--cache", str(cache)]
    procs = [subprocess.Popen(cmd + ["mlp"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=worker_env()) for _ in range(4)]
    procs += [subprocess.Popen(cmd + [f"sin{n}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=worker_env()) for n in range(1, 5)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for r in reports[:4]:
        assert r["results"]["mlp"] == expected["mlp"]
        assert not any(k in ("corrupt", "load_error", "store_error") for k in kinds(r))
    for n, r in enumerate(reports[4:], start=1):
        values = bytes.fromhex(r["results"][f"sin{n}"])
        assert len(values) == 4 * n
    store = LocalStore(cache)
    assert all(reason is None for _, reason in store.verify())
    names = [e.name for e in store.entries()]
    assert len(names) == 5 and len(set(e.key for e in store.entries())) == 5


def _reseal(path: Path, mutate) -> None:
    """Rewrite an entry's header the way another build would have, keeping SHA-256 and HMAC valid."""
    from xlakit.store.secret import load_secret

    secret = load_secret()
    header, payload = open_envelope(path.read_bytes(), secret)
    mutate(header)
    path.write_bytes(seal(header, payload, secret))


@pytest.mark.parametrize("field,value", [("jaxlib_version", "0.0.1"), ("jaxlib_build", "0123456789abcdef"),
                                         ("platform_version", "cpu-other")])
def test_entry_from_another_build_is_never_loaded(tmp_path, field, value):
    cache = tmp_path / "cache"
    run_worker(cache, "add_one")
    [entry] = entry_files(cache)
    _reseal(entry, lambda h: h["environment"].__setitem__(field, value))
    report = run_worker(cache, "add_one")
    assert kinds(report) == ["miss", "compile", "store"]  # no hit, no load_error: never deserialized
    reason = only(report, "miss")[0]["reason"]
    assert field in reason and value in reason
    assert len(quarantined(cache)) == 1
    assert kinds(run_worker(cache, "add_one")) == ["hit"]


def test_program_with_host_callback_runs_prints_and_is_recorded(tmp_path):
    import numpy as np

    from xlakit._jax import versions

    report = run_worker(tmp_path / "c", "debug_print")

    values = np.frombuffer(bytes.fromhex(report["results"]["debug_print"]), dtype=np.float32)
    assert values.tolist() == [0.0, 2.0, 4.0]
    assert "x=[0. 1. 2.]" in report["stdout"]
    if versions.read_hook_takes_host_callbacks():
        # JAX >= 0.11 rebinds callbacks on load, so the program is stored and a warm start still prints.
        assert "store" in kinds(report)
        warm = run_worker(tmp_path / "c", "debug_print")
        assert kinds(warm) == ["hit"] and "x=[0. 1. 2.]" in warm["stdout"]
    else:
        assert kinds(report) == ["miss", "compile", "skip"]
        assert "host callbacks" in only(report, "skip")[0]["reason"]


@pytest.mark.parametrize("cap", [1_000_000, 100_000])
def test_cache_stays_inside_its_cap(tmp_path, cap):
    """24 jnp.sin programs (one per input length), real compiles. Entries here are ~5 KB (8 KiB on disk), so the
    1 MB cap holds them all; 100 kB forces eviction of the least recently used. (Eviction order and
    bookkeeping at scale are covered with fake payloads by the store's own tests.)"""
    cache = tmp_path / "cache"
    count = 24
    names = [f"sin{n}" for n in range(1, count + 1)]
    report = run_worker(cache, *names, max_bytes=cap)
    assert report["max_cache_bytes"] <= cap  # measured on disk after every program
    assert LocalStore(cache).total_bytes() <= cap
    assert kinds(report).count("store") == count
    needed = sum(-(-e["bytes"] // 4096) * 4096 for e in only(report, "store"))
    evicted = only(report, "evict")
    assert bool(evicted) == (needed > cap)
    assert all("least recently used" in e["reason"] for e in evicted)
    survivors = {e.key for e in LocalStore(cache).entries()}
    assert len(survivors) == count - len(evicted)
    if cap < needed:
        assert 3 < len(survivors) < count
    newest = [e["key"] for e in only(report, "store")][-3:]
    assert set(newest) <= survivors  # the most recently used entries survive
    warm = run_worker(cache, *names[-3:], max_bytes=cap)
    # jax.jit(jnp.sin) retraced for each new length: transparent mode reports those retraces as recompiles
    assert kinds(warm) == ["hit", "recompile", "hit", "recompile", "hit"]


def test_bad_entries_are_rejected_before_deserializing(tmp_path):
    cache = tmp_path / "cache"
    run_worker(cache, "add_one", "matmul")
    first, second = entry_files(cache)
    data = bytearray(first.read_bytes())
    data[-10] ^= 0x01  # a flipped bit in the payload
    first.write_bytes(bytes(data))
    _reseal(second, lambda h: h.__setitem__("partition", "cpu-other-partition"))
    report = run_worker(cache, "add_one", "matmul")
    assert kinds(report) == ["corrupt", "miss", "compile", "store", "miss", "compile", "store"]
    reasons = " ".join(e["reason"] or "" for e in report["events"])
    assert "SHA-256" in reasons and "cpu-other-partition" in reasons
    assert len(quarantined(cache)) == 2
    assert kinds(run_worker(cache, "add_one", "matmul")) == ["hit", "hit"]


def test_wrong_secret_is_never_trusted(tmp_path):
    cache = tmp_path / "cache"
    run_worker(cache, "add_one", env={"XLAKIT_CACHE_SECRET": "fleet-secret-number-1"})
    [entry] = entry_files(cache)
    before = entry.read_bytes()
    report = run_worker(cache, "add_one", env={"XLAKIT_CACHE_SECRET": "another-secret-of-32-characters"})
    # Another key's entry is a miss naming that, never loaded, and left in place for its owners.
    assert kinds(report)[:2] == ["miss", "compile"]
    assert "signed with another key" in only(report, "miss")[0]["reason"]
    assert entry_files(cache) == [entry] and entry.read_bytes() == before


def test_crafted_pickle_payload_never_runs(tmp_path):
    """A payload that would create a file when unpickled: rejected with a bad HMAC, and even with a valid
    one it only reaches XLA's executable parser (transparent mode never unpickles)."""
    import pickle

    from xlakit.store.secret import load_secret

    cache = tmp_path / "cache"
    run_worker(cache, "add_one")
    [entry] = entry_files(cache)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    header, _ = open_envelope(entry.read_bytes(), load_secret())
    forged = bytearray(seal(header, pickle.dumps(Exploit()), b"attacker-does-not-know-the-secret"))
    forged[8:16] = entry.read_bytes()[8:16]  # claim the victim's key id, so only the MACs can refuse it
    entry.write_bytes(bytes(forged))
    report = run_worker(cache, "add_one")
    assert kinds(report)[0] == "corrupt" and "MAC mismatch" in only(report, "corrupt")[0]["reason"]
    assert not marker.exists()

    entry.write_bytes(seal(header, pickle.dumps(Exploit()), load_secret()))  # authentic but hostile bytes
    report = run_worker(cache, "add_one")
    assert kinds(report)[0] == "load_error" and "hit" not in kinds(report)
    assert not marker.exists()
    assert kinds(run_worker(cache, "add_one")) == ["hit"]


def test_writer_killed_mid_write_leaves_no_visible_entry(tmp_path):
    cache = tmp_path / "cache"
    code = (
        "import os, sys, time, xlakit.store.local as local\n"
        "marker = sys.argv[1] + '.writing'\n"
        "def slow_fsync(fd):\n"
        "    open(marker, 'w').close(); time.sleep(60)\n"
        "local.os.fsync = slow_fsync\n"
        "import runpy; sys.argv = [sys.argv[2], '--cache', sys.argv[1], 'mlp']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    marker_base = str(cache)
    proc = subprocess.Popen([sys.executable, "-c", code, marker_base, str(Path(__file__).parent / "jaxworker.py")],
                            env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not Path(marker_base + ".writing").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-3000:]
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    temps = [p for p in cache.rglob("*.tmp")]
    assert temps and temps[0].stat().st_size > 0  # the partial write is there, but only as a temp file
    assert entry_files(cache) == []
    report = run_worker(cache, "mlp")
    assert kinds(report) == ["miss", "compile", "store"]
    assert kinds(run_worker(cache, "mlp")) == ["hit"]


def _read_only_prefix(folder: Path) -> list[str] | None:
    """A command prefix that runs the worker with ``folder`` mounted read-only (EROFS), as root; None if
    this machine cannot make private mounts."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return None
    script = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    probe = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", "true"], capture_output=True)
    return ["unshare", "-m", "sh", "-c", script, "sh"] if probe.returncode == 0 else None


def test_read_only_cache_folder_runs_programs_and_warns_once(tmp_path):
    cache = tmp_path / "cache"
    reference = run_worker(tmp_path / "ref", "add_one", "matmul")
    cache.mkdir()
    prefix = _read_only_prefix(cache)
    if prefix is None:
        if os.geteuid() == 0:
            pytest.skip("root ignores mode bits and this machine cannot make a read-only bind mount")
        os.chmod(cache, 0o555)
    report = run_worker(cache, "add_one", "matmul", prefix=prefix)
    assert report["results"] == reference["results"]
    failures = only(report, "store_error")
    assert [e["name"] for e in failures] == ["jit_add_one", "jit_matmul"]
    assert all("Read-only file system" in e["reason"] or "Permission denied" in e["reason"] for e in failures)
    assert len(report["warnings"]) == 1 and str(cache) in report["warnings"][0]
    assert list(cache.iterdir()) == []


def test_full_disk_runs_programs_and_records_the_failure(tmp_path):
    reference = run_worker(tmp_path / "ref", "mlp")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))  # like `ulimit -f 2`

    report = run_worker(tmp_path / "cache", "mlp", "add_one", preexec_fn=small_files)
    assert report["results"]["mlp"] == reference["results"]["mlp"]
    failures = only(report, "store_error")
    assert failures and all("File too large" in e["reason"] or "Errno 27" in e["reason"] for e in failures)
    assert len(report["warnings"]) == 1
    assert entry_files(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # the failed write cleaned up after itself
