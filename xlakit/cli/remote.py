"""``xlakit cache ls|stats|verify|prune --remote URL``: the shared bucket's housekeeping, printed.

The work is done by :mod:`xlakit.cache.remote_maintenance` (no JAX); this module only parses the settings
and prints. See :mod:`xlakit.cli` for the rest of the command line.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

from xlakit.cli._common import (
    CliError,
    Column,
    emit_json,
    human,
    largest_first,
    local_time,
    print_bounded,
    print_table,
    size_option,
)

__all__ = ["ls", "stats", "verify", "prune"]


def _scan(remote, partition: str | None = None):
    """One listing; a prefix or ``v1`` that is a file or a link is a CliError (exit 2). Names left alone are
    said on stderr, bounded (:func:`~xlakit.cli._common.print_bounded`); ``--json`` lists them all
    (``left_alone``)."""
    from xlakit.cache import remote_maintenance as rm

    try:
        found = rm.survey(remote, partition)
    except NotADirectoryError as e:
        raise CliError(f"{remote.url}: {e.strerror or e}") from None
    print_bounded([(s.why, str(s)) for s in found.skipped], "names left alone", "--json lists them all (left_alone)",
                  prefix="note: ", file=sys.stderr)
    return found


def _left_alone(scan) -> list[dict[str, str]]:
    """The JSON of the names a listing left alone."""
    return [{"name": s.name, "why": s.why} for s in scan.skipped]


def _by_reason(reports, label) -> list[tuple[str, str]]:
    """``(kind, line)`` per report for :func:`~xlakit.cli._common.print_bounded`: the kind is the reason's
    ``<kind>:`` prefix (xlakit's own word)."""
    return [((r.reason or "").partition(":")[0], label(r)) for r in reports]

def _remote(args: argparse.Namespace):
    """(RemoteStore, mode) for ``--remote`` with ``--remote-options`` / ``--remote-mode`` or their variables. A URL
    xlakit cannot use is a CliError naming --remote and the schemes it supports, before fsspec is asked."""
    from xlakit.cache import remote_maintenance
    from xlakit.store.remote import check_url, parse_options, remote_settings

    try:
        check_url(args.remote, "--remote")
    except (TypeError, ValueError) as e:
        raise CliError(str(e)) from None
    try:
        options = parse_options(args.remote_options) if args.remote_options is not None else None
        if args.remote_options is not None and not isinstance(options, dict):  # 'null' too: never "not given"
            raise ValueError("not a JSON object")
    except ValueError as e:
        example = '{"endpoint_url": "http://host:9000"}'
        raise CliError(f"--remote-options: {e}; use a JSON object such as '{example}'") from e
    try:
        url, mode, options = remote_settings(args.remote, args.remote_mode, options)  # type: ignore[misc]
        return remote_maintenance.open_remote(url, options), mode
    except (ValueError, TypeError, ImportError) as e:
        # an option of the wrong type ('endpoint_url': 5) or one the filesystem does not take: the option first
        lead = f"{_options_source(args)}: " if "storage option" in str(e) else ""
        raise CliError(f"{lead}{e}") from None


def _options_source(args: argparse.Namespace) -> str:
    """Where the storage options came from: ``--remote-options``, else ``$XLAKIT_CACHE_REMOTE_OPTIONS`` when it is
    set, else ``--remote-options`` (what to pass)."""
    if getattr(args, "remote_options", None) is None and os.environ.get("XLAKIT_CACHE_REMOTE_OPTIONS"):
        return "$XLAKIT_CACHE_REMOTE_OPTIONS"
    return "--remote-options"


def _names_the_setting(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a ``--remote`` command; the medium's failure (an OSError the remote store raised, in a library's words)
    becomes a CliError naming the setting to fix: ``--remote-options`` (or ``$XLAKIT_CACHE_REMOTE_OPTIONS``) when
    the filesystem refused the storage options (a TypeError or ValueError beneath: an unknown option, an
    ``endpoint_url`` it cannot use), else ``--remote`` and the options (a bucket that does not exist, credentials
    refused, an endpoint that does not answer). It said "cannot access: TypeError: 'int' object is not iterable;
    check the folder's permissions or pass --path DIR". A deadline missed (TimeoutError) is left to the caller."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except TimeoutError:
            raise
        except OSError as e:
            cause = e.__cause__ if e.__cause__ is not None else e.__context__
            what = e.strerror or str(e)
            options = _options_source(args)
            scheme = str(args.remote).partition("://")[0]
            done = "; nothing was deleted after the failing request" if command.__name__ in ("prune", "verify") else ""
            if isinstance(cause, (TypeError, ValueError)):
                raise CliError(f"{options}: the {scheme}:// filesystem did not accept the storage options ({what}); "
                               f"give only options it takes, e.g. '{{\"endpoint_url\": \"http://host:9000\"}}'"
                               f"{done}") from None
            raise CliError(f"--remote {args.remote}: {what}; check the bucket and prefix in --remote, and the endpoint "
                           f"and credentials in {options} (or the provider's usual variables){done}") from None

    return run


def _secret() -> bytes:
    """This machine's cache secret; one that cannot be read or made is a CliError saying how to provide one."""
    from xlakit.store import load_secret
    from xlakit.store.secret import SecretUnavailable

    try:
        return load_secret()
    except SecretUnavailable as e:
        raise CliError(str(e)) from None


@_names_the_setting
def ls(args: argparse.Namespace) -> int:
    """``xlakit cache ls --remote URL``: the objects whose header authenticates with this machine's secret as the
    entry at their name, newest first (one ranged read of each header, as ``prune``). The others are counted by
    kind with a few examples (:func:`~xlakit.cli._common.print_bounded`): a bucket anyone can write may hold any
    number of files named like entries. ``--json`` lists every object, with ``reason`` null for the listed ones."""
    from xlakit.cache import remote_maintenance as rm

    remote, _ = _remote(args)
    scan = _scan(remote, args.partition)
    found = rm.entries(remote, _secret(), args.partition, scan)
    found.reverse()  # newest first
    total = sum(r.size_bytes for r in found)
    if args.json:
        emit_json({"remote": remote.url, "count": len(found), "total_bytes": total,
                   "listed": sum(r.reason is None for r in found),
                   "objects": [{"partition": r.partition, "key": r.key, "size_bytes": r.size_bytes,
                                "created": r.created, "reason": r.reason} for r in found],
                   "left_alone": _left_alone(scan)})
        return 0
    if not found:
        print(f"No objects in {remote.url}")
        return 0
    listed = [r for r in found if r.reason is None]
    others = [r for r in found if r.reason is not None]
    if listed:
        columns = [Column("name", "name"), Column("partition", "partition"), Column("size_bytes", "size", "bytes"),
                   Column("created", "created")]
        rows = [{"name": r.key.rpartition("-")[0] or r.key, "partition": r.partition, "size_bytes": r.size_bytes,
                 "created": local_time(r.created)} for r in listed]
        print_table(remote.url, columns, rows)
    print_bounded([((r.reason or "").partition(":")[0], f"{r.partition} [{r.key}] ({human(r.size_bytes)}): "
                    f"{r.reason}") for r in others],
                  "objects whose header does not authenticate with this key as the entry at their name",
                  "--json lists them all", prefix="not listed ")
    print(f"{len(found)} objects, {human(total)} ({total} bytes)"
          + (f"; {len(others)} of them not listed (another key's, or not provably entries)" if others else ""))
    return 0


@_names_the_setting
def stats(args: argparse.Namespace) -> int:
    from xlakit.cache import remote_maintenance as rm

    remote, mode = _remote(args)
    scan = _scan(remote)
    stats = dict(rm.totals(rm.listing(remote, scan=scan)), remote=remote.url, mode=mode,
                 temps=len(scan.temps), temp_bytes=sum(t[2] for t in scan.temps), odd=len(scan.odd))
    if args.json:
        emit_json(dict(stats, left_alone=_left_alone(scan)))
        return 0
    print(f"remote      {remote.url} (mode {mode})")
    print(f"objects     {stats['count']}, {human(stats['total_bytes'])} ({stats['total_bytes']} bytes)")
    print(f"created     {local_time(stats['oldest'])} .. {local_time(stats['newest'])}")
    shown, more = largest_first(sorted(stats["partitions"].items()), lambda item: (item[1]["bytes"], item[1]["count"]))
    for name, p in shown:
        print(f"partition   {name}: {p['count']} objects, {human(p['bytes'])}")
    if more:
        print(f"partition   ... and {more} more, smaller (--json lists them all)")
    if stats["temps"]:
        print(f"temps       {stats['temps']} unfinished uploads, {human(stats['temp_bytes'])} "
              "(prune removes those over an hour old)")
    if stats["odd"]:
        print(f"odd         {stats['odd']} names hold links, FIFOs or folders (readers refuse them; xlakit never "
              "deletes them)")
    return 0


@_names_the_setting
def verify(args: argparse.Namespace) -> int:
    from xlakit.cache import remote_maintenance as rm

    remote, mode = _remote(args)
    scan = _scan(remote, args.partition)
    secret = _secret()
    try:
        found = rm.verify(remote, secret, fix=args.fix, mode=mode, partition=args.partition, scan=scan)
    except PermissionError as e:
        raise CliError(str(e)) from None
    skipped = [r for r in found if r.reason and r.reason.startswith(rm.SKIPPED_KINDS)]
    bad = [r for r in found if r.reason and r not in skipped]
    if args.json:
        emit_json({"remote": remote.url, "verified": len(found), "ok": len(found) - len(bad) - len(skipped),
                    "bad": [r.to_dict() for r in bad], "skipped": [r.to_dict() for r in skipped],
                    "left_alone": _left_alone(scan)})
        return 1 if bad else 0
    everyone = "--json lists them all"
    print_bounded(_by_reason(skipped, lambda r: f"{r.partition} [{r.key}]: {r.reason} (left in place)"),
                  "objects skipped (left in place)", everyone, prefix="SKIPPED ")
    print_bounded(_by_reason(bad, lambda r: f"{r.partition} [{r.key}]: {r.reason}" + (" (deleted)" if r.deleted
                                                                                       else "")),
                  "objects failed verification", everyone, prefix="BAD ")
    if bad:
        done = sum(r.deleted for r in bad)
        print(f"{len(bad)} of {len(found)} objects failed verification; " +
              (f"{done} deleted (only objects whose authenticated header names them are)" if args.fix
               else "readers refuse them; --fix deletes those provably this key's (rw only)"))
        return 1
    print(f"{len(found) - len(skipped)} objects verified" + (f", {len(skipped)} skipped" if skipped else ""))
    return 0


@_names_the_setting
def prune(args: argparse.Namespace) -> int:
    from xlakit._units import parse_age  # ASCII digits only (rm.parse_age's \d took "３s" for 3 s)
    from xlakit.cache import remote_maintenance as rm

    text = args.older_than
    try:
        older = parse_age(text) if text is not None else None
    except ValueError as e:
        raise CliError(f"--older-than: {e}") from None
    if text is not None and text.strip()[-1:] not in ("s", "m", "h", "d", "w"):
        # a command that deletes: "--older-than 30" meant days, read as 30 seconds; "1M" was one minute
        raise CliError(f"--older-than {text!r}: give the number with its unit in lower case: 30d, 12h, 90m, 2w or "
                       "3600s (nothing was deleted)")
    limit = size_option(args.max_bytes) if args.max_bytes is not None else None
    remote, mode = _remote(args)
    scan = _scan(remote)
    secret = _secret()
    try:
        result = rm.prune(remote, secret, older_than_s=older, max_bytes=limit, mode=mode,
                          dry_run=args.dry_run, scan=scan)
    except (PermissionError, ValueError) as e:
        raise CliError(str(e)) from None
    except NotADirectoryError as e:
        raise CliError(f"{remote.url}: {e.strerror or e}") from None
    gone = result.deleted
    if args.json:
        emit_json({"remote": remote.url, "dry_run": args.dry_run, "deleted": [r.to_dict() for r in gone],
                    "bytes_deleted": sum(r.size_bytes for r in gone), "other_key": result.other_key,
                    "other_key_bytes": result.other_key_bytes, "not_xlakit": result.not_xlakit,
                    "unproven": result.unproven, "unproven_bytes": result.unproven_bytes,
                    "unreadable": result.unreadable, "unreadable_bytes": result.unreadable_bytes,
                    "temps_removed": result.temps_removed, "temps_left": result.temps_left,
                    "vanished": result.vanished,
                    "left_alone": _left_alone(scan)})
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    # One line each up to ten, then counts by partition and examples (a bucket of 20,000 old objects printed 20,000)
    print_bounded([(r.partition, f"{r.partition} [{r.key}] ({human(r.size_bytes)}, created {local_time(r.created)})")
                   for r in gone], "objects", "--json lists them all",
                  prefix=f"{verb} ")
    print(f"{verb.capitalize()} {len(gone)} objects, {human(sum(r.size_bytes for r in gone))} from {remote.url}")
    if result.other_key:
        print(f"Left {result.other_key} objects ({human(result.other_key_bytes)}) signed with another key "
              "(another team's; they prune their own)")
    if result.not_xlakit:
        print(f"Left {result.not_xlakit} files that are not xlakit objects")
    if result.unproven:
        print(f"Left {result.unproven} objects ({human(result.unproven_bytes)}) whose header does not authenticate "
              "with this key or that copy an envelope under another name (not provably ours; never counted)")
    if result.vanished:
        print(f"{result.vanished} objects listed were gone when read (another process deleted them meanwhile)")
    if result.temps_removed or result.temps_left:
        print(f"Removed {result.temps_removed} unfinished uploads over an hour old; {result.temps_left} newer left")
    if result.unreadable:
        print(f"Could not read {result.unreadable} objects ({human(result.unreadable_bytes)}): not counted, not "
              "deleted; run `xlakit cache verify --remote` to see why", file=sys.stderr)
        return 1
    return 0

