"""Which folders and files in a cache folder are the store's: partitions and their entries.

Eviction, ``verify``'s quarantine and ``clear`` act only on these (:mod:`.evict`, :class:`~xlakit.store.LocalStore`):
files that are the store's entries (:func:`is_store_entry`) inside partitions (:func:`is_partition`). A user's own
folder beside the partitions (``logs/`` holding a ``notes.xlk``, or even a file named exactly like an entry) is
not a partition, and nothing in it is ever removed, evicted or quarantined; a ``notes.xlk`` of the user's inside a
partition is no entry, and stays too. Reads only; never follows a link.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from . import _fs
from .layout import (
    ENTRY_SUFFIX,
    QUARANTINE,
    USED_SUFFIX,
    file_stem,
    is_environment_partition,
    valid_partition,
    validate_partition,
)

__all__ = ["PROOF_READS", "is_entry_name", "is_partition", "is_store_entry", "is_store_name", "left_alone",
           "store_entries"]

_MAX_STEM = 150

# What xlakit's cache and bundles name their entries: file_stem("<program>-<64 hex>") (a bundle's program at a batch
# size adds "-b<n>") + ".xlk", or, for a key over 150 characters, its first 80 characters + "-" + 16 hex.
_ENTRY_FULL = re.compile(r"[A-Za-z0-9_.-]*-[0-9a-f]{64}(?:-b[0-9]+)?", re.ASCII)
_ENTRY_SHORT = re.compile(r"[A-Za-z0-9_.-]{80}-[0-9a-f]{16}", re.ASCII)
# Any stem file_stem() produces (1-150 characters of [A-Za-z0-9_.-], not starting with "."): what LocalStore.put
# writes for a key of the caller's choosing
_STORE_STEM = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,149}", re.ASCII)


def is_entry_name(name: str) -> bool:
    """Whether ``name`` is exactly an entry file name xlakit's cache or a bundle writes: ``<program>-<64 hex>.xlk``
    (``-b<n>`` after the digest for a bundle's program at a batch size) or, for a key over 150 characters,
    ``<its first 80 characters>-<16 hex>.xlk`` (:func:`file_stem`). ``notes.xlk`` or ``other.xlk`` is not."""
    if not isinstance(name, str) or not name.endswith(ENTRY_SUFFIX) or name.startswith("."):
        return False
    stem = name[: -len(ENTRY_SUFFIX)]
    return len(stem) <= _MAX_STEM and bool(_ENTRY_FULL.fullmatch(stem) or _ENTRY_SHORT.fullmatch(stem))


def is_store_name(name: str) -> bool:
    """Whether ``name`` is ``file_stem(key) + ".xlk"`` for some key: what :meth:`LocalStore.put` writes for a key
    of the caller's choosing (``k1.xlk`` too). A name alone of this kind is no proof that the store wrote the file:
    see :func:`is_store_entry`."""
    return (isinstance(name, str) and name.endswith(ENTRY_SUFFIX)
            and bool(_STORE_STEM.fullmatch(name[: -len(ENTRY_SUFFIX)])))


_MAGIC_STEM = b"XLAKIT\x00"  # the envelope's magic without its version byte (see envelope.py)


def is_store_entry(name: str, siblings: Collection[str], *, path: str | os.PathLike | None = None,
                   at: int | None = None) -> bool:
    """Whether the file ``name`` in a partition folder is one of the store's entries, which eviction, verify and
    clear may remove or quarantine: an entry name xlakit's cache and bundles write
    (:func:`is_entry_name`: ``<program>-<64 hex>.xlk``) or one ``file_stem`` gives a key of a
    :class:`~xlakit.store.LocalStore` caller's choosing (``k1.xlk``), with proof the store wrote it: its
    ``<stem>.used`` mark among ``siblings`` (the names in that folder), or xlakit's magic bytes at its start (read
    from ``path``, or ``name`` relative to the folder descriptor ``at``; never through a link). A user's
    ``notes.xlk`` holding their own text is neither, and is left alone."""
    if name.startswith(".") or not name.endswith(ENTRY_SUFFIX):
        return False
    if not is_entry_name(name) and not is_store_name(name):
        return False
    # the name alone is no proof: a user's own folder may hold a partition.json and a "run-<64 hex>.xlk" of theirs
    if name[: -len(ENTRY_SUFFIX)] + USED_SUFFIX in siblings:
        return True
    where, fd = (path, None) if path is not None else (name, at)
    try:
        with _fs.open_regular(where, at=fd) as f:
            if f.read(len(_MAGIC_STEM)) != _MAGIC_STEM:
                return False
    except OSError:
        return False
    return is_entry_name(name) or _names_itself(name, where, fd)


def _names_itself(name: str, where: Any, fd: int | None) -> bool:
    """Whether an envelope under a key's name of the caller's choosing (``k1.xlk``) names that key in its header:
    a copy of another entry renamed (``copy.xlk``) names another and is left alone. The header is read without
    its MAC (only to spare a file, never to remove one); one that cannot be read stays the store's (a damaged
    entry of its own is quarantined or evicted as before)."""
    from .envelope import read_header_file
    from .layout import file_stem

    try:
        key = read_header_file(where, None, at=fd).get("key")
    except Exception:  # noqa: BLE001 - damaged: the magic bytes are the proof
        return True
    return not isinstance(key, str) or not key or file_stem(key) + ENTRY_SUFFIX == name


#: How many of a folder's entry-named files :func:`is_partition` reads a header of, at most, for its proof.
PROOF_READS = 8


def is_partition(root: Path, name: str, secret: Callable[[], bytes] | None) -> bool:
    """Whether folder ``name`` of cache ``root`` is a partition, in which eviction, verify and clear may act on the
    store's entries: one made for an environment (:func:`~xlakit.store.layout.is_environment_partition`: the shape
    of its name, or a valid ``partition.json``), or one holding an entry whose header authenticates with
    ``secret()`` *and names this very partition and the key of its file name* (a partition a
    :class:`~xlakit.store.LocalStore` caller named, ``p2``; at most :data:`PROOF_READS` headers read; a copy of an
    entry dropped in another folder proves nothing; an OSError getting the secret: no such proof). A user's own
    folder beside the partitions (``logs/`` with a ``notes.xlk`` in it, even one named like an entry) is none of
    these, and is left alone. Never follows a link."""
    if is_environment_partition(root, name):
        return True
    if secret is None or not valid_partition(name):
        return False
    from .envelope import EntryError, read_header_file

    tried = 0
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(name, at=rfd) as pfd:
            for d in _fs.scandir(pfd):
                if not (is_store_name(d.name) and d.is_file(follow_symlinks=False)):
                    continue
                if tried >= PROOF_READS:
                    break
                tried += 1
                try:
                    header = read_header_file(d.name, secret(), at=pfd)
                except (EntryError, OSError):
                    continue
                key = header.get("key")
                if (header.get("partition") == name and isinstance(key, str) and key
                        and file_stem(key) + ENTRY_SUFFIX == d.name):
                    return True
    except OSError:
        return False
    return False


def store_entries(root: Path, partition: str) -> list[str]:
    """The names of the store's entries (:func:`is_store_entry`) in folder ``partition`` of ``root``, sorted; the
    caller has checked that it is a partition. Never follows a link."""
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(validate_partition(partition), at=rfd) as pfd:
            found = _fs.scandir(pfd)
            names = {d.name for d in found}
            return sorted(d.name for d in found if is_store_entry(d.name, names, at=pfd))
    except (OSError, ValueError):
        return []


def left_alone(root: Path, is_partition: Callable[[str], bool] | None = None) -> list[str]:
    """Files named like entries (``*.xlk``) that eviction, verify and clear leave alone, as paths relative to
    ``root``: those in a folder beside the partitions that is not one (``logs/notes.xlk``), and those in a partition
    that are not the store's entries (:func:`is_store_entry`). Sorted; one level deep, as the store's folders are;
    never follows a link."""
    partition_ok = is_partition or (lambda name: is_environment_partition(root, name))
    found = []
    for top in _fs.scandir(root):
        if top.name == QUARANTINE or not valid_partition(top.name) or not top.is_dir(follow_symlinks=False):
            continue
        names = [d.name for d in _fs.scandir(top.path) if d.name.endswith(ENTRY_SUFFIX) and not d.name.startswith(".")]
        if not names:
            continue
        if partition_ok(top.name):
            ours = set(store_entries(root, top.name))
            names = [n for n in names if n not in ours]
        found += [f"{top.name}/{n}" for n in names]
    return sorted(found)
