"""Transparent mode is a drop-in, proven on a real peer's own tests: optax's, from its source distribution.

The sdist of the installed optax version is fetched from PyPI at test time (``pip download --no-binary :all:
--no-deps``; it ships its ``*_test.py`` files) into the test's temp folder. A subset of its tests runs three
times, each in a fresh pytest process (tests/peer_suite_plugin.py records every test id's outcome): on plain
JAX; under ``xlakit.enable_cache`` with an empty cache (every program missed, compiled and stored); and again
in a new process on the filled cache (every program loaded from it, as after a restart). Any test whose
outcome differs from plain JAX fails this test, by id. No network to PyPI: skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: Small optax test modules that import nothing outside optax's own dependencies (others need sklearn/scipy):
#: projections, the update rules, and schedule joins, ~10 tests and ~20 distinct programs in all.
SUBSET = ("optax/transforms/_constraining_test.py", "optax/_src/update_test.py", "optax/schedules/_join_test.py")


@pytest.fixture(scope="module")
def optax_sdist(tmp_path_factory) -> Path:
    optax = pytest.importorskip("optax")
    pytest.importorskip("absl.testing", reason="optax's tests use absl.testing (a dependency of optax)")
    where = tmp_path_factory.mktemp("optax-sdist")
    try:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                              "--disable-pip-version-check", "-q", "-d", str(where),
                              f"optax=={optax.__version__}"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        got = None
    archives = sorted(where.glob("optax-*.tar.gz"))
    if got is None or got.returncode != 0 or not archives:
        reason = "timed out" if got is None else (got.stderr.strip().splitlines() or ["no archive"])[-1]
        pytest.skip(f"optax {optax.__version__}'s source distribution could not be fetched from PyPI "
                    f"(offline?): {reason}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(where, filter="data")
    root = where / f"optax-{optax.__version__}"
    missing = [t for t in SUBSET if not (root / t).exists()]
    assert not missing, f"optax {optax.__version__}'s sdist no longer ships {missing}"
    return root


def _run_suite(root: Path, out: Path, cache: Path | None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLAKIT_PEER_OUTCOMES=str(out))
    env.pop("XLA_FLAGS", None)
    env.pop("XLAKIT_PEER_CACHE", None)
    if cache is not None:
        env["XLAKIT_PEER_CACHE"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "peer_suite_plugin", "-p", "no:cacheprovider",
                           "-o", "addopts=", "--rootdir", str(root), *SUBSET], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert out.exists(), f"the peer suite did not finish (exit {proc.returncode}):\n{proc.stdout[-3000:]}" \
                         f"\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_optax_tests_have_the_same_outcomes_under_the_transparent_cache(optax_sdist, tmp_path):
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(2) as pool:  # plain JAX and the cold cache are independent: run them side by side
        plain_run = pool.submit(_run_suite, optax_sdist, tmp_path / "plain.json", None)
        cold = pool.submit(_run_suite, optax_sdist, tmp_path / "cold.json", cache).result()
        plain = plain_run.result()
    warm = _run_suite(optax_sdist, tmp_path / "warm.json", cache)

    assert len(plain["outcomes"]) >= 8 and "passed" in plain["outcomes"].values(), plain["outcomes"]
    for name, run in (("empty cache", cold), ("filled cache, new process", warm)):
        differ = {t: (plain["outcomes"].get(t), run["outcomes"].get(t))
                  for t in set(plain["outcomes"]) | set(run["outcomes"])
                  if plain["outcomes"].get(t) != run["outcomes"].get(t)}
        assert differ == {}, f"{name}: outcome (plain JAX, under xlakit) differs for {differ}"
    # The cache really answered: the first run stored programs, the second loaded them and never failed to.
    assert cold["stats"]["store"] >= 5 and cold["stats"]["hit"] == 0, cold["stats"]
    assert warm["stats"]["hit"] >= cold["stats"]["store"] * 0.8, (cold["stats"], warm["stats"])
    assert warm["stats"]["load_error"] == 0 and warm["stats"]["corrupt"] == 0, warm["stats"]
