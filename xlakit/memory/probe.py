"""Probe: the memory one run of a program really takes, measured around a peak reset.

Why: the allocator's peak is monotone and compile-time work (autotuning on GPU) pushes it far above any real
run, so "peak after running" says little. The probe resets the peak, records the baseline, runs the program
once, and reports ``scratch = peak - baseline`` — what a budget must leave free for this program.

Methods:

* in-process (default): reset with the best method available (:func:`xlakit.memory.reset_peak`), then run.
  Arguments are placed on their devices *before* the reset, so their bytes are baseline, not scratch.
  On CPU the peak is the process high-water mark (``VmHWM``) and the baseline the resident set right after
  the reset; scratch is then what the run made newly resident, process-wide: outputs, XLA temporaries,
  runtime threads. Small buffers served from memory malloc already holds do not raise it, so a small
  scratch reads low (often 0) in-process; large buffers (mmap'ed: above 32 MiB under glibc, always) count.
* ``isolate=True``: a fresh Python process loads the program's serialized executable
  (``jax.experimental.serialize_executable``) — loading, not compiling, so no compile-time scratch — creates
  zero-filled arguments of the recorded shapes and dtypes itself, and measures the same way. Its allocator
  starts clean, so on GPU the peak is exact even without a native reset. Single-device programs only; the
  child inherits this process's environment (``JAX_PLATFORMS``, ``XLA_FLAGS``).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from xlakit.memory._display import fmt_bytes, html_table

__all__ = ["ProbeResult", "probe"]


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """One measured run.

    peak_bytes: the peak during the run (CPU: ``VmHWM``, process-wide; GPU/TPU: ``peak_bytes_in_use`` of the
    program's device). baseline_bytes: in use right after the reset, arguments included (CPU: ``VmRSS``;
    GPU: ``bytes_in_use``). scratch_bytes: ``peak_bytes - baseline_bytes``. method: how it was measured
    (``"in-process clear_refs"``, ``"subprocess baseline"``, ...). exact: False when the peak is only an
    upper bound (baseline reset with an unchanged peak). name / platform / device: the program and where it
    ran. run_s: seconds of the measured run. notes: caveats.
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_frame(self):
        """One-row ``pandas.DataFrame`` of :meth:`to_dict`."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])

    def __repr__(self) -> str:
        bound = "" if self.exact else " (upper bound)"
        return (f"ProbeResult({self.name or '?'}: scratch {fmt_bytes(self.scratch_bytes)}{bound}, peak "
                f"{fmt_bytes(self.peak_bytes)}, baseline {fmt_bytes(self.baseline_bytes)}; {self.method})")

    def _repr_html_(self) -> str:
        return html_table([("scratch", fmt_bytes(self.scratch_bytes)), ("peak", fmt_bytes(self.peak_bytes)),
                           ("baseline", fmt_bytes(self.baseline_bytes)), ("method", self.method),
                           ("exact", self.exact), *[("note", n) for n in self.notes]],
                          title=f"Probe: {self.name or '?'}")


def _program(fn_or_compiled: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """(Compiled, args, kwargs); a Compiled without arguments gets zero-filled ones from its signature."""
    import jax

    from xlakit.memory.compiled import _compile

    if isinstance(fn_or_compiled, jax.stages.Compiled):
        if not args and not kwargs:
            args, kwargs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), fn_or_compiled.in_avals)
        return fn_or_compiled, tuple(args), dict(kwargs)
    if isinstance(fn_or_compiled, jax.stages.Lowered) or callable(fn_or_compiled):
        return _compile(fn_or_compiled, args, kwargs), args, kwargs
    raise TypeError(f"probe() needs a jax.stages.Compiled or a function with example arguments, got "
                    f"{type(fn_or_compiled).__name__}")


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


def measure(run: Any, devices: list[Any]) -> dict[str, Any]:
    """Reset the peak on ``devices``, run ``run()`` once (blocking), and return the numbers (used in both
    processes). CPU: VmRSS after the reset is the baseline, VmHWM after the run the peak. Otherwise the
    largest per-device scratch among ``devices``."""
    import jax

    from xlakit.memory.allocator import _device_stats, _one, process_memory, reset_peak

    gc.collect()
    reset = reset_peak(devices[0]) if len(devices) == 1 else reset_peak(None)
    on_cpu = _device_stats(devices[0]) is None
    if on_cpu:
        baseline = process_memory().rss_bytes
    else:
        baseline = {d: _one(d).bytes_in_use for d in devices}
    start = time.perf_counter()
    jax.block_until_ready(run())
    run_s = time.perf_counter() - start
    if on_cpu:
        after = _one(devices[0])
        peak = after.peak_since_reset_bytes
        exact = bool(after.peak_since_reset_exact)
        return {"peak": peak, "baseline": baseline, "method": reset.method, "exact": exact, "run_s": run_s,
                "device": str(devices[0]), "platform": devices[0].platform}
    best = None
    for d in devices:
        s = _one(d)
        base = baseline[d]
        scratch = None if s.peak_since_reset_bytes is None or base is None else s.peak_since_reset_bytes - base
        if best is None or (scratch or 0) > (best["scratch"] or 0):
            best = {"peak": s.peak_since_reset_bytes, "baseline": base, "scratch": scratch, "device": str(d),
                    "exact": bool(s.peak_since_reset_exact)}
    assert best is not None
    return {"peak": best["peak"], "baseline": best["baseline"], "method": reset.method, "exact": best["exact"],
            "run_s": run_s, "device": best["device"], "platform": devices[0].platform}


def _result(m: dict[str, Any], where: str, name: str | None, notes: list[str]) -> ProbeResult:
    peak, base = m["peak"], m["baseline"]
    scratch = peak - base if peak is not None and base is not None else None
    if m["method"] == "baseline" and not m["exact"]:
        notes.append("baseline reset and the peak did not rise: the peak is the lifetime peak (an upper bound)")
    return ProbeResult(peak, base, scratch, f"{where} {m['method']}", bool(m["exact"]), name, m["platform"],
                       m["device"], m["run_s"], tuple(notes))


def probe(fn_or_compiled: Any, *args: Any, isolate: bool = False, timeout_s: float = 300.0,
          **kwargs: Any) -> ProbeResult:
    """Measure the peak memory of one run of a program.

    Args:
      fn_or_compiled: a ``jax.stages.Compiled`` (arguments optional: zero-filled from its signature) or a
        jitted/plain function followed by example arguments (arrays or ``jax.ShapeDtypeStruct``).
      *args, **kwargs: the arguments. Donated arrays are copied first, so yours stay valid.
      isolate: run in a fresh subprocess that loads the serialized executable (see the module docstring).
      timeout_s: seconds the subprocess may take (``isolate=True``).

    Returns:
      :class:`ProbeResult` (bytes; ``method`` names the reset and where it ran).

    Raises:
      TypeError: unsupported input. ValueError: ``isolate=True`` with a multi-device program or one that
      cannot be serialized (host callbacks). RuntimeError: the subprocess failed (its stderr is included).
    """
    from xlakit.memory.compiled import _runtime_info

    compiled, args, kwargs = _program(fn_or_compiled, args, kwargs)
    name, _platform = _runtime_info(compiled)
    devices = _device_of(compiled)
    if isolate:
        return _probe_isolated(compiled, name, devices, timeout_s)
    placed_args, placed_kwargs = _materialize(compiled, args, kwargs)
    notes = []
    if devices[0].platform == "cpu":
        notes.append("CPU: VmHWM/VmRSS are process-wide; other threads' allocations during the run count too")
    m = measure(lambda: compiled(*placed_args, **placed_kwargs), devices)
    return _result(m, "in-process", name, notes)


def _probe_isolated(compiled: Any, name: str | None, devices: list[Any], timeout_s: float) -> ProbeResult:
    import jax
    from jax.experimental import serialize_executable

    if len(devices) != 1:
        raise ValueError(f"isolate=True supports single-device programs; this one uses {len(devices)} devices "
                         "(use isolate=False)")
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    except Exception as exc:  # noqa: BLE001 - e.g. host callbacks: "Can't pickle local object"
        raise ValueError(f"this program cannot be serialized for an isolated probe ({type(exc).__name__}: "
                         f"{exc}); use isolate=False") from exc
    flat, _ = jax.tree.flatten(compiled.in_avals)
    job = {"payload": payload, "in_tree": in_tree, "out_tree": out_tree,
           "specs": [(tuple(a.shape), str(a.dtype)) for a in flat], "platform": devices[0].platform,
           "device_id": devices[0].id}
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("JAX_PLATFORMS", devices[0].platform)
    with tempfile.TemporaryDirectory(prefix="xlakit-probe-") as tmp:
        path = Path(tmp) / "job.pkl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # our own bytes, readable by us only
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(job, fh)
        try:
            proc = subprocess.run([sys.executable, "-m", "xlakit.memory._probe_child", str(path)],
                                  capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the isolated probe ran past {timeout_s} s") from exc
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the isolated probe failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    m = json.loads(lines[-1])
    return _result(m, "subprocess", name, ["fresh process: executable loaded, not compiled; zero-filled args"])
