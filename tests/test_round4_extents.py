"""A program holding a value too large for XLA to describe is refused before lowering (:mod:`xlakit._jax.extents`):
XLA would abort the process there ("overflow in static extent product", found on jax 0.10.2 on CPU by
``sweep(f, make_args, [2**30])`` with rows of 2**40 floats: the kernel died), so the crashing calls run in a
subprocess, which exits 134 without the check."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from conftest import run_python

from xlakit._jax import extents


def test_values_inside_loops_and_branches_are_checked_and_symbolic_sizes_pass():
    def body(c, x):
        return c + jnp.outer(x, x).sum(), None

    def f(xs, p):
        return jax.lax.cond(p > 0, lambda: jax.lax.scan(body, 0.0, xs)[0], lambda: 0.0)

    big = jax.jit(f).trace(jax.ShapeDtypeStruct((2, 1 << 31), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
    with pytest.raises(ValueError, match=r"shape \(2147483648, 2147483648\) float32 .*2\*\*64 or more.*abort"):
        extents.check_jaxpr(big.jaxpr)
    small = jax.jit(f).trace(jax.ShapeDtypeStruct((2, 1 << 20), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
    extents.check_jaxpr(small.jaxpr)  # 4 TiB: described fine (XLA lowers f32[2**58]), so not refused
    (b,) = jax.export.symbolic_shape("b")
    extents.check_jaxpr(jax.jit(lambda x: x * 2).trace(jax.ShapeDtypeStruct((b, 8), jnp.float32)).jaxpr)


def test_no_xlakit_call_ends_the_process_on_a_value_too_large():
    code = r"""
import json, tempfile
import jax, jax.numpy as jnp, numpy as np
import xlakit
from xlakit.memory import compiled_memory, peak, sweep
from xlakit.cache import ExecutableCache

outer = jax.jit(lambda v: jnp.outer(v, v).sum())
huge = jax.ShapeDtypeStruct((1 << 31,), jnp.float32)
rows = jax.jit(lambda x: (x * 2).sum())
out = {}
cache = ExecutableCache(tempfile.mkdtemp())
calls = {
    "peak": lambda: peak(outer, huge),
    "compiled_memory": lambda: compiled_memory(outer, huge),
    "sweep": lambda: sweep(rows, lambda b: (jax.ShapeDtypeStruct((b, 1 << 40), jnp.float32),), [1 << 30]),
    "cache.compile": lambda: cache.compile(outer, huge),
    "export_bundle": lambda: xlakit.export_bundle(lambda p, x: jnp.outer(x[0], x[0]).sum() * p, np.float32(1),
                                                  np.zeros((1, 1 << 31), np.float32), tempfile.mkdtemp() + "/b"),
}
for name, call in calls.items():
    try:
        call()
        out[name] = "no error"
    except ValueError as e:
        out[name] = str(e)
cache.close()
print(json.dumps(out))
"""
    out = json.loads(run_python(code))
    assert out["sweep"].startswith("the program at batch size 1073741824 holds a value of shape "
                                   "(1073741824, 1099511627776) float32"), out["sweep"]
    for name in ("peak", "compiled_memory", "cache.compile"):
        assert "(2147483648, 2147483648) float32" in out[name] and "abort" in out[name], (name, out[name])
    assert out["export_bundle"].startswith("the bundle program 'default' at batch size 1 holds a value"), out
