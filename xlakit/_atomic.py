"""One way to publish a file so that no reader ever sees half of it: temp file beside it, fsync, rename."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from xlakit.store import _fs
from xlakit.store.base import ObjectRefused

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike, data: bytes | str, *, replace: bool = True, durable: bool = False) -> Path:
    """Publish ``data`` (bytes, or str written as UTF-8) at ``path`` atomically; returns the path.

    The temp file is hidden, ``.<name>.<pid>.<random>.tmp``, mode 0600, in the same folder, so watchers and
    listings skip it, the rename stays on one filesystem, and a later cleanup can tell from the pid whether
    its writer is gone. The folder is opened once and the temp, the rename and the mode change all work
    relative to that descriptor (see :func:`xlakit.store._fs.write_at`). ``replace=True`` replaces an
    existing file (rename); ``replace=False`` is create-only (hard link, which fails if the name exists,
    even as a link) and raises FileExistsError, leaving the existing file untouched. ``durable=True`` also
    fsyncs the folder after the rename.

    Raises ObjectRefused (an OSError) when ``path`` is a symlink (a link is never replaced nor written
    through: remove it first if it is yours), IsADirectoryError for a folder, OSError (folder missing,
    read-only, disk full); leaves no temp file behind.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    folder = path.parent
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = _fs.lstat(path.name, at=fd)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise ObjectRefused(f"{path} is a symlink; refused (write_atomic never replaces or follows a link)")
        _fs.write_at(fd, path.name, payload, replace=replace, durable=durable)
    finally:
        os.close(fd)
    return path
