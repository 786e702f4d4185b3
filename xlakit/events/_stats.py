"""Running totals of an event log (:class:`CacheStats`) and the per-function :class:`Summary`.

Where each number comes from (all seconds, all bytes):

* ``compile_s`` sums ``compile`` events. Each XLA compile is recorded once: by xlakit when the compile went
  through xlakit's store (``source="xlakit"``, JAX's measured compile seconds), otherwise by the JAX
  listeners (``source="jax"``); the listeners drop JAX's own backend-compile duration whenever a cache
  layer already recorded the compile or served the program (see :mod:`xlakit._jax.listeners`). So the
  sum over all sources counts every compile once.
* ``load_s`` sums the durations of ``hit`` events: lookup + load seconds measured by the layer that hit.
* ``saved_s`` sums each hit's ``saved_s`` floored at 0, so it is never negative.
* ``stored_bytes`` sums the ``bytes`` of ``store`` events (JAX's persistent cache does not report sizes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from xlakit._text.format import fmt_bytes, fmt_seconds
from xlakit._text.untrusted import html_text
from xlakit.events._model import FLEET_KINDS, KINDS, SOURCES, Event

__all__ = ["CacheStats", "Summary", "SummaryRow", "LIBRARY_ROW"]

#: The name of the row (and lane) that folds the programs of library code (``Event.origin == "library"``).
LIBRARY_ROW = "library helpers"


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """Counts and seconds of cache and compile activity.

    Attributes:
      counts: events per kind (every kind in :data:`~xlakit.events.KINDS` present, 0 when none).
      compile_s: seconds XLA spent compiling (sum of ``compile`` durations; each compile counted once).
      load_s: seconds spent looking up and loading executables on hits (sum of ``hit`` durations).
      saved_s: seconds saved: over hits, the entry's recorded compile seconds minus the measured load
        seconds, each floored at 0 — so never negative by construction.
      stored_bytes: bytes written by ``store`` events.
      trace_s: seconds JAX spent tracing Python to jaxprs (sum of ``trace`` durations).
      lower_s: seconds JAX spent lowering jaxprs to StableHLO (sum of ``lower`` durations).
      source: the one source (layer) these numbers describe, or None for all sources together.
      fleet_s: per fleet kind (:data:`~xlakit.events.FLEET_KINDS`: remote_hit, remote_miss, upload,
        upload_error, claim, wait), the sum of its events' ``duration_s`` (seconds).
      fleet_bytes: per fleet kind, the sum of its events' ``bytes``.
    """

    counts: dict[str, int]
    compile_s: float
    load_s: float
    saved_s: float
    stored_bytes: int
    trace_s: float = 0.0
    lower_s: float = 0.0
    source: str | None = None
    fleet_s: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(FLEET_KINDS, 0.0))
    fleet_bytes: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(FLEET_KINDS, 0))

    @property
    def hits(self) -> int:
        return self.counts["hit"]

    @property
    def misses(self) -> int:
        return self.counts["miss"]

    @property
    def failures(self) -> int:
        """``corrupt`` + ``load_error`` + ``store_error`` events."""
        return self.counts["corrupt"] + self.counts["load_error"] + self.counts["store_error"]

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts, "compile_s": self.compile_s, "load_s": self.load_s, "saved_s": self.saved_s,
                "stored_bytes": self.stored_bytes, "trace_s": self.trace_s, "lower_s": self.lower_s,
                "source": self.source}

    def to_frame(self):
        """One-row ``pandas.DataFrame`` of :meth:`to_dict`."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v)
        scope = f"[{self.source}] " if self.source else ""
        return (f"CacheStats({scope}{counts or 'no events'}; compile {fmt_seconds(self.compile_s)}, "
                f"load {fmt_seconds(self.load_s)}, saved {fmt_seconds(self.saved_s)}, "
                f"stored {fmt_bytes(self.stored_bytes)})")

    def summary_rows(self) -> list[dict[str, str]]:
        """The totals in words, grouped (what :meth:`_repr_html_` shows): one ``{"what", "value"}`` row per
        group — lookups, compiles, stored, saved, JAX's own tracing, failures and the shared tier when there are
        any — with seconds and bytes formatted and kinds without events left out. :meth:`to_frame` has the
        raw numbers."""
        c = self.counts

        def n(count: int, one: str, many: str) -> str:
            return f"{count:,} {one if count == 1 else many}"

        def some(*parts: tuple[int, str, str]) -> str:
            return ", ".join(n(*p) for p in parts if p[0]) or "none"

        rows = [{"what": "lookups", "value": some((c["hit"], "hit", "hits"), (c["miss"], "miss", "misses"),
                                                  (c["skip"], "skipped", "skipped"))},
                {"what": "compiled", "value": (f"{n(c['compile'], 'program', 'programs')} in "
                                               f"{fmt_seconds(self.compile_s)}" if c["compile"] else "none")
                 + (f"; {n(c['recompile'], 'recompile', 'recompiles')} of a function seen before"
                    if c["recompile"] else "")},
                {"what": "stored", "value": (f"{n(c['store'], 'program', 'programs')}, {fmt_bytes(self.stored_bytes)}"
                                             if c["store"] else "none")
                 + (f"; {c['evict']:,} evicted" if c["evict"] else "")},
                {"what": "saved by hits", "value": f"{fmt_seconds(self.saved_s)} (loading took "
                                                   f"{fmt_seconds(self.load_s)})" if c["hit"] else "nothing yet"}]
        if c["trace"] or c["lower"]:
            rows.append({"what": "JAX before each compile", "value": f"{c['trace']:,} traces in "
                         f"{fmt_seconds(self.trace_s)}, {c['lower']:,} lowerings in {fmt_seconds(self.lower_s)}"})
        failures = some((c["corrupt"], "corrupt entry", "corrupt entries"), (c["load_error"], "load error",
                        "load errors"), (c["store_error"], "store error", "store errors"))
        if failures != "none":
            rows.append({"what": "failures", "value": failures})
        fleet = [f"{c[k]:,} {k.replace('_', ' ')}" + (f" ({fmt_seconds(self.fleet_s[k])}" + (
            f", {fmt_bytes(self.fleet_bytes[k])})" if self.fleet_bytes[k] else ")") if self.fleet_s[k] else "")
            for k in FLEET_KINDS if c[k]]
        if fleet:
            rows.append({"what": "shared tier", "value": ", ".join(fleet)})
        rows.append({"what": "events from",
                     "value": self.source or "every layer (xlakit, JAX's persistent cache, jit)"})
        return rows

    def _repr_html_(self) -> str:
        from xlakit._text.table import Column, Table

        return Table([Column("what", "cache and compiles"), Column("value", "", nowrap=False)], self.summary_rows(),
                     caption="xlakit.cache_stats() (the raw numbers: .to_frame())")._repr_html_()


