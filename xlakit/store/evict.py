"""The local folder's byte cap: scanning, least-recently-used eviction, stale temps, clearing.

Last use is the mtime of ``<stem>.used`` (falling back to the entry's mtime), so reading never rewrites an
entry. Temp files never count against the cap: a live writer's temp becomes an entry (counted then) and a
dead writer's temp (pid gone, or older than ``STALE_TEMP_S``) is removed by the next capped writer,
``prune``, ``verify`` and ``clear``. Every removal is of a name the store produces, in a folder opened
without following a link; nothing outside the root is ever touched.

What may go: only files in a *partition* (:func:`is_partition`: a folder made for an environment, by the shape of
its name or a valid ``partition.json``, or one holding an entry that authenticates with this key as the entry at
its very name) that are the store's entries (:func:`is_store_entry`: exactly the names xlakit's cache and bundles
write, ``<program>-<64 hex>.xlk``, or a name a caller's key gives with proof the store wrote it: its ``.used`` mark
beside it, or xlakit's magic bytes), with their ``.used`` marks and the store's temps. A folder of a user's own
beside the partitions (``logs/`` holding a ``notes.xlk``) is counted against the cap as foreign bytes and never
evicted, quarantined or cleared; nor is a ``notes.xlk`` of the user's inside a partition.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _fs
from .layout import (
    BUNDLE_RECORD,
    ENTRY_SUFFIX,
    FINGERPRINT_MEMO,
    LOCK_NAME,
    PARTITION_INFO,
    QUARANTINE,
    STALE_TEMP_S,
    TAG_NAME,
    USED_SUFFIX,
    is_environment_partition,
    is_stale_temp,
    is_temp_name,
    valid_partition,
    validate_partition,
)
from .owned import is_partition, is_store_entry, left_alone, store_entries
from .quarantine import quarantined_files, remove_quarantined

__all__ = ["Candidate", "Scan", "clear_partition", "counted_files", "evict_to", "is_partition", "is_store_entry",
           "left_alone", "removable", "remove_stale_temps", "scan", "store_entries", "touch_used", "COUNTED_KINDS",
           "OWN_ROOT_FILES"]

#: The store's own files in the root folder (beside the partitions), counted against the cap, never evicted.
OWN_ROOT_FILES = (TAG_NAME, FINGERPRINT_MEMO, BUNDLE_RECORD)
#: The kinds :func:`counted_files` sorts every counted byte into.
COUNTED_KINDS = ("entry", "own", "quarantined", "foreign")


@dataclass
class Candidate:
    """An evictable entry as seen by a scan: stat data only, no header read."""

    partition: str
    path: Path
    size: int  # disk bytes of .xlk plus .used
    entry_mtime: float
    last_used: float


@dataclass
class Scan:
    """One pass over the root. total: disk bytes counted against the cap (temps excluded)."""

    total: int = 0
    entries: list[Candidate] = field(default_factory=list)
    quarantined: list[tuple[float, int, Path]] = field(default_factory=list)  # (mtime, disk bytes, path)
    temps: list[tuple[float, int, Path]] = field(default_factory=list)  # stale temps only



def _walk_bytes(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):  # os.walk does not enter links to folders
        for name in files:
            st = _fs.lstat(os.path.join(dirpath, name))
            if st is not None and stat.S_ISREG(st.st_mode):
                total += _fs.disk_bytes(st)
    return total


def _default_partition(root: Path) -> Callable[[str], bool]:
    return lambda name: is_environment_partition(root, name)


def scan(root: Path, now: float | None = None, is_partition: Callable[[str], bool] | None = None) -> Scan:
    """Count every regular file under ``root`` except the lock and temps (the tag counts: it occupies a block);
    list entries, quarantined files and stale temps. Files that vanish mid-scan are skipped; links are never
    followed.

    Entries and stale temps are listed only in partitions (``is_partition(name)``; default
    :func:`~xlakit.store.layout.is_environment_partition`) and only at the store's entry names
    (:func:`is_store_entry`); a folder that is not a partition is counted file by file as a partition is (so the
    total does not depend on the test) and nothing in it is ever listed for removal."""
    now = time.time() if now is None else now
    partition_ok = is_partition or _default_partition(root)
    result = Scan()
    for top, st in _root_names(root):
        if not stat.S_ISDIR(st.st_mode):
            if is_temp_name(top.name):
                if is_stale_temp(top.name, st, now):
                    result.temps.append((st.st_mtime, _fs.disk_bytes(st), root / top.name))
            elif stat.S_ISREG(st.st_mode):
                result.total += _fs.disk_bytes(st)
            continue
        if top.name == QUARANTINE:
            result.quarantined = quarantined_files(root)
            result.total += sum(size for _, size, _ in result.quarantined)
            continue
        if not valid_partition(top.name):  # e.g. a folder moved out of the way: counted, never evicted from
            result.total += _walk_bytes(top.path)
            continue
        # a user's own folder (logs/ with a notes.xlk) is counted alike, and nothing in it is a candidate
        _scan_partition(Path(top.path), result, now, candidates=partition_ok(top.name))
    return result


def _root_names(root: Path):
    """``(entry, lstat)`` of each name in the cache root but the lock (never counted), skipping what vanished
    mid-scan: what :func:`scan` and :func:`counted_files` both walk."""
    for top in _fs.scandir(root):
        if top.name == LOCK_NAME:
            continue
        st = _fs.lstat(top.path)
        if st is not None:
            yield top, st


def counted_files(root: Path, is_partition: Callable[[str], bool] | None = None) -> list[tuple[str, str, int]]:
    """Every file :func:`scan` counts against the cap, as ``(kind, path relative to root, disk bytes)``; the
    bytes add up to ``scan(root).total`` (when nothing changes in between). For saying what a prune left.

    kind (:data:`COUNTED_KINDS`): ``"entry"``, an entry's ``.xlk`` and its ``.used`` mark; ``"own"``, the store's
    own bookkeeping, never evicted: ``CACHEDIR.TAG``, the jaxlib fingerprint memo and a bundle's module-hash
    record in the root (:data:`OWN_ROOT_FILES`), each partition's ``partition.json``, and a ``.used`` mark whose
    entry is gone; ``"quarantined"``, the quarantine's entries and reason notes; ``"foreign"``, files that are not
    xlakit's: other names in the root or in a partition (a ``notes.xlk`` that is no entry of the store's:
    :func:`is_store_entry`), files under a folder that is not a partition (``is_partition``, as for :func:`scan`)
    or inside one. Links are never followed."""
    partition_ok = is_partition or _default_partition(root)
    files: list[tuple[str, str, int]] = []
    for top, st in _root_names(root):
        if not stat.S_ISDIR(st.st_mode):
            if not is_temp_name(top.name) and stat.S_ISREG(st.st_mode):
                files.append(("own" if top.name in OWN_ROOT_FILES else "foreign", top.name, _fs.disk_bytes(st)))
            continue
        if top.name == QUARANTINE:
            files += [("quarantined", os.path.relpath(path, root), size) for _, size, path in quarantined_files(root)]
            continue
        if not valid_partition(top.name):
            files += [("foreign", rel, size) for rel, size in _walk_files(root, top.path)]
            continue
        found = [(d, _fs.lstat(d.path)) for d in _fs.scandir(top.path)]
        ours = partition_ok(top.name)
        names = {d.name for d, st in found if st is not None}
        stems = {d.name[: -len(ENTRY_SUFFIX)] for d, st in found
                 if st is not None and ours and is_store_entry(d.name, names, path=d.path)}
        for d, st in found:
            if st is None or is_temp_name(d.name):
                continue
            rel = f"{top.name}/{d.name}"
            if stat.S_ISDIR(st.st_mode):
                files += [("foreign", r, size) for r, size in _walk_files(root, d.path)]
            elif not stat.S_ISREG(st.st_mode):
                continue
            elif not ours:
                files.append(("foreign", rel, _fs.disk_bytes(st)))
            elif d.name.endswith(ENTRY_SUFFIX):
                kind = "entry" if d.name[: -len(ENTRY_SUFFIX)] in stems else "foreign"
                files.append((kind, rel, _fs.disk_bytes(st)))
            elif d.name.endswith(USED_SUFFIX):
                kind = "entry" if d.name[: -len(USED_SUFFIX)] in stems else "own"
                files.append((kind, rel, _fs.disk_bytes(st)))
            else:
                files.append(("own" if d.name == PARTITION_INFO else "foreign", rel, _fs.disk_bytes(st)))
    return files


def _walk_files(root: Path, path: str) -> list[tuple[str, int]]:
    """(path relative to root, disk bytes) of every regular file under ``path``, as :func:`_walk_bytes` counts."""
    found = []
    for dirpath, _, names in os.walk(path):  # os.walk does not enter links to folders
        for name in names:
            full = os.path.join(dirpath, name)
            st = _fs.lstat(full)
            if st is not None and stat.S_ISREG(st.st_mode):
                found.append((os.path.relpath(full, root), _fs.disk_bytes(st)))
    return found


def _scan_partition(pdir: Path, result: Scan, now: float, candidates: bool = True) -> None:
    """Count the folder's files into ``result``; with ``candidates`` (a partition) also list its entries and stale
    temps. Counted alike either way: regular files and subfolders, never temps."""
    entries: dict[str, tuple[Path, os.stat_result]] = {}
    used: dict[str, os.stat_result] = {}
    found = _fs.scandir(pdir)
    names = {d.name for d in found}
    for d in found:
        st = _fs.lstat(d.path)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            result.total += _walk_bytes(d.path)  # not ours, but it holds bytes: keep the cap honest
            continue
        name = d.name
        if is_temp_name(name):
            if candidates and is_stale_temp(name, st, now):
                result.temps.append((st.st_mtime, _fs.disk_bytes(st), Path(d.path)))
            continue
        if candidates and is_store_entry(name, names, path=d.path):
            # Any kind of file under an entry's name is evictable (a planted FIFO or link is removed).
            entries[name[: -len(ENTRY_SUFFIX)]] = (Path(d.path), st)
            if stat.S_ISREG(st.st_mode):
                result.total += _fs.disk_bytes(st)
        elif stat.S_ISREG(st.st_mode):
            result.total += _fs.disk_bytes(st)
            if name.endswith(USED_SUFFIX):
                used[name[: -len(USED_SUFFIX)]] = st
    for stem, (path, st) in entries.items():
        u = used.get(stem)
        own = _fs.disk_bytes(st) if stat.S_ISREG(st.st_mode) else 0
        result.entries.append(Candidate(
            partition=pdir.name,
            path=path,
            size=own + (_fs.disk_bytes(u) if u else 0),
            entry_mtime=st.st_mtime,
            last_used=u.st_mtime if u else st.st_mtime,
        ))


def remove_file(root: Path, partition: str, name: str) -> bool:
    """Remove ``<root>/<partition>/<name>`` relative to folder descriptors (a link is removed, not followed)."""
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(validate_partition(partition), at=rfd) as pfd:
            return _fs.unlink_at(name, pfd)
    except (OSError, ValueError):
        return False


def remove_scanned(root: Path, path: Path) -> bool:
    """Remove a file found by :func:`scan` (an entry, .used, temp or quarantined file)."""
    if path.parent == root:  # a root-level temp
        try:
            with _fs.dir_fd(os.path.realpath(root)) as rfd:
                return _fs.unlink_at(path.name, rfd)
        except OSError:
            return False
    if path.parent.parent.name == QUARANTINE:
        return remove_quarantined(path, root)
    return remove_file(root, path.parent.name, path.name)


def remove_stale_temps(root: Path, partitions: list[str], older_than_s: float = STALE_TEMP_S) -> int:
    """Delete temps of writers that are gone (pid gone, or older than ``older_than_s``) in the root folder
    itself (e.g. a killed memo or module-record writer's ``.jaxlib_fingerprints.json.<pid>.<rand>.tmp``)
    and in ``partitions``; returns how many."""
    removed = 0
    now = time.time()
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd:
            for d in _fs.scandir(rfd):
                if is_temp_name(d.name):
                    st = _fs.lstat(d.name, at=rfd)
                    if st is not None and is_stale_temp(d.name, st, now, older_than_s):
                        removed += _fs.unlink_at(d.name, rfd)
    except OSError:
        pass
    for part in partitions:
        for d in _fs.scandir(root / part):
            if not is_temp_name(d.name):
                continue
            st = _fs.lstat(d.path)
            if st is not None and is_stale_temp(d.name, st, now, older_than_s):
                removed += remove_file(root, part, d.name)
    return removed


def removable(path: Path, secret: bytes) -> bool:
    """Whether eviction and clear may remove this entry file: not when it is signed with another key (a folder
    shared by users or teams with different secrets: their entries are theirs). An entry whose header
    authenticates is this key's; a damaged or unreadable file at a store name in this tagged folder is one
    readers refuse and quarantine anyway, so it may go too. One read of the 52+H-byte prefix."""
    from .envelope import EntryError, ForeignKeyEntry, read_header_file

    try:
        read_header_file(path, secret)
    except ForeignKeyEntry:
        return False
    except (EntryError, OSError):
        return True
    return True


def clear_partition(root: Path, partition: str, notes: list[str] | None = None,
                    owned: Callable[[Path], bool] | None = None) -> int:
    """Remove the partition's entries (:func:`is_store_entry`: the store's entry names only, never a user's
    ``notes.xlk``), their ``.used`` marks and empty orphaned ones, temps, and ``partition.json`` when nothing else
    is left (then the folder); returns the number of entries removed. The caller has checked that ``partition``
    is a partition (:func:`is_partition`). A partition that is a link is left alone. A folder at an entry's name (or its
    ``.used``, or ``partition.json``) is removed if empty, else moved out of the way, never entered
    (:func:`_fs.clear_way`); the sentence saying so is appended to ``notes``. ``owned(path)``: whether an entry
    may be removed; entries it refuses (another key's) are left with their ``.used``."""
    removed = 0
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd:
            try:
                pfd = _fs.open_dir(validate_partition(partition), at=rfd)
            except OSError:
                return 0
            try:
                found = _fs.scandir(pfd)
                names = {d.name for d in found}
                entries = {d.name for d in found if is_store_entry(d.name, names, at=pfd)}
                stems = {n.removesuffix(ENTRY_SUFFIX) for n in entries}
                kept: set[str] = set()
                for d in sorted(found, key=lambda d: not d.name.endswith(ENTRY_SUFFIX)):
                    name = d.name  # entries first, so a kept entry's .used is known to be kept
                    if name in entries:
                        if d.is_dir(follow_symlinks=False):
                            _note(notes, partition, _fs.clear_way(name, pfd))
                            continue
                        if owned is not None and not owned(root / partition / name):
                            kept.add(name.removesuffix(ENTRY_SUFFIX))
                            continue
                        removed += _fs.unlink_at(name, pfd)
                    elif name.endswith(USED_SUFFIX) and not name.startswith("."):
                        stem = name.removesuffix(USED_SUFFIX)
                        if stem in kept:
                            continue
                        if stem in stems:  # its entry's mark (or a folder in its place)
                            if d.is_dir(follow_symlinks=False):
                                _note(notes, partition, _fs.clear_way(name, pfd))
                            else:
                                _fs.unlink_at(name, pfd)
                        elif stem + ENTRY_SUFFIX not in names and _empty_mark(name, pfd):
                            _fs.unlink_at(name, pfd)  # an orphaned mark: the store's are empty
                    elif name == PARTITION_INFO and d.is_dir(follow_symlinks=False):
                        _note(notes, partition, _fs.clear_way(name, pfd))
                    elif is_temp_name(name) and not d.is_dir(follow_symlinks=False):
                        _fs.unlink_at(name, pfd)
                # the description goes last, and only with nothing else left: a folder that still holds files
                # not the store's may be a user's own with a partition.json of theirs
                if {d.name for d in _fs.scandir(pfd)} == {PARTITION_INFO}:
                    _fs.unlink_at(PARTITION_INFO, pfd)
            finally:
                os.close(pfd)
            try:
                os.rmdir(partition, dir_fd=rfd)
            except OSError:
                pass  # a writer is using it, or foreign files remain
    except OSError:
        return removed
    return removed


def _note(notes: list[str] | None, partition: str, note: str | None) -> None:
    if note is not None and notes is not None:
        notes.append(f"{partition}/: {note}")


def _empty_mark(name: str, at: int) -> bool:
    """An empty regular file (what the store's ``.used`` marks are), or a planted link or FIFO at a mark's name
    (removed as a name, never followed)."""
    st = _fs.lstat(name, at=at)
    return st is not None and not stat.S_ISDIR(st.st_mode) and (not stat.S_ISREG(st.st_mode) or st.st_size == 0)


def touch_used(root: Path, entry: Path) -> str | None:
    """Mark ``entry`` as just used: set the mtime of its ``.used`` file, creating it if missing.

    Never follows a link and never fails. A ``.used`` name that is not a regular file, or a regular file
    with more than one hard link (its inode may be a user's file outside the cache), is replaced by a fresh
    file created relative to the partition folder's descriptor, so only a file the store alone holds is
    touched. A folder there is removed if empty, else moved out of the way (:func:`_fs.clear_way`);
    returns that sentence, else None.
    """
    used = entry.name.removesuffix(ENTRY_SUFFIX) + USED_SUFFIX
    note = None
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(entry.parent.name, at=rfd) as pfd:
            st = _fs.lstat(used, at=pfd)
            if st is not None and stat.S_ISDIR(st.st_mode):
                note = _fs.clear_way(used, pfd)
                st = _fs.lstat(used, at=pfd)
                if st is not None:
                    return note  # could not be moved; LRU falls back to the entry's mtime
            elif st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1):
                _fs.unlink_at(used, pfd)  # a planted link, FIFO or hard link: drop the name, never its target
                st = None
            if st is None:
                fd = os.open(used, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600,
                             dir_fd=pfd)
                os.close(fd)
            else:
                os.utime(used, dir_fd=pfd, follow_symlinks=False)
    except OSError:
        pass  # LRU bookkeeping must never fail a read
    return note


