"""The ``file://`` backend of :class:`~xlakit.store.remote.RemoteStore`: a shared folder anyone may write.

Below the prefix nothing is trusted: ``v1``, partition folders and objects are opened relative to their
parent's descriptor with ``O_NOFOLLOW``, so a link planted at ``<prefix>/v1`` or ``<prefix>/v1/<partition>``
can never lead a read, an upload or a delete out of the prefix (a linked folder is refused for writes with
an OSError, skipped with a message in listings). Publish is create-only by ``link(2)`` of a fully written
temp ``.tmp-<unix seconds>-<pid>-<random>``; a writer killed mid-upload leaves one, which ``prune`` removes
once it is over an hour old.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat as stat_mod
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from . import _fs
from .base import ObjectRefused

__all__ = ["FileBackend", "Scan", "Skipped", "TEMP_PREFIX", "file_root", "temp_age", "is_upload_temp"]

TEMP_PREFIX = ".tmp-"
_TEMP_TIME = re.compile(r"^\.tmp-(\d{9,11})-")
_TEMP_NAME = re.compile(r"\.tmp-\d{9,11}-\d{1,10}-[0-9a-f]{32}")


def is_upload_temp(name: str) -> bool:
    """Whether ``name`` is exactly what :meth:`FileBackend.put` names its temps (``.tmp-<unix s>-<pid>-<uuid
    hex>``): only such names are ever removed as a killed writer's leftovers."""
    return bool(_TEMP_NAME.fullmatch(name))
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temp_age(name: str, mtime: float, now: float) -> float:
    """Age in seconds of an upload temp: from its name's creation time when it has one (the later of the two
    clocks is trusted less: the older reading wins), else from its modification time."""
    m = _TEMP_TIME.match(name)
    born = min(mtime, float(m.group(1))) if m else mtime
    return now - born


