"""The local folder's quarantine: where rejected entries go, never through a link, never over a file.

``quarantine/<partition>/<stem>.<unix_ms>.xlk`` holds the rejected entry (moved by hard link + unlink, or a
rename, both relative to folder descriptors opened without following links; when the quarantine is on another
filesystem, where neither works (``EXDEV``), by a copy — a new file, fsynced — and an unlink of the original) and
``<stem>.<unix_ms>.reason.txt`` says why (created with ``O_EXCL | O_NOFOLLOW``: a name that exists, even as
a planted symlink, is never written through; another free name is chosen). The note is written *before* the
entry moves, and removed again when the entry cannot follow, so no note is left without its entry. A quarantine
too full for the note is, on another filesystem, too full for the entry's copy as well: the entry stays in place,
said. On the same filesystem the entry still moves (a link or rename needs no space) and the note is missing,
never empty and never silently: the result says why (:attr:`Quarantined.note_problem`), and so do verify's
report and the reader's event. Clearing removes only these two kinds of names, one level deep, and never enters
a link.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from . import _fs
from .entries import MAX_ENTRY_BYTES
from .layout import (
    ENTRY_SUFFIX,
    QUARANTINE,
    REASON_SUFFIX,
    UNKNOWN_PARTITION,
    USED_SUFFIX,
    validate_partition,
)

__all__ = ["QuarantineError", "Quarantined", "clear_quarantine", "move_to_quarantine", "quarantine_file",
           "quarantine_reported", "quarantined_files"]


class QuarantineError(OSError):
    """A rejected entry could not be moved to the quarantine; the message says why and that it stayed in place
    (every read rejects it again until it is removed)."""

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass(frozen=True)
class Quarantined:
    """Where a rejected entry went: ``path``, its new name in the quarantine; ``note_problem``: None when its
    ``.reason.txt`` note was written beside it, else why it could not be (the entry moved without one)."""

    path: Path
    note_problem: str | None = None


def _write_note(name: str, at: int, text: str) -> tuple[bool, str | None]:
    """Create the note ``name`` (``O_EXCL | O_NOFOLLOW``, 0600) holding ``text``: ``(taken, problem)``. ``taken``:
    the name exists (even as a link: never written through), nothing written. ``problem``: why it could not be
    written whole (a full or read-only quarantine); a partial note is removed, never left empty."""
    data = text.encode("utf-8", errors="replace")
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=at)
    except FileExistsError:
        return True, None
    except OSError as e:
        return False, e.strerror or str(e)
    try:
        try:
            view = memoryview(data)
            while view:  # os.write may write part of it; ENOSPC comes from here on a full filesystem
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as e:
        _fs.unlink_at(name, at)
        return False, e.strerror or str(e)
    return False, None


def _subdir(name: str, at: int) -> int:
    """Descriptor of folder ``name`` in ``at``, created 0700 if missing; never a link."""
    try:
        os.mkdir(name, 0o700, dir_fd=at)
    except FileExistsError:
        pass
    return _fs.open_dir(name, at=at)


def _move(name: str, src: int, dest: str, dst: int) -> bool:
    """Move ``name`` to ``dest`` if ``dest`` is free; False if it is taken. Raises OSError when it cannot be moved
    (the original then stays where it was)."""
    try:
        os.link(name, dest, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if _fs.lstat(dest, at=dst) is not None:
            return False
        try:
            os.rename(name, dest, src_dir_fd=src, dst_dir_fd=dst)
        except OSError as e2:
            if e2.errno != errno.EXDEV:
                raise
            return _copy_across(name, src, dest, dst)
        return True
    os.unlink(name, dir_fd=src)
    return True


#: Largest file copied to a quarantine on another filesystem: the largest entry a read accepts
#: (:data:`xlakit.store.entries.MAX_ENTRY_BYTES`). A larger one was refused unread, so a copy keeps nothing worth
#: keeping, and it costs what it is long: a 64 GiB sparse file (free to plant) made one ``jax.jit`` lookup write
#: zeros until the quarantine's filesystem was full. It stays in place (told), and the next write replaces it.
MAX_COPY_BYTES = MAX_ENTRY_BYTES


def _copy_across(name: str, src: int, dest: str, dst: int) -> bool:
    """The quarantine is on another filesystem (neither a link nor a rename crosses one): copy the regular file
    ``name`` into a new ``dest`` (``O_EXCL | O_NOFOLLOW``, 0600), fsync it, then unlink ``name``. False if
    ``dest`` is taken. Raises OSError (the partial copy removed, the original in place) when the copy fails (the
    quarantine's filesystem full or read-only), ``name`` is not a regular file (a link or FIFO is never
    followed or opened for reading), or it is (or grows while copied) over :data:`MAX_COPY_BYTES`."""
    fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=src)
    try:
        st = os.fstat(fin)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EXDEV, f"{name} is {_fs._kind(st.st_mode)}: it cannot be copied to a quarantine on "
                                       "another filesystem")
        if st.st_size > MAX_COPY_BYTES:
            raise OSError(errno.EFBIG, f"{name} is {st.st_size} bytes, over the {MAX_COPY_BYTES}-byte bound of a copy "
                                       "to a quarantine on another filesystem")
        try:
            fout = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst)
        except FileExistsError:
            return False
        try:
            with os.fdopen(os.dup(fin), "rb") as r, os.fdopen(fout, "wb") as w:
                copied = 0
                while chunk := r.read(1 << 20):
                    copied += len(chunk)
                    if copied > MAX_COPY_BYTES:  # it grows while copied
                        raise OSError(errno.EFBIG, f"{name} grew past the {MAX_COPY_BYTES}-byte bound while copied")
                    w.write(chunk)
                w.flush()
                os.fsync(w.fileno())
        except OSError:
            _fs.unlink_at(dest, dst)
            raise
    finally:
        os.close(fin)
    os.unlink(name, dir_fd=src)
    return True


def move_to_quarantine(root: Path, partition: str, name: str, reason: str,
                       identity: tuple[int, int] | None = None) -> Quarantined | None:
    """Move ``<root>/<partition>/<name>`` (an entry file) to the quarantine with a reason note written first;
    where it went (:class:`Quarantined`: its ``note_problem`` says why the note is missing, when it is), or None
    when the file is gone or is not the one read (``identity``: (st_dev, st_ino); a writer may have replaced a bad
    entry with a good one since it was read).

    Raises:
      QuarantineError: it could not be moved (the message says why: a read-only folder, a full quarantine on
        another filesystem, a link or FIFO that cannot cross filesystems); it stays where it was, its note removed.
    """
    try:
        part = validate_partition(partition)
    except ValueError as e:
        raise QuarantineError(errno.EINVAL, f"{e}; left in place") from None
    stem = name.removesuffix(ENTRY_SUFFIX)
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(part, at=rfd) as pfd:
            st = _fs.lstat(name, at=pfd)
            if st is None or (identity is not None and (st.st_dev, st.st_ino) != identity):
                raise FileNotFoundError(errno.ENOENT, "gone or replaced since it was read", name)
            qfd = _subdir(QUARANTINE, rfd)
            try:
                qpfd = _subdir(part if part else UNKNOWN_PARTITION, qfd)
            finally:
                os.close(qfd)
            try:
                base = f"{stem}.{int(time.time() * 1000)}"
                when = time.strftime('%Y-%m-%dT%H:%M:%S%z')
                note = f"{reason}\noriginal: {root / part / name}\nquarantined: {when}\n"
                for attempt in range(8):
                    candidate = base if attempt == 0 else f"{base}-{secrets.token_hex(4)}"
                    if _fs.lstat(candidate + REASON_SUFFIX, at=qpfd) is not None:
                        continue  # something holds the note's name: never write through it
                    taken, note_problem = _write_note(candidate + REASON_SUFFIX, qpfd, note)
                    if taken:
                        continue
                    try:
                        moved = _move(name, pfd, candidate + ENTRY_SUFFIX, qpfd)
                    except OSError:
                        _fs.unlink_at(candidate + REASON_SUFFIX, qpfd)  # no note without its entry
                        raise
                    if moved:
                        break
                    _fs.unlink_at(candidate + REASON_SUFFIX, qpfd)
                else:
                    raise QuarantineError(errno.EEXIST, "no free name in the quarantine after 8 tries; left in place")
                _fs.unlink_at(stem + USED_SUFFIX, pfd)
            finally:
                os.close(qpfd)
    except FileNotFoundError:
        return None
    except QuarantineError:
        raise
    except OSError as e:
        why = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.ELOOP) and os.path.islink(root / QUARANTINE):
            why = "it is a symbolic link, which xlakit never follows there; make it a real folder"
        raise QuarantineError(e.errno or errno.EIO, f"the quarantine {root / QUARANTINE} could not take it "
                              f"({why}); left in place, and every read rejects it again until it is "
                              "removed (xlakit cache clear, or delete the file)") from None
    return Quarantined(root / QUARANTINE / part / (candidate + ENTRY_SUFFIX), note_problem)


def quarantine_file(root: Path, partition: str, name: str, reason: str,
                    identity: tuple[int, int] | None = None) -> Quarantined | None:
    """:func:`move_to_quarantine`, or None when the file was gone, changed, or could not be moved. Never raises
    OSError."""
    try:
        return move_to_quarantine(root, partition, name, reason, identity)
    except OSError:
        return None


#: How :func:`quarantine_reported` marks an entry that moved without its reason note.
NOTE_MISSING = " [quarantined without its reason note: "


def quarantine_reported(root: Path, partition: str, name: str, problem: str,
                        identity: tuple[int, int] | None = None) -> str:
    """Quarantine a file ``verify`` rejected for ``problem``; ``problem`` as it stands then: unchanged when the
    file moved with its note (or was gone meanwhile), ending ``" [not quarantined: <why>]"`` when it stayed in
    place, ``" [quarantined without its reason note: <why>]"`` when it moved but its note could not be written."""
    try:
        moved = move_to_quarantine(root, partition, name, problem, identity)
    except QuarantineError as e:
        return f"{problem} [not quarantined: {e}]"
    if moved is not None and moved.note_problem:
        return f"{problem}{NOTE_MISSING}{moved.note_problem}]"
    return problem


def _own_name(name: str) -> bool:
    return name.endswith((ENTRY_SUFFIX, REASON_SUFFIX)) and not name.startswith(".")


def quarantined_files(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, disk bytes, path) of every regular quarantined file the store produces. Never enters a link."""
    found: list[tuple[float, int, Path]] = []
    qroot = root / QUARANTINE
    st = _fs.lstat(qroot)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return found
    for d in _fs.scandir(qroot):
        if not d.is_dir(follow_symlinks=False):
            continue
        for f in _fs.scandir(d.path):
            fst = _fs.lstat(f.path)
            if fst is not None and stat.S_ISREG(fst.st_mode) and _own_name(f.name):
                found.append((fst.st_mtime, _fs.disk_bytes(fst), Path(f.path)))
    return found


