"""A :class:`~xlakit.store.base.Store` over a local (or network-mounted) folder: bytes by (partition, key).

Object ``(partition, key)`` is the file ``<root>/<partition>/<file_stem(key)>.xlk`` (see :mod:`.layout`).
Reads open the file with ``O_NOFOLLOW | O_NONBLOCK`` relative to the partition folder's descriptor (itself
opened without following a link), require a regular file, and refuse one over the byte bound before
reading; writes publish atomically with :func:`xlakit.store._fs.write_at` (create-only for ``put``): the root
is opened once, the partition folder opened (or created) relative to it with ``O_DIRECTORY | O_NOFOLLOW``,
and the temp file, its mode, its fsync and the rename all work relative to that descriptor, so a partition
folder swapped for a symlink mid-write is never written into.
Listing and stat never follow a link. Nothing here parses an envelope.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from . import _fs
from .base import ObjectRefused, ObjectStat
from .layout import (
    ENTRY_SUFFIX,
    adoption_problem,
    file_stem,
    has_tag,
    validate_partition,
    write_tag,
)

__all__ = ["FolderStore"]


class FolderStore:
    """Raw entries in ``root``; implements the :class:`~xlakit.store.base.Store` protocol.

    ``list`` reports each object's key as its file stem (keys longer than 150 characters are shortened in
    file names); the entry layer reads the real key from the authenticated header. Creating it creates
    nothing on disk; the first write creates the folder (0700) with its ``CACHEDIR.TAG``.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self._seen = threading.local()
        self._ready = False  # root created and tagged (or found holding foreign files) by this object
        self.displaced: list[str] = []  # what was done about folders found where the store keeps a file

    # -- names ------------------------------------------------------------------------------------------
    def note_displaced(self, where: str, note: str | None) -> None:
        """Remember (the last 100) sentences from :func:`xlakit.store._fs.clear_way`, prefixed by where."""
        if note is not None:
            del self.displaced[:-99]
            self.displaced.append(f"{where}: {note}")

    def path(self, partition: str, key: str) -> Path:
        """Where the object lives (whether or not it exists). Raises ValueError for a bad partition/key."""
        return self.root / validate_partition(partition) / (file_stem(key) + ENTRY_SUFFIX)

    def _root_fd(self) -> int:
        return _fs.open_dir(os.path.realpath(self.root))

    def _partition_fd(self, partition: str) -> int:
        """Descriptor of the partition folder; raises FileNotFoundError, ObjectRefused (a link)."""
        root = self._root_fd()
        try:
            return _fs.open_dir(validate_partition(partition), at=root)
        finally:
            os.close(root)

    def ensure_root(self) -> None:
        """Create the root folder (0700) and its CACHEDIR.TAG when it is new, holds only the layout's own root
        files and no partition, or is provably an xlakit cache (:func:`~xlakit.store.layout.adoption_problem`).

        A folder that holds other files is used without a tag (writes are not destructive), so clear/prune
        will refuse it. Raises OSError.
        """
        if self._ready and _fs.lstat(self.root) is not None:
            return
        fresh = _fs.lstat(self.root) is None
        if not self.root.is_dir():  # the root itself may be a link the user made; folders under it may not
            _fs.ensure_dir(self.root)
        if fresh or (not has_tag(self.root) and adoption_problem(self.root) in (None, "empty")):
            write_tag(self.root)
        self._ready = True

    def ensure_partition(self, partition: str) -> Path:
        """Create ``<root>/<partition>`` (0700) if missing; raises OSError, ObjectRefused if it is a link."""
        self.ensure_root()
        with _fs.dir_fd(os.path.realpath(self.root)) as rfd:
            os.close(_fs.make_dir_at(validate_partition(partition), rfd))
        return self.root / partition

    def write_file(self, partition: str, name: str, data: bytes, *, replace: bool = True) -> None:
        """Publish ``data`` as ``<root>/<partition>/<name>`` through folder descriptors (see the module
        docstring), creating the folders if missing. Raises FileExistsError (``replace=False`` and the name
        exists), ObjectRefused (the partition is a link), IsADirectoryError, OSError."""
        validate_partition(partition)
        for attempt in (0, 1):
            self.ensure_root()
            with _fs.dir_fd(os.path.realpath(self.root)) as rfd:
                pfd = _fs.make_dir_at(partition, rfd)
                try:
                    try:
                        _fs.write_at(pfd, name, data, replace=replace, durable=True)
                    except IsADirectoryError:
                        # A folder holds the name: get it out of the way (never entered), then write once more.
                        note = _fs.clear_way(name, pfd)
                        self.note_displaced(str(self.root / partition), note)
                        if note is None or "left in place" in note:
                            raise
                        _fs.write_at(pfd, name, data, replace=replace, durable=True)
                    return
                except FileNotFoundError:
                    if attempt:
                        raise  # clear() removed the empty partition folder just now: try once more
                finally:
                    os.close(pfd)

    # -- the Store contract -----------------------------------------------------------------------------
    def get(self, partition: str, key: str, max_bytes: int) -> bytes | None:
        """The object's bytes, or None when absent. Raises ObjectRefused (link, FIFO, device, folder, over
        ``max_bytes``), OSError for other read errors, ValueError for a bad partition name or empty key.

        A folder at the entry's name is removed if empty, else renamed to ``.<name>.<ms>.<rand>.in-the-way`` (see
        :func:`xlakit.store._fs.clear_way`); the ObjectRefused says which, and ``displaced`` records it.
        """
        found = self._read(partition, key, lambda name, pfd: _fs.read_bounded(name, max_bytes, at=pfd))
        return None if found is None else found[0]

    def get_split(self, partition: str, key: str, max_bytes: int, probe: int,
                  head_length: Callable[[bytes], int | None],
                  payload_cut: Callable[[bytes], int | None] | None = None
                  ) -> tuple[bytes, tuple[bytes, ...] | None] | None:
        """:meth:`get` as ``(head, rest)``: ``bytes`` objects read apart (:func:`xlakit.store._fs.read_bounded_split`),
        ``rest`` a tuple of one or (cut where ``payload_cut(head)`` says) two: the entry layer reads a payload apart
        from the envelope's head, so that a payload stored as it is reaches its reader with no copy; ``rest`` is
        None when ``head`` is the whole object. Raises as :meth:`get`."""
        found = self._read(partition, key, lambda name, pfd: _fs.read_bounded_split(
            name, max_bytes, probe, head_length, at=pfd, payload_cut=payload_cut))
        return None if found is None else found[:2]

    def _read(self, partition: str, key: str, read: Callable[[str, int], tuple]) -> tuple | None:
        """``read(file name, partition folder descriptor)`` of the object's file (its last item an fstat, which
        is remembered for the quarantine), or None when absent."""
        name = file_stem(key) + ENTRY_SUFFIX
        try:
            pfd = self._partition_fd(partition)
        except (FileNotFoundError, NotADirectoryError, ObjectRefused):
            return None  # no partition folder, or a link where it should be: never entered
        try:
            found = read(name, pfd)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            # A folder at an entry's name would fail every read and write forever: move it out of the way.
            note = _fs.clear_way(name, pfd) or "it is gone now"
            self.note_displaced(str(self.root / partition), note)
            raise ObjectRefused(f"{name} is a folder, not an entry: {note}") from None
        finally:
            os.close(pfd)
        self._remember(partition, key, found[-1])
        return found

    def _remember(self, partition: str, key: str, st: os.stat_result) -> None:
        seen = getattr(self._seen, "ids", None)
        if seen is None:
            seen = self._seen.ids = {}
        if len(seen) > 256:
            seen.clear()
        seen[(partition, key)] = (st.st_dev, st.st_ino)

    def last_read_identity(self, partition: str, key: str) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the file this thread last read for the object, if any."""
        return getattr(self._seen, "ids", {}).get((partition, key))

    def put(self, partition: str, key: str, blob: bytes) -> bool:
        """Create the object atomically; False (nothing written) if the name exists. Raises OSError."""
        try:
            self.write_file(partition, file_stem(key) + ENTRY_SUFFIX, blob, replace=False)
        except FileExistsError:
            return False
        return True

    def replace(self, partition: str, key: str, blob: bytes) -> None:
        """Publish the object atomically, replacing what is there (readers see old or new). Raises OSError."""
        self.write_file(partition, file_stem(key) + ENTRY_SUFFIX, blob)

    def delete(self, partition: str, key: str) -> bool:
        """Remove the object's file (a link there is removed, never followed); True if it existed."""
        name = file_stem(key) + ENTRY_SUFFIX
        try:
            pfd = self._partition_fd(partition)
        except (FileNotFoundError, NotADirectoryError, ObjectRefused):
            return False
        try:
            return _fs.unlink_at(name, pfd)
        finally:
            os.close(pfd)

    def stat(self, partition: str, key: str) -> ObjectStat | None:
        """Size and mtime of the object's file (not followed if a link), or None when absent."""
        try:
            pfd = self._partition_fd(partition)
        except (FileNotFoundError, NotADirectoryError, ObjectRefused):
            return None
        try:
            st = _fs.lstat(file_stem(key) + ENTRY_SUFFIX, at=pfd)
        finally:
            os.close(pfd)
        return None if st is None else ObjectStat(partition, key, st.st_size, st.st_mtime)

    def partitions(self) -> list[str]:
        """Names of the partition folders (real folders, not links), sorted."""
        names = []
        for d in _fs.scandir(self.root):
            try:
                validate_partition(d.name)
                if d.is_dir(follow_symlinks=False):
                    names.append(d.name)
            except (ValueError, OSError):
                continue
        return sorted(names)

    def list(self, partition: str | None = None) -> Iterator[ObjectStat]:
        """Every entry file (any kind of file named ``*.xlk``; readers refuse the non-regular ones), with
        its lstat size and mtime; ``key`` is the file stem."""
        parts = [validate_partition(partition)] if partition is not None else self.partitions()
        for part in parts:
            pdir = self.root / part
            st = _fs.lstat(pdir)
            if st is None or not stat.S_ISDIR(st.st_mode):
                continue
            for d in _fs.scandir(pdir):
                if d.name.endswith(ENTRY_SUFFIX) and not d.name.startswith("."):
                    fst = _fs.lstat(d.path)
                    if fst is not None:
                        yield ObjectStat(part, d.name[: -len(ENTRY_SUFFIX)], fst.st_size, fst.st_mtime)
