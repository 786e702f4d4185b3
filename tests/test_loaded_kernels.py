"""A program loaded without lowering never crashes the process: the kernels its custom calls need are made ready
first (the CPU LAPACK table jaxlib fills only while lowering a linalg op), and a kernel xlakit cannot make ready
means the program is compiled instead.

The loads run in fresh subprocesses: a null kernel pointer is a SIGSEGV, which must fail the test, not pytest.
"""

from __future__ import annotations

import json
import sys

import fresh_process
import pytest

from tests.conftest import worker_env

LINALG = r'''
import json, os, sys
import jax, jax.numpy as jnp, numpy as np
import xlakit
def solve(M, y):
    A = M @ M.T + 1e-2 * jnp.eye(M.shape[0])
    L = jnp.linalg.cholesky(A)
    x = jax.scipy.linalg.solve_triangular(L, y, lower=True)
    q, r = jnp.linalg.qr(M)
    return {"x": x, "inv": jnp.trace(jnp.linalg.inv(A)), "eig": jnp.linalg.eigh(A)[0],
            "sv": jnp.linalg.svd(M, compute_uv=False), "r": jnp.abs(jnp.diag(r)),
            "det": jnp.linalg.slogdet(A)[1]}
M = np.random.default_rng(0).normal(size=(12, 12)).astype(np.float32)
y = np.random.default_rng(1).normal(size=(12,)).astype(np.float32)
def digest(out):
    return {k: np.asarray(v).tobytes().hex() for k, v in sorted(out.items())}
cache = xlakit.ExecutableCache(os.environ["CACHE"])
if sys.argv[1] == "store":
    compiled, d = cache.compile(jax.jit(solve), M, y)
    print("RESULT " + json.dumps({"key": d.key, "kind": d.kind, "digest": digest(compiled(M, y))}))
else:
    loaded = cache.load(os.environ["KEY"])          # nothing in this process has lowered a linalg op
    first = digest(loaded(M, y))
    xlakit.enable_cache(os.environ["CACHE"])        # transparent mode: a hit is loaded without lowering too
    again = digest(jax.jit(solve)(M, y))
    kinds = [e.kind for e in xlakit.events.log().events() if e.name and "solve" in e.name]
    print("RESULT " + json.dumps({"digest": first, "transparent": again, "kinds": kinds}))
'''


def _run(code: str, *args: str, env: dict[str, str]) -> dict:
    p = fresh_process.run([sys.executable, "-c", code, *args], env=worker_env(env), capture_output=True, text=True,
                          timeout=300)  # roomy: a loaded machine
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"process ended with {p.returncode} (negative: killed by a signal)\n" \
                                        f"{p.stderr[-2000:]}"
    return json.loads(lines[-1][7:])


def test_linalg_program_loaded_in_a_fresh_process_runs_with_the_stored_answer(tmp_path):
    env = {"CACHE": str(tmp_path / "cache")}
    stored = _run(LINALG, "store", env=env)
    assert stored["kind"] == "store"
    loaded = _run(LINALG, "load", env=dict(env, KEY=stored["key"]))
    assert loaded["digest"] == stored["digest"]           # bit for bit, through ExecutableCache.load
    assert loaded["transparent"] == stored["digest"]      # and through a transparent-mode hit
    assert loaded["kinds"][-1] == "hit"


BUNDLE = r'''
import json, os, sys
import jax, jax.numpy as jnp, numpy as np
import xlakit
params = {"X": np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)}
def predict(params, xq):
    K = params["X"] @ params["X"].T + 0.5 * jnp.eye(16)
    L = jnp.linalg.cholesky(K)
    s = jnp.linalg.svd(K, compute_uv=False)
    v = jax.scipy.linalg.solve_triangular(L, params["X"] @ xq.T, lower=True)
    return (v ** 2).sum(0) * s[0] / s[-1]
xq = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
if sys.argv[1] == "export":
    xlakit.export_bundle(predict, params, xq, os.environ["BUNDLE"], batch_sizes=(4,), rows_independent=True)
    b = xlakit.load_bundle(os.environ["BUNDLE"], background=False, progress=False)   # compiles, stores
    print("RESULT " + json.dumps({"out": np.asarray(b(xq)).tolist(), "ref": np.asarray(predict(params, xq)).tolist()}))
else:
    b = xlakit.load_bundle(os.environ["BUNDLE"], background=False, progress=False)   # the warm path
    print("RESULT " + json.dumps({"out": np.asarray(b(xq)).tolist(), "status": [r.status for r in b.report().modules]
                                  if hasattr(b.report(), "modules") else None}))
'''


