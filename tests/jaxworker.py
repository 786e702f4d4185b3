"""A JAX process for integration tests: enable xlakit's cache, run named programs, print one JSON line.

Usage: python tests/jaxworker.py --cache DIR [--max-bytes N] [--min-compile S] PROGRAM [PROGRAM ...]

Output (last line of stdout): {"results": {program: hex of output bytes}, "events": [event dicts],
"max_cache_bytes": largest folder size seen after each program (bytes), "warnings": [...]}.
Tests run this in subprocesses because JAX flags are fixed per process and crashes must not kill pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings


def programs():
    """Named programs whose inputs are NumPy arrays, so each call compiles exactly one XLA program
    (``jit_<name>``) and the event list holds nothing else."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def add_one(x):
        return x + 1

    def matmul(a):
        return jnp.tanh(a @ a.T) * 3.0

    def net(w, x):
        for _ in range(4):
            x = jax.nn.relu(x @ w)
        return x.sum()

    def debug_print(x):
        jax.debug.print("x={}", x)
        return x * 2

    w = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    table = {
        "add_one": lambda: jax.jit(add_one)(np.ones(3, np.float32)),
        "matmul": lambda: jax.jit(matmul)(np.arange(64.0, dtype=np.float32).reshape(8, 8)),
        "mlp": lambda: jax.jit(net)(w, np.ones((16, 32), np.float32)),
        "debug_print": lambda: jax.jit(debug_print)(np.arange(3.0, dtype=np.float32)),
    }
    for name in ("cos", "exp", "tanh"):  # three more distinct programs (jit_cos, ...), one compile each
        table[name] = (lambda f=getattr(jnp, name): jax.jit(f)(np.linspace(0.0, 1.0, 5, dtype=np.float32)))
    for n in range(1, 401):  # distinct programs named jit_sin: one per input length
        table[f"sin{n}"] = (lambda n=n: jax.jit(jnp.sin)(np.arange(float(n), dtype=np.float32)))
    return table


def folder_bytes(root: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                st = os.stat(os.path.join(dirpath, f))
            except FileNotFoundError:
                continue
            total += max(st.st_size, st.st_blocks * 512) if f != ".lock" else 0
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--max-bytes", type=int, default=None)
    ap.add_argument("--min-compile", type=float, default=0.0)
    ap.add_argument("programs", nargs="+")
    args = ap.parse_args()

    import numpy as np

    import xlakit

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xlakit.enable_cache(args.cache, max_bytes=args.max_bytes, min_compile_time_s=args.min_compile)
        table = programs()
        results, max_bytes = {}, 0
        for name in args.programs:
            out = np.asarray(table[name]())
            results[name] = out.tobytes().hex()
            if os.path.isdir(args.cache):
                max_bytes = max(max_bytes, folder_bytes(args.cache))
    events = [e.to_dict() for e in xlakit.events.log().events()]
    print(json.dumps({"results": results, "events": events, "max_cache_bytes": max_bytes,
                      "warnings": [str(w.message) for w in caught if "xlakit" in str(w.message)]}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
