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
    xlakit report --events FILE --trace PATH    the events as Chrome trace-event JSON (ui.perfetto.dev)
    xlakit bundle warm PATH [--workers N] [--no-progress]  load a bundle, compiling what its .cache lacks;
                                                print the per-module report (imports JAX; exit 1 if a module failed)
    xlakit bundle check PATH                    manifest, module hashes, partitions, what a load would drop
    xlakit --version

``--path`` defaults to ``$XLAKIT_CACHE_DIR``, else the user cache folder. Usage errors print one line
to stderr and exit 2. Importing this package does not import JAX.

Modules, one command group each: :mod:`.cache` (the local folder), :mod:`.remote` (``--remote URL``),
:mod:`.bundle`, :mod:`.report` (report and demo), :mod:`._common` (usage errors, sizes, JSON, tables). This
module holds the parser and :func:`main`, the console entry point.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from xlakit._text.untrusted import TerminalStream
from xlakit.cli import bundle as bundle_cmd
from xlakit.cli import cache as cache_cmd
from xlakit.cli import report as report_cli
from xlakit.cli._common import PROG, CliError, Parser, emit_json, int_option, nonempty, parse_size

# ``_emit_json`` is the old private name (tests and notes use it).
_emit_json = emit_json

__all__ = ["main", "parse_size", "CliError"]


# -- parser and entry point ---------------------------------------------------------------------------

def _build_parser() -> argparse.ArgumentParser:
    from xlakit._version import __version__

    common = Parser(add_help=False)
    common.add_argument("--path", metavar="DIR",
                        help="cache folder (default: $XLAKIT_CACHE_DIR, else the user cache folder)")
    common.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    shared = Parser(add_help=False)
    shared.add_argument("--remote", metavar="URL", help="act on a shared bucket (s3://bucket/prefix, gs://..., "
                        "file:///...) instead of the local folder")
    shared.add_argument("--remote-options", metavar="JSON",
                        help="fsspec storage options (default: $XLAKIT_CACHE_REMOTE_OPTIONS)")
    shared.add_argument("--remote-mode", choices=("rw", "ro"),
                        help="ro refuses to delete (default: $XLAKIT_CACHE_REMOTE_MODE, else rw)")

    parser = Parser(prog=PROG, description="Inspect and maintain xlakit's persistent XLA executable cache.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    cache = commands.add_parser("cache", help="inspect and maintain the cache")
    cache_cmds = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=Parser)

    ls = cache_cmds.add_parser("ls", parents=[common, shared], help="list entries")
    ls.add_argument("--partition", metavar="P", help="only this partition")
    ls.add_argument("--sort", choices=cache_cmd.SORT_KEYS, default="last_used",
                    help="order (default: last_used, most recent first)")
    ls.set_defaults(func=cache_cmd.ls)

    stats = cache_cmds.add_parser("stats", parents=[common, shared], help="sizes, counts and environments")
    stats.set_defaults(func=cache_cmd.stats)

    verify = cache_cmds.add_parser("verify", parents=[common, shared],
                                   help="open every entry fully; move bad ones to quarantine (exit 1)")
    verify.add_argument("--partition", metavar="P", help="only this partition")
    verify.add_argument("--fix", action="store_true", help="with --remote: delete bad objects (rw only)")
    verify.set_defaults(func=cache_cmd.verify)

    prune = cache_cmds.add_parser("prune", parents=[common, shared],
                                  help="evict least-recently-used entries down to a size")
    prune.add_argument("--older-than", metavar="AGE", help="with --remote: delete objects created more than AGE "
                       "ago (30d, 12h, 90m, 2w)")
    prune.add_argument("--dry-run", action="store_true", help="with --remote: list what would be deleted "
                       "(refused for the local folder)")
    prune.add_argument("--max-bytes", metavar="N", type=str,  # '' too is read (and refused) by size_option
                       help="target size: a whole number of bytes, or with a unit: 10k, 500MB, 2GiB, 7EiB "
                       "(k/MB/GB/TB/PB/EB = 1000s, KiB/MiB/GiB/TiB/PiB/EiB = 1024s; 0 evicts every entry)")
    prune.set_defaults(func=cache_cmd.prune)

    clear = cache_cmds.add_parser("clear", parents=[common], help="remove entries")
    clear.add_argument("--partition", metavar="P", help="only this partition (default: everything)")
    clear.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(func=cache_cmd.clear)

    where = cache_cmds.add_parser("where", parents=[common], help="cache folder and HMAC secret source")
    where.set_defaults(func=cache_cmd.where)

    demo = commands.add_parser("demo", help="run the demo (imports JAX)")
    demo.add_argument("--keep-cache", metavar="DIR", help="keep the demo's cache in DIR")
    demo.add_argument("--quick", action="store_true", help="a shorter run")
    demo.set_defaults(func=report_cli.demo)

    bundle = commands.add_parser("bundle", help="load and inspect model bundles (xlakit.export_bundle)")
    bundle_cmds = bundle.add_subparsers(dest="bundle_command", metavar="SUBCOMMAND", parser_class=Parser)
    warm = bundle_cmds.add_parser("warm", help="load a bundle, compiling what its .cache lacks; print the report")
    warm.add_argument("bundle", metavar="PATH", help="bundle folder")
    warm.add_argument("--workers", type=int_option("N"), metavar="N",
                      help="modules loaded at once (default: measured best)")
    warm.add_argument("--no-progress", action="store_true", help="no progress bar")
    warm.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    warm.set_defaults(func=bundle_cmd.warm)
    check = bundle_cmds.add_parser("check", help="manifest, module hashes, partitions, what a load would drop")
    check.add_argument("bundle", metavar="PATH", help="bundle folder")
    check.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    check.set_defaults(func=bundle_cmd.check)

    report_cmd = commands.add_parser("report", help="the widgets' views as one standalone HTML file (imports JAX)")
    report_cmd.add_argument("--out", metavar="FILE", help="the HTML file to write")
    report_cmd.add_argument("--trace", metavar="PATH",
                            help="also (or only) write --events as Chrome trace-event JSON, for ui.perfetto.dev")
    report_cmd.add_argument("--path", metavar="DIR",
                            help="cache folder (default: $XLAKIT_CACHE_DIR, else the user cache folder)")
    report_cmd.add_argument("--events", metavar="FILE",
                            help="events for the timeline: a JSON-lines file written by EventLog.save()")
    report_cmd.add_argument("--cdn", action="store_true",
                            help="link plotly.js from its CDN instead of inlining it (smaller file, needs network)")
    report_cmd.set_defaults(func=report_cli.report)

    _help_is_own(parser)
    _refuse_empty(parser)
    return parser


