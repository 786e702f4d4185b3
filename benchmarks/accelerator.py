"""xlakit on whatever accelerator JAX picks, side by side with its anchors, in one run (issue 33's bars).

Every measurement is a *fresh process* (as after a restart; on a TPU one process at a time may open the chip, and
this parent never starts JAX). Each child reports the device JAX chose, and ``backend start``: the seconds of its
first ``jax.devices()`` (imports excluded everywhere). The programs are in ``_accel_programs.py``: a 6-layer bf16
transformer (d_model 1024, 8 heads, seq 512, batch 8, vocab 8192; a gather inside) and a Pallas kernel on an
accelerator; the same architecture smaller on the CPU (``interpret=True`` Pallas there), smaller still with
``--quick``. Stages (a failing stage prints its error and the others go on):

a. Warm start: the first call (trace, lower, compile or load, run) of the train step and of the Pallas program in
   five kinds of process: plain JAX (no cache), JAX's own persistent cache cold (empty) and warm
   (``jax_compilation_cache_dir`` with ``min_compile_time_secs=0`` and ``min_entry_size_bytes=0``, so it stores
   every program), xlakit transparent mode (``xlakit.enable_cache``) cold and warm. Compiles of the programs are
   counted from xlakit's event log (``compile``/``hit``/``miss``/``load_error`` events of user programs) and, in
   every process, from ``jax.monitoring`` (backend compile-or-load calls minus persistent-cache hits). Cold
   overhead of xlakit = (xlakit cold - plain cold) / plain cold's compile seconds; "xlakit's own" is the seconds of
   its lookup and store events in the cold process (steadier than a difference of two processes). Bars: warm
   first call <= 1.0x JAX's warm, 0 compiles warm, cold overhead <= 3 %.
b. Bundles: ``xlakit.export_bundle`` of the transformer's inference function (batch 1) and of a Pallas program
   (batch 8); one process exports them and fills their ``.cache`` (the first start), then a second start
   (``load_bundle(path)(x)``, the default background load) is timed to the first result, after the backend is up,
   beside the floor (``_floor.py``: ``deserialize_and_load`` of the same executable from bytes in memory, weights
   placed from host memory, one run). Bars: 0 compiles on the second start; first result <= floor + 0.15 s.
   After the floor's span, its process also times what comes before XLA's deserializer gets the executable
   (``_floor.handover``): xlakit's read of the entry, its MAC and hand-over, against the floor's unpickling (which
   copies the executable out of the pickle) — the part of the difference that scales with the executable's bytes.
c. The seed's scale: a folder of 20 MLP bundles (widths and depths varied, batch sizes 1 and 8: 40 programs),
   restarted: ``load_bundle(..., background=False)`` of each, timed from before the backend starts; beside it, in
   another process, the backend start and the sum of XLA's own loads (each executable deserialized and loaded from
   bytes in memory, one after the other). Bar: everything ready within (backend start + XLA's loads) x 1.10.
d. Memory: ``xlakit.memory.peak(step, params, tokens)`` seconds vs the compile seconds of the same train step, and
   ``xlakit.memory.probe(step, params, tokens)``: scratch bytes, exact or not, and why. Errors are printed.

The header names the platform, device kind and count, jax/jaxlib, and the backend's ``platform_version`` (on a
TPU: the libtpu build). On the CPU the bars are shown for reference: they are defined for an accelerator.

Usage: python benchmarks/accelerator.py [--quick] [--repeats 1|2] [--out results.json]
Exit status: 0 every stage ran and every bar holds; 1 a bar failed; 2 a stage failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PROGRAMS = ("transformer_train_step", "pallas_step")
BUNDLES = ("transformer", "pallas")
PALLAS_BUNDLE_BATCH = 8
FOLDER_BATCHES = (1, 8)
#: The issue's bars.
WARM_RATIO_BAR, COLD_OVERHEAD_BAR, FLOOR_MARGIN_S, FOLDER_MARGIN = 1.0, 0.03, 0.15, 0.10


# -- inside the child processes -------------------------------------------------------------------------------

def _start_backend(quick: bool) -> tuple[dict[str, Any], Any]:
    """Start JAX's backend (timed) and describe it; returns ``(info, sizes)``."""
    import jax
    import jaxlib
    from _accel_programs import sizes_for

    start = time.perf_counter()
    devices = jax.devices()
    backend_s = time.perf_counter() - start
    d = devices[0]
    sizes = sizes_for(d.platform, quick)
    info = {"platform": d.platform, "device_kind": d.device_kind, "device_count": len(devices),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "platform_version": " ".join(str(d.client.platform_version).split()), "backend_s": backend_s,
            "sizes": sizes.label}
    return info, sizes


