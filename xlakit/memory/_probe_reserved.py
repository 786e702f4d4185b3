"""The probe on a platform that keeps a program's scratch in a reserved region (TPU; see
:attr:`xlakit._jax.platforms.Platform.scratch_in_reserved_region`).

What a run takes there, measured on a TPU v5e (jax 0.10.2, libtpu cl/933746096, 2026-12-05) and used here:

* ``bytes_in_use`` rises by the run's outputs (less donated aliases) and, at the first run of an executable in the
  process, by its generated code: a transformer train step's first run raised it by 231,565,824 B = outputs
  167,799,808 + code 63,766,528; its second run by the outputs alone.
* Its temporaries are not allocated per run: the allocator keeps one scratch region, reported as
  ``bytes_reserved``, sized to the largest device temporary allocation of the programs loaded, rounded up to
  16 KiB (1,077,346,304 B for XLA's 1,077,330,432; 2,736,128 for 2,720,256 and 808,992,768 for 808,976,896 on
  2026-12-06, where 64 KiB would not fit), and keeps it until those executables are freed. A program whose
  ``memory_analysis().temp_size_in_bytes`` is 0 reserves none (its temporaries stay in on-chip memory; the
  device temporaries its assignment lists are not allocated): 4 of 5 such programs reserved nothing, a narrow
  150-layer step 115,712 B (``docs/tpu/round10-probe-2026-12-06.log``). A run whose
  program needs more grows it; a run that fits changes nothing the allocator reports.

So the probe reads both: the peak of ``bytes_in_use`` after a reset (the PJRT C API reset where the plugin has
it: exact), and the region before and after the first run. A region that grew during the run measures the
program's own scratch exactly; one that did not only bounds it (an earlier program's region covered it). XLA's
account to prove against: outputs − aliases (+ code at a first run), and the buffer assignment's device
temporary allocation rounded up to the region's granule — the assignment from XLA's dump
(:mod:`xlakit._jax.compiler_dump`), since ``memory_analysis().temp_size_in_bytes`` on TPU is not what the
allocator reserves (1,096,563,712 B reported for that same program, 1.8 % more).
"""

from __future__ import annotations

from typing import Any

from xlakit._text.format import fmt_bytes_apart
from xlakit.memory._display import fmt_bytes

__all__ = ["reserved_temp", "judge_reserved"]


def reserved_temp(compiled: Any) -> tuple[int | None, str]:
    """``(bytes, source)`` of the device temporaries the allocator reserves for ``compiled``, before the granule
    (:func:`xlakit.memory._scratch_region.region_temp`, the rule :func:`xlakit.memory.peak` follows too), from
    ``memory_analysis()`` and the buffer assignment when this process holds it (memory_analysis or XLA's dump)."""
    from xlakit.memory._analysis import memory_analysis
    from xlakit.memory._scratch_region import region_temp

    try:
        temp = getattr(memory_analysis(compiled), "temp_size_in_bytes", None)
    except Exception:  # noqa: BLE001 - no analysis: the assignment, if any, answers
        temp = None
    assigned = None
    if temp != 0:
        try:
            from xlakit.memory.buffer_assignment import buffer_assignment

            assigned = buffer_assignment(compiled).totals()["temp_bytes"]
        except (TypeError, ValueError):
            pass
    return region_temp(temp if isinstance(temp, int) else None, assigned)


