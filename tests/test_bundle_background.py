"""Bundles loaded in the background, warm-ups, the first-call order record, and the loader on the cache's one
fetch/publish path.

Faults each test proves absent:

* ``load_bundle`` waiting for every program by default, or a call waiting for every program instead of its own
  (a blocked program must not delay a call that does not need it);
* the weights placed while the first program's entry is still being read and verified (both Python, under one
  GIL) instead of while XLA loads it, or a first program whose read hangs holding ``load_bundle`` up;
* a module that cannot be read (missing) named only on a later call instead of when ``load_bundle`` returns;
* a program that fails in the background being lost (no warning, not in ``errors``) or failing the call that
  could use another size;
* the load order ignoring the recorded first calls (or the smallest-batch default without a record);
* ``warmup=True`` not running programs, or a failed warm-up failing the load;
* the loader re-reading entry headers (``program_bytes`` of a compiled program is the entry's size as
  written, from the cache's decision) or keeping its own hit/miss logic (events come from the cache path and
  carry its ``folder``);
* the unpickling policy's remembered answers outliving a replaced module, or refusals being remembered.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
import types
import warnings

import fresh_process
import numpy as np
import pytest
from bundle_helpers import forget_module_hashes

from xlakit import events
from xlakit.bundle import export_bundle, load_bundle
from xlakit.bundle.programs import Context


def affine(params, x):
    return x @ params["w"] + params["b"]


AFFINE = {"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "b": np.ones(3, np.float32)}


def xs(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)


def expected(x: np.ndarray) -> np.ndarray:
    return x @ AFFINE["w"] + AFFINE["b"]


@pytest.fixture(scope="module")
def warm_bundle(tmp_path_factory):
    """An affine bundle at batch sizes 1 and 4, ``.cache`` filled by one synchronous load."""
    path = tmp_path_factory.mktemp("bg") / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 4))
    load_bundle(path, progress=False).wait()
    return path


def _record_loads(monkeypatch, gate: dict[str, threading.Event] | None = None) -> list[str]:
    """Record the order modules start loading; hold a module until its event in ``gate`` is set."""
    started: list[str] = []
    real = Context.load_module

    def load_module(self, spec, data, sha):
        started.append(spec.file)
        if gate and spec.file in gate:
            assert gate[spec.file].wait(30), "test gate never opened"
        return real(self, spec, data, sha)

    monkeypatch.setattr(Context, "load_module", load_module)
    return started


def test_call_waits_only_for_its_own_program(warm_bundle, monkeypatch):
    release = threading.Event()
    _record_loads(monkeypatch, {"model.b4.jaxexp": release})
    try:
        loaded = load_bundle(warm_bundle, progress=False, max_workers=2)  # the default: returns before all load
        out = loaded(xs(1))                               # b4 is still held: b1 alone must answer
        assert not loaded.ready(4) and loaded.ready(1)
        np.testing.assert_allclose(np.asarray(out), expected(xs(1)), rtol=1e-6)
    finally:
        release.set()
    assert loaded.wait_for(4) is True
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0}
    assert 0 < loaded.ready_s <= loaded.total_s


def test_the_other_programs_load_after_the_first_calls_result_not_beside_its_run(warm_bundle, monkeypatch):
    """Fault: the other programs started loading the moment the first one had loaded, so on 2 cores they shared
    the cores with the first call's run (XLA:CPU's first run of a program is its most expensive) and slowed the
    first result. They now wait for that result, or for HEAD_YIELD_S when no call comes."""
    import time

    from xlakit.bundle import background

    started = _record_loads(monkeypatch)
    monkeypatch.setattr(background, "HEAD_YIELD_S", 30.0)
    loaded = load_bundle(warm_bundle, progress=False, max_workers=2)
    assert loaded.wait_for(1, timeout=30)
    time.sleep(0.3)
    assert started == ["model.b1.jaxexp"]                 # loaded, not yet called: b4 waits
    out = np.asarray(loaded(xs(1)))                       # the first result...
    deadline = time.monotonic() + 20
    while not loaded.ready(4) and time.monotonic() < deadline:  # ready() never asks for b4 (wait_for would)
        time.sleep(0.02)
    assert loaded.ready(4)                                # ...released b4 long before HEAD_YIELD_S
    np.testing.assert_allclose(out, expected(xs(1)), rtol=1e-6)
    assert started == ["model.b1.jaxexp", "model.b4.jaxexp"]

    monkeypatch.setattr(background, "HEAD_YIELD_S", 0.2)
    started.clear()
    assert load_bundle(warm_bundle, progress=False, max_workers=2).wait_for(4, timeout=30)  # no call: loads on
    assert started == ["model.b1.jaxexp", "model.b4.jaxexp"]


def test_weights_are_placed_while_xla_loads_the_first_program(warm_bundle, tmp_path, monkeypatch):
    """Fault: the calling thread placed the weights while the head worker was still reading and verifying its
    entry; both are Python under one GIL, so they took turns and XLA's load (which releases the GIL) began only
    after both. The caller now waits until the verified entry goes to XLA; a head whose read hangs (a slow shared
    store) holds it no longer than HEAD_HANDOFF_S."""
    import time

    from xlakit.bundle import background

    handed: list[bool] = []
    real_wait = background.ProgramLoader.wait_head_handoff

    def wait(self):
        real_wait(self)
        handed.append(self._handoff.is_set())

    monkeypatch.setattr(background.ProgramLoader, "wait_head_handoff", wait)
    np.testing.assert_allclose(np.asarray(load_bundle(warm_bundle, progress=False)(xs(1))), expected(xs(1)),
                               rtol=1e-6)
    assert handed == [True]                               # the weights came after the entry went to XLA

    cold = tmp_path / "cold"                              # nothing stored: the head goes to XLA to compile
    export_bundle(affine, AFFINE, xs(2), cold, batch_sizes=(1, 4))
    monkeypatch.setattr(background, "HEAD_HANDOFF_S", 60.0)
    np.testing.assert_allclose(np.asarray(load_bundle(cold, progress=False)(xs(1))), expected(xs(1)), rtol=1e-6)
    assert handed == [True, True]                         # handed over at the compile, not after it or 60 s

    hold = threading.Event()
    _record_loads(monkeypatch, {"model.b1.jaxexp": hold})
    monkeypatch.setattr(background, "HEAD_HANDOFF_S", 0.2)
    try:
        start = time.monotonic()
        loaded = load_bundle(warm_bundle, progress=False)  # returns while the head's read is still held
        took = time.monotonic() - start
        assert handed == [True, True, False]
        assert not loaded.ready(1) and took < 20
    finally:
        hold.set()
    np.testing.assert_allclose(np.asarray(loaded(xs(1))), expected(xs(1)), rtol=1e-6)


def test_background_failure_surfaces_on_the_call_and_in_the_report(warm_bundle, tmp_path):
    import shutil

    path = tmp_path / "aff"
    shutil.copytree(warm_bundle, path)
    (path / "model.b1.jaxexp").write_bytes(b"\x00not a jax.export artifact" * 10)
    forget_module_hashes(path)  # past the hash check: jax.export's own refusal
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loaded = load_bundle(path, progress=False)
        out = loaded(xs(1))                               # padded through the batch-4 program
    # Named exactly once: when load_bundle returned if it had failed by then, else on the call.
    assert len([w for w in seen if "model.b1.jaxexp" in str(w.message)]) == 1
    np.testing.assert_allclose(np.asarray(out), expected(xs(1)), rtol=1e-5, atol=1e-6)
    assert "not a jax.export artifact" in str(loaded.errors["model.b1.jaxexp"])
    assert loaded.report().set_index("module").loc["model.b1.jaxexp", "status"] == "error"
    assert loaded.batch_sizes() == (4,)


def test_unreadable_module_is_named_before_load_bundle_returns(warm_bundle, tmp_path):
    """A module that cannot even be read fails before any program loads: the default background load must say
    so when it returns, not leave the user to find out on some later call."""
    import shutil

    path = tmp_path / "aff"
    shutil.copytree(warm_bundle, path)
    (path / "model.b4.jaxexp").unlink()
    with pytest.warns(RuntimeWarning, match=r"1 of 2 modules failed to load(.|\n)*model.b4.jaxexp: missing"):
        loaded = load_bundle(path, progress=False)
    assert loaded.ready(4) and "missing" in str(loaded.errors["model.b4.jaxexp"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # named once: the call does not warn again
        out = loaded(xs(3))                               # rows independent: chunks through batch 1
    np.testing.assert_allclose(np.asarray(out), expected(xs(3)), rtol=1e-5, atol=1e-6)
    assert loaded.counts() == {"hit": 1, "miss": 0, "error": 1}


EXITS_WHILE_LOADING = """
import atexit, json, sys, time, xlakit
from xlakit.bundle.programs import Context
real = Context.load_module
def slow(self, spec, data, sha):        # every program takes 0.3 s: the script ends while the first loads
    time.sleep(0.3)
    return real(self, spec, data, sha)
