"""Probe: the memory one run of a program really takes, measured around a peak reset.

Why: the allocator's peak is monotone and compile-time work (autotuning on GPU) pushes it far above any real
run. The probe resets the peak, records the baseline, runs the program once, and reports ``scratch = peak -
baseline`` — what a budget must leave free for this program. Methods:

* in-process (default): reset with the best method available (:func:`xlakit.memory.reset_peak`), then run.
  Arguments are placed on their devices *before* the reset, so their bytes are baseline, not scratch.
  On CPU the peak is the process high-water mark (``VmHWM``) and the baseline the resident set right after
  the reset; scratch is then what the run made newly resident, process-wide: outputs, XLA temporaries, and
  the working memory of libraries XLA calls.
* By default the program runs once before the measured run (``warmup=True``): a first execution leaves
  runtime state resident that every later run reuses — thread-local buffers of the libraries XLA calls,
  caches. Measured for the demo transformer train step in a fresh process: first run 69.6 MiB, second 51.9 MiB
  (XLA accounts for 50.6 MiB). The first run's scratch is kept as ``first_run_scratch_bytes``, with a note.
* ``isolate=True``: a fresh Python process loads the program's serialized executable
  (``jax.experimental.serialize_executable``) — loading, not compiling, so no compile-time scratch — creates
  zero-filled arguments of the recorded shapes and dtypes itself (numpy, so nothing compiles there either),
  and measures the same way. Its allocator starts clean, so on GPU the peak is exact even without a native
  reset. The executable sent is one that has never run: XLA:CPU cannot serialize some executables (a sort:
  "``LessThan`` is not serializable") after their first run, and JAX hands back the same memoized executable
  on every ``lower().compile()``; when serializing fails the probe compiles a fresh copy
  (:func:`xlakit._jax.fresh.compile_fresh`). Single-device programs only; the child inherits this process's
  environment (``JAX_PLATFORMS``, ``XLA_FLAGS``).

Exact means checked (:mod:`xlakit.memory._probe_accounting`): a result is ``exact`` only when the measured
scratch agrees with XLA's buffer assignment (``temp + output - alias``) within ``max(2 MiB, 1 %)``; otherwise
``exact`` is False and ``reason`` says why. What was measured on XLA:CPU, jaxlib 0.10.2 (2 cores, glibc):

* ``jnp.outer(v, v).sum(0)``, v = 10,000 float32: 127 MiB of scratch against 0 B of temporaries, in-process
  and isolated alike, the same on the second run, no thread created, no file pages (``RssFile`` flat),
  released right after (``VmRSS`` returns to the baseline). It is real working memory: XLA hands the
  fusion to YNNPACK (``"kind":"__ynn_fusion"``), which materializes part of the outer product itself
  (N=2,000: 1.1 MiB; 5,000: 15.8 MiB; 10,000: 127 MiB; 20,000: 1,526 MiB = the whole product). Compiled with
  ``xla_cpu_experimental_ynn_fusion_type=""`` the same program keeps a 393.4 MiB temporary and the probe
  measures 393.5 MiB. So nothing is subtracted: the result says "127 MiB more than XLA's buffer assignment:
  allocated outside it by YNNPACK fusion" and is not marked exact.
  During a run of the N=20,000 program one anonymous mapping of 1,525.9 MiB appears (``/proc/self/smaps``
  sampled from a thread) and is unmapped after: the whole product, allocated by YNNPACK, not by XLA.
* ``jnp.sort(jnp.outer(v, v), axis=0)[0]``: 381.5-382.7 MiB measured (in-process, again, isolated) against
  381.5 MiB temporaries + 39 KiB outputs: within the tolerance (3.8 MiB here), exact.
* Eigen matrix products and convolutions (``dot``/``convolution`` that XLA:CPU runs outside a library
  fusion) allocate packing buffers on their first run: +20 MiB for ``((a @ a) @ a)`` with a of
  f32[2500,2500]; 0.6-12 MiB for a f32[4,32,256,256] convolution. They stay resident, so after the warm-up
  run the measured run agrees with XLA; ``first_run_scratch_bytes`` keeps the first run's number.
* glibc raises its mmap threshold after the first large free (up to 32 MiB); buffers below it then come
  from freed heap memory and never raise ``VmHWM``. XLA's own buffers are checked against its accounting
  (a shortfall reads as "reads low"), but a library's are not: in the caller's process YNNPACK's 16 MiB
  (v of 5,000) measured 16 MiB on the first probe and 0.02 MiB on the next. So an in-process result of a
  program with library calls is never called exact, and the isolated child runs with a fixed threshold
  (``MALLOC_MMAP_THRESHOLD_=131072``, glibc's initial value), where it measured 15.9 MiB on every run.
* Ruled out as the 127 MiB, by measurement: thread stacks (``Threads`` stays 17), file pages (``RssFile``
  unchanged), first-execution state (the second run measures the same within 0.7 MiB), arguments (placed
  before the reset) and outputs (39 KiB), allocator arenas (``malloc_trim`` before the reset changes nothing).
* A measuring fault fixed here: a run's buffers are released by XLA:CPU's runtime shortly *after*
  ``block_until_ready`` returns. A baseline read before that counts them as resident, so the next run
  seemed to need almost nothing (a 300 MiB temporary measured as 7.7 MiB; a 137 MiB sort as 0 B). The probe
  now waits until ``VmRSS`` settles (3 reads 5 ms apart within 256 KiB, at most 1 s; ~15 ms in practice),
  then returns free heap pages (glibc ``malloc_trim``), and keeps the warm-up run's outputs alive through
  the measured run so their memory cannot serve its outputs.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from typing import Any

from xlakit._jax.call_options import DEFAULT, Default, refuse_clashes
from xlakit.memory._display import fmt_bytes, html_table
from xlakit.memory._probe_accounting import accounting, judge, measured_how, runtime_calls

__all__ = ["ProbeResult", "probe"]


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """One measured run.

    peak_bytes: the peak during the run (CPU: ``VmHWM``, process-wide; GPU/TPU: ``peak_bytes_in_use`` of the
    program's device). baseline_bytes: in use right after the reset, arguments included (CPU: ``VmRSS``;
    GPU: ``bytes_in_use``). scratch_bytes: ``peak_bytes - baseline_bytes``. method: how it was measured
    (``"in-process clear_refs"``; :attr:`how` in words). exact: True only when the scratch agrees with XLA's
    buffer assignment within ``tolerance_bytes``; verdict: that in words (``VERDICTS``); reason: why (always
    filled). xla_bytes: XLA's figure for the run (``temp + output - alias`` per device x devices measured).
    xla_temp_bytes: XLA's temporaries alone. outside_xla_bytes: ``scratch_bytes - xla_bytes`` (negative:
    the measurement reads low). tolerance_bytes: the agreement needed for ``exact``. runtime_calls: code in
    the program that allocates outside XLA's buffer assignment (library fusions, custom calls, Eigen dots).
    first_run_scratch_bytes: the scratch of the warm-up run (``warmup=True``), None without one; above
    ``scratch_bytes`` by the runtime state a first execution leaves resident. name / platform / device: the
    program and where it ran. run_s: seconds of the measured run. notes: caveats.
    """

    peak_bytes: int | None
    baseline_bytes: int | None
    scratch_bytes: int | None
    method: str
    exact: bool
    name: str | None = None
    platform: str | None = None
    device: str | None = None
    run_s: float | None = None
    notes: tuple[str, ...] = ()
    reason: str = ""
    xla_bytes: int | None = None
    xla_temp_bytes: int | None = None
    outside_xla_bytes: int | None = None
    tolerance_bytes: int | None = None
    runtime_calls: tuple[str, ...] = ()
    first_run_scratch_bytes: int | None = None
    verdict: str = ""
    how = property(lambda self: measured_how(self.method), doc="``method`` in words (measured_how).")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_frame(self):
        """One-row ``pandas.DataFrame`` of :meth:`to_dict`."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])

    def _exactness(self) -> str:
        if self.exact:
            return f"{self.verdict or 'exact'}, {self._within()}"
        return f"{self.verdict or 'not exact'}: {self.reason}"

    def _within(self) -> str:
        from xlakit.memory._probe_accounting import match_words

        return match_words(self.scratch_bytes, self.xla_bytes, self.tolerance_bytes)

    def __repr__(self) -> str:
        return (f"ProbeResult({self.name or '?'}: scratch {fmt_bytes(self.scratch_bytes)} ({self._exactness()}); "
                f"peak {fmt_bytes(self.peak_bytes)}, baseline {fmt_bytes(self.baseline_bytes)}; measured "
                f"{self.how})")

    def _repr_html_(self) -> str:
        # no "exact: no" row under "matches XLA's figure; … may be unseen": the verdict says both
        verdict = f"{self.verdict} ({self._within()})" if self.exact else self.verdict
        return html_table([("scratch", fmt_bytes(self.scratch_bytes)), ("verdict", verdict), ("why", self.reason),
                           ("XLA buffer assignment", fmt_bytes(self.xla_bytes)),
                           ("XLA temporaries", fmt_bytes(self.xla_temp_bytes)),
                           ("outside XLA's accounting", fmt_bytes(self.outside_xla_bytes)),
                           ("code XLA does not count", ", ".join(self.runtime_calls) or "none"),
                           ("peak", fmt_bytes(self.peak_bytes)), ("baseline", fmt_bytes(self.baseline_bytes)),
                           ("measured", f"{self.how} ({self.method})"), *[("note", n) for n in self.notes]],
                          title=f"Probe: {self.name or '?'}")


