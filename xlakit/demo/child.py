"""One demo process: enable xlakit's cache, run each workload's first call, report timings and outputs.

Run by :mod:`xlakit.demo.runner` as ``python -m xlakit.demo.child --cache DIR --out DIR [NAME ...]``, on the
backend JAX picks (``JAX_PLATFORMS`` as the user set it, or unset). Prints JSON lines: first
``{"device": {"platform", "device_kind", "count"}}`` as soon as JAX's backend is up, then one per workload:
``{"name", "first_call_s", "events": [...], "entries": [...]}`` where ``events`` are xlakit's events of the first
call (kind, name, reason, origin, source, seconds) and ``entries`` the cache entries it hit or stored (key, bytes on
disk, compiled memory). Outputs are saved as ``<out>/<name>.npz`` (one array per pytree leaf) for the bit-for-bit
comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xlakit.demo.child")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)

    import jax
    import numpy as np

    devices = jax.devices()  # the backend JAX chose; the parent names it while the workloads run
    print(json.dumps({"device": {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
                                 "count": len(devices)}}), flush=True)

    import xlakit
    from xlakit.demo.workloads import run_first_call, workloads

    cache = xlakit.enable_cache(args.cache)
    log = xlakit.events.log()
    for workload in workloads():
        if args.names and workload.name not in args.names:
            continue
        before = len(log.events())
        seconds, outputs = run_first_call(workload)
        happened = log.events()[before:]
        keys = {e.key for e in happened if e.kind in ("hit", "store")}
        entries = [{"key": info.key, "name": info.name, "size_bytes": info.size_bytes,
                    "memory": info.header.get("memory"), "compile_s": info.compile_s}
                   for info in cache.store.entries() if info.key in keys]
        leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(outputs)]
        np.savez(Path(args.out) / f"{workload.name}.npz", *leaves)
        print(json.dumps({"name": workload.name, "first_call_s": seconds,
                          "events": [{"kind": e.kind, "name": e.name, "duration_s": e.duration_s, "reason": e.reason,
                                      "origin": e.origin, "source": e.source} for e in happened],
                          "entries": entries}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