def _help_is_own(parser: argparse.ArgumentParser) -> None:
    """Every parser, the top level and each (sub)command's, sets ``_help`` to itself; the deepest one given wins
    (a subcommand's defaults overwrite its parent's): the help printed for ``xlakit cache`` alone, and the one
    a usage error points to (``unrecognized arguments: '' (see 'xlakit cache verify --help')``)."""
    parser.set_defaults(_help=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                _help_is_own(sub)


def _refuse_empty(parser: argparse.ArgumentParser) -> None:
    """Every option or argument that takes a string, in every subcommand, refuses ``''`` (:func:`nonempty`):
    ``--remote ''`` listed the local folder, ``--max-bytes ''`` pruned with no size limit."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                _refuse_empty(sub)
        elif isinstance(action, argparse._StoreAction) and action.type is None and action.choices is None:
            action.type = nonempty(str(action.metavar or "value"), bool(action.option_strings))


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
    # Names from buckets, manifests and event logs are printed by many commands: every byte the CLI writes
    # goes through one sanitiser, so none of them can carry a terminal control sequence.
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(out), TerminalStream(err)  # type: ignore[assignment]
    try:
        return _run(func, args)
    finally:
        sys.stdout, sys.stderr = out, err


def _run(func: Any, args: argparse.Namespace) -> int:
    try:
        return func(args)
    except CliError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except TimeoutError as e:  # filelock.Timeout: another process holds the cache lock
        from xlakit.store.base import DeadlineExceeded

        if isinstance(e, DeadlineExceeded):  # a remote that does not answer in XLAKIT_CACHE_REMOTE_TIMEOUT_S
            print(f"{PROG}: error: the remote store did not answer: {e} (XLAKIT_CACHE_REMOTE_TIMEOUT_S sets the "
                  "deadline); nothing was deleted after the failing request", file=sys.stderr)
            return 2
        print(f"{PROG}: error: the cache is locked by another process ({e}); try again shortly", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`xlakit cache ls | head`): not a cache problem. Point stdout at /dev/null so
        # Python's flush at exit is silent, and exit as a command killed by SIGPIPE does.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())  # type: ignore[union-attr]
        except (OSError, AttributeError, ValueError):
            pass
        return 141
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

