"""The outcome of one cache lookup or publish, as a value: :class:`Decision`.

Every path that reads or writes xlakit's store — transparent mode, :class:`~xlakit.cache.ExecutableCache`,
bundles — goes through :class:`xlakit.cache.path.CachePath`, which returns a Decision *and* records the same
facts as an :class:`~xlakit.events.Event`. Callers act on the value; the event log is for people and widgets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlakit._record import Record

__all__ = ["Decision", "DECISION_KINDS"]

#: hit: loaded from the store. miss: nothing usable (``reason`` says why). store: published. skip: compiled
#: but deliberately not stored (``reason`` names the rule). corrupt: an entry failed its integrity or
#: authenticity check and was quarantined. store_error / load_error: the store or XLA failed; the program
#: still runs (compiled).
DECISION_KINDS = ("hit", "miss", "store", "skip", "corrupt", "store_error", "load_error")


class _DecisionFields(Record):
    kind: str
    reason: str | None = None
    key: str | None = None
    name: str | None = None
    partition: str | None = None
    folder: str | None = None
    bytes: int | None = None
    load_s: float | None = None
    compile_s: float | None = None
    saved_s: float | None = None
    memory: Mapping[str, int] | None = None
    loadable: bool = False
    header: Mapping[str, Any] | None = None


class Decision(_DecisionFields):
    """What the cache did for one program (an immutable value; ``kind`` is checked when it is made).

    Attributes:
      kind: one of :data:`DECISION_KINDS`.
      reason: why (a miss, skip, failure), or None.
      key: the cache key (``jit_f-<sha256 hex>``), or None when it could not be computed.
      name: HLO module name (``jit_f``), or ``bundle/stem`` for bundles.
      partition: environment partition folder name, or None.
      folder: the cache folder (``str``), so consumers know which store answered.
      bytes: entry size on disk (store) or payload bytes (hit), or None.
      load_s: seconds to read, verify and load (hit), or to look up (miss).
      compile_s: XLA compile seconds (measured now on a store, recorded in the entry on a hit), or None.
      saved_s: for a hit, ``compile_s - load_s`` floored at 0; None otherwise.
      memory: compiled memory (``get_compiled_memory_stats()`` field -> bytes), from the compile or the
        entry header; None when the backend reports none.
      loadable: the entry holds the JAX-level executable (placeable on other devices by
        :meth:`ExecutableCache.load`).
      header: the entry's authenticated header (hit, store), else None. Not shown in the repr.

    Raises:
      ValueError: ``kind`` is not one of :data:`DECISION_KINDS`.
    """

    __slots__ = ()

    def __new__(cls, kind: str, *args: Any, **fields: Any) -> Decision:
        if kind not in DECISION_KINDS:
            raise ValueError(f"unknown decision kind {kind!r}; expected one of {', '.join(DECISION_KINDS)}")
        return super().__new__(cls, kind, *args, **fields)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields[:-1], self, strict=False))
        return f"Decision({shown})"

    @property
    def duration_s(self) -> float | None:
        """Seconds of the action: load seconds for a hit or miss, compile seconds otherwise (as events say)."""
        return self.load_s if self.kind in ("hit", "miss", "corrupt", "load_error") else self.compile_s

    @property
    def source(self) -> str:
        """Always ``"xlakit"``: decisions come from xlakit's store (the same field as :class:`Event`'s)."""
        return "xlakit"

    def replace(self, **changes: Any) -> Decision:
        """A copy with ``changes`` applied (checked as a new decision is)."""
        return Decision(**{**self._asdict(), **changes})
