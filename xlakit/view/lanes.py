"""Lanes of the cache timeline in the user's terms, and markers aggregated to what a screen can show.

* :func:`lane_plan`: the user's programs first, one lane each; every program whose events all came from
  inside jax/flax/optax/… (``Event.origin == "library"``, e.g. ``jit_broadcast_in_dim``) folded into one
  "library helpers" lane (its counts and seconds kept), or listed after the user's when unfolded. A program
  with no known origin (a hook that saw no Python stack) is shown as the user's: nothing is hidden on a guess.
* :func:`aggregate`: beyond ``max_points`` events, one marker per (group, time bin), the group being
  lane x kind and the bins at most one per screen pixel column (1,000 across the time range): the marker is
  the bin's slowest event (its row, so a click still explains a miss) and carries the bin's count and summed
  duration.

Pure numpy; shared by :mod:`xlakit.view.timeline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlakit.events import LIBRARY_ROW

__all__ = ["LIBRARY_LANE", "combine_origin", "lane_plan", "aggregate", "SCREEN_BINS"]

#: Name of the folded lane (followed by how many programs it holds); the summary's folded row has the same.
LIBRARY_LANE = LIBRARY_ROW
#: Time bins per group at most: about one per pixel column of a wide chart.
SCREEN_BINS = 1000


def combine_origin(previous: str | None, new: str | None) -> str | None:
    """A program's origin over its events: ``"user"`` if any event is the user's, else ``"library"`` if any
    is a library's, else None (unknown)."""
    if "user" in (previous, new):
        return "user"
    if "library" in (previous, new):
        return "library"
    return None


def lane_plan(names: Sequence[str], origins: Mapping[str, str | None], fold: bool) -> tuple[tuple[str, ...], Any,
                                                                                              tuple[str, ...]]:
    """How program lanes are shown.

    Args:
      names: program names by lane index (first appearance order).
      origins: program name -> ``"user"``/``"library"``/None (see :func:`combine_origin`).
      fold: fold the library programs into one lane.

    Returns:
      (display lane names, numpy int array mapping each program lane index to its display lane, the names of
      the library programs — folded into the last lane when ``fold``, else listed after the user's lanes).
    """
    import numpy as np

    user = [i for i, n in enumerate(names) if origins.get(n) != "library"]
    library = [i for i, n in enumerate(names) if origins.get(n) == "library"]
    mapping = np.zeros(len(names), dtype=np.int64)
    shown = [names[i] for i in user]
    mapping[user] = np.arange(len(user), dtype=np.int64)
    if fold and library:
        mapping[library] = len(user)
        shown.append(f"{LIBRARY_LANE} ({len(library)} program{'s' if len(library) != 1 else ''})")
    else:
        mapping[library] = np.arange(len(user), len(user) + len(library), dtype=np.int64)
        shown.extend(names[i] for i in library)
    return tuple(shown), mapping, tuple(names[i] for i in library)


def aggregate(x: Any, weight: Any, group: Any, max_points: int, *, screen_bins: int = SCREEN_BINS
              ) -> tuple[Any, Any, Any, Any, Any]:
    """Markers for at most about ``max_points`` events: every event when within budget, else one per (group,
    time bin).

    Bins split the whole time range evenly, ``min(screen_bins, max_points // groups)`` per group (at least
    one), so the markers of every lane line up in time.

    Args:
      x: event times (s, float array). weight: durations (s; NaN = 0) — a bin's marker is its largest.
      group: int group ids (lane x kind). max_points: the budget (int > 0).

    Returns:
      (rep, count, total, first, last): for each marker the row of its representative event (the bin's
      slowest; the last of equals), how many events it stands for, their summed weight, and the bin's
      earliest and latest time. Sorted by group, then time bin.
    """
    import numpy as np

    x = np.asarray(x, dtype=float)
    w = np.nan_to_num(np.asarray(weight, dtype=float), nan=0.0)
    n = x.size
    if n <= max_points:
        return np.arange(n), np.ones(n, dtype=np.int64), w, x, x
    inverse = _dense_ids(np.asarray(group))
    groups = int(inverse.max()) + 1
    bins = int(min(screen_bins, max(1, max_points // groups)))
    lo, hi = float(x.min()), float(x.max())
    b = np.zeros(n, dtype=np.int64) if hi <= lo else np.minimum(((x - lo) / (hi - lo) * bins).astype(np.int64),
                                                                bins - 1)
    code = inverse.astype(np.int64) * bins + b
    order = np.lexsort((w, code))  # by code, then weight: the last of each code is its slowest
    sorted_code = code[order]
    ends = np.flatnonzero(np.r_[sorted_code[1:] != sorted_code[:-1], True])
    starts = np.r_[0, ends[:-1] + 1]
    xs = x[order]
    return (order[ends], ends - starts + 1, np.add.reduceat(w[order], starts), np.minimum.reduceat(xs, starts),
            np.maximum.reduceat(xs, starts))


def _dense_ids(group: Any) -> Any:
    """Each group id's rank among the ids present (0, 1, …; what ``np.unique(..., return_inverse=True)``
    gives), by counting when the ids are small non-negative ints (lane x kind), else by sorting."""
    import numpy as np

    if group.dtype.kind in "iu" and group.size and int(group.min()) >= 0 and int(group.max()) < 4 * group.size + 4096:
        present = np.bincount(group) > 0
        return (np.cumsum(present) - 1)[group]
    return np.unique(group, return_inverse=True)[1].reshape(-1)
