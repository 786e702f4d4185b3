"""Chrome trace-event JSON of an event log, for ui.perfetto.dev and chrome://tracing.

Format (the "JSON Object Format" of Chrome's Trace Event Format):

* ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``;
* one process track (``pid``) with a ``process_name`` metadata event (``"ph": "M"``), one lane (``tid``) per
  function with a ``thread_name`` and a ``thread_sort_index`` (user programs first, library programs after);
* actions with a duration — ``compile``, ``trace``, ``lower``, the load of a ``hit``, ``remote_hit``,
  ``claim``, ``wait`` — are complete events (``"ph": "X"``, ``ts`` = start, ``dur``);
* lookups and decisions — ``hit``, ``miss``, ``store``, ``skip``, ``recompile``, ``evict``, failures, ... —
  are instant events (``"ph": "i"``, scope ``"t"``), with ``reason``, ``key`` and the other fields in ``args``.

Timestamps are microseconds on the wall clock (``Event.time``), made monotonic with ``Event.monotonic``
within the log, so the file sits beside a ``jax.profiler`` trace of the same run; every number is finite.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xlakit.events._model import Event

__all__ = ["trace_events", "write_trace", "SPAN_KINDS"]

#: Kinds drawn as complete events (their ``duration_s`` ends at ``Event.time``).
SPAN_KINDS = ("compile", "trace", "lower", "hit", "remote_hit", "claim", "wait")
_SPAN_NAMES = {"hit": "load (hit)", "remote_hit": "remote load (hit)"}
_ARG_FIELDS = ("source", "reason", "key", "bytes", "saved_s", "partition", "folder", "origin", "site")
_NO_NAME = "(no name)"


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _clock(events: Sequence[Event]) -> list[float]:
    """Microseconds per event: the first event's wall-clock time plus monotonic seconds since it, made
    non-decreasing in log order (a clock that stepped back never reorders the file)."""
    if not events:
        return []
    base_wall = _finite(events[0].time) or 0.0
    base_mono = _finite(events[0].monotonic)
    out: list[float] = []
    previous = -math.inf
    for e in events:
        mono = _finite(e.monotonic)
        if base_mono is not None and mono is not None:
            t = base_wall + (mono - base_mono)
        else:
            t = _finite(e.time) or base_wall
        us = max(round(t * 1e6, 3), previous)
        out.append(us)
        previous = us
    return out


def _args(e: Event) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for field in _ARG_FIELDS:
        value = getattr(e, field)
        if isinstance(value, float):
            value = _finite(value)
        if value is not None:
            args[field] = value
    if e.changes:
        args["changes"] = [dict(c) for c in e.changes]
    return args


def trace_events(events: Sequence[Event], *, pid: int | None = None,
                 process_name: str | None = None) -> dict[str, Any]:
    """The trace-event document (a JSON-serialisable dict) for ``events`` (oldest first).

    Args:
      pid: the process track's id (default: this process's id).
      process_name: the track's name (default ``"xlakit events (pid N)"``).
    """
    pid = os.getpid() if pid is None else int(pid)
    ordered = sorted(events, key=lambda e: (_finite(e.monotonic) or 0.0))
    stamps = _clock(ordered)
    lanes: dict[str, int] = {}
    origin: dict[str, str | None] = {}
    body: list[dict[str, Any]] = []
    for e, end_us in zip(ordered, stamps, strict=True):
        lane = e.name or _NO_NAME
        tid = lanes.setdefault(lane, len(lanes) + 1)
        if origin.get(lane) is None:
            origin[lane] = e.origin
        args = _args(e)
        duration = _finite(e.duration_s)
        if e.kind in SPAN_KINDS and duration is not None and duration >= 0:
            dur_us = round(duration * 1e6, 3)
            body.append({"name": _SPAN_NAMES.get(e.kind, e.kind), "cat": e.kind, "ph": "X", "pid": pid, "tid": tid,
                         "ts": max(0.0, round(end_us - dur_us, 3)), "dur": dur_us, "args": args})
        if e.kind not in SPAN_KINDS or e.kind in ("hit", "remote_hit") or duration is None:
            body.append({"name": e.kind, "cat": e.kind, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": end_us,
                         "args": args})
    body.sort(key=lambda ev: ev["ts"])
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
                                   "args": {"name": process_name or f"xlakit events (pid {pid})"}}]
    rank = {"user": 0, None: 1, "library": 2}
    order = sorted(lanes, key=lambda n: (rank.get(origin.get(n), 1), lanes[n]))
    for index, lane in enumerate(order):
        tid = lanes[lane]
        label = f"{lane} [library]" if origin.get(lane) == "library" else lane
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": {"name": label}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
                     "args": {"sort_index": index}})
    return {"traceEvents": meta + body, "displayTimeUnit": "ms",
            "otherData": {"producer": "xlakit", "events": len(ordered), "clock": "wall-clock microseconds"}}


def write_trace(path: str | os.PathLike, events: Sequence[Event], **options: Any) -> Path:
    """Write :func:`trace_events` to ``path`` (replaced atomically); returns the path.

    Raises:
      OSError: the folder is missing or not writable.
    """
    from xlakit import _atomic

    data = json.dumps(trace_events(events, **options), allow_nan=False, separators=(",", ":")).encode()
    return _atomic.write_atomic(Path(path).expanduser(), data)
