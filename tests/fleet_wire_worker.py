"""One "machine" of the fleet tests: transparent mode with a remote, run named programs, print one JSON line.

Usage: python tests/fleet_wire_worker.py --cache DIR [--distributed PORT N ID] PROGRAM [PROGRAM ...]
The remote comes from XLAKIT_CACHE_REMOTE / _MODE / _OPTIONS (as a user would set it). Programs are those of
tests/jaxworker.py. The cache is disabled before the report is printed, so pending uploads have finished (or
were abandoned, an event) and every event is in it.

Output (last stdout line): {"results": {program: hex of output bytes}, "events": [...], "warnings": [...],
"first_call_s": {program: seconds of its first call}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--distributed", nargs=3, type=int, default=None, metavar=("PORT", "N", "ID"))
    ap.add_argument("programs", nargs="+")
    args = ap.parse_args()

    import jax
    import numpy as np

    if args.distributed:
        port, n, me = args.distributed
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=me, initialization_timeout=120)

    from jaxworker import programs

    import xlakit

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xlakit.enable_cache(args.cache)
        table = programs()
        if args.distributed:  # start at the same moment
            from jax._src import distributed

            distributed.global_state.client.wait_at_barrier("fleet-wire-start", 120_000)
        results, first = {}, {}
        for name in args.programs:
            t = time.perf_counter()
            out = np.asarray(table[name]())
            first[name] = time.perf_counter() - t
            results[name] = out.tobytes().hex()
        xlakit.disable_cache()  # drains pending uploads (bounded)
    events = [e.to_dict() for e in xlakit.events.log().events()]
    print(json.dumps({"results": results, "events": events, "first_call_s": first,
                      "warnings": [str(w.message) for w in caught if "xlakit" in str(w.message)]}))
    sys.stdout.flush()
    if args.distributed:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
