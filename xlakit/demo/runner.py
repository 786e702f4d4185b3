"""``xlakit demo``: a restart, measured. Real workloads run cold (empty cache) then warm, each in a fresh process.

Both processes run on the backend JAX picks (``JAX_PLATFORMS`` as the user set it, or unset: an accelerator when
one is present); the device is named as soon as the first process has started JAX, and again with the result.
Per program it prints the first-call seconds of both runs, the speedup, the entry's bytes on disk and the
compiled memory (arguments, outputs, temporaries from ``LoadedExecutable.get_compiled_memory_stats()``,
stored in the entry at compile time), whether the warm process loaded the program or compiled it again, and
whether the warm outputs are bit-identical to the cold ones. A program compiled again in the warm process is a
failed row, and the demo exits non-zero: equal outputs then prove nothing about the cache.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_demo", "run_child", "warm_outcome", "WarmOutcome"]

QUICK = ("cnn_train_step", "mlp_infer_b1")

#: Event kinds that mean the warm process did not load a program from the cache but compiled it.
_COMPILED_AGAIN = ("load_error", "corrupt", "miss", "compile")


def _child_env() -> dict[str, str]:
    """The demo processes' environment: the user's, unchanged (``JAX_PLATFORMS`` included, set or not), so JAX
    picks the backend it would pick for the user."""
    return dict(os.environ)


def run_child(cache: Path, out: Path, names: tuple[str, ...] = (),
              on_device: Callable[[dict[str, Any]], None] | None = None
              ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Run :mod:`xlakit.demo.child` in a fresh Python process.

    Args:
      on_device: called with the child's device (``{"platform", "device_kind", "count"}``) as soon as it has
        started JAX, while its workloads still run.

    Returns:
      ``(device, reports)``: the device and the child's report per workload name.

    Raises:
      RuntimeError: the child exited non-zero (its stderr tail is in the message).
    """
    out.mkdir(parents=True, exist_ok=True)
    device: dict[str, Any] = {}
    rows: dict[str, dict[str, Any]] = {}
    # stderr goes to a file, not a pipe: a backend that logs a lot must not block on a full pipe while stdout is read.
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "xlakit.demo.child", "--cache", str(cache), "--out", str(out),
                                 *names], stdout=subprocess.PIPE, stderr=err, text=True, env=_child_env())
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if "device" in row:
                device = row["device"]
                if on_device is not None:
                    on_device(device)
            else:
                rows[row["name"]] = row
        code = proc.wait()
        if code != 0:
            err.seek(0)
            raise RuntimeError(f"demo process failed with exit code {code}:\n{err.read()[-4000:]}")
    return device, rows


@dataclasses.dataclass(frozen=True)
class WarmOutcome:
    """What the warm process did with one program.

    loaded: True when xlakit's cache served it (at least one ``hit``, no compile). hits: ``hit`` events.
    reasons: why it compiled again, most telling first (a refused load, a quarantined entry, a miss), each once.
    """

    loaded: bool
    hits: int
    reasons: tuple[str, ...] = ()

    def text(self, brief: bool = False) -> str:
        """``"loaded (1 hit)"`` or ``"compiled again (<first reason>)"``, plain text; ``brief``: only the reason's
        event kind (``miss``, ``load_error``, ...), for a table cell."""
        if self.loaded:
            return f"loaded ({self.hits} hit{'s' * (self.hits != 1)})"
        reason = self.reasons[0] if self.reasons else "no cache hit was recorded"
        return f"compiled again ({reason.split(':')[0] if brief else reason})"


def warm_outcome(events: list[dict[str, Any]]) -> WarmOutcome:
    """Classify the warm process's events of one program (the child's ``events``: dicts with ``kind``,
    ``reason``, ``origin``). Events of library programs (``origin == "library"``, JAX's own helpers) do not
    count. Compiled again: any ``load_error``, ``corrupt``, ``miss`` or ``compile``, or no ``hit`` at all."""
    own = [e for e in events if e.get("origin") != "library"]
    hits = sum(e["kind"] == "hit" for e in own)
    failed = sorted((e for e in own if e["kind"] in _COMPILED_AGAIN), key=lambda e: _COMPILED_AGAIN.index(e["kind"]))
    reasons = tuple(dict.fromkeys(f"{e['kind']}: {e['reason']}" if e.get("reason") else e["kind"] for e in failed))
    return WarmOutcome(loaded=hits > 0 and not failed, hits=hits, reasons=reasons)


