"""Is a cache entry compiled with the buffer-assignment capture (``XLAKIT_CAPTURE_ASSIGNMENT=1``) safe and cheap to
load on this machine's accelerator, and what does ``peak()`` cost with it? Side by side, each stage a fresh process:

1. ``capture cold``: a cache made with the capture: the train step compiles with XLA's dump into a private temporary
   folder (removed after the compile); ``peak()`` then only decodes.
2. ``capture warm``: a new process loads that entry (its stored compile options name the removed folder): the
   answer, compiles (must be 0), whether anything was written under the first process's temporary folder or its
   own (a dump on load would show there), the load's wall time, and ``peak()`` (a load carries no dump: one dump
   compile, or a decode where the cache kept the assignment).
3. ``plain cold`` / ``plain warm``: the same without the capture: the load-time floor to compare 2 with.
4. ``capture entry, plain process``: the capture-made entry loaded by a process without the capture.
0. ``default cold``: first of all, a cold process without ``XLAKIT_CAPTURE_ASSIGNMENT``: the platform table's
   default (``capture_assignment_on_miss``); where it captures, ``peak()`` costs a decode, not a compile.

Each process gets its own ``TMPDIR``. Printed: one row per stage and the verdict lines (answers equal, no
compiles on load, no files appeared, load within 10 % + 20 ms of the plain load).

Run: ``PYTHONPATH=. python benchmarks/capture_reload.py [--layers 24 --width 1024]`` (on a TPU about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

STAGE = r'''
import json, os, sys, time
t_start = time.perf_counter()
import jax, jax.numpy as jnp
import xlakit
cache, layers, width, do_peak = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
sys.path.insert(0, sys.argv[5])
from dump_cost import tanh_step as step
xlakit.enable_cache(cache)
jax.devices()
t_backend = time.perf_counter()
keys = jax.random.split(jax.random.key(0), layers + 1)
ws = [jax.random.normal(k, (width, width)) / width ** 0.5 for k in keys[:-1]]
x = jax.random.normal(keys[-1], (256, width))
jax.block_until_ready((ws, x))
t0 = time.perf_counter(); c0 = time.process_time()
out = jax.jit(step)(ws, x); loss = float(out[1])
first_s, first_cpu = time.perf_counter() - t0, time.process_time() - c0
fr = xlakit.events.log().to_frame()
res = {"loss": loss, "first_call_s": first_s, "first_call_cpu_s": first_cpu, "backend_s": t_backend - t_start,
       "compiles": int(((fr.kind == "compile") & (fr.name == "jit_tanh_step")).sum()),
       "hits": int(((fr.kind == "hit") & (fr.name == "jit_tanh_step")).sum()), "platform": jax.default_backend()}
if do_peak:
    t0 = time.perf_counter(); c0 = time.process_time()
    try:
        p = xlakit.memory.peak(jax.jit(step), ws, x)
        res["peak_bytes"] = int(p.total_bytes)
    except Exception as e:
        res["peak_error"] = f"{type(e).__name__}: {e}"[:300]
    res["peak_s"], res["peak_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    fr = xlakit.events.log().to_frame()
    res["compiles_after_peak"] = int(((fr.kind == "compile") & (fr.name == "jit_tanh_step")).sum())
print("RESULT " + json.dumps(res))
'''


def _files_under(folder: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, n), folder) for n in dirs + files]
    return sorted(found)


def _stage(work: str, name: str, cache: str, capture: bool | None, args: argparse.Namespace) -> dict:
    tmp = os.path.join(work, "tmp-" + name.replace(" ", "-").replace(",", ""))
    os.makedirs(tmp)
    env = dict(os.environ, TMPDIR=tmp, XLAKIT_CAPTURE_ASSIGNMENT="1" if capture else "0")
    if capture is None:  # the platform table's default
        del env["XLAKIT_CAPTURE_ASSIGNMENT"]
    t0 = time.perf_counter()
    here = os.path.dirname(os.path.abspath(__file__))  # the train step: dump_cost.tanh_step
    r = subprocess.run([sys.executable, "-c", STAGE, cache, str(args.layers), str(args.width), "1", here],
                       capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    res = json.loads(lines[-1][7:]) if lines else {"error": (r.stderr or r.stdout)[-1500:]}
    res.update(stage=name, process_s=time.perf_counter() - t0, tmpdir=tmp)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--out", default=None, help="write every stage's record here (JSON)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="xlakit-capture-reload-")
    cap, plain = os.path.join(work, "cache-capture"), os.path.join(work, "cache-plain")
    default = os.path.join(work, "cache-default")
    plan = [("default cold", default, None), ("capture cold", cap, True), ("capture warm", cap, True),
            ("plain cold", plain, False), ("plain warm", plain, False), ("capture entry, plain process", cap, False)]
    rows = {}
    for name, cache, capture in plan:
        rows[name] = _stage(work, name, cache, capture, args)
        rows[name]["files_after"] = {n: _files_under(r["tmpdir"]) for n, r in rows.items()}
    print(f"{'stage':30} {'first call s':>12} {'compiles':>8} {'hits':>4} {'peak() s':>9} {'peak cpu s':>10} "
          f"{'compiles after peak':>19}  loss")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:30} ERROR {r['error'][-600:]}")
            continue
        print(f"{name:30} {r['first_call_s']:12.3f} {r['compiles']:8d} {r['hits']:4d} {r.get('peak_s', 0):9.3f} "
              f"{r.get('peak_cpu_s', 0):10.3f} {r.get('compiles_after_peak', -1):19d}  {r['loss']!r}"
              + (f"  peak error: {r['peak_error']}" if "peak_error" in r else ""))
    ok = all("error" not in r for r in rows.values())
    if ok:
        losses = {r["loss"] for r in rows.values()}
        print(f"answers equal: {len(losses) == 1} ({sorted(losses)})")
        d = rows["default cold"]
        print(f"by default ({d['platform']}): peak() {d['peak_cpu_s']:.3f} s CPU = "
              f"{d['peak_cpu_s'] / d['first_call_cpu_s'] * 100:.1f} % of the first call's CPU")
        warm = [rows[n] for n in ("capture warm", "plain warm", "capture entry, plain process")]
        print(f"compiles on load: {[r['compiles'] for r in warm]} (want [0, 0, 0])")
        last = rows["capture entry, plain process"]["files_after"]
        appeared = {n: f for n, f in last.items() if f}
        print(f"files left in any stage's TMPDIR after all stages: {appeared or 'none'}")
        cw, pw = rows["capture warm"]["first_call_s"], rows["plain warm"]["first_call_s"]
        cp = rows["capture entry, plain process"]["first_call_s"]
        print(f"load (first call) with the capture's entry: {cw:.3f} s / {cp:.3f} s (plain process) vs plain "
              f"{pw:.3f} s -> {cw / pw:.2f}x / {cp / pw:.2f}x; within 10 % + 20 ms: {max(cw, cp) <= pw * 1.1 + 0.02}")
        cc = rows["capture cold"]
        pc = rows["plain cold"]
        print(f"cold compile with the capture {cc['first_call_cpu_s']:.3f} s CPU vs plain {pc['first_call_cpu_s']:.3f}"
              f" s CPU ({(cc['first_call_cpu_s'] / pc['first_call_cpu_s'] - 1) * 100:+.1f} %); peak() after it "
              f"{cc['peak_cpu_s']:.3f} s CPU = {cc['peak_cpu_s'] / cc['first_call_cpu_s'] * 100:.1f} % of the compile"
              f" (plain process: {pc['peak_cpu_s']:.3f} s = {pc['peak_cpu_s'] / pc['first_call_cpu_s'] * 100:.1f} %)")
        print(f"peak() in a warm process: capture {rows['capture warm']['peak_cpu_s']:.3f} s CPU, plain "
              f"{rows['plain warm']['peak_cpu_s']:.3f} s CPU")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