def remove_quarantined(path: Path, root: Path) -> bool:
    """Remove one quarantined file found by :func:`quarantined_files`, relative to folder descriptors."""
    try:
        with _fs.dir_fd(os.path.realpath(root)) as rfd, _fs.dir_fd(QUARANTINE, at=rfd) as qfd, \
                _fs.dir_fd(path.parent.name, at=qfd) as pfd:
            return _fs.unlink_at(path.name, pfd)
    except OSError:
        return False


def clear_quarantine(root: Path) -> int:
    """Remove the quarantined entries and notes (only those names), then the empty folders; returns how many
    entries were removed. A ``quarantine`` that is a link is removed as a link, its target untouched."""
    removed = 0
    try:
        rfd = _fs.open_dir(os.path.realpath(root))
    except OSError:
        return 0
    try:
        st = _fs.lstat(QUARANTINE, at=rfd)
        if st is None:
            return 0
        if not stat.S_ISDIR(st.st_mode):
            if stat.S_ISLNK(st.st_mode):
                _fs.unlink_at(QUARANTINE, rfd)  # a planted link: drop the link, never its target
            return 0
        with _fs.dir_fd(QUARANTINE, at=rfd) as qfd:
            for d in _fs.scandir(qfd):
                if not d.is_dir(follow_symlinks=False):
                    continue
                try:
                    with _fs.dir_fd(d.name, at=qfd) as pfd:
                        for f in _fs.scandir(pfd):
                            if _own_name(f.name) and _fs.unlink_at(f.name, pfd):
                                removed += f.name.endswith(ENTRY_SUFFIX)
                except OSError:
                    continue
                try:
                    os.rmdir(d.name, dir_fd=qfd)
                except OSError:
                    pass
        try:
            os.rmdir(QUARANTINE, dir_fd=rfd)
        except OSError:
            pass
    finally:
        os.close(rfd)
    return removed
