"""The first-execution cost of an XLA:CPU program: what its first run does that its second does not.

Program: the demo's scanned 4-layer transformer (``xlakit.demo.workloads._Transformer``) inference at batch 1
(64 tokens), one executable, CPU backend. Every scenario is a fresh process; each prints the wall time
(``time.perf_counter``) and the CPU time of the whole process, all threads (``time.process_time``), of each
run up to ``jax.block_until_ready``. Rounds are interleaved (one process of each scenario per round) and
medians printed. CPU time is the steadier number on a shared machine: wall time includes waiting for cores.

Scenarios:

* ``compiled``:      ``jax.jit(infer).lower(...).compile()``, then run 1, 2, 3.
* ``deserialized``:  the executable loaded from bytes (xlakit's ``load_compiled``), then run 1, 2, 3.
* ``ynn off``:       as ``compiled`` with ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` (no YNNPACK
                     fusions; dots go to XLA's own emitters/Eigen).
* ``eigen 1 thread``: as ``compiled`` with ``--xla_cpu_multi_thread_eigen=false``.
* ``other batch first``: the batch-2 program of the same model runs first (its run 1), then batch 1's run 1:
                     is the cost paid once per process or once per program?
* ``same program twice``: a second executable of the same program, compiled separately, run after the first
                     ran: its own run 1.
* ``raw executable``: run 1 through the ``LoadedExecutable`` itself (``execute_sharded``), skipping
                     ``jax.stages.Compiled``'s first-call Python (it builds the C++ dispatch path on call 1).
* ``warm-up on zeros``: ``xlakit._jax.warmup.warm_up`` (one run on zero inputs of the program's avals), then
                     run 1 on the real input: does a run on zeros pay the cost for the user?

What the first execution does (findings)
---------------------------------------
Reference machine: 2-core AMD EPYC (AVX-512), jaxlib 0.10.2 CPU, shared with other jobs (load average 8-13),
so wall times are noisy and the CPU column is the one to read. Medians of 5 interleaved rounds (2026-11-30):

  scenario                              run 1 wall / CPU ms                      run 2 CPU ms
  compiled                              29.8 / 10.3                              1.8 (run 1: 5.7x)
  deserialized (load_compiled)          19.0 / 10.5                              1.9 (5.5x)
  YNNPACK fusions off                   80.7 / 23.8                              1.9 (12.5x)
  Eigen single-threaded                 37.5 / 10.6                              1.8 (5.8x)
  batch 2 first, then batch 1           b2: 27.5 / 11.9, then b1: 16.7 / 8.8     2.0
  2nd executable of the same program    1.5 / 1.5 (after the 1st one ran)        1.5
  raw LoadedExecutable.execute_sharded  33.0 / 10.4, then Compiled run 1: 2.5    1.5
  warm-up on zeros (xlakit warm_up)     48.0 / 13.6, then run 1: 2.0 / 2.0       1.6

1. It is native kernel preparation, not Python and not the thread pool. ``perf record`` of run 1 vs run 2
   (compiled, default flags; 281 vs 63 samples of 50 us): in run 1, 54 % of the CPU samples are in
   ``slinky::`` (YNNPACK's pipeline builder: ``slinky::simplify``, ``pipeline_builder::make_loop``,
   ``bounds_of``...), i.e. YNNPACK building the execution pipeline of each ``__ynn_fusion`` the first time it
   runs; 21 % malloc/free and first-touch page faults; 7 % the YNNPACK kernels themselves; Python 5 %. Run 2
   has no slinky (1.6 %) and is kernels + Eigen thread-pool work. With YNNPACK fusions off
   (``--xla_cpu_experimental_ynn_fusion_type=``) the first run costs *more* (23.8 ms CPU): its dots go to
   oneDNN, which JIT-generates its sgemm kernels with Xbyak on first use (over 50 % of run-1 samples in
   ``Xbyak::CodeGenerator`` and ``xbyak_gemm_t::generate``). Eigen's thread pool is not it: single-threaded
   Eigen pays the same 10.6 ms. ``--xla_cpu_use_thunk_runtime=false`` only logs "no longer supported" in
   jaxlib 0.10: there is no legacy runtime to compare with.
2. The prepared state is cached process-wide by what is computed, not per executable: a second executable
   of the same program, compiled separately, pays nothing on its first run (1.5 ms = a second run). Another
   batch size of the same model pays most of it again (8.8 ms after batch 2 ran: other shapes, other
   pipelines); about 1.5 ms of the first program's cost is process-wide (first allocations, pages).
3. JAX's own first-call work is small: ``jax.stages.Compiled`` builds its C++ dispatch path on call 1
   (~1 ms: run 1 through ``Compiled`` after a raw run costs 2.5 ms vs 1.5 ms).
4. A run on zeros pays it: after ``warm_up`` (one run on zero-filled inputs of the program's avals, 13.6 ms
   CPU), the real input's first run costs 2.0 ms CPU, a second run's cost. None of the preparation depends on
   input values. So an opt-in ``load_bundle(..., warmup=True)`` that runs each loaded program once on zeros
   in the background moves ~8-12 ms CPU per distinct program (transformer, batch 1 here; 20-60 ms of wall on
   this busy machine) off the user's first call, at the price of that CPU spent whether or not the program
   is ever called. It is safe for donated arguments (the zeros are fresh) and for fixed-trip-count loops; a
   program whose ``while_loop`` depends on input values could run longer on zeros (hence opt-in).

Usage: python benchmarks/first_execution.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIOS = {
    # name: (child mode, extra XLA_FLAGS)
    "compiled": ("compiled", ""),
    "deserialized": ("deserialized", ""),
    "ynn off": ("compiled", "--xla_cpu_experimental_ynn_fusion_type="),
    "eigen 1 thread": ("compiled", "--xla_cpu_multi_thread_eigen=false"),
    "other batch first": ("other_first", ""),
    "same program twice": ("twice", ""),
    "raw executable": ("raw", ""),
    "warm-up on zeros": ("warmup", ""),
}


# -- inside the child processes -------------------------------------------------------------------------------

def _program(batch: int):
    """(infer, params, x): the demo transformer's inference at ``batch``, params and input on the device."""
    import jax
    import numpy as np
    from flax import nnx

    from xlakit.demo.workloads import _init, _Transformer

    graphdef, params = _init(_Transformer, seed=0)

    def infer(params, x):
        return nnx.merge(graphdef, params)(x)

    x = jax.device_put(np.random.default_rng(batch).integers(0, 512, size=(batch, 64), dtype=np.int32))
    jax.block_until_ready((params, x))
    return infer, params, x


