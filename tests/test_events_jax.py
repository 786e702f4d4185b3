"""JAX's own signals in the event log, in real JAX subprocesses: the three cache layers, names, no duplicates.

Each worker is tests/jaxworker.py (through ``conftest.run_worker``) wrapped by tests/events_worker.py, which
installs xlakit's JAX listeners first.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import fresh_process
import pytest
from conftest import run_worker, worker_env

from xlakit.events import Event, EventLog
from xlakit.store import LocalStore

EVENTS_WORKER = str(Path(__file__).resolve().parent / "events_worker.py")


def run(cache: Path, *programs: str, layer: str = "xlakit", explain: bool = False, save: Path | None = None,
        **options) -> dict:
    prefix = [sys.executable, EVENTS_WORKER, "--layer", layer]
    if explain:
        prefix.append("--explain")
    if save is not None:
        prefix += ["--save", str(save)]
    return run_worker(cache, *programs, prefix=prefix + ["--"], **options)


def timeline(report: dict) -> list[tuple[str, str, str | None]]:
    return [(e["kind"], e["source"], e["name"]) for e in report["events"]]


def only(report: dict, kind: str, source: str | None = None) -> list[dict]:
    return [e for e in report["events"] if e["kind"] == kind and (source is None or e["source"] == source)]


def entry_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("*/*.xlk") if p.parent.name != "quarantine")


ADD = "jit_add_one"
JIT_MISS = ("miss", "jit", ADD)
TRACED = [("trace", "jax", ADD), ("lower", "jax", ADD)]


def test_scripted_sequence_on_xlakit_cache(tmp_path):
    """Cold compile, warm hit in a second process, a corrupt entry, an eviction, a skip: exactly these kinds,
    in this order, with names, each on its layer — and no JAX duplicate of any xlakit action."""
    cache = tmp_path / "cache"

    cold = run(cache, "add_one", explain=True, save=tmp_path / "cold.jsonl")
    assert timeline(cold) == [JIT_MISS, *TRACED, ("miss", "xlakit", ADD), ("compile", "xlakit", ADD),
                              ("store", "xlakit", ADD)]
    assert "never seen function" in only(cold, "miss", "jit")[0]["reason"]
    for e in only(cold, "trace") + only(cold, "lower") + only(cold, "compile"):
        assert 0 < e["duration_s"] < 60

    # the log saved by that process loads back to the same events
    loaded = EventLog.load(tmp_path / "cold.jsonl")
    assert [e.to_dict() for e in loaded.events()] == cold["events"]

    warm = run(cache, "add_one")
    assert timeline(warm) == [*TRACED, ("hit", "xlakit", ADD)]  # JAX's own "cache hit" signals not repeated
    hit = only(warm, "hit")[0]
    assert hit["duration_s"] > 0 and hit["saved_s"] >= 0 and hit["key"] == only(cold, "store")[0]["key"]

    [entry] = entry_files(cache)
    with open(entry, "r+b") as f:
        f.truncate(100)
    repaired = run(cache, "add_one")
    assert timeline(repaired) == [*TRACED, ("corrupt", "xlakit", ADD), ("miss", "xlakit", ADD),
                                  ("compile", "xlakit", ADD), ("store", "xlakit", ADD)]
    assert "truncated" in only(repaired, "corrupt")[0]["reason"]

    # a cap that holds one entry but not two: storing matmul evicts add_one (the quarantined copy would be
    # deleted first, so it goes now)
    shutil.rmtree(cache / "quarantine")
    cap = LocalStore(cache).total_bytes() + 4096
    evicting = run(cache, "matmul", max_bytes=cap)
    mm = "jit_matmul"
    assert timeline(evicting) == [("trace", "jax", mm), ("lower", "jax", mm), ("miss", "xlakit", mm),
                                  ("compile", "xlakit", mm), ("evict", "xlakit", ADD), ("store", "xlakit", mm)]
    assert only(evicting, "evict")[0]["key"] == hit["key"]

    skipped = run(cache, "add_one", min_compile=30)
    assert timeline(skipped) == [*TRACED, ("miss", "xlakit", ADD), ("compile", "xlakit", ADD),
                                 ("skip", "xlakit", ADD)]
    assert "min_compile_time_s=30" in only(skipped, "skip")[0]["reason"]

    for report in (cold, warm, repaired, evicting, skipped):  # each XLA compile is counted exactly once
        assert len(only(report, "compile")) == (0 if report is warm else 1)
        assert not only(report, "hit", "jax-persistent") and not only(report, "miss", "jax-persistent")


def test_jax_persistent_cache_layer_with_names(tmp_path):
    """JAX's own cache: misses, writes, hits (named, though JAX's hit event has no name), the programs JAX
    silently declines to store, and its LRU evictions."""
    cache = tmp_path / "jaxcache"
    cold = run(cache, "add_one", "matmul", layer="jax", max_bytes=10**9)  # a cap: JAX then keeps access times
    mm = "jit_matmul"
    assert timeline(cold) == [*TRACED, ("miss", "jax-persistent", ADD), ("compile", "jax", ADD),
                              ("store", "jax-persistent", ADD),
                              ("trace", "jax", mm), ("lower", "jax", mm), ("miss", "jax-persistent", mm),
                              ("compile", "jax", mm), ("store", "jax-persistent", mm)]
    assert str(cache) in only(cold, "miss")[0]["reason"]
    stored_keys = [e["key"] for e in only(cold, "store")]
    assert all(k.startswith(n + "-") for k, n in zip(stored_keys, (ADD, mm), strict=True))

    warm = run(cache, "add_one", "matmul", layer="jax")
    assert timeline(warm) == [*TRACED, ("hit", "jax-persistent", ADD), ("trace", "jax", mm),
                              ("lower", "jax", mm), ("hit", "jax-persistent", mm)]
    for hit, key in zip(only(warm, "hit"), stored_keys, strict=True):
        assert hit["key"] == key and hit["duration_s"] > 0
        # recorded compile seconds (whole seconds in JAX's entry: 0 here, unless a loaded machine took a second
        # to compile) minus load, floored: never negative
        recorded = int(hit["reason"].split("JAX recorded ", 1)[1].split(" s", 1)[0])
        assert hit["saved_s"] == pytest.approx(max(0.0, recorded - hit["duration_s"])), hit
        assert recorded > 0 or hit["saved_s"] == 0.0

    # a threshold no compile here reaches, however loaded the machine (JAX's default is 1 s)
    fresh = run(tmp_path / "other", "add_one", layer="jax", min_compile=30.0)
    assert timeline(fresh) == [*TRACED, ("miss", "jax-persistent", ADD), ("compile", "jax", ADD),
                               ("skip", "jax-persistent", ADD)]
    assert "under jax_persistent_cache_min_compile_time_secs=30 s" in only(fresh, "skip")[0]["reason"]
    assert not list((tmp_path / "other").glob("*-cache"))

    sizes = {p.name.removesuffix("-cache"): p.stat().st_size for p in cache.glob("*-cache")}
    assert set(sizes) == set(stored_keys)
    capped = run(cache, "sin1", layer="jax", max_bytes=sum(sizes.values()) + 1)  # no room for a third entry
    sin = "jit_sin"
    evicted = only(capped, "evict")
    assert timeline(capped) == [("trace", "jax", sin), ("lower", "jax", sin), ("miss", "jax-persistent", sin),
                                ("compile", "jax", sin), ("store", "jax-persistent", sin),
                                *[("evict", "jax-persistent", e["name"]) for e in evicted]]
    assert evicted and [e["key"] for e in evicted] == stored_keys[:len(evicted)]  # least recently used first
    assert [e["bytes"] for e in evicted] == [sizes[e["key"]] for e in evicted]

    for report in (cold, warm, fresh, capped):  # every event dict a worker wrote is a valid Event
        assert [Event.from_dict(d).to_dict() for d in report["events"]] == report["events"]


def test_explicit_cache_compiles_loads_and_probes_are_each_recorded_once(tmp_path):
    """ExecutableCache routes compiles to xlakit's handler: its events are not repeated as JAX's; a fresh
    compile through its pass-through handler (nobody else records it) is; an explain probe compiles nothing."""
    code = f"""
