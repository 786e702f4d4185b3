"""``xlakit demo`` and ``xlakit report``: the two commands that import JAX.

``report`` reads the cache folder through :class:`xlakit.cache.CacheFolder` (no JAX hooks are installed,
nothing about how this process compiles changes); JAX is imported for the allocator and live-array sections.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xlakit.cli._common import CliError

__all__ = ["demo", "report"]


def demo(args: argparse.Namespace) -> int:
    """``xlakit demo``: cold vs warm start on real workloads (needs the ``demo`` extra)."""
    try:
        from xlakit.demo.runner import run_demo
    except ImportError as e:
        if (e.name or "").startswith("xlakit"):
            raise CliError(f"the demo is not part of this xlakit install ({e})") from None
        raise CliError(f"the demo needs {e.name or e}: pip install 'xlakit[demo]'") from None
    try:
        return int(run_demo(keep_cache=args.keep_cache, quick=args.quick) or 0)
    except ValueError as e:
        if str(e).startswith("--keep-cache"):
            raise CliError(str(e)) from None
        raise


def report(args: argparse.Namespace) -> int:
    """``xlakit report --out FILE``: the widgets' views as one standalone HTML file; ``--trace PATH``: the
    ``--events`` file as Chrome trace-event JSON."""
    trace = getattr(args, "trace", None)
    if not args.out and not trace:
        raise CliError("report needs --out FILE (HTML) or --trace PATH (with --events FILE)")
    if args.out:
        _check_out("--out", args.out, "report.html")  # before any work: a folder given for the file is said at once
    for option, out in (("--out", args.out), ("--trace", trace)):
        if out and args.events and _same_file(out, args.events):  # the log would be replaced by what it makes
            raise CliError(f"{option} {out} is the --events file; give another file to write (nothing was written)")
    if args.out and trace and _same_file(args.out, trace):  # the HTML would replace the trace just written
        raise CliError(f"--out and --trace name the same file {args.out}; give two files (nothing was written)")
    if trace:
        _trace(args.events, trace)
        if not args.out:
            return 0
    try:
        import plotly  # noqa: F401 - the report's figures

        from xlakit import report as html_report
    except ImportError as e:
        raise CliError(f"the report needs {e.name or e}: pip install 'xlakit[widgets]'") from None
    log = None
    if args.events:
        from xlakit import events

        try:
            log = events.load(args.events)
        except (OSError, ValueError) as e:
            raise CliError(f"--events {args.events}: {_reason(e)}") from None
    from xlakit.cli.cache import open_store

    store = open_store(args)
    folder = None
    if store.root.exists():
        from xlakit.cache import CacheFolder

        folder = CacheFolder(store=store)
    try:
        out = html_report.write(args.out, cache=folder, log=log, include_plotlyjs="cdn" if args.cdn else True)
    except OSError as e:  # said as the temp's /proc/self/fd/3/... path and "pass --path DIR"
        raise CliError(f"--out {args.out}: cannot write it ({_reason(e)}); give a file in a folder you can "
                       "write") from None
    print(f"wrote {out} ({out.stat().st_size:,} bytes): cache {store.root}"
          f"{'' if folder is not None else ' (no such folder)'}, {len(log) if log is not None else 0} events"
          + ("" if log is not None else " (no timeline: pass --events FILE, a log saved with events.log().save)"))
    return 0


def _trace(events_path: str | None, trace: str) -> None:
    if not events_path:
        raise CliError("--trace needs --events FILE: a JSON-lines file written by EventLog.save()")
    from xlakit import events

    try:
        log = events.load(events_path)
    except (OSError, ValueError) as e:
        raise CliError(f"--events {events_path}: {_reason(e)}") from None
    _check_out("--trace", trace, "run.trace.json")
    try:
        out = log.save_trace(trace, process_name=f"xlakit events from {Path(events_path).name}")
    except OSError as e:
        raise CliError(f"--trace {trace}: cannot write it ({_reason(e)}); give a file in a folder you can "
                       "write") from None
    print(f"wrote {out} ({out.stat().st_size:,} bytes): {len(log)} events as Chrome trace-event JSON "
          "(open it in ui.perfetto.dev or chrome://tracing)")


def _check_out(option: str, path: str, example: str) -> None:
    """A file to write, given with ``option``: a CliError naming the option when it is a folder (the write failed
    as "cannot access /proc/self/fd/3/.<name>.<pid>.tmp: Is a directory; ... pass --path DIR") or its folder is
    missing."""
    given = Path(path).expanduser()
    if given.is_dir():
        raise CliError(f"{option} {path} is a folder; give the file to write, e.g. {option} {given / example}")
    out_dir = given.resolve().parent
    if not out_dir.is_dir():
        above = next((p for p in (out_dir, *out_dir.parents) if p.exists()), None)
        if above is not None and not above.is_dir():  # report --out notes.txt/x.html
            raise CliError(f"{option} {path}: {above} is a file, not a folder; give a file in a folder, e.g. "
                           f"{option} {above.parent / example}")
        raise CliError(f"{option} {path}: the folder {out_dir} does not exist; create it first")


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def _reason(e: BaseException) -> str:
    return (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
