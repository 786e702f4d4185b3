"""What XLA's TPU peak_memory_in_bytes counts, against the dumped assignment by memory space and the allocator."""
import json, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "benchmarks")
import memory_attribution as b
import xlakit.memory as xm
from xlakit._jax.compiler_dump import compile_with_assignment
dev = jax.devices()[0]
def stats():
    s = dev.memory_stats() or {}; return {k: s.get(k) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_reserved", "peak_bytes_reserved")}
def gather_step():
    table = jax.ShapeDtypeStruct((50000, 256), jnp.float32); idx = jax.ShapeDtypeStruct((4096,), jnp.int32)
    def loss(t, i): return (jnp.take(t, i, axis=0) ** 2).sum()
    f = jax.jit(lambda t, i: t - 0.1 * jax.grad(loss)(t, i))
    return f, (table, idx)
out = {}
for name, (fn, args) in {"narrow8": b.narrow_step(8), "narrow150": b.narrow_step(150), "gather": gather_step()}.items():
    lowered = fn.lower(*args)
    compiled, _ = compile_with_assignment(lowered)
    ma = compiled.memory_analysis()
    ba = xm.buffer_assignment(compiled)
    colors = {}
    for a in list(ba.allocations) + list(ba.on_chip):
        colors.setdefault(f"{a.color}:{a.kind}", 0); colors[f"{a.color}:{a.kind}"] += a.size
    tp = ba._trace_peak()
    p = xm.peak(compiled)
    real = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), args)
    jax.block_until_ready(real); s0 = stats()
    r = compiled(*real); jax.block_until_ready(r); s1 = stats()
    r2 = compiled(*real); jax.block_until_ready(r2); s2 = stats()
    del r, r2
    rec = {"ma": {k: getattr(ma, k) for k in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes")},
           "by_color_kind": colors, "on_chip_bytes": sum(a.size for a in ba.on_chip), "trace_peak_hbm_temp": tp,
           "heap_traces": [(i, len(ev)) for i, ev in ba.heap_traces][:6], "xlakit_peak": p.total_bytes, "peak_method": p.method[:50],
           "stats_before": s0, "after_run1": s1, "after_run2": s2}
    out[name] = rec
    print(name, json.dumps(rec), flush=True)
