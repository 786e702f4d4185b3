"""Shared fixtures: isolated config/cache folders and a runner for JAX worker subprocesses."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import fresh_process
import pytest

HERE = Path(__file__).resolve().parent
WORKER = HERE / "jaxworker.py"

# The hundreds of processes the tests start (JAX workers, notebook kernels, JupyterLab) read bytecode caches:
# with PYTHONDONTWRITEBYTECODE set none is ever written for this checkout, and each process compiled every
# xlakit module it imports from source again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


#: The files that take longest, longest first (measured: wall seconds on one worker of a clean-clone `make test` on
#: the 2-core machine: JupyterLab in a browser ~190, the Binder build ~110, bundles ~90, the notebooks and the
#: probe programs ~70, ...). `make test` gives each worker whole files (``--dist loadfile``) in collection order
#: (:func:`pytest_configure` turns off xdist's reordering by test count); these go out first, so no worker starts a
#: two-minute file while the others have run out of work (longest-processing-time first).
LONGEST_FIRST = ("test_browser_lab.py", "test_binder.py", "test_bundle.py", "test_notebooks.py",
                 "test_memory_probe_programs.py", "test_bundle_fuzz.py", "test_memory_probe.py",
                 "test_bundle_background.py", "test_transparent.py", "test_widgets.py", "test_serialize.py",
                 "test_browser.py", "test_peer_suite.py", "test_workloads.py", "test_fuzz_store.py",
                 "test_fleet_wire.py", "test_memory_attribution.py", "test_store_remote.py", "test_loaded_kernels.py",
                 "test_api.py", "test_bundle_answers.py", "test_bundle_rows.py", "test_memory_sweep.py",
                 "test_events_jax.py", "test_cache_decisions.py", "test_executable_cache.py", "test_demo.py")


def pytest_configure(config) -> None:
    """Keep the collection order under ``--dist loadfile``: pytest-xdist >= 3.7 hands out the files with the most
    tests first unless told not to (``--no-loadscope-reorder``), which ran the Binder build (2 tests, ~110 s)
    last but one. In the run's main process, also name the folder where the zygotes of :mod:`fresh_process`
    listen, shared by the xdist workers (which inherit the variables): one zygote per start environment for the
    run, not one per worker (18 -> 6 of ~1.5 s of CPU each in the default suite)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if fresh_process.SHARED_DIR_VARIABLE not in os.environ:
        folder = tempfile.mkdtemp(prefix="xlakit-zygotes-")
        os.environ[fresh_process.SHARED_DIR_VARIABLE] = folder
        os.environ[fresh_process.OWNER_VARIABLE] = str(os.getpid())
        config._xlakit_zygote_dir = folder


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "_xlakit_zygote_dir", None)
    if folder:  # the zygotes end with this process (they watch it); their socket files go now
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(fresh_process.SHARED_DIR_VARIABLE, None)
        os.environ.pop(fresh_process.OWNER_VARIABLE, None)


def pytest_collection_modifyitems(items: list) -> None:
    """Order the files by :data:`LONGEST_FIRST`, the rest after them as collected; tests within a file keep
    their order (a stable sort on the file alone)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory):
    """Keep the HMAC secret and the jaxlib fingerprint memo (one for the run) out of the real home folder, and
    every temp folder out of the system's: ``TMPDIR`` points into pytest's own base folder for this process and
    every process it starts (JAX workers, notebook kernels, JupyterLab, the S3 server), so the
    ``tempfile.mkdtemp`` folders the notebooks and workers make go when pytest removes that folder
    (``tmp_path_retention_policy`` in pyproject.toml: after a passing run, nothing is left)."""
    base = tmp_path_factory.mktemp("xlakit-home")
    temp = tmp_path_factory.mktemp("tmp", numbered=False)
    old = {k: os.environ.get(k) for k in ("XLAKIT_CONFIG_DIR", "XLAKIT_CACHE_DIR", "XLAKIT_CACHE_SECRET", "TMPDIR",
                                          "XLAKIT_FINGERPRINT_MEMO_DIR")}
    os.environ["XLAKIT_CONFIG_DIR"] = str(base / "config")
    # One jaxlib fingerprint memo for all the new cache folders of this run's processes: without it each process
    # that opens one hashed jaxlib's ~350 MB again (0.6-0.8 s of CPU, some 200 times). Tests of where the memo
    # lives remove the variable.
    os.environ["XLAKIT_FINGERPRINT_MEMO_DIR"] = str(base / "fingerprint-memo")
    os.environ["XLAKIT_CACHE_DIR"] = str(base / "default-cache")
    os.environ.pop("XLAKIT_CACHE_SECRET", None)
    os.environ["TMPDIR"] = str(temp)
    old_tempdir, tempfile.tempdir = tempfile.tempdir, None  # gettempdir() reads TMPDIR again
    yield base
    tempfile.tempdir = old_tempdir
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def notebook_cell(folder: Path, monkeypatch, source: str, number: int) -> tuple[dict, Path]:
    """Run ``source`` as IPython cell ``[number]`` would: compiled from ``ipykernel_<pid>/<hash>.py`` (what
    ipykernel writes), with IPython's compile cache mapping that file to the execution count (a stand-in
    ``IPython`` module in ``sys.modules`` for the test). Returns the cell's namespace and its file."""
    import types

    cell = folder / "ipykernel_4242" / f"{abs(hash(source)) % 10**10}.py"
    cell.parent.mkdir(exist_ok=True)
    cell.write_text(source)
    namespace: dict = {}
    exec(compile(source, str(cell), "exec"), namespace)
    fake = types.ModuleType("IPython")
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={str(cell): number}))
    fake.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)
    return namespace, cell


