"""``xlakit cache ls|stats|verify|prune|clear|where``: the local cache folder, listed and maintained.

Each command reads the folder through :class:`xlakit.store.LocalStore` (no JAX); ``--remote URL`` hands
ls/stats/verify/prune to :mod:`xlakit.cli.remote`. ``--json`` prints machine-readable output.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from xlakit.cli._cache_notes import left_alone as _left_alone
from xlakit.cli._cache_notes import what_remains as _what_remains
from xlakit.cli._common import (
    PROG,
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

__all__ = ["SORT_KEYS", "open_store", "ls", "stats", "verify", "prune", "clear", "where"]

SORT_KEYS = ("last_used", "size", "name", "created")


def _finite(x: float | None) -> float | None:
    """``x``, or None when it is not a finite number (a corrupt header may record NaN or Infinity)."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


#: Options that act on a bucket only, with what the local folder does instead: given without ``--remote`` they
#: were accepted and ignored (``verify --fix`` did nothing more; ``prune --older-than 30d --max-bytes 1G`` evicted
#: entries of any age; ``--remote-mode ro`` let a local prune delete), so each is refused, naming it.
_REMOTE_ONLY = {
    "fix": ("--fix", "the local verify always moves bad entries to the quarantine; run it without --fix"),
    "dry_run": ("--dry-run", "for the local folder, `xlakit cache ls --sort last_used` lists entries least "
                "recently used first (what prune would evict first); nothing was removed"),  # a dry run that deletes
    "older_than": ("--older-than", "the local prune evicts least-recently-used entries down to --max-bytes N"),
    "remote_mode": ("--remote-mode", "the local folder has no read-only mode"),
    "remote_options": ("--remote-options", "the local folder takes no storage options"),
}


def _on_remote(args: argparse.Namespace, command: str) -> int | None:
    """The exit status of ``command`` run on the bucket when ``--remote URL`` is given, else None (the local
    folder's turn) after refusing an option of :data:`_REMOTE_ONLY`: a CliError naming it; nothing is done."""
    if getattr(args, "remote", None) is not None:
        from xlakit.cli import remote

        return getattr(remote, command)(args)
    for dest, (option, instead) in _REMOTE_ONLY.items():
        if getattr(args, dest, None) not in (None, False):
            done = "" if "nothing was" in instead else "; nothing was done"
            raise CliError(f"{option} is for --remote URL only; {instead}{done}")
    return None


def open_store(args: argparse.Namespace, *, missing_ok: bool = False):
    """The LocalStore for ``--path``, after checking the folder is usable.

    A missing default folder is fine (nothing cached yet); a missing folder given with ``--path`` is a
    CliError unless ``missing_ok``: a typo must not read as "0 entries removed"."""
    from xlakit.store import LocalStore, resolve_root
    from xlakit.store.layout import root_source

    root = resolve_root(args.path)
    if args.path is not None and not missing_ok and not os.path.lexists(root):
        raise CliError(f"no cache folder at {root} (a typo?); 'xlakit cache where' shows the default folder")
    if root.exists():
        if not root.is_dir():
            raise CliError(f"cache path {root} (from {root_source(args.path)}) is not a folder; "
                           "pass --path DIR with a cache folder")
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
    from xlakit.store.layout import is_environment_partition

    known = [p for p in store.partitions() if is_environment_partition(store.root, p)]
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


def ls(args: argparse.Namespace) -> int:
    """``xlakit cache ls``: one line per entry, most recently used first (``--sort``)."""
    if (code := _on_remote(args, "ls")) is not None:
        return code
    store = open_store(args)
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
        emit_json({"folder": str(store.root), "count": len(entries), "total_bytes": total,
                   "entries": [_entry_dict(i) for i in entries]})
        return 0

    if not entries:
        where = f" in partition {args.partition}" if args.partition else ""
        print(f"No entries{where} in {store.root}")
        return 0
    # The table lists the entries whose header authenticates; the others (another user's, damaged, or junk that
    # anyone who can write the folder put there: 40,000 rows once) are said bounded, every one in --json.
    listed = [i for i in entries if "error" not in i.header]
    unreadable = [i for i in entries if "error" in i.header]
    if listed:
        columns = [Column("name", "name"), Column("partition", "partition"), Column("size", "size", "bytes"),
                   Column("created", "created"), Column("last_used", "last used"),
                   Column("compile_s", "compile", "seconds")]
        rows = [{"name": _label(i), "partition": i.partition, "size": i.size_bytes, "created": local_time(i.created),
                 "last_used": local_time(i.last_used), "compile_s": _finite(i.compile_s)} for i in listed]
        print_table(str(store.root), columns, rows)
    print_bounded([(_unreadable_kind(i), f"{i.partition} [{i.key}] ({human(i.size_bytes)}): {i.header['error']}")
                   for i in unreadable], "entries not listed (their header does not authenticate with this key)",
                  "--json lists them all", prefix="unreadable ")
    print(f"{len(entries)} entries, {human(total)} ({total} bytes)"
          + (f"; {len(unreadable)} of them unreadable" if unreadable else ""))
    return 0


