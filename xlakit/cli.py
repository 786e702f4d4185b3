"""The ``xlakit`` command line: inspect and maintain the persistent executable cache.

Commands (each ``cache`` command takes ``--path DIR`` and ``--json``)::

    xlakit cache ls [--partition P] [--sort last_used|size|name|created]  list entries
    xlakit cache stats                          sizes, counts, compile seconds, environments
    xlakit cache verify [--partition P]         open every entry fully; bad ones -> quarantine, exit 1
    xlakit cache prune --max-bytes N            evict least-recently-used entries (N: 10k, 500MB, 2GiB)
    xlakit cache clear [--partition P] [--yes]  remove entries
    xlakit cache where                          cache folder and where the HMAC secret comes from
    xlakit demo [--keep-cache DIR] [--quick]    run the demo (the only command that imports JAX)
    xlakit report --out FILE [--path DIR] [--events FILE] [--cdn]  the widgets' views as one standalone
                                                HTML file (imports JAX)
    xlakit bundle warm PATH [--workers N] [--no-progress]  load a bundle, compiling what its .cache lacks;
                                                print the per-module report (imports JAX; exit 1 if a module failed)
    xlakit bundle check PATH                    manifest, module hashes, partitions, what a load would drop
    xlakit --version

``--path`` defaults to ``$XLAKIT_CACHE_DIR``, else the user cache folder. Usage errors print one line
to stderr and exit 2. Importing this module does not import JAX.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main", "parse_size"]

PROG = "xlakit"
_SORT_KEYS = ("last_used", "size", "name", "created")
_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


# -- small helpers -------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"500MB"``, ``"2GiB"``, ``"10k"``, ``"1.5G"``.

    k/KB/M/MB/G/GB/T/TB are powers of 1000; KiB/MiB/GiB/TiB powers of 1024 (case-insensitive).
    Raises ValueError for anything else, including negative numbers.
    """
    m = _SIZE_RE.match(text)
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise ValueError(f"invalid size {text!r}: use a number of bytes, optionally with a unit "
                         "(k, MB, GiB, ...), e.g. 500MB or 2GiB")
    return int(float(m.group(1)) * _UNITS[unit])


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _local_time(t: float | None) -> str:
    """A unix time as local date and time; "-" for None and for values no calendar can show."""
    try:
        return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, ValueError, OSError):
        return "-"


def _seconds(s: float | None) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s:.2f}"


def _console():
    from rich.console import Console

    console = Console(highlight=False)  # built per call so it writes to the current sys.stdout
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 250  # piped output: don't fold names at 80 columns
    return console