Context.load_module = slow
lb = xlakit.load_bundle(PATH, progress=False)
atexit.register(lb.wait)                # waiting at exit must not hang either
print(json.dumps({"returned_loading": not lb.ready(1)}))
"""


def test_a_script_that_exits_while_loading_still_loads_every_program(tmp_path):
    """The head start queued the other programs only once the first had loaded; by then the interpreter was
    exiting and the pool refused them: the script left 1 of 3 programs in .cache (or hung in an atexit
    wait). Every program must load and be stored before the process ends."""
    from conftest import run_python

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2, 4))
    env = {"XLAKIT_CACHE_SECRET": "a-shared-secret-for-this-test"}
    report = json.loads(run_python(EXITS_WHILE_LOADING.replace("PATH", repr(str(path))), env=env, timeout=120))
    assert report == {"returned_loading": True}
    assert len(list((path / ".cache").glob("*/*.xlk"))) == 3
    counts = run_python(f"import xlakit; print(xlakit.load_bundle({str(path)!r}, progress=False).counts())",
                        env=env)
    assert counts == "{'hit': 3, 'miss': 0, 'error': 0}"


def test_ctrl_c_while_loading_cancels_the_programs_not_started(tmp_path):
    """A script interrupted (KeyboardInterrupt) right after load_bundle waited at exit for every queued
    program, inviting a second Ctrl-C (which XLA answers with an abort mid-compile). Programs not started by
    then are cancelled; the one loading finishes and is stored whole."""

    from conftest import worker_env

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2, 4, 8))
    code = EXITS_WHILE_LOADING.replace("PATH", repr(str(path))) + "raise KeyboardInterrupt\n"
    proc = fresh_process.run([sys.executable, "-c", code.replace("atexit.register(lb.wait)", "")],
                             capture_output=True, text=True, env=worker_env(), timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert len(list((path / ".cache").glob("*/*.xlk"))) == 1         # the head start, stored whole
    assert list((path / ".cache").glob("*/*.tmp")) == []


CALLS_THEN_EXITS = """
import numpy as np, xlakit
lb = xlakit.load_bundle(PATH, progress=False)
for n in (4, 1, 2):
    lb(np.ones((n, 4), np.float32))
