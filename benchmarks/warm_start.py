"""Warm start, side by side: cold compile vs JAX's persistent cache (warm) vs xlakit transparent mode (warm).

Every measurement is the first call of each demo workload (``xlakit.demo.workloads``) in a *fresh process*,
as after a restart. One process fills each cache; then each round starts one cold process (no cache), one
warm on JAX's cache and one warm on xlakit's, interleaved so that machine noise hits all three alike.
Medians over ``--repeats`` rounds are printed with ratios.

JAX's cache is given every advantage here: ``jax_persistent_cache_min_compile_time_secs=0`` and
``min_entry_size_bytes=0`` so it stores every program (its defaults would skip the fast ones).

Usage: python benchmarks/warm_start.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def child(mode: str, cache: str) -> None:
    """One fresh process: configure the cache named by ``mode`` and time every workload's first call."""
    import jax

    if mode == "jax":
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    elif mode == "xlakit":
        import xlakit

        xlakit.enable_cache(cache)
    from xlakit.demo.workloads import run_first_call, workloads

    print(json.dumps({w.name: run_first_call(w)[0] for w in workloads()}), flush=True)


def run(mode: str, cache: Path) -> dict[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(cache)], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_runs(modes: dict[str, Path], repeats: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, cache in modes.items():
            runs[mode].append(run(mode, cache))
    return {mode: {name: statistics.median(r[name] for r in rs) for name in rs[0]} for mode, rs in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "CACHE"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0

    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory(prefix="xlakit-bench-") as tmp:
        tmp_path = Path(tmp)
        print(f"measuring: {args.repeats} interleaved rounds of fresh processes (median) ...", flush=True)
        run("jax", tmp_path / "jax")  # fill both caches
        run("xlakit", tmp_path / "xlakit")
        medians = median_runs({"none": tmp_path / "none", "jax": tmp_path / "jax", "xlakit": tmp_path / "xlakit"},
                              args.repeats)
        cold, jax_warm, xla_warm = medians["none"], medians["jax"], medians["xlakit"]

    table = Table(title="First call after a process start (seconds, median)", title_justify="left")
    for col in ("program", "cold", "JAX cache warm", "xlakit warm", "cold / xlakit", "JAX warm / xlakit"):
        table.add_column(col, justify="left" if col == "program" else "right")
    totals = [0.0, 0.0, 0.0]
    for name in cold:
        c, j, x = cold[name], jax_warm[name], xla_warm[name]
        totals = [totals[0] + c, totals[1] + j, totals[2] + x]
        table.add_row(name, f"{c:.3f}", f"{j:.3f}", f"{x:.3f}", f"{c / x:.2f}x", f"{j / x:.2f}x")
    c, j, x = totals
    table.add_row("total", f"{c:.3f}", f"{j:.3f}", f"{x:.3f}", f"{c / x:.2f}x", f"{j / x:.2f}x")
    Console(width=120).print(table)

    t = "transformer_train_step"
    checks = [
        (f"xlakit warm not slower than JAX's cache warm (total {x:.3f} s vs {j:.3f} s, 5% noise allowed)",
         x <= j * 1.05),
        (f"xlakit warm >= 3x faster than cold on {t} ({cold[t] / xla_warm[t]:.2f}x)", cold[t] / xla_warm[t] >= 3.0),
    ]
    for text, ok in checks:
        print(("PASS " if ok else "FAIL ") + text)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
