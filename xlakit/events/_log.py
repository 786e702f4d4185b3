""":class:`EventLog`: a bounded, thread-safe, observable list of events with running totals."""

from __future__ import annotations

import collections
import dataclasses
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from xlakit._text.untrusted import html_text
from xlakit._units import _shown, check_choice, check_int
from xlakit.events import _calls, _jsonl
from xlakit.events._calls import CallDecision
from xlakit.events._model import KINDS, SOURCES, Event, _cell
from xlakit.events._origin import PROGRAM_KINDS, attribute
from xlakit.events._stats import CacheStats, Summary, Totals

__all__ = ["EventLog", "Observer"]

Observer = Callable[[Event], None]

_MAX_OBSERVER_ERRORS = 100


def _check_maxlen(maxlen: Any) -> int:
    """``maxlen`` if it is an int from 1 to 2**63-1 (a deque's largest bound; 2**64 raised a bare OverflowError)."""
    return check_int(maxlen, "maxlen", minimum=1, what="number of events")


def _check_time(t: Any, name: str, *, optional: bool = True) -> None:
    """A clock reading (seconds; None allowed when ``optional``): a real number, not NaN (which no event matches)."""
    if t is None and optional:
        return
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds (e.g. time.monotonic()){' or None' if optional else ''}, "
                        f"got {type(t).__name__} {_shown(t)}")
    if t != t:  # NaN (math.isnan would overflow on a 400-digit int, which is a valid if odd time)
        raise ValueError(f"{name} must be a number of seconds (e.g. time.monotonic()), got nan")