def _program(fn_or_compiled: Any, args: tuple, kwargs: dict) -> tuple[Any, Any, tuple, dict]:
    """(Compiled, Lowered or None, args, kwargs); a Compiled without arguments gets zero-filled ones from its
    signature. The Lowered is kept so an isolated probe can compile a copy that has never run."""
    import jax

    from xlakit._jax.stages import jax_stage, program_arguments

    fn_or_compiled = jax_stage(fn_or_compiled)  # flax.nnx's Compiled / Lowered hold JAX's
    if isinstance(fn_or_compiled, jax.stages.Compiled):
        if not args and not kwargs:
            args, kwargs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), fn_or_compiled.in_avals)
        return fn_or_compiled, None, tuple(args), dict(kwargs)
    from xlakit.memory._programs import with_assignment  # TPU: one compile with XLA's dump, for the account

    if isinstance(fn_or_compiled, jax.stages.Lowered):
        if not args and not kwargs:
            args, kwargs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), fn_or_compiled.in_avals)
        return with_assignment(None, fn_or_compiled), fn_or_compiled, tuple(args), dict(kwargs)
    if callable(fn_or_compiled):
        fn = fn_or_compiled if hasattr(fn_or_compiled, "lower") else jax.jit(fn_or_compiled)
        from xlakit._jax import extents

        stage = extents.lower(fn, args, kwargs, own=True)
        args, kwargs = _dynamic(fn, *program_arguments(stage, args, kwargs))  # nnx.jit: graph nodes as it takes them
        lowered = jax_stage(stage)
        return with_assignment(None, lowered), lowered, args, kwargs
    raise TypeError(f"probe() needs a jax.stages.Compiled or a function with example arguments, got "
                    f"{type(fn_or_compiled).__name__}")

