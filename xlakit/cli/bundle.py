"""``xlakit bundle warm|check``: load a model bundle (imports JAX) or inspect one (no compile).

The work is done by :mod:`xlakit.bundle`; this module parses the path and prints the per-module report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xlakit.cli._common import CliError, Column, emit_json, print_bounded, print_table, seconds

__all__ = ["warm", "check"]


def _bundle_path(args: argparse.Namespace) -> Path:
    path = Path(args.bundle)
    if not path.is_dir():
        raise CliError(f"{path} is not a folder; pass the path of a bundle folder (one with manifest.json)")
    return path


def _start_jax() -> float:
    """Import JAX and start its backend (``jax.devices()``); seconds taken. Done before the load so that the
    bundle's seconds are the load's own, as in a process that already uses JAX (they counted JAX's start-up)."""
    import time

    start = time.perf_counter()
    import jax

    jax.devices()
    return time.perf_counter() - start


def warm(args: argparse.Namespace) -> int:
    """``xlakit bundle warm PATH``: load the bundle, compiling what its .cache lacks; exit 1 if a module
    failed."""
    from xlakit.bundle import BundleError, load_bundle

    path = _bundle_path(args)
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    jax_start_s = _start_jax()
    try:
        import warnings

        with warnings.catch_warnings():  # failed modules are shown in the table and the exit status
            warnings.simplefilter("ignore", RuntimeWarning)
            loaded = load_bundle(path, max_workers=args.workers,
                                 progress=not args.no_progress and not args.json and sys.stderr.isatty()).wait()
    except BundleError as e:
        raise CliError(str(e)) from None
    counts = loaded.counts()
    # a shape-polymorphic module is compiled only when a size is called: one that cannot be used is said here
    poly = {spec.file for spec in loaded.manifest.poly_modules}
    poly_errors = {f: str(e) for f, e in loaded.errors.items() if f in poly}
    failed = 1 if counts["error"] or poly_errors else 0
    if args.json:
        emit_json({"bundle": loaded.manifest.name, "path": str(path), "total_s": loaded.total_s,
                   "jax_start_s": jax_start_s, "weights_s": loaded.weights_s, "counts": counts,
                   "dropped": [d.__dict__ for d in loaded.dropped], "record_problem": loaded.record_problem,
                   "modules": [r.to_dict() for r in loaded.reports], "polymorphic_errors": poly_errors})
        return failed
    columns = [Column("module", "module"), Column("status", "status"), Column("load_s", "load", "seconds"),
               Column("compile_s", "compile"), Column("module_bytes", "module", "bytes"),
               Column("program_bytes", "program", "bytes"), Column("footprint_bytes", "memory/run", "bytes"),
               Column("reason", "why not a hit", nowrap=False)]
    rows = [{"module": r.module, "status": r.status, "load_s": r.load_s, "compile_s": seconds(r.compile_s),
             "module_bytes": r.module_bytes, "program_bytes": r.program_bytes,
             "footprint_bytes": r.footprint_bytes, "reason": r.reason or ""} for r in loaded.reports]
    print_table(f"Bundle {loaded.manifest.name} on {loaded.device}", columns, rows)
    print(f"{len(loaded.programs)} programs in {loaded.total_s:.3f} s: {counts['hit']} loaded from .cache, "
          f"{counts['miss']} compiled, {counts['error']} failed; weights {loaded.weights_s:.3f} s (JAX's start-up "
          f"before it, not counted: {jax_start_s:.3f} s)")
    print_bounded([(d.module or "unknown module", f"{d.key} from {d.partition}: {d.reason}") for d in loaded.dropped],
                  "programs dropped", "--json lists them all", prefix="dropped ")
    if loaded.record_problem:
        print(f"module_hashes.json was unreadable ({loaded.record_problem}); rewritten")
    for file, error in poly_errors.items():
        print(f"{file} (compiled for batch sizes that were not exported) cannot be used: {error}")
    return failed


def check(args: argparse.Namespace) -> int:
    """``xlakit bundle check PATH``: manifest, module hashes, partitions, what a load would drop (no JAX
    compile); exit 1 on a problem."""
    from xlakit.bundle import check_bundle

    result = check_bundle(_bundle_path(args))
    if args.json:
        emit_json(result.to_dict())
        return 0 if result.ok else 1
    m = result.manifest
    if m is not None:
        ins = ", ".join(f"{s.name}: {s.describe()}" for s in m.inputs)
        print(f"Bundle {m.name}: inputs {ins}; batch sizes {list(m.batch_sizes)}; variants {list(m.variants)}; "
              f"{len(m.weights)} weight tensors; exported for {', '.join(m.platforms) or '?'}")
        for v in m.variants:
            how, reason = m.rows(v)
            exact = "; with load_bundle(exact=True) exact sizes from model.bpoly" if v in m.polymorphic else ""
            served = f"padded and chunked{exact}" if m.independent(v) else (
                "exact sizes compiled from model.bpoly" if v in m.polymorphic else "only the exported sizes")
            print(f"rows of {v}: {how} ({served}): {reason}")
        columns = [Column("file", "module"), Column("state", "vs record"), Column("size_bytes", "size", "bytes"),
                   Column("sha256", "sha256"), Column("partitions", "compiled in partitions")]
        rows = [{"file": c.file, "state": c.state, "size_bytes": c.size_bytes, "sha256": (c.sha256 or "-")[:12],
                 "partitions": ", ".join(c.partitions) + (f" (batch {', '.join(map(str, c.exact_sizes))})"
                                                          if c.exact_sizes else "") or "-"} for c in result.modules]
        print_table("Modules", columns, rows)
        reason = f" ({result.record_reason})" if result.record_reason else ""
        print(f"module_hashes.json: {result.record_status}{reason}")
        print_bounded([("partitions", f"{part}: {n} program(s)") for part, n in result.partitions.items()],
                      "partitions", "--json lists them all", prefix="partition ")
        if not result.partitions:
            print("no compiled programs yet (.cache is empty or missing)")
        print_bounded([(d.module or "unknown module", f"{d.key} from {d.partition}: {d.reason}") for d in result.drops],
                      "programs", "--json lists them all", prefix="a load would drop ")
        if not result.drops and result.ok:
            print("a load would drop nothing")
    print_bounded([("problems", problem) for problem in result.problems], "problems", "--json lists them all",
                  prefix="problem: ")
    if result.problems and result.manifest is not None:
        print(f"a load would fail ({len(result.problems)} problem{'s' if len(result.problems) > 1 else ''} above)")
    return 0 if result.ok else 1