class EventLog:
    """A bounded, thread-safe, observable list of :class:`~xlakit.events.Event`.

    Appending is safe from any number of threads; each append updates the running totals and then calls
    every observer once, on the appending thread, outside the log's lock (an observer may read the log).

    Args:
      maxlen: the newest ``maxlen`` events are kept; older ones are dropped. The totals behind
        :meth:`stats` (and the Prometheus counters) are kept separately and never dropped.

    Attributes:
      dropped: events dropped so far to stay within ``maxlen`` (int, oldest first); ``dropped_kinds``: the
        same per kind (dict kind -> int). ``repr`` and the HTML view say so.
      observer_errors: ``"observer: ExcType: message"`` for the latest observer failures (at most 100).
        An observer that raises is neither removed nor allowed to break the program that appended.

    Raises:
      TypeError: ``maxlen`` is not an int. ValueError: ``maxlen`` < 1 or over 2**63-1 (what a deque holds).
    """

    def __init__(self, maxlen: int = 100_000) -> None:
        self._events: collections.deque[Event] = collections.deque(maxlen=_check_maxlen(maxlen))
        self._lock = threading.Lock()
        self._observers: list[Observer] = []
        self._totals = Totals()
        self.dropped = 0
        self.dropped_kinds: dict[str, int] = {}
        self.observer_errors: list[str] = []

    @property
    def maxlen(self) -> int:
        """How many events the log keeps (the newest)."""
        return self._events.maxlen  # type: ignore[return-value]

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, event: Event) -> Event:
        """Add ``event``, update the running totals and notify every observer once; returns ``event``.

        Raises:
          TypeError: ``event`` is not an :class:`Event` (the log is left as it was)."""
        if not isinstance(event, Event):  # kept, it broke summary(), to_frame() and save() for good
            raise TypeError(f"append(event) takes an xlakit.events.Event (make one with log.emit(kind, ...)), got "
                            f"{type(event).__name__}; nothing was added")
        with self._lock:
            if len(self._events) == self._events.maxlen:
                oldest = self._events[0].kind
                self.dropped += 1
                self.dropped_kinds[oldest] = self.dropped_kinds.get(oldest, 0) + 1
            self._events.append(event)
            self._totals.add(event)
            observers = self._observers  # replaced, never mutated, so this snapshot is stable
        for observer in observers:
            try:
                observer(event)
            except Exception as exc:  # noqa: BLE001 - a view must never break the program it watches
                with self._lock:
                    self.observer_errors.append(f"{observer!r}: {type(exc).__name__}: {exc}")
                    del self.observer_errors[:-_MAX_OBSERVER_ERRORS]
        return event

    def emit(self, kind: str, **fields: Any) -> Event:
        """Create an :class:`~xlakit.events.Event` from keyword fields and append it.

        An event of a program (trace, compile, hit, miss, store, ...) given no ``origin`` is attributed from
        the Python stack at this moment: ``origin`` ("user" / "library") and ``site`` (the first user frame),
        see :mod:`xlakit.events._origin`.

        Raises:
          TypeError: a field :class:`~xlakit.events.Event` does not have.
          ValueError: an unknown ``kind`` or ``source``.
        """
        if "origin" not in fields and kind in PROGRAM_KINDS:
            fields["origin"], site = attribute(fields.get("name"))
            fields.setdefault("site", site)
        return self.append(Event(kind=kind, **fields))

    def extend(self, events: Iterable[Event]) -> None:
        """Append each event in order (observers are notified for each).

        Raises:
          TypeError: an item that is not an :class:`Event` (checked before any is added)."""
        events = list(events)
        wrong = [e for e in events if not isinstance(e, Event)]
        if wrong:
            raise TypeError(f"extend(events) takes xlakit.events.Event objects, got a {type(wrong[0]).__name__}; "
                            "nothing was added")
        for e in events:
            self.append(e)

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(event)`` on every future append; returns a function that unsubscribes.

        Raises:
          TypeError: ``observer`` is not callable."""
        if not callable(observer):
            raise TypeError(f"subscribe(observer) takes a function of one event, got {type(observer).__name__}")
        with self._lock:
            self._observers = [*self._observers, observer]

        def unsubscribe() -> None:
            with self._lock:
                if observer in self._observers:
                    remaining = list(self._observers)
                    remaining.remove(observer)
                    self._observers = remaining

        return unsubscribe

    def clear(self) -> None:
        """Forget all events and totals (for tests and notebooks). Observers stay subscribed."""
        with self._lock:
            self._events.clear()
            self._totals = Totals()
            self.dropped = 0
            self.dropped_kinds = {}

    # -- reading ---------------------------------------------------------------------------------------
    def events(self, kind: str | None = None, since: float | None = None, *,
               source: str | None = None) -> list[Event]:
        """A snapshot of the kept events, oldest first.

        Args:
          kind: only events of this kind (see :data:`~xlakit.events.KINDS`).
          since: only events with ``monotonic >= since`` (seconds of ``time.monotonic()``).
          source: only events from this layer (see :data:`~xlakit.events.SOURCES`).

        Raises:
          TypeError / ValueError: a ``kind`` or ``source`` outside those sets (a misspelt one matched nothing), a
            ``since`` that is not a number.
        """
        check_choice(kind, "kind", KINDS)
        check_choice(source, "source", SOURCES)
        _check_time(since, "since")
        with self._lock:
            snapshot = list(self._events)
        return [e for e in snapshot
                if (kind is None or e.kind == kind) and (since is None or e.monotonic >= since)
                and (source is None or e.source == source)]

    def since(self, t: float, *, clock: str = "monotonic") -> EventLog:
        """A new log holding the kept events recorded at or after ``t``.

        Args:
          t: seconds on ``clock``.
          clock: ``"monotonic"`` (default; ``time.monotonic()``, this process only) or ``"wall"``
            (``time.time()``; use it for logs loaded from another process).

        Raises:
          ValueError: an unknown ``clock``, a NaN ``t``. TypeError: a ``t`` that is not a number.
        """
        check_choice(clock, "clock", ("monotonic", "wall"), optional=False)
        _check_time(t, "t", optional=False)
        if clock == "monotonic":
            picked = [e for e in self.events() if e.monotonic >= t]
        elif clock == "wall":
            picked = [e for e in self.events() if e.time >= t]
        else:
            raise ValueError(f"clock must be 'monotonic' or 'wall', got {clock!r}")
        out = EventLog(maxlen=self.maxlen)
        out.extend(picked)
        return out

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def __bool__(self) -> bool:
        # Always true, even when empty: callers write ``log or events.log()`` and must get *their* log.
        return True

    def stats(self, source: str | None = None) -> CacheStats:
        """Totals since the log was created or cleared; see :class:`~xlakit.events.CacheStats`.

        Args:
          source: one layer (:data:`~xlakit.events.SOURCES`), or None for all sources together. Misses at
            different layers are different events (a jit-cache miss followed by an xlakit miss counts two),
            so pass a source to look at one cache.

        Raises:
          ValueError: an unknown source. TypeError: a source that is not a string (``[1]`` was "unhashable type").
        """
        if source is not None and not isinstance(source, str):
            check_choice(source, "source", SOURCES)  # the TypeError; an unknown name is the snapshot's ValueError
        with self._lock:
            return self._totals.snapshot(source)

    def stats_by_source(self) -> dict[str, CacheStats]:
        """:meth:`stats` for every source, taken under one lock (a consistent snapshot)."""
        with self._lock:
            return {s: self._totals.snapshot(s) for s in SOURCES}

    def summary(self, fold_library: bool = True) -> Summary:
        """Per function and layer: counts per kind, compile/load/saved seconds; see :class:`~xlakit.events.Summary`.

        Args:
          fold_library: fold the programs of library code (JAX's helpers such as ``jit_broadcast_in_dim``,
            ``Event.origin == "library"``) into one ``"library helpers"`` row per layer, counts and seconds
            kept; False lists every function.
        """
        from xlakit._units import check_flag

        return Summary.of(self.events(), fold_library=check_flag(fold_library, "fold_library"))

    def last(self, fn: Any, since: float | None = None) -> CallDecision | None:
        """The latest decision for a jitted function: ``hit``, ``miss`` (with reason), ``compiled`` or
        ``recompiled`` (with what changed); see :class:`~xlakit.events.CallDecision`.

        Args:
          fn: the ``jax.jit`` object, the Python function it wraps, or its name (``"step"`` / ``"jit_step"``).
          since: only events at or after this ``time.monotonic()`` second; None when nothing happened since
            (a call JAX's in-process cache answered emits nothing).

        Returns:
          The decision, or None when the log holds no event of ``fn`` (since ``since``).

        Raises:
          TypeError: ``fn`` is neither a name nor a callable, or ``since`` is not a number. ValueError: ``since``
            ahead of ``time.monotonic()`` (a ``time.time()`` reading).
        """
        _check_time(since, "since")
        if since is not None and since > time.monotonic() + 1.0:  # time.time() passed: nothing would ever match
            raise ValueError(f"since={since!r} is ahead of time.monotonic() ({time.monotonic():.1f}): pass a "
                             "time.monotonic() reading taken before the call (not time.time())")
        return _calls.last(self.events(), fn, since)

    def recompiles(self):
        """The functions that recompiled in this log (a ``pandas.DataFrame``): :func:`xlakit.events.recompiles`."""
        return _calls.recompiles(self.events())

    def to_frame(self):
        """The kept events as a ``pandas.DataFrame``: one row per event, one column per Event field."""
        import pandas as pd

        rows = [e.to_dict() for e in self.events()]
        columns = [f.name for f in dataclasses.fields(Event)]
        return pd.DataFrame(rows, columns=columns)

    # -- persistence -----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, append: bool = False) -> int:
        """Write the kept events to ``path`` as JSON lines; returns how many were written.

        Without ``append`` the file is replaced atomically; with it the events are added to its end.

        Raises:
          OSError: the folder is missing or not writable (naming ``path``). IsADirectoryError: ``path`` is a
          folder. ValueError: an empty ``path``. TypeError: ``append`` not True or False.
        """
        from xlakit._units import check_flag, check_out_file

        check_flag(append, "append")  # "no" appended
        target = check_out_file(path, "save", "events.jsonl")
        try:
            return _jsonl.write(path, self.events(), append=append)
        except OSError as e:
            if str(target) in str(e):
                raise
            raise type(e)(e.errno, f"cannot write {target}: {e.strerror or e}") from e

    def save_trace(self, path: str | os.PathLike, *, pid: int | None = None,
                   process_name: str | None = None) -> Path:
        """Write the kept events as Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing).

        Compiles, loads, traces and lowers are complete events (``"ph": "X"``) in one lane per function
        (user programs first); hits, misses, stores, skips and recompiles are instant events (``"ph": "i"``)
        with their reason and key in ``args``; one process track. Timestamps are wall-clock microseconds,
        non-decreasing, so the file can be opened beside a ``jax.profiler`` trace. Format details:
        :mod:`xlakit.events._trace`.

        Args:
          pid: the process track's id (default: this process's id).
          process_name: the track's name (default ``"xlakit events (pid N)"``).

        Returns:
          The path written (replaced atomically).

        Raises:
          OSError: the folder is missing or not writable. IsADirectoryError: ``path`` is a folder. ValueError: an
          empty ``path``, or a ``pid`` that is not an int from 0 to 2**31 - 1.
        """
        from xlakit._units import check_out_file, is_int
        from xlakit.events._trace import write_trace

        if pid is not None and (not is_int(pid) or not 0 <= int(pid) < 2**31):
            raise ValueError(f"save_trace(pid=...) takes a process id, an int from 0 to 2**31 - 1 (or None for this "
                             f"process's), got {pid!r}"[:300])
        target = check_out_file(path, "save_trace", "events.trace.json")
        try:
            return write_trace(path, self.events(), pid=None if pid is None else int(pid), process_name=process_name)
        except OSError as e:
            if str(target) in str(e):
                raise
            raise type(e)(e.errno, f"cannot write {target}: {e.strerror or e}") from e

    @classmethod
    def load(cls, path: str | os.PathLike, maxlen: int | None = None) -> EventLog:
        """A new log with the events of a JSON-lines file written by :meth:`save`.

        A truncated last line (a crashed writer) is skipped with a :class:`RuntimeWarning`.

        Args:
          maxlen: the new log's bound (an int >= 1); default (None): large enough for every event in the file (at
            least 100,000).

        Raises:
          OSError: the file cannot be read.
          ValueError: a line other than the last is not an event, or no line is (the message names ``path:line``);
            a ``maxlen`` < 1 or over 2**63-1. TypeError: a ``maxlen`` that is not an int.
        """
        if maxlen is not None:
            _check_maxlen(maxlen)  # before reading: a bad bound must not cost a read of the whole file
        events = _jsonl.read(path)
        log = cls(maxlen=max(100_000, len(events)) if maxlen is None else maxlen)
        log.extend(events)
        return log

    # -- display ---------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        stats = self.stats()
        counts = ", ".join(f"{k}={v}" for k, v in stats.counts.items() if v)
        dropped = f", {self.dropped} older dropped" if self.dropped else ""
        return f"EventLog({len(self)} of at most {self.maxlen} events kept{dropped}; totals: {counts or 'none'})"

    def _repr_html_(self, limit: int = 20) -> str:
        events = self.events()[-limit:]
        columns = ["kind", "name", "source", "duration_s", "saved_s", "bytes", "reason"]
        head = "".join(f"<th>{html_text(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html_text(_cell(getattr(e, c)))}</td>" for c in columns) + "</tr>"
                       for e in events)
        return (f"<p>{html_text(repr(self))}; newest {len(events)} shown</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
