"""The fsspec backend of :class:`~xlakit.store.remote.RemoteStore` (s3fs, gcsfs, memory): every request under one
deadline, every body under a byte bound.

Deadline: on an async filesystem (s3fs, gcsfs) each call is one coroutine on fsspec's I/O loop under
``asyncio.wait_for(timeout_s)``: connect, request, retries and the whole body count against it, and on expiry the
coroutine is cancelled (its connection closed), so nothing keeps reading after the caller gave up. botocore's own
``read_timeout`` is per ``recv``; a server that drips one byte a second never trips it, this does.

Byte bound: an S3 ranged GET is read from the response stream in chunks and stopped at the range's length,
whatever the server sends (a server that ignores ``Range`` and streams the whole object, or lies in
``Content-Length``, delivers at most the bytes asked for). Other filesystems are read with their own ranged
reads and cut to the range.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import threading
import weakref
from collections.abc import Iterator
from datetime import datetime

from ._remote_file import Scan, Skipped
from .base import DeadlineExceeded, ObjectRefused

__all__ = ["FsspecBackend", "DeadlineExceeded"]

_CHUNK = 1 << 20


def _mtime(info: dict) -> float:
    for field in ("LastModified", "mtime", "updated", "created", "time"):
        value = info.get(field)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return 0.0


def _precondition_failed(e: OSError) -> bool:
    text = str(e).lower()
    return e.errno == errno.EINVAL or "precondition" in text or "412" in text


def _unsatisfiable(e: OSError) -> bool:
    text = str(e).lower()
    return ("range" in text and "satisf" in text) or "invalidrange" in text


async def _s3_range(fs, path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an S3 object, never more than ``end - start`` read from the socket."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra)
    body = resp["Body"]
    try:
        want = end - start
        parts: list[bytes] = []
        got = 0
        while got < want:
            chunk = await body.read(min(_CHUNK, want - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    finally:
        body.close()  # unread bytes are dropped with the connection, never read


_QUIETED: weakref.WeakSet = weakref.WeakSet()


def _quiet_cancelled_writes(loop) -> None:
    """After a deadline cancels a request, aiohttp's body-writer task fails on the closed connection and, never
    awaited, is logged as "Task exception was never retrieved" with a traceback, later, in the user's stderr.
    Drop exactly that report on this loop (fsspec's I/O loop); every other one goes to the handler before."""
    if loop in _QUIETED:
        return
    previous = loop.get_exception_handler()

    def handler(lp, context) -> None:
        exc = context.get("exception")
        if ("never retrieved" in str(context.get("message", "")) and exc is not None
                and type(exc).__name__ in ("ClientConnectionResetError", "ClientOSError")):
            return
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    _QUIETED.add(loop)


class FsspecBackend:
    """Any fsspec filesystem whose ``pipe_file`` takes ``mode="create"`` (s3fs, gcsfs, memory).

    ``timeout_s``: the deadline of each call, seconds (None: the filesystem's own timeouts only)."""

    def __init__(self, fs, root: str = "", timeout_s: float | None = None) -> None:
        self.fs = fs
        self._root = root
        self.timeout_s = timeout_s
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        # S3 and GCS enforce create-only on the server; other fsspec filesystems check, then write: a lock
        # makes that atomic within this process at least (fsspec's memory filesystem is process-local anyway).
        self._server_checked = bool({"s3", "s3a", "gs", "gcs"} & set(protocols))
        self._s3 = bool({"s3", "s3a"} & set(protocols)) and hasattr(fs, "_call_s3")
        self._lock = threading.Lock()

    # -- one deadline per call -------------------------------------------------------------------------
    def _run(self, coro):
        """Run ``coro`` on the filesystem's loop within ``timeout_s``; cancel it and raise DeadlineExceeded
        after that. A library's own error that is not an OSError (aiohttp's ``ClientPayloadError`` for a body
        shorter than its ``Content-Length``, botocore's parse errors on garbage) becomes one, so callers see
        one kind of medium error."""
        try:
            if self.timeout_s is None:
                return asyncio.run_coroutine_threadsafe(coro, self.fs.loop).result()
            future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, self.timeout_s), self.fs.loop)
            try:
                return future.result(self.timeout_s + 1.0)
            except (TimeoutError, concurrent.futures.TimeoutError):
                _quiet_cancelled_writes(self.fs.loop)
                future.cancel()
                raise DeadlineExceeded(f"no complete answer from the remote store within {self.timeout_s:g} s") \
                    from None
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - the medium failed in a library's own words
            raise OSError(f"{type(e).__name__}: {e}"[:300]) from e

    def _call(self, name: str, *args, **kwargs):
        if getattr(self.fs, "async_impl", False) and getattr(self.fs, "loop", None) is not None:
            return self._run(getattr(self.fs, "_" + name)(*args, **kwargs))
        return getattr(self.fs, name)(*args, **kwargs)

    # -- reads -----------------------------------------------------------------------------------------
    def get_range(self, path: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (fewer at the object's end), None when absent. Raises ObjectRefused (a
        folder), OSError, DeadlineExceeded."""
        if end <= start:
            end = start + 1  # S3 has no empty range; one byte is read and dropped
            cut = 0
        else:
            cut = end - start
        try:
            if self._s3:
                data = self._run(_s3_range(self.fs, path, start, end))
            else:
                data = self._call("cat_file", path, start=start, end=end)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise ObjectRefused("the object is a folder, not an entry") from None
        except OSError as e:
            if _unsatisfiable(e):
                return b""  # S3 answers a range at or past the end (a zero-byte object) with 416
            raise
        return bytes(data[:cut])

    def get(self, path: str, max_bytes: int) -> bytes | None:
        data = self.get_range(path, 0, max_bytes + 1)
        if data is not None and len(data) > max_bytes:
            raise ObjectRefused(f"object is over the {max_bytes}-byte bound")
        return data

    def peek(self, path: str, n: int) -> bytes | None:
        return self.get_range(path, 0, n)

    # -- writes ----------------------------------------------------------------------------------------
    def put(self, path: str, blob: bytes) -> bool:
        try:
            if self._server_checked:
                self._call("pipe_file", path, blob, mode="create")
            else:
                with self._lock:
                    self._call("pipe_file", path, blob, mode="create")
            return True
        except FileExistsError:
            return False
        except OSError as e:
            # SeaweedFS: 412 without the Condition field -> OSError(EINVAL). Only "exists" if it does exist.
            if _precondition_failed(e) and self.info(path) is not None:
                return False
            raise

    def delete(self, path: str) -> bool:
        if self.info(path) is None:
            return False
        try:
            self._call("rm_file", path)
        except FileNotFoundError:
            return False
        return True

    def info(self, path: str) -> tuple[int, float] | None:
        try:
            self.fs.invalidate_cache(path)
            info = self._call("info", path)
        except FileNotFoundError:
            return None
        if info.get("type") not in (None, "file"):
            return None
        return int(info.get("size") or 0), _mtime(info)

    # -- listing ---------------------------------------------------------------------------------------
    def scan(self, layout: str, partition: str | None, valid_part, valid_key) -> Scan:
        out = Scan()
        base = f"{self._root}/{layout}" + (f"/{partition}" if partition is not None else "")
        for rel, size, mtime in self.find(base):
            parts = rel.split("/")
            if partition is not None:
                parts = [partition, *parts]
            if len(parts) == 2 and parts[1].startswith(".tmp-"):
                # this backend publishes in one request and writes no temps: such a name is someone else's
                out.skipped.append(Skipped(f"{layout}/{rel}", "named like an upload temp, which xlakit writes only "
                                           "to file:// (left alone)"))
            elif len(parts) != 2 or not valid_part(parts[0]) or not valid_key(parts[1]):
                out.skipped.append(Skipped(f"{layout}/{rel}", "not an xlakit object name (left alone)"))
            else:
                out.objects.append((parts[0], parts[1], size, mtime))
        return out

    def _check_bucket(self) -> None:
        """Raise FileNotFoundError naming the bucket when the root's bucket does not exist (S3, GCS: a mistyped
        bucket read as an empty cache, "Deleted 0 objects"). A failed check says nothing: the listing stands."""
        bucket = self._root.split("/", 1)[0]
        if not self._server_checked or not bucket:
            return
        try:
            self.fs.invalidate_cache(bucket)
            there = self._call("exists", bucket)
        except OSError:
            return
        if not there:
            raise FileNotFoundError(errno.ENOENT, f"the bucket {bucket!r} does not exist (or these credentials "
                                                  "cannot see it)")

    def find(self, base: str) -> Iterator[tuple[str, int, float]]:
        self.fs.invalidate_cache()
        try:
            found = self._call("find", base, detail=True)
        except FileNotFoundError:
            self._check_bucket()  # a prefix not written yet is an empty cache; a bucket that is not there is an error
            return
        prefix = base.rstrip("/") + "/"
        for name in sorted(found):
            info = found[name]
            rel = name[len(prefix):] if name.startswith(prefix) else None
            if rel is None or info.get("type", "file") != "file":
                continue
            yield rel, int(info.get("size") or 0), _mtime(info)