import json, sys, jax, numpy as np
import xlakit, xlakit.events as ev
ev.install_listeners()
def f(x):
    return jax.numpy.tanh(x) * 2
cache = xlakit.ExecutableCache({str(tmp_path / 'c')!r})
if sys.argv[-1] == 'jit':
    cache.jit(f)(np.ones(3, np.float32))  # stores the XLA executable only
else:
    cache.compile(jax.jit(f), np.ones(3, np.float32))  # hits, then compiles a loadable copy afresh
    cache.explain(f, np.ones(4, np.float32))  # computes the key, compiles nothing
print(json.dumps([(e.kind, e.source, e.name) for e in ev.log().events()]))
"""
    f = "jit_f"
    for mode, expected in (("jit", [("miss", "xlakit", f), ("compile", "xlakit", f), ("store", "xlakit", f)]),
                           # the explain probe retraces f for another shape: a recompile, then its trace and lower
                           ("compile", [("hit", "xlakit", f), ("compile", "jax", f), ("recompile", "jit", f),
                                        ("trace", "jax", f), ("lower", "jax", f)])):
        proc = fresh_process.run([sys.executable, "-c", code, mode], capture_output=True, text=True, env=worker_env(),
                                 timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        events = [tuple(e) for e in json.loads(proc.stdout.strip().splitlines()[-1])]
        assert events == [("trace", "jax", f), ("lower", "jax", f), *expected]


def run_python(code: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    proc = fresh_process.run([sys.executable, "-c", code], capture_output=True, text=True, env=worker_env(env),
                             timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1], proc.stderr


def test_install_is_idempotent_and_uninstall_removes_everything():
    code = """
