"""The suite's fresh JAX processes, forked from a process that imported JAX (tests/fresh_process.py), are the
processes they stand for: what the tests of cold and warm caches, crashes and concurrent writers prove in them
holds for a process started the usual way.

Faults this guards against: a forked child that kept the zygote's JAX configuration while its environment asked
for another (JAX reads ``JAX_*`` at import), a backend or compiled program inherited from the zygote, a child
that reported success after a crash, lost its output or outlived its timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import fresh_process
import pytest
from conftest import worker_env

STATE = r'''
import json, os, sys
import jax
from jax._src import xla_bridge
state = {"argv": sys.argv, "cwd": os.getcwd(), "marker": os.environ.get("XLAKIT_TEST_MARKER"),
         "main": __name__, "xlakit_imported": any(m.split(".")[0] == "xlakit" for m in sys.modules),
         "backends_before": sorted(xla_bridge._backends), "x64": bool(jax.config.jax_enable_x64),
         "path0": sys.path[0]}
state["sum"] = float(jax.numpy.arange(4.0).sum())
state["backends_after"] = sorted(xla_bridge._backends)
print(json.dumps(state))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
'''


def _run(code: str, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return fresh_process.run([sys.executable, "-c", code, *args], env=worker_env(env), capture_output=True,
                             text=True, timeout=120, **kw)


def test_a_forked_child_is_a_fresh_process_with_its_own_arguments_environment_and_streams(tmp_path):
    before = fresh_process.counts.get("forked", 0)
    done = [_run(STATE, str(code), env={"XLAKIT_TEST_MARKER": str(code)}, cwd=tmp_path) for code in (0, 3)]
    assert fresh_process.counts.get("forked", 0) - before == 2  # both forked, from the same zygote
    usual = _run(STATE, "0", env={"XLAKIT_TEST_MARKER": "0"}, cwd=tmp_path, zygote=False)
    states = [json.loads(p.stdout.splitlines()[-1]) for p in (*done, usual)]
    for p, state, code in zip((*done, usual), states, (0, 3, 0), strict=True):
        assert p.returncode == code and p.stderr == "to stderr\n"
        assert state["argv"] == ["-c", str(code)] and state["cwd"] == str(tmp_path) and state["path0"] == ""
        assert state["marker"] == str(code) and state["main"] == "__main__" and state["sum"] == 6.0
        # nothing of the zygote's: no backend until the child's first computation, no xlakit module
        assert state["backends_before"] == [] and state["backends_after"] == ["cpu"]
        assert not state["xlakit_imported"]
    assert states[0] == states[2]  # the forked child and the usually started one see the same


def test_jax_configuration_read_at_import_comes_from_the_childs_own_environment():
    """``JAX_ENABLE_X64`` is read when JAX is imported: a child asking for it gets a zygote started with it."""
    plain, x64 = (json.loads(_run(STATE, "0", env=extra).stdout.splitlines()[-1])
                  for extra in ({}, {"JAX_ENABLE_X64": "1"}))
    assert (plain["x64"], x64["x64"]) == (False, True)


def test_crashes_timeouts_and_tracebacks_are_reported_as_subprocess_does():
    killed = _run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == -signal.SIGKILL
    raised = _run("raise ValueError('boom')")
    assert raised.returncode == 1 and "ValueError: boom" in raised.stderr and "Traceback" in raised.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        fresh_process.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"],
                          env=worker_env(), capture_output=True, text=True, timeout=3)
    p = fresh_process.Popen([sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(600)"],
                            env=worker_env(), stdout=subprocess.PIPE, text=True)
    assert isinstance(p, fresh_process.ForkedProcess) and p.stdout.readline() == "ready\n" and p.poll() is None
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == -signal.SIGTERM
    p.stdout.close()


SHARER = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import fresh_process
child = fresh_process.run([sys.executable, "-c", "import json, os, tempfile; print(json.dumps("
                           "[os.getppid(), tempfile.gettempdir()]))"], capture_output=True, text=True, check=True)
zygote, tempdir = json.loads(child.stdout)
print(json.dumps({"zygote": zygote, "tempdir": tempdir, "counts": fresh_process.counts}))
'''


def test_the_runs_pytest_processes_share_one_zygote_per_start_environment_which_ends_with_the_run(tmp_path):
    """Two pytest processes of a run (xdist workers, each with its own temp folder) are served by one zygote: it
    is started once, each child still sees its own ``TMPDIR`` (the zygote's ``tempfile`` choice is not
    inherited), and the zygote ends, removing its socket, when the run's main process does."""
    import time

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    sockets = tmp_path / "zygotes"
    sockets.mkdir()
    results = []
    try:
        for worker in ("gw0", "gw1"):
            temp = tmp_path / f"tmp-{worker}"
            temp.mkdir()
            env = worker_env({"TMPDIR": str(temp), "PYTEST_XDIST_WORKER": worker,
                              fresh_process.SHARED_DIR_VARIABLE: str(sockets),
                              fresh_process.OWNER_VARIABLE: str(owner.pid)})
            ran = subprocess.run([sys.executable, "-c", SHARER, str(fresh_process.HERE)], env=env,
                                 capture_output=True, text=True, timeout=120)
            assert ran.returncode == 0, ran.stderr
            results.append((json.loads(ran.stdout), str(temp)))
        (first, temp0), (second, temp1) = results
        assert first["zygote"] == second["zygote"]
        assert first["counts"].get("zygotes started") == 1 and "zygotes started" not in second["counts"]
        assert (first["tempdir"], second["tempdir"]) == (temp0, temp1)
        # it listens while the run lasts
        assert [p.name for p in sockets.iterdir() if p.suffix not in (".lock", ".log")]
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (_running(first["zygote"]) or [
            p for p in sockets.iterdir() if p.suffix not in (".lock", ".log")]):
        time.sleep(0.1)
    assert not [p.name for p in sockets.iterdir() if p.suffix not in (".lock", ".log")]
    assert _running(first["zygote"]) is False, "the zygote outlived the run's main process"


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by whoever inherited it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
