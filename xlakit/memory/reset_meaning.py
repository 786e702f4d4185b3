"""What a peak reset measures and what the peak after it means, in the user's words: one table keyed by the
reset method :func:`xlakit.memory.reset_peak` ran, and one for what a platform's "in use" and "peak" count.

Every place that shows a peak after a reset (the allocator panel, ``AllocatorStats`` and ``ResetResult``
reprs, the ``%%xlakit`` cell summary) reads its words here, so a new reset method (or a platform whose
allocator counts differently) is one entry, not a set of ``if`` branches. Where ``{at_reset}`` appears it is
filled with the bytes the peak started from at the reset (readable units).

Methods (``ResetResult.method``):

============== ============================ =================================================================
``clear_refs`` process high-water mark      Linux, CPU: writing 5 to ``/proc/self/clear_refs`` resets
                                            ``VmHWM`` to the process's resident set (``VmRSS``) — not to 0
``native``     allocator reset              the device allocator's own reset, bound by jaxlib
``pjrt``       allocator reset              the same through the PJRT C API (``PJRT_Device_ClearMemoryStats``)
``baseline``   baseline (no reset)          nothing resets the peak: its value at the reset is remembered
``none``       no peak reported             the device reports no peak at all
============== ============================ =================================================================
"""

from __future__ import annotations

import dataclasses

from xlakit._text.format import fmt_bytes

__all__ = ["ResetMeaning", "RESET_MEANINGS", "PLATFORM_PEAK_NOTES", "reset_meaning", "peak_since_reset_text",
           "reset_sentence", "reset_explanation", "reset_name", "platform_peak_note"]


@dataclasses.dataclass(frozen=True)
class ResetMeaning:
    """The words for one reset method.

    Attributes:
      name: what the peak is, in a few words ("process high-water mark").
      resets_to: what *Reset peak* sets the peak to, ending a sentence "Reset peak sets the peak to ...".
      after: what the peak shown after the reset means (``{at_reset}``: the bytes it started from).
      unchanged: what a peak that has not risen since the reset means (``{at_reset}`` as above).
      mechanism: how the reset is done, for whoever wants the detail (a ``/proc`` file, a C API call).
    """

    name: str
    resets_to: str
    after: str
    unchanged: str
    mechanism: str


#: Reset method (``ResetResult.method`` / ``AllocatorStats.reset_method``) -> its words. Extend it with a method.
RESET_MEANINGS: dict[str, ResetMeaning] = {
    "clear_refs": ResetMeaning(
        name="process high-water mark",
        resets_to=("what the whole Python process holds in memory now ({at_reset}: the interpreter, JAX and XLA, "
                   "compiled programs, caches and every array), not zero — 'in use' counts only your live JAX "
                   "arrays, so this peak stays above it"),
        after=("the most the whole process has held at once since the reset; what ran since needed at most the "
               "rise over the {at_reset} it held at the reset"),
        unchanged="nothing since the reset made the process hold more than the {at_reset} it held then",
        mechanism="Linux: writing 5 to /proc/self/clear_refs resets VmHWM to the current resident set (VmRSS)"),
    "native": ResetMeaning(
        name="allocator reset",
        resets_to=("the bytes the device's allocator has handed out now ({at_reset}: your arrays on the device "
                   "and what the runtime keeps there)"),
        after=("the most the device's allocator had handed out at once since the reset (exact); what ran since "
               "needed the rise over the {at_reset} in use at the reset"),
        unchanged="nothing since the reset allocated more than the {at_reset} in use then",
        mechanism="a reset of the allocator's statistics bound by this jaxlib (a Device or Client method)"),
    "pjrt": ResetMeaning(
        name="allocator reset",
        resets_to=("the bytes the device's allocator has handed out now ({at_reset}: your arrays on the device "
                   "and what the runtime keeps there)"),
        after=("the most the device's allocator had handed out at once since the reset (exact); what ran since "
               "needed the rise over the {at_reset} in use at the reset"),
        unchanged="nothing since the reset allocated more than the {at_reset} in use then",
        mechanism="PJRT_Device_ClearMemoryStats through the PJRT C API of the device's plugin (libtpu, CUDA)"),
    "baseline": ResetMeaning(
        name="baseline (no reset available)",
        resets_to=("nothing: this device's peak cannot be reset, so its value now ({at_reset}) is remembered "
                   "instead"),
        after=("above the {at_reset} remembered at the reset, so this peak happened after it and is exact"),
        unchanged=("not above the {at_reset} remembered at the reset: the peak since the reset is at most this "
                   "(the lifetime peak) and may be lower"),
        mechanism="no reset is bound for this device: the peak is compared with its value at the reset"),
    "none": ResetMeaning(
        name="no peak reported",
        resets_to="nothing: this device reports no peak, so there is none to reset",
        after="not reported", unchanged="not reported",
        mechanism="Device.memory_stats() has no peak_bytes_in_use"),
}

