"""A pytest plugin for running another project's test suite, with or without xlakit's transparent cache.

Loaded with ``-p peer_suite_plugin`` by tests/test_peer_suite.py. With ``XLAKIT_PEER_CACHE`` set it calls
``xlakit.enable_cache(XLAKIT_PEER_CACHE)`` before any test module is imported (so before any ``jax.jit``);
without it the suite runs on plain JAX. At the end it writes ``XLAKIT_PEER_OUTCOMES`` (JSON): the outcome of
every test id (``passed``, ``failed``, ``skipped``; a failure in setup or teardown counts as ``failed``) and,
under the cache, ``xlakit.cache_stats()`` counts (proof the cache answered).
"""

from __future__ import annotations

import json
import os

_outcomes: dict[str, str] = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def pytest_configure(config) -> None:
    path = os.environ.get("XLAKIT_PEER_CACHE")
    if path:
        import xlakit

        xlakit.enable_cache(path)


def pytest_runtest_logreport(report) -> None:
    outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
    if report.when == "call" or outcome != "passed":
        previous = _outcomes.get(report.nodeid, "passed")
        _outcomes[report.nodeid] = max(previous, outcome, key=_RANK.__getitem__)
    else:
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_sessionfinish(session, exitstatus) -> None:
    out = os.environ.get("XLAKIT_PEER_OUTCOMES")
    if not out:
        return
    stats = None
    if os.environ.get("XLAKIT_PEER_CACHE"):
        import xlakit

        s = xlakit.cache_stats()
        stats = {"hit": s.counts.get("hit", 0), "miss": s.counts.get("miss", 0), "store": s.counts.get("store", 0),
                 "load_error": s.counts.get("load_error", 0), "corrupt": s.counts.get("corrupt", 0)}
    with open(out, "w") as f:
        json.dump({"outcomes": _outcomes, "stats": stats}, f)