class Skipped(NamedTuple):
    """A name a listing left alone: ``name`` as listed (below the prefix, e.g. ``v1/part/junk``; untrusted text),
    ``why`` from a closed set of phrases (``"not an xlakit object name (left alone)"``...), so a listing of
    20,000 junk names can be summarised by ``why``."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name}: {self.why}"


@dataclass
class Scan:
    """One listing of ``<prefix>/v1``: ``objects`` (partition, key, size bytes, mtime) are regular files at
    object names; ``odd`` (partition, key, what) are other kinds at object names (links, FIFOs, folders);
    ``temps`` (partition, name, size bytes, mtime) are upload temps; ``skipped`` (:class:`Skipped`) are names
    left alone (linked folders, names xlakit never writes)."""

    objects: list[tuple[str, str, int, float]] = field(default_factory=list)
    odd: list[tuple[str, str, str]] = field(default_factory=list)
    temps: list[tuple[str, str, int, float]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _refused_write(name: str, e: OSError) -> OSError:
    return OSError(errno.ELOOP, f"{name} below the remote prefix is a link or not a folder; refused for "
                                f"writes ({e})")


def file_root(url: str, setting: str = "remote", storage_options: dict | None = None) -> str:
    """The absolute folder a ``file://`` URL names: ``file:///abs/folder`` or ``file://localhost/abs/folder``
    (RFC 8089).

    Raises:
      ValueError: ``file://host/...`` (a host: a typo for three slashes would write at the file system's root),
        the root itself (``file:///``, ``file://localhost``), or ``storage_options`` given (a folder takes none).
    """
    rest = url.partition("://")[2]
    host, _, tail = rest.partition("/")
    if host and host.lower() != "localhost":
        raise ValueError(f"{setting}={url[:200]!r}: a file:// URL names a folder with three slashes, "
                         f"file:///absolute/folder (file://{host[:80]}/... names a host {host[:80]!r}); for a "
                         "folder relative to here, give its absolute path")
    if storage_options:
        raise ValueError(f"{setting} {url[:200]!r} is a folder: it takes no remote options (got "
                         f"{sorted(storage_options)}); leave remote_options, --remote-options and "
                         "XLAKIT_CACHE_REMOTE_OPTIONS out")
    root = os.path.abspath("/" + tail.lstrip("/"))
    if root == "/":
        raise ValueError(f"{setting}={url[:200]!r} names the file system's root: give the shared folder, "
                         "file:///shared/folder")
    return root


class FileBackend:
    """``file://``: paths are ``<root>/<rel>``; every name below ``root`` is reached without following a link."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def _parts(self, path: str) -> list[str]:
        rel = path[len(self.root):].strip("/")
        return rel.split("/") if rel else []

    def _root_fd(self, create: bool = False) -> int:
        if create:
            os.makedirs(self.root, exist_ok=True)
        # the prefix itself is the user's choice and may be reached through a link; nothing below it is
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))

    def _folder(self, parts: list[str], create: bool = False) -> int:
        """Descriptor of the folder ``root/parts...``. Raises FileNotFoundError, ObjectRefused (a link)."""
        fd = self._root_fd(create)
        for name in parts:
            try:
                if create:
                    try:
                        os.mkdir(name, dir_fd=fd)
                    except FileExistsError:
                        pass
                nxt = _fs.open_dir(name, at=fd)
            except (ObjectRefused, NotADirectoryError) as e:
                os.close(fd)
                if create:
                    raise _refused_write(name, e) from None
                raise ObjectRefused(f"{name} below the remote prefix is a link or not a folder; refused") from None
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            fd = nxt
        return fd

    @contextlib.contextmanager
    def _parent(self, path: str) -> Iterator[tuple[int, str] | None]:
        """``(folder descriptor, object name)`` for reading ``path``, or None when its folder is absent;
        an absent object inside reads as None too. The descriptor is closed on exit."""
        parts = self._parts(path)
        try:
            fd = self._folder(parts[:-1])
        except FileNotFoundError:
            yield None
            return
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def get(self, path: str, max_bytes: int) -> bytes | None:
        with self._parent(path) as found:
            if found is None:
                return None
            fd, name = found
            try:
                return _fs.read_bounded(name, max_bytes, at=fd)[0]
            except FileNotFoundError:
                return None
            except IsADirectoryError:
                raise ObjectRefused("the object is a folder, not a regular file") from None
            except ObjectRefused as e:
                if "symlink" in e.reason:
                    raise ObjectRefused("the object is a symbolic link") from None
                if "bound" in e.reason:
                    raise ObjectRefused(f"object is over the {max_bytes}-byte bound") from None
                raise ObjectRefused("the object is not a regular file") from None

    def peek(self, path: str, n: int) -> bytes | None:
        """The first ``n`` bytes of a regular object (None if absent). Raises ObjectRefused, OSError."""
        return self.get_range(path, 0, n)

    def get_range(self, path: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of a regular object (fewer at its end; None if absent). Raises ObjectRefused,
        OSError."""
        with self._parent(path) as found:
            if found is None:
                return None
            fd, name = found
            try:
                with _fs.open_regular(name, at=fd) as f:
                    f.seek(start)
                    return f.read(max(0, end - start))
            except FileNotFoundError:
                return None

    def put(self, path: str, blob: bytes) -> bool:
        parts = self._parts(path)
        fd = self._folder(parts[:-1], create=True)
        tmp = f"{TEMP_PREFIX}{int(time.time())}-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            out = os.open(tmp, _CREATE, 0o644, dir_fd=fd)
            try:
                with os.fdopen(out, "wb") as f:
                    f.write(blob)
                    f.flush()
                    os.fsync(f.fileno())
                # atomic and create-only: EEXIST when someone else published first
                os.link(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                return True
            except FileExistsError:
                return False
            finally:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)

    def delete(self, path: str) -> bool:
        """Remove the name itself (a link, never its target; a folder only if empty). True if it existed.
        Raises OSError for a folder with files in it (left in place)."""
        parts = self._parts(path)
        try:
            fd = self._folder(parts[:-1])
        except FileNotFoundError:
            return False
        try:
            st = _fs.lstat(parts[-1], at=fd)
            if st is None:
                return False
            if stat_mod.S_ISDIR(st.st_mode):
                try:
                    os.rmdir(parts[-1], dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise OSError(e.errno, "a folder with files in it at an object name; left in place") from None
                    raise
                return True
            os.unlink(parts[-1], dir_fd=fd)  # unlink never follows a link
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)

    def info(self, path: str) -> tuple[int, float] | None:
        parts = self._parts(path)
        try:
            fd = self._folder(parts[:-1])
        except (FileNotFoundError, ObjectRefused):
            return None
        try:
            st = _fs.lstat(parts[-1], at=fd)
        finally:
            os.close(fd)
        return (st.st_size, st.st_mtime) if st is not None and stat_mod.S_ISREG(st.st_mode) else None

    def scan(self, layout: str, partition: str | None, valid_partition, valid_key) -> Scan:
        """One listing of ``root/layout`` (or one partition of it). Raises NotADirectoryError when the prefix
        or ``layout`` is not a folder, OSError for the medium."""
        out = Scan()
        try:
            top = self._root_fd()
        except FileNotFoundError:
            parent = os.path.dirname(self.root.rstrip("/"))
            if parent and not os.path.isdir(parent):  # file:///nonexistent/x: a missing mount or a typo, not empty
                raise FileNotFoundError(errno.ENOENT, f"the folder {parent} above the remote prefix does not "
                                                      "exist") from None
            return out
        except NotADirectoryError:
            raise NotADirectoryError(errno.ENOTDIR, f"the remote prefix {self.root} is a file, not a folder") from None
        try:
            try:
                v1 = _fs.open_dir(layout, at=top)
            except FileNotFoundError:
                return out
            except (ObjectRefused, NotADirectoryError):
                st = _fs.lstat(layout, at=top)
                what = "a symbolic link" if st is not None and stat_mod.S_ISLNK(st.st_mode) else "a file"
                raise NotADirectoryError(errno.ENOTDIR, f"{self.root}/{layout} is {what}, not a folder; nothing "
                                                        "below it is read or deleted") from None
        finally:
            os.close(top)
        try:
            names = [partition] if partition is not None else sorted(e.name for e in _fs.scandir(v1))
            for part in names:
                if not valid_partition(part):
                    out.skipped.append(Skipped(f"{layout}/{part}", "not an xlakit partition name (left alone)"))
                    continue
                try:
                    pfd = _fs.open_dir(part, at=v1)
                except FileNotFoundError:
                    continue
                except (ObjectRefused, NotADirectoryError):
                    out.skipped.append(Skipped(f"{layout}/{part}", "a link or not a folder (skipped, never followed)"))
                    continue
                try:
                    self._scan_partition(pfd, f"{layout}/{part}", part, out, valid_key)
                finally:
                    os.close(pfd)
        finally:
            os.close(v1)
        return out

    def _scan_partition(self, pfd: int, where: str, part: str, out: Scan, valid_key) -> None:
        for entry in sorted(_fs.scandir(pfd), key=lambda d: d.name):
            st = _fs.lstat(entry.name, at=pfd)
            if st is None:
                continue
            if entry.name.startswith(TEMP_PREFIX):
                if stat_mod.S_ISREG(st.st_mode):
                    out.temps.append((part, entry.name, st.st_size, st.st_mtime))
                continue
            if not valid_key(entry.name):
                out.skipped.append(Skipped(f"{where}/{entry.name}", "not an xlakit object name (left alone)"))
            elif stat_mod.S_ISREG(st.st_mode):
                out.objects.append((part, entry.name, st.st_size, st.st_mtime))
            else:
                out.odd.append((part, entry.name, _fs._kind(st.st_mode)))

    def remove_temp(self, partition: str, name: str) -> bool:
        """Delete one upload temp of ``partition`` (never through a link). True if removed."""
        try:
            fd = self._folder(["v1", partition])
        except (FileNotFoundError, ObjectRefused):
            return False
        try:
            return _fs.unlink_at(name, at=fd)
        finally:
            os.close(fd)

