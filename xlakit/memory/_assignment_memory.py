"""The memory analysis that comes with a decoded buffer assignment (:func:`xlakit.memory.buffer_assignment`), made
without what needs the program's optimized HLO where XLA's ``memory_analysis()`` carries no buffer assignment (TPU).

There :func:`~xlakit.memory.compiled_memory` asks XLA for the module (its name) and prints the HLO text (the
constants, and the note on code XLA does not count): 0.36 s and 0.30 s of CPU, then 0.11 s to read the text, for
a 150-layer train step on a TPU v5e (jax 0.10.2, 2026-12-06) — two thirds of what ``peak()`` took. The buffer
assignment the caller decodes (XLA's dump) names the module and holds the constant allocations, so here the
constants come from it, the name from its module, and the note is found from the text when the notes are first
read (the program held weakly: a note is an explanation, and a memory tool must not keep an executable alive).
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["memory_for_assignment", "with_assignment_facts"]


def memory_for_assignment(compiled: Any) -> Any:
    """:class:`~xlakit.memory.CompiledMemory` of a ``jax.stages.Compiled`` for decoding its buffer assignment:
    :func:`~xlakit.memory.compiled_memory` itself where ``memory_analysis()`` carries the assignment (CPU, GPU);
    else the same numbers without the module's name and the constants (None until
    :func:`with_assignment_facts`), the note on code XLA does not count found when the notes are first read.

    Raises: as :func:`~xlakit.memory.compiled_memory`."""
    from xlakit.memory._analysis import memory_analysis
    from xlakit.memory.compiled import _defer_notes, _runtime_calls_notes, compiled_memory, from_stats

    analysis = memory_analysis(compiled)
    if isinstance(analysis, (list, tuple)) or getattr(analysis, "serialized_buffer_assignment_proto", None):
        return compiled_memory(compiled)  # the assignment is there: nothing to save (older JAX: its checks)
    try:
        platform = compiled.runtime_executable().client.platform
    except Exception:  # noqa: BLE001 - the platform decides memory spaces; unknown is handled downstream
        platform = None
    result = from_stats(analysis, name=None, platform=platform, source="jax.stages.Compiled.memory_analysis()")
    try:
        program: Any = weakref.ref(compiled)
    except TypeError:  # not weakly referable: no note rather than an executable kept alive
        return result

    def later() -> tuple[str, ...]:
        alive = program()
        return _runtime_calls_notes(platform, (alive.as_text() or "") if alive is not None else "")

    return _defer_notes(result, later)


def with_assignment_facts(memory: Any, assignment: bytes, name: str | None) -> Any:
    """``memory`` with its constants read from the serialized ``BufferAssignmentProto`` ``assignment`` (its
    constant allocations in device memory) where it had none, and ``name`` where it had none; the notes not yet
    found stay deferred."""
    import dataclasses

    from xlakit.memory._footprint import constant_bytes_of_assignment
    from xlakit.memory._proto import ProtoDecodeError
    from xlakit.memory.compiled import _CONSTANTS_UNKNOWN

    state = memory.__dict__  # read without finding the deferred notes
    changes: dict[str, Any] = {}
    if memory.name is None and name:
        changes["name"] = name
    if memory.constant_bytes is None and memory.reported and assignment:
        try:
            changes["constant_bytes"] = constant_bytes_of_assignment(assignment)
        except ProtoDecodeError:
            pass
        else:
            changes["notes"] = (*(n for n in state.get("notes", ()) if n != _CONSTANTS_UNKNOWN),
                                "constants: the buffer assignment's constant allocations (XLA's dump)")
    if not changes:
        return memory
    changes.setdefault("notes", state.get("notes", ()))
    made = dataclasses.replace(memory, **changes)
    later = state.get("_notes_later")
    if later is not None:
        made.__dict__["_notes_later"] = later
    return made