class _JaxCompiles:
    """Counts, through ``jax.monitoring``, the backend compile-or-load calls (with their seconds) and the
    persistent-cache hits; a compile is a call that was not a hit."""

    def __init__(self) -> None:
        import jax
        from jax._src.dispatch import BACKEND_COMPILE_EVENT

        self.calls: list[tuple[str, float]] = []
        self.hits = 0

        def on_duration(event: str, seconds: float, **kwargs: Any) -> None:
            if event == BACKEND_COMPILE_EVENT:
                self.calls.append((str(kwargs.get("fun_name")), seconds))

        def on_event(event: str, **kwargs: Any) -> None:
            if event == "/jax/compilation_cache/cache_hits":
                self.hits += 1

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        jax.monitoring.register_event_listener(on_event)

    def mark(self) -> tuple[int, int]:
        return len(self.calls), self.hits

    def since(self, mark: tuple[int, int]) -> dict[str, Any]:
        calls = self.calls[mark[0]:]
        hits = self.hits - mark[1]
        return {"backend_calls": len(calls), "backend_s": sum(s for _, s in calls), "jax_cache_hits": hits,
                "jax_compiles": len(calls) - hits}


def _digest(tree: Any) -> str:
    import hashlib

    import jax
    import numpy as np

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:16]


def _xlakit_events(since: float, until: float) -> dict[str, Any]:
    """xlakit's event log between two ``time.monotonic()`` marks, user programs only: counts per kind, the
    reasons of misses and load errors, and the seconds of xlakit's own lookup/store work."""
    import xlakit

    frame = xlakit.events.log().to_frame()
    frame = frame[(frame["monotonic"] >= since) & (frame["monotonic"] <= until) & (frame["origin"] != "library")]
    counts = {k: int((frame["kind"] == k).sum()) for k in ("compile", "hit", "miss", "load_error", "store")}
    failed = frame[frame["kind"].isin(["miss", "load_error", "corrupt"])]
    own = frame[frame["kind"].isin(["hit", "miss", "store"]) & (frame["source"] == "xlakit")]
    return {"counts": counts, "reasons": sorted({str(r) for r in failed["reason"].dropna()}),
            "own_s": float(own["duration_s"].fillna(0).sum())}


def child_first_calls(mode: str, cache: str, quick: bool) -> dict[str, Any]:
    """Stage a: the first call of each program under ``mode`` (``plain``, ``jax`` or ``xlakit``)."""
    import gc

    import jax
    from _accel_programs import pallas_operands, pallas_step, tokens, train_step, transformer_params

    info, s = _start_backend(quick)
    counter = _JaxCompiles()
    if mode == "jax":
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    elif mode == "xlakit":
        import xlakit

        start = time.perf_counter()
        xlakit.enable_cache(cache)
        info["enable_s"] = time.perf_counter() - start
    programs = {"transformer_train_step": (train_step(s), lambda: (transformer_params(s), jax.device_put(tokens(s)))),
                "pallas_step": (pallas_step, lambda: tuple(jax.device_put(a) for a in pallas_operands(s)))}
    rows: dict[str, dict[str, Any]] = {}
    windows = {}
    for name, (fn, make_args) in programs.items():
        try:  # one program failing (a Pallas backend missing, say) leaves the other's numbers
            args = jax.block_until_ready(make_args())
            gc.collect()
            mark, since = counter.mark(), time.monotonic()
            start = time.perf_counter()
            out = jax.block_until_ready(jax.jit(fn)(*args))
            rows[name] = {"first_s": time.perf_counter() - start, **counter.since(mark)}
            windows[name] = (since, time.monotonic())
            rows[name]["digest"] = _digest(out)
            del out, args
        except Exception as exc:  # noqa: BLE001
            rows[name] = {"error": _error(exc)}
    if mode == "xlakit":
        for name, (since, until) in windows.items():
            rows[name]["xlakit"] = _xlakit_events(since, until)
    return {"info": info, "programs": rows}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:1500]}"


