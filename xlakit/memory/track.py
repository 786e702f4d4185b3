"""Track a block: device memory before, after and at the peak inside, and the memory of every program compiled.

    with xlakit.memory.track() as t:
        state = train_step(state, batch)
    t.report()      # one row per program compiled or loaded inside, with its compiled memory
    t.devices()     # one row per device: bytes in use before/after, peak inside

Where the programs come from, and the limitation:

* JAX announces every XLA compile through ``jax.monitoring`` (``/jax/core/compile/backend_compile_duration``,
  with the function name and seconds) but hands out no executable, so a compile seen only there has a name
  and seconds and **no byte breakdown**.
* When xlakit's cache answers JAX's compiles (``xlakit.enable_cache()`` or an ``ExecutableCache``), every
  compile is stored with its ``get_compiled_memory_stats()`` in the entry header, and every load is a hit
  on such an entry. The ``store`` and ``hit`` events on :func:`xlakit.events.log` carry those figures
  (``Event.memory``) and the cache folder (``Event.folder``), so those programs come with their bytes and
  nothing is read back from disk. A program compiled but not stored (a ``skip``: host callbacks, under the
  minimum compile time) has no bytes.
* :meth:`Tracker.add` attaches the breakdown of any program you have in hand (a Compiled, or a function
  with example arguments).

In-process jit cache hits (a function called again with the same shapes) compile nothing and emit nothing,
so they do not appear: only compiles and cache loads inside the block do.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory.compiled import CompiledMemory, compiled_memory

__all__ = ["track", "Tracker", "TrackedProgram"]

_COMPILE_METRIC = "/jax/core/compile/backend_compile_duration"
_MEMORY_COLUMNS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes",
                   "peak_bytes", "footprint_bytes")


@dataclasses.dataclass(frozen=True)
class TrackedProgram:
    """A program compiled or loaded inside a tracked block.

    name: HLO module name (``jit_f``). event: ``compile`` (XLA compiled it), ``hit`` (loaded from xlakit's
    cache) or ``added`` (:meth:`Tracker.add`). compile_s: compile seconds (JAX's measurement) or None.
    key: the cache key, when xlakit's cache saw it. memory: its :class:`CompiledMemory`, or None with
    ``note`` saying why.
    """

    name: str | None
    event: str
    compile_s: float | None
    key: str | None
    memory: CompiledMemory | None
    note: str | None = None


def _module_name(fun_name: str) -> str:
    """``jit(f)`` -> ``jit_f``, ``jit(<lambda>)`` -> ``jit__lambda``: the module name JAX compiles under (as
    ``jax._src.interpreters.mlir.sanitize_name`` makes it, trailing ``_`` dropped), which xlakit's events use."""
    return re.sub(r"[^\w.-]", "_", fun_name).rstrip("_") or fun_name


class Tracker:
    """The record of one :func:`track` block (see the module docstring). Read it after the block ends.

    Attributes:
      before, after: :class:`~xlakit.memory.AllocatorStatsList` at entry and exit (one per device).
      reset: the :class:`~xlakit.memory.ResetResult` of the reset at entry (None with ``reset=False``).
      programs: tuple of :class:`TrackedProgram`, in the order they happened.
      seconds: wall time of the block.
    """

    def __init__(self, reset: bool = True) -> None:
        self._reset_wanted = reset
        self.before: Any = None
        self.after: Any = None
        self.reset: Any = None
        self.seconds: float | None = None
        self._lock = threading.Lock()
        self._xla: list[tuple[str, Any]] = []  # (kind, event) from xlakit's log
        self._jax: list[tuple[str, float]] = []  # (module name, seconds) from jax.monitoring
        self._added: list[TrackedProgram] = []
        self._programs: tuple[TrackedProgram, ...] | None = None
        self._unsubscribe: Any = None
        self._start = 0.0

    # -- recording ------------------------------------------------------------------------------------
    def _on_event(self, event: Any) -> None:
        if getattr(event, "source", None) != "xlakit" or event.kind not in ("compile", "store", "hit", "skip"):
            return
        with self._lock:
            self._xla.append((event.kind, event))

    def _on_duration(self, name: str, seconds: float, **kwargs: Any) -> None:
        if name == _COMPILE_METRIC:
            with self._lock:
                self._jax.append((_module_name(str(kwargs.get("fun_name", "?"))), float(seconds)))

    def __enter__(self) -> Tracker:
        import jax

        from xlakit import events
        from xlakit.memory.allocator import allocator_stats, reset_peak

        self.before = allocator_stats()
        self.reset = reset_peak() if self._reset_wanted else None
        self._unsubscribe = events.log().subscribe(self._on_event)
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)  # type: ignore[arg-type]
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        import jax

        from xlakit.memory.allocator import allocator_stats

        self.seconds = time.perf_counter() - self._start
        jax.monitoring.unregister_event_duration_listener(self._on_duration)  # type: ignore[arg-type]
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.after = allocator_stats()

    def add(self, program: Any, /, *args: Any, **kwargs: Any) -> CompiledMemory:
        """Attach the compiled memory of ``program`` (anything :func:`~xlakit.memory.compiled_memory` takes;
        positional only: every keyword is the function's)."""
        memory = compiled_memory(program, *args, **kwargs)
        with self._lock:
            self._added.append(TrackedProgram(memory.name, "added", None, None, memory))
            self._programs = None
        return memory

    # -- results --------------------------------------------------------------------------------------
    @property
    def programs(self) -> tuple[TrackedProgram, ...]:
        if self._programs is None:
            self._programs = self._resolve()
        return self._programs

    def _resolve(self) -> tuple[TrackedProgram, ...]:
        with self._lock:
            xla, jax_compiles, added = list(self._xla), list(self._jax), list(self._added)
        out: list[TrackedProgram] = []
        seen_compiles: dict[str, int] = {}
        pending: dict[str, int] = {}  # key -> index in out of a compile waiting for its store/skip
        for kind, event in xla:
            if kind in ("compile", "hit"):  # JAX's compile-step duration fires for both
                seen_compiles[event.name] = seen_compiles.get(event.name, 0) + 1
            if kind == "compile":
                pending[event.key] = len(out)
                out.append(TrackedProgram(event.name, "compile", event.duration_s, event.key, None,
                                          "compiled; not stored"))
                continue
            if kind == "skip":
                i = pending.pop(event.key, None)
                if i is not None:
                    out[i] = dataclasses.replace(
                        out[i], note=f"not stored ({event.reason}), so no memory stats were recorded")
                continue
            memory, note = self._event_memory(event)
            if kind == "store":
                i = pending.pop(event.key, None)
                if i is not None:
                    out[i] = dataclasses.replace(out[i], memory=memory, note=note)
                    continue
                out.append(TrackedProgram(event.name, "compile", None, event.key, memory, note))
            else:  # hit
                out.append(TrackedProgram(event.name, "hit", None, event.key, memory, note))
        for name, seconds in jax_compiles:
            if seen_compiles.get(name, 0) > 0:
                seen_compiles[name] -= 1  # the same compile step, already recorded by xlakit's cache
                continue
            out.append(TrackedProgram(name, "compile", seconds, None, None,
                                      "seen by jax.monitoring only: no executable handed out; enable xlakit's "
                                      "cache or use Tracker.add() for its bytes"))
        return tuple(out + added)

    @staticmethod
    def _event_memory(event: Any) -> tuple[CompiledMemory | None, str | None]:
        """The compiled memory a ``store`` / ``hit`` event carries (recorded at compile time)."""
        figures = getattr(event, "memory", None)
        if not figures:
            return None, "the cache recorded no compiled memory for this program (the backend reports none)"
        try:
            platform = (event.partition or "").split("-", 1)[0] or None  # partitions start with the platform
            return compiled_memory({"name": event.name, "memory": dict(figures),
                                    "environment": {"platform": platform}}), None
        except (TypeError, ValueError) as exc:
            return None, str(exc)

    def report(self):
        """One row per program compiled or loaded inside the block (``pandas.DataFrame``).

        Columns: name, event (compile / hit / added), compile_s, key, the byte fields of
        :class:`~xlakit.memory.CompiledMemory` (argument_bytes, output_bytes, alias_bytes, temp_bytes,
        generated_code_bytes, peak_bytes, footprint_bytes; nullable Int64, <NA> = not known), memory_source,
        note. ``attrs["devices"]`` holds :meth:`devices`.
        """
        import pandas as pd

        rows = []
        for p in self.programs:
            m = p.memory
            rows.append({"name": p.name, "event": p.event, "compile_s": p.compile_s, "key": p.key,
                         **{c: getattr(m, c) if m else None for c in _MEMORY_COLUMNS},
                         "memory_source": m.source if m else None, "note": p.note})
        frame = pd.DataFrame(rows, columns=["name", "event", "compile_s", "key", *_MEMORY_COLUMNS,
                                            "memory_source", "note"])
        for c in _MEMORY_COLUMNS:
            frame[c] = frame[c].astype("Int64")
        if self.after is not None:
            frame.attrs["devices"] = self.devices()
        return frame

    def devices(self):
        """One row per device: bytes_in_use before and after, the change, the peak inside the block
        (``peak_since_reset_bytes`` of the exit stats), whether it is exact, the reset method, and for CPU
        the process resident high-water mark inside.

        Raises:
          RuntimeError: the block has not ended yet.
        """
        import pandas as pd

        if self.before is None or self.after is None:
            raise RuntimeError("the tracked block has not ended yet; read the tracker after the with-block")
        before = {s.device: s for s in self.before}
        rows = []
        for s in self.after:
            b = before.get(s.device)
            in_before = b.bytes_in_use if b else None
            rows.append({"device": s.device, "bytes_in_use_before": in_before, "bytes_in_use_after": s.bytes_in_use,
                         "change_bytes": None if in_before is None or s.bytes_in_use is None
                         else s.bytes_in_use - in_before,
                         "peak_inside_bytes": s.peak_since_reset_bytes, "peak_exact": s.peak_since_reset_exact,
                         "reset_method": s.reset_method})
        frame = pd.DataFrame(rows)
        for c in ("bytes_in_use_before", "bytes_in_use_after", "change_bytes", "peak_inside_bytes"):
            frame[c] = frame[c].astype("Int64")
        return frame

    def __repr__(self) -> str:
        if self.after is None:
            return "Tracker(running)" if self.before is not None else "Tracker(not started)"
        peaks = ", ".join(f"{s.device} peak {fmt_bytes(s.peak_since_reset_bytes)}" for s in self.after)
        known = sum(1 for p in self.programs if p.memory is not None)
        return (f"Tracker({self.seconds:.3f} s; {len(self.programs)} program(s), {known} with memory; {peaks})")

    def _repr_html_(self) -> str:
        if self.after is None:
            return html_table([("state", "running" if self.before is not None else "not started")], "Tracker")
        return (html_table([("seconds", f"{self.seconds:.3f}"), ("programs", len(self.programs))], "Tracker")
                + self.devices().to_html(index=False) + self.report().to_html(index=False))


def track(*, reset: bool = True) -> Tracker:
    """A context manager recording memory around a block; see the module docstring.

    Args:
      reset: reset the memory peak on entry (:func:`~xlakit.memory.reset_peak`) so the peak inside is the
        block's own. With False the exit stats carry whatever the last reset was.

    Returns:
      A :class:`Tracker` (use it in a ``with`` statement).
    """
    from xlakit._units import check_flag

    return Tracker(reset=check_flag(reset, "reset"))
