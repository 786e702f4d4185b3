"""Checking a probe's measured scratch against XLA's buffer assignment, and naming what XLA does not count.

A probe measures what one run made newly resident (CPU) or newly allocated (GPU/TPU). XLA's buffer assignment
says what the run *should* allocate: ``temp + output - alias`` bytes per device
(``Compiled.memory_analysis()``). :func:`judge` calls a probe **exact** only when both agree within
:func:`tolerance_bytes`; otherwise it says why not, in words a user can act on.

On XLA:CPU (jaxlib 0.10.2) the two disagree for a real reason, not a measuring fault: code XLA hands work to
allocates its own working memory, outside the buffer assignment. Measured (see ``docs/probe-measurements.md``):

* YNNPACK fusions (``"kind":"__ynn_fusion"``): ``jnp.outer(v, v).sum(0)`` for v of 10,000 float32 reports
  0 B of temporaries but needs 127 MiB (N=2,000: 1.1 MiB, 5,000: 15.8 MiB, 20,000: 1,526 MiB — the whole
  outer product). With ``xla_cpu_experimental_ynn_fusion_type=""`` XLA keeps the product as a 393 MiB
  temporary and the probe measures 393.5 MiB.
* Eigen matrix products (``dot`` outside a library fusion): packing buffers, ~16 MiB for f32[3000,3000].

In the caller's process such buffers can also go *unseen*: once glibc has raised its mmap threshold (after the
first large free; up to 32 MiB) they come from freed heap memory and never raise the high-water mark (the
YNNPACK buffer above: 16 MiB on the first probe, 0.02 MiB on the next). So an in-process result of a program
with such code is never called exact; the isolated probe fixes the threshold (``MALLOC_MMAP_THRESHOLD_``)
and measures them on every run.

:func:`runtime_calls` finds such code in the optimized HLO text so that the reason can name it.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from xlakit.memory._display import fmt_bytes

__all__ = ["TOLERANCE_BYTES", "TOLERANCE_FRACTION", "match_words", "tolerance_bytes", "accounting",
           "runtime_calls", "judge", "VERDICTS", "measured_how"]

TOLERANCE_BYTES = 2 * 2**20  # page rounding, allocator headers, first-run runtime state (measured <= 1 MiB)
TOLERANCE_FRACTION = 0.01

_LIBRARY = {"__ynn_fusion": "YNNPACK", "__xnn_fusion": "XNNPACK", "__onednn_fusion": "oneDNN"}
_EIGEN_OPS = {"dot": ("matrix product", "matrix products"), "convolution": ("convolution", "convolutions")}
_FUSION_KIND = re.compile(r'"kind"\s*:\s*"(__[A-Za-z0-9_]+_fusion)"')
_CUSTOM_CALL = re.compile(r'custom_call_target="([^"]+)"')
_ENTRY_OP = re.compile(r"=\s*\S+\s+(dot|convolution)\(")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


def match_words(scratch: int | None, xla: int | None, tolerance: int | None) -> str:
    """How close a match is, in words: the bytes apart, and the agreement a match needs — saying so where XLA's
    figure is itself under it (then the agreement bounds the run and checks no detail)."""
    gap = None if scratch is None or xla is None else abs(scratch - xla)
    if gap == 0:
        return "to the byte"
    small = xla is not None and tolerance is not None and xla < tolerance
    return (f"{'' if gap is None else fmt_bytes(gap) + ' apart; '}a match is within {fmt_bytes(tolerance)}, what "
            "this resolves" + (": more than XLA's figure itself, a bound only" if small else ""))


def tolerance_bytes(expected: int | None) -> int:
    """Bytes a measured scratch may differ from XLA's accounting and still be called exact:
    ``max(2 MiB, 1 % of expected)``."""
    return max(TOLERANCE_BYTES, int(TOLERANCE_FRACTION * (expected or 0)))


def accounting(compiled: Any) -> dict[str, int] | None:
    """XLA's bytes for one run on one device: ``{"temp", "output", "alias"}`` from ``memory_analysis()``, or
    None when the backend reports no analysis (all zero or absent)."""
    from xlakit.memory._analysis import memory_analysis

    try:
        stats = memory_analysis(compiled)
    except Exception:  # noqa: BLE001 - no analysis is "nothing to check against", not a failure
        return None
    if isinstance(stats, (list, tuple)):
        stats = stats[0] if len(stats) == 1 else None
    if stats is None:
        return None
    out = {}
    for ours, xla in (("temp", "temp_size_in_bytes"), ("output", "output_size_in_bytes"),
                      ("alias", "alias_size_in_bytes"), ("argument", "argument_size_in_bytes")):
        v = getattr(stats, xla, None)
        if not isinstance(v, int) or v < 0:
            return None
        out[ours] = v
    # All zero and no buffer assignment or code: a backend that reports nothing. With either, a program of empty
    # arrays holds 0 bytes indeed (a zero-size probe read "the backend reports no buffer assignment": false).
    reported = getattr(stats, "serialized_buffer_assignment_proto", None) or getattr(
        stats, "generated_code_size_in_bytes", 0)
    if not any(out.values()) and not reported:
        return None
    del out["argument"]
    return out


def runtime_calls(hlo_text: str, platform: str | None) -> tuple[str, ...]:
    """Code in an optimized HLO module that allocates memory XLA's buffer assignment does not count, as
    readable labels with counts, e.g. ``("55 fused operations run by YNNPACK (__ynn_fusion)",
    "3 matrix products run by Eigen")``, sorted by label.

    Library fusions and custom calls on every backend; on CPU also ``dot`` / ``convolution`` instructions
    that XLA:CPU runs through Eigen (their packing buffers)."""
    found: Counter[tuple[str, str, str]] = Counter()  # (library, singular, plural) -> count
    for kind in _findall(hlo_text, ('"kind"',), _FUSION_KIND):
        found[(f"{_LIBRARY.get(kind, 'a library')} ({kind})", "fused operation", "fused operations")] += 1
    for target in _findall(hlo_text, ("custom_call_target=",), _CUSTOM_CALL):
        found[(target, "custom call", "custom calls")] += 1
    if platform == "cpu":
        ops = Counter(_findall(hlo_text, ("dot(", "convolution("), _ENTRY_OP))  # then those library fusions run
        for block in _computations(hlo_text) if ops else ():
            if block["library"]:
                ops.subtract(_ENTRY_OP.findall(block["text"]))
        for op, n in ops.items():
            if n > 0:
                found[("Eigen", *_EIGEN_OPS[op])] += n
    return tuple(sorted(f"{n} {one if n == 1 else many} run by {lib}" if many != "custom calls"
                        else f"{n} {one if n == 1 else many} to {lib}" for (lib, one, many), n in found.items()))


def _findall(text: str, literals: tuple[str, ...], pattern: re.Pattern[str]) -> list[Any]:
    """``pattern.findall(text)`` for a pattern whose matches lie within one line and contain one of
    ``literals``: only the lines holding a literal are searched (``str.find`` skips the rest of a module's
    megabytes of text far faster than the regular expression can)."""
    lines: set[tuple[int, int]] = set()
    for literal in literals:
        at = text.find(literal)
        while at >= 0:
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            lines.add((text.rfind("\n", 0, at) + 1, end))
            at = text.find(literal, end)
    out: list[Any] = []
    for start, end in sorted(lines):
        out += pattern.findall(text, start, end)
    return out


def _computations(hlo_text: str) -> list[dict[str, Any]]:
    """Split HLO text into computations; ``library`` marks those called by a library fusion."""
    blocks = re.split(r"\n(?=\S)", hlo_text)
    called_by_library = set()
    for kind in _FUSION_KIND.finditer(hlo_text):  # the line of each library fusion names what it calls
        start = hlo_text.rfind("\n", 0, kind.start()) + 1
        end = hlo_text.find("\n", kind.end())
        m = _CALLS.search(hlo_text, start, end if end >= 0 else len(hlo_text))
        if m:
            called_by_library.add(m.group(1))
    out = []
    for b in blocks:
        head = b.split("(", 1)[0].split()
        name = head[-1].lstrip("%") if head else ""
        out.append({"text": b, "library": name in called_by_library})
    return out


#: The probe's verdicts, in a few words each (``ProbeResult.verdict``); ``reason`` says why.
VERDICTS = {
    "exact": "matches XLA's figure",
    "XLA + libraries": "XLA's figure plus the libraries' own working memory",
    "agrees, libraries unseen": "matches XLA's figure; the libraries' own memory may be unseen in this process",
    "more than XLA": "more than XLA's figure",
    "reads low": "less than XLA's figure (reads low)",
    "upper bound": "an upper bound (the peak could not be reset)",
    "unchecked": "measured; no XLA figure to check it against",
    "unmeasured": "not measured",
}


def measured_how(method: str) -> str:
    """A probe's ``method`` (``"subprocess clear_refs"``) in words: ``"in a fresh process, peak = process
    high-water mark"`` (the reset's name from :mod:`xlakit.memory.reset_meaning`)."""
    from xlakit.memory.reset_meaning import reset_name

    where, _, reset = method.partition(" ")
    place = {"in-process": "in this process", "subprocess": "in a fresh process"}.get(where, where)
    return f"{place}, peak = {reset_name(reset) if reset else '?'}"


