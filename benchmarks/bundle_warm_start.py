"""Bundle warm start, side by side: cold compile vs JAX's persistent cache (warm) vs an xlakit bundle (warm).

Twelve inference programs: the demo's flax.nnx CNN (28x28x1 images) and 4-layer scanned transformer (64 tokens) at
batch sizes 1, 2, 4, 8, 16 and 32 each. Every measurement is a *fresh process*, as after a restart:

* cold:           ``jax.jit(infer).lower(params, x).compile()`` per program, no cache (trace, lower, compile);
* JAX warm:       the same with JAX's persistent cache filled by an earlier process (trace, lower, load);
                  ``jax_persistent_cache_min_compile_time_secs=0`` and ``min_entry_size_bytes=0`` so it
                  stores every program (its defaults would skip the fast ones);
* bundle cold:    ``xlakit.load_bundle`` on the two bundles with an empty ``.cache`` (compile and store);
* bundle warm:    ``xlakit.load_bundle`` with ``.cache`` filled: read weights, hash modules, load programs;
                  no model code is imported and nothing is traced.

Two spans are timed from after the imports: *programs ready* (the above for all twelve), and *ready + one
run of each* (plus the first call of every program on its example input — the same executables run in
every column, so this adds about the same to each). The jit columns build their parameters in memory
first (not timed); the bundle columns read theirs from ``weights.safetensors`` inside the timed span.
Import time (``import jax``, flax, xlakit and the JAX modules xlakit imports on first use) is excluded
everywhere. Then ``load_bundle`` is timed with 1, 2
and 4 worker threads, warm and cold, to pick its default. Medians over ``--repeats`` processes. Outputs of
every column are compared with the cold column's.

Usage: python benchmarks/bundle_warm_start.py [--repeats 3] [--no-sweep]
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
    import numpy as np
    from flax import nnx

    from xlakit.demo.workloads import _CNN, _Transformer, _init

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


def child_jit(mode: str, cache: str) -> dict:
    import jax

    if mode == "jax":
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    models = _models()
    inputs = {(m, b): jax.device_put(_inputs(m, b)) for m in MODELS for b in BATCHES}
    jax.block_until_ready(list(inputs.values()))
    start = time.perf_counter()
    compiled = {}
    for m in MODELS:
        infer, params = models[m]
        fn = jax.jit(infer)  # one jit object per model; each batch size is a new program
        for b in BATCHES:  # trace, lower, then compile (cold) or load from JAX's cache (warm)
            compiled[(m, b)] = fn.lower(params, inputs[(m, b)]).compile()
    ready_s = time.perf_counter() - start
    digests = {}
    for (m, b), c in compiled.items():
        digests[f"{m}_b{b}"] = _digest(jax.block_until_ready(c(models[m][1], inputs[(m, b)])))
    return {"ready_s": ready_s, "total_s": time.perf_counter() - start, "digests": digests}


def child_bundle(root: str, workers: int) -> dict:
    import jax

    import xlakit
    # Imports are excluded from every column: load the modules load_bundle imports on first use
    # (jax.extend, which xlakit's environment fingerprint uses, alone takes ~60 ms to import here).
    import jax.extend.backend  # noqa: F401
    import xlakit._jax.handler, xlakit._jax.serialize, xlakit.bundle, xlakit.memory.compiled  # noqa: E401,F401

    inputs = {(m, b): jax.device_put(_inputs(m, b)) for m in MODELS for b in BATCHES}
    jax.block_until_ready(list(inputs.values()))
    start = time.perf_counter()
    loaded = {m: xlakit.load_bundle(Path(root) / m, max_workers=workers, progress=False) for m in MODELS}
    ready_s = time.perf_counter() - start
    digests = {}
    for m in MODELS:
        for b in BATCHES:
            digests[f"{m}_b{b}"] = _digest(jax.block_until_ready(loaded[m](inputs[(m, b)])))
    counts = {m: loaded[m].counts() for m in MODELS}
    return {"ready_s": ready_s, "total_s": time.perf_counter() - start, "digests": digests, "counts": counts,
            "programs": sum(len(lb.programs) for lb in loaded.values())}


# -- the parent -----------------------------------------------------------------------------------------------

def run(*args: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(runs: list[dict], field: str = "total_s") -> float:
    return statistics.median(r[field] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-sweep", action="store_true", help="skip the worker-count sweep")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "export":
            result = child_export(*rest)
        elif kind == "jit":
            result = child_jit(*rest)
        else:
            result = child_bundle(rest[0], int(rest[1]))
        print(json.dumps(result), flush=True)
        return 0

    from rich.console import Console
    from rich.table import Table

    from xlakit.bundle.loader import DEFAULT_MAX_WORKERS

    r = args.repeats
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

        print(f"measuring: {r} fresh processes per column (median) ...", flush=True)
        cold = [run("jit", "none", "-") for _ in range(r)]
        run("jit", "jax", str(tmp_path / "jaxcache"))  # fill
        jax_warm = [run("jit", "jax", str(tmp_path / "jaxcache")) for _ in range(r)]
        bundle_cold = [run("bundle", str(fresh_copy(f"cold{i}")), str(DEFAULT_MAX_WORKERS)) for i in range(r)]
        warm_root = tmp_path / f"cold{r - 1}"  # filled by the last cold run
        bundle_warm = [run("bundle", str(warm_root), str(DEFAULT_MAX_WORKERS)) for _ in range(r)]
        sweep = {}
        if not args.no_sweep:
            for w in (1, 2, 4):
                sweep[w] = {"warm": [run("bundle", str(warm_root), str(w)) for _ in range(r)],
                            "cold": [run("bundle", str(fresh_copy(f"sweep{w}-{i}")), str(w)) for i in range(r)]}

    cols = {"cold": cold, "jax": jax_warm, "bcold": bundle_cold, "bwarm": bundle_warm}
    ready = {k: median(v, "ready_s") for k, v in cols.items()}
    total = {k: median(v, "total_s") for k, v in cols.items()}
    n_programs = bundle_warm[0]["programs"]
    assert all(v["hit"] == len(BATCHES) for v in bundle_warm[0]["counts"].values()), bundle_warm[0]["counts"]

    table = Table(title=f"{n_programs} programs (flax CNN + transformer, batch sizes {', '.join(map(str, BATCHES))}), "
                        f"fresh process, seconds, median of {r}", title_justify="left")
    for col in ("", "cold (jax.jit)", "JAX cache warm", "bundle cold", "bundle warm", "cold / bundle warm",
                "JAX warm / bundle warm"):
        table.add_column(col, justify="left" if not col else "right")
    for label, d in (("programs ready", ready), ("ready + one run of each", total)):
        table.add_row(label, *(f"{d[k]:.3f}" for k in cols), f"{d['cold'] / d['bwarm']:.1f}x",
                      f"{d['jax'] / d['bwarm']:.1f}x")
    console = Console(width=140)
    console.print(table)
    print("programs ready: jax.jit(f).lower(...).compile() for every program (trace, lower, compile or JAX cache "
          "load); for bundles, load_bundle (weights, hashes, load or compile). One run of each: the same first "
          "calls in every column.")
    c, j, bw = ready["cold"], ready["jax"], ready["bwarm"]

    if sweep:
        st = Table(title="load_bundle by worker threads (seconds, median)", title_justify="left")
        for col in ("workers", "warm load_bundle", "cold load_bundle"):
            st.add_column(col, justify="right")
        for w, runs in sweep.items():
            st.add_row(str(w), f"{median(runs['warm'], 'ready_s'):.3f}", f"{median(runs['cold'], 'ready_s'):.3f}")
        console.print(st)
        print(f"default workers here: {DEFAULT_MAX_WORKERS} (os.cpu_count()={os.cpu_count()})")

    ref = cold[0]["digests"]
    same_jax = jax_warm[0]["digests"] == ref
    same_bundle = sum(bundle_warm[0]["digests"][k] == ref[k] for k in ref)
    print(f"outputs: JAX warm {'bit-identical to' if same_jax else 'DIFFER from'} cold; bundle warm bit-identical "
          f"to cold jit for {same_bundle}/{len(ref)} programs; bundle warm == bundle cold: "
          f"{bundle_warm[0]['digests'] == bundle_cold[0]['digests']}")
    checks = [(f"bundle warm >= 10x faster than cold, programs ready ({c / bw:.1f}x)", c / bw >= 10.0),
              (f"bundle warm >= 3x faster than JAX's persistent cache warm, programs ready ({j / bw:.1f}x)",
               j / bw >= 3.0),
              ("bundle warm outputs == bundle cold outputs", bundle_warm[0]["digests"] == bundle_cold[0]["digests"])]
    for text, ok in checks:
        print(("PASS " if ok else "FAIL ") + text)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