"""


def test_first_calls_just_before_exit_are_all_recorded_and_leave_no_temp_file(tmp_path):
    """The first-call record was written by one daemon thread per call: a process ending right after its calls
    killed them mid-write, leaving a temp file in .cache per run and a record missing calls."""
    from conftest import run_python

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2, 4))
    run_python(CALLS_THEN_EXITS.replace("PATH", repr(str(path))) + "print('done')")
    record = json.loads((path / ".cache" / "usage.json").read_text())
    assert record["first_calls"] == [["default", 4], ["default", 1], ["default", 2]]
    assert [p.name for p in (path / ".cache").iterdir() if p.name.endswith(".tmp")] == []


def test_a_bundle_deleted_while_loading_is_not_created_again(tmp_path, monkeypatch):
    """Workers still compiling after the user deleted the bundle folder stored their programs, re-creating
    <bundle>/.cache/<partition>/ from nothing. A program compiled after the deletion must not be stored."""
    import shutil

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 4))
    release = threading.Event()
    _record_loads(monkeypatch, {"model.b4.jaxexp": release})
    with events.record(jax_signals=False) as log:
        loaded = load_bundle(path, progress=False)
        try:
            assert loaded.wait_for(1) is True
            shutil.rmtree(path)
        finally:
            release.set()
        loaded.wait()
    assert not path.exists()
    (refused,) = [e for e in log if e.kind == "store_error"]
    assert refused.name == "aff/model.b4" and "no longer exists" in refused.reason
    assert loaded.counts() == {"hit": 0, "miss": 2, "error": 0}   # the program itself is fine, and runs
    np.testing.assert_allclose(np.asarray(loaded(xs(4))), expected(xs(4)), rtol=1e-6)


def test_bare_device_and_a_file_for_a_folder(warm_bundle):
    """``devices=jax.devices()[0]`` (no list) failed with "'Device' object is not iterable", and the path of
    ``manifest.json`` itself with ".../manifest.json/manifest.json: Not a directory"."""
    import jax

    from xlakit.bundle import ManifestError

    loaded = load_bundle(warm_bundle, devices=jax.devices()[0], progress=False)
    assert loaded.device == jax.devices()[0]
    np.testing.assert_allclose(np.asarray(loaded(xs(1))), expected(xs(1)), rtol=1e-6)
    with pytest.raises(KeyError, match=r"its batch sizes are \[1, 4\]"):
        loaded.wait_for(5)
    loaded.wait()  # no load of this test may still run when the next one patches Context.load_module
    with pytest.raises(ManifestError, match="is a file, not a bundle folder"):
        load_bundle(warm_bundle / "manifest.json", progress=False)
    with pytest.raises(ManifestError, match=r"nope: does not exist; pass the path of a bundle folder"):
        load_bundle(warm_bundle.parent / "nope", progress=False)  # was: "nope/manifest.json: missing"


def test_a_load_that_raises_writes_no_progress_line(warm_bundle, tmp_path, monkeypatch, capsys):
    """Fault: a background load whose weights file was gone raised WeightsError, but the programs it cancelled
    were counted on the bar, which then wrote "aff: 2/2 programs (1 hit, 0 compiled, 1 failed)": a failure
    that never happened. The error also said only "missing", not what to do."""
    import io
    import shutil

    from xlakit.bundle import WeightsError

    broken = tmp_path / "aff"
    shutil.copytree(warm_bundle, broken)
    (broken / "weights.safetensors").unlink()
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    with pytest.raises(WeightsError, match=r"missing; copy the bundle's weights file back, or export the bundle"):
        load_bundle(broken)                               # progress on (a log-file stderr: one line at the end)
    assert log.getvalue() == ""
    load_bundle(warm_bundle).wait()                       # a load that succeeds still writes its line
    assert "aff: 2/2 programs (2 hit, 0 compiled, 0 failed)" in log.getvalue()


def _join_usage_writers() -> None:
    for t in threading.enumerate():
        if t.name == "xlakit-usage":
            t.join(10)


def test_load_order_follows_recorded_first_calls(warm_bundle, tmp_path, monkeypatch):
    import shutil

    path = tmp_path / "aff"
    shutil.copytree(warm_bundle, path)
    started = _record_loads(monkeypatch)
    loaded = load_bundle(path, progress=False, background=True, max_workers=1).wait()
    assert started == ["model.b1.jaxexp", "model.b4.jaxexp"]  # no record: smallest batch first
    loaded(xs(4))
    loaded(xs(1))
    _join_usage_writers()
    record = json.loads((path / ".cache" / "usage.json").read_text())
    assert record == {"format_version": 1, "first_calls": [["default", 4], ["default", 1]]}

    started.clear()
    load_bundle(path, progress=False, background=True, max_workers=1).wait()
    assert started == ["model.b4.jaxexp", "model.b1.jaxexp"]  # the last process called batch 4 first

    (path / ".cache" / "usage.json").write_text('{"format_version": 1, "first_calls": [[[[[[]]]]]]}')
    started.clear()
    load_bundle(path, progress=False, background=True, max_workers=1).wait()
    assert started == ["model.b1.jaxexp", "model.b4.jaxexp"]  # an unusable record is ignored


def test_warmup_runs_each_program_once_and_never_fails_the_load(warm_bundle, monkeypatch):
    """wait() (and everything that waits for all: reports, background=False) returned before the warm-ups
    had run, so the reports showed no warm-up outcome for programs no call had used."""
    from xlakit._jax import warmup as warmup_module

    loaded = load_bundle(warm_bundle, progress=False, warmup=True).wait()
    assert all(r.warmup_s > 0 and r.warmup_error is None for r in loaded.reports)
    np.testing.assert_allclose(np.asarray(loaded(xs(4))), expected(xs(4)), rtol=1e-6)

    monkeypatch.setattr(warmup_module, "warm_up", lambda c: warmup_module.WarmupResult(False, 0.0, "boom"))
    loaded = load_bundle(warm_bundle, progress=False, warmup=True, background=False)
    assert [r.warmup_error for r in loaded.reports] == ["boom", "boom"]
    assert loaded.counts() == {"hit": 2, "miss": 0, "error": 0}


def test_events_and_sizes_come_from_the_cache_path(tmp_path, monkeypatch):
    from xlakit.events import _origin

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(2,))
    with events.record() as log:
        cold = load_bundle(path, progress=False).wait()  # events of the background load inside the block
    folder = str(path / ".cache")
    got = [(e.kind, e.name, e.folder) for e in log if e.kind in ("miss", "compile", "store") and e.source == "xlakit"]
    assert got == [("miss", "aff/model.b2", folder), ("compile", "aff/model.b2", folder),
                   ("store", "aff/model.b2", folder)]
    (entry,) = (path / ".cache").glob("*/*.xlk")
    assert cold.reports[0].program_bytes == entry.stat().st_size   # the size written, not a re-read header
    walks = []
    real_walk = _origin._walk
    monkeypatch.setattr(_origin, "_walk", lambda start: walks.append(start) or real_walk(start))
    with events.record() as log:
        warm = load_bundle(path, progress=False).wait()
    # A bundle's events never come from inside a JAX trace: recorded without walking the Python stack.
    assert walks == [] and {e.origin for e in log} == {None} and len(log) > 0
    (hit,) = [e for e in log if e.kind == "hit"]
    assert hit.name == "aff/model.b2" and hit.folder == folder and hit.bytes == warm.reports[0].program_bytes > 0
    assert warm.reports[0].output_bytes == 4 * 2 * 3


def test_unpickling_policy_remembers_only_positive_answers_of_static_packages(monkeypatch):
    from xlakit._jax import unpickle_policy as policy

    first = policy._resolve_global("jax._src.core", "ShapedArray")
    assert policy._resolve_global("jax._src.core", "ShapedArray") is first
    assert ("jax._src.core", "ShapedArray") in policy._RESOLVED
    for _ in range(2):  # refusals are decided afresh each time, never remembered
        with pytest.raises(pickle.UnpicklingError, match="allowed only by name"):
            policy._resolve_global("os", "system")
    assert ("os", "system") not in policy._RESOLVED

    fake = types.ModuleType("jax._src.core")
    fake.ShapedArray = type("ShapedArray", (), {})
    monkeypatch.setitem(sys.modules, "jax._src.core", fake)  # a replaced module: the old answer is stale
    assert policy._resolve_global("jax._src.core", "ShapedArray") is fake.ShapedArray
    del fake.ShapedArray
    monkeypatch.setitem(sys.modules, "jax._src.core", types.ModuleType("jax._src.core"))
    with pytest.raises(pickle.UnpicklingError, match="no such attribute"):
        policy._resolve_global("jax._src.core", "ShapedArray")


INTERRUPTED = """
import os, signal, sys, threading, time, xlakit
signal.signal(signal.SIGINT, signal.default_int_handler)  # a runner started in the background ignores SIGINT
if os.environ.get("INTERRUPT_IN_THREAD_START"):
    real = threading.Thread.start
    def start(self):                    # Ctrl-C lands while the first worker thread starts (inside start())
        real(self)
        if self.name.startswith("xlakit-bundle"):
            threading.Thread.start = real
            raise KeyboardInterrupt
    threading.Thread.start = start