def judge(scratch: int | None, expected: dict[str, int] | None, *, devices: int, peak_exact: bool,
          peak_reason: str, calls: tuple[str, ...], in_process: bool) -> dict[str, Any]:
    """Whether a measured scratch is exact, and why (or why not).

    Args:
      scratch: measured bytes (peak - baseline), or None.
      expected: :func:`accounting` of the program (per device), or None.
      devices: how many devices' runs the measurement covers (CPU: the process holds every CPU device).
      peak_exact: the peak came from a real reset (False: an upper bound).
      peak_reason: why the peak is or is not exact (from the reset).
      calls: :func:`runtime_calls` of the program.
      in_process: measured in the caller's process (other threads count; memory already held reads low).

    Returns:
      ``{"exact", "verdict", "reason", "xla_bytes", "outside_xla_bytes", "tolerance_bytes"}`` (bytes or None):
      ``verdict`` is a few words (:data:`VERDICTS`), ``reason`` the sentences behind it, both in words a
      student can follow: what was measured, what XLA planned, and where the difference comes from.
    """
    xla = None if expected is None else devices * (expected["temp"] + expected["output"] - expected["alias"])
    tol = tolerance_bytes(xla)
    outside = None if xla is None or scratch is None else scratch - xla
    base = {"xla_bytes": xla, "outside_xla_bytes": outside, "tolerance_bytes": tol}
    if scratch is None:
        return {**base, "exact": False, "verdict": VERDICTS["unmeasured"],
                "reason": f"no peak could be measured ({peak_reason})"}
    if not peak_exact:
        return {**base, "exact": False, "verdict": VERDICTS["upper bound"],
                "reason": f"upper bound: {peak_reason}; the run may have needed less than {fmt_bytes(scratch)}"}
    if expected is None or xla is None or outside is None:
        return {**base, "exact": False, "verdict": VERDICTS["unchecked"],
                "reason": "the backend reports no buffer assignment to check the measurement against; the peak "
                          f"itself was measured after a real reset ({peak_reason})"}
    planned = (f"XLA's own figure, {fmt_bytes(xla)} (the temporaries {fmt_bytes(expected['temp'])} and outputs "
               f"{fmt_bytes(expected['output'] - expected['alias'])} its buffer assignment plans"
               f"{f', x{devices} devices' if devices > 1 else ''})")
    libraries = ", ".join(calls)
    if abs(outside) <= tol and calls and in_process:
        return {**base, "exact": False, "verdict": VERDICTS["agrees, libraries unseen"],
                "reason": f"measured {fmt_bytes(scratch)}: agrees with {planned} within {fmt_bytes(tol)}. But the "
                          f"program hands work to libraries ({libraries}) that allocate working memory of their "
                          "own, and in this process it can come from memory the process freed earlier and still "
                          "holds (buffers under 32 MiB), so it may be missing here; isolate=True measures it in a "
                          "fresh process"}
    if abs(outside) <= tol:  # (a figure under the resolution: the agreement bounds the run, it checks no detail)
        small = (f"; XLA's figure is itself under what this measurement resolves, so this says only that the run "
                 f"took at most about {fmt_bytes(xla + tol)}") if xla < tol else ""
        return {**base, "exact": True, "verdict": VERDICTS["exact"],
                "reason": f"measured {fmt_bytes(scratch)}: agrees with {planned} within {fmt_bytes(tol)}{small}"}
    share = f" ({abs(outside) / xla:.0%})" if xla and abs(outside) < 10 * xla else ""  # not "(82721%)" of 20 KB
    if outside > 0 and calls:
        return {**base, "exact": False, "verdict": VERDICTS["XLA + libraries"],
                "reason": f"measured {fmt_bytes(scratch)}, {fmt_bytes(outside)}{share} more than {planned}. XLA "
                          "plans only its own buffers; the libraries it hands work to allocate working memory of "
                          f"their own, outside XLA's plan, which it does not count: {libraries}. The measurement is "
                          "what this run needed: budget with it, not with XLA's temporaries"}
    if outside > 0:
        who = "runtime state" + (" or another thread of this process" if in_process else "")
        return {**base, "exact": False, "verdict": VERDICTS["more than XLA"],
                "reason": f"measured {fmt_bytes(scratch)}, {fmt_bytes(outside)}{share} more than {planned}: "
                          f"allocated outside XLA's plan by code XLA does not count ({who}). The measurement is "
                          "what this run needed; XLA's temporaries understate it"}
    low = ("memory the allocator already held served part of the run" if in_process else
           "the allocator served part of the run from memory it already held")
    return {**base, "exact": False, "verdict": VERDICTS["reads low"],
            "reason": f"measured {fmt_bytes(scratch)}, {fmt_bytes(-outside)}{share} less than {planned}: {low}, so "
                      "the measurement reads low"}