import json, logging, jax
from jax._src import monitoring
from xlakit._jax import listeners
from xlakit.events import log
names = list(listeners._LOGGERS)
def state():
    return {'event': len(monitoring.get_event_listeners()), 'duration': len(monitoring.get_event_duration_listeners()),
            'other': len(monitoring.get_scalar_listeners()) + len(monitoring.get_event_time_span_listeners()),
            'levels': [logging.getLogger(n).level for n in names],
            'filters': [len(logging.getLogger(n).filters) for n in names]}
logging.getLogger('jax._src.compiler').setLevel(logging.INFO)  # a level the user chose
before = state()
first = listeners.install(log()); second = listeners.install(log())
once = state()
monitoring.clear_event_listeners()  # drops our callbacks behind our back
healed = listeners.install(log()); again = state()
jax.monitoring.register_event_listener(lambda *a, **k: None)  # someone else's listener stays
out = {'same': first is second is healed, 'before': before, 'once': once, 'again': again,
       'uninstalled': listeners.uninstall(), 'twice': listeners.uninstall(), 'after': state()}
listeners.install(log()); monitoring.clear_event_listeners()
out['after_clear'] = listeners.uninstall()  # nothing of ours left in JAX's lists: still a clean uninstall
out['final'] = state()
print(json.dumps(out))
"""
    r = json.loads(run_python(code)[0])
    assert r["same"] and r["uninstalled"] is True and r["twice"] is False
    assert r["once"]["event"] == r["before"]["event"] + 1
    assert r["once"]["duration"] == r["before"]["duration"] + 1
    assert r["once"]["filters"] == [n + 1 for n in r["before"]["filters"]]
    assert r["before"]["levels"] == [20, 0, 0, 0, 0]
    assert r["once"]["levels"] == [10, 10, 10, 0, 0]  # lowered to DEBUG only where DEBUG records are read
    assert r["again"]["event"] == 1 and r["again"]["duration"] == 1  # re-added once after the clear
    assert r["after"]["levels"] == r["before"]["levels"] and r["after"]["filters"] == r["before"]["filters"]
    assert r["after"]["event"] == 1 and r["after"]["duration"] == 0  # only the other listener is left
    assert r["after"]["other"] == r["before"]["other"]  # no scalar or time-span listener was ever added
    assert r["after_clear"] is True and r["final"]["levels"] == r["before"]["levels"]
    assert r["final"]["filters"] == r["before"]["filters"]


def test_listeners_print_nothing_new_and_keep_what_the_user_asked_for(tmp_path):
    code = f"""