def _timed(fn) -> tuple[float, float]:
    """(wall ms, process CPU ms) of ``fn()`` up to block_until_ready."""
    import jax

    w, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return (time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3


def child(mode: str, payload_file: str) -> dict:
    import jax

    infer, params, x = _program(1)
    out: dict[str, tuple[float, float]] = {}
    if mode == "deserialized":
        from xlakit._jax import serialize

        data = json.loads(Path(payload_file).read_text())
        c = serialize.load_compiled(bytes.fromhex(data["payload"]), serialize.Placement.from_dict(data["placement"]),
                                    jax.devices()[:1])
    else:
        c = jax.jit(infer).lower(params, x).compile()
    if mode == "other_first":
        _, _, x2 = _program(2)
        c2 = jax.jit(infer).lower(params, x2).compile()
        out["batch 2: run 1"] = _timed(lambda: c2(params, x2))
    if mode == "raw":
        ex = c._executable.xla_extension_executable()
        flat = jax.tree_util.tree_leaves((params, x))
        out["raw: run 1"] = _timed(lambda: ex.execute_sharded(flat).disassemble_into_single_device_arrays())
        out["raw: run 2"] = _timed(lambda: ex.execute_sharded(flat).disassemble_into_single_device_arrays())
    if mode == "warmup":
        from xlakit._jax.warmup import warm_up

        w, cpu = time.perf_counter(), time.process_time()
        result = warm_up(c)
        assert result.ok, result.reason
        out["warm-up on zeros"] = ((time.perf_counter() - w) * 1e3, (time.process_time() - cpu) * 1e3)
    for i in (1, 2, 3):
        out[f"run {i}"] = _timed(lambda: c(params, x))
    if mode == "twice":
        c2 = jax.jit(infer).lower(params, x).compile()  # a second executable of the same program
        out["2nd executable: run 1"] = _timed(lambda: c2(params, x))
        out["2nd executable: run 2"] = _timed(lambda: c2(params, x))
    return out


def child_serialize(payload_file: str) -> dict:
    import jax

    from xlakit._jax import serialize

    infer, params, x = _program(1)
    payload, placement = serialize.serialize_compiled(jax.jit(infer).lower(params, x).compile())  # never run
    Path(payload_file).write_text(json.dumps({"payload": payload.hex(), "placement": placement.to_dict()}))
    return {}


# -- the parent -----------------------------------------------------------------------------------------------

def run(args: list[str], flags: str = "") -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    if flags:
        env["XLA_FLAGS"] = flags
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} {flags} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        mode, *rest = args.child
        result = child_serialize(*rest) if mode == "serialize" else child(mode, *rest)
        print(json.dumps(result), flush=True)
        return 0

    from rich.console import Console
    from rich.table import Table

    scenarios = {k: v for k, v in SCENARIOS.items() if not args.only or k in args.only}
    with tempfile.TemporaryDirectory(prefix="xlakit-first-exec-") as tmp:
        payload_file = str(Path(tmp) / "payload.json")
        run(["serialize", payload_file])
        runs: dict[str, list[dict]] = {k: [] for k in scenarios}
        print(f"measuring: {args.rounds} interleaved rounds x {len(scenarios)} fresh processes ...", flush=True)
        for _ in range(args.rounds):
            for name, (mode, flags) in scenarios.items():
                runs[name].append(run([mode, payload_file], flags))

    table = Table(title=f"First executions, demo transformer inference batch 1, fresh processes, median of "
                        f"{args.rounds} (wall ms / process CPU ms, all threads)", title_justify="left")
    for col in ("scenario", "step", "wall ms", "CPU ms", "wall / run 2", "CPU / run 2"):
        table.add_column(col, justify="left" if col in ("scenario", "step") else "right")
    summary = {}
    for name, rs in runs.items():
        steps = list(rs[0])
        med = {s: (statistics.median(r[s][0] for r in rs), statistics.median(r[s][1] for r in rs)) for s in steps}
        base = med["run 2"]
        summary[name] = med
        for s in steps:
            w, c = med[s]
            table.add_row(name if s == steps[0] else "", s, f"{w:.1f}", f"{c:.1f}", f"{w / base[0]:.1f}x",
                          f"{c / base[1]:.1f}x")
    Console(width=130).print(table)
    print(json.dumps({"medians_ms": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
