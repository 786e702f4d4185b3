"""probe: a program with a known 400 MB temporary shows >= 400 MB of scratch, a tiny one does not — in this
process (VmHWM after a clear_refs reset) and in a fresh process that loads the serialized executable."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.memory import ProbeResult, compiled_memory, probe

N = 10_500  # a 441 MB temporary: RSS accounting can miss a few pages malloc already held, so keep margin
MB = 1_000_000


@jax.jit
def outer_dot(a, b):
    return (jnp.outer(a, a) @ b).sum()  # materializes f32[10500,10500]: a 441 MB temporary (>= 400 MB)


@jax.jit
def tiny(a):
    return a + 1


@pytest.fixture(scope="module")
def vectors():
    return jnp.ones(N, jnp.float32), jnp.ones(N, jnp.float32)


def test_the_known_temporary_is_at_least_400_mb(vectors):
    assert compiled_memory(outer_dot, *vectors).temp_bytes == 441_042_000


def test_in_process_probe_sees_the_400_mb_temporary(vectors):
    r = probe(outer_dot, *vectors)
    assert isinstance(r, ProbeResult)
    assert r.method == "in-process clear_refs" and r.platform == "cpu"
    assert r.scratch_bytes >= 400 * MB, r
    assert abs(r.outside_xla_bytes) <= r.tolerance_bytes, r  # agrees with XLA's temporaries + outputs
    # the matrix product runs in a library (YNNPACK or Eigen) whose own buffers the heap of this process may
    # serve unseen, so agreement alone is not called exact here
    assert r.runtime_calls and not r.exact and "isolate=True" in r.reason, r
    assert r.scratch_bytes == r.peak_bytes - r.baseline_bytes
    assert r.scratch_bytes < 600 * MB  # nothing else of that size happened


def test_in_process_probe_of_a_tiny_program_shows_no_such_scratch():
    r = probe(tiny, jnp.ones(16))
    assert 0 <= r.scratch_bytes < 64 * 2**20, r


def test_isolated_probe_loads_the_executable_in_a_fresh_process(vectors):
    compiled = outer_dot.lower(*vectors).compile()
    big = probe(compiled, isolate=True)  # no arguments: the child creates zeros of the recorded shapes
    assert big.method == "subprocess clear_refs" and big.exact
    assert big.scratch_bytes >= 400 * MB, big
    assert any("not compiled" in n for n in big.notes)
    small = probe(tiny, jnp.ones(16), isolate=True)
    assert 0 <= small.scratch_bytes < 64 * 2**20, small


def test_donated_arguments_survive_the_probe():
    # the warm-up run and the measured run each consume a donated copy, in this process and in the child
    f = jax.jit(lambda a: a * 2, donate_argnums=0)
    x = jnp.arange(8.0)
    r = probe(f, x)
    assert r.first_run_scratch_bytes is not None and r.exact, r
    assert probe(f, x, isolate=True).method == "subprocess clear_refs"
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(x), np.arange(8.0))


def test_programs_that_cannot_be_isolated_raise_clearly():
    def noisy(x):
        jax.debug.print("x={}", x)
        return x * 2

    with pytest.raises(ValueError, match="cannot be serialized|isolate=False"):
        probe(jax.jit(noisy), jnp.ones(3), isolate=True)
    with pytest.raises(TypeError, match="probe"):
        probe(42)


@pytest.mark.parametrize("timeout_s", [float("nan"), float("inf"), 10**400, 0, -1])
def test_an_isolated_probe_refuses_a_timeout_that_is_not_seconds_by_name(timeout_s):
    """Fault: NaN, inf and 400 digits failed inside subprocess ("cannot convert float NaN to integer"); 0 and -1
    started a child and then said it "ran past -1 s"."""
    with pytest.raises(ValueError, match="timeout_s must be a finite number of seconds > 0"):
        probe(jax.jit(lambda x: x * 2), jnp.ones(3), isolate=True, timeout_s=timeout_s)


def test_display_forms():
    r = probe(tiny, jnp.ones(4))
    assert "scratch" in repr(r) and "Probe" in r._repr_html_()
    assert r.to_frame().loc[0, "method"] == r.method


def test_a_lowered_program_is_probed_with_zero_filled_arguments():
    lowered = tiny.lower(jax.ShapeDtypeStruct((1024,), jnp.float32))
    r = probe(lowered)
    assert r.exact and r.xla_bytes == 4096 and r.xla_temp_bytes == 0, r  # the f32[1024] output
    assert abs(r.scratch_bytes - r.xla_bytes) <= r.tolerance_bytes == 2 * 2**20


def test_output_printed_by_anything_else_in_the_probe_child_is_not_taken_for_its_result(tmp_path, monkeypatch):
    """The isolated probe's result once was the child's last stdout line: a library printing at exit turned the
    probe into a bare JSONDecodeError. The result now travels in a file of its own; a child that writes none
    is a RuntimeError naming the protocol."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "if any('_probe_child' in a for a in sys.orig_argv):\n"
        "    print('hello from a library')\n"
        "    atexit.register(lambda: print('bye from a library'))\n"
        "    if os.environ.get('PROBE_CHILD_QUITS'):\n"
        "        os._exit(0)\n")
    monkeypatch.setenv("PYTHONPATH", f"{site}:{os.environ.get('PYTHONPATH', '')}")
    f = jax.jit(lambda v: v * 2.0)
    assert probe(f, jnp.ones(1024), isolate=True).peak_bytes > 0
    monkeypatch.setenv("PROBE_CHILD_QUITS", "1")
    with pytest.raises(RuntimeError, match="wrote no readable result.*_probe_child protocol"):
        probe(f, jnp.ones(1024), isolate=True)


def test_an_isolated_probe_of_a_linalg_program_does_not_crash_its_child():
    """The probe's child loads the executable without lowering anything, so jaxlib's CPU LAPACK kernel table
    was still empty there: a cholesky program died with SIGSEGV on its first run."""
    m = jnp.eye(32) * 2.0
    result = probe(jax.jit(lambda a: jnp.linalg.cholesky(a) @ jnp.linalg.inv(a)), m, isolate=True)
    assert result.method.startswith("subprocess") and result.peak_bytes > 0


def test_an_nnx_jit_step_is_probed_with_the_graph_nodes_it_takes():
    """``probe(nnx.jit(step), model, optimizer, x)`` raised a pytree structure error (the Module was matched
    against the NodeStates the JAX program takes); now its arguments are converted as flax converts them, the
    donated model and optimizer stay usable, and flax's own Compiled is probed too. Isolated, its argument
    tree (holding optax's closures) could not be pickled for the child: a flat tree of the same leaves is sent."""
    optax = pytest.importorskip("optax")
    from flax import nnx

    model = nnx.Linear(64, 64, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    def train_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        optimizer.update(model, grads)
        return loss

    step = nnx.jit(train_step, donate_argnums=(0, 1))
    x = jnp.ones((32, 64))
    r = probe(step, model, optimizer, x)
    assert r.scratch_bytes is not None and r.xla_bytes is not None and r.xla_bytes > 0, r
    assert r.name == "jit_train_step"
    assert np.isfinite(float(step(model, optimizer, x)))  # the donated state was copied, not consumed
    assert probe(step.lower(model, optimizer, x).compile()).xla_bytes == r.xla_bytes
    isolated = probe(step, model, optimizer, x, isolate=True)
    assert isolated.method == "subprocess clear_refs" and isolated.xla_bytes == r.xla_bytes, isolated
