"""One row of a bundle load's report: :class:`ModuleReport`. No JAX here."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ModuleReport", "REPORT_COLUMNS"]

REPORT_COLUMNS = ("module", "variant", "batch_size", "status", "load_s", "compile_s", "module_bytes",
                  "program_bytes", "argument_bytes", "output_bytes", "temp_bytes", "footprint_bytes", "reason")


@dataclass(frozen=True)
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
        None where not reported.
      key: the program's store key; None when the module could not be read.
      reason: why a miss (no program, corrupt entry, load failure) or the error; None on a hit.
      warmup_s: seconds of the one run on zeros with ``load_bundle(..., warmup=True)``
        (:func:`xlakit._jax.warmup.warm_up`); None when not (yet) warmed up. Not a report column.
      warmup_error: why that run failed (the program still works; its first call pays the first-run cost);
        None otherwise. Not a report column.
    """

    module: str
    variant: str
    batch_size: int | None
    status: str
    load_s: float
    compile_s: float | None = None
    module_bytes: int | None = None
    program_bytes: int | None = None
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    footprint_bytes: int | None = None
    key: str | None = None
    reason: str | None = None
    warmup_s: float | None = None
    warmup_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __repr__(self) -> str:
        extra = f", compile {self.compile_s:.3f} s" if self.compile_s is not None else ""
        why = f", reason: {self.reason}" if self.reason else ""
        return f"ModuleReport({self.module}: {self.status}, load {self.load_s:.3f} s{extra}{why})"


