"""The :class:`Event` record and the closed sets of its ``kind`` and ``source`` values."""

from __future__ import annotations

import dataclasses
import time as _time
from typing import Any, cast

from xlakit._text.untrusted import html_text, terminal_text

__all__ = ["KINDS", "FLEET_KINDS", "SOURCES", "CACHE_SOURCES", "FAILURE_KINDS", "Event"]

#: Every ``Event.kind``, in the order tables and frames list them. See the table in :mod:`xlakit.events`.
KINDS = ("hit", "miss", "compile", "store", "skip", "corrupt", "evict", "load_error", "store_error", "trace",
         "lower", "remote_hit", "remote_miss", "upload", "upload_error", "claim", "wait", "recompile", "set_aside")

#: Kinds of a shared (remote) tier and of coordination across processes; their seconds and bytes are summed
#: per kind (:attr:`xlakit.events.CacheStats.fleet_s`, ``fleet_bytes``).
FLEET_KINDS = ("remote_hit", "remote_miss", "upload", "upload_error", "claim", "wait")

#: Every ``Event.source`` (a closed set): which layer or hook an event came from.
#:
#: ``xlakit``         xlakit's own executable store (transparent mode, ExecutableCache, bundles, memory)
#: ``jax-persistent`` JAX's own persistent compilation cache (``jax_compilation_cache_dir``)
#: ``jit``            JAX's in-process tracing/jit cache (misses only, with ``jax_explain_cache_misses``)
#: ``jax``            JAX's compile pipeline as measured by ``jax.monitoring``: trace, lower, compile
SOURCES = ("xlakit", "jax-persistent", "jit", "jax")

#: The three cache layers (the sources whose hits and misses are cache lookups).
CACHE_SOURCES = ("xlakit", "jax-persistent", "jit")

#: Kinds that mean a cache could not do its job (counted as failures by the metrics).
FAILURE_KINDS = ("corrupt", "load_error", "store_error")

_KIND_SET = frozenset(KINDS)
_SOURCE_SET = frozenset(SOURCES)


