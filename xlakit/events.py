"""Events: one record per cache or compile action, kept in a bounded, thread-safe log.

Every lookup, store, skip, eviction and failure that xlakit performs becomes an :class:`Event`, appended to
the process-wide :func:`log`. Observers (widgets, metrics) are called on append — push, not poll.

Kinds (``Event.kind``):

========== ==================================================================================
hit        an executable was loaded from the cache; ``duration_s`` = lookup + load seconds
miss       no usable entry; ``reason`` says why (absent, other environment, nearest entry)
compile    XLA compiled a program; ``duration_s`` = backend compile seconds (measured by JAX)
store      an entry was published; ``bytes`` = its size on disk
skip       a program was compiled but deliberately not stored; ``reason`` names the rule
corrupt    an entry failed its integrity/authenticity check and was quarantined
evict      an entry was removed to stay under the byte cap
load_error an entry passed its checks but XLA refused to load it, or the store could not be read
store_error the store could not be written (read-only folder, full disk, ...)
========== ==================================================================================

This module imports no JAX, and pandas only inside :meth:`EventLog.to_frame`.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time as _time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["KINDS", "Event", "EventLog", "log", "CacheStats", "cache_stats"]

KINDS = ("hit", "miss", "compile", "store", "skip", "corrupt", "evict", "load_error", "store_error")


@dataclasses.dataclass(frozen=True)
class Event:
    """One cache or compile action.

    Attributes:
      time: wall-clock seconds since the epoch (``time.time()``).
      monotonic: ``time.monotonic()`` seconds, for ordering and intervals within one process.
      kind: one of :data:`KINDS`.
      name: function / HLO module name (e.g. ``"jit_train_step"``), or None when unknown.
      key: cache key, or None.
      duration_s: seconds the action took (see the kind table in the module docstring), or None.
      bytes: bytes involved (entry size on disk), or None.
      reason: human-readable explanation (why a miss, why skipped, what was corrupt), or None.
      partition: environment partition name, or None.
      source: ``"xlakit"`` for xlakit's own cache, ``"jax"`` for JAX's own signals.
      saved_s: for a hit, the entry's recorded compile seconds minus the measured load seconds, floored
        at 0 (never JAX's ``compile_time_saved_sec``, which is negative on CPU).
    """

    kind: str
    name: str | None = None
    key: str | None = None
    duration_s: float | None = None
    bytes: int | None = None
    reason: str | None = None
    partition: str | None = None
    source: str = "xlakit"
    saved_s: float | None = None
    time: float = dataclasses.field(default_factory=_time.time)
    monotonic: float = dataclasses.field(default_factory=_time.monotonic)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}; expected one of {', '.join(KINDS)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Observer = Callable[[Event], None]


class EventLog:
    """A bounded, thread-safe, observable list of :class:`Event`.

    Args:
      maxlen: the newest ``maxlen`` events are kept; older ones are dropped (counts in
        :func:`cache_stats` are kept separately and never dropped).
    """

    def __init__(self, maxlen: int = 100_000) -> None:
        self._events: collections.deque[Event] = collections.deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._observers: list[Observer] = []
        self._totals = _Totals()
        self.observer_errors: list[str] = []

    def append(self, event: Event) -> Event:
        """Add ``event``, update the running totals and notify every observer once.

        An observer that raises is removed from neither the log nor the program: its error is
        recorded on ``observer_errors`` so a broken widget never breaks a compile.
        """
        with self._lock:
            self._events.append(event)
            self._totals.add(event)
            observers = list(self._observers)
        for observer in observers:
            try:
                observer(event)
            except Exception as exc:  # noqa: BLE001 - a view must never break the program it watches
                self.observer_errors.append(f"{observer!r}: {type(exc).__name__}: {exc}")
        return event

    def emit(self, kind: str, **fields: Any) -> Event:
        """Create an :class:`Event` from keyword fields and append it."""
        return self.append(Event(kind=kind, **fields))

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(event)`` on every future append; returns a function that unsubscribes."""
        with self._lock:
            self._observers.append(observer)

        def unsubscribe() -> None:
            with self._lock:
                if observer in self._observers:
                    self._observers.remove(observer)

        return unsubscribe

    def events(self, kind: str | None = None, since: float | None = None) -> list[Event]:
        """A snapshot of the kept events, optionally of one kind and/or with ``monotonic >= since``."""
        with self._lock:
            snapshot = list(self._events)
        return [e for e in snapshot if (kind is None or e.kind == kind) and (since is None or e.monotonic >= since)]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def clear(self) -> None:
        """Forget all events and totals (for tests and notebooks)."""
        with self._lock:
            self._events.clear()
            self._totals = _Totals()

    def stats(self) -> CacheStats:
        """Totals since the log was created or cleared; see :class:`CacheStats`."""
        with self._lock:
            return self._totals.snapshot()

    def to_frame(self):
        """The kept events as a ``pandas.DataFrame``, one row per event, columns = :class:`Event` fields."""
        import pandas as pd

        rows = [e.to_dict() for e in self.events()]
        columns = [f.name for f in dataclasses.fields(Event)]
        return pd.DataFrame(rows, columns=columns)


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """Counts and seconds of cache activity in this process.

    Attributes:
      counts: events per kind (every kind in :data:`KINDS` present, 0 when none).
      compile_s: seconds XLA spent compiling programs that went through the cache (sum of ``compile``).
      load_s: seconds spent looking up and loading executables on hits (sum of ``hit`` durations).
      saved_s: seconds saved: over hits, the entry's recorded compile seconds minus the measured load
        seconds, each floored at 0 — so never negative by construction.
      stored_bytes: bytes written by ``store`` events.
    """

    counts: dict[str, int]
    compile_s: float
    load_s: float
    saved_s: float
    stored_bytes: int

    @property
    def hits(self) -> int:
        return self.counts["hit"]

    @property
    def misses(self) -> int:
        return self.counts["miss"]

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts, "compile_s": self.compile_s, "load_s": self.load_s, "saved_s": self.saved_s,
                "stored_bytes": self.stored_bytes}

    def to_frame(self):
        """One-row ``pandas.DataFrame`` of :meth:`to_dict`."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v)
        return (f"CacheStats({counts or 'no events'}; compile {self.compile_s:.3f} s, load {self.load_s:.3f} s, "
                f"saved {self.saved_s:.3f} s, stored {self.stored_bytes} bytes)")

    def _repr_html_(self) -> str:
        from html import escape

        cells = "".join(f"<tr><th style='text-align:left'>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
                        for k, v in self.to_dict().items())
        return f"<table>{cells}</table>"


class _Totals:
    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.compile_s = 0.0
        self.load_s = 0.0
        self.saved_s = 0.0
        self.stored_bytes = 0

    def add(self, e: Event) -> None:
        self.counts[e.kind] += 1
        if e.kind == "compile" and e.duration_s:
            self.compile_s += e.duration_s
        elif e.kind == "hit":
            self.load_s += e.duration_s or 0.0
            self.saved_s += max(0.0, e.saved_s or 0.0)
        elif e.kind == "store" and e.bytes:
            self.stored_bytes += e.bytes

    def snapshot(self) -> CacheStats:
        return CacheStats(dict(self.counts), self.compile_s, self.load_s, self.saved_s, self.stored_bytes)


_LOG = EventLog()


def log() -> EventLog:
    """The process-wide event log that xlakit's cache writes to."""
    return _LOG


def cache_stats() -> CacheStats:
    """Counts, compile/load seconds and seconds saved for this process; see :class:`CacheStats`."""
    return _LOG.stats()
