"""IPython extension: ``%load_ext xlakit``, the ``%xlakit`` line magic and the ``%%xlakit`` cell magic.

::

    %load_ext xlakit
    %xlakit dashboard          # every view in tabs (also: memory, allocator, timeline, cache, live, stats)

    %%xlakit
    state = train_step(state, batch)
    # under the cell: compiles, hits, misses, compile/load/saved seconds, the cell's seconds, bytes in use
    # before and after (the change), and the peak with what kind of peak it is

The cell magic runs the cell inside :func:`xlakit.events.record` (every cache and compile event of the cell,
JAX's own signals included) and :func:`xlakit.memory.track`. By default it does **not** reset the memory
peak (a reset is process-wide: on CPU it resets the process high-water mark, which an AllocatorPanel shows
too), so the peak shown is the peak since the last reset or since the process started, and the summary says
so and whether it rose during the cell. ``%%xlakit --reset-peak`` resets it when the cell starts, so the peak
is the cell's own (exact after a ``native`` or ``clear_refs`` reset, an upper bound after ``baseline``), and
the summary says that it reset. ``--no-reset`` is accepted and is the default.

Importing this module imports IPython, not JAX or the widget libraries; each command imports what it needs.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from xlakit._text.format import fmt_bytes, fmt_seconds
from xlakit._text.untrusted import html_text

__all__ = ["load_ipython_extension", "unload_ipython_extension", "XlakitMagics", "CellSummary", "COMMANDS", "StatsView"]

#: ``%xlakit <command>``: what each line command returns.
COMMANDS = {
    "dashboard": "xlakit.widgets.dashboard(): every view in tabs",
    "memory": "MemoryBreakdown over the enabled cache's entries",
    "allocator": "AllocatorPanel of every local device",
    "timeline": "CacheTimeline of the process-wide event log",
    "cache": "CacheBrowser of the enabled cache",
    "live": "LiveArrays",
    "stats": "xlakit.cache_stats(): totals of the process-wide event log, formatted",
}


class StatsView:
    """``%xlakit stats``: :func:`xlakit.cache_stats` as a two-column table (text and HTML) of formatted
    values; counts that are 0 are left out. ``stats`` is the :class:`~xlakit.events.CacheStats`."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self.counts = stats.counts

    def rows(self) -> list[dict[str, str]]:
        s = self.stats
        rows = [{"what": f"{k} events", "value": f"{v:,}"} for k, v in s.counts.items() if v]
        rows += [{"what": "compile time", "value": fmt_seconds(s.compile_s)},
                 {"what": "load time on hits", "value": fmt_seconds(s.load_s)},
                 {"what": "time saved by hits", "value": fmt_seconds(s.saved_s)},
                 {"what": "bytes stored", "value": fmt_bytes(s.stored_bytes)},
                 {"what": "trace time", "value": fmt_seconds(s.trace_s)},
                 {"what": "lowering time", "value": fmt_seconds(s.lower_s)},
                 {"what": "events from", "value": s.source or "every layer (xlakit, JAX persistent cache, jit)"}]
        return rows

    def _table(self) -> Any:
        from xlakit._text.table import Column, Table

        return Table([Column("what", "process-wide event log"), Column("value", "", nowrap=False)], self.rows())

    def __repr__(self) -> str:
        return self._table().to_text()

    def _repr_html_(self) -> str:
        return self._table()._repr_html_()


