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

import fresh_process
import pytest
from conftest import kinds, run_python, run_worker, worker_env

from xlakit.store import LocalStore
from xlakit.store.envelope import open_envelope, read_header_file, seal


def entry_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("*/*.xlk") if p.parent.name != "quarantine")


def quarantined(cache: Path) -> list[Path]:
    return sorted((cache / "quarantine").glob("*/*.xlk")) if (cache / "quarantine").exists() else []


def only(report: dict, kind: str) -> list[dict]:
    return [e for e in report["events"] if e["kind"] == kind]


# One cold process fills a cache once for the whole module; each test works on its own copy of that folder
# (a copy is itself a proof: no path enters a key), so a test pays only for the processes its fault needs.
FILLED = ("add_one", "matmul", "mlp", "cos", "exp", "tanh", "sin1", "sin2")


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, dict]:
    """(folder, report) of one cold worker that ran FILLED; tests copy the folder, never change it."""
    folder = tmp_path_factory.mktemp("filled") / "cache"
    return folder, run_worker(folder, *FILLED)


def copy_of(filled: tuple[Path, dict], dest: Path) -> Path:
    shutil.copytree(filled[0], dest)
    return dest


def entry_named(cache: Path, name: str) -> Path:
    [path] = [p for p in entry_files(cache) if read_header_file(p)["name"] == name]
    return path


def test_cold_process_stores_every_program_with_its_header(filled):
    folder, cold = filled
    named = [n for n in FILLED if not n.startswith("sin")]
    for name in named:  # sin2 retraces jax.jit(jnp.sin): that one is a recompile, not a new miss
        assert kinds(cold, f"jit_{'net' if name == 'mlp' else name}") == ["miss", "compile", "store"], name
    assert kinds(cold).count("store") == len(FILLED) and kinds(cold).count("hit") == 0
    assert [e["name"] for e in only(cold, "store")][:3] == ["jit_add_one", "jit_matmul", "jit_net"]
    # the header keeps the measured compile seconds, the compiled memory and JAX's own key parts
    headers = [read_header_file(p) for p in entry_files(folder)]
    assert len(headers) == len(FILLED)
    for h in headers:
        assert h["compile_s"] > 0
        assert set(h["key_parts"]) >= {"computation", "jax_lib version", "XLA flags", "compile_options"}
        assert h["memory"]["argument_size_in_bytes"] > 0
    mm = next(h for h in headers if h["name"] == "jit_matmul")
    assert mm["memory"]["argument_size_in_bytes"] == 256 and mm["memory"]["output_size_in_bytes"] == 256


