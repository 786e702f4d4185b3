"""One row of a bundle load's report: :class:`ModuleReport`. No JAX here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ModuleReport", "REPORT_COLUMNS"]

REPORT_COLUMNS = ("module", "variant", "batch_size", "status", "load_s", "compile_s", "module_bytes",
                  "program_bytes", "argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes", "reason")

_MEMORY_COLUMNS = ("argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes")
_FROM_MEMORY = object()  # a memory column not given: computed from ModuleReport.memory on first read


class _MemoryColumn:
    """A compiled-memory column of :class:`ModuleReport` (a dataclass field whose default is this descriptor).

    Given explicitly (positionally or by name), it holds that value; left out, it is computed from the
    report's raw ``memory`` mapping when first read (``to_dict()``, ``report()``, the attribute), so loading
    a program does not pay for :func:`xlakit.memory.compiled_memory` (measured: ~50 µs per program)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return _FROM_MEMORY  # the dataclass default
        value = obj.__dict__.get(self.slot, _FROM_MEMORY)
        if value is _FROM_MEMORY:
            value = obj.__dict__[self.slot] = _memory_columns(obj.memory).get(self.name)
        return value

    def __set__(self, obj: Any, value: Any) -> None:  # only the dataclass __init__ gets here (frozen)
        obj.__dict__[self.slot] = value


def _memory_columns(memory: Mapping[str, Any] | None) -> dict[str, int | None]:
    """The four columns from a cache header's ``memory`` field (XLA's CompiledMemoryStats as recorded at
    compile time), via :func:`xlakit.memory.compiled_memory`; {} when absent or malformed."""
    if not memory:
        return {}
    try:
        from xlakit.memory.compiled import compiled_memory

        m = compiled_memory({"memory": dict(memory)})
    except Exception:  # noqa: BLE001 - a malformed memory field costs the columns, not the load
        return {}
    return {"argument_bytes": m.argument_bytes, "output_bytes": m.output_bytes, "temp_bytes": m.temp_bytes,
            "footprint_bytes": m.footprint_bytes}


@dataclass(frozen=True, repr=False)  # (its own __repr__ below; not generated only to be discarded)
class ModuleReport:
    """How one module was loaded.

    Attributes:
      module: file name (``model.b8.jaxexp``); variant, batch_size: what it computes (``batch_size``
        None for the shape-polymorphic module itself).
      status: ``"hit"`` (loaded from ``.cache``), ``"miss"`` (compiled now and stored) or ``"error"``.
      load_s: seconds spent reading and hashing the module file, looking it up and, on a hit, loading the
        executable (``time.perf_counter``); on a miss also deserializing the export and checking it.
      compile_s: seconds lowering and compiling on a miss (``time.perf_counter``); None on a hit or error.
      module_bytes: size of the module file; None when it is missing.
      program_bytes: on a hit, the compressed size of the stored program (envelope header ``payload_bytes``);
        on a miss, the size of the entry written to ``.cache`` (envelope included); both come from the cache's
        :class:`~xlakit.cache.decision.Decision`. None when no program was stored or loaded.
      argument_bytes, output_bytes, temp_bytes, footprint_bytes: compiled memory per run
        (:class:`xlakit.memory.CompiledMemory`: XLA's ``CompiledMemoryStats``, recorded when compiled);
        None where not reported. When not given, computed from ``memory`` on first read.
      key: the program's store key; None when the module could not be read.
      reason: why a miss (no program, corrupt entry, load failure) or the error; None on a hit.
      warmup_s: seconds of the one run on zeros with ``load_bundle(..., warmup=True)``
        (:func:`xlakit._jax.warmup.warm_up`); None when not (yet) warmed up. Not a report column.
      warmup_error: why that run failed (the program still works; its first call pays the first-run cost);
        None otherwise. Not a report column.
      memory: the entry header's raw ``memory`` mapping (XLA's CompiledMemoryStats fields), from which the
        four memory columns are computed when read; None when no program was stored or loaded. Not a report
        column, not in :meth:`to_dict`, not compared.
    """

    module: str
    variant: str
    batch_size: int | None
    status: str
    load_s: float
    compile_s: float | None = None
    module_bytes: int | None = None
    program_bytes: int | None = None
    argument_bytes: int | None = _MemoryColumn()  # type: ignore[assignment]
    output_bytes: int | None = _MemoryColumn()  # type: ignore[assignment]
    temp_bytes: int | None = _MemoryColumn()  # type: ignore[assignment]
    footprint_bytes: int | None = _MemoryColumn()  # type: ignore[assignment]
    key: str | None = None
    reason: str | None = None
    warmup_s: float | None = None
    warmup_error: str | None = None
    memory: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``memory`` (the memory columns computed from it), in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "memory"}

    def __repr__(self) -> str:
        extra = f", compile {self.compile_s:.3f} s" if self.compile_s is not None else ""
        why = f", reason: {self.reason}" if self.reason else ""
        return f"ModuleReport({self.module}: {self.status}, load {self.load_s:.3f} s{extra}{why})"