def _table(title: str | None, columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]):
    """A rich Table; cells are plain text (names with brackets are not read as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title) if title else None, title_justify="left")
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))
    return table


def _finite(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, Infinity) replaced by None, so the output is valid JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def _emit_json(data: Any) -> None:
    """Print ``data`` as JSON that any parser accepts (no NaN/Infinity: they become null)."""
    print(json.dumps(_finite(data), indent=2, default=str, allow_nan=False))


def _store(args: argparse.Namespace):
    """The LocalStore for ``--path``, after checking the folder is usable (a missing one is fine)."""
    from xlakit.store import LocalStore, resolve_root

    root = resolve_root(args.path)
    if root.exists():
        if not root.is_dir():
            raise CliError(f"cache path {root} is not a folder; pass --path DIR with a cache folder")
        if not os.access(root, os.R_OK | os.X_OK):
            raise CliError(f"cannot read cache folder {root} (permission denied); "
                           "fix its permissions or pass --path DIR")
    return LocalStore(root)


def _check_partition(store, partition: str | None) -> None:
    """Raise CliError if ``partition`` is given and the (existing) cache folder has no such partition."""
    from xlakit.store import validate_partition

    if partition is None:
        return
    try:
        validate_partition(partition)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not store.root.exists():
        return
    known = store.partitions()
    if partition not in known:
        listed = ", ".join(known) if known else "none"
        raise CliError(f"unknown partition {partition!r} in {store.root} (partitions: {listed}); "
                       "see 'xlakit cache stats'")


def _entry_dict(info) -> dict[str, Any]:
    header = info.header if isinstance(info.header, dict) else {}
    row = {
        "name": info.name,
        "partition": info.partition,
        "key": info.key,
        "path": str(info.path),
        "size_bytes": info.size_bytes,
        "created": info.created,
        "last_used": info.last_used,
        "compile_s": info.compile_s,
        "memory": header.get("memory"),
    }
    if info.name is None and "error" in header:
        row["error"] = header["error"]
    return row


def _label(info) -> str:
    if info.name is not None:
        return info.name
    error = info.header.get("error") if isinstance(info.header, dict) else None
    return f"(unreadable: {error})" if error else "(unnamed)"


# -- commands -----------------------------------------------------------------------------------------

def _cmd_ls(args: argparse.Namespace) -> int:
    if getattr(args, "remote", None):
        from xlakit import cli_remote

        return cli_remote.ls(args)
    store = _store(args)
    _check_partition(store, args.partition)
    entries = store.entries(args.partition)
    sorters = {
        "last_used": (lambda i: i.last_used, True),
        "size": (lambda i: i.size_bytes, True),
        "name": (lambda i: (_label(i), i.partition, i.key), False),
        "created": (lambda i: i.created if i.created is not None else float("-inf"), True),
    }
    key, reverse = sorters[args.sort]
    entries.sort(key=key, reverse=reverse)
    total = sum(i.size_bytes for i in entries)
    if args.json:
        _emit_json({"folder": str(store.root), "count": len(entries), "total_bytes": total,
                    "entries": [_entry_dict(i) for i in entries]})
        return 0

    if not entries:
        where = f" in partition {args.partition}" if args.partition else ""
        print(f"No entries{where} in {store.root}")
        return 0
    columns = (("name", "left"), ("partition", "left"), ("size", "right"), ("created", "left"),
               ("last used", "left"), ("compile s", "right"))
    rows = [(_label(i), i.partition, _human(i.size_bytes), _local_time(i.created), _local_time(i.last_used),
             _seconds(i.compile_s)) for i in entries]
    _console().print(_table(str(store.root), columns, rows))
    print(f"{len(entries)} entries, {_human(total)} ({total} bytes)")
    return 0


def _environment_summary(info: dict | None) -> dict[str, Any] | None:
    if not info:
        return None
    env = info.get("environment") if isinstance(info.get("environment"), dict) else info
    keys = ("jax_version", "jaxlib_version", "platform", "device_kinds", "device_count")
    return {k: env.get(k) for k in keys}


def _describe_env(env: dict[str, Any] | None) -> str:
    if not env:
        return "environment unknown (no partition.json)"
    kinds = env.get("device_kinds")
    kinds = ", ".join(kinds) if isinstance(kinds, (list, tuple)) else (kinds or "?")
    return (f"jax {env.get('jax_version') or '?'} / jaxlib {env.get('jaxlib_version') or '?'}, "
            f"{env.get('platform') or '?'}, {env.get('device_count') or '?'} x {kinds}")


def _quarantined(root: Path) -> tuple[int, int]:
    """(entries, bytes) of the ``.xlk`` files under ``<root>/quarantine`` (never entering a link)."""
    from xlakit.store.quarantine import quarantined_files

    found = [(size, path) for _, size, path in quarantined_files(root) if path.name.endswith(".xlk")]
    return len(found), sum(size for size, _ in found)



def _cmd_stats(args: argparse.Namespace) -> int:
    if getattr(args, "remote", None):
        from xlakit import cli_remote

        return cli_remote.stats(args)
    store = _store(args)
    exists = store.root.is_dir()
    entries = store.entries() if exists else []
    partitions = []
    for name in (store.partitions() if exists else []):
        mine = [i for i in entries if i.partition == name]
        partitions.append({
            "name": name,
            "entries": len(mine),
            "bytes": sum(i.size_bytes for i in mine),
            "compile_s": sum(i.compile_s or 0.0 for i in mine),
            "environment": _environment_summary(store.read_partition_info(name)),
        })
    q_count, q_bytes = _quarantined(store.root) if exists else (0, 0)
    stats = {
        "folder": str(store.root),
        "exists": exists,
        "total_bytes": store.total_bytes() if exists else 0,
        "entries": len(entries),
        "entry_bytes": sum(i.size_bytes for i in entries),
        "compile_s": sum(i.compile_s or 0.0 for i in entries),
        "quarantined": q_count,
        "quarantined_bytes": q_bytes,
        "partitions": partitions,
    }
    if args.json:
        _emit_json(stats)
        return 0

    state = "" if exists else " (does not exist yet)"
    print(f"Cache folder: {stats['folder']}{state}")
    print(f"On disk:      {_human(stats['total_bytes'])} ({stats['total_bytes']} bytes)")
    print(f"Entries:      {stats['entries']} ({_human(stats['entry_bytes'])}), "
          f"recorded compile time {stats['compile_s']:.2f} s")
    print(f"Quarantined:  {q_count} ({_human(q_bytes)})")
    if partitions:
        columns = (("partition", "left"), ("entries", "right"), ("size", "right"), ("compile s", "right"),
                   ("environment", "left"))
        rows = [(p["name"], p["entries"], _human(p["bytes"]), f"{p['compile_s']:.2f}",
                 _describe_env(p["environment"])) for p in partitions]
        _console().print(_table("Partitions", columns, rows))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    if getattr(args, "remote", None):
        from xlakit import cli_remote

        return cli_remote.verify(args)
    store = _store(args)
    _check_partition(store, args.partition)
    if not store.root.is_dir():
        results = []
    else:
        _ = store.secret  # raises SecretUnavailable (an OSError) now rather than failing every entry
        results = _destructive(store.verify, args.partition)
    # Entries of another key or format are someone else's: reported, left in place, not failures.
    skipped = [(info, reason) for info, reason in results if reason and reason.startswith(("foreign:", "stale:"))]
    bad = [(info, reason) for info, reason in results
           if reason is not None and not reason.startswith(("foreign:", "stale:"))]
    moved = {str(info.path) for info, _ in bad if not info.path.exists()}
    quarantine = store.root / "quarantine"
    if args.json:
        _emit_json({"folder": str(store.root), "verified": len(results), "ok": len(results) - len(bad),
                    "bad": [dict(_entry_dict(i), reason=r, quarantined=str(i.path) in moved) for i, r in bad],
                    "skipped": [dict(_entry_dict(i), reason=r) for i, r in skipped],
                    "quarantine": str(quarantine)})
        return 1 if bad else 0
    for info, reason in skipped:
        print(f"SKIPPED {info.partition} [{info.key}]: {reason} (left in place)")
    for info, reason in bad:
        print(f"BAD {info.partition}/{info.name or '(unreadable)'} [{info.key}]: {reason}")
    if bad:
        print(f"{len(bad)} of {len(results)} entries failed verification; "
              f"{len(moved)} moved to {quarantine} (they will not be loaded)")
        return 1
    print(f"{len(results) - len(skipped)} entries verified" + (f", {len(skipped)} skipped" if skipped else ""))
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    if getattr(args, "remote", None):
        from xlakit import cli_remote

        return cli_remote.prune(args)
    if args.max_bytes is None:
        raise CliError("prune needs --max-bytes N for the local folder (--older-than is for --remote URL)")
    try:
        limit = parse_size(args.max_bytes)
    except ValueError as e:
        raise CliError(f"--max-bytes: {e}") from None
    store = _store(args)
    before = store.total_bytes() if store.root.is_dir() else 0
    evicted = _destructive(store.prune, limit)
    after = store.total_bytes() if store.root.is_dir() else 0
    if args.json:
        _emit_json({"folder": str(store.root), "max_bytes": limit, "bytes_before": before, "bytes_after": after,
                    "within_limit": after <= limit,
                    "evicted": [_entry_dict(i) for i in evicted]})
        return 0
    for info in evicted:
        print(f"evicted {info.partition}/{_label(info)} ({_human(info.size_bytes)}, "
              f"last used {_local_time(info.last_used)})")
    print(f"Evicted {len(evicted)} entries; {store.root} now holds {_human(after)} ({after} bytes), "
          f"limit {_human(limit)} ({limit} bytes)")
    if after > limit:
        print(f"{PROG}: warning: still over the limit: the remaining {after} bytes are not evictable entries "
              "(partition descriptions, foreign files, entries being written)", file=sys.stderr)
    return 0


def _destructive(operation, *args):
    """Run a store operation that deletes; a folder that is not an xlakit cache becomes a CliError (exit 2)."""
    from xlakit.store import NotACacheFolder

    try:
        return operation(*args)
    except NotACacheFolder as e:
        raise CliError(str(e)) from None


def _confirm(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _cmd_clear(args: argparse.Namespace) -> int:
    store = _store(args)
    _check_partition(store, args.partition)
    what = f"partition {args.partition}" if args.partition else "all partitions and the quarantine"
    if not args.yes and store.root.is_dir() and sys.stdin is not None and sys.stdin.isatty():
        count = len(store.entries(args.partition))
        if not _confirm(f"Remove {count} entries ({what}) from {store.root}?"):
            print("Aborted; nothing removed.", file=sys.stderr)
            return 1
    removed = _destructive(store.clear, args.partition)
    if args.json:
        _emit_json({"folder": str(store.root), "partition": args.partition, "removed": removed})
    else:
        print(f"Removed {removed} entries ({what}) from {store.root}")
    return 0


def _cmd_where(args: argparse.Namespace) -> int:
    from xlakit.store import resolve_root
    from xlakit.store.secret import secret_location

    root = resolve_root(args.path)
    info = {"folder": str(root), "exists": root.is_dir(), "secret": secret_location()}
    if args.json:
        _emit_json(info)
        return 0
    print(f"Cache folder: {info['folder']} ({'exists' if info['exists'] else 'does not exist yet'})")
    print(f"HMAC secret:  {info['secret']}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        from xlakit.demo.runner import run_demo
    except ImportError as e:
        if (e.name or "").startswith("xlakit"):
            raise CliError(f"the demo is not part of this xlakit install ({e})") from None
        raise CliError(f"the demo needs {e.name or e}: pip install 'xlakit[demo]'") from None
    return int(run_demo(keep_cache=args.keep_cache, quick=args.quick) or 0)


def _bundle_path(args: argparse.Namespace) -> Path:
    path = Path(args.bundle)
    if not path.is_dir():
        raise CliError(f"{path} is not a folder; pass the path of a bundle folder (one with manifest.json)")
    return path


def _cmd_bundle_warm(args: argparse.Namespace) -> int:
    from xlakit.bundle import BundleError, load_bundle

    path = _bundle_path(args)
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    try:
        import warnings

        with warnings.catch_warnings():  # failed modules are shown in the table and the exit status
            warnings.simplefilter("ignore", RuntimeWarning)
            loaded = load_bundle(path, max_workers=args.workers,
                                 progress=not args.no_progress and not args.json and sys.stderr.isatty())
    except BundleError as e:
        raise CliError(str(e)) from None
    counts = loaded.counts()
    if args.json:
        _emit_json({"bundle": loaded.manifest.name, "path": str(path), "total_s": loaded.total_s,
                    "weights_s": loaded.weights_s, "counts": counts,
                    "dropped": [d.__dict__ for d in loaded.dropped], "record_problem": loaded.record_problem,
                    "modules": [r.to_dict() for r in loaded.reports]})
        return 1 if counts["error"] else 0
    rows = [(r.module, r.status, f"{r.load_s:.3f}", _seconds(r.compile_s), _human(r.module_bytes),
             _human(r.program_bytes), _human(r.footprint_bytes), r.reason or "")
            for r in loaded.reports]
    console = _console()
    console.print(_table(f"Bundle {loaded.manifest.name} on {loaded.device}",
                         (("module", "left"), ("status", "left"), ("load s", "right"), ("compile s", "right"),
                          ("module", "right"), ("program", "right"), ("memory/run", "right"),
                          ("why not a hit", "left")),
                         rows))
    print(f"{len(loaded.programs)} programs in {loaded.total_s:.3f} s: {counts['hit']} loaded from .cache, "
          f"{counts['miss']} compiled, {counts['error']} failed; weights {loaded.weights_s:.3f} s")
    for d in loaded.dropped:
        print(f"dropped {d.key} from {d.partition}: {d.reason}")
    if loaded.record_problem:
        print(f"module_hashes.json was unreadable ({loaded.record_problem}); rewritten")
    return 1 if counts["error"] else 0


def _cmd_bundle_check(args: argparse.Namespace) -> int:
    from xlakit.bundle import check_bundle

    result = check_bundle(_bundle_path(args))
    if args.json:
        _emit_json(result.to_dict())
        return 0 if result.ok else 1
    m = result.manifest
    if m is not None:
        ins = ", ".join(f"{s.name}: {s.describe()}" for s in m.inputs)
        print(f"Bundle {m.name}: inputs {ins}; batch sizes {list(m.batch_sizes)}; variants {list(m.variants)}; "
              f"{len(m.weights)} weight tensors; exported for {', '.join(m.platforms) or '?'}")
        rows = [(c.file, c.state, _human(c.size_bytes), (c.sha256 or "-")[:12], ", ".join(c.partitions) or "-")
                for c in result.modules]
        _console().print(_table("Modules", (("module", "left"), ("vs record", "left"), ("size", "right"),
                                            ("sha256", "left"), ("compiled in partitions", "left")), rows))
        reason = f" ({result.record_reason})" if result.record_reason else ""
        print(f"module_hashes.json: {result.record_status}{reason}")
        for part, n in result.partitions.items():
            print(f"partition {part}: {n} program(s)")
        if not result.partitions:
            print("no compiled programs yet (.cache is empty or missing)")
        for d in result.drops:
            print(f"a load would drop {d.key} from {d.partition}: {d.reason}")
        if not result.drops:
            print("a load would drop nothing")
    for problem in result.problems:
        print(f"problem: {problem}")
    return 0 if result.ok else 1


def _cmd_report(args: argparse.Namespace) -> int:
    try:
        import plotly  # noqa: F401 - the report's figures

        from xlakit import report
    except ImportError as e:
        raise CliError(f"the report needs {e.name or e}: pip install 'xlakit[widgets]'") from None
    log = None
    if args.events:
        from xlakit import events

        try:
            log = events.load(args.events)
        except ValueError as e:
            raise CliError(f"--events {args.events}: {e}") from None
    store = _store(args)
    cache = None
    if store.root.exists():
        from xlakit.cache import ExecutableCache

        cache = ExecutableCache(store.root)
    try:
        out = report.write(args.out, cache=cache, log=log, include_plotlyjs="cdn" if args.cdn else True)
    finally:
        if cache is not None:
            cache.close()
    print(f"wrote {out} ({out.stat().st_size:,} bytes): cache {store.root}"
          f"{'' if cache is not None else ' (no such folder)'}, {len(log) if log is not None else 0} events")
    return 0


# -- parser and entry point ---------------------------------------------------------------------------

def _build_parser() -> argparse.ArgumentParser:
    from xlakit import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--path", metavar="DIR",
                        help="cache folder (default: $XLAKIT_CACHE_DIR, else the user cache folder)")
    common.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--remote", metavar="URL", help="act on a shared bucket (s3://bucket/prefix, gs://..., "
                        "file:///...) instead of the local folder")
    shared.add_argument("--remote-options", metavar="JSON",
                        help="fsspec storage options (default: $XLAKIT_CACHE_REMOTE_OPTIONS)")
    shared.add_argument("--remote-mode", choices=("rw", "ro"),
                        help="ro refuses to delete (default: $XLAKIT_CACHE_REMOTE_MODE, else rw)")

    parser = _Parser(prog=PROG, description="Inspect and maintain xlakit's persistent XLA executable cache.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    cache = commands.add_parser("cache", help="inspect and maintain the cache")
    cache_cmds = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=_Parser)

    ls = cache_cmds.add_parser("ls", parents=[common, shared], help="list entries")
    ls.add_argument("--partition", metavar="P", help="only this partition")
    ls.add_argument("--sort", choices=_SORT_KEYS, default="last_used",
                    help="order (default: last_used, most recent first)")
    ls.set_defaults(func=_cmd_ls)

    stats = cache_cmds.add_parser("stats", parents=[common, shared], help="sizes, counts and environments")
    stats.set_defaults(func=_cmd_stats)

    verify = cache_cmds.add_parser("verify", parents=[common, shared],
                                   help="open every entry fully; move bad ones to quarantine (exit 1)")
    verify.add_argument("--partition", metavar="P", help="only this partition")
    verify.add_argument("--fix", action="store_true", help="with --remote: delete bad objects (rw only)")
    verify.set_defaults(func=_cmd_verify)

    prune = cache_cmds.add_parser("prune", parents=[common, shared],
                                  help="evict least-recently-used entries down to a size")
    prune.add_argument("--older-than", metavar="AGE", help="with --remote: delete objects created more than AGE "
                       "ago (30d, 12h, 90m, 2w)")
    prune.add_argument("--dry-run", action="store_true", help="with --remote: list what would be deleted")
    prune.add_argument("--max-bytes", metavar="N",
                       help="target size: bytes, or with a unit: 10k, 500MB, 2GiB (k/MB/GB = 1000s, KiB/MiB/GiB = 1024s)")
    prune.set_defaults(func=_cmd_prune)

    clear = cache_cmds.add_parser("clear", parents=[common], help="remove entries")
    clear.add_argument("--partition", metavar="P", help="only this partition (default: everything)")
    clear.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(func=_cmd_clear)

    where = cache_cmds.add_parser("where", parents=[common], help="cache folder and HMAC secret source")
    where.set_defaults(func=_cmd_where)

    demo = commands.add_parser("demo", help="run the demo (imports JAX)")
    demo.add_argument("--keep-cache", metavar="DIR", help="keep the demo's cache in DIR")
    demo.add_argument("--quick", action="store_true", help="a shorter run")
    demo.set_defaults(func=_cmd_demo)

    bundle = commands.add_parser("bundle", help="load and inspect model bundles (xlakit.export_bundle)")
    bundle_cmds = bundle.add_subparsers(dest="bundle_command", metavar="SUBCOMMAND", parser_class=_Parser)
    warm = bundle_cmds.add_parser("warm", help="load a bundle, compiling what its .cache lacks; print the report")
    warm.add_argument("bundle", metavar="PATH", help="bundle folder")
    warm.add_argument("--workers", type=int, metavar="N", help="modules loaded at once (default: measured best)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar")
    warm.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    warm.set_defaults(func=_cmd_bundle_warm)
    check = bundle_cmds.add_parser("check", help="manifest, module hashes, partitions, what a load would drop")
    check.add_argument("bundle", metavar="PATH", help="bundle folder")
    check.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    check.set_defaults(func=_cmd_bundle_check)

    report_cmd = commands.add_parser("report", help="the widgets' views as one standalone HTML file (imports JAX)")
    report_cmd.add_argument("--out", metavar="FILE", required=True, help="the HTML file to write")
    report_cmd.add_argument("--path", metavar="DIR",
                            help="cache folder (default: $XLAKIT_CACHE_DIR, else the user cache folder)")
    report_cmd.add_argument("--events", metavar="FILE",
                            help="events for the timeline: a JSON-lines file written by EventLog.save()")
    report_cmd.add_argument("--cdn", action="store_true",
                            help="link plotly.js from its CDN instead of inlining it (smaller file, needs network)")
    report_cmd.set_defaults(func=_cmd_report)

    parser.set_defaults(_help=parser)
    cache.set_defaults(_help=cache)
    bundle.set_defaults(_help=bundle)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    func = getattr(args, "func", None)
    if func is None:
        args._help.print_help(sys.stderr)
        return 2
    try:
        return func(args)
    except CliError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except TimeoutError as e:  # filelock.Timeout: another process holds the cache lock
        print(f"{PROG}: error: the cache is locked by another process ({e}); try again shortly", file=sys.stderr)
        return 2
    except OSError as e:
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"{PROG}: error: cannot access{where}: {e.strerror or e}; check the folder's permissions "
              "or pass --path DIR", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - never a traceback unless asked for
        if os.environ.get("XLAKIT_DEBUG"):
            raise
        print(f"{PROG}: error: {type(e).__name__}: {e} (set XLAKIT_DEBUG=1 for a traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