def evict_to(root: Path, budget: int, evicted: list, info: Callable[[str, Path], Any], *,
             replacing: Path | None = None, protect: Path | None = None,
             owned: Callable[[Path], bool] | None = None,
             is_partition: Callable[[str], bool] | None = None) -> int:
    """Delete stale temps and the quarantine, then least recently used entries, until the counted total is
    <= ``budget`` bytes. Call under the folder's lock.

    ``replacing`` is about to be overwritten, so its bytes don't count and it is not evicted; ``protect``
    is just not evicted. ``info(partition, path)`` describes an entry before it goes; those descriptions
    are appended to ``evicted``. ``owned(path)``: whether an entry may be evicted; one it refuses (another
    key's, in a folder shared with different secrets) is never evicted and not counted against this cap
    (checked lazily, in eviction order: one header read per candidate reached). ``is_partition(name)``: which
    folders are partitions (:func:`scan`); nothing in any other folder is evicted.
    Returns the total bytes remaining (as counted).
    """
    result = scan(root, is_partition=is_partition)
    for _, _, path in result.temps:  # never counted; a dead writer's leftovers go at once
        remove_scanned(root, path)
    total = result.total
    candidates = []
    for c in result.entries:
        if c.path == replacing:
            total -= c.size
        elif c.path != protect:
            candidates.append(c)
    if total <= budget:
        return total
    for _, size, path in sorted(result.quarantined):
        remove_scanned(root, path)  # a vanished file is gone either way
        total -= size
        if total <= budget:
            return total
    candidates.sort(key=lambda c: (c.last_used, c.entry_mtime))
    for c in candidates:
        if owned is not None and not owned(c.path):
            total -= c.size  # not ours to evict, nor to count
            if total <= budget:
                break
            continue
        described = info(c.partition, c.path)
        remove_scanned(root, c.path)
        remove_scanned(root, c.path.with_suffix(USED_SUFFIX))
        total -= c.size
        if described is not None:
            evicted.append(described)
        if total <= budget:
            break
    return total