def test_bundle_with_linalg_warm_loaded_in_a_fresh_process_runs(tmp_path):
    env = {"BUNDLE": str(tmp_path / "bundle"), "XLAKIT_CACHE_DIR": str(tmp_path / "cache")}
    first = _run(BUNDLE, "export", env=env)
    assert first["out"] == pytest.approx(first["ref"], rel=1e-5)
    second = _run(BUNDLE, "load", env=env)
    assert second["out"] == first["out"]


# -- the policy, in process (cheap) ------------------------------------------------------------------------

def test_targets_come_from_the_optimized_hlo_and_lapack_is_named():
    import jax
    import jax.numpy as jnp

    from xlakit._jax import kernels

    compiled = jax.jit(lambda a: (jnp.linalg.cholesky(a @ a.T + jnp.eye(3)), jax.lax.top_k(a, 2)[0])).lower(
        jnp.ones((3, 3))).compile()
    targets = kernels.custom_call_targets(compiled._executable.xla_executable)
    assert "lapack_spotrf_ffi" in targets
    assert kernels.custom_call_targets(jax.jit(jnp.sin).lower(jnp.ones(3)).compile()._executable.xla_executable) \
        == frozenset()


def test_an_unknown_kernel_or_a_python_callback_is_refused_not_run():
    from xlakit._jax import kernels

    kernels.prepare({"lapack_dpotrf_ffi", "__onednn$matmul", "TopK"}, "cpu")   # known families: ready
    with pytest.raises(kernels.KernelsNotReady, match="no_such_kernel_ffi"):
        kernels.prepare({"no_such_kernel_ffi", "lapack_spotrf_ffi"}, "cpu")
    with pytest.raises(kernels.KernelsNotReady, match="calls back into Python"):
        kernels.prepare({"xla_ffi_python_cpu_callback"}, "cpu")
    kernels.prepare({"xla_ffi_python_cpu_callback"}, "cpu", callbacks=True)  # the path rebinds callbacks


def test_cpu_sparse_kernels_are_registered_the_way_jax_experimental_sparse_does():
    from jax._src.lib import xla_client

    from xlakit._jax import kernels

    kernels.prepare({"cpu_csr_sparse_dense_ffi"}, "cpu")
    assert "cpu_csr_sparse_dense_ffi" in xla_client.custom_call_targets("cpu")
    import jax.experimental.sparse  # noqa: F401 - registering again on JAX's own import must still work


def test_a_kernel_that_cannot_be_made_ready_is_a_miss_that_keeps_the_entry(tmp_path, monkeypatch):
    import jax
    import numpy as np

    import xlakit
    from xlakit._jax import kernels

    cache = xlakit.ExecutableCache(tmp_path / "cache")
    _, stored = cache.compile(jax.jit(lambda x: x * 3.0 + 1.0), np.ones(5, np.float32))
    monkeypatch.setattr(kernels, "serialized_targets", lambda serialized: frozenset({"vendor_kernel_ffi"}))
    with pytest.raises(KeyError, match="vendor_kernel_ffi"):
        cache.load(stored.key)
    events = [e for e in cache.log.events() if e.key == stored.key and e.kind == "miss"]
    assert events and "vendor_kernel_ffi" in events[-1].reason
    monkeypatch.undo()
    assert np.asarray(cache.load(stored.key)(np.ones(5, np.float32))).tolist() == [4.0] * 5  # entry kept


def test_targets_read_from_the_serialized_executable_equal_xlas_own():
    import jax
    import jax.numpy as jnp

    from xlakit._jax import kernels

    for fn in (lambda a: (jnp.linalg.svd(a), jax.lax.top_k(a, 2)[0]), lambda a: jnp.sin(a) @ a):
        executable = jax.jit(fn).lower(jnp.ones((3, 3))).compile()._executable.xla_executable
        assert kernels.serialized_targets(executable.serialize()) == kernels.custom_call_targets(executable)
    assert kernels.serialized_targets(b"\x0a\x03abc") is None   # not the known layout: XLA is asked instead
