"""One way to publish a file so that no reader ever sees half of it: temp file beside it, fsync, rename."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on folders; durability is best effort
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes | str, *, replace: bool = True, durable: bool = False) -> Path:
    """Publish ``data`` (bytes, or str written as UTF-8) at ``path`` atomically; returns the path.

    The temp file is hidden, ``.<name>.<pid>.<random>.tmp``, mode 0600, in the same folder, so watchers and
    listings skip it, the rename stays on one filesystem, and a later cleanup can tell from the pid whether
    its writer is gone. ``replace=True`` replaces an existing file (rename); ``replace=False`` is
    create-only (hard link, which fails if the name exists, even as a link) and raises FileExistsError,
    leaving the existing file untouched. ``durable=True`` also fsyncs the folder after the rename.

    Raises OSError (folder missing, read-only, disk full) and leaves no temp file behind.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path, follow_symlinks=False)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                # No hard links on this filesystem: check, then rename (a race can still replace a file
                # created in between, which is the same program under the same key).
                if os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
                os.rename(tmp, path)
            else:
                os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        _fsync_dir(path.parent)
    return path
