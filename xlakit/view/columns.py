"""The events a cache timeline shows, kept as columns: appended incrementally, bounded (counting what was
dropped), thread-safe, converted to numpy arrays only for the rows added since the last conversion."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from xlakit.events import KINDS, Event
from xlakit.view.lanes import combine_origin

__all__ = ["EventColumns"]

_NO_NAME = "(no name)"


class EventColumns:
    """The events a timeline shows, kept as columns (appended incrementally, bounded, thread-safe).

    Lanes (one per function name) are assigned on append in order of first appearance and never change.

    Args:
      maxlen: keep the newest ``maxlen`` events (int, default 100,000).

    Attributes:
      lanes: program name -> lane index. origins: program name -> ``"user"``/``"library"``/None over all
        its events (:func:`xlakit.view.lanes.combine_origin`). dropped: events dropped to stay within
        ``maxlen`` (int; the oldest go first).
    """

    FIELDS = ("time", "kind", "name", "source", "duration_s", "bytes", "key", "partition", "reason", "saved_s",
              "origin", "site")

    def __init__(self, maxlen: int = 100_000) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen}")
        self.maxlen = maxlen
        self.lanes: dict[str, int] = {}
        self.origins: dict[str, str | None] = {}
        self.dropped = 0
        self._cols: dict[str, list[Any]] = {f: [] for f in (*self.FIELDS, "lane")}
        self._lock = threading.Lock()
        self._arrays: dict[str, Any] | None = None
        self._cached_dropped = 0  # rows dropped since the arrays were converted

    def __len__(self) -> int:
        return len(self._cols["time"])

    def extend(self, events: Iterable[Event]) -> int:
        """Append events; returns how many."""
        n = 0
        with self._lock:
            cols, lanes, origins = self._cols, self.lanes, self.origins
            for e in events:
                name = e.name or _NO_NAME
                lane = lanes.get(name)
                if lane is None:
                    lane = lanes[name] = len(lanes)
                    origins[name] = e.origin
                elif e.origin is not None and origins[name] != "user":
                    origins[name] = combine_origin(origins[name], e.origin)
                for f in self.FIELDS:
                    cols[f].append(getattr(e, f))
                cols["name"][-1] = name
                cols["lane"].append(lane)
                n += 1
            extra = len(cols["time"]) - self.maxlen
            if extra > 0:
                self.dropped += extra
                self._cached_dropped += extra
                for f in cols:
                    del cols[f][:extra]
        return n

    def arrays(self) -> dict[str, Any]:
        """The columns as numpy arrays (numbers as float64, NaN = None; ``kind_code``: index in
        :data:`~xlakit.events.KINDS`, -1 for a kind this version does not know). The same object until the
        next append; an append converts only the new rows (a live redraw of 100,000 events stays cheap)."""
        import numpy as np

        with self._lock:
            c, old = self._cols, self._arrays
            total = len(c["time"])
            if old is not None:
                kept = old["time"].size - self._cached_dropped
                if kept == total and not self._cached_dropped:
                    return old
                if kept < 0:
                    old, kept = None, 0
            else:
                kept = 0
            new = self._convert(kept)  # rows before ``kept`` are old's, after its dropped head
            if old is not None:
                drop = self._cached_dropped
                new = {f: np.concatenate([old[f][drop:], new[f]]) for f in new}
            self._arrays, self._cached_dropped = new, 0
            return new

    def _convert(self, start: int) -> dict[str, Any]:
        import numpy as np

        c = self._cols
        nan = float("nan")
        out = {"time": np.asarray(c["time"][start:], dtype=float),
               "lane": np.asarray(c["lane"][start:], dtype=np.int64)}
        for f in ("duration_s", "bytes", "saved_s"):
            out[f] = np.asarray([nan if v is None else v for v in c[f][start:]], dtype=float)
        for f in ("kind", "name", "source", "key", "partition", "reason", "origin", "site"):
            column = np.empty(len(c[f]) - start, dtype=object)
            column[:] = c[f][start:]
            out[f] = column
        codes = {k: i for i, k in enumerate(KINDS)}
        out["kind_code"] = np.fromiter((codes.get(k, -1) for k in c["kind"][start:]), dtype=np.int64,
                                       count=len(c["kind"]) - start)
        return out