def _identical(a: Path, b: Path) -> bool:
    import numpy as np

    with np.load(a) as left, np.load(b) as right:
        return left.files == right.files and all(
            left[k].dtype == right[k].dtype and left[k].tobytes() == right[k].tobytes() for k in left.files)


def describe_device(device: dict[str, Any]) -> str:
    """``"1 x TPU v5 lite (platform tpu)"`` from a child's device report."""
    from xlakit._text.untrusted import terminal_text

    return terminal_text(f"{device.get('count', '?')} x {device.get('device_kind', '?')} "
                         f"(platform {device.get('platform', '?')})")


def check_keep_cache(folder: Path) -> None:
    """The ``--keep-cache`` folder may be emptied: it is missing, empty, or an xlakit cache folder (its
    ``CACHEDIR.TAG`` is xlakit's). Raises ValueError naming ``--keep-cache`` otherwise: ``--keep-cache ~`` emptied
    the home folder."""
    from xlakit.store.layout import has_tag

    folder = folder.expanduser()
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ValueError(f"--keep-cache {folder}: not a folder; give a new or empty folder for the demo's cache")
    if not folder.exists():  # it is made later, in a child process whose failure was a 30-line traceback
        above = next((p for p in folder.absolute().parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise ValueError(f"--keep-cache {folder}: {above} is a file, so the folder cannot be made there; give a "
                             "new or empty folder for the demo's cache")
        if above is not None and not os.access(above, os.W_OK | os.X_OK):
            raise ValueError(f"--keep-cache {folder}: {above} cannot be written, so the folder cannot be made there; "
                             "give a folder you can write")
    if folder.is_dir() and any(folder.iterdir()) and not has_tag(folder):
        raise ValueError(f"--keep-cache {folder}: the folder holds files and is not an xlakit cache (no xlakit "
                         "CACHEDIR.TAG); the demo empties its cache folder first, so give a new or empty folder "
                         "(nothing was deleted)")


def run_demo(keep_cache: str | None = None, quick: bool = False) -> int:
    """Run the demo; print a table; return 0 when every warm process loaded its program from the cache and every
    warm output is bit-identical to the cold one, else 1.

    Args:
      keep_cache: folder to use (and keep) as the cache; it is emptied first, so it must be missing, empty or an
        xlakit cache folder (ValueError otherwise: :func:`check_keep_cache`). Default: a temporary folder.
      quick: only ``cnn_train_step`` and ``mlp_infer_b1``.
    """
    from rich.console import Console
    from rich.markup import escape

    from xlakit._text.untrusted import terminal_text

    # The demo's own styled output (ANSI colours) goes to the real stream, not the CLI's sanitising wrapper.
    console = Console(file=getattr(sys.stdout, "wrapped", sys.stdout))
    if console.width < 140:  # the table has ten columns; fold less on narrow or piped terminals
        console.width = 140
    if keep_cache:
        check_keep_cache(Path(keep_cache))
    work = Path(tempfile.mkdtemp(prefix="xlakit-demo-"))
    cache = Path(keep_cache).expanduser() if keep_cache else work / "cache"
    if cache.exists():
        shutil.rmtree(cache)
    names = QUICK if quick else ()
    try:
        chosen = escape(terminal_text(os.environ.get("JAX_PLATFORMS", "")))
        console.print(f"[bold]xlakit demo[/bold]: real JAX programs, first call in a fresh process, cache at {cache}; "
                      f"backend: {'JAX_PLATFORMS=' + chosen if chosen else 'JAX picks'}")
        start = time.perf_counter()
        console.print("cold start (empty cache: trace, lower, compile, store) ...")
        cold_device, cold = run_child(cache, work / "cold", names,
                                      on_device=lambda d: console.print(f"  running on {escape(describe_device(d))}"))
        console.print("warm start (a new process, as after a restart: trace, lower, load) ...")
        warm_device, warm = run_child(cache, work / "warm", names)
        total_s = time.perf_counter() - start
        status = report(console, cold, warm, work, cold_device, warm_device)
        console.print(f"demo finished in {total_s:.1f} s")
        return status
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(console: Any, cold: dict[str, dict[str, Any]], warm: dict[str, dict[str, Any]], outputs: Path,
           cold_device: dict[str, Any], warm_device: dict[str, Any]) -> int:
    """Print the table and the verdict for the children's reports (outputs in ``outputs/{cold,warm}/<name>.npz``);
    return the demo's exit status (0: every program loaded warm with bit-identical outputs, else 1)."""
    from rich.markup import escape
    from rich.table import Table

    from xlakit._text.format import fmt_bytes  # the one byte formatter of tables, charts, CLI and report
    from xlakit._text.untrusted import terminal_text

    where = describe_device(cold_device)
    table = Table(title=f"First call after a process start, on {where}", title_justify="left")
    for column in ("program", "cold s", "warm s", "speedup", "on disk", "arguments", "outputs", "temporaries",
                   "warm start", "bit-identical"):
        table.add_column(column, justify="left" if column in ("program", "warm start") else "right",
                         no_wrap=column in ("program", "warm start"))
    all_same, cold_sum, warm_sum = True, 0.0, 0.0
    again: dict[str, WarmOutcome] = {}
    for name, c in cold.items():
        w = warm[name]
        same = _identical(outputs / "cold" / f"{name}.npz", outputs / "warm" / f"{name}.npz")
        all_same &= same
        outcome = warm_outcome(w["events"])
        if not outcome.loaded:
            again[name] = outcome
        main = max(w["entries"] or c["entries"], key=lambda e: e["size_bytes"], default=None)
        memory = (main or {}).get("memory") or {}
        cold_sum += c["first_call_s"]
        warm_sum += w["first_call_s"]
        speedup = f"{c['first_call_s'] / w['first_call_s']:.1f}x"
        started = escape(terminal_text(outcome.text(brief=True)))  # the whole reasons follow the table
        table.add_row(name, f"{c['first_call_s']:.3f}", f"{w['first_call_s']:.3f}",
                      speedup if outcome.loaded else f"[red]{speedup}[/red]",
                      fmt_bytes(sum(e["size_bytes"] for e in w["entries"])),
                      fmt_bytes(memory.get("argument_size_in_bytes")),
                      fmt_bytes(memory.get("output_size_in_bytes")),
                      fmt_bytes(memory.get("temp_size_in_bytes")),
                      started if outcome.loaded else f"[red]{started}[/red]",
                      "yes" if same else "[red]NO[/red]")
    table.add_row("total", f"{cold_sum:.3f}", f"{warm_sum:.3f}", f"{cold_sum / warm_sum:.1f}x", "", "", "", "", "", "")
    console.print(table)
    console.print("Warm first calls still trace and lower in Python; the XLA compile is replaced by a load.")
    if warm_device != cold_device:
        console.print(f"[red]The warm process ran on {escape(describe_device(warm_device))}, the cold one on "
                      f"{escape(where)}.[/red]")
    for name, outcome in again.items():
        why = "; ".join(outcome.reasons) or "no cache hit was recorded"
        console.print(f"[red]{escape(name)} compiled again in the warm process: {escape(terminal_text(why))}[/red]")
    if again:
        console.print(f"[red]{len(again)} of {len(cold)} programs were compiled again, not loaded from the cache"
                      f"{': equal outputs prove nothing about the cache for them' if all_same else ''}.[/red]")
    elif all_same:
        console.print(f"[green]Cold and warm results are bit-identical for all {len(cold)} programs, each loaded from "
                      f"the cache, on {escape(where)}.[/green]")
    if not all_same:
        console.print("[red]Some warm results differ from the cold ones (see the table).[/red]")
    return 0 if all_same and not again and warm_device == cold_device else 1
