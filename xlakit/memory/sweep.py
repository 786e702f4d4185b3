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

from xlakit._units import MAX_BYTES, _shown, check_flag, check_int, is_int
from xlakit.memory._abstract_args import Builder as _Builder
from xlakit.memory._abstract_args import abstract_args as _abstract_args
from xlakit.memory._batch_search import listed as _listed
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


def lower_batch(fn: Any, args: tuple, batch: int) -> Any:
    """``jax.jit(fn).lower(*args)`` (``fn`` itself when already jitted), the program of one batch size; refused
    first with a ``ValueError`` naming the size where a value is too large for XLA to describe, which would end
    the process (:mod:`xlakit._jax.extents`)."""
    import jax

    from xlakit._jax import extents

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return extents.lower(jitted, tuple(args), {}, f"the program at batch size {batch}")


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

        compiled = lower_batch(fn, args, batch).compile()
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

    batch: that size (None when no size tried fits: ``lo``, the round sizes above it and ``hi``; see
    :func:`max_batch`). bytes: its ``total_bytes`` (per device).
    budget_bytes: the budget (per device).
    limiting_term: the term of ``total_bytes`` that grew most from ``batch`` to the smallest size that did not
    fit (what crosses the budget first); with nothing over the budget tried (``hi`` fits), None.
    frame: the tried sizes (columns as :class:`Sweep`'s, plus fits). notes: what was compiled past the search
    from ``lo``, each size once with whether it fits (the round sizes above its answer, the sizes tried above
    the largest of them that fits), a footprint that is not monotonic in the batch size (``batch`` fits and
    ``batch + 1`` does not, but a size not tried might), sizes that could not be made.
    """

    batch: int | None
    bytes: int | None
    budget_bytes: int
    limiting_term: str | None
    frame: Any
    notes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.batch is None:
            sizes = [int(b) for b in self.frame["batch"]]
            least = self.frame.loc[self.frame["total_bytes"].idxmin()]
            return (f"MaxBatch(none of the {len(sizes)} sizes tried ({_listed(sizes)}) fits "
                    f"{fmt_bytes(self.budget_bytes)}: the least any needs is {fmt_bytes(int(least['total_bytes']))} "
                    f"(batch {int(least['batch'])}), mostly {term_words(self.limiting_term)})")
        limit = f"; what grows past the budget first: {term_words(self.limiting_term)}" if self.limiting_term else ""
        return f"MaxBatch({self.batch}: {fmt_bytes(self.bytes)} of {fmt_bytes(self.budget_bytes)}{limit})"

    def _repr_html_(self) -> str:
        # the exact bytes and every size tried: "64.0 MiB of 64.0 MiB" alone does not show that it fits
        exact = f"{fmt_bytes(self.bytes)} ({self.bytes:,} B)" if self.bytes is not None else "none fits"
        rows = [("largest batch that fits", self.batch if self.batch is not None else "none of the sizes tried"),
                ("its footprint", exact), ("budget", f"{fmt_bytes(self.budget_bytes)} ({self.budget_bytes:,} B)"),
                ("grows past the budget first", term_words(self.limiting_term) if self.limiting_term else "—")]
        rows += [(f"batch {int(r.batch)}", f"{int(r.total_bytes):,} B: {'fits' if r.fits else 'over the budget'}")
                 for r in self.frame.sort_values("batch").itertuples()]
        return html_table([*rows, *(("note", n) for n in self.notes)], title="Largest batch within the budget")


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
      batch_sizes: positive ints (Python ints or NumPy integers: ``np.array([1, 8, 32])`` works).
      cache: an :class:`~xlakit.cache.ExecutableCache` (or the cache ``xlakit.enable_cache()`` returned) to
        compile through (a rerun then loads every program).
      probe: also measure one run of each (see the module docstring).

    Raises:
      ValueError: a batch size that is not a positive int. TypeError: ``cache`` that is no xlakit cache, or a
        ``probe`` that is not True or False.
    """
    if not callable(make_args):  # sweep(f, 5, ...) failed with "'int' object is not callable"
        raise TypeError(f"make_args must be a function of the batch size returning fn's arguments "
                        f"(make_args(8) -> (x,)), got {type(make_args).__name__}")
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
    """``batch_sizes`` as sorted distinct Python ints: each an int or a NumPy integer (``np.array([1, 2, 4])``
    holds ``np.int64``) from 1 to 2**63-1; a bool is no size."""
    try:
        sizes: list[Any] = list(batch_sizes)
    except TypeError:  # one int, None: not a collection of sizes
        sizes = [batch_sizes]
    bad = [b for b in sizes if not is_int(b) or not 1 <= int(b) <= MAX_BYTES]
    if bad or not sizes:
        raise ValueError(f"batch sizes must be positive ints (at most 2**63-1), Python or NumPy, e.g. [1, 8, 32]; "
                         f"got {_shown(bad or sizes)}")
    return sorted({int(b) for b in sizes})


def _limiting_term(found: Any, good: int | None) -> str | None:
    """The term that grew most from ``good`` to the smallest size above it that does not fit (with ``good``
    None: the largest term of the smallest size tried); None when nothing tried above ``good`` misses."""
    over = min((s for s in found.tried if (good is None or s > good) and not found.fits(s)), default=None)
    if over is None:
        return None
    grown = found.tried[over][_TERMS]
    if good is not None:
        grown = {t: grown[t] - found.tried[good][_TERMS][t] for t in TERMS}
    return max(TERMS, key=grown.__getitem__)


def _check_range(budget_bytes: Any, lo: Any, hi: Any) -> tuple[int, int, int | None]:
    """``(budget_bytes, lo, hi)`` as Python ints (NumPy integers accepted), or a ValueError naming the bad one
    (a bool or a float is no count; 400 digits raised "int too large to convert to float" from the comparison and
    an MLIR type error from the shape)."""
    for name, v in (("budget_bytes", budget_bytes), ("lo", lo)):
        if not is_int(v) or v < 1:
            raise ValueError(f"{name} must be a positive int (Python or NumPy), got {_shown(v)}")
    if hi is not None and (not is_int(hi) or hi < lo):
        raise ValueError(f"hi must be an int >= lo ({_shown(lo)}), or None; got {_shown(hi)}")
    budget_bytes = check_int(budget_bytes, "budget_bytes", minimum=1)
    lo = check_int(lo, "lo", minimum=1, what="batch size")
    hi = check_int(hi, "hi", minimum=1, what="batch size") if hi is not None else None
    return budget_bytes, lo, hi


def max_batch(fn: Any, make_args: Callable[[int], Any], budget_bytes: int, lo: int = 1, hi: int | None = None,
              cache: Any = None) -> MaxBatch:
    """The largest batch size in ``[lo, hi]`` whose ``total_bytes`` (see :class:`Sweep`: XLA's
    ``memory_analysis()`` of that size's compiled program, with its constants and, on accelerators, its code;
    bytes per device) and attributed peak are at most ``budget_bytes``, found by compiling: doubling from ``lo``
    until a size does not fit (or reaches ``hi``), then bisecting, so ``batch`` fits and ``batch + 1`` was compiled
    too and does not (both rows are in ``frame``; unless ``batch`` is ``hi``) — or could not be made: a size whose
    arguments or program cannot be made (a batch sharded by rows over 4 devices is made of multiples of 4, as the
    user's own run is) is passed over, the largest size below it that can be made answers for it, and ``notes``
    names the sizes passed over and why.

    XLA's footprint is not monotonic in the batch size: its layouts and tiles favour multiples of 8, 16, 128...
    (f32 (n, 1024) cumsum: 50.3 MB at 4000 rows, 65.7 MB at 4001, 50.5 MB at 4016, 51.4 MB at 4096). So the
    search then compiles, once, the *round* sizes above its answer — the next multiple of 8, 16, ..., 256 and the
    next power of two, within twice the answer and at most ``hi``: seven programs at most (where ``lo`` itself
    does not fit, those above ``lo`` and ``hi``: eight) — and where one fits, halves the gap from the largest
    that fits to the next multiple of the round sizes' step (16 where 4016 fits) known not to fit, on those
    multiples first, then on every size: at most ``ceil(log2(gap))`` programs more (doubling first where no such
    multiple is known; :mod:`xlakit.memory._batch_search`). No round sizes are checked after that, and
    ``batch`` still fits and ``batch + 1`` does not. ``notes`` names every size compiled past the search from
    ``lo`` and whether it fits, and says when the sizes tried show the footprint dropping (a size not tried may
    still fit: ``sweep()`` around the answer).

    Args:
      fn, make_args, cache: as for :func:`sweep`.
      budget_bytes: bytes available to one run on each device (e.g. a device's ``bytes_limit`` minus what
        stays resident there); an int or a NumPy integer. For arguments sharded over several devices the program
        compared is the SPMD program, whose footprint is one device's share, so the budget is one device's too,
        not the sum.
      lo, hi: the range of batch sizes searched (ints or NumPy integers); ``hi=None``: no upper bound (doubling
        stops at 2**20 rows).

    Raises:
      ValueError: a budget or bound that is not a positive int (or is over 2**63-1), or ``hi < lo``; no size in
        the range could be made and compiled (the first error is quoted).
      TypeError: ``cache`` that is no xlakit cache.
    """
    from xlakit.memory import _batch_search

    budget_bytes, lo, hi = _check_range(budget_bytes, lo, hi)
    cache = _cache(cache, "max_batch")
    limit = hi if hi is not None else 1 << 20
    found = _batch_search.Search(_row, fn, _Builder(make_args), budget_bytes, cache, limit)  # one real build
    good, passes = _batch_search.search(found, lo, hi)
    if not found.tried and found.unbuilt:
        first = min(found.unbuilt)
        raise ValueError(f"no batch size in [{lo}, {limit}] could be made and compiled; at {first}: "
                         f"{found.unbuilt[first]}")
    return MaxBatch(batch=good, bytes=int(found.tried[good]["total_bytes"]) if good is not None else None,
                    budget_bytes=budget_bytes, limiting_term=_limiting_term(found, good),
                    frame=_frame(list(found.tried.values())),
                    notes=_batch_search.notes(found, passes, good, lo, hi))
