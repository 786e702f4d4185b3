"""What XLA's dump (``xla_dump_to`` + ``xla_dump_hlo_as_proto``, the buffer assignment's only source where
``memory_analysis()`` carries none) adds to a compile, measured fairly: one process, one ``Lowered`` per program,
plain and dump compiles taking turns (``--repeats`` each, every compile bypassing every cache through
:func:`xlakit._jax.fresh.compile_fresh`), medians side by side in wall and CPU seconds; and which files the dump
wrote (count, bytes, the largest), since every file is compile time.

Programs: ``narrow N`` (benchmarks/memory_attribution.py's N-layer width-32 MLP train step with adam: many small
instructions) and ``wide`` (benchmarks/capture_reload.py's 24-layer width-1024 step).

Run: ``PYTHONPATH=. python benchmarks/dump_cost.py [--layers 150,500] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def tanh_step(ws, x):
    """One SGD step of a plain ``tanh`` MLP (``ws``: square weight matrices; ``x``: a batch): ``(new ws, loss)``.
    Also the train step of ``benchmarks/capture_reload.py``."""
    import jax
    import jax.numpy as jnp

    def loss(ws):
        h = x
        for w in ws:
            h = jnp.tanh(h @ w)
        return jnp.mean(h ** 2)
    value, g = jax.value_and_grad(loss)(ws)
    return [w - 0.01 * gw for w, gw in zip(ws, g, strict=True)], value


def _wide():
    import jax
    import jax.numpy as jnp

    layers, width = 24, 1024
    ws = [jax.ShapeDtypeStruct((width, width), jnp.float32) for _ in range(layers)]
    return jax.jit(tanh_step), (ws, jax.ShapeDtypeStruct((256, width), jnp.float32))


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(name: str, fn, args, repeats: int) -> None:
    from xlakit._jax.fresh import compile_fresh

    lowered = fn.lower(*args)
    plain, dumped, files = [], [], []
    for i in range(repeats):
        for kind in (("plain", "dump") if i % 2 == 0 else ("dump", "plain")):
            if kind == "plain":
                plain.append(_timed(lambda: compile_fresh(lowered)))
                continue
            folder = tempfile.mkdtemp(prefix="xlakit-dump-cost-")
            options = {"xla_dump_to": folder, "xla_dump_hlo_as_proto": True}
            try:
                dumped.append(_timed(lambda o=options: compile_fresh(lowered, compiler_options=o)))
                files = sorted(((p.stat().st_size, p.name) for p in Path(folder).rglob("*") if p.is_file()),
                               reverse=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    pw, pc = (statistics.median(t[i] for t in plain) for i in (0, 1))
    dw, dc = (statistics.median(t[i] for t in dumped) for i in (0, 1))
    print(f"{name:<12} plain {pw:7.3f} s wall {pc:7.3f} s CPU | dump {dw:7.3f} s wall {dc:7.3f} s CPU | "
          f"dump adds {100 * (dw / pw - 1):+6.1f} % wall {100 * (dc / pc - 1):+6.1f} % CPU "
          f"(medians of {repeats}; all wall: plain {[round(t[0], 2) for t in plain]}, dump "
          f"{[round(t[0], 2) for t in dumped]})", flush=True)
    total = sum(s for s, _ in files)
    print(f"{'':<12} the dump wrote {len(files)} files, {total:,} B; largest: "
          + ", ".join(f"{n} ({s:,} B)" for s, n in files[:5]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="150,500")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-wide", action="store_true")
    ns = ap.parse_args()
    import jax
    from memory_attribution import narrow_step

    print(f"jax {jax.__version__}, backend {jax.default_backend()} ({jax.devices()[0].device_kind}), "
          f"{os.cpu_count()} CPUs")
    programs = [(f"narrow {n}", *narrow_step(int(n))) for n in ns.layers.split(",") if n.strip()]
    if not ns.no_wide:
        programs.append(("wide", *_wide()))
    for name, fn, args in programs:
        measure(name, fn, args, ns.repeats)


if __name__ == "__main__":
    main()
