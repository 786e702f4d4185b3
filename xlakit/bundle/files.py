"""Reading and writing a bundle's files without trusting the folder: bounded reads of regular files only
(JSON is then parsed by :mod:`xlakit.store.safejson`: bounded depth, finite numbers, a linear scan), temp
files that name their writer, and a ``.cache`` that is used only when it is a real folder.

A bundle may come from an archive or another user, so every file in it can be something else than it says:
a FIFO (an ``open`` + ``read`` blocks forever), a symlink to ``/dev/zero`` (read until memory runs out), a
huge sparse file, a folder, or JSON nested 100,000 deep (``RecursionError``) or holding ``1e999``. The
functions here turn each of those into an ``OSError``/``ValueError`` with a reason, at once. No JAX here.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from xlakit import _atomic
from xlakit.store.layout import pid_alive

__all__ = ["NotRegularFile", "MAX_MODULE_BYTES", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "STALE_TEMP_S",
           "read_regular", "write_atomic", "stale_temps", "remove_stale_temps", "cache_problem"]

# Bounds. A module holds StableHLO without weights (they are arguments), so even large models stay far
# below 1 GiB; manifests and records are a few kB (16 MiB leaves room for huge output trees). Depth 100
# is 20x a manifest's own depth and leaves room for deeply nested output pytrees.
MAX_MODULE_BYTES = 1 << 30
MAX_JSON_BYTES = 16 << 20
MAX_JSON_DEPTH = 100
# A temp file older than this (seconds) is stale even when its writer's pid is alive (pid reuse, another
# host on a shared folder); one whose writer is gone is stale at once.
STALE_TEMP_S = 3600.0

# Patterns, compiled on first use (by ``re``'s own cache): a load never needs them, only the clean-up does.
_TEMP = r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{6,}\.tmp$"
_LEGACY_TEMP = r"^\.(?P<name>.+)\.[A-Za-z0-9_]{6,}\.tmp$"


class NotRegularFile(OSError):
    """The path is a FIFO, device, socket, folder or dangling link, or is larger than its bound."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike, max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """All bytes of ``path`` if it is a regular file of at most ``max_bytes`` bytes; never blocks.

    The file is stat'ed before it is opened (a FIFO or device is never opened), opened non-blocking (and
    with ``O_NOFOLLOW`` when ``follow_symlinks`` is False), and ``fstat`` must again say regular file (the
    path may have been swapped in between). At most ``max_bytes + 1`` bytes are read.

    Raises:
      FileNotFoundError: missing. NotRegularFile: not a regular file, or larger than ``max_bytes``.
      OSError: unreadable (permissions, IO error).
    """
    path = os.fspath(path)
    st = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(f"{path} is {_kind(st.st_mode)}, not a regular file; it was not read")
    if st.st_size > max_bytes:
        raise NotRegularFile(f"{path} is {st.st_size} bytes, over the {max_bytes}-byte bound; it was not read")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path} is {_kind(st.st_mode)}, not a regular file; it was not read")
        # The size fstat gave plus one byte (to see a file that grew): the usual file comes in one read, with no
        # join (a copy of the whole module; 64 MB modules took 0.037 s more to join than to read).
        chunks, left, want = [], max_bytes + 1, min(max_bytes + 1, st.st_size + 1)
        while left > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            want = min(left, 1 << 24)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > max_bytes:
        raise NotRegularFile(f"{path} grew past the {max_bytes}-byte bound while being read; it was not used")
    return data


# -- temp files ------------------------------------------------------------------------------------------


def stale_temps(folder: str | os.PathLike[str], older_than_s: float = STALE_TEMP_S,
                now: float | None = None) -> list[Path]:
    """Temp files in ``folder`` (not below it) left by a killed writer: regular files named like
    :func:`xlakit._atomic.write_atomic` (``.<name>.<pid>.<random>.tmp``) whose writer pid is gone, or any
    ``.<name>.<random>.tmp`` older than ``older_than_s``
    seconds. Symlinks and other file kinds are never listed."""
    now = time.time() if now is None else now
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for e in entries:
        if not (e.name.startswith(".") and e.name.endswith(".tmp")):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        m = re.match(_TEMP, e.name)
        old = now - st.st_mtime > older_than_s
        if (m and not pid_alive(int(m.group("pid")))) or (old and (m or re.match(_LEGACY_TEMP, e.name))):
            found.append(Path(e.path))
    return sorted(found)


def remove_stale_temps(folder: str | os.PathLike[str], older_than_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove :func:`stale_temps` of ``folder``; returns those removed (unlink never follows a link)."""
    removed = []
    for p in stale_temps(folder, older_than_s):
        try:
            os.unlink(p)
            removed.append(p)
        except OSError:
            pass
    return removed


# -- .cache ----------------------------------------------------------------------------------------------

def cache_problem(cache_dir: str | os.PathLike, partition: str | None = None) -> str | None:
    """Why ``<bundle>/.cache`` (or its ``partition`` folder) must not be used, or None when it may.

    A ``.cache`` (or its partition or quarantine folder) that is a symlink may point at the user's own xlakit
    cache or any other folder: reconciling the module-hash record would delete its entries, stores would
    write into it, and quarantining a corrupt entry would move it there. So it is never followed; a missing
    folder is fine (it is created as a folder).
    """
    cache_dir = Path(cache_dir)
    checks = [cache_dir, cache_dir / "quarantine"]
    if partition is not None:
        checks += [cache_dir / partition, cache_dir / "quarantine" / partition]
    for p in checks:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            if p == cache_dir:
                return None
            continue
        except OSError as e:
            return f"{p} cannot be inspected ({e})"
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(p)
            except OSError:
                target = "?"
            return (f"{p} is a symlink (to {target}); it is never followed, so nothing there is read, written "
                    "or deleted. Replace it with a folder to keep compiled programs")
        if not stat.S_ISDIR(st.st_mode):
            return f"{p} is {_kind(st.st_mode)}, not a folder; it is not used"
    return None


def write_atomic(path: Path, data: bytes) -> None:
    """Publish a bundle file with :func:`xlakit._atomic.write_atomic` (hidden temp
    ``.<name>.<pid>.<random>.tmp`` that names its writer, fsync, rename), so a reader or watcher never sees
    half a file and a killed writer's temp is found later (:func:`xlakit.bundle.files.remove_stale_temps`).

    Two bundle rules on top: a symlink at ``path`` itself is removed and replaced by the file (its target is
    never written), and the file is made readable by others as ``open`` with mode 0644 and the process
    umask would (a bundle is shared; the store's entries are 0600). Raises OSError; leaves no temp behind
    unless the process is killed."""
    path = Path(path)
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    _atomic.write_atomic(path, data)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fchmod(fd, 0o644 & ~_umask())
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask, read without changing it (``/proc/self/status``); 0o022 where that is unknown."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