def _unreadable_kind(info) -> str:
    """What groups an unreadable entry in a summary: ``foreign``/``stale`` (another key or format: someone else's,
    left alone), else ``damaged or not an entry``."""
    kind = str(info.header.get("error", "")).partition(":")[0]
    return kind if kind in ("foreign", "stale") else "damaged or not an entry"


def _environment_summary(info: dict | None) -> dict[str, Any] | None:
    if not info:
        return None
    nested = info.get("environment")
    env = nested if isinstance(nested, dict) else info
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


def stats(args: argparse.Namespace) -> int:
    """``xlakit cache stats``: totals on disk, the quarantine, and one line per partition."""
    if (code := _on_remote(args, "stats")) is not None:
        return code
    store = open_store(args)  # a mistyped --path is an error here too, not an empty report
    exists = store.root.is_dir()
    entries = store.entries() if exists else []
    by_partition: dict[str, list] = {}
    for info in entries:  # one pass: a scan per partition took 118 s for 20,000 partitions
        by_partition.setdefault(info.partition, []).append(info)
    partitions = []
    for name in (store.partitions() if exists else []):
        mine = by_partition.get(name, [])
        partitions.append({
            "name": name,
            "entries": len(mine),
            "bytes": sum(i.size_bytes for i in mine),
            "compile_s": sum(i.compile_s or 0.0 for i in mine),
            "environment": _environment_summary(store.read_partition_info(name)),
        })
    q_count, q_bytes = _quarantined(store.root) if exists else (0, 0)
    summary = {
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
        emit_json(summary)
        return 0

    state = "" if exists else " (does not exist yet)"
    print(f"Cache folder: {summary['folder']}{state}")
    print(f"On disk:      {human(summary['total_bytes'])} ({summary['total_bytes']} bytes)")
    print(f"Entries:      {summary['entries']} ({human(summary['entry_bytes'])}), "
          f"recorded compile time {summary['compile_s']:.2f} s")
    print(f"Quarantined:  {q_count} ({human(q_bytes)})")
    if partitions:
        columns = [Column("name", "partition"), Column("entries", "entries", "count"),
                   Column("bytes", "size", "bytes"), Column("compile_s", "compile", "seconds"),
                   Column("environment", "environment")]
        shown, more = largest_first(partitions, lambda p: (p["bytes"], p["entries"]))
        rows = [dict(p, compile_s=_finite(p["compile_s"]), environment=_describe_env(p["environment"]))
                for p in shown]
        print_table("Partitions" + (f" (the {len(shown)} largest of {len(partitions)}; --json lists them all)"
                                    if more else ""), columns, rows)
    return 0


def verify(args: argparse.Namespace) -> int:
    """``xlakit cache verify``: open every entry fully; bad ones go to the quarantine (exit 1)."""
    from xlakit.store.quarantine import NOTE_MISSING

    if (code := _on_remote(args, "verify")) is not None:
        return code
    store = open_store(args)
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
    left = _left_alone(store, args.json)
    if args.json:
        emit_json({"folder": str(store.root), "verified": len(results), "ok": len(results) - len(bad) - len(skipped),
                   "bad": [dict(_entry_dict(i), reason=r, quarantined=str(i.path) in moved) for i, r in bad],
                   "skipped": [dict(_entry_dict(i), reason=r) for i, r in skipped],
                   "quarantine": str(quarantine), "left_alone": left})
        return 1 if bad else 0
    everyone = "--json lists them all"
    print_bounded([(r.partition(":")[0], f"{i.partition} [{i.key}]: {r} (left in place)") for i, r in skipped],
                  "entries skipped (left in place)", everyone, prefix="SKIPPED ")
    print_bounded([(r.partition(":")[0], f"{i.partition}/{i.name or '(unreadable)'} [{i.key}]: {r}") for i, r in bad],
                  "entries failed verification", everyone, prefix="BAD ")
    if bad:
        stuck = [r for i, r in bad if str(i.path) not in moved]
        line = (f"{len(bad)} of {len(results)} entries failed verification and will not be loaded; "
                f"{len(moved)} moved to {quarantine}")
        noteless = [r for i, r in bad if str(i.path) in moved and NOTE_MISSING in r]
        if noteless:  # a full quarantine took the entry (a link or rename needs no space) but not its note
            why = noteless[0].partition(NOTE_MISSING)[2].rstrip("]")
            line += f" ({len(noteless)} without the reason note beside it, which could not be written: {why})"
        if stuck:  # e.g. a quarantine on another filesystem that refused the copy, a read-only folder
            why = next((r.partition(" [not quarantined: ")[2].rstrip("]") for r in stuck if "[not quarantined: " in r),
                       "gone or replaced while verifying")
            line += (f"; {len(stuck)} could not be moved and stay where they are, rejected again on every read "
                     f"({why})")
        print(line)
        return 1
    print(f"{len(results) - len(skipped)} entries verified" + (f", {len(skipped)} skipped" if skipped else ""))
    return 0


def prune(args: argparse.Namespace) -> int:
    """``xlakit cache prune --max-bytes N``: evict least-recently-used entries down to N bytes."""
    if (code := _on_remote(args, "prune")) is not None:
        return code
    if args.max_bytes is None:
        raise CliError("prune needs --max-bytes N for the local folder (--older-than is for --remote URL)")
    limit = size_option(args.max_bytes)
    store = open_store(args)
    before = store.total_bytes() if store.root.is_dir() else 0
    evicted = _destructive(store.prune, limit)
    after = store.total_bytes() if store.root.is_dir() else 0
    left = _left_alone(store, args.json)
    if args.json:
        emit_json({"folder": str(store.root), "max_bytes": limit, "bytes_before": before, "bytes_after": after,
                   "within_limit": after <= limit,
                   "evicted": [_entry_dict(i) for i in evicted], "left_alone": left})
        return 0
    # One line each up to ten, then counts and examples: a folder holding 20,000 junk files printed 20,000 lines.
    lines = [("unreadable" if "error" in info.header else "least recently used",
              f"{info.partition}/{_label(info)} ({human(info.size_bytes)}, last used {local_time(info.last_used)})")
             for info in evicted]
    print_bounded(lines, "entries evicted", "--json lists them all", prefix="evicted ")
    print(f"Evicted {len(evicted)} entries; {store.root} now holds {human(after)} ({after} bytes), "
          f"limit {human(limit)} ({limit} bytes)")
    if after > limit:
        print(f"{PROG}: warning: still over the limit: the remaining {after} bytes on disk are what prune does not "
              f"remove: {_what_remains(store)}", file=sys.stderr)
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


def clear(args: argparse.Namespace) -> int:
    """``xlakit cache clear``: remove the entries of one partition or all. Asks first on a terminal; without a
    terminal it refuses (exit 2) unless ``--yes`` is given."""
    store = open_store(args)
    _check_partition(store, args.partition)
    what = f"partition {args.partition}" if args.partition else "all partitions and the quarantine"
    if not args.yes and store.root.is_dir():
        if sys.stdin is None or not sys.stdin.isatty():
            # a pipe or a script cannot be asked: deleting on whatever it sends would be a guess
            raise CliError(f"cache clear removes entries ({what}) from {store.root}; stdin is not a terminal, "
                           "so nothing was asked and nothing removed: pass --yes to clear without asking")
        count = len(store.entries(args.partition))
        if not _confirm(f"Remove {count} entries ({what}) from {store.root}?"):
            print("Aborted; nothing removed.", file=sys.stderr)
            return 1
    removed = _destructive(store.clear, args.partition)
    left = _left_alone(store, args.json)
    if args.json:
        emit_json({"folder": str(store.root), "partition": args.partition, "removed": removed, "left_alone": left})
    else:
        print(f"Removed {removed} entries ({what}) from {store.root}")
    return 0


def where(args: argparse.Namespace) -> int:
    """``xlakit cache where``: the cache folder, where its path came from (``--path``, ``$XLAKIT_CACHE_DIR`` or
    the user cache folder) and where the HMAC secret comes from."""
    from xlakit.store import resolve_root
    from xlakit.store.layout import ENV_FINGERPRINT_MEMO_DIR as MEMO_DIR_ENV
    from xlakit.store.layout import FINGERPRINT_MEMO as MEMO_FILENAME
    from xlakit.store.layout import fingerprint_memo_override, root_source
    from xlakit.store.secret import secret_location

    root = resolve_root(args.path)
    if os.path.lexists(root) and not root.is_dir():
        raise CliError(f"cache path {root} (from {root_source(args.path)}) is a file, not a folder; "
                       "pass --path DIR or set XLAKIT_CACHE_DIR to a folder")
    own_memo = fingerprint_memo_override()
    memo = own_memo or root
    info = {"folder": str(root), "exists": root.is_dir(), "from": root_source(args.path),
            "fingerprint_memo": str(memo / MEMO_FILENAME), "secret": secret_location()}
    if args.json:
        emit_json(info)
        return 0
    print(f"Cache folder: {info['folder']} ({'exists' if info['exists'] else 'does not exist yet'}; "
          f"from {info['from']})")
    unusable = os.path.lexists(memo) and not memo.is_dir()
    print(f"jaxlib fingerprint memo: {info['fingerprint_memo']}"
          + (f" (from ${MEMO_DIR_ENV})" if own_memo else "")
          + (f" - {memo} is not a folder: no memo is kept, every process hashes jaxlib" if unusable else ""))
    print(f"HMAC secret:  {info['secret']}")
    return 0
