"""File operations that never follow a link or block on a planted file (used by every local-folder module).

Inside a cache folder any name may have been replaced by a symlink, a FIFO, a device or a huge sparse file
by anyone who can write the folder. So files are opened with ``O_NOFOLLOW | O_NONBLOCK``, checked with
``fstat`` to be regular files, and size-bounded before a byte is read; folders are opened with
``O_DIRECTORY | O_NOFOLLOW`` and files inside them addressed relative to that descriptor (``dir_fd``), so a
folder swapped for a symlink between two calls is never entered.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .base import ObjectRefused

__all__ = [
    "clear_way",
    "dir_fd",
    "disk_bytes",
    "ensure_dir",
    "fsync_dir",
    "lstat",
    "make_dir_at",
    "open_dir",
    "open_regular",
    "read_bounded",
    "read_bounded_split",
    "scandir",
    "unlink_at",
    "write_at",
]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "an unknown kind of file"


def _open_fd(path: str | os.PathLike, *, at: int | None = None) -> int:
    """A read descriptor for a regular file at ``path``; raises ObjectRefused for a link or another kind."""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=at)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ObjectRefused(f"{os.fspath(path)} is a symlink; refused (a cache never holds links)") from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO on some systems
            raise ObjectRefused(f"{os.fspath(path)} is not a regular file; refused") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, "Is a directory (not an entry; left in place)", os.fspath(path))
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ObjectRefused(f"{os.fspath(path)} is {_kind(mode)}, not a regular file; refused")
    return fd


@contextmanager
def open_regular(path: str | os.PathLike, *, at: int | None = None) -> Iterator[BinaryIO]:
    """Open ``path`` for reading only if it is a regular file reached without a symlink.

    Never blocks (a FIFO is refused at once). Raises ObjectRefused (an OSError) for a symlink, FIFO,
    device, socket or folder; FileNotFoundError and other OSErrors as ``open`` does.
    """
    fd = _open_fd(path, at=at)
    with os.fdopen(fd, "rb") as f:
        yield f


def read_bounded(path: str | os.PathLike, max_bytes: int, *, at: int | None = None) -> tuple[bytes, os.stat_result]:
    """The whole regular file at ``path`` and its fstat, refusing it (ObjectRefused) if over ``max_bytes``.

    The size is checked from ``fstat`` before reading and again while reading (a file that grows is cut at
    the bound and refused), so /dev/zero links and sparse multi-GiB files cost nothing.
    """
    fd = _open_fd(path, at=at)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise ObjectRefused(f"{os.fspath(path)} is {st.st_size} bytes, over the {max_bytes}-byte bound; refused")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ObjectRefused(f"{os.fspath(path)} grew past the {max_bytes}-byte bound while read; refused")
    return data, st


#: :func:`read_bounded_split` asks where to cut a payload only when it is at least this long (bytes): finding out
#: authenticates the envelope's header once more (~0.03 ms per entry, measured), what copying 1 MiB costs.
MIN_CUT_BYTES = 1 << 20


def read_bounded_split(path: str | os.PathLike, max_bytes: int, probe: int, head_length: Callable[[bytes], int | None],
                       *, at: int | None = None, payload_cut: Callable[[bytes], int | None] | None = None
                       ) -> tuple[bytes, tuple[bytes, ...] | None, os.stat_result]:
    """:func:`read_bounded`, returning the file as ``(head, rest, fstat)``: its first ``head_length(first probe
    bytes)`` bytes, then every byte after them as a tuple of ``bytes`` objects — one, or two where
    ``payload_cut(head)`` names how many bytes the first takes (asked for a rest of :data:`MIN_CUT_BYTES` or more)
    — so that a caller gets each with no copy (slicing one object copies). ``head_length`` returning None (or a
    length the file does not reach) gives ``(whole file, None, fstat)``. Bounds and refusals are those of
    :func:`read_bounded`.
    """
    fd = _open_fd(path, at=at)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise ObjectRefused(f"{os.fspath(path)} is {st.st_size} bytes, over the {max_bytes}-byte bound; refused")
        first = f.read(probe)
        n = head_length(first) if len(first) == probe else None
        if n is None or not probe <= n <= st.st_size:
            f.seek(0)
            data, found = f.read(max_bytes + 1), None
        else:
            data = first + f.read(n - probe)
            cut = payload_cut(data) if payload_cut is not None and st.st_size - n >= MIN_CUT_BYTES else None
            parts: tuple[bytes, ...] = (f.read(cut),) if cut is not None and 0 < cut < st.st_size - n else ()
            done = len(data) + sum(len(p) for p in parts)
            # The size fstat gave, plus one byte: a file that grew since is read on to the bound (and refused
            # past it); the usual file is read in one piece with no over-allocation.
            rest = f.read(st.st_size - done + 1)
            if len(rest) > st.st_size - done:
                rest += f.read(max_bytes + 1 - done - len(rest))
            found = (*parts, rest)
    if len(data) + sum(len(p) for p in found or ()) > max_bytes:
        raise ObjectRefused(f"{os.fspath(path)} grew past the {max_bytes}-byte bound while read; refused")
    return data, found, st


def open_dir(path: str | os.PathLike, *, at: int | None = None) -> int:
    """A descriptor of the folder ``path`` (relative to ``at`` if given), never through a symlink.

    Raises NotADirectoryError/ObjectRefused when the name is a link or not a folder, FileNotFoundError.
    """
    try:
        return os.open(path, _DIR_FLAGS, dir_fd=at)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ObjectRefused(f"{os.fspath(path)} is a symlink, not a folder; refused") from None
        raise


@contextmanager
def dir_fd(path: str | os.PathLike, *, at: int | None = None) -> Iterator[int]:
    """:func:`open_dir` as a context manager that closes the descriptor."""
    fd = open_dir(path, at=at)
    try:
        yield fd
    finally:
        os.close(fd)


def lstat(path: str | os.PathLike, *, at: int | None = None) -> os.stat_result | None:
    """``os.lstat`` or None if the name is gone."""
    try:
        return os.stat(path, dir_fd=at, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def scandir(path: str | os.PathLike | int) -> list[os.DirEntry]:
    """Entries of a folder (a path or a folder descriptor); [] if it is gone or not a folder."""
    try:
        with os.scandir(path) as it:  # type: ignore[arg-type]  # typeshed splits the fd and path overloads
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []


def ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents with mode 0700 (existing folders keep theirs).

    The mode is set through a descriptor of each new folder opened without following a link (``fchmod``),
    never through a path, so a folder swapped for a link meanwhile never has its target's mode changed.
    Raises OSError; ObjectRefused when ``path`` exists as a symlink or another non-folder.
    """
    st = lstat(path)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return
        raise ObjectRefused(f"{path} is {_kind(st.st_mode)}, not a folder; refused")
    missing = []
    p = path
    while lstat(p) is None and p != p.parent:
        missing.append(p)
        p = p.parent
    os.makedirs(path, mode=0o700, exist_ok=True)
    for p in missing:
        try:
            fd = open_dir(p)
        except OSError:
            continue  # gone or swapped for a link meanwhile: never chmod through it
        try:
            os.fchmod(fd, 0o700)  # makedirs' mode is filtered by the umask
        finally:
            os.close(fd)
    st = lstat(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise ObjectRefused(f"{path} was replaced while being created; refused")


def make_dir_at(name: str, at: int) -> int:
    """A descriptor of folder ``name`` inside folder descriptor ``at``, created (mode 0700, set with
    ``fchmod``) if missing; never through a link. Raises ObjectRefused (a link or another kind of file
    holds the name), OSError."""
    try:
        os.mkdir(name, 0o700, dir_fd=at)
        created = True
    except FileExistsError:
        created = False
    fd = open_dir(name, at=at)
    if created:
        try:
            os.fchmod(fd, 0o700)
        except OSError:
            pass
    return fd


_PROC_FD = "/proc/self/fd"


def _replace_at(at: int, src: str, dst: str) -> None:
    """``os.replace`` of ``src`` by ``dst`` inside folder descriptor ``at``. On Linux through
    ``/proc/self/fd/<at>/``, a magic link that resolves to the opened folder itself (never re-walking its
    path), so it is as race-free as ``src_dir_fd``/``dst_dir_fd`` while keeping the plain two-path call
    that tools and tests which intercept ``os.replace`` expect; elsewhere with the descriptor arguments."""
    if os.path.isdir(f"{_PROC_FD}/{at}"):
        os.replace(f"{_PROC_FD}/{at}/{src}", f"{_PROC_FD}/{at}/{dst}")
    else:
        os.replace(src, dst, src_dir_fd=at, dst_dir_fd=at)


def write_at(at: int, name: str, data: bytes, *, replace: bool = True, durable: bool = False) -> None:
    """Publish ``data`` as file ``name`` in folder descriptor ``at``, atomically: a hidden temp
    ``.<name>.<pid>.<random>.tmp`` is created relative to ``at`` with ``O_EXCL | O_NOFOLLOW`` (mode 0600,
    set with ``fchmod``), written, fsynced, then renamed (``replace=True``) or hard-linked create-only
    (``replace=False``, FileExistsError if the name exists) relative to the same descriptor. No path is
    resolved after ``at`` was opened, so swapping a folder for a link meanwhile cannot redirect the write.

    A folder at ``name`` is never replaced (IsADirectoryError). ``durable=True`` fsyncs the folder after.
    Raises OSError and leaves no temp behind.
    """
    tmp = ""
    for _ in range(16):
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                         0o600, dir_fd=at)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temp name", name)
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            _replace_at(at, tmp, name)
        else:
            try:
                os.link(tmp, name, src_dir_fd=at, dst_dir_fd=at, follow_symlinks=False)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
                if lstat(name, at=at) is not None:  # no hard links here: check, then rename
                    raise FileExistsError(errno.EEXIST, "File exists", name) from None
                os.rename(tmp, name, src_dir_fd=at, dst_dir_fd=at)
            else:
                os.unlink(tmp, dir_fd=at)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=at)
        except OSError:
            pass
        raise
    if durable:
        try:
            os.fsync(at)
        except OSError:
            pass


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a folder so a rename in it survives a crash (best effort: some filesystems refuse)."""
    try:
        fd = open_dir(path)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unlink_at(name: str, at: int | None = None) -> bool:
    """Remove the file ``name`` (in folder descriptor ``at``); never follows a link (a link itself is removed).

    False if it was already gone or can't be removed.
    """
    try:
        os.unlink(name, dir_fd=at)
        return True
    except OSError:
        return False


def disk_bytes(st: os.stat_result) -> int:
    """Bytes a file occupies: the larger of its size and its allocated blocks (``st_blocks * 512``)."""
    return max(st.st_size, st.st_blocks * 512)


def clear_way(name: str, at: int) -> str | None:
    """Get a folder out of the way of a file the store owns (``.lock``, an entry, its ``.used``).

    If ``name`` (in folder descriptor ``at``) is a folder: remove it when empty, else rename the folder
    itself to ``.<name>.<unix_ms>.<rand>.in-the-way`` beside it (one leading dot; never entering it, never
    following a link).
    Returns a sentence saying what was done (for an event or a message), or None if ``name`` is not a
    folder. Never raises: a folder that can be neither removed nor renamed is reported as left in place.
    """
    st = lstat(name, at=at)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return None
    try:
        os.rmdir(name, dir_fd=at)
        return f"an empty folder at {name!r} (where the store keeps a file) was removed"
    except OSError:
        pass
    for _ in range(4):
        hidden = name if name.startswith(".") else "." + name
        moved = f"{hidden}.{int(time.time() * 1000)}.{secrets.token_hex(2)}.in-the-way"
        if lstat(moved, at=at) is not None:
            continue
        try:
            os.rename(name, moved, src_dir_fd=at, dst_dir_fd=at)
        except OSError as e:
            return f"a folder at {name!r} (where the store keeps a file) could not be moved: {e}; left in place"
        return f"a folder at {name!r} (where the store keeps a file) was moved out of the way to {moved!r}"
    return f"a folder at {name!r} (where the store keeps a file) could not be moved; left in place"