class _Tally:
    """Mutable running totals for one source (or for a merge of several)."""

    __slots__ = ("counts", "compile_s", "load_s", "saved_s", "stored_bytes", "trace_s", "lower_s", "fleet_s",
                 "fleet_bytes")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.fleet_s = dict.fromkeys(FLEET_KINDS, 0.0)
        self.fleet_bytes = dict.fromkeys(FLEET_KINDS, 0)
        self.compile_s = self.load_s = self.saved_s = self.trace_s = self.lower_s = 0.0
        self.stored_bytes = 0

    def add(self, e: Event) -> None:
        self.counts[e.kind] += 1
        if e.kind in self.fleet_s:
            self.fleet_s[e.kind] += e.duration_s or 0.0
            self.fleet_bytes[e.kind] += e.bytes or 0
        if e.kind == "compile":
            self.compile_s += e.duration_s or 0.0
        elif e.kind == "hit":
            self.load_s += e.duration_s or 0.0
            self.saved_s += max(0.0, e.saved_s or 0.0)
        elif e.kind == "store":
            self.stored_bytes += e.bytes or 0
        elif e.kind == "trace":
            self.trace_s += e.duration_s or 0.0
        elif e.kind == "lower":
            self.lower_s += e.duration_s or 0.0

    def merge(self, other: _Tally) -> None:
        for k, v in other.counts.items():
            self.counts[k] += v
        for k in FLEET_KINDS:
            self.fleet_s[k] += other.fleet_s[k]
            self.fleet_bytes[k] += other.fleet_bytes[k]
        for f in ("compile_s", "load_s", "saved_s", "stored_bytes", "trace_s", "lower_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def snapshot(self, source: str | None) -> CacheStats:
        return CacheStats(dict(self.counts), self.compile_s, self.load_s, self.saved_s, self.stored_bytes,
                          self.trace_s, self.lower_s, source, dict(self.fleet_s), dict(self.fleet_bytes))


class Totals:
    """Per-source running totals; not thread-safe on its own (the log holds its lock around calls)."""

    def __init__(self) -> None:
        self.by_source = {s: _Tally() for s in SOURCES}

    def add(self, e: Event) -> None:
        self.by_source[e.source].add(e)

    def snapshot(self, source: str | None = None) -> CacheStats:
        if source is not None:
            if source not in self.by_source:
                raise ValueError(f"unknown event source {source!r}; expected one of {', '.join(SOURCES)}")
            return self.by_source[source].snapshot(source)
        merged = _Tally()
        for tally in self.by_source.values():
            merged.merge(tally)
        return merged.snapshot(None)


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """What happened to one function on one layer.

    Attributes:
      name: function / module name (None collects events without one).
      source: the layer (:data:`~xlakit.events.SOURCES`).
      counts: events per kind (every kind present).
      compile_s, load_s, saved_s, trace_s, lower_s: seconds, as in :class:`CacheStats`.
      stored_bytes: bytes written by ``store`` events.
      origin: ``"user"``, ``"library"`` or None (unknown), as the function's events say (``Event.origin``).
      site: the first user frame that led to the function (``Event.site``), or None.
      programs: how many functions the row covers: 1, or the number folded into the ``"library helpers"`` row.
    """

    name: str | None
    source: str
    counts: dict[str, int]
    compile_s: float
    load_s: float
    saved_s: float
    trace_s: float
    lower_s: float
    stored_bytes: int
    origin: str | None = None
    site: str | None = None
    programs: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, **self.counts, "compile_s": self.compile_s,
                "load_s": self.load_s, "saved_s": self.saved_s, "trace_s": self.trace_s,
                "lower_s": self.lower_s, "stored_bytes": self.stored_bytes, "origin": self.origin,
                "site": self.site, "programs": self.programs}