def _dynamic(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments a compiled program is called with: JAX bakes the static ones (``static_argnums`` /
    ``static_argnames``, by position or by keyword) into the program, and its ``Compiled`` takes the rest."""
    from xlakit._jax.static_args import static_positions

    info = getattr(fn, "_jit_info", None)
    names = set(getattr(info, "static_argnames", None) or getattr(fn, "static_argnames", None) or ())
    positions = static_positions(fn, len(args))
    return (tuple(a for i, a in enumerate(args) if i not in positions),
            {k: v for k, v in kwargs.items() if k not in names})


def _materialize(compiled: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Place arguments on the program's input shardings; zero-fill ShapeDtypeStructs; copy donated arrays
    (the caller's arrays survive the run)."""
    import jax
    import jax.numpy as jnp

    shardings = compiled.input_shardings
    infos = compiled.args_info

    def place(a, sharding, info):
        donated = bool(getattr(info, "donated", False))
        if isinstance(a, jax.ShapeDtypeStruct):
            return jax.device_put(jnp.zeros(a.shape, a.dtype), sharding)
        if donated and isinstance(a, jax.Array):
            return jax.device_put(jnp.array(a, copy=True), sharding)
        return jax.device_put(a, sharding)

    placed_args = tuple(jax.tree.map(place, list(args), list(shardings[0]), list(infos[0]),
                                     is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct)))
    placed_kwargs = jax.tree.map(place, dict(kwargs), dict(shardings[1]), dict(infos[1]),
                                 is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    jax.block_until_ready((placed_args, placed_kwargs))
    return placed_args, placed_kwargs


def _device_of(compiled: Any) -> Any:
    devices = {d for s in compiled.input_shardings[0] for d in getattr(s, "device_set", ())}
    if not devices:
        devices = set(compiled.runtime_executable().local_devices())
    return sorted(devices, key=lambda d: d.id)


_SETTLE_STEP_S = 0.005
_SETTLE_BAND = 256 * 1024
_SETTLE_MAX_S = 1.0


def _trim_heap() -> bool:
    """Return free heap pages to the system (glibc ``malloc_trim(0)``), so buffers the run takes from the heap
    fault in new pages and count. False where the C library has no ``malloc_trim``."""
    import ctypes

    try:
        fn = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return False
    if fn is None:
        return False
    fn(0)
    return True


def _settle_rss() -> tuple[bool, float]:
    """Wait until ``VmRSS`` stops moving: XLA:CPU releases a previous run's buffers shortly after
    ``block_until_ready`` returns, and a baseline read before that would hide the next run's scratch.
    Returns (settled, seconds waited)."""
    from xlakit.memory.allocator import process_memory

    start = time.perf_counter()
    prev, calm = process_memory().rss_bytes, 0
    if prev is None:
        return False, 0.0
    while time.perf_counter() - start < _SETTLE_MAX_S:
        time.sleep(_SETTLE_STEP_S)
        cur = process_memory().rss_bytes or 0
        calm = calm + 1 if abs(cur - prev) < _SETTLE_BAND else 0
        prev = cur
        if calm >= 3:
            return True, time.perf_counter() - start
    return False, time.perf_counter() - start


def measure(run: Any, devices: list[Any], keep: list | None = None) -> dict[str, Any]:
    """Reset the peak on ``devices``, run ``run()`` once (blocking), and return the numbers (used in both
    processes). CPU: ``VmRSS`` settled, then the heap trimmed; VmRSS after the reset is the baseline, VmHWM
    after the run the peak. Otherwise the largest per-device scratch among ``devices``.

    Returns a JSON-able dict: peak, baseline (bytes or None), method (the reset), peak_exact (bool: a real
    reset, not an upper bound), peak_reason, run_s, device, platform, devices (how many the peak covers),
    settled (CPU: the resident set was calm before the reset; None elsewhere). ``keep``: a list the run's
    outputs are appended to (kept alive by the caller)."""
    import jax

    from xlakit.memory.allocator import _device_stats, _one, process_memory, reset_peak

    gc.collect()
    on_cpu = _device_stats(devices[0]) is None
    settled = None
    if on_cpu:  # settle first: buffers freed late (a previous run's) must be back in the heap before the trim
        settled, _ = _settle_rss()
        _trim_heap()
    reset = reset_peak(devices[0]) if len(devices) == 1 else reset_peak(None)
    cpu_baseline = process_memory().rss_bytes if on_cpu else None
    before = {} if on_cpu else {d: _one(d) for d in devices}
    baselines = {d: s.bytes_in_use for d, s in before.items()}
    start = time.perf_counter()
    out = jax.block_until_ready(run())
    run_s = time.perf_counter() - start
    if keep is not None:
        keep.append(out)
    del out
    common = {"method": reset.method, "run_s": run_s, "platform": devices[0].platform, "settled": settled}
    if on_cpu:
        after = _one(devices[0])
        return {**common, "peak": after.peak_since_reset_bytes, "baseline": cpu_baseline,
                "peak_exact": bool(after.peak_since_reset_exact),
                "peak_reason": after.sources.get("peak_since_reset_bytes", ""),
                "device": str(devices[0]), "devices": len(devices)}  # one process holds every CPU device
    best: dict[str, Any] | None = None
    for d in devices:
        s = _one(d)
        base = baselines[d]
        scratch = None if s.peak_since_reset_bytes is None or base is None else s.peak_since_reset_bytes - base
        if best is None or (scratch or 0) > (best["scratch"] or 0):
            best = {"peak": s.peak_since_reset_bytes, "baseline": base, "scratch": scratch, "device": str(d),
                    "peak_exact": bool(s.peak_since_reset_exact),
                    "peak_reason": s.sources.get("peak_since_reset_bytes", ""),
                    # the scratch region where the platform keeps temporaries apart (TPU: bytes_reserved)
                    "reserved_before": before[d].bytes_reserved, "reserved_after": s.bytes_reserved}
    assert best is not None
    best.pop("scratch")
    return {**common, **best, "devices": 1}


def measure_runs(make_run: Any, devices: list[Any], warmup: bool) -> dict[str, Any]:
    """:func:`measure` of ``make_run()`` (a run with its arguments in place, made before the reset: a donated
    argument is consumed by one run); with ``warmup`` twice, returning the second run's numbers plus
    ``first_scratch`` (the first run's scratch, bytes or None): a first execution leaves runtime state
    resident that later runs reuse, and a fresh process always executes for the first time."""
    if not warmup:
        m = measure(make_run(), devices)
        return {**m, "first_scratch": None, "first": m, "second": None}
    held: list = []  # the first run's outputs stay alive, so the measured run cannot reuse their memory
    first = measure(make_run(), devices, keep=held)
    m = measure(make_run(), devices)
    del held
    ok = first["peak"] is not None and first["baseline"] is not None
    return {**m, "first_scratch": first["peak"] - first["baseline"] if ok else None, "first": first, "second": m}


def _result(m: dict[str, Any], where: str, name: str | None, notes: list[str], compiled: Any) -> ProbeResult:
    from xlakit._jax.platforms import rules

    rule = rules(m["platform"])
    if rule.scratch_in_reserved_region and m.get("first") is not None:
        return _reserved_result(m, where, name, notes, compiled, rule)
    peak, base = m["peak"], m["baseline"]
    scratch = peak - base if peak is not None and base is not None else None
    expected = accounting(compiled)
    try:
        calls = runtime_calls(compiled.as_text() or "", m["platform"])
    except Exception:  # noqa: BLE001 - the names only explain a difference; the numbers stand without them
        calls = ()
    verdict = judge(scratch, expected, devices=m.get("devices", 1), peak_exact=bool(m["peak_exact"]),
                    peak_reason=m.get("peak_reason", ""), calls=calls, in_process=where == "in-process")
    first = m.get("first_scratch")
    if first is not None and scratch is not None and first - scratch > verdict["tolerance_bytes"]:
        notes.append(f"the first run needed {fmt_bytes(first - scratch)} more ({fmt_bytes(first)}): runtime state "
                     "a first execution leaves resident (thread-local buffers of the libraries XLA calls, "
                     "caches), which later runs reuse; count it once per process")
    if m.get("settled") is False:
        notes.append(f"the resident set was still moving {_SETTLE_MAX_S} s before the reset (another thread "
                     "allocating?); the baseline may be off")
    return ProbeResult(peak, base, scratch, f"{where} {m['method']}", verdict["exact"], name, m["platform"],
                       m["device"], m["run_s"], tuple(notes), reason=verdict["reason"],
                       xla_bytes=verdict["xla_bytes"], xla_temp_bytes=None if expected is None else expected["temp"],
                       outside_xla_bytes=verdict["outside_xla_bytes"], tolerance_bytes=verdict["tolerance_bytes"],
                       runtime_calls=calls, first_run_scratch_bytes=first, verdict=verdict["verdict"])


def _reserved_result(m: dict[str, Any], where: str, name: str | None, notes: list[str], compiled: Any,
                     rule: Any) -> ProbeResult:
    """:class:`ProbeResult` where temporaries live in a reserved region (:mod:`xlakit.memory._probe_reserved`)."""
    from xlakit.memory._probe_accounting import accounting, tolerance_bytes
    from xlakit.memory._probe_reserved import judge_reserved

    expected = accounting(compiled)
    verdict = judge_reserved(m["first"], m["second"], compiled, rule, tolerance_bytes(
        None if expected is None else expected["output"]))
    scratch = verdict["scratch"]
    base = m["baseline"]
    return ProbeResult(None if scratch is None or base is None else base + scratch, base, scratch,
                       f"{where} {m['method']}", verdict["exact"], name, m["platform"], m["device"], m["run_s"],
                       tuple(notes + verdict["notes"]), reason=verdict["reason"], xla_bytes=verdict["xla_bytes"],
                       xla_temp_bytes=None if expected is None else expected["temp"],
                       outside_xla_bytes=verdict["outside_xla_bytes"],
                       tolerance_bytes=tolerance_bytes(None if expected is None else expected["output"]),
                       runtime_calls=(), first_run_scratch_bytes=m.get("first_scratch"))


def probe(fn_or_compiled: Any, /, *args: Any, isolate: bool | str | Default = DEFAULT,
          warmup: bool | Default = DEFAULT, timeout_s: float | Default = DEFAULT, **kwargs: Any) -> ProbeResult:
    """Measure the peak memory of one run of a program.

    Args:
      fn_or_compiled: a ``jax.stages.Compiled`` or ``Lowered`` (arguments optional: zero-filled from its
        signature) or a jitted/plain function followed by example arguments (arrays or
        ``jax.ShapeDtypeStruct``). Positional only.
      *args, **kwargs: the arguments, passed as ``jax.jit(fn)(*args, **kwargs)`` would pass them: every keyword
        but ``isolate``, ``warmup`` and ``timeout_s`` (xlakit's, keyword only) is the function's. Donated arrays
        are copied first, so yours stay valid.
      isolate: default False. Run in a fresh subprocess that loads the serialized executable (see the module
        docstring); ``"auto"``: isolate where a second process can open the device (not on a TPU, which one
        process at a time may open: :attr:`xlakit._jax.platforms.Platform.exclusive_device`), else measure in
        this process.
      warmup: default True. Run once before the measured run (its scratch is ``first_run_scratch_bytes``), so
        the result is what every run needs, not the one-time state of a first execution (~17 MiB for the demo
        transformer train step in a fresh process). False: one run, measured.
      timeout_s: default 300. Seconds the subprocess may take (``isolate=True``): an int or float, finite, > 0,
        at most 10**9 (checked whether or not the probe is isolated).

    Returns:
      :class:`ProbeResult`: bytes measured (``method`` names the reset and where it ran), XLA's own account
      of the same run, and whether the two agree (``exact``, ``reason``).

    Raises:
      TypeError: unsupported input, or one of xlakit's options passed for a function that takes an argument of
      that name itself (ambiguous: pass the function's positionally, or wrap the function;
      :mod:`xlakit._jax.call_options`). ValueError: ``isolate=True`` with a multi-device program, or one that
      cannot be serialized even freshly compiled (host callbacks), or a ``Compiled`` that has run and cannot
      be serialized any more (pass the function and its arguments instead), or a ``timeout_s`` that is not a
      finite number of seconds > 0 (NaN, inf, 0, -1, 400 digits; a string such as ' 5 ' is a TypeError, and so is a
      ``warmup`` that is not True or False).
      RuntimeError: the subprocess failed (its stderr is included).
    """
    import jax

    from xlakit._jax.platforms import rules
    from xlakit._units import check_flag, check_seconds
    from xlakit.memory.compiled import _runtime_info

    refuse_clashes("probe", fn_or_compiled, args, {
        "isolate": (isolate, "run in a fresh process"), "warmup": (warmup, "run once before the measured run"),
        "timeout_s": (timeout_s, "seconds an isolated run may take")})
    isolate = False if isolate is DEFAULT else isolate
    warmup = True if warmup is DEFAULT else check_flag(warmup, "warmup")  # "false" is truthy, an array ambiguous
    timeout_s = 300.0 if timeout_s is DEFAULT else timeout_s
    # Checked first, isolated or not: NaN, inf and 400 digits failed inside subprocess, 0 and -1 started a child
    # "that ran past -1 s", and the string ' 5 ' was read as 5 s
    timeout_s = check_seconds(timeout_s, "timeout_s", positive=True)
    if "self" in kwargs:  # JAX's Compiled.__call__(self, *args, **kwargs) takes it as its own
        raise TypeError("probe() runs the compiled program, and JAX's Compiled cannot be called with a keyword "
                        "named 'self'; pass your function's 'self' positionally, or wrap the function")
    compiled, lowered, args, kwargs = _program(fn_or_compiled, args, kwargs)
    name, _platform = _runtime_info(compiled)
    devices = _device_of(compiled)
    exclusive = rules(devices[0].platform).exclusive_device
    if isolate == "auto":
        isolate = not exclusive
    elif not isinstance(isolate, bool):
        raise ValueError(f"isolate must be True, False or 'auto', not {isolate!r}")
    if isolate and exclusive:
        raise ValueError(f"isolate=True runs the program in a fresh process, but this process holds the "
                         f"{devices[0].platform.upper()} and only one process at a time can open it; call probe() "
                         "without isolate=True: it measures in this process after resetting the allocator's peak "
                         "(exact where the plugin offers the PJRT reset, see ProbeResult.method)")
    if isolate:
        return _probe_isolated(compiled, lowered, name, devices, timeout_s, warmup)
    donates = any(getattr(i, "donated", False) for i in jax.tree.leaves(compiled.args_info))
    placed = _materialize(compiled, args, kwargs)

    def make_run():
        a, k = _materialize(compiled, args, kwargs) if donates else placed  # a donated copy lasts one run
        return lambda: compiled(*a, **k)

    notes = []
    if devices[0].platform == "cpu":
        notes.append("CPU: VmHWM/VmRSS are process-wide; other threads' allocations during the run count too")
    m = measure_runs(make_run, devices, warmup)
    return _result(m, "in-process", name, notes, compiled)


def _probe_isolated(compiled: Any, lowered: Any, name: str | None, devices: list[Any], timeout_s: float,
                    warmup: bool) -> ProbeResult:
    from xlakit.memory._probe_isolated import run_isolated

    m, notes = run_isolated(compiled, lowered, devices, timeout_s, warmup)
    return _result(m, "subprocess", name, notes, compiled)
