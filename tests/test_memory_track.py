"""track(): device bytes before/after, the peak inside, and the compiled memory of programs compiled inside —
from xlakit's cache entries when the cache answers compiles (in a subprocess, so this process's JAX stays
untouched), from jax.monitoring (name and seconds only) when it does not, and from Tracker.add()."""

from __future__ import annotations

import gc
import json
import sys

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import worker_env

from xlakit.memory import track


def test_without_the_cache_compiles_are_seen_by_name_only_and_device_bytes_are_exact():
    gc.collect()
    a = np.ones((8, 4), np.float32)
    with track() as t:
        def triple_then_sum(x):
            return (x * 3).sum()

        jax.jit(triple_then_sum)(a)  # compiled inside
        kept = jnp.zeros((100, 10), jnp.float32)  # 4000 B alive after the block
        t.add(jax.jit(lambda x, y: x @ y.T), a, a)
    report = t.report()
    seen = report[report["name"] == "jit_triple_then_sum"]
    assert len(seen) == 1 and seen.iloc[0]["event"] == "compile" and seen.iloc[0]["compile_s"] > 0
    assert seen["argument_bytes"].isna().all() and "jax.monitoring only" in seen.iloc[0]["note"]
    added = report[report["event"] == "added"].iloc[0]
    assert (added["argument_bytes"], added["output_bytes"]) == (256, 256)
    devices = t.devices()
    row = devices.iloc[0]
    assert row["change_bytes"] == 4000 and row["reset_method"] == "clear_refs" and row["peak_exact"]
    assert row["peak_inside_bytes"] > 0
    assert "program(s)" in repr(t) and "Tracker" in t._repr_html_()
    del kept


def test_reading_before_the_block_ends_is_an_error():
    t = track()
    with pytest.raises(RuntimeError, match="not ended"):
        t.devices()
    assert repr(t) == "Tracker(not started)"


WITH_CACHE = r"""
import json, sys, numpy as np, jax
import xlakit, xlakit.memory as xm
from xlakit.store import LocalStore
cache_dir = sys.argv[1]
xlakit.enable_cache(cache_dir)
a = np.ones((8, 4), np.float32)
def matmul(x, y):
    return x @ y.T
with xm.track() as first:
    jax.jit(matmul)(a, a)
jax.clear_caches()
with xm.track() as second:
    jax.jit(matmul)(a, a)
def rows(t):
    r = t.report()
    r = r[r["name"] == "jit_matmul"]
    return [{"event": e, "argument": int(x), "output": int(y), "peak": int(p)}
            for e, x, y, p in zip(r["event"], r["argument_bytes"], r["output_bytes"], r["peak_bytes"])]
entries = [xm.compiled_memory(e) for e in LocalStore(cache_dir).entries() if e.name == "jit_matmul"]
print(json.dumps({"first": rows(first), "second": rows(second),
                  "entry": [(m.argument_bytes, m.output_bytes, m.platform, m.source.startswith("cache entry"))
                            for m in entries]}))
"""


def test_with_xlakit_cache_compiles_and_hits_carry_their_compiled_memory(tmp_path):
    proc = fresh_process.run([sys.executable, "-c", WITH_CACHE, str(tmp_path / "cache")], capture_output=True,
                             text=True, env=worker_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] == [{"event": "compile", "argument": 256, "output": 256, "peak": 512}]
    assert out["second"] == [{"event": "hit", "argument": 256, "output": 256, "peak": 512}]
    assert out["entry"] == [[256, 256, "cpu", True]]
