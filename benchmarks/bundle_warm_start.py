"""Bundle warm start, side by side: cold compile vs JAX's persistent cache (warm) vs an xlakit bundle (warm).

Twelve inference programs: the demo's flax.nnx CNN (28x28x1 images) and 4-layer scanned transformer (64 tokens) at
batch sizes 1, 2, 4, 8, 16 and 32 each. Every measurement is a *fresh process*, as after a restart:

* cold:           ``jax.jit(infer).lower(params, x).compile()`` per program, no cache (trace, lower, compile);
* JAX warm:       the same with JAX's persistent cache filled by an earlier process (trace, lower, load);
                  ``jax_persistent_cache_min_compile_time_secs=0`` and ``min_entry_size_bytes=0`` so it
                  stores every program (its defaults would skip the fast ones);
* bundle cold:    ``xlakit.load_bundle`` on the two bundles with an empty ``.cache`` (compile and store);
* bundle warm:    ``xlakit.load_bundle(..., background=False)`` with ``.cache`` filled: read weights, hash
                  modules, load programs, largest first; no model code is imported and nothing is traced.
* bundle warm, default + wait(): ``xlakit.load_bundle(...).wait()`` — the default background load (most
                  likely program first with a head start, the weights placed meanwhile), waited for in full.
* floor:          XLA's own load of the same twelve executables from bytes already in memory, and the same
                  weights placed from host arrays already in memory: no files, no hashing, no checks. Per
                  program, what ``jax.experimental.serialize_executable.deserialize_and_load`` does (JAX's own
                  unpickler, whose persistent ``('exec', bytes)`` id calls ``Client.deserialize_executable``,
                  then ``unloaded.load()`` and ``jax.stages.Compiled``), in a pool of as many threads as
                  ``load_bundle`` uses, largest program first. The payloads are read from the bundle's
                  ``.cache`` (verified) before the timed span; ``floor exec`` is the sum over programs of the
                  ``deserialize_executable`` calls alone (thread-seconds).

Two spans are timed from after the imports: *programs ready* (the above for all twelve), and *ready + one
run of each* (plus the first call of every program on its example input — the same executables run in
every column, so this adds about the same to each); *programs ready* is also given as process CPU time
(``time.process_time``, all threads), steadier than wall time on a shared machine. *Time to first result*
is a separate fresh process per column: from the start to the first output of one program (``--first``,
default the transformer at batch 1): cold and JAX warm trace/lower/compile-or-load that one program; the
bundle loads the model's bundle and calls it, once waiting for all its programs (``background=False``) and
once with ``load_bundle``'s default (``background=True``: it returns when the weights are placed, the programs
load in the background smallest batch first, and the call waits only for its own program); the floor loads that one
program and places the weights from memory, then runs it. The column *bundle warm, warmup=True* is bundle warm
with each program run once on zeros in the loading thread right after it loads (``warmup=True``).

The first-execution cost (``benchmarks/first_execution.py``, demo transformer at batch 1, medians of 5 fresh
processes, 2-core EPYC, jaxlib 0.10.2 CPU): the first run of an executable costs 10.3 ms of CPU, the second
1.8 ms, for a freshly compiled and a deserialized executable alike (5-6x). ``perf`` shows YNNPACK building the
execution pipeline of each fusion on its first run (54 % of first-run samples in ``slinky::`` pipeline
building, 1.6 % in the second) plus first-touch page faults and malloc; not the Eigen thread pool, not Python.
The prepared state is cached per computation in the process and does not depend on input values, so a run on
zeros pays it: after ``warm_up`` the first real run costs 2.0 ms of CPU. That is what ``warmup=True`` does; it
pays off for programs that will be called, and costs about one run (10-15 ms CPU here) for each that is not. Columns are
interleaved round by round so machine noise hits all alike. The jit columns build their parameters in memory
first (not timed); the bundle columns read theirs from ``weights.safetensors`` inside the timed span.
Import time (``import jax``, flax, xlakit and the JAX modules xlakit imports on first use) is excluded
everywhere. Then ``load_bundle`` is timed with 1, 2
and 4 worker threads, warm and cold, to pick its default. Medians over ``--repeats`` processes. Outputs of
every column are compared with the cold column's.

The load average (1 minute) after each round is printed: on a shared machine, read the CPU row and the ratios.

Usage: python benchmarks/bundle_warm_start.py [--repeats 3] [--no-sweep] [--first transformer:1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCHES = (1, 2, 4, 8, 16, 32)
MODELS = ("cnn", "transformer")


# -- inside the child processes -------------------------------------------------------------------------------

def _models():
    """name -> (infer(params, x), params, example input at batch 1 as a NumPy array); nothing compiled."""
    from flax import nnx

    from xlakit.demo.workloads import _CNN, _init, _Transformer

    out = {}
    for name, cls in (("cnn", _CNN), ("transformer", _Transformer)):
        graphdef, params = _init(cls, seed=0)

        def infer(params, x, graphdef=graphdef):
            return nnx.merge(graphdef, params)(x)

        infer.__name__ = infer.__qualname__ = f"{name}_infer"
        out[name] = (infer, params)
    return out


def _inputs(model: str, batch: int):
    import numpy as np

    rng = np.random.default_rng(batch)
    if model == "cnn":
        return rng.standard_normal((batch, 28, 28, 1), dtype=np.float32)
    return rng.integers(0, 512, size=(batch, 64), dtype=np.int32)


def _digest(out) -> str:
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(np.asarray(out)).tobytes()).hexdigest()[:16]


def child_export(root: str) -> dict:
    import xlakit

    for name, (infer, params) in _models().items():
        xlakit.export_bundle(infer, params, _inputs(name, 1), Path(root) / name, batch_sizes=BATCHES)
    return {}


def _settle_gc() -> None:
    """Run the cyclic garbage collector's full collection now, before a timed span. After importing JAX and
    flax a full collection (40-50 ms here) falls due within the next few thousand allocations; without this,
    whether it lands inside a column's span depends on how many objects that column happened to allocate
    (measured: it moved a column's CPU time by 50-80 ms between two runs of the same code)."""
    import gc

    gc.collect()


def _which(first: str) -> list[tuple[str, int]]:
    """The programs a child handles: all twelve, or the one named ``model:batch`` (time to first result)."""
    if not first or first == "-":
        return [(m, b) for m in MODELS for b in BATCHES]
    m, b = first.split(":")
    return [(m, int(b))]


def child_jit(mode: str, cache: str, first: str = "-") -> dict:
    import jax

    if mode == "jax":
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    models = _models()
    todo = _which(first)
    inputs = {(m, b): jax.device_put(_inputs(m, b)) for m, b in todo}
    jax.block_until_ready(list(inputs.values()))
    _settle_gc()
    start, cpu = time.perf_counter(), time.process_time()
    compiled = {}
    fns = {m: jax.jit(models[m][0]) for m in MODELS}  # one jit object per model; each batch size is a new program
    for m, b in todo:  # trace, lower, then compile (cold) or load from JAX's cache (warm)
        compiled[(m, b)] = fns[m].lower(models[m][1], inputs[(m, b)]).compile()
    ready_s, ready_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    digests = {}
    for (m, b), c in compiled.items():
        digests[f"{m}_b{b}"] = _digest(jax.block_until_ready(c(models[m][1], inputs[(m, b)])))
    return {"ready_s": ready_s, "ready_cpu_s": ready_cpu_s, "total_s": time.perf_counter() - start,
            "digests": digests}


def child_bundle(root: str, workers: int, first: str = "-", mode: str = "sync") -> dict:
    """``mode``: ``sync`` (``background=False``: load_bundle returns with every program loaded), ``bg`` (the
    default, ``background=True``: returns once the weights are placed; a call waits for its own program),
    ``bgwait`` (the default, then ``wait()`` for every program), ``warmup`` (``background=False, warmup=True``:
    each program runs once on zeros in the loading thread right after it loads)."""
    import jax

    # Imports are excluded from every column: load the modules load_bundle imports on first use
    # (jax.extend, which xlakit's environment fingerprint uses, alone takes ~60 ms to import here).
    import jax.extend.backend
    import safetensors.numpy  # noqa: F401 - import time is excluded everywhere

    import xlakit
    import xlakit._jax.environment
    import xlakit._jax.executables
    import xlakit._jax.fresh
    import xlakit._jax.serialize
    import xlakit._jax.warmup
    import xlakit.bundle
    import xlakit.cache.path
    import xlakit.memory.compiled
    import xlakit.store

    todo = _which(first)
    models = sorted({m for m, _ in todo}, key=MODELS.index)
    inputs = {(m, b): jax.device_put(_inputs(m, b)) for m, b in todo}
    jax.block_until_ready(list(inputs.values()))
    _settle_gc()
    start, cpu = time.perf_counter(), time.process_time()
    background = mode in ("bg", "bgwait")
    loaded = {m: xlakit.load_bundle(Path(root) / m, max_workers=workers, progress=False, background=background,
                                    warmup=mode == "warmup") for m in models}
    if mode == "bgwait":
        for lb in loaded.values():
            lb.wait()
    ready_s, ready_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    digests = {}
    for m, b in todo:
        digests[f"{m}_b{b}"] = _digest(jax.block_until_ready(loaded[m](inputs[(m, b)])))
    total_s = time.perf_counter() - start  # before counts(), which waits for every program of a background load
    counts = {m: loaded[m].counts() for m in models}
    return {"ready_s": ready_s, "ready_cpu_s": ready_cpu_s, "total_s": total_s,
            "digests": digests, "counts": counts, "programs": sum(len(lb.programs) for lb in loaded.values())}


def child_floor(root: str, workers: int, first: str = "-") -> dict:
    """XLA's own load from memory: see the module docstring (*floor*)."""
    import concurrent.futures

    import jax
    from _floor import XlaLoader, read_host_weights, read_programs

    todo = _which(first)
    models = sorted({m for m, _ in todo}, key=MODELS.index)
    device = jax.devices()[0]
    payloads, host_weights = {}, {}
    for m in models:  # everything into memory, verified, before the timed span
        batches = tuple(b for mm, b in todo if mm == m)
        payloads.update({(m, b): p for b, p in read_programs(Path(root) / m, batches).items()})
        host_weights[m] = read_host_weights(Path(root) / m)
    inputs = {(m, b): jax.device_put(_inputs(m, b)) for m, b in todo}
    jax.block_until_ready(list(inputs.values()))
    loader = XlaLoader(device)

    def load(item):
        return item[0], loader.load(item[1])

    order = sorted(payloads.items(), key=lambda kv: -len(kv[1]))  # largest first: the pool's tail is shortest
    _settle_gc()
    start, cpu = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        compiled = dict(pool.map(load, order))
    weights = {m: jax.device_put(host_weights[m], device) for m in models}
    jax.block_until_ready(list(weights.values()))
    ready_s, ready_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    digests = {}
    for m, b in todo:
        digests[f"{m}_b{b}"] = _digest(jax.block_until_ready(compiled[(m, b)](weights[m], inputs[(m, b)])))
    return {"ready_s": ready_s, "ready_cpu_s": ready_cpu_s, "total_s": time.perf_counter() - start,
            "digests": digests, "exec_s": loader.exec_s}


# -- the parent -----------------------------------------------------------------------------------------------

def run(*args: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(runs: list[dict], field: str = "total_s") -> float:
    return statistics.median(r[field] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-sweep", action="store_true", help="skip the worker-count sweep")
    ap.add_argument("--first", default="transformer:1", help="model:batch for the time-to-first-result row")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "export":
            result = child_export(*rest)
        elif kind == "jit":
            result = child_jit(*rest)
        elif kind == "floor":
            result = child_floor(rest[0], int(rest[1]), *rest[2:])
        else:
            result = child_bundle(rest[0], int(rest[1]), *rest[2:])  # root, workers[, first[, mode]]
        print(json.dumps(result), flush=True)
        return 0

    from rich.console import Console
    from rich.table import Table

    from xlakit.bundle.loader import DEFAULT_MAX_WORKERS

    r, w, first = args.repeats, str(DEFAULT_MAX_WORKERS), args.first
    _which(first)  # a malformed --first fails here, not in a child
    with tempfile.TemporaryDirectory(prefix="xlakit-bundle-bench-") as tmp:
        tmp_path = Path(tmp)
        # One HMAC secret for every child (as on one machine), kept out of the real config folder.
        os.environ["XLAKIT_CONFIG_DIR"] = str(tmp_path / "config")
        pristine = tmp_path / "pristine"
        print(f"exporting 2 bundles x {len(BATCHES)} batch sizes ...", flush=True)
        run("export", str(pristine))

        def fresh_copy(name: str) -> Path:
            dest = tmp_path / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(pristine, dest)
            return dest

        jaxcache = str(tmp_path / "jaxcache")
        run("jit", "jax", jaxcache)  # fill JAX's cache
        warm_root = fresh_copy("warm")
        run("bundle", str(warm_root), w)  # fill the bundles' .cache
        print(f"measuring: {r} interleaved rounds of fresh processes (median) ...", flush=True)
        cols = {k: [] for k in ("cold", "jax", "bcold", "bwarm", "bbgwait", "bwarmup", "floor")}
        firsts = {k: [] for k in ("cold", "jax", "bwarm", "bbg", "floor")}
        loads = []
        for i in range(r):
            cols["cold"].append(run("jit", "none", "-"))
            cols["jax"].append(run("jit", "jax", jaxcache))
            cols["bcold"].append(run("bundle", str(fresh_copy(f"cold{i}")), w))
            cols["bwarm"].append(run("bundle", str(warm_root), w, "-", "sync"))
            cols["bbgwait"].append(run("bundle", str(warm_root), w, "-", "bgwait"))
            cols["bwarmup"].append(run("bundle", str(warm_root), w, "-", "warmup"))
            cols["floor"].append(run("floor", str(warm_root), w))
            firsts["cold"].append(run("jit", "none", "-", first))
            firsts["jax"].append(run("jit", "jax", jaxcache, first))
            firsts["bwarm"].append(run("bundle", str(warm_root), w, first))
            firsts["bbg"].append(run("bundle", str(warm_root), w, first, "bg"))
            firsts["floor"].append(run("floor", str(warm_root), w, first))
            loads.append(os.getloadavg()[0])
        sweep = {}
        if not args.no_sweep:
            for n in (1, 2, 4):
                sweep[n] = {"warm": [run("bundle", str(warm_root), str(n)) for _ in range(r)],
                            "cold": [run("bundle", str(fresh_copy(f"sweep{n}-{i}")), str(n)) for i in range(r)],
                            "floor": [run("floor", str(warm_root), str(n)) for _ in range(r)]}

    ready = {k: median(v, "ready_s") for k, v in cols.items()}
    ready_cpu = {k: median(v, "ready_cpu_s") for k, v in cols.items()}
    ready_min = {k: min(x["ready_s"] for x in v) for k, v in cols.items()}
    total = {k: median(v, "total_s") for k, v in cols.items()}
    first_s = {k: median(v, "total_s") for k, v in firsts.items()}
    bundle_warm = cols["bwarm"]
    n_programs = bundle_warm[0]["programs"]
    assert all(v["hit"] == len(BATCHES) for v in bundle_warm[0]["counts"].values()), bundle_warm[0]["counts"]

    table = Table(title=f"{n_programs} programs (flax CNN + transformer, batch sizes {', '.join(map(str, BATCHES))}), "
                        f"fresh process, seconds, median of {r} interleaved rounds, {w} load threads, "
                        f"os.cpu_count()={os.cpu_count()}", title_justify="left")
    for col in ("", "cold (jax.jit)", "JAX cache warm", "bundle cold", "bundle warm (background=False)",
                "bundle warm, default + wait()", "bundle warm, warmup=True",
                "floor (XLA load)", "bundle warm / floor", "cold / bundle warm", "JAX warm / bundle warm"):
        table.add_column(col, justify="left" if not col else "right")
    for label, d in (("programs ready", ready), ("programs ready, best of rounds", ready_min),
                     ("programs ready, process CPU s", ready_cpu),
                     ("ready + one run of each", total)):
        table.add_row(label, *(f"{d[k]:.3f}" for k in cols), f"{d['bwarm'] / d['floor']:.2f}x",
                      f"{d['cold'] / d['bwarm']:.1f}x", f"{d['jax'] / d['bwarm']:.1f}x")
    f = first_s
    label = first.replace(':', ' b')
    table.add_row(f"time to first result ({label}), background=False", f"{f['cold']:.3f}", f"{f['jax']:.3f}", "-",
                  f"{f['bwarm']:.3f}", "-", "-", f"{f['floor']:.3f}", f"{f['bwarm'] / f['floor']:.2f}x",
                  f"{f['cold'] / f['bwarm']:.1f}x", f"{f['jax'] / f['bwarm']:.1f}x")
    table.add_row(f"time to first result ({label}), default (background)", f"{f['cold']:.3f}", f"{f['jax']:.3f}",
                  "-", f"{f['bbg']:.3f}", "-", "-", f"{f['floor']:.3f}", f"{f['bbg'] / f['floor']:.2f}x",
                  f"{f['cold'] / f['bbg']:.1f}x", f"{f['jax'] / f['bbg']:.1f}x")
    console = Console(width=180)
    console.print(table)
    print(f"load average (1 min) after each round: {', '.join(f'{x:.1f}' for x in loads)}; "
          f"os.cpu_count()={os.cpu_count()}")
    print("programs ready: jax.jit(f).lower(...).compile() for every program (trace, lower, compile or JAX cache "
          "load); for bundles, load_bundle (weights, hashes, load or compile); floor: JAX's own unpickler + "
          "Client.deserialize_executable from bytes in memory + weights from host memory. One run of each: the "
          f"same first calls in every column. floor exec (deserialize_executable alone, thread-seconds, median): "
          f"{median(cols['floor'], 'exec_s'):.3f} s for {n_programs}; time to first result: "
          f"{median(firsts['floor'], 'exec_s'):.3f} s for one.")
    c, j, bw, fl = ready["cold"], ready["jax"], ready["bwarm"], ready["floor"]

    if sweep:
        st = Table(title="load_bundle and the floor by worker threads (programs ready, seconds, median)",
                   title_justify="left")
        for col in ("workers", "warm load_bundle", "floor", "warm / floor", "cold load_bundle"):
            st.add_column(col, justify="right")
        for n, runs in sweep.items():
            bwn, fln = median(runs["warm"], "ready_s"), median(runs["floor"], "ready_s")
            cold = median(runs['cold'], 'ready_s')
            st.add_row(str(n), f"{bwn:.3f}", f"{fln:.3f}", f"{bwn / fln:.2f}x", f"{cold:.3f}")
        console.print(st)
        print(f"default workers here: {DEFAULT_MAX_WORKERS} (os.cpu_count()={os.cpu_count()})")

    ref = cols["cold"][0]["digests"]
    same_jax = cols["jax"][0]["digests"] == ref
    same_bundle = sum(bundle_warm[0]["digests"][k] == ref[k] for k in ref)
    same_floor = cols["floor"][0]["digests"] == bundle_warm[0]["digests"]
    print(f"outputs: JAX warm {'bit-identical to' if same_jax else 'DIFFER from'} cold; bundle warm bit-identical "
          f"to cold jit for {same_bundle}/{len(ref)} programs; bundle warm == bundle cold: "
          f"{bundle_warm[0]['digests'] == cols['bcold'][0]['digests']}; floor == bundle warm: {same_floor}")
    fb, ff = first_s["bbg"], first_s["floor"]
    print(f"time to first result with background=True: {fb / ff:.2f}x the floor's for that one program (the floor "
          "loads only that program; the bundle also reads the manifest, hashes every module and starts the others)")
    checks = [(f"time to first result with background=True <= JAX's cache warm ({first_s['jax'] / fb:.2f}x faster)",
               fb <= first_s["jax"]),
              ("bundle warm with warmup=True: outputs == bundle warm outputs",
               cols["bwarmup"][0]["digests"] == bundle_warm[0]["digests"]),
              (f"bundle warm >= 10x faster than cold, programs ready ({c / bw:.1f}x)", c / bw >= 10.0),
              (f"bundle warm >= 3x faster than JAX's persistent cache warm, programs ready ({j / bw:.1f}x)",
               j / bw >= 3.0),
              (f"bundle warm <= 1.5x the floor, programs ready ({bw / fl:.2f}x; goal of issue 15)", bw / fl <= 1.5),
              ((f"bundle warm <= 1.5x the floor, programs ready, process CPU time (steadier on a shared machine: "
               f"{ready_cpu['bwarm'] / ready_cpu['floor']:.2f}x)"), ready_cpu["bwarm"] / ready_cpu["floor"] <= 1.5),
              ("bundle warm outputs == bundle cold outputs == floor outputs",
               bundle_warm[0]["digests"] == cols["bcold"][0]["digests"] and same_floor)]
    for text, ok in checks:
        print(("PASS " if ok else "FAIL ") + text)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
