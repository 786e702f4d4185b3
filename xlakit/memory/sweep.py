"""What would fit: compile-only memory of a program over batch sizes, and the largest batch that fits a byte
budget (jax-ml/jax#31292: ``memory_analysis()`` as a basis for automatic batch sizing).

Every number comes from compiling, never running: ``Compiled.memory_analysis()`` per batch size (through an
:class:`~xlakit.cache.ExecutableCache` when given, so a second sweep loads every program instead of compiling
it), plus the peak of the attributed liveness (:func:`xlakit.memory.peak`). The program compiled is the one the
user runs: ``make_args``'s arrays keep their sharding, memory kind and weak type
(:mod:`xlakit.memory._abstract_args`), so an argument sharded over 4 devices is compiled as XLA's SPMD program,
and every byte count here is bytes per device (``memory_analysis()`` of an SPMD program describes one device's
share; each device holds that much). ``probe=True`` also runs each
program once (:func:`xlakit.memory.probe`) and reports whether the measurement agrees with XLA's account
within the probe's tolerance — where it does not (work XLA hands to libraries that allocate outside its
buffer assignment, e.g. YNNPACK fusions on CPU), the compile-only estimate is not to be trusted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from xlakit._units import MAX_BYTES, _shown, check_flag, check_int
from xlakit.memory._abstract_args import Builder as _Builder
from xlakit.memory._abstract_args import abstract_args as _abstract_args
from xlakit.memory._display import fmt_bytes, html_table, term_words

__all__ = ["Sweep", "MaxBatch", "sweep", "max_batch", "TERMS"]

#: The terms of the footprint, in bytes: arguments, outputs not in a donated argument, temporaries, constants,
#: code where it lives in device memory (:mod:`xlakit.memory._footprint`).
TERMS = ("argument_bytes", "output_bytes", "temp_bytes", "constant_bytes", "code_bytes")
COLUMNS = ["batch", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "constant_bytes", "code_bytes",
           "total_bytes", "peak_bytes", "top_term", "cache"]


def _row(fn: Any, make_args: Callable[[int], Any], batch: int, cache: Any, probe: bool) -> dict[str, Any]:
    from xlakit._jax.retrace import quiet_recompiles

    with quiet_recompiles():  # a sweep retraces on purpose: not the user's recompiles
        return _measure_row(fn, make_args, batch, cache, probe)


def own_retraces() -> Any:
    """A context manager: traces on this thread inside it are xlakit's own loop over shapes, not the user's
    recompiles (no ``recompile`` event or warning; :func:`xlakit._jax.retrace.quiet_recompiles`)."""
    from xlakit._jax.retrace import quiet_recompiles

    return quiet_recompiles()


def _measure_row(fn: Any, make_args: Callable[[int], Any], batch: int, cache: Any, probe: bool) -> dict[str, Any]:
    from xlakit.memory._footprint import footprint_terms
    from xlakit.memory.compiled import compiled_memory
    from xlakit.memory.peak import peak

    # The signature of the program the user runs (shardings, memory kinds, weak types), no batch allocated
    args = make_args(batch) if probe else _abstract_args(fn, make_args, batch)
    args = args if isinstance(args, tuple) else (args,)
    decision = None
    if cache is not None:
        compiled, decision = cache.compile(fn, *args)
    else:
        import jax

        compiled = (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args).compile()
    m = compiled_memory(compiled)
    terms = footprint_terms(m)
    if terms is None:
        raise ValueError(f"XLA reports no memory analysis for this program on {m.platform or 'this backend'} "
                         f"(batch {batch}): nothing to budget with; {'; '.join(m.notes)}")
    row: dict[str, Any] = {"batch": batch, "argument_bytes": m.argument_bytes, "output_bytes": m.output_bytes,
                           "alias_bytes": m.alias_bytes, "temp_bytes": m.temp_bytes,
                           "constant_bytes": m.constant_bytes, "code_bytes": m.generated_code_bytes,
                           "total_bytes": m.footprint_bytes, "peak_bytes": peak(compiled).total_bytes,
                           "top_term": max(terms, key=terms.__getitem__),
                           "cache": decision.kind if decision is not None else None, _TERMS: terms}
    if probe:
        from xlakit.memory.probe import probe as run_probe

        result = run_probe(compiled)
        row["probe_bytes"] = result.scratch_bytes
        row["agrees"] = bool(result.exact)
        row["probe_reason"] = result.reason
    return row


_STEPS_DOWN = 64  # sizes tried below one that cannot be made (a sharding over up to 64 devices)
_TERMS = "_terms"  # a row's footprint terms (footprint_terms), kept for the limiting term, not a column


def _frame(rows: list[dict[str, Any]]):
    import pandas as pd

    frame = pd.DataFrame([{k: v for k, v in r.items() if k != _TERMS} for r in rows])
    for col in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "constant_bytes", "code_bytes",
                "probe_bytes"):
        if col in frame:
            frame[col] = frame[col].astype("Int64")
    return frame.sort_values("batch").reset_index(drop=True) if len(frame) else frame


@dataclasses.dataclass(frozen=True)
class Sweep:
    """Compile-only memory per batch size, in bytes per device (see the module docstring).

    frame: ``pandas.DataFrame``, one row per batch size, columns batch, argument_bytes, output_bytes,
    alias_bytes, temp_bytes, code_bytes (XLA's fields; <NA> = not reported), constant_bytes (the program's
    constants: closed-over arrays), total_bytes (:attr:`~xlakit.memory.CompiledMemory.footprint_bytes`:
    argument + output - alias + temp + constant, + code where code lives in device memory — what one run
    occupies on the device), peak_bytes (live bytes at the attributed peak; never above total_bytes),
    top_term (the largest term of total_bytes, one of :data:`TERMS`), cache (the cache's decision: ``hit``,
    ``store``..., None without a cache), and with ``probe=True`` probe_bytes (measured scratch), agrees (the
    probe's ``exact``), probe_reason.
    """

    frame: Any

    def __repr__(self) -> str:
        rows = ", ".join(f"{int(r.batch)}: {fmt_bytes(int(r.total_bytes))}" for r in self.frame.itertuples())
        return f"Sweep({rows})"

    def _repr_html_(self) -> str:
        return html_table([(f"batch {int(r.batch)}", f"{fmt_bytes(int(r.total_bytes))} (top: {term_words(r.top_term)})")
                           for r in self.frame.itertuples()], title="Compiled memory by batch size")


@dataclasses.dataclass(frozen=True)
class MaxBatch:
    """The largest batch size whose compiled footprint fits a budget (bytes per device).

    batch: that size (None when even ``lo`` does not fit). bytes: its ``total_bytes`` (per device).
    budget_bytes: the budget (per device).
    limiting_term: the term of ``total_bytes`` that grew most from ``batch`` to the smallest size that did not
    fit (what crosses the budget first); with nothing over the budget tried (``hi`` fits), None.
    frame: the tried sizes (columns as :class:`Sweep`'s, plus fits). notes: caveats (a footprint that is not
    monotonic in the batch size: ``batch`` fits and ``batch + 1`` does not, but a larger size might).
    """

    batch: int | None
    bytes: int | None
    budget_bytes: int
    limiting_term: str | None
    frame: Any
    notes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.batch is None:
            return (f"MaxBatch(nothing fits {fmt_bytes(self.budget_bytes)}: the smallest size tried needs "
                    f"{fmt_bytes(int(self.frame['total_bytes'].min()))}, mostly {term_words(self.limiting_term)})")
        limit = f"; what grows past the budget first: {term_words(self.limiting_term)}" if self.limiting_term else ""
        return f"MaxBatch({self.batch}: {fmt_bytes(self.bytes)} of {fmt_bytes(self.budget_bytes)}{limit})"


def sweep(fn: Any, make_args: Callable[[int], Any], batch_sizes: Iterable[int] = (1, 8, 32, 128),
          cache: Any = None, probe: bool = False) -> Sweep:
    """Compile ``fn`` for each batch size and tabulate its memory (see :class:`Sweep`).

    Args:
      fn: a jitted (or plain) function.
      make_args: ``batch -> args``: the example arguments for that batch size (a tuple, or one value), arrays
        or ``jax.ShapeDtypeStruct`` (the probe zero-fills the program's own signature, so either works). Its
        arrays are traced per size and made once per call (``probe=True`` makes each); their placement is kept:
        an array sharded over several devices (``jax.device_put(x, NamedSharding(...))``) makes the SPMD
        program, whose bytes are per device.
      batch_sizes: positive ints.
      cache: an :class:`~xlakit.cache.ExecutableCache` (or the cache ``xlakit.enable_cache()`` returned) to
        compile through (a rerun then loads every program).
      probe: also measure one run of each (see the module docstring).

    Raises:
      ValueError: a batch size that is not a positive int. TypeError: ``cache`` that is no xlakit cache, or a
        ``probe`` that is not True or False.
    """
    sizes = _sizes(batch_sizes)
    cache = _cache(cache, "sweep")
    probe = check_flag(probe, "probe")  # probe="no" is truthy, an array has no single truth value
    make_args = _Builder(make_args)  # one real build for this call (see xlakit.memory._abstract_args)
    return Sweep(_frame([_row(fn, make_args, b, cache, probe) for b in sizes]))


def _cache(cache: Any, where: str) -> Any:
    """``cache`` where it is an xlakit cache (or None); TypeError before anything compiles otherwise."""
    from xlakit._jax.call_options import program_cache

    return program_cache(where, None, (), cache)


def _sizes(batch_sizes: Iterable[int]) -> list[int]:
    sizes = list(batch_sizes)
    bad = [b for b in sizes if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BYTES]
    if bad or not sizes:
        raise ValueError(f"batch sizes must be positive ints (at most 2**63-1), got {_shown(bad or sizes)}")
    return sorted(set(sizes))


def max_batch(fn: Any, make_args: Callable[[int], Any], budget_bytes: int, lo: int = 1, hi: int | None = None,
              cache: Any = None) -> MaxBatch:
    """The largest batch size in ``[lo, hi]`` whose ``total_bytes`` (see :class:`Sweep`: XLA's
    ``memory_analysis()`` of that size's compiled program, with its constants and, on accelerators, its code;
    bytes per device) and attributed peak are at most ``budget_bytes``, found by compiling: doubling from ``lo``
    until a size does not fit (or reaches ``hi``), then bisecting, so ``batch`` fits and ``batch + 1`` was compiled too
    and does not (both rows are in ``frame``; unless ``batch`` is ``hi``) — or could not be made: a size whose
    arguments or program cannot be made (a batch sharded by rows over 4 devices is made of multiples of 4, as the
    user's own run is) is passed over, the largest size below it that can be made answers for it, and ``notes``
    names the sizes passed over and why. The footprint need not grow monotonically
    (XLA tiles some sizes better: measured 65.7 MB at 4001 rows, 50.5 MB at 4016); when the sizes tried show
    a drop, ``notes`` says so.

    Args:
      fn, make_args, cache: as for :func:`sweep`.
      budget_bytes: bytes available to one run on each device (e.g. a device's ``bytes_limit`` minus what
        stays resident there). For arguments sharded over several devices the program compared is the SPMD
        program, whose footprint is one device's share, so the budget is one device's too, not the sum.
      lo, hi: the range searched; ``hi=None``: no upper bound (doubling stops at 2**20 rows).

    Raises:
      ValueError: a budget or bound that is not a positive int (or is over 2**63-1), or ``hi < lo``; no size in
        the range could be made and compiled (the first error is quoted).
      TypeError: ``cache`` that is no xlakit cache.
    """
    for name, v in (("budget_bytes", budget_bytes), ("lo", lo)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {_shown(v)}")
    if hi is not None and (isinstance(hi, bool) or not isinstance(hi, int) or hi < lo):
        raise ValueError(f"hi must be an int >= lo ({_shown(lo)}), or None; got {_shown(hi)}")
    # 400 digits: "int too large to convert to float" from the comparison, an MLIR type error from the shape
    check_int(budget_bytes, "budget_bytes", minimum=1)
    check_int(lo, "lo", minimum=1, what="batch size")
    if hi is not None:
        check_int(hi, "hi", minimum=1, what="batch size")
    cache = _cache(cache, "max_batch")
    make_args = _Builder(make_args)  # one real build for this call (see xlakit.memory._abstract_args)
    tried: dict[int, dict[str, Any]] = {}
    unbuilt: dict[int, str] = {}  # sizes whose program cannot be made (a sharding that does not split the rows)

    def built(b: int, floor: int) -> int | None:
        """The largest size in ``(floor, b]`` whose program can be made and compiled (its row in ``tried``):
        over 4 devices a batch sharded by rows is made of multiples of 4 only, as the user's own run is."""
        for size in range(b, max(floor, b - _STEPS_DOWN), -1):
            if size in tried:
                return size
            if size in unbuilt:
                continue
            try:
                row = _row(fn, make_args, size, cache, False)
            except Exception as exc:  # noqa: BLE001 - make_args(size) or its program cannot be made: skip the size
                unbuilt[size] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                continue
            row["fits"] = max(row["total_bytes"], row["peak_bytes"]) <= budget_bytes
            tried[size] = row
            return size
        return None

    limit = hi if hi is not None else 1 << 20
    good, bad = None, None
    b = lo
    while True:  # doubling; a size that cannot be made is passed over
        size = built(b, good if good is not None else lo - 1)
        if size is not None and not tried[size]["fits"]:
            bad = size
            break
        if size is not None:
            good = size
        if b >= limit:
            break
        b = min(b * 2, limit)
    if good is None and bad is None and unbuilt:
        raise ValueError(f"no batch size in [{lo}, {limit}] could be made and compiled; at {min(unbuilt)}: "
                         f"{unbuilt[min(unbuilt)]}")
    low = good
    if low is not None and bad is not None:
        while bad - low > 1:  # bisecting (low, bad): every size up to low fits or cannot be made
            mid = (low + bad) // 2
            size = built(mid, low)
            if size is None or tried[size]["fits"]:
                good, low = (size or good), mid
            else:
                bad = size
    frame = _frame(list(tried.values()))
    notes: tuple[str, ...] = ()
    if not frame["total_bytes"].is_monotonic_increasing:
        dips = [int(b) for b, d in zip(frame["batch"], frame["total_bytes"].diff(), strict=True) if d < 0]
        notes = (f"the footprint is not monotonic in the batch size (it drops at {dips}: XLA tiles some sizes "
                 "better), so a larger size than the one found may fit too; sweep() around it to see",)
    if unbuilt:
        sizes = sorted(unbuilt)
        shown = ", ".join(map(str, sizes[:6])) + (f" and {len(sizes) - 6} more" if len(sizes) > 6 else "")
        notes += (f"sizes {shown} could not be made ({unbuilt[sizes[0]]}); the answer is the largest size that "
                  "could be made and fits",)
    term = None
    if bad is not None:
        over = tried[bad]
        grown = over[_TERMS]
        if good is not None:
            grown = {t: grown[t] - tried[good][_TERMS][t] for t in TERMS}
        term = max(TERMS, key=grown.__getitem__)
    return MaxBatch(batch=good, bytes=int(tried[good]["total_bytes"]) if good is not None else None,
                    budget_bytes=budget_bytes, limiting_term=term, frame=frame, notes=notes)