@dataclasses.dataclass(frozen=True)
class Summary:
    """Per function and layer: counts of each kind, compile/load/saved/trace/lower seconds, stored bytes.

    Built from the events a log still keeps (a bounded log may have dropped older ones; its
    :meth:`~xlakit.events.EventLog.stats` totals never drop anything).

    Attributes:
      rows: one :class:`SummaryRow` per (name, source), sorted by name then by the order of
        :data:`~xlakit.events.SOURCES`; when folded, the library programs' rows are one
        :data:`LIBRARY_ROW` row per source, last (counts and seconds summed, ``programs`` says how many).
      folded: whether library programs were folded.
    """

    rows: tuple[SummaryRow, ...]
    folded: bool = False

    @classmethod
    def of(cls, events: Iterable[Event], fold_library: bool = False) -> Summary:
        """The summary of ``events``; with ``fold_library``, functions whose events say ``origin="library"``
        (JAX's own helpers such as ``jit_broadcast_in_dim``) become one :data:`LIBRARY_ROW` row per source."""
        tallies: dict[tuple[str | None, str], _Tally] = {}
        origins: dict[str | None, str | None] = {}
        sites: dict[str | None, str | None] = {}
        for e in events:
            tallies.setdefault((e.name, e.source), _Tally()).add(e)
            if origins.get(e.name) is None:
                origins[e.name] = e.origin
            if sites.get(e.name) is None:
                sites[e.name] = e.site
        order = {s: i for i, s in enumerate(SOURCES)}
        keys = sorted(tallies, key=lambda k: (k[0] is None, k[0] or "", order[k[1]]))
        rows: list[SummaryRow] = []
        library: dict[str, tuple[_Tally, set[str | None]]] = {}
        for name, source in keys:
            t = tallies[(name, source)]
            if fold_library and origins.get(name) == "library":
                merged, names = library.setdefault(source, (_Tally(), set()))
                merged.merge(t)
                names.add(name)
                continue
            rows.append(SummaryRow(name, source, dict(t.counts), t.compile_s, t.load_s, t.saved_s, t.trace_s,
                                   t.lower_s, t.stored_bytes, origins.get(name), sites.get(name)))
        for source in sorted(library, key=order.__getitem__):
            t, names = library[source]
            rows.append(SummaryRow(LIBRARY_ROW, source, dict(t.counts), t.compile_s, t.load_s, t.saved_s,
                                   t.trace_s, t.lower_s, t.stored_bytes, "library", None, len(names)))
        return cls(tuple(rows), fold_library)

    def row(self, name: str | None, source: str) -> SummaryRow | None:
        """The row for ``name`` on ``source``, or None."""
        return next((r for r in self.rows if r.name == name and r.source == source), None)

    def to_frame(self):
        """A ``pandas.DataFrame``: one row per (name, source); a column per kind plus the seconds."""
        import pandas as pd

        columns = ["name", "source", *KINDS, "compile_s", "load_s", "saved_s", "trace_s", "lower_s",
                   "stored_bytes", "origin", "site", "programs"]
        return pd.DataFrame([r.to_dict() for r in self.rows], columns=columns)

    def _table(self) -> tuple[list[str], list[list[str]]]:
        used = [k for k in KINDS if any(r.counts[k] for r in self.rows)]
        header = ["name", "source", *used, "compile s", "load s", "saved s"]
        body = [[(r.name or "?") + (f" ({r.programs} programs)" if r.name == LIBRARY_ROW else ""), r.source,
                 *(str(r.counts[k]) for k in used), f"{r.compile_s:.3f}", f"{r.load_s:.3f}", f"{r.saved_s:.3f}"]
                for r in self.rows]
        return header, body

    def __repr__(self) -> str:
        if not self.rows:
            return "Summary(no events)"
        header, body = self._table()
        widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in body]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        header, body = self._table()
        head = "".join(f"<th>{html_text(h)}</th>" for h in header)
        rows = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in body)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
