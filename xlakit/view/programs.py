"""Turn what a user hands a view into the programs it shows (no widget or plotting library here).

Used by :class:`xlakit.widgets.MemoryBreakdown` and :mod:`xlakit.report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlakit.view.breakdown import unique_labels

__all__ = ["Programs", "collect_programs", "cache_folder"]


class Programs:
    """Programs to break down: label -> ``CompiledMemory``, and label -> the object a buffer assignment can be
    decoded from (a ``jax.stages.Compiled`` or a ``CompiledMemory`` carrying the proto), or None with a note."""

    def __init__(self) -> None:
        self.memories: dict[str, Any] = {}
        self.programs: dict[str, Any] = {}
        self.notes: dict[str, str] = {}
        #: label -> cache key, for programs read from a cache folder (a cache that can load them does so on demand).
        self.keys: dict[str, str] = {}
        self.origin: str = ""
        #: label -> CompiledMemory of the cache's library programs left out (folded), see collect_programs.
        self.library: dict[str, Any] = {}

    def library_note(self) -> str:
        """One line on the folded library programs ("" when none): how many, their names, their bytes."""
        if not self.library:
            return ""
        # Counted as the timeline's "library helpers" lane counts them: programs by name; a program compiled for
        # several shapes is one program with several cache entries.
        names = sorted({getattr(m, "name", None) or label for label, m in self.library.items()})
        entries = len(self.library)
        total = sum(int(getattr(m, "footprint_bytes", 0) or 0) for m in self.library.values())
        shown = ", ".join(names[:4]) + (f", … ({len(names) - 4} more)" if len(names) > 4 else "")
        per_shape = f" in {entries} cache entries (one per shape)" if entries != len(names) else ""
        return (f"library helpers: {len(names)} program(s){per_shape} called only from inside jax/flax/optax "
                f"folded ({shown}; footprints {total:,} bytes in all); pass fold_library=False to show them")

    def add(self, label: str, memory: Any, program: Any = None, note: str | None = None) -> None:
        self.memories[label] = memory
        self.programs[label] = program
        if note:
            self.notes[label] = note


def cache_folder(obj: Any) -> Any | None:
    """The :class:`~xlakit.cache.CacheFolder` for an ExecutableCache, a TransparentCache (``enable_cache()``),
    a CacheFolder or a ``LocalStore``; None for anything else (no JAX is imported, no hook installed)."""
    from xlakit.cache import CacheFolder

    if isinstance(obj, CacheFolder):
        return obj
    if all(hasattr(obj, a) for a in ("entries", "root", "partitions", "remove")):
        return CacheFolder(store=obj)
    return None


def _stage(value: Any) -> Any:
    from xlakit.memory.compiled import program_stage

    return program_stage(value)


def _is_program(value: Any) -> bool:
    return _stage(value) is not None


def _kept(value: Any) -> Any:
    """What to attribute later: JAX's stage of ``value``, but a flax.nnx stage as given — it also holds the nnx.jit
    function and graph definition that name its arguments (``model['blocks'][0]...``, not ``args[0]...``)."""
    stage = _stage(value)
    made_by = getattr(value, "jit_wrapped", None) if (type(value).__module__ or "").startswith("flax.") else None
    return value if stage is not None and made_by is not None else stage  # (views import no xlakit._jax)


def collect_programs(source: Any, *, fold_library: bool = False, events: Any = None) -> Programs:
    """Programs from ``source``:

    * a ``jax.stages.Compiled`` (or ``Lowered``, compiled here) or a ``CompiledMemory``;
    * a mapping name -> any of those (or anything :func:`xlakit.memory.compiled_memory` takes);
    * an ``ExecutableCache``, the cache ``xlakit.enable_cache()`` returns, a ``CacheFolder`` or a
      ``LocalStore``: every program of the folder (:meth:`~xlakit.cache.CacheFolder.infos`), with the memory
      recorded in its header at compile time (no load);
    * a :class:`~xlakit.bundle.LoadedBundle` (its ``programs``, labelled by module file), or any object with a
      ``programs`` mapping attribute (tuple keys are joined with ``/``);
    * any object with a ``__xlakit_programs__()`` method returning such a mapping (how another container of
      compiled programs plugs in; it takes precedence).

    With ``fold_library``, a cache's entries whose programs ``events`` (Event objects, e.g. this process's
    log) show called only from inside jax/flax/optax are left out and kept in :attr:`Programs.library`.

    Raises:
      TypeError: ``source`` is none of these.
    """
    from xlakit.memory import CompiledMemory, compiled_memory

    out = Programs()
    if source is None:
        out.origin = "no programs"
        return out
    hook = getattr(source, "__xlakit_programs__", None)
    if callable(hook):
        mapping = hook()
        out.origin = f"{type(source).__name__}.__xlakit_programs__()"
        return _from_mapping(out, mapping)
    folder = cache_folder(source)
    if folder is not None:
        out.origin = f"cache entries in {folder.store.root}"
        infos = folder.infos()
        infos.sort(key=lambda i: (i.name or "", i.key))
        labels = unique_labels([i.name for i in infos], [i.key for i in infos],
                               [i.header.get("signature") for i in infos])
        library = set()
        if fold_library and events is not None and infos:
            import pandas as pd

            from xlakit.view.cache import entry_origins

            frame = pd.DataFrame({"key": [i.key for i in infos], "name": [i.name for i in infos]})
            library = {k for k, o in zip(frame["key"], entry_origins(frame, events), strict=True) if o == "library"}
        for label, info in zip(labels, infos, strict=True):
            try:
                memory = compiled_memory(info)
            except (TypeError, ValueError) as exc:
                memory = CompiledMemory(name=info.name, source=f"cache entry {info.key[:16]}…",
                                        notes=(str(exc),))
            if info.key in library:
                out.library[label] = memory
                continue
            out.add(label, memory, None, "a cache entry records the memory totals, not the buffer assignment: "
                    "pass the compiled program (e.g. cache.compile(...)[0] or cache.load(key)) to see its buffers")
            out.keys[label] = info.key
        return out
    if isinstance(source, Mapping):
        out.origin = "mapping"
        return _from_mapping(out, source)
    programs = getattr(source, "programs", None)
    if isinstance(programs, Mapping):
        # A LoadedBundle: (variant, batch_size) -> Compiled, labelled by module file from its reports.
        names = {(r.variant, r.batch_size): r.module for r in getattr(source, "reports", ())
                 if hasattr(r, "module") and hasattr(r, "variant") and hasattr(r, "batch_size")}
        out.origin = f"{type(source).__name__}.programs"
        return _from_mapping(out, {names.get(k, _label(k)): v for k, v in programs.items()})
    if isinstance(source, CompiledMemory) or _is_program(source):
        memory = compiled_memory(source)
        out.origin = "one program"
        out.add(memory.name or "program", memory, _kept(source) or memory)
        return out
    raise TypeError("MemoryBreakdown takes a jax.stages.Compiled, a dict of name -> Compiled (or CompiledMemory), "
                    "an ExecutableCache / enable_cache() cache / CacheFolder / LocalStore, a LoadedBundle, or an "
                    f"object with __xlakit_programs__(); got {type(source).__name__}")


def _from_mapping(out: Programs, mapping: Mapping[str, Any]) -> Programs:
    from xlakit.memory import CompiledMemory, compiled_memory

    for name, value in mapping.items():
        memory = compiled_memory(value)
        program = _kept(value) or (value if isinstance(value, CompiledMemory) else None)
        note = None if program is not None else ("no compiled program to decode a buffer assignment from; pass "
                                                 "the jax.stages.Compiled")
        out.add(_label(name), memory, program, note)
    return out


def _label(key: Any) -> str:
    """A mapping key as a label: tuples such as ``("default", 8)`` become ``default/8``."""
    if isinstance(key, tuple):
        return "/".join(str(k) for k in key)
    return str(key)