#: Platform -> what its "in use" and "peak" count, for the note under an allocator table.
PLATFORM_PEAK_NOTES: dict[str, str] = {
    "cpu": ("On CPU JAX reports no allocator numbers: 'in use' is the exact sum of your live JAX arrays, and the "
            "peak is the whole process's resident high-water mark (VmHWM), which also holds Python, JAX, XLA, "
            "compiled programs and freed memory not yet returned — so it is far above 'in use', also right after "
            "a reset. Limit, largest allocation and count are not reported on CPU."),
    "gpu": ("On GPU 'in use' and the peak are the device allocator's bytes (Device.memory_stats()): arrays and "
            "XLA's temporaries alike."),
    "tpu": ("On TPU 'in use' and the peak are the device allocator's bytes (Device.memory_stats()): arrays and "
            "the loaded programs' code. A running program's temporaries are reserved apart (bytes_reserved), so "
            "they need not raise this peak."),
}


def reset_meaning(method: str | None) -> ResetMeaning | None:
    """The words for ``method`` (a ``"mixed:a,b"`` method: its first part), or None before any reset or for a
    method the table lacks."""
    if not method:
        return None
    return RESET_MEANINGS.get(method.removeprefix("mixed:").split(",")[0])


def reset_name(method: str | None) -> str:
    """The kind of peak a reset leaves (``"process high-water mark"``), or the method itself for one the table
    lacks."""
    meaning = reset_meaning(method)
    return meaning.name if meaning is not None else str(method)


def _fill(text: str, at_reset: int | None) -> str:
    return text.format(at_reset=fmt_bytes(at_reset) if at_reset is not None else "bytes")


def peak_since_reset_text(method: str | None, peak: int | None, at_reset: int | None) -> str:
    """One sentence on a peak after a reset: ``"process high-water mark since the reset: +2.1 MiB over the
    388.2 MiB the process held at the reset"``-like words from :data:`RESET_MEANINGS`; ``""`` before a reset."""
    meaning = reset_meaning(method)
    if meaning is None or peak is None:
        return ""
    if at_reset is not None and peak <= at_reset:
        return f"{meaning.name}: {_fill(meaning.unchanged, at_reset)}"
    rise = f" (+{fmt_bytes(peak - at_reset)})" if at_reset is not None else ""
    return f"{meaning.name}{rise}: {_fill(meaning.after, at_reset)}"


def reset_sentence(method: str | None, at_reset: int | None) -> str:
    """``"Reset peak sets the peak to ..."`` for ``method``; ``""`` for an unknown one."""
    meaning = reset_meaning(method)
    return "" if meaning is None else f"Reset peak sets the peak to {_fill(meaning.resets_to, at_reset)}."


def reset_explanation(method: str | None, at_reset: int | None) -> str:
    """All of it in three sentences: what *Reset peak* set the peak to, what the peak after it means, and how
    the reset is done; ``""`` for an unknown method."""
    meaning = reset_meaning(method)
    if meaning is None:
        return ""
    return (f"{reset_sentence(method, at_reset)} The peak shown after it is the {meaning.name}: "
            f"{_fill(meaning.after, at_reset)}. How: {meaning.mechanism}.")


def platform_peak_note(platform: str | None) -> str:
    """What ``platform``'s "in use" and "peak" count (:data:`PLATFORM_PEAK_NOTES`), ``""`` for another one."""
    return PLATFORM_PEAK_NOTES.get(str(platform or ""), "")
