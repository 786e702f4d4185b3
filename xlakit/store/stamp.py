"""A stat stamp: one digest over the stat of a set of paths, which changes when anything there changes.

For a folder, the stat changes when an entry is added, removed or renamed in it; for a file, when it is written,
replaced, or has its times or mode changed (``ctime`` moves on every inode change and cannot be set back).
A stamp can vouch only for stats older than one file-system timestamp tick when it was taken (a change within
the same tick can leave the mtime as it was), so a caller records a stamp only when ``newest`` is at least
:data:`SETTLE_NS` older than the moment it began reading what the stamp covers.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

__all__ = ["SETTLE_NS", "stat_stamp", "walked_paths"]

#: How much older than the start of a read every stat under a recorded stamp must be (FAT's tick is 2 s).
SETTLE_NS = 3_000_000_000


def stat_stamp(paths: Iterable[str]) -> tuple[str, int]:
    """``(SHA-256 hex over each path and its stat, newest mtime or ctime in ns since the epoch)``.

    The stat (``os.stat``, following links) covers device, inode, size, mtime and ctime; a path that cannot be
    stat'ed (missing) is stamped as missing, so its appearance changes the digest too. Never raises for a path.
    """
    total, newest = hashlib.sha256(), 0
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            total.update(f"{path}\0-\n".encode())
            continue
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
        total.update(f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return total.hexdigest(), newest


def walked_paths(walked: list[str], files: Iterable[str]) -> list[str]:
    """What a stamp of a walk covers, in a fixed order: the folders walked, then those of ``files`` that lie
    directly in one of them, sorted (so ``files`` may hold paths of other walks, which are left out)."""
    folders = set(walked)
    return [*walked, *sorted(p for p in files if os.path.dirname(p) in folders)]
