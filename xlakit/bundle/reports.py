"""One row of a bundle load's report: :class:`ModuleReport`. No JAX here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ModuleReport", "REPORT_COLUMNS"]

REPORT_COLUMNS = ("module", "variant", "batch_size", "status", "load_s", "compile_s", "module_bytes",
                  "program_bytes", "argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes", "reason")

#: Every field, in order (positional arguments follow it); ``memory`` is not compared and not in ``to_dict``.
FIELDS = ("module", "variant", "batch_size", "status", "load_s", "compile_s", "module_bytes", "program_bytes",
          "argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes", "key", "reason", "warmup_s",
          "warmup_error", "memory")
_MEMORY_COLUMNS = ("argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes")
_FROM_MEMORY = object()  # a memory column not given: computed from ModuleReport.memory on first read
_COMPARED = tuple(f for f in FIELDS if f != "memory")


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


class _MemoryColumn:
    """A compiled-memory column of :class:`ModuleReport`: the value given, else computed from the report's
    ``memory`` mapping on first read and kept."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if value is _FROM_MEMORY:
            value = obj.__dict__[self.slot] = _memory_columns(obj.memory).get(self.name)
        return value


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

    A plain immutable class, not a dataclass: creating a frozen dataclass of 17 fields cost ~1.8 ms at import,
    inside the first result after a restart (benchmarks/first_result.py). Equality and hashing cover every field
    but ``memory``; :meth:`replace` returns a copy with fields changed.
    """

    module: str
    variant: str
    batch_size: int | None
    status: str
    load_s: float
    compile_s: float | None
    module_bytes: int | None
    program_bytes: int | None
    key: str | None
    reason: str | None
    warmup_s: float | None
    warmup_error: str | None
    memory: Mapping[str, Any] | None

    def __init__(self, module: str, variant: str, batch_size: int | None, status: str, load_s: float,
                 compile_s: float | None = None, module_bytes: int | None = None, program_bytes: int | None = None,
                 argument_bytes: Any = _FROM_MEMORY, output_bytes: Any = _FROM_MEMORY, temp_bytes: Any = _FROM_MEMORY,
                 footprint_bytes: Any = _FROM_MEMORY, key: str | None = None, reason: str | None = None,
                 warmup_s: float | None = None, warmup_error: str | None = None,
                 memory: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "__dict__", {
            "module": module, "variant": variant, "batch_size": batch_size, "status": status, "load_s": load_s,
            "compile_s": compile_s, "module_bytes": module_bytes, "program_bytes": program_bytes,
            "_argument_bytes": argument_bytes, "_output_bytes": output_bytes, "_temp_bytes": temp_bytes,
            "_footprint_bytes": footprint_bytes, "key": key, "reason": reason, "warmup_s": warmup_s,
            "warmup_error": warmup_error, "memory": memory})

    # The compiled-memory columns: the value given, else computed from ``memory`` when first read (``to_dict``,
    # ``report()``, the attribute), so loading a program does not pay for compiled_memory (~50 us per program).
    argument_bytes = _MemoryColumn()
    output_bytes = _MemoryColumn()
    temp_bytes = _MemoryColumn()
    footprint_bytes = _MemoryColumn()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ModuleReport is immutable; use report.replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ModuleReport is immutable")

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in _COMPARED)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __reduce__(self) -> tuple:
        return (self.__class__, tuple(getattr(self, f) for f in FIELDS))

    def replace(self, **changes: Any) -> ModuleReport:
        """A copy with ``changes`` (field name -> value). Raises TypeError for an unknown field."""
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise TypeError(f"ModuleReport has no field(s) {sorted(unknown)}")
        values = {f: self.__dict__.get(f"_{f}", _FROM_MEMORY) if f in _MEMORY_COLUMNS else getattr(self, f)
                  for f in FIELDS}
        return ModuleReport(**{**values, **changes})

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``memory`` (the memory columns computed from it), in field order."""
        return {f: getattr(self, f) for f in _COMPARED}

    def __repr__(self) -> str:
        extra = f", compile {self.compile_s:.3f} s" if self.compile_s is not None else ""
        why = f", reason: {self.reason}" if self.reason else ""
        return f"ModuleReport({self.module}: {self.status}, load {self.load_s:.3f} s{extra}{why})"
