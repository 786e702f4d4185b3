"""The partition holds only what changes generated code or loadability, so processes that expose different numbers
of devices share their programs.

Fault proved: the partition hashed the process's device count and ``--xla_force_host_platform_device_count``, so
a one-device program stored by a process with 4 host devices (a notebook that also tests sharding) missed in a
process with the default single device, although program, placement and code were the same. A program that
needs more devices than the loading process has is still refused before XLA sees it (XLA would abort).
"""

from __future__ import annotations

import json
import sys

import fresh_process
import numpy as np
from conftest import worker_env

PROGRAMS = r'''
import json, os, sys
import jax, jax.numpy as jnp, numpy as np
import xlakit
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
cache = xlakit.ExecutableCache(os.environ["CACHE"])
def step(w, x):
    return jnp.tanh(x @ w).sum(0)
w = np.arange(16.0, dtype=np.float32).reshape(4, 4) / 16
x = np.ones((8, 4), np.float32)
out = {"devices": jax.device_count()}
if sys.argv[1] == "store":
    _, one = cache.compile(jax.jit(step), w, x)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))
    _, four = cache.compile(jax.jit(step), w, xs)
    out.update(one=one.kind, four=four.kind, four_key=four.key, value=np.asarray(jax.jit(step)(w, x)).tolist())
else:
    xlakit.enable_cache(os.environ["CACHE"])
    value = np.asarray(jax.jit(step)(w, x)).tolist()
    out["kinds"] = [e.kind for e in xlakit.events.log().events() if e.name and "step" in e.name
                    and e.kind in ("hit", "miss")]
    out["value"] = value
    try:
        cache.load(os.environ["FOUR_KEY"])
        out["four"] = "loaded"
    except xlakit.DevicePlacementError as e:
        out["four"] = "refused: " + str(e).splitlines()[0]
print("RESULT " + json.dumps(out))
'''


def _run(mode: str, devices: int, env: dict[str, str]) -> dict:
    extra = dict(env)
    if devices > 1:
        extra["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    p = fresh_process.run([sys.executable, "-c", PROGRAMS, mode], env=worker_env(extra), capture_output=True,
                          text=True, timeout=180)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"rc={p.returncode}\n{p.stderr[-3000:]}"
    return json.loads(lines[-1][7:])


def test_one_device_program_stored_by_a_4_device_process_hits_in_a_1_device_process(tmp_path):
    env = {"CACHE": str(tmp_path / "cache")}
    stored = _run("store", 4, env)
    assert (stored["devices"], stored["one"], stored["four"]) == (4, "store", "store")
    loaded = _run("load", 1, dict(env, FOUR_KEY=stored["four_key"]))
    assert loaded["devices"] == 1
    assert loaded["kinds"] == ["hit"]                          # the same partition, the same key
    np.testing.assert_array_equal(loaded["value"], stored["value"])
    # The 4-device entry is now visible here too, and the device check refuses it before XLA.
    assert loaded["four"].startswith("refused: ") and "do not exist on this cpu backend" in loaded["four"]