def child_export(root: str, quick: bool) -> dict[str, Any]:
    """Stages b and c, first start: export every bundle, then load each once (compiling and filling ``.cache``)."""
    import numpy as np
    from _accel_programs import infer, mlp_infer, mlp_params, pallas_infer, tokens, transformer_params

    import xlakit

    info, s = _start_backend(quick)
    root_path, folder = Path(root), Path(root) / "folder"
    rng = np.random.default_rng(3)
    exports = {  # bundle folder -> (fn, params, example input, batch sizes)
        root_path / "transformer": (infer(s), lambda: transformer_params(s), tokens(s, batch=1), (1,)),
        root_path / "pallas": (pallas_infer, lambda: {"b": rng.standard_normal((s.pallas_cols,), dtype=np.float32)},
                               np.zeros((PALLAS_BUNDLE_BATCH, s.pallas_cols), np.float32), (PALLAS_BUNDLE_BATCH,)),
        **{folder / f"mlp{i:02d}_w{width}_d{depth}": (mlp_infer, lambda i=i, w=width, d=depth: mlp_params(w, d, seed=i),
                                                     np.zeros((1, 256), np.float32), FOLDER_BATCHES)
           for i, (width, depth) in enumerate(s.folder)}}
    errors: dict[str, str] = {}
    first: dict[str, Any] = {}
    start = time.perf_counter()
    for path, (fn, params, example, batch_sizes) in exports.items():
        try:  # one bundle failing (a kernel jax.export refuses, say) leaves the others
            xlakit.export_bundle(fn, params(), example, path, batch_sizes=batch_sizes, rows_independent=True)
        except Exception as exc:  # noqa: BLE001
            errors[path.name] = f"export: {_error(exc)}"
    export_s = time.perf_counter() - start
    for path in exports:
        if path.name in errors:
            continue
        start = time.perf_counter()
        try:
            loaded = xlakit.load_bundle(path, progress=False, background=False)
        except Exception as exc:  # noqa: BLE001
            errors[path.name] = f"first load: {_error(exc)}"
            continue
        first[path.name] = {"ready_s": time.perf_counter() - start, "counts": loaded.counts(),
                            "entries": _stored_entries(path) if path.parent == root_path else []}
        errors.update({f"{path.name}/{k}": str(v) for k, v in loaded.errors.items()})
    return {"info": info, "export_s": export_s, "first_start": first, "errors": errors}


def _stored_entries(bundle: Path) -> list[dict[str, Any]]:
    """Each program stored in ``bundle/.cache``: its serialized payload's bytes, the bytes stored, the envelope's
    ``compression`` and what zstd (level 3) makes of the payload: whether this platform's executables compress
    decides whether a load decompresses them (:data:`xlakit.store.envelope.MIN_COMPRESSION_SAVING`)."""
    import zstandard

    from xlakit.store.envelope import PREFIX_BYTES, read_header

    rows = []
    for entry in sorted(bundle.glob(".cache/*/*.xlk")):
        blob = entry.read_bytes()
        header = read_header(blob)  # display only (not authenticated): a benchmark's own fresh entries
        stored = blob[PREFIX_BYTES + int.from_bytes(blob[16:20], "big") + 32:]
        raw = stored if header.get("compression") == "none" else zstandard.ZstdDecompressor().decompress(stored)
        rows.append({"raw_bytes": len(raw), "stored_bytes": len(stored), "compression": header.get("compression"),
                     "zstd_ratio": len(zstandard.ZstdCompressor(level=3).compress(raw)) / max(1, len(raw))})
    return rows