@dataclasses.dataclass(frozen=True)
class CellSummary:
    """What one ``%%xlakit`` cell did.

    Attributes:
      compiles: XLA compiles (int). hits / misses: cache hits and misses on every layer (int).
      compile_s, load_s, saved_s: seconds compiling, loading on hits, and saved by hits (float).
      seconds: wall seconds of the cell (float).
      peak_bytes: the largest peak over the devices at the cell's end (int bytes), or None when no device
        reports one: with ``reset`` the peak since the reset at the cell's start (the cell's own), else the
        peak since the last reset or since the process started. peak_device: its device. peak_exact: True
        when exact, False when an upper bound (baseline reset), None when unknown. peak_method: the reset
        method that defines it (None: never reset). peak_kind: what the number is, in words.
      peak_before_bytes: the same peak at the cell's start (int | None); a higher ``peak_bytes`` means the
        cell raised it.
      reset: whether the cell reset the peak (``--reset-peak``).
      in_use_before_bytes, in_use_after_bytes: bytes in use at the start and end, summed over devices.
      in_use_change_bytes: change of bytes in use over the cell, summed over devices (int), or None.
      failed: the cell raised.
      events: the :class:`~xlakit.events.EventLog` of the cell; tracker: the :class:`~xlakit.memory.Tracker`.
      compiles_by_origin: whose programs the compiles were: ``"yours"`` / ``"library helpers"`` (programs
        called only from inside jax/flax/optax, ``Event.origin == "library"``) / ``"unknown origin"`` ->
        ``(compiles, programs)``; only the origins that compiled.
      recompiles: in-process retraces of a function seen before (``recompile`` events; see
        :func:`xlakit.events.recompiles` for what changed).
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
    peak_kind: str = ""
    peak_before_bytes: int | None = None
    reset: bool = False
    in_use_before_bytes: int | None = None
    in_use_after_bytes: int | None = None
    compiles_by_origin: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict, compare=False)
    recompiles: int = 0

    @classmethod
    def of(cls, events: Any, tracker: Any, seconds: float, failed: bool = False, *, reset: bool = False) -> CellSummary:
        """Build from a recorded :class:`~xlakit.events.EventLog` and a finished tracker."""
        from xlakit.view.allocator import displayed_peak

        stats = events.stats()
        peak = device = exact = method = before_peak = None
        kind = ""
        change = in_before = in_after = None
        if tracker is not None and tracker.after is not None:
            before_by_device = {s.device: s for s in tracker.before or ()}
            for s in tracker.after:
                value, what = displayed_peak(s)
                if value is not None and (peak is None or value > peak):
                    peak, device, kind = value, s.device, what
                    exact = s.peak_since_reset_exact if s.peak_since_reset_bytes is not None else None
                    method = s.reset_method
                    prior = before_by_device.get(s.device)
                    before_peak = displayed_peak(prior)[0] if prior is not None else None
            pairs = [(before_by_device[s.device].bytes_in_use, s.bytes_in_use) for s in tracker.after
                     if s.bytes_in_use is not None and s.device in before_by_device
                     and before_by_device[s.device].bytes_in_use is not None]
            if pairs:
                in_before, in_after = sum(b for b, _ in pairs), sum(a for _, a in pairs)
                change = in_after - in_before
        return cls(stats.counts["compile"], stats.hits, stats.misses, stats.compile_s, stats.load_s, stats.saved_s,
                   seconds, peak, device, exact, method, change, failed, events, tracker, kind, before_peak, reset,
                   in_before, in_after, _compiles_by_origin(events), stats.counts.get("recompile", 0))

    def _compile_details(self) -> str:
        """``: 3 of your 1 program(s), 6 of 3 library helper(s)`` — what the compile count counts."""
        parts = [f"{n} of {'your' if label == 'yours' else label} {p} program(s)" if label != "library helpers"
                 else f"{n} of {p} library helper(s)" for label, (n, p) in self.compiles_by_origin.items()]
        if self.recompiles:
            parts.append(f"{self.recompiles} recompile(s)")
        return ": " + ", ".join(parts) if parts else ""

    def _peak_text(self) -> str:
        if self.peak_bytes is None:
            return "peak not reported"
        how = "" if self.peak_exact is None else ("exact" if self.peak_exact else "at most")
        from xlakit.memory.reset_meaning import reset_meaning

        meaning = reset_meaning(self.peak_method)
        what = meaning.name if meaning is not None and meaning.name != "no peak reported" else (
            "process high-water mark" if "high-water" in self.peak_kind else "peak")
        if self.reset:
            scope = f"the cell's own: reset at its start ({self.peak_method}{', ' + how if how else ''})"
            if " since reset: " in self.peak_kind:  # the rise over what the peak started from at the reset
                scope += "; " + self.peak_kind.split(" since reset: ", 1)[1]
        else:
            scope = f"{self.peak_kind}; not reset by this cell"
            if self.peak_before_bytes is not None:
                rose = self.peak_bytes - self.peak_before_bytes
                scope += (f"; rose by {fmt_bytes(rose)} during the cell" if rose > 0
                          else "; did not rise during the cell")
        return f"{what} {fmt_bytes(self.peak_bytes)} on {self.peak_device} ({scope})"

    def _in_use_text(self) -> str:
        if self.in_use_change_bytes is None:
            return "in use: not reported"
        sign = "+" if self.in_use_change_bytes >= 0 else "-"
        return (f"in use {fmt_bytes(self.in_use_before_bytes)} -> {fmt_bytes(self.in_use_after_bytes)} "
                f"({sign}{fmt_bytes(abs(self.in_use_change_bytes))})")

    def __repr__(self) -> str:
        return (f"xlakit: {self.compiles} compile(s) {fmt_seconds(self.compile_s)}{self._compile_details()}; "
                f"{self.hits} hit(s) "
                f"(load {fmt_seconds(self.load_s)}, saved {fmt_seconds(self.saved_s)}), {self.misses} miss(es); "
                f"cell {fmt_seconds(self.seconds)}{' (failed)' if self.failed else ''}; {self._in_use_text()}; "
                f"{self._peak_text()}")

    def _repr_html_(self) -> str:
        peak_attr = f" data-bytes='{self.peak_bytes}'" if self.peak_bytes is not None else ""
        change_attr = (f" data-bytes='{self.in_use_change_bytes}'" if self.in_use_change_bytes is not None else "")
        cells = [("compiles", f"{self.compiles} ({fmt_seconds(self.compile_s)}){self._compile_details()}"),
                 ("hits", f"{self.hits} (load {fmt_seconds(self.load_s)}, saved {fmt_seconds(self.saved_s)})"),
                 ("misses", str(self.misses)),
                 ("cell", fmt_seconds(self.seconds) + (" — failed" if self.failed else ""))]
        body = "".join(f"<span style='margin-right:14px'><b>{html_text(k)}</b> {html_text(v)}</span>" for k, v in cells)
        body += (f"<span class='xlakit-cell-in-use' style='margin-right:14px'{change_attr}>"
                 f"{html_text(self._in_use_text())}</span>")
        body += f"<span class='xlakit-cell-peak'{peak_attr}><b>peak</b> {html_text(self._peak_text())}</span>"
        return (f"<div class='xlakit-cell-summary' style='font-size:12px;color:var(--jp-ui-font-color1,#333);"
                f"border-top:1px solid var(--jp-border-color2,#ddd);padding-top:2px'>xlakit · {body}</div>")


def _compiles_by_origin(events: Any) -> dict[str, tuple[int, int]]:
    """Compile events of ``events`` per origin label -> (compiles, distinct programs)."""
    from xlakit.events import Event

    found: dict[str, list[Any]] = {}
    for e in events.events(kind="compile"):
        assert isinstance(e, Event)
        label = {"user": "yours", "library": "library helpers"}.get(e.origin or "", "unknown origin")
        found.setdefault(label, []).append(e.name)
    order = ("yours", "library helpers", "unknown origin")
    return {label: (len(found[label]), len(set(found[label]))) for label in order if label in found}


@magics_class
class XlakitMagics(Magics):
    """``%xlakit <command>`` (see :data:`COMMANDS`) and ``%%xlakit [--reset-peak]``."""

    @line_cell_magic
    def xlakit(self, line: str, cell: str | None = None) -> Any:
        """``%xlakit dashboard|memory|allocator|timeline|cache|live|stats`` returns that view;
        ``%%xlakit [--reset-peak]`` runs the cell and shows what it compiled, hit, missed, its in-use change
        and the memory peak (and what kind of peak)."""
        if cell is None:
            return self._line(line)
        return self._cell(line, cell)

    def _line(self, line: str) -> Any:
        words = shlex.split(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print("%xlakit COMMAND\n" + "\n".join(f"  {k:<10} {v}" for k, v in COMMANDS.items())
                  + "\n%%xlakit [--reset-peak]  record a cell's events, in-use change and memory peak")
            return None
        command, rest = words[0], words[1:]
        if command not in COMMANDS:
            raise UsageError(f"unknown %xlakit command {command!r}; commands: {', '.join(COMMANDS)}")
        if rest:
            raise UsageError(f"%xlakit {command} takes no arguments, got {' '.join(rest)!r}")
        if command == "stats":
            from xlakit.events import cache_stats

            return StatsView(cache_stats())
        from xlakit import widgets
        from xlakit.cache import active

        if command == "dashboard":
            return widgets.dashboard()
        if command == "memory":
            return widgets.MemoryBreakdown(active())
        if command == "allocator":
            return widgets.AllocatorPanel()
        if command == "timeline":
            return widgets.CacheTimeline()
        if command == "cache":
            return widgets.CacheBrowser()
        return widgets.LiveArrays()

    def _cell(self, line: str, cell: str) -> None:
        words = shlex.split(line)
        unknown = [w for w in words if w not in ("--no-reset", "--reset-peak")]
        if unknown:
            raise UsageError(f"%%xlakit takes only --reset-peak (or --no-reset, the default), got "
                             f"{' '.join(unknown)!r}")
        reset = "--reset-peak" in words
        from IPython.display import display

        from xlakit import events
        from xlakit.memory import track

        shell = self.shell
        if shell is None:
            raise UsageError("%%xlakit runs inside an IPython shell (load it with %load_ext xlakit)")
        start = time.perf_counter()
        with events.record() as recorded, track(reset=reset) as tracker:
            result = shell.run_cell(cell)
        summary = CellSummary.of(recorded, tracker, time.perf_counter() - start,
                                 failed=not getattr(result, "success", True), reset=reset)
        shell.user_ns["_xlakit_cell"] = summary
        display(summary)
        return None


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%xlakit`` / ``%%xlakit`` magics (``%load_ext xlakit``)."""
    ipython.register_magics(XlakitMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo beyond IPython's own bookkeeping (magics stay registered until restart)."""