@dataclasses.dataclass(frozen=True)
class Event:
    """One cache or compile action.

    Attributes:
      kind: one of :data:`KINDS`.
      name: function / HLO module name (e.g. ``"jit_train_step"``), or None when unknown. JAX's own signals
        are given the module name JAX compiles under (``jit(f)`` becomes ``jit_f``), so one function has
        one name on every layer.
      key: cache key, or None.
      duration_s: seconds the action took (see the kind table in :mod:`xlakit.events`), or None.
      bytes: bytes involved (entry size on disk), or None when the producer does not know.
      reason: human-readable explanation (why a miss, why skipped, what was corrupt), or None.
      partition: xlakit environment partition name, or None.
      source: one of :data:`SOURCES` — the layer the event belongs to.
      saved_s: for a hit, the entry's recorded compile seconds minus the measured load seconds, floored
        at 0 (never JAX's ``compile_time_saved_sec``, which is negative on CPU); None otherwise.
      folder: the xlakit cache folder that answered (``str``), or None (JAX's own layers, no store).
      memory: for an xlakit ``store`` or ``hit``, the program's compiled memory as recorded at compile time
        (``get_compiled_memory_stats()`` field -> bytes); None otherwise or when the backend reports none.
      origin: ``"user"`` when the program was traced or called from user code, ``"library"`` when every frame
        up to it is inside jax/flax/optax/… (JAX's own helpers such as ``jit_broadcast_in_dim``), None when
        unknown (an event from a hook that sees no Python stack). The rule is :mod:`xlakit._sources`'.
      site: the first user frame as text (``train.py:42 (train_step)``, ``cell [7], line 3 (step)``), or None.
      changes: for a ``recompile``, what differs from the closest signature of the function already compiled
        in this process (fewest differing attributes, the latest on a tie; :mod:`xlakit._jax.retrace`): one dict
        per change with ``what`` ("shape", "dtype", "weak_type", "sharding", "static", "structure", "config",
        "function", "passed": positional vs keyword),
        ``path`` (argument path such as ``x`` or ``batch['image']``, or the config name), ``before`` and
        ``after`` (text), and ``seen: "yes"`` when ``after`` was compiled before with other arguments (only
        the combination is new); None otherwise.
      time: wall-clock seconds since the epoch (``time.time()``) when the event was recorded — for an
        action with a duration, its end.
      monotonic: ``time.monotonic()`` seconds at the same moment, for ordering and intervals within one
        process (meaningless across processes; compare ``time`` there).

    Raises:
      ValueError: on construction, for a ``kind`` or ``source`` outside the closed sets.
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
    folder: str | None = None
    memory: dict[str, int] | None = None
    origin: str | None = None
    site: str | None = None
    changes: list[dict[str, str]] | None = None
    time: float = dataclasses.field(default_factory=_time.time)
    monotonic: float = dataclasses.field(default_factory=_time.monotonic)

    def __post_init__(self) -> None:
        if self.kind not in _KIND_SET:
            raise ValueError(f"unknown event kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.source not in _SOURCE_SET:
            raise ValueError(f"unknown event source {self.source!r}; expected one of {', '.join(SOURCES)}")
        # Appended first, a string failed in the log's totals: refused; a NaN or infinity is "not measured" (None)
        for field in ("duration_s", "saved_s", "bytes"):
            value: Any = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, _FIELD_TYPES[field]):
                raise TypeError(f"event field {field!r} must be {' or '.join(t.__name__ for t in _FIELD_TYPES[field])} "
                                f"or None, got {type(value).__name__}")
            if value != value or value in (float("inf"), float("-inf")):  # NaN ended the log's load total for good
                object.__setattr__(self, field, None)  # not measured (a producer's NaN never fails its caller)
            elif abs(number := cast(Any, value)) >= 2**63 or (number < 0 and field != "saved_s"):  # saved_s: may be < 0
                raise ValueError(f"event field {field!r} must be {'' if field == 'saved_s' else '0 or more and '}"
                                 f"below 2**63 in size, got {value!r}"[:200])

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        """The inverse of :meth:`to_dict`.

        Raises:
          ValueError: a field this version does not know, a missing ``kind``, or an unknown kind/source.
        """
        unknown = set(data) - _FIELD_NAMES
        if unknown:
            raise ValueError(f"unknown event field(s) {', '.join(sorted(unknown))}")
        if "kind" not in data:
            raise ValueError("an event needs a 'kind'")
        for field, types in _FIELD_TYPES.items():  # a log file is untrusted: wrong types fail here, not in a repr
            value = data.get(field)
            if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
                raise ValueError(f"event field {field!r} must be {' or '.join(t.__name__ for t in types)} or null, "
                                 f"got {type(value).__name__}")
        return cls(**data)

    def __repr__(self) -> str:
        parts = [f"{self.kind} {self.name or '?'} [{self.source}]"]
        if self.duration_s is not None:
            parts.append(f"{self.duration_s:.4f} s")
        if self.saved_s is not None:
            parts.append(f"saved {self.saved_s:.4f} s")
        if self.bytes is not None:
            parts.append(f"{self.bytes} bytes")
        if self.key:
            parts.append(f"key {_short(self.key)}")
        if self.reason:
            reason = " ".join(self.reason.split())  # JAX's explanations span lines; a repr is one line
            parts.append(f"reason: {reason if len(reason) <= 80 else reason[:77] + '...'}")
        return terminal_text(f"Event({', '.join(parts)})")  # names and reasons come from logs and manifests

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html_text(k)}</th><td>{html_text(_cell(v))}</td></tr>"
                       for k, v in self.to_dict().items())
        return f"<table>{rows}</table>"


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Event))
_NUMBER = (int, float)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,), "name": (str,), "key": (str,), "reason": (str,), "partition": (str,), "source": (str,),
    "folder": (str,), "origin": (str,), "site": (str,), "duration_s": _NUMBER, "saved_s": _NUMBER,
    "time": _NUMBER, "monotonic": _NUMBER, "bytes": (int,), "memory": (dict,), "changes": (list,)}


def _short(key: str) -> str:
    """``jit_f-3361bd79...`` keys are long; the module name plus 8 hex digits identify one in a listing."""
    return key if len(key) <= 24 else key[:24] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)
