"""``xlakit demo``: a restart, measured. Real workloads run cold (empty cache) then warm, each in a fresh process.

Per program it prints the first-call seconds of both runs, the speedup, the entry's bytes on disk and the
compiled memory (arguments, outputs, temporaries from ``LoadedExecutable.get_compiled_memory_stats()``,
stored in the entry at compile time), and checks that the warm outputs are bit-identical to the cold ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["run_demo", "run_child"]

QUICK = ("cnn_train_step", "mlp_infer_b1")


def run_child(cache: Path, out: Path, names: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Run :mod:`xlakit.demo.child` in a fresh Python process; return its report per workload name.

    Raises:
      RuntimeError: the child exited non-zero (its stderr tail is in the message).
    """
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run([sys.executable, "-m", "xlakit.demo.child", "--cache", str(cache), "--out", str(out),
                           *names], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"demo process failed with exit code {proc.returncode}:\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["name"]: row for row in rows}


def _identical(a: Path, b: Path) -> bool:
    import numpy as np

    with np.load(a) as left, np.load(b) as right:
        return left.files == right.files and all(
            left[k].dtype == right[k].dtype and left[k].tobytes() == right[k].tobytes() for k in left.files)


def run_demo(keep_cache: str | None = None, quick: bool = False) -> int:
    """Run the demo; print a table; return 0 when every warm output is bit-identical to the cold one, else 1.

    Args:
      keep_cache: folder to use (and keep) as the cache; it is emptied first. Default: a temporary folder.
      quick: only ``cnn_train_step`` and ``mlp_infer_b1``.
    """
    from rich.console import Console
    from rich.table import Table

    from xlakit._text.format import fmt_bytes  # the one byte formatter of tables, charts, CLI and report

    # The demo's own styled output (ANSI colours) goes to the real stream, not the CLI's sanitising wrapper.
    console = Console(file=getattr(sys.stdout, "wrapped", sys.stdout))
    if console.width < 130:  # the table has nine columns; fold less on narrow or piped terminals
        console.width = 130
    work = Path(tempfile.mkdtemp(prefix="xlakit-demo-"))
    cache = Path(keep_cache) if keep_cache else work / "cache"
    if cache.exists():
        shutil.rmtree(cache)
    names = QUICK if quick else ()
    try:
        console.print(f"[bold]xlakit demo[/bold]: real JAX programs, first call in a fresh process, cache at {cache}")
        start = time.perf_counter()
        console.print("cold start (empty cache: trace, lower, compile, store) ...")
        cold = run_child(cache, work / "cold", names)
        console.print("warm start (a new process, as after a restart: trace, lower, load) ...")
        warm = run_child(cache, work / "warm", names)
        total_s = time.perf_counter() - start

        table = Table(title="First call after a process start", title_justify="left")
        for column in ("program", "cold s", "warm s", "speedup", "on disk", "arguments", "outputs",
                       "temporaries", "bit-identical"):
            table.add_column(column, justify="left" if column == "program" else "right")
        all_same, cold_sum, warm_sum = True, 0.0, 0.0
        for name, c in cold.items():
            w = warm[name]
            same = _identical(work / "cold" / f"{name}.npz", work / "warm" / f"{name}.npz")
            all_same &= same
            main = max(w["entries"] or c["entries"], key=lambda e: e["size_bytes"], default=None)
            memory = (main or {}).get("memory") or {}
            cold_sum += c["first_call_s"]
            warm_sum += w["first_call_s"]
            hits = sum(e["kind"] == "hit" for e in w["events"])
            table.add_row(name, f"{c['first_call_s']:.3f}", f"{w['first_call_s']:.3f}",
                          f"{c['first_call_s'] / w['first_call_s']:.1f}x",
                          fmt_bytes(sum(e["size_bytes"] for e in w["entries"])),
                          fmt_bytes(memory.get("argument_size_in_bytes")),
                          fmt_bytes(memory.get("output_size_in_bytes")),
                          fmt_bytes(memory.get("temp_size_in_bytes")),
                          ("yes" if same else "[red]NO[/red]") + f" ({hits} hit{'s' * (hits != 1)})")
        table.add_row("total", f"{cold_sum:.3f}", f"{warm_sum:.3f}", f"{cold_sum / warm_sum:.1f}x", "", "", "", "",
                      "")
        console.print(table)
        console.print("Warm first calls still trace and lower in Python; the XLA compile is replaced by a load.")
        if all_same:
            console.print(f"[green]Cold and warm results are bit-identical for all {len(cold)} programs.[/green]")
        else:
            console.print("[red]Some warm results differ from the cold ones (see the table).[/red]")
        console.print(f"demo finished in {total_s:.1f} s")
        return 0 if all_same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