import logging, sys, jax, numpy as np
jax.config.update('jax_compilation_cache_dir', {str(tmp_path)!r} + '/' + sys.argv[-1])
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
import xlakit.events as ev
ev.install_listeners()
if sys.argv[-1] == 'debug':  # the user turns on DEBUG logging after the listeners were installed
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
jax.jit(lambda x: x * 2)(np.ones(3, np.float32))
print([e.kind for e in ev.log().events()])
"""
    proc = fresh_process.run([sys.executable, "-c", code, "quiet"], capture_output=True, text=True, env=worker_env(),
                             timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    quiet_out, quiet_err = proc.stdout.strip(), proc.stderr
    assert quiet_out == "['trace', 'lower', 'miss', 'compile', 'store']"
    assert "PERSISTENT COMPILATION CACHE MISS" not in quiet_err and "Writing" not in quiet_err
    proc = fresh_process.run([sys.executable, "-c", code, "debug"], capture_output=True, text=True, env=worker_env(),
                             timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PERSISTENT COMPILATION CACHE MISS" in proc.stderr  # the user's DEBUG logging still sees it


def test_a_broken_log_never_breaks_a_compile():
    code = """
import json, warnings, jax, numpy as np
from xlakit.events import EventLog
from xlakit._jax import listeners
class Broken(EventLog):
    def emit(self, kind, **fields):
        raise OSError('disk gone')
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    installed = listeners.install(Broken())
    out = jax.jit(lambda x: x + 1)(np.ones(3, np.float32))
    out2 = jax.jit(lambda x: x - 1)(np.ones(3, np.float32))
print(json.dumps({'out': out.tolist(), 'errors': list(installed.errors),
                  'warnings': [str(w.message) for w in caught if 'xlakit' in str(w.message)]}))
"""
    r = json.loads(run_python(code)[0])
    assert r["out"] == [2.0, 2.0, 2.0]
    assert len(r["errors"]) == 6 and all("OSError: disk gone" in e for e in r["errors"])  # trace, lower, compile x2
    assert len(r["warnings"]) == 1 and "could not read a JAX signal" in r["warnings"][0]


def test_record_collects_only_the_block_and_removes_its_listeners():
    code = """
import json, jax, numpy as np
from jax._src import monitoring
import xlakit.events as ev
from xlakit._jax import listeners
def double(x):
    return x * 2
def triple(x):
    return x * 3
n = len(monitoring.get_event_duration_listeners())
jax.jit(double)(np.ones(2, np.float32))
with ev.record() as outer:
    jax.jit(triple)(np.ones(2, np.float32))
    with ev.record() as inner:
        jax.jit(triple)(np.ones(3, np.float32))
    still = listeners.installed() is not None
after = listeners.installed() is None and len(monitoring.get_event_duration_listeners()) == n
jax.jit(double)(np.ones(5, np.float32))
print(json.dumps({'outer': [(e.kind, e.name) for e in outer], 'inner': [(e.kind, e.name) for e in inner],
                  'still': still, 'after': after, 'outer_compile_s': outer.stats().compile_s,
                  'sum': sum(e.duration_s for e in outer.events('compile'))}))
"""
    r = json.loads(run_python(code)[0])
    steps = [["trace", "jit_triple"], ["lower", "jit_triple"], ["compile", "jit_triple"]]
    recompiled = [["recompile", "jit_triple"], *steps]  # the second call retraces triple for another shape
    assert r["outer"] == steps + recompiled and r["inner"] == recompiled
    assert r["still"] and r["after"]
    assert r["outer_compile_s"] == pytest.approx(r["sum"]) and r["sum"] > 0


def test_two_threads_compiling_at_once_get_their_own_names(tmp_path):
    """JAX's hit signals carry no name; the name comes from a log record on the compiling thread, so
    concurrent compiles must not swap names."""
    code = f"""
import json, sys, threading, jax, numpy as np
jax.config.update('jax_compilation_cache_dir', {str(tmp_path / 'jc')!r})
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
import xlakit.events as ev
ev.install_listeners()
def make(i):
    def f(x):
        return x * i + i
    f.__name__ = f'fn{{i}}'
    return f
def work(i):
    for n in range(1, 4):
        jax.jit(make(i))(np.ones(n, np.float32))
threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps([(e.kind, e.source, e.name, e.key) for e in ev.log().events()]))
"""
    for _ in range(2):  # cold: misses and stores; warm: hits
        events = json.loads(run_python(code)[0])
    hits = [e for e in events if e[0] == "hit"]
    assert len(hits) == 18 and all(src == "jax-persistent" for _, src, _, _ in hits)
    assert all(key.startswith(name + "-") for _, _, name, key in hits)
    assert not [e for e in events if e[0] == "compile"]