print("LOADING", flush=True)
lb = xlakit.load_bundle(PATH, progress=False)
time.sleep(60)                          # the script goes on; a SIGINT ends it here or earlier
"""


def test_an_interrupt_at_any_moment_of_a_background_load_leaves_a_process_that_exits(tmp_path):
    """A Ctrl-C while the worker thread started left a pool thread the pool did not know about, blocked on its
    queue: the interpreter waited for it at exit forever. Interrupted at several moments (inside
    ``Thread.start``, and by a real SIGINT 0 s to 1 s after ``load_bundle`` is called), every process exits."""
    import signal
    import subprocess
    import time

    from conftest import worker_env

    path = tmp_path / "aff"
    export_bundle(affine, AFFINE, xs(2), path, batch_sizes=(1, 2, 4))
    code = INTERRUPTED.replace("PATH", repr(str(path)))
    moments = {"thread start": None, "at once": 0.0, "10 ms": 0.01, "100 ms": 0.1, "1 s": 1.0}
    procs = {}
    for label, delay in moments.items():
        env = worker_env({"INTERRUPT_IN_THREAD_START": "1"} if delay is None else {})
        procs[label] = fresh_process.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
    for label, delay in moments.items():
        if delay is not None:
            assert procs[label].stdout.readline().strip() == "LOADING"
            time.sleep(delay)
            procs[label].send_signal(signal.SIGINT)
    for label, proc in procs.items():
        # A SIGINT that lands inside a garbage-collection callback (JAX registers one) is swallowed by Python
        # itself, in any JAX program; a user presses Ctrl-C again. What must never happen is a process that
        # an interrupt cannot end: each gets up to five Ctrl-Cs, the waits doubling from 2 s (62 s in all, so a
        # loaded machine's slow exit is not mistaken for a hang, while a swallowed one costs 2 s, not 8).
        for wait_s in (2, 4, 8, 16, 32):
            try:
                proc.communicate(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
        else:
            for p in procs.values():
                p.kill()
            pytest.fail(f"interrupted {label}: the process did not exit")
        assert proc.returncode not in (None, 0), label  # interrupted: it ends, with KeyboardInterrupt's status
    assert list((path / ".cache").glob("*/*.tmp")) == []


def test_a_load_that_waits_for_every_program_loads_them_on_the_calling_thread_too(warm_bundle, monkeypatch):
    """``background=False`` used to start ``max_workers`` threads and sleep until they were done: one thread too many
    per load (the folder of 20 bundles pays it 20 times). The calling thread now loads programs beside them: none
    is started for one worker. A Ctrl-C on the calling thread cancels the programs not started and propagates."""
    threads: list[str] = []
    real = Context.load_module

    def load_module(self, spec, data, sha):
        threads.append(threading.current_thread().name)
        return real(self, spec, data, sha)

    monkeypatch.setattr(Context, "load_module", load_module)
    loaded = load_bundle(warm_bundle, progress=False, background=False, max_workers=1)
    assert threads == [threading.current_thread().name] * 2 and loaded.counts()["hit"] == 2
    threads.clear()
    # Both threads inside a load at once (else the worker may take both programs before the calling thread takes
    # one, as on a loaded CI machine): a load that kept the calling thread out would break the barrier.
    both = threading.Barrier(2, timeout=30)

    def load_beside(self, spec, data, sha):
        threads.append(threading.current_thread().name)
        both.wait()
        return real(self, spec, data, sha)

    monkeypatch.setattr(Context, "load_module", load_beside)
    loaded = load_bundle(warm_bundle, progress=False, background=False, max_workers=2)
    assert sorted(threads) == sorted([threading.current_thread().name, "xlakit-bundle"]), threads
    np.testing.assert_allclose(np.asarray(loaded(xs(4))), expected(xs(4)), rtol=1e-6)

    def interrupted(self, spec, data, sha):
        raise KeyboardInterrupt

    monkeypatch.setattr(Context, "load_module", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_bundle(warm_bundle, progress=False, background=False, max_workers=1)
    assert not [t for t in threading.enumerate() if t.name == "xlakit-bundle"]


def test_waits_take_inf_as_for_ever_and_refuse_nan_by_name(warm_bundle):
    """Fault: wait(inf), wait(1e10) and wait_for(..., timeout=inf) raised "OverflowError: timestamp out of range for
    platform time_t" from threading, and wait(nan) said the programs were "still loading after nan s"."""
    loaded = load_bundle(warm_bundle, progress=False)
    assert loaded.wait(float("inf")) is loaded and loaded.wait_for(4, timeout=float("inf"))
    for bad in (float("nan"), 1e10, -1):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds >= 0"):
            loaded.wait(bad)