def _exported(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def _bundle_input(name: str, s: Any):
    import numpy as np
    from _accel_programs import tokens

    if name == "transformer":
        return tokens(s, batch=1)
    return np.random.default_rng(4).standard_normal((PALLAS_BUNDLE_BATCH, s.pallas_cols), dtype=np.float32)


def _import_bundle_loading() -> None:
    """What ``load_bundle`` imports on first use, so that import time stays out of every span (as the floor's)."""
    import jax.extend.backend  # noqa: F401
    import safetensors.numpy  # noqa: F401

    import xlakit._jax.environment  # noqa: F401
    import xlakit._jax.serialize  # noqa: F401
    import xlakit.bundle.loaded  # noqa: F401
    import xlakit.bundle.loader  # noqa: F401
    import xlakit.bundle.programs  # noqa: F401


def child_bundle_second_start(root: str, quick: bool) -> dict[str, Any]:
    """Stage b: a bundle's first result in a new process (backend already up), and its compiles."""
    import gc

    import jax

    import xlakit

    _import_bundle_loading()
    info, s = _start_backend(quick)
    rows = {}
    for name in (b for b in BUNDLES if _exported(Path(root) / b)):
        x = jax.device_put(_bundle_input(name, s))
        jax.block_until_ready(x)
        gc.collect()
        since = time.monotonic()
        start = time.perf_counter()
        loaded = xlakit.load_bundle(Path(root) / name, progress=False)
        out = jax.block_until_ready(loaded(x))
        first_s = time.perf_counter() - start
        loaded.wait()
        rows[name] = {"first_s": first_s, "counts": loaded.counts(), "digest": _digest(out),
                      "xlakit": _xlakit_events(since, time.monotonic())}
    return {"info": info, "bundles": rows}


def child_bundle_floor(root: str, quick: bool) -> dict[str, Any]:
    """Stage b's floor: XLA's own load of the same executable from memory, weights from host memory, one run."""
    import gc

    import jax
    from _floor import XlaLoader, handover, read_host_weights, read_programs

    info, s = _start_backend(quick)
    rows = {}
    for name in (b for b in BUNDLES if _exported(Path(root) / b)):
        payload = next(iter(read_programs(Path(root) / name).values()))
        host = read_host_weights(Path(root) / name)
        loader = XlaLoader()
        x = jax.device_put(_bundle_input(name, s))
        jax.block_until_ready(x)
        gc.collect()
        start = time.perf_counter()
        compiled = loader.load(payload)
        out = jax.block_until_ready(compiled(jax.device_put(host, loader.device), x))
        rows[name] = {"first_s": time.perf_counter() - start, "exec_s": loader.exec_s, "digest": _digest(out),
                      "handover": handover(Path(root) / name)}  # after the span: what precedes XLA, both ways
    return {"info": info, "bundles": rows}


def child_folder_restart(root: str, quick: bool) -> dict[str, Any]:
    """Stage c: every bundle of the folder ready (``background=False``), timed from before the backend starts."""
    import xlakit

    _import_bundle_loading()
    start = time.perf_counter()
    info, _ = _start_backend(quick)
    counts = {"hit": 0, "miss": 0, "error": 0}
    paths = [p for p in sorted((Path(root) / "folder").iterdir()) if _exported(p)]
    for path in paths:
        for kind, n in xlakit.load_bundle(path, progress=False, background=False).counts().items():
            counts[kind] += n
    return {"info": info, "ready_s": time.perf_counter() - start, "bundles": len(paths), "counts": counts}


def child_folder_floor(root: str, quick: bool) -> dict[str, Any]:
    """Stage c's floor: backend start, then XLA's own load of every program from memory, one after the other."""
    import jax
    from _floor import XlaLoader, read_host_weights, read_programs

    info, _ = _start_backend(quick)
    paths = [p for p in sorted((Path(root) / "folder").iterdir()) if _exported(p)]
    payloads = [p for path in paths for p in read_programs(path).values()]
    host = [read_host_weights(path) for path in paths]
    loader = XlaLoader()
    loads_s = 0.0
    for payload in payloads:
        start = time.perf_counter()
        loader.load(payload)
        loads_s += time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready([jax.device_put(h, loader.device) for h in host])
    return {"info": info, "loads_s": loads_s, "exec_s": loader.exec_s, "weights_s": time.perf_counter() - start,
            "program_count": len(payloads)}


def child_memory(quick: bool) -> dict[str, Any]:
    """Stage d: compile seconds of the train step, then ``memory.peak`` and ``memory.probe`` of it."""
    import jax
    from _accel_programs import tokens, train_step, transformer_params

    import xlakit

    info, s = _start_backend(quick)
    step = jax.jit(train_step(s))
    args = (transformer_params(s), jax.device_put(tokens(s)))
    start = time.perf_counter()
    lowered = step.lower(*args)
    lowered_at = time.perf_counter()
    lowered.compile()
    out: dict[str, Any] = {"info": info, "lower_s": lowered_at - start, "compile_s": time.perf_counter() - lowered_at}
    start = time.perf_counter()
    try:
        peak = xlakit.memory.peak(step, *args)
        out["peak"] = {"seconds": time.perf_counter() - start, "total_bytes": peak.total_bytes, "step": peak.step,
                       "steps": peak.steps, "where": peak.where}
    except Exception as exc:  # noqa: BLE001 - may fail on TPU today: report it and go on
        out["peak"] = {"seconds": time.perf_counter() - start, "error": _error(exc)}
    start = time.perf_counter()
    try:
        probe = xlakit.memory.probe(step, *args)
        out["probe"] = {"seconds": time.perf_counter() - start, "scratch_bytes": probe.scratch_bytes,
                        "exact": probe.exact, "reason": probe.reason, "method": probe.method,
                        "xla_bytes": probe.xla_bytes, "xla_temp_bytes": probe.xla_temp_bytes}
    except Exception as exc:  # noqa: BLE001
        out["probe"] = {"seconds": time.perf_counter() - start, "error": _error(exc)}
    return out


CHILDREN = {"first_calls": child_first_calls, "export": child_export, "bundle": child_bundle_second_start,
            "bundle_floor": child_bundle_floor, "folder": child_folder_restart, "folder_floor": child_folder_floor,
            "memory": child_memory}


# -- the parent (never starts JAX: on a TPU the children need the chip) ---------------------------------------

class Runs:
    """Starts the children one at a time, keeps their results per stage and the errors, within a time budget."""

    def __init__(self, quick: bool, budget_s: float, timeout_s: float) -> None:
        self.quick, self.budget_s, self.timeout_s = quick, budget_s, timeout_s
        self.started = time.perf_counter()
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.errors: list[dict[str, str]] = []

    def __call__(self, stage: str, kind: str, *args: str) -> dict[str, Any] | None:
        elapsed = time.perf_counter() - self.started
        if elapsed > self.budget_s:
            return self._fail(stage, f"not started: {elapsed:.0f} s of the {self.budget_s:.0f} s budget are spent")
        print(f"[{elapsed:6.1f} s] {stage} ...", flush=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *args,
               *(["--quick"] if self.quick else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return self._fail(stage, f"timed out after {self.timeout_s:.0f} s")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            return self._fail(stage, f"exit code {proc.returncode}: {proc.stderr.strip()[-1500:]}")
        result = json.loads(lines[-1])
        self.results.setdefault(stage, []).append(result)
        inner = {**result.get("errors", {}),
                 **{n: r["error"] for n, r in result.get("programs", {}).items() if "error" in r}}
        for what, error in inner.items():  # the child ran, but part of it failed
            self._fail(f"{stage} ({what})", error)
        return result

    def _fail(self, stage: str, error: str) -> None:
        print(f"    {stage} FAILED: {error}", flush=True)
        self.errors.append({"stage": stage, "error": error})
        return None

    def info(self) -> dict[str, Any] | None:
        return next((r[0]["info"] for r in self.results.values() if r), None)


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _get(results: list[dict[str, Any]], *path: str) -> list[Any]:
    out = []
    for r in results:
        for p in path:
            r = r.get(p) if isinstance(r, dict) else None
        out.append(r)
    return out


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def measure(runs: Runs, tmp: Path, repeats: int) -> None:
    """Every child, round by round: the first round fills the caches and bundles, later rounds only measure."""
    first = "first_calls"
    for i in range(repeats):
        runs("a: plain JAX, cold", first, "plain", "-")
        jax_cold, xlakit_cold = tmp / f"jax-cache-{i}", tmp / f"xlakit-cache-{i}"
        runs("a: JAX's cache, cold", first, "jax", str(jax_cold))
        runs("a: xlakit, cold", first, "xlakit", str(xlakit_cold))
        runs("a: JAX's cache, warm", first, "jax", str(tmp / "jax-cache-0"))
        runs("a: xlakit, warm", first, "xlakit", str(tmp / "xlakit-cache-0"))
        bundles = str(tmp / "bundles")
        if i == 0:
            runs("b/c: export + first start", "export", bundles)
        if "b/c: export + first start" in runs.results:
            runs("b: bundles, second start", "bundle", bundles)
            runs("b: floor", "bundle_floor", bundles)
            runs("c: folder, restart", "folder", bundles)
            runs("c: folder, floor", "folder_floor", bundles)
        if i == 0:
            runs("d: memory", "memory")


def report(runs: Runs, repeats: int) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
    """Print the tables; return the summary (numbers) and the bars ``(text, holds)``."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=170)
    res = runs.results
    info = runs.info()
    summary: dict[str, Any] = {"device": info, "repeats": repeats}
    bars: list[tuple[str, bool]] = []
    if info is None:
        console.print("[red]no stage ran: nothing to report[/red]")
        return summary, bars
    on_cpu = info["platform"] == "cpu"
    console.print(f"[bold]device[/bold]: {info['platform']} / {info['device_kind']} x {info['device_count']}; jax "
                  f"{info['jax']}, jaxlib {info['jaxlib']}; platform_version: {info['platform_version']}")
    console.print(f"sizes: {info['sizes']}; fresh process per measurement, median of {repeats} round(s)"
                  + ("; [yellow]no accelerator: CPU numbers, bars shown for reference[/yellow]" if on_cpu else ""))
    backend = _median([r["info"]["backend_s"] for rs in res.values() for r in rs])
    console.print(f"backend start (jax.devices(), median over every process): {_fmt(backend)} s")
    summary["backend_start_s"] = backend

    # a. warm start
    modes = {"plain": "a: plain JAX, cold", "jax_cold": "a: JAX's cache, cold", "xlakit_cold": "a: xlakit, cold",
             "jax_warm": "a: JAX's cache, warm", "xlakit_warm": "a: xlakit, warm"}
    table = Table(title="a. First call after a process start (seconds; compiles counted in the warm processes)",
                  title_justify="left")
    for col in ("program", "plain cold", "(its compile)", "JAX cold", "xlakit cold", "JAX warm", "xlakit warm",
                "xlakit / JAX warm", "compiles warm: xlakit", "JAX", "xlakit cold overhead", "(xlakit's own)",
                "warm = cold"):
        table.add_column(col, justify="left" if col == "program" else "right", no_wrap=col == "program")
    a: dict[str, Any] = {}
    for name in PROGRAMS:
        row = {m: _median(_get(res.get(stage, []), "programs", name, "first_s")) for m, stage in modes.items()}
        compile_s = _median(_get(res.get(modes["plain"], []), "programs", name, "backend_s"))
        xl_warm = res.get(modes["xlakit_warm"], [])
        # xlakit's compile events, cross-checked with jax.monitoring's count in the same process
        xl_compiles = max((max(x["xlakit"]["counts"]["compile"], x["jax_compiles"])
                           for x in _get(xl_warm, "programs", name) if x and "xlakit" in x), default=None)
        jax_compiles = max((c for c in _get(res.get(modes["jax_warm"], []), "programs", name, "jax_compiles")
                            if c is not None), default=None)
        overhead = (_ratio(row["xlakit_cold"] - row["plain"], compile_s)
                    if None not in (row["xlakit_cold"], row["plain"]) else None)
        own = _ratio(_median(_get(res.get(modes["xlakit_cold"], []), "programs", name, "xlakit", "own_s")), compile_s)
        digests = {m: _get(res.get(stage, []), "programs", name, "digest") for m, stage in modes.items()}
        cold_digest = (digests["plain"] or [None])[0]
        same = all(d == cold_digest for m in ("jax_warm", "xlakit_warm") for d in digests[m]) \
            if cold_digest and digests["xlakit_warm"] else None
        reasons = sorted({r for x in _get(xl_warm, "programs", name, "xlakit") if x for r in x["reasons"]})
        warm_ratio = _ratio(row["xlakit_warm"], row["jax_warm"])
        a[name] = {**row, "compile_s": compile_s, "xlakit_warm_over_jax_warm": warm_ratio,
                   "xlakit_compiles_warm": xl_compiles, "jax_compiles_warm": jax_compiles,
                   "cold_overhead": overhead, "cold_overhead_own": own, "warm_bit_identical": same,
                   "xlakit_warm_reasons": reasons}
        table.add_row(name, _fmt(row["plain"]), _fmt(compile_s), _fmt(row["jax_cold"]), _fmt(row["xlakit_cold"]),
                      _fmt(row["jax_warm"]), _fmt(row["xlakit_warm"]), _fmt(warm_ratio, ".2f") + "x",
                      "-" if xl_compiles is None else str(xl_compiles),
                      "-" if jax_compiles is None else str(jax_compiles),
                      _fmt(None if overhead is None else 100 * overhead, "+.1f") + " %",
                      _fmt(None if own is None else 100 * own, ".1f") + " %",
                      "-" if same is None else ("yes" if same else "[red]NO[/red]"))
        if warm_ratio is not None:
            bars.append((f"a {name}: xlakit warm <= {WARM_RATIO_BAR:.1f}x JAX's warm ({warm_ratio:.2f}x)",
                         warm_ratio <= WARM_RATIO_BAR))
        if xl_compiles is not None:
            why = f"; {'; '.join(reasons)}" if reasons else ""
            bars.append((f"a {name}: 0 compiles in the warm xlakit process ({xl_compiles}{why})", xl_compiles == 0))
        if overhead is not None:
            bars.append((f"a {name}: xlakit cold overhead <= {100 * COLD_OVERHEAD_BAR:.0f} % of the compile "
                         f"({100 * overhead:+.1f} %; xlakit's own lookup + store: "
                         f"{_fmt(None if own is None else 100 * own, '.1f')} %)", overhead <= COLD_OVERHEAD_BAR))
    summary["warm_start"] = a
    console.print(table)

    # b. bundles
    first_start = (res.get("b/c: export + first start") or [{}])[0]
    table = Table(title="b. Bundles: first result of the second start, after the backend is up (seconds)",
                  title_justify="left")
    for col in ("bundle", "first start: compiled", "second start: compiled or failed", "first result", "floor",
                "first result - floor", "same answer as the floor"):
        table.add_column(col, justify="left" if col == "bundle" else "right")
    b: dict[str, Any] = {}
    for name in BUNDLES:
        got = _median(_get(res.get("b: bundles, second start", []), "bundles", name, "first_s"))
        floor = _median(_get(res.get("b: floor", []), "bundles", name, "first_s"))
        counts = [c for c in _get(res.get("b: bundles, second start", []), "bundles", name, "counts") if c]
        events = [c for c in _get(res.get("b: bundles, second start", []), "bundles", name, "xlakit", "counts") if c]
        # modules compiled (the bundle's own count) or failed, cross-checked with xlakit's compile events
        compiles = max((c["miss"] + c["error"] for c in counts), default=None)
        if events:
            compiles = max(compiles or 0, max(e["compile"] for e in events))
        first_compiled = (first_start.get("first_start", {}).get(name) or {}).get("counts", {}).get("miss")
        d_bundle = _get(res.get("b: bundles, second start", []), "bundles", name, "digest")
        d_floor = _get(res.get("b: floor", []), "bundles", name, "digest")
        same = (set(d_bundle) == set(d_floor) and len(set(d_bundle)) == 1) if d_bundle and d_floor else None
        over = None if got is None or floor is None else got - floor
        b[name] = {"first_result_s": got, "floor_s": floor, "over_floor_s": over, "compiles_second_start": compiles,
                   "compiled_first_start": first_compiled, "same_as_floor": same}
        table.add_row(name, "-" if first_compiled is None else str(first_compiled),
                      "-" if compiles is None else str(compiles), _fmt(got), _fmt(floor), _fmt(over, "+.3f"),
                      "-" if same is None else ("yes" if same else "[red]NO[/red]"))
        if compiles is not None:
            bars.append((f"b {name}: 0 modules compiled (or failed) on the bundle's second start ({compiles})",
                         compiles == 0))
        if over is not None:
            bars.append((f"b {name}: first result <= floor + {FLOOR_MARGIN_S} s ({over:+.3f} s)",
                         over <= FLOOR_MARGIN_S))
    summary["bundles"] = b
    console.print(table)
    for name in BUNDLES:
        for e in (first_start.get("first_start", {}).get(name) or {}).get("entries", []):
            console.print(f"  {name}: serialized program {e['raw_bytes']:,} bytes, stored {e['stored_bytes']:,} bytes "
                          f"(compression {e['compression']}; zstd level 3 would make it {e['zstd_ratio']:.2f}x)")
        handed = [h for h in _get(res.get("b: floor", []), "bundles", name, "handover") if h]
        if handed:
            ours, theirs = _median([h["xlakit_s"] for h in handed]), _median([h["floor_s"] for h in handed])
            b[name]["handover"] = {"xlakit_s": ours, "floor_s": theirs}
            console.print(f"  {name}: before XLA's deserializer gets the executable ({handed[0]['executable_bytes']:,} "
                          f"bytes): xlakit {_fmt(ours, '.4f')} s ({handed[0]['how']}), floor {_fmt(theirs, '.4f')} "
                          f"s (JAX's unpickler copies it): {_fmt(_ratio(ours, theirs), '.2f')}x")

    # c. the folder
    restart, floor_runs = res.get("c: folder, restart", []), res.get("c: folder, floor", [])
    ready = _median(_get(restart, "ready_s"))
    restart_backend = _median(_get(restart, "info", "backend_s"))
    loads = _median(_get(floor_runs, "loads_s"))
    floor_backend = _median(_get(floor_runs, "info", "backend_s"))
    counts = (restart or [{}])[-1].get("counts")
    bound = None if restart_backend is None or loads is None else (restart_backend + loads) * (1 + FOLDER_MARGIN)
    summary["folder"] = {"bundles": (restart or [{}])[-1].get("bundles"), "programs": (floor_runs or [{}])[-1].get(
        "program_count"), "ready_s": ready, "backend_start_s": restart_backend, "floor_backend_start_s": floor_backend,
        "xla_loads_s": loads, "weights_s": _median(_get(floor_runs, "weights_s")), "bound_s": bound,
        "counts": counts}
    f = summary["folder"]
    console.print(f"[bold]c. A folder of {f['bundles']} bundles ({f['programs']} programs), restarted[/bold]: backend "
                  f"start {_fmt(restart_backend)} s (floor process: {_fmt(floor_backend)} s), XLA's own loads "
                  f"{_fmt(loads)} s (sum, one after the other; weights placed in {_fmt(f['weights_s'])} s), xlakit "
                  f"ready {_fmt(ready)} s from before the backend start; bound (backend + loads) x "
                  f"{1 + FOLDER_MARGIN:.2f} = {_fmt(bound)} s; programs {counts}")
    if ready is not None and bound is not None:
        bars.append((f"c: {f['bundles']} bundles ready within (backend start + XLA's loads) + "
                     f"{100 * FOLDER_MARGIN:.0f} % ({ready:.3f} s vs {bound:.3f} s; "
                     f"{_ratio(ready, bound / (1 + FOLDER_MARGIN)):.2f}x)", ready <= bound))
    if counts is not None:
        bars.append((f"c: 0 compiles on the folder's restart ({counts['miss']} compiled, {counts['error']} failed)",
                     counts["miss"] == 0 and counts["error"] == 0))

    # d. memory
    mem = (res.get("d: memory") or [None])[0]
    if mem is not None:
        peak, probe = mem["peak"], mem["probe"]
        ratio = _ratio(peak["seconds"], mem["compile_s"])
        console.print(f"[bold]d. Memory of the train step[/bold]: compile {mem['compile_s']:.3f} s (lower "
                      f"{mem['lower_s']:.3f} s); memory.peak {peak['seconds']:.3f} s = {_fmt(ratio, '.2f')}x the "
                      "compile: " + (f"[red]{peak['error']}[/red]" if "error" in peak else
                                     f"{peak['total_bytes']:,} B at step {peak['step']} of {peak['steps']} "
                                     f"({peak['where']})"))
        console.print(f"   memory.probe {probe['seconds']:.3f} s: " + (
            f"[red]{probe['error']}[/red]" if "error" in probe else
            f"scratch {_fmt(probe['scratch_bytes'], ',')} B, exact: {probe['exact']} ({probe['reason']}); "
            f"method {probe['method']}; XLA says {_fmt(probe['xla_bytes'], ',')} B "
            f"(temporaries {_fmt(probe['xla_temp_bytes'], ',')} B)"))
        summary["memory"] = {**mem, "peak_over_compile": ratio}
        del summary["memory"]["info"]
    return summary, bars


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest sizes (a smoke run on the CPU)")
    ap.add_argument("--repeats", type=int, default=1, choices=(1, 2), help="rounds of measuring processes (median)")
    ap.add_argument("--out", help="also write every number as JSON to this file")
    ap.add_argument("--budget-s", type=float, default=450.0, help="start no process after this many seconds")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="seconds one process may take")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        print(json.dumps(CHILDREN[kind](*rest, quick=args.quick)), flush=True)
        return 0

    with tempfile.TemporaryDirectory(prefix="xlakit-accel-bench-") as tmp:
        # One HMAC secret and fingerprint memo for every child, kept out of the user's folders.
        os.environ["XLAKIT_CONFIG_DIR"] = str(Path(tmp) / "config")
        os.environ["XLAKIT_CACHE_DIR"] = str(Path(tmp) / "default-cache")
        print(f"JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS', '(unset: JAX picks)')}; one fresh process per "
              "measurement", flush=True)
        runs = Runs(args.quick, args.budget_s, args.timeout_s)
        measure(runs, Path(tmp), args.repeats)
    total_s = time.perf_counter() - runs.started
    summary, bars = report(runs, args.repeats)
    for text, holds in bars:
        print(("PASS " if holds else "FAIL ") + text)
    for e in runs.errors:
        print(f"STAGE FAILED {e['stage']}: {e['error']}")
    print(f"benchmark finished in {total_s:.1f} s ({sum(len(v) for v in runs.results.values())} processes)")
    if args.out:
        summary.update(bars=[{"bar": t, "holds": h} for t, h in bars], errors=runs.errors, total_s=total_s,
                       raw=runs.results)
        Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    return 2 if runs.errors else (1 if not all(h for _, h in bars) else 0)


if __name__ == "__main__":
    sys.exit(main())