def test_second_process_on_a_moved_copy_hits_bit_identical_and_no_path_enters_the_key(filled, tmp_path):
    a, cold = filled
    b = copy_of(filled, tmp_path / "elsewhere" / "B")
    warm = run_worker(b, "add_one", "matmul", "mlp", env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jaxdir")})
    assert kinds(warm) == ["set_aside", "hit", "hit", "hit"]  # JAX's configured folder is told set aside
    assert warm["results"] == {n: cold["results"][n] for n in ("add_one", "matmul", "mlp")}
    assert [e["key"] for e in only(warm, "hit")] == [e["key"] for e in only(cold, "store")][:3]
    for e in only(warm, "hit"):
        assert e["duration_s"] > 0 and e["saved_s"] >= 0 and e["bytes"] > 0
    for path in entry_files(b):
        header_text = json.dumps(read_header_file(path))
        assert str(a) not in header_text and str(tmp_path / "jaxdir") not in header_text


def _reseal(path: Path, mutate) -> None:
    """Rewrite an entry's header the way another build would have, keeping SHA-256 and HMAC valid."""
    from xlakit.store.secret import load_secret

    secret = load_secret()
    header, payload = open_envelope(path.read_bytes(), secret)
    mutate(header)
    path.write_bytes(seal(header, payload, secret))


# Each entry claims another build or partition (SHA-256 and HMAC still valid): a miss that names the field,
# never deserialized (no hit, no load_error), quarantined, and the recompiled entry hits next time.
FOREIGN = {"mlp": ("jaxlib_version", "0.0.1"), "cos": ("jaxlib_build", "0123456789abcdef"),
           "exp": ("platform_version", "cpu-other"), "tanh": ("partition", "cpu-other-partition")}


def _module(program: str) -> str:
    return "jit_net" if program == "mlp" else f"jit_{program}"


def test_bad_entries_are_rejected_before_deserializing_repaired_then_hit(filled, tmp_path):
    """Six bad entries, one process: a truncated one and one with a flipped payload bit are named corrupt (before
    XLA sees their bytes) and moved to quarantine as they were; the four of FOREIGN are misses naming the
    field. Each is compiled and stored again, and every repaired entry hits in a later process."""
    cache = copy_of(filled, tmp_path / "cache")
    truncated, flipped = entry_named(cache, "jit_add_one"), entry_named(cache, "jit_matmul")
    foreign = {program: entry_named(cache, _module(program)) for program in FOREIGN}
    with open(truncated, "r+b") as f:
        f.truncate(100)
    data = bytearray(flipped.read_bytes())
    data[-10] ^= 0x01
    flipped.write_bytes(bytes(data))
    for program, (field, value) in FOREIGN.items():
        if field == "partition":
            _reseal(foreign[program], lambda h, v=value: h.__setitem__("partition", v))
        else:
            _reseal(foreign[program], lambda h, f=field, v=value: h["environment"].__setitem__(f, v))
    programs = ["add_one", "matmul", *FOREIGN]
    report = run_worker(cache, *programs)

    assert kinds(report, "jit_add_one") == ["corrupt", "miss", "compile", "store"]
    assert kinds(report, "jit_matmul") == ["corrupt", "miss", "compile", "store"]
    reasons = {e["name"]: e["reason"] for e in only(report, "corrupt")}
    assert "truncated" in reasons["jit_add_one"] and "quarantine" in reasons["jit_add_one"]
    assert "SHA-256" in reasons["jit_matmul"]
    assert truncated.stat().st_size > 100
    for program, (field, value) in FOREIGN.items():
        assert kinds(report, _module(program)) == ["miss", "compile", "store"], (program, field)
        reason = [e for e in only(report, "miss") if e["name"] == _module(program)][0]["reason"]
        assert value in reason and (field in reason or field == "partition"), (field, reason)
    assert len(quarantined(cache)) == 2 + len(FOREIGN)
    assert 100 in {p.stat().st_size for p in quarantined(cache)}  # the truncated entry, kept as it was

    warm = run_worker(cache, *programs)
    assert kinds(warm) == ["hit"] * len(programs)
    assert report["results"] == warm["results"] == {n: filled[1]["results"][n] for n in programs}


def test_fast_compiles_are_stored_or_skipped_with_the_threshold(filled, tmp_path):
    stored = filled[1]
    assert kinds(stored, "jit_add_one") == ["miss", "compile", "store"]
    compile_s = [e for e in only(stored, "compile") if e["name"] == "jit_add_one"][0]["duration_s"]
    assert compile_s < 1.0  # JAX's own default would have dropped it
    skipped = run_worker(tmp_path / "d", "add_one", min_compile=30)
    assert kinds(skipped) == ["miss", "compile", "skip"]
    assert "min_compile_time_s=30" in only(skipped, "skip")[0]["reason"]
    assert entry_files(tmp_path / "d") == []


def test_concurrent_processes_one_cold_cache(filled, tmp_path):
    """Concurrent writers of one cold cache: two processes compile the same program at once (same key, racing
    publishes), two others compile distinct programs; every result is right and every entry verifies."""
    cache = tmp_path / "cache"
    cmd = [sys.executable, str(Path(__file__).parent / "jaxworker.py"), "--cache", str(cache)]
    programs = ["mlp", "mlp", "sin3", "sin4"]
    procs = [fresh_process.Popen(cmd + [p], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=worker_env()) for p in programs]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for r in reports[:2]:
        assert r["results"]["mlp"] == filled[1]["results"]["mlp"]
        assert not any(k in ("corrupt", "load_error", "store_error") for k in kinds(r))
    for n, r in zip((3, 4), reports[2:], strict=True):
        values = bytes.fromhex(r["results"][f"sin{n}"])
        assert len(values) == 4 * n
    store = LocalStore(cache)
    assert all(reason is None for _, reason in store.verify())
    assert len(list(store.entries())) == 3 and len({e.key for e in store.entries()}) == 3


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


@pytest.mark.parametrize("cap", [1_000_000, 50_000])
def test_cache_stays_inside_its_cap(tmp_path, cap):
    """12 jnp.sin programs (one per input length), real compiles. Entries here are ~5 KB (8 KiB on disk), so the
    1 MB cap holds them all; 50 kB forces eviction of the least recently used. (Eviction order and
    bookkeeping at scale are covered with fake payloads by the store's own tests.)"""
    cache = tmp_path / "cache"
    count = 12
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
    newest = [e["key"] for e in only(report, "store")][-3:]
    assert set(newest) <= survivors  # the most recently used entries survive
    if cap < needed:
        # the three newest at least (asserted above); how many more fit depends on the jaxlib fingerprint memo
        # beside the entries, whose size grows with the path of the environment's libraries
        assert 3 <= len(survivors) < count
        warm = run_worker(cache, *names[-3:], max_bytes=cap)  # and they load
        # jax.jit(jnp.sin) retraced for each new length: transparent mode reports those retraces as recompiles
        assert kinds(warm) == ["hit", "recompile", "hit", "recompile", "hit"]


def test_wrong_secret_is_never_trusted(filled, tmp_path):
    cache = copy_of(filled, tmp_path / "cache")  # signed with this test session's own secret
    entry = entry_named(cache, "jit_add_one")
    before = entry.read_bytes()
    report = run_worker(cache, "add_one", env={"XLAKIT_CACHE_SECRET": "another-secret-of-32-characters"})
    # Another key's entry is a miss naming that, never loaded, and left in place for its owners.
    assert kinds(report)[:2] == ["miss", "compile"]
    assert "signed with another key" in only(report, "miss")[0]["reason"]
    assert entry in entry_files(cache) and entry.read_bytes() == before


def test_crafted_pickle_payload_never_runs(filled, tmp_path):
    """A payload that would create a file when unpickled: rejected with a bad HMAC (jit_add_one's entry), and
    even with a valid one (jit_matmul's) it only reaches XLA's executable parser (transparent mode never
    unpickles). Both are then recompiled and hit in a later process."""
    import pickle

    from xlakit.store.secret import load_secret

    cache = copy_of(filled, tmp_path / "cache")
    forged_entry, hostile_entry = entry_named(cache, "jit_add_one"), entry_named(cache, "jit_matmul")
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    header, _ = open_envelope(forged_entry.read_bytes(), load_secret())
    forged = bytearray(seal(header, pickle.dumps(Exploit()), b"attacker-does-not-know-the-secret"))
    forged[8:16] = forged_entry.read_bytes()[8:16]  # claim the victim's key id, so only the MACs can refuse it
    forged_entry.write_bytes(bytes(forged))
    header, _ = open_envelope(hostile_entry.read_bytes(), load_secret())
    hostile_entry.write_bytes(seal(header, pickle.dumps(Exploit()), load_secret()))  # authentic but hostile
    report = run_worker(cache, "add_one", "matmul")
    assert kinds(report, "jit_add_one")[0] == "corrupt"
    assert "MAC mismatch" in only(report, "corrupt")[0]["reason"]
    assert kinds(report, "jit_matmul")[0] == "load_error" and "hit" not in kinds(report)
    assert not marker.exists()
    assert kinds(run_worker(cache, "add_one", "matmul")) == ["hit", "hit"]


def test_writer_killed_mid_write_leaves_no_visible_entry(tmp_path):
    cache = tmp_path / "cache"
    code = (
        "import os, sys, time, xlakit.store.local as local\n"
        "marker, real_fsync = sys.argv[1] + '.writing', local.os.fsync\n"
        "def slow_fsync(fd):\n"  # only the entry's write (not the partition's header, nor the run's jaxlib memo)
        "    if '.xlk.' not in os.readlink(f'/proc/self/fd/{fd}'): return real_fsync(fd)\n"
        "    open(marker, 'w').close(); time.sleep(60)\n"
        "local.os.fsync = slow_fsync\n"
        "import runpy; sys.argv = [sys.argv[2], '--cache', sys.argv[1], 'mlp']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    marker_base = str(cache)
    proc = fresh_process.Popen([sys.executable, "-c", code, marker_base, str(Path(__file__).parent / "jaxworker.py")],
                               env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not Path(marker_base + ".writing").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-3000:]
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    temps = list(cache.rglob("*.xlk.*.tmp"))  # the entry's own temp file
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


def test_read_only_cache_folder_runs_programs_and_warns_once(filled, tmp_path):
    cache = tmp_path / "cache"
    reference = {n: filled[1]["results"][n] for n in ("add_one", "matmul")}
    cache.mkdir()
    prefix = _read_only_prefix(cache)
    if prefix is None:
        if os.geteuid() == 0:
            pytest.skip("root ignores mode bits and this machine cannot make a read-only bind mount")
        os.chmod(cache, 0o555)
    report = run_worker(cache, "add_one", "matmul", prefix=prefix)
    assert report["results"] == reference
    failures = only(report, "store_error")
    assert [e["name"] for e in failures] == ["jit_add_one", "jit_matmul"]
    assert all("Read-only file system" in e["reason"] or "Permission denied" in e["reason"] for e in failures)
    assert len(report["warnings"]) == 1 and str(cache) in report["warnings"][0]
    assert list(cache.iterdir()) == []


def test_full_disk_runs_programs_and_records_the_failure(filled, tmp_path):
    reference = filled[1]

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))  # like `ulimit -f 2`

    # util-linux's prlimit sets the limit and execs the worker; a preexec_fn does the same from a fork of this
    # JAX-threaded process, which JAX warns may deadlock
    if shutil.which("prlimit"):
        report = run_worker(tmp_path / "cache", "mlp", "add_one", prefix=["prlimit", "--fsize=2048:2048"])
    else:
        report = run_worker(tmp_path / "cache", "mlp", "add_one", preexec_fn=small_files)
    assert report["results"]["mlp"] == reference["results"]["mlp"]
    failures = only(report, "store_error")
    assert failures and all("File too large" in e["reason"] or "Errno 27" in e["reason"] for e in failures)
    assert len(report["warnings"]) == 1
    assert entry_files(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # the failed write cleaned up after itself


def test_a_jit_created_before_enable_uses_the_cache_and_earlier_compiles_are_named_once(tmp_path):
    """A program compiled before enable_cache() stays in JAX's in-memory cache: its calls were never stored and
    nothing said so. Enabling now warns once (naming how many compiles came first); the same jit object's next
    compile (a new shape) is served by the cache, and a later process loads that one."""
    code = f"""
import json, warnings
import numpy as np, jax, xlakit
def scale(x):
    return x * 3.0
f = jax.jit(scale)
f(np.ones(4, np.float32))                       # compiled before the cache exists
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    xlakit.enable_cache({str(tmp_path / "c")!r})
    xlakit.enable_cache({str(tmp_path / "c")!r})   # enabling again does not repeat it
with xlakit.events.record() as log:
    f(np.ones(4, np.float32))                   # JAX's in-memory cache answers: no cache event
    f(np.ones(8, np.float32))                   # a new compile of the same jit object: the cache answers
print(json.dumps({{"warnings": [str(w.message) for w in caught],
                   "kinds": [e.kind for e in log.events() if e.source == "xlakit"]}}))
"""
    first = json.loads(run_python(code))
    assert len(first["warnings"]) == 1, first["warnings"]
    assert "already compiled 1 program(s)" in first["warnings"][0]
    assert "before the first jax.jit call" in first["warnings"][0]
    assert first["kinds"] == ["miss", "compile", "store"]
    again = json.loads(run_python(code.replace('f(np.ones(4, np.float32))                       #',
                                               'pass  #')))
    assert again["warnings"] == [] and again["kinds"] == ["miss", "compile", "store", "hit"]


def test_a_configured_jax_cache_set_aside_is_told_untouched_and_handed_back(tmp_path):
    """Fault: enable_cache() set aside a configured, warm jax_compilation_cache_dir without a word (a team lost its
    warm cache and did not know why). Now: one warning naming the folder (not repeated by a second enable), a
    set_aside event per enable, nothing written there while xlakit is on, and JAX's setting restored after."""
    user = tmp_path / "my_jax_cache"
    code = f"""
import json, os, warnings
import numpy as np, jax, xlakit
jax.config.update("jax_compilation_cache_dir", {str(user)!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
jax.jit(lambda x: x * 3.0)(np.ones(4, np.float32))        # JAX's own cache is warm
warm = sorted(os.listdir({str(user)!r}))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    xlakit.enable_cache({str(tmp_path / "xc")!r})
    xlakit.enable_cache({str(tmp_path / "xc")!r})
jax.jit(lambda x: x - 1.0)(np.ones(4, np.float32))
during = sorted(os.listdir({str(user)!r}))
xlakit.disable_cache()
restored = jax.config.jax_compilation_cache_dir
jax.jit(lambda x: x / 2.0)(np.ones(4, np.float32))
print(json.dumps({{"warnings": [str(w.message) for w in caught], "warm": warm, "during": during,
                   "after": sorted(os.listdir({str(user)!r})), "restored": restored,
                   "events": [[e.source, e.folder, e.reason] for e in xlakit.events.log() if e.kind == "set_aside"]}}))
"""
    out = json.loads(run_python(code))
    told = [w for w in out["warnings"] if str(user) in w]  # (the other one: a program compiled before enabling)
    assert len(told) == 1 and "disable_cache() hands the folder back" in told[0], out["warnings"]
    assert [e[:2] for e in out["events"]] == [["jax-persistent", str(user)]] * 2
    assert out["warm"] and out["during"] == out["warm"]  # nothing written while xlakit was on
    assert out["restored"] == str(user) and len(out["after"]) > len(out["warm"])  # JAX writes there again


def test_switching_caches_does_not_call_the_first_caches_programs_not_stored(tmp_path):
    """Fault: a second enable_cache() on another folder warned that the programs compiled under the first one
    were "not stored" (they were, in the first folder). Only compiles made while no cache was enabled count."""
    code = f"""
import json, warnings
import numpy as np, jax, xlakit
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    xlakit.enable_cache({str(tmp_path / "a")!r})
    jax.jit(lambda x: x * 3.0)(np.ones(4, np.float32))     # compiled under cache a: stored there
    xlakit.enable_cache({str(tmp_path / "b")!r})           # no warning: nothing ran uncached
    switched = [str(w.message) for w in caught]
    xlakit.disable_cache()
    jax.jit(lambda x: x - 1.0)(np.ones(4, np.float32))     # compiled with no cache enabled
    xlakit.enable_cache({str(tmp_path / "c")!r})
print(json.dumps({{"switched": switched, "all": [str(w.message) for w in caught]}}))
"""
    out = json.loads(run_python(code))
    assert out["switched"] == [], out
    assert len(out["all"]) == 1 and "already compiled 1 program(s)" in out["all"][0], out
    assert "while no xlakit cache was enabled" in out["all"][0]
    assert len(entry_files(tmp_path / "a")) == 1  # the first cache did store it
