"""One way to replace a file so that no reader ever sees half of it: temp file beside it, fsync, rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Replace ``path`` with ``data`` (bytes, or str written as UTF-8) atomically; returns the path.

    The temp file is hidden (``.<name>.*.tmp``) in the same folder, so watchers and listings skip it and the
    rename stays on one filesystem. Raises OSError (folder missing, read-only, disk full) and leaves no temp
    file behind.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