def cpu_share(*loads: float) -> float:
    """How many runnable processes share each CPU now (the 1-minute load average, or the highest of ``loads``
    taken earlier, per CPU), at least 1: the factor a wall-clock bound set on a quiet machine grows by while the
    suite's workers, kernels and browsers share the cores."""
    return max(1.0, max((*loads, os.getloadavg()[0])) / (os.cpu_count() or 1))


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def run_worker(cache: Path | str, *programs: str, max_bytes: int | None = None, min_compile: float | None = None,
               env: dict[str, str] | None = None, preexec_fn=None, prefix: list[str] | None = None,
               timeout: float = 300) -> dict:
    """Run tests/jaxworker.py in a fresh process (forked from one that imported JAX: :mod:`fresh_process`); return
    its JSON report (fails the test on a non-zero exit).

    ``prefix`` is a command the worker runs under (e.g. ``unshare -m sh -c '...; exec "$@"' sh``)."""
    cmd = [sys.executable, str(WORKER), "--cache", str(cache)]
    if max_bytes is not None:
        cmd += ["--max-bytes", str(max_bytes)]
    if min_compile is not None:
        cmd += ["--min-compile", str(min_compile)]
    options = {"preexec_fn": preexec_fn} if preexec_fn else {}
    proc = fresh_process.run((prefix or []) + cmd + list(programs), capture_output=True, text=True,
                             env=worker_env(env), timeout=timeout, **options)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["stdout"] = proc.stdout
    report["stderr"] = proc.stderr
    return report


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300,
               new_interpreter: bool = False) -> str:
    """Run ``python -c code`` in a fresh process (JAX flags are per process); return its last stdout line.

    The process is forked from one that imported JAX (:mod:`fresh_process`) unless ``new_interpreter``: code that
    checks which modules an import brings in needs an interpreter that imported nothing."""
    proc = fresh_process.run([sys.executable, "-c", code], capture_output=True, text=True, env=worker_env(env),
                             timeout=timeout, zygote=not new_interpreter)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]


def kinds(report: dict, name_part: str | None = None) -> list[str]:
    """Event kinds in order, optionally only for events whose name contains ``name_part``."""
    return [e["kind"] for e in report["events"] if name_part is None or name_part in (e["name"] or "")]


@pytest.fixture
def worker():
    return run_worker


@pytest.fixture
def cache(tmp_path):
    """An ExecutableCache on an empty folder, with an empty event log; closed (JAX hooks released) after."""
    import xlakit

    c = xlakit.ExecutableCache(tmp_path / "cache")
    xlakit.events.log().clear()
    yield c
    c.close()


# -- how the run's fresh processes started (tests/fresh_process.py), summed over the xdist workers ----------------

_process_counts: dict[str, int] = {}


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the counts to the controller
        session.config.workeroutput["fresh_process_counts"] = json.dumps(fresh_process.counts)
    else:
        for k, v in fresh_process.counts.items():
            _process_counts[k] = _process_counts.get(k, 0) + v


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    for k, v in json.loads(getattr(node, "workeroutput", {}).get("fresh_process_counts", "{}")).items():
        _process_counts[k] = _process_counts.get(k, 0) + v


def pytest_terminal_summary(terminalreporter) -> None:
    if _process_counts:
        usual = ", ".join(f"{v} {k.removeprefix('usual: ')}" for k, v in sorted(_process_counts.items())
                          if k.startswith("usual: "))
        terminalreporter.write_line(f"fresh Python processes: {_process_counts.get('forked', 0)} forked from "
                                    f"{_process_counts.get('zygotes started', 0)} processes that imported JAX "
                                    f"(tests/fresh_process.py); started the usual way: {usual or 'none'}")
