"""IPython extension: ``%load_ext xlakit``, the ``%xlakit`` line magic and the ``%%xlakit`` cell magic.

::

    %load_ext xlakit
    %xlakit dashboard          # every view in tabs (also: memory, allocator, timeline, cache, live, stats)

    %%xlakit
    state = train_step(state, batch)
    # under the cell: compiles, hits, misses, compile/load/saved seconds, the cell's seconds, peak bytes

The cell magic runs the cell inside :func:`xlakit.events.record` (every cache and compile event of the cell,
JAX's own signals included) and :func:`xlakit.memory.track` (the memory peak is reset when the cell starts,
so the peak shown is the cell's own: exact after a ``native`` or ``clear_refs`` reset — on CPU the process
resident high-water mark — and an upper bound after a ``baseline`` reset). Options: ``%%xlakit --no-reset``
keeps the peak as it is (the summary then shows the peak since the last reset).

Importing this module imports IPython, not JAX or the widget libraries; each command imports what it needs.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from html import escape
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from xlakit.memory._display import fmt_bytes

__all__ = ["load_ipython_extension", "unload_ipython_extension", "XlakitMagics", "CellSummary", "COMMANDS"]

#: ``%xlakit <command>``: what each line command returns.
COMMANDS = {
    "dashboard": "xlakit.widgets.dashboard(): every view in tabs",
    "memory": "MemoryBreakdown over the enabled cache's entries",
    "allocator": "AllocatorPanel of every local device",
    "timeline": "CacheTimeline of the process-wide event log",
    "cache": "CacheBrowser of the enabled cache",
    "live": "LiveArrays",
    "stats": "xlakit.cache_stats(): totals of the process-wide event log",
}


@dataclasses.dataclass(frozen=True)
class CellSummary:
    """What one ``%%xlakit`` cell did.

    Attributes:
      compiles: XLA compiles (int). hits / misses: cache hits and misses on every layer (int).
      compile_s, load_s, saved_s: seconds compiling, loading on hits, and saved by hits (float).
      seconds: wall seconds of the cell (float).
      peak_bytes: the largest peak since the reset at the cell's start over the devices (int bytes), or None
        when no device reports one. peak_device: the device it belongs to. peak_exact: True when exact,
        False when an upper bound (baseline reset), None when unknown. peak_method: the reset method.
      in_use_change_bytes: change of bytes in use over the cell, summed over devices (int), or None.
      failed: the cell raised.
      events: the :class:`~xlakit.events.EventLog` of the cell; tracker: the :class:`~xlakit.memory.Tracker`.
    """

    compiles: int
    hits: int
    misses: int
    compile_s: float
    load_s: float
    saved_s: float
    seconds: float
    peak_bytes: int | None
    peak_device: str | None
    peak_exact: bool | None
    peak_method: str | None
    in_use_change_bytes: int | None
    failed: bool = False
    events: Any = dataclasses.field(default=None, repr=False, compare=False)
    tracker: Any = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, events: Any, tracker: Any, seconds: float, failed: bool = False) -> CellSummary:
        """Build from a recorded :class:`~xlakit.events.EventLog` and a finished tracker."""
        stats = events.stats()
        peak = device = exact = method = None
        change = None
        if tracker is not None and tracker.after is not None:
            for s in tracker.after:
                value = s.peak_since_reset_bytes
                if value is not None and (peak is None or value > peak):
                    peak, device, exact, method = value, s.device, s.peak_since_reset_exact, s.reset_method
            before = {s.device: s.bytes_in_use for s in tracker.before or ()}
            deltas = [s.bytes_in_use - before[s.device] for s in tracker.after
                      if s.bytes_in_use is not None and before.get(s.device) is not None]
            change = sum(deltas) if deltas else None
        return cls(stats.counts["compile"], stats.hits, stats.misses, stats.compile_s, stats.load_s, stats.saved_s,
                   seconds, peak, device, exact, method, change, failed, events, tracker)

    def _peak_text(self) -> str:
        if self.peak_bytes is None:
            return "peak not reported"
        how = {True: "exact", False: "at most"}.get(self.peak_exact, "?")
        what = "process high-water mark" if self.peak_method == "clear_refs" else "peak"
        return f"{what} {fmt_bytes(self.peak_bytes)} on {self.peak_device} ({how}, {self.peak_method} reset)"

    def __repr__(self) -> str:
        change = "" if self.in_use_change_bytes is None else f", in use {self.in_use_change_bytes:+,} B"
        return (f"xlakit: {self.compiles} compile(s) {self.compile_s:.3f} s, {self.hits} hit(s) "
                f"(load {self.load_s:.3f} s, saved {self.saved_s:.3f} s), {self.misses} miss(es); "
                f"cell {self.seconds:.3f} s{' (failed)' if self.failed else ''}; {self._peak_text()}{change}")

    def _repr_html_(self) -> str:
        peak_attr = f" data-bytes='{self.peak_bytes}'" if self.peak_bytes is not None else ""
        cells = [("compiles", f"{self.compiles} ({self.compile_s:.3f} s)"),
                 ("hits", f"{self.hits} (load {self.load_s:.3f} s, saved {self.saved_s:.3f} s)"),
                 ("misses", str(self.misses)), ("cell", f"{self.seconds:.3f} s" + (" — failed" if self.failed else ""))]
        body = "".join(f"<span style='margin-right:14px'><b>{escape(k)}</b> {escape(v)}</span>" for k, v in cells)
        body += f"<span class='xlakit-cell-peak'{peak_attr}><b>peak</b> {escape(self._peak_text())}</span>"
        return (f"<div class='xlakit-cell-summary' style='font-size:12px;color:#333;border-top:1px solid #ddd;"
                f"padding-top:2px'>xlakit · {body}</div>")


@magics_class
class XlakitMagics(Magics):
    """``%xlakit <command>`` (see :data:`COMMANDS`) and ``%%xlakit [--no-reset]``."""

    @line_cell_magic
    def xlakit(self, line: str, cell: str | None = None) -> Any:
        """``%xlakit dashboard|memory|allocator|timeline|cache|live|stats`` returns that view;
        ``%%xlakit [--no-reset]`` runs the cell and shows what it compiled, hit, missed and its memory peak."""
        if cell is None:
            return self._line(line)
        return self._cell(line, cell)

    def _line(self, line: str) -> Any:
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print("%xlakit COMMAND\n" + "\n".join(f"  {k:<10} {v}" for k, v in COMMANDS.items())
                  + "\n%%xlakit [--no-reset]  record a cell's events and memory peak")
            return None
        command, rest = words[0], words[1:]
        if command not in COMMANDS:
            raise UsageError(f"unknown %xlakit command {command!r}; commands: {', '.join(COMMANDS)}")
        if rest:
            raise UsageError(f"%xlakit {command} takes no arguments, got {' '.join(rest)!r}")
        if command == "stats":
            import xlakit

            return xlakit.cache_stats()
        from xlakit import widgets
        from xlakit._jax import persistent

        if command == "dashboard":
            return widgets.dashboard()
        if command == "memory":
            return widgets.MemoryBreakdown(persistent.active())
        if command == "allocator":
            return widgets.AllocatorPanel()
        if command == "timeline":
            return widgets.CacheTimeline()
        if command == "cache":
            return widgets.CacheBrowser()
        return widgets.LiveArrays()

    def _cell(self, line: str, cell: str) -> CellSummary:
        words = shlex.split(line)
        unknown = [w for w in words if w != "--no-reset"]
        if unknown:
            raise UsageError(f"%%xlakit takes only --no-reset, got {' '.join(unknown)!r}")
        from IPython.display import display

        from xlakit import events
        from xlakit.memory import track

        start = time.perf_counter()
        with events.record() as recorded, track(reset="--no-reset" not in words) as tracker:
            result = self.shell.run_cell(cell)
        summary = CellSummary.of(recorded, tracker, time.perf_counter() - start,
                                 failed=not getattr(result, "success", True))
        self.shell.user_ns["_xlakit_cell"] = summary
        display(summary)
        return None


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%xlakit`` / ``%%xlakit`` magics (``%load_ext xlakit``)."""
    ipython.register_magics(XlakitMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo beyond IPython's own bookkeeping (magics stay registered until restart)."""
