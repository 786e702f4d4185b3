"""One formatter for bytes, seconds and counts, used by every table, chart axis, tooltip, repr, report and the CLI.

Bytes use binary units (KiB = 1024 bytes, MiB, GiB, TiB, PiB, EiB), as allocators and XLA count; seconds pick µs, ms,
s or min so that three significant digits show. No dependencies (not even on the rest of xlakit): the memory
reprs, the widgets, the report and the CLI all import it.

>>> fmt_bytes(1536), fmt_bytes(512), fmt_bytes(None)
('1.5 KiB', '512 B', 'not reported')
>>> fmt_seconds(2.4176840130003256), fmt_seconds(0.0123), fmt_seconds(125.0)
('2.42 s', '12.3 ms', '2 min 5 s')
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["fmt_bytes", "fmt_bytes_apart", "fmt_seconds", "fmt_count", "fmt_value", "byte_ticks", "NOT_REPORTED",
           "BINARY_UNITS", "wrapped_label"]

#: What a missing number reads as, everywhere.
NOT_REPORTED = "not reported"
#: (unit, bytes) from the largest down.
BINARY_UNITS: tuple[tuple[str, int], ...] = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30),
                                             ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def _missing(v: object) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN, pandas.NA raises in bool() -> handled below
    except TypeError:
        return True


def fmt_bytes(n: int | float | None, missing: str = NOT_REPORTED) -> str:
    """A byte count in binary units: ``1536`` -> ``"1.5 KiB"``, ``512`` -> ``"512 B"``, negative keeps its sign.

    Args:
      n: bytes (int or float; None, NaN or ``pandas.NA`` = not reported).
      missing: the text for a missing value (default ``"not reported"``).
    """
    if _missing(n):
        return missing
    n = float(n)  # type: ignore[arg-type]
    sign, a = ("-" if n < 0 else ""), abs(n)
    for unit, size in BINARY_UNITS:
        if a >= size or unit == "B":
            if unit == "B":
                return f"{sign}{int(round(a))} B"
            return f"{sign}{a / size:.1f} {unit}"
    raise AssertionError("unreachable")


def fmt_bytes_apart(a: int | None, b: int | None) -> tuple[str, str]:
    """Two byte counts compared in one sentence: as :func:`fmt_bytes`, each with its exact bytes added where
    both would read the same but differ (``"2.6 MiB (2,686,976 B)"`` against ``"2.6 MiB (2,703,360 B)"``), so a
    reader never sees a difference stated between two equal-looking numbers."""
    short = fmt_bytes(a), fmt_bytes(b)
    if short[0] == short[1] and a != b and not _missing(a) and not _missing(b):
        return f"{short[0]} ({int(a):,} B)", f"{short[1]} ({int(b):,} B)"  # type: ignore[arg-type]
    return short


def fmt_seconds(s: float | None, missing: str = NOT_REPORTED) -> str:
    """Seconds with three significant digits in a readable unit: ``2.4177`` -> ``"2.42 s"``, ``0.0123`` ->
    ``"12.3 ms"``, ``4.5e-05`` -> ``"45 µs"``, ``125`` -> ``"2 min 5 s"``; 0 -> ``"0 s"``."""
    if _missing(s):
        return missing
    s = float(s)  # type: ignore[arg-type]
    sign, a = ("-" if s < 0 else ""), abs(s)
    if a == 0:
        return "0 s"
    if a >= 60:
        minutes, rest = divmod(round(a), 60)
        return f"{sign}{minutes} min {rest} s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if a >= scale or unit == "µs":
            v = a / scale
            text = f"{v:.3g}" if v < 1000 else f"{v:.0f}"
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable")


def fmt_count(n: int | None, missing: str = NOT_REPORTED) -> str:
    """An integer count with thousands separators: ``1234567`` -> ``"1,234,567"``."""
    if _missing(n):
        return missing
    return f"{int(n):,}"  # type: ignore[arg-type]


def middle_cut(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else its start and its last third joined by "…"
    (the end tells names of one family apart: ``jit_train_step…(batch=64)``, ``…· 128.0 KiB``)."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return f"{text[:limit - tail - 1]}…{text[-tail:]}"


def fmt_value(v: object, kind: str = "text", missing: str = "") -> str:
    """``v`` as text for a table cell of ``kind``: ``bytes``, ``seconds``, ``count``, ``float`` (4 significant
    digits), ``datetime`` (to the second; a ``time.time()`` float or a datetime) or ``text``."""
    if _missing(v):
        return missing
    if kind == "bytes":
        return fmt_bytes(v)  # type: ignore[arg-type]
    if kind == "seconds":
        return fmt_seconds(v)  # type: ignore[arg-type]
    if kind == "count":
        return fmt_count(v)  # type: ignore[arg-type]
    if kind == "datetime":
        if isinstance(v, (int, float)):
            import time

            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v))
        if hasattr(v, "strftime"):
            return v.strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[union-attr]
    if hasattr(v, "strftime"):  # datetimes (pandas Timestamps) in any column: to the second
        return v.strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[union-attr]
    if kind == "float" or isinstance(v, float):
        return f"{float(v):.4g}"  # type: ignore[arg-type]
    return str(v)


def byte_ticks(values: Sequence[float | None], target: int = 5) -> tuple[list[float], list[str]]:
    """Tick positions and labels in binary units for a byte axis spanning ``values`` (and 0).

    Returns ``(tickvals, ticktext)``: steps of 1, 2 or 5 (times a power of ten) of the unit that fits the
    largest magnitude, e.g. 0, 1 MiB, 2 MiB, ... — what a chart's axis shows instead of plotly's decimal
    ``k``/``M``. Empty input gives ``([0.0], ["0 B"])``.
    """
    vals = [float(v) for v in values if v is not None and not _missing(v)]
    lo, hi = min([0.0, *vals]), max([0.0, *vals])
    span = hi - lo
    if span <= 0:
        return [0.0], ["0 B"]
    top = max(abs(lo), abs(hi))
    unit, size = next((u, s) for u, s in BINARY_UNITS if top >= s or u == "B")
    raw = span / size / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    steps = [m * mag for m in (0.5, 1, 2, 5, 10)]  # nice steps, finest first
    chosen = next(i for i, s in enumerate(steps) if s >= raw)
    # a step rounded up past the data leaves too few ticks inside it (-30 to 75 MiB in steps of 50: only 0 and
    # 50 MiB drawn): the next finer step while fewer than 4 (of target) fall within the data
    while chosen > 0 and _ticks_within(lo / size, hi / size, steps[chosen]) < min(4, target):
        chosen -= 1
    step = steps[chosen]
    if unit == "B":
        step = max(1, round(step))
    first = math.floor(lo / size / step) * step
    ticks, v = [], first
    while v < hi / size + step - step * 1e-9:
        ticks.append(v)
        v = round(v + step, 12)
    labels = [f"{'-' if t < 0 else ''}{abs(t):g} {unit}" if t else "0 B" for t in ticks]
    return [t * size for t in ticks], labels


def _ticks_within(lo: float, hi: float, step: float) -> int:
    """How many multiples of ``step`` lie in ``[lo, hi]``."""
    return math.floor(hi / step + 1e-9) - math.ceil(lo / step - 1e-9) + 1


def wrapped_label(label: str, width: int) -> list[str]:
    """``label`` as lines of at most ``width`` characters, broken at spaces (a longer word keeps its line whole; a
    size such as ``4.0 MiB`` stays on one line): a chart's axis label wraps, and no character of it is cut."""
    import re
    import textwrap

    kept = re.sub(r"(\d) ([KMGTP]?i?B)\b", "\\1\u00a0\\2", label)  # textwrap does not break at a no-break space
    lines = textwrap.wrap(kept, width, break_long_words=False, break_on_hyphens=False) or [kept]
    return [line.replace("\u00a0", " ") for line in lines]
