"""JAX's own persistent-cache signals stay intact while xlakit's store answers JAX's cache hooks.

xlakit replaces the two JAX functions where JAX emits some of them; these faults were seen:
- ``/jax/compilation_cache/cache_misses`` (JAX records it once per entry written) never fired under xlakit;
- with ``jax_explain_cache_misses``, the WARNING "Not writing persistent cache entry ..." (and the miss warning)
  no longer appeared;
- ``compile_time_saved_sec`` on a hit was up to 1 s too high, because the stored compile time handed back to
  JAX was rounded up instead of truncated as JAX stores it.

One JAX subprocess proves all three, against JAX's own semantics.
"""

from __future__ import annotations

import json

from conftest import run_python

CHILD = """
import collections, json, logging, sys
import xlakit
xlakit.enable_cache({cache!r}, min_compile_time_s=0.0)
import jax, jax.numpy as jnp
from jax import monitoring
counts = collections.Counter()
secs = collections.defaultdict(list)
monitoring.register_event_listener(lambda name, **kw: counts.update([name.rsplit("/", 1)[-1]]))
monitoring.register_event_duration_secs_listener(lambda name, s, **kw: secs[name.rsplit("/", 1)[-1]].append(s))
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()[:80]))
logging.getLogger("jax").addHandler(Keep(level=logging.WARNING))

def small(v):
    return jnp.tanh(v) * 0.5 + v
x = jnp.arange(8.0)
counts.clear(); secs.clear()
jax.jit(small)(x).block_until_ready()          # compiled and written
cold = dict(counts); compile_s = sum(secs["backend_compile_duration"])
jax.clear_caches(); counts.clear(); secs.clear()
jax.jit(small)(x).block_until_ready()          # served by xlakit's store
warm = dict(counts); saved = list(secs["compile_time_saved_sec"])

jax.config.update("jax_explain_cache_misses", True)
records.clear(); counts.clear()
def with_callback(v):
    return v + jax.pure_callback(lambda a: jnp.array(1, jnp.int32), jax.ShapeDtypeStruct((), jnp.int32), v)
jax.jit(with_callback)(1)                      # compiled, not written (host callbacks)
print(json.dumps({{"cold": cold, "warm": warm, "compile_s": compile_s, "saved": saved,
                  "callback_counts": dict(counts), "warnings": records}}))
"""


def test_jax_cache_signals_under_transparent_mode(tmp_path):
    out = json.loads(run_python(CHILD.format(cache=str(tmp_path / "cache"))))
    # One program written: JAX's write counter fires once, as with JAX's own cache; a hit writes nothing.
    assert out["cold"].get("cache_misses") == 1, out["cold"]
    assert out["warm"].get("cache_hits") == 1 and "cache_misses" not in out["warm"], out["warm"]
    # Seconds saved on the hit come from the truncated stored compile time: never above the real compile.
    assert len(out["saved"]) == 1 and out["saved"][0] <= out["compile_s"], out
    # A program JAX would not store is not written (no counter) and is explained at WARNING, in JAX's words.
    messages = [m for level, m in out["warnings"] if level == "WARNING"]
    written = [m for m in messages if m.startswith("Writing ")]  # other small programs JAX ran meanwhile
    assert out["callback_counts"].get("cache_misses", 0) == len(written), (out["callback_counts"], written)
    assert not any("jit_with_callback" in m for m in written), written
    assert any(m.startswith("Not writing persistent cache entry for 'jit_with_callback' because it uses host")
               for m in messages), messages
    assert any(m.startswith("PERSISTENT COMPILATION CACHE MISS for 'jit_with_callback'") for m in messages), messages


def test_stored_compile_seconds_are_truncated_like_jax():
    from xlakit._jax.cache_signals import stored_compile_s

    assert [stored_compile_s(s) for s in (0.05, 0.999, 1.0, 2.7, None, float("nan"), -1.0)] == [0, 0, 1, 2, 0, 0, 0]
