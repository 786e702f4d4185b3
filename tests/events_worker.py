"""Runs tests/jaxworker.py with xlakit's JAX listeners installed; used as ``run_worker(..., prefix=...)``.

Usage: python tests/events_worker.py [--layer xlakit|jax] [--explain] [--save PATH] -- PYTHON jaxworker.py ARGS

The jaxworker part is exactly what ``conftest.run_worker`` builds, so its programs, options and one-line JSON
report are reused unchanged; the report's ``events`` then hold JAX's own signals too.

``--layer jax`` answers jaxworker's ``xlakit.enable_cache(cache, max_bytes, min_compile_time_s)`` with
JAX's *own* persistent cache instead: ``jax_compilation_cache_dir=cache``,
``jax_compilation_cache_max_size=max_bytes`` and ``jax_persistent_cache_min_compile_time_secs=
min_compile_time_s``. ``--explain`` turns on ``jax_explain_cache_misses``; ``--save`` writes the process
log as JSON lines after the programs ran.
"""

from __future__ import annotations

import argparse
import runpy
import sys


def main() -> None:
    split = sys.argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", choices=("xlakit", "jax"), default="xlakit")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--save", default=None)
    args = ap.parse_args(sys.argv[1:split])
    worker_argv = sys.argv[split + 2:]  # drop "--" and the interpreter run_worker put there

    import jax

    import xlakit
    from xlakit._jax import listeners

    if args.explain:
        jax.config.update("jax_explain_cache_misses", True)
    if args.layer == "jax":
        def jax_cache(path, max_bytes=None, min_compile_time_s=0.0):
            jax.config.update("jax_compilation_cache_dir", str(path))
            jax.config.update("jax_compilation_cache_max_size", -1 if max_bytes is None else int(max_bytes))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))

        xlakit.enable_cache = jax_cache

    listeners.install(xlakit.events.log())
    sys.argv = worker_argv
    runpy.run_path(worker_argv[0], run_name="__main__")
    if args.save:
        xlakit.events.log().save(args.save)
    errors = list(listeners.installed().errors)
    if errors:
        raise SystemExit(f"listener errors: {errors}")


if __name__ == "__main__":
    main()