def judge_reserved(first: dict[str, Any], second: dict[str, Any] | None, compiled: Any, rule: Any,
                   tolerance: int) -> dict[str, Any]:
    """The probe's numbers and verdict from the measured runs on a reserved-region platform.

    ``first`` / ``second``: :func:`xlakit.memory.probe.measure` of the first (warm-up) and measured runs
    (``second`` None without a warm-up). ``rule``: the :class:`~xlakit._jax.platforms.Platform`.

    Returns:
      ``{"scratch", "exact", "reason", "xla_bytes", "outside_xla_bytes", "notes", "code"}``: ``scratch`` is what
      one run needs beyond its arguments: outputs − aliases + the scratch region it needs (+ its code, charged
      once per process, in ``code``).
    """
    from xlakit.memory._probe_accounting import accounting

    run = second or first
    expected = accounting(compiled) or {}
    out_xla = expected.get("output", 0) - expected.get("alias", 0) if expected else None
    in_use = _rise(run)
    first_rise = _rise(first)
    code = first_rise - in_use if second is not None and first_rise is not None and in_use is not None else None
    code_xla = _code_bytes(compiled) if rule.code_in_allocator else None
    before, after = first.get("reserved_before"), first.get("reserved_after")
    grew = isinstance(before, int) and isinstance(after, int) and after > before
    temp_xla, temp_source = reserved_temp(compiled)
    region_xla = rule.reserved_bytes(temp_xla) if temp_xla is not None else None
    notes = [f"scratch region (bytes_reserved): {fmt_bytes(before)} before the first run, {fmt_bytes(after)} "
             "after it; the allocator keeps one region for the largest scratch of the programs loaded"]
    if code is not None:
        notes.append(f"the first run also loaded the program's code into device memory: {fmt_bytes(code)}"
                     + (f" (XLA: {fmt_bytes(code_xla)})" if code_xla is not None else ""))
    region = after if grew else region_xla
    scratch = None if in_use is None or region is None else in_use + region
    xla = None if out_xla is None or region_xla is None else out_xla + region_xla
    base = {"scratch": scratch, "xla_bytes": xla, "code": code, "notes": notes,
            "outside_xla_bytes": None if scratch is None or xla is None else scratch - xla}
    if in_use is None:
        return {**base, "exact": False, "reason": "the device reports no bytes_in_use peak"}
    if not run.get("peak_exact"):
        return {**base, "exact": False, "reason": f"upper bound: {run.get('peak_reason', '')}"}
    if second is None and out_xla is not None and code_xla is not None \
            and abs(in_use - out_xla - code_xla) <= tolerance:
        in_use -= code_xla  # one run that was this executable's first: its code came with it
        notes.append(f"this was the program's first run here: {fmt_bytes(code_xla)} of its code came with it")
    parts = f"outputs {fmt_bytes(out_xla)} + scratch region {fmt_bytes(region_xla)}"
    if out_xla is None or abs(in_use - out_xla) > tolerance:
        took, says = fmt_bytes_apart(in_use, out_xla)
        return {**base, "exact": False,
                "reason": f"the run's outputs took {took} of device memory, XLA says {says}: they differ by more "
                          f"than {fmt_bytes(tolerance)}"}
    if not grew and not before:  # no region before the run nor after it
        if region_xla == 0:
            return {**base, "exact": True,
                    "reason": f"agrees with XLA: the run's outputs took {fmt_bytes(in_use)}, and no scratch region "
                              f"was reserved before or after it, as XLA plans ({temp_source})"}
        return {**base, "exact": False,
                "reason": f"outputs agree with XLA ({fmt_bytes(in_use)}); no scratch region was reserved for the run, "
                          f"though XLA plans {fmt_bytes(region_xla)} ({temp_source})"}
    if not grew:
        kept = (f"a scratch region of {fmt_bytes(before)}, kept for an earlier program, was in place and did not "
                "grow")
        if region_xla == 0:
            return {**base, "exact": False,
                    "reason": f"outputs agree with XLA ({fmt_bytes(in_use)}); XLA reserves no scratch region for "
                              f"this program ({temp_source}), but {kept}, so whether the run used none cannot be "
                              "seen in the allocator"}
        return {**base, "exact": False,
                "reason": f"outputs agree with XLA ({fmt_bytes(in_use)}); {kept}, so this run's own scratch cannot "
                          f"be seen in the allocator: XLA's {fmt_bytes(region_xla)} is shown ({temp_source})"}
    if region_xla == 0:
        return {**base, "exact": False,
                "reason": f"outputs agree with XLA; the scratch region grew to {fmt_bytes(after)} during the run, "
                          f"though XLA reserves none for this program ({temp_source})"}
    if region_xla is None or after != region_xla:
        seen, planned = fmt_bytes_apart(after, region_xla)
        return {**base, "exact": False,
                "reason": f"outputs agree with XLA; the scratch region grew to {seen}, XLA's temporaries "
                          f"rounded to the allocator's {fmt_bytes(rule.reservation_granule)} granule are "
                          f"{planned} ({temp_source})"}
    return {**base, "exact": True,
            "reason": f"agrees with XLA to the byte: {parts} ({temp_source}, rounded up to "
                      f"{fmt_bytes(rule.reservation_granule)}), measured as the peak of bytes_in_use after a reset "
                      "and the growth of the reserved scratch region"}


def _rise(m: dict[str, Any]) -> int | None:
    peak, base = m.get("peak"), m.get("baseline")
    return peak - base if isinstance(peak, int) and isinstance(base, int) else None


def _code_bytes(compiled: Any) -> int | None:
    from xlakit.memory._analysis import memory_analysis

    try:
        code = memory_analysis(compiled).generated_code_size_in_bytes
    except Exception:  # noqa: BLE001
        return None
    return code if isinstance(code, int) else None
