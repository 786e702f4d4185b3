"""A directory of envelopes, safe for many processes at once.

Layout under the root folder::

    <root>/
      .lock                               filelock, taken only to evict/prune/clear
      <partition>/                        one folder per environment partition
        partition.json                    environment description
        <file_stem>.xlk                   entries (see envelope.py)
        <file_stem>.used                  empty; its mtime is the entry's last use
        .<file_stem>.<pid>.<random>.tmp   a write in progress (or a killed writer's)
      quarantine/<partition>/
        <file_stem>.<unix_ms>.xlk         entries that failed verification
        <file_stem>.<unix_ms>.reason.txt  why

Writers publish with an atomic rename, so readers see a whole entry or none.
Eviction is least-recently-used by the ``.used`` mtime (falling back to the
entry's mtime), so reading never rewrites an entry. Folders are created 0700,
files 0600. IO problems never raise from :meth:`LocalStore.get` or
:meth:`LocalStore.put`; they are reported in the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import filelock
import platformdirs

from .envelope import EntryError, open_envelope, read_header_file, seal
from .secret import load_secret

__all__ = [
    "ENV_CACHE_DIR",
    "EntryInfo",
    "GetResult",
    "PutResult",
    "LocalStore",
    "resolve_root",
    "file_stem",
    "validate_partition",
]

ENV_CACHE_DIR = "XLAKIT_CACHE_DIR"
ENTRY_SUFFIX = ".xlk"
USED_SUFFIX = ".used"
TEMP_SUFFIX = ".tmp"
QUARANTINE = "quarantine"
PARTITION_INFO = "partition.json"
LOCK_NAME = ".lock"
STALE_TEMP_S = 3600.0

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_STEM = 150
_MAX_PARTITION = 200
# Entries occupy whole filesystem blocks; budgeting by this keeps total_bytes() under the cap.
_BLOCK = 4096


def resolve_root(path: str | os.PathLike | None = None) -> Path:
    """Cache root: ``path``, else env ``XLAKIT_CACHE_DIR``, else the user cache dir. Creates nothing."""
    return Path(path or os.environ.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("xlakit"))


def file_stem(key: str) -> str:
    """File name stem for ``key``: characters outside [A-Za-z0-9_.-] become "_";
    keys over 150 characters become their first 80 + "-" + sha256(key)[:16].

    A leading "." also becomes "_" (hidden names are temp files). Raises ValueError for "".
    """
    if not key:
        raise ValueError("empty key")
    stem = _SAFE.sub("_", key)
    if len(stem) > _MAX_STEM:
        stem = stem[:80] + "-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    if stem.startswith("."):
        stem = "_" + stem[1:]
    return stem


def validate_partition(name: str) -> str:
    """Return ``name`` if it is a usable partition folder name, else raise ValueError.

    Allowed: 1-200 characters of [A-Za-z0-9_.-], not starting with ".", not "quarantine".
    """
    if (
        not isinstance(name, str)
        or not name
        or len(name) > _MAX_PARTITION
        or _SAFE.search(name)
        or name.startswith(".")
        or name == QUARANTINE
    ):
        raise ValueError(
            f"invalid partition name {name!r}: use 1-{_MAX_PARTITION} characters of [A-Za-z0-9_.-], "
            f"not starting with '.', not {QUARANTINE!r}"
        )
    return name


def _disk_bytes(st: os.stat_result) -> int:
    return max(st.st_size, st.st_blocks * 512)


def _estimate_disk_bytes(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _fmt_bytes(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    if n >= 1_000:
        return f"{n / 1e3:.1f} kB"
    return f"{n} B"


def _os_reason(e: OSError) -> str:
    return f"OSError: {e}"


def _unlink(path: Path) -> bool:
    """Remove a file; False if it was already gone or can't be removed."""
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents with mode 0700 (existing folders keep theirs). Raises OSError."""
    if path.is_dir():
        return
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    os.makedirs(path, mode=0o700, exist_ok=True)
    for p in missing:
        try:
            os.chmod(p, 0o700)  # makedirs' mode is filtered by the umask
        except FileNotFoundError:
            pass


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on folders; durability is best effort
    finally:
        os.close(fd)


def _scandir(path: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _lstat(path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True)
class EntryInfo:
    """One row of a listing, from the header alone (not verified).

    size_bytes: on-disk bytes of the .xlk; created, last_used: unix seconds;
    compile_s: seconds. Unreadable entries have name None and header {"error": reason}.
    """

    partition: str
    key: str
    path: Path
    name: str | None
    size_bytes: int
    created: float | None
    last_used: float
    compile_s: float | None
    header: dict


@dataclass(frozen=True)
class PutResult:
    """Outcome of :meth:`LocalStore.put`. size_bytes: envelope bytes; reason: why not stored."""

    stored: bool
    path: Path | None
    size_bytes: int
    evicted: tuple[EntryInfo, ...]
    reason: str | None


@dataclass(frozen=True)
class GetResult:
    """Outcome of :meth:`LocalStore.get`.

    status: "hit" | "absent" | "corrupt" | "unauthenticated" | "mismatch" | "error".
    payload (decompressed bytes) is set only on a hit.
    """

    status: str
    header: dict | None
    payload: bytes | None
    reason: str | None
    path: Path | None
    quarantined_to: Path | None

    @property
    def hit(self) -> bool:
        return self.status == "hit"


@dataclass
class _Candidate:
    """An evictable entry as seen by a scan: stat data only, no header read."""

    partition: str
    path: Path
    size: int  # disk bytes of .xlk plus .used
    entry_mtime: float
    last_used: float


@dataclass
class _Scan:
    total: int
    entries: list[_Candidate]
    quarantined: list[tuple[float, int, Path]]  # (mtime, disk bytes, path)
    temps: list[tuple[float, int, Path]]


class LocalStore:
    """Entries in a local (or shared network) folder.

    Args:
        root: cache folder; see :func:`resolve_root`.
        max_bytes: cap on total_bytes(); None means unbounded.
        secret: HMAC secret; loaded lazily with load_secret(config_dir) if None.
        config_dir: where the secret file lives (see secret.py).
        lock_timeout_s: seconds put() waits for the eviction lock.

    Constructing creates nothing on disk.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        max_bytes: int | None = None,
        secret: bytes | None = None,
        config_dir: str | os.PathLike | None = None,
        lock_timeout_s: float = 30.0,
    ):
        self.root = resolve_root(root)
        self.max_bytes = max_bytes
        self.lock_timeout_s = lock_timeout_s
        self._secret = secret
        self._config_dir = config_dir
        self._lock: filelock.FileLock | None = None

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r}, max_bytes={self.max_bytes})"

    @property
    def secret(self) -> bytes:
        """The HMAC secret. Raises SecretUnavailable (OSError) on first use if none can be had."""
        if self._secret is None:
            self._secret = load_secret(self._config_dir)
        return self._secret

    # -- paths --------------------------------------------------------------

    def partition_dir(self, partition: str) -> Path:
        return self.root / validate_partition(partition)

    def entry_path(self, partition: str, key: str) -> Path:
        return self.partition_dir(partition) / (file_stem(key) + ENTRY_SUFFIX)

    @staticmethod
    def _used_path(entry: Path) -> Path:
        return entry.with_suffix(USED_SUFFIX)

    def _lockfile(self) -> filelock.FileLock:
        if self._lock is None:
            self._lock = filelock.FileLock(self.root / LOCK_NAME, timeout=self.lock_timeout_s, mode=0o600)
        return self._lock

    # -- reading ------------------------------------------------------------

    def get(self, partition: str, key: str, *, expect: dict | None = None) -> GetResult:
        """Read and fully verify one entry.

        ``expect`` maps header field -> required value, looked up in
        header["environment"] first, then the header itself. Entries that
        fail verification or ``expect`` are quarantined. Raises only
        ValueError for an invalid partition name or empty key.
        """
        path = self.entry_path(partition, key)
        try:
            with open(path, "rb") as f:
                identity = os.fstat(f.fileno())
                blob = f.read()
        except FileNotFoundError:
            return GetResult("absent", None, None, None, path, None)
        except OSError as e:
            return GetResult("error", None, None, _os_reason(e), path, None)
        try:
            header, payload = open_envelope(blob, self.secret)
        except EntryError as e:
            return self._reject(path, identity, e.kind, e.reason, None)
        except OSError as e:  # SecretUnavailable
            return GetResult("error", None, None, _os_reason(e), path, None)

        if header.get("key") != key:
            return self._reject(path, identity, "corrupt", f"header names key {header.get('key')!r}", header)
        if header.get("partition") != partition:
            reason = f"entry belongs to partition {header.get('partition')!r}, not {partition!r}"
            return self._reject(path, identity, "mismatch", reason, header)
        env = header.get("environment")
        env = env if isinstance(env, dict) else {}
        for field, want in (expect or {}).items():
            got = env[field] if field in env else header.get(field)
            if got != want:
                reason = f"{field}: entry says {got!r}, this environment is {want!r}"
                return self._reject(path, identity, "mismatch", reason, header)

        self._touch_used(path)
        return GetResult("hit", header, payload, None, path, None)

    def _reject(self, path: Path, identity: os.stat_result, status: str, reason: str, header: dict | None) -> GetResult:
        # Only quarantine the file we read: a writer may have replaced it with a good one since.
        now = _lstat(path)
        moved = None
        if now is not None and (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
            moved = self.quarantine(path, f"{status}: {reason}")
        return GetResult(status, header, None, reason, path, moved)

    def _touch_used(self, entry: Path) -> None:
        used = self._used_path(entry)
        try:
            os.utime(used)
        except FileNotFoundError:
            try:
                os.close(os.open(used, os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError:
                pass
        except OSError:
            pass  # LRU bookkeeping must never fail a read

    def touch(self, partition: str, key: str) -> None:
        """Mark an existing entry as just used (no-op if absent)."""
        path = self.entry_path(partition, key)
        if path.exists():
            self._touch_used(path)

    # -- writing ------------------------------------------------------------

    def put(self, partition: str, key: str, header: dict, raw_payload: bytes) -> PutResult:
        """Seal and publish one entry, evicting LRU entries first if max_bytes is set.

        ``header`` is copied; put sets "key" and "partition" (and "created",
        unix seconds, if absent). Raises only ValueError/TypeError for an
        invalid partition/key or a header that is not JSON-serializable.
        """
        path = self.entry_path(partition, key)
        full = dict(header, key=key, partition=partition)
        full.setdefault("created", time.time())
        try:
            blob = seal(full, raw_payload, self.secret)
        except OSError as e:  # SecretUnavailable
            return PutResult(False, None, 0, (), _os_reason(e))
        size = len(blob)

        if self.max_bytes is None:
            try:
                self._publish(path, blob)
            except OSError as e:
                return PutResult(False, None, size, (), _os_reason(e))
            self._touch_used(path)
            return PutResult(True, path, size, (), None)

        need = _estimate_disk_bytes(size)
        if need > self.max_bytes:
            reason = f"entry of {_fmt_bytes(need)} exceeds the cache cap of {_fmt_bytes(self.max_bytes)}"
            return PutResult(False, None, size, (), reason)
        evicted: list[EntryInfo] = []
        try:
            _ensure_dir(self.root)
            with self._lockfile():
                freed_to = self._evict(self.max_bytes - need, evicted, replacing=path)
                if freed_to > self.max_bytes - need:
                    reason = (
                        f"cannot free room for {_fmt_bytes(need)} under the cap of {_fmt_bytes(self.max_bytes)}: "
                        f"{_fmt_bytes(freed_to)} is held by files that are not evictable entries"
                    )
                    return PutResult(False, None, size, tuple(evicted), reason)
                self._publish(path, blob)
                self._touch_used(path)
                st = _lstat(path)
                if st is not None and _disk_bytes(st) > need:  # filesystem with larger blocks
                    self._evict(self.max_bytes, evicted, protect=path)
        except filelock.Timeout:  # before OSError: Timeout subclasses it
            reason = f"could not take the eviction lock within {self.lock_timeout_s:g} s"
            return PutResult(False, None, size, tuple(evicted), reason)
        except OSError as e:
            return PutResult(False, None, size, tuple(evicted), _os_reason(e))
        return PutResult(True, path, size, tuple(evicted), None)

    def _publish(self, dest: Path, data: bytes) -> None:
        """Atomically write ``data`` to ``dest`` (mode 0600). Raises OSError; leaves no temp file."""
        for attempt in (0, 1):
            _ensure_dir(dest.parent)
            tmp = dest.parent / f".{dest.stem}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileNotFoundError:
                if attempt:
                    raise
                continue  # clear() removed the empty partition folder just now
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, dest)
            except BaseException:
                _unlink(tmp)
                raise
            _fsync_dir(dest.parent)
            return

    def write_partition_info(self, partition: str, info: dict) -> bool:
        """Atomically write ``<partition>/partition.json`` unless identical content is there.

        Returns True if the file holds ``info`` afterwards, False on OSError.
        """
        path = self.partition_dir(partition) / PARTITION_INFO
        data = (json.dumps(info, sort_keys=True, indent=2) + "\n").encode("utf-8")
        try:
            if path.read_bytes() == data:
                return True
        except OSError:
            pass
        try:
            self._publish(path, data)
        except OSError:
            return False
        return True

    def read_partition_info(self, partition: str) -> dict | None:
        """The partition's environment description, or None if missing or unreadable."""
        try:
            info = json.loads((self.partition_dir(partition) / PARTITION_INFO).read_bytes())
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def remove(self, partition: str, key: str) -> bool:
        """Delete one entry and its .used file; True if the entry existed."""
        path = self.entry_path(partition, key)
        removed = _unlink(path)
        _unlink(self._used_path(path))
        return removed

    def quarantine(self, path: Path, reason: str) -> Path | None:
        """Move an entry to quarantine/<partition>/<stem>.<unix_ms>.xlk with a .reason.txt beside it.

        Returns the new path, or None if the file was gone or could not be moved.
        """
        path = Path(path)
        part = path.parent.name
        try:
            validate_partition(part)
        except ValueError:
            part = "_unknown"
        stem = path.name.removesuffix(ENTRY_SUFFIX)
        qdir = self.root / QUARANTINE / part
        base = f"{stem}.{int(time.time() * 1000)}"
        dest = qdir / (base + ENTRY_SUFFIX)
        try:
            _ensure_dir(qdir)
            os.replace(path, dest)
        except OSError:
            return None
        _unlink(self._used_path(path))
        note = f"{reason}\noriginal: {path}\nquarantined: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n"
        try:
            fd = os.open(qdir / (base + ".reason.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(note)
        except OSError:
            pass  # the move is what protects readers; the note is a courtesy
        return dest

    # -- listing --------------------------------------------------------------

    def partitions(self) -> list[str]:
        """Names of the partition folders, sorted."""
        names = []
        for d in _scandir(self.root):
            try:
                validate_partition(d.name)
                if d.is_dir(follow_symlinks=False):
                    names.append(d.name)
            except (ValueError, OSError):
                continue
        return sorted(names)

    def _entry_files(self, partition: str | None) -> list[tuple[str, Path]]:
        parts = [validate_partition(partition)] if partition is not None else self.partitions()
        found = []
        for part in parts:
            for d in _scandir(self.root / part):
                if d.name.endswith(ENTRY_SUFFIX) and not d.name.startswith("."):
                    found.append((part, Path(d.path)))
        return found

    def _info(self, partition: str, path: Path, st: os.stat_result | None = None) -> EntryInfo | None:
        """EntryInfo from the header; None if the file vanished."""
        st = st or _lstat(path)
        if st is None:
            return None
        used = _lstat(self._used_path(path))
        last_used = used.st_mtime if used is not None else st.st_mtime
        try:
            header = read_header_file(path)
        except FileNotFoundError:
            return None
        except EntryError as e:
            header = {"error": e.reason}
        except OSError as e:
            header = {"error": _os_reason(e)}

        def num(field):
            v = header.get(field)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        key = header.get("key")
        name = header.get("name")
        return EntryInfo(
            partition=partition,
            key=key if isinstance(key, str) else path.name.removesuffix(ENTRY_SUFFIX),
            path=path,
            name=name if isinstance(name, str) else None,
            size_bytes=_disk_bytes(st),
            created=num("created"),
            last_used=last_used,
            compile_s=num("compile_s"),
            header=header,
        )

    def entries(self, partition: str | None = None) -> list[EntryInfo]:
        """Entries of one or all partitions, from headers only, sorted by (partition, key)."""
        infos = [self._info(part, path) for part, path in self._entry_files(partition)]
        return sorted((i for i in infos if i is not None), key=lambda i: (i.partition, i.key))

    def total_bytes(self) -> int:
        """Disk bytes of every regular file under root (max of size and allocated blocks), except .lock."""
        return self._scan().total

    def _scan(self) -> _Scan:
        """One pass over root; files that vanish mid-scan are skipped."""
        scan = _Scan(0, [], [], [])
        now = time.time()
        for top in _scandir(self.root):
            if top.name == LOCK_NAME:
                continue
            path = Path(top.path)
            st = _lstat(path)
            if st is None:
                continue
            if not stat.S_ISDIR(st.st_mode):
                scan.total += _disk_bytes(st) if stat.S_ISREG(st.st_mode) else 0
                continue
            if top.name == QUARANTINE:
                for dirpath, _, files in os.walk(path):
                    for name in files:
                        fst = _lstat(os.path.join(dirpath, name))
                        if fst is not None and stat.S_ISREG(fst.st_mode):
                            scan.total += _disk_bytes(fst)
                            scan.quarantined.append((fst.st_mtime, _disk_bytes(fst), Path(dirpath, name)))
                continue
            self._scan_partition(path, scan, now)
        return scan

    def _scan_partition(self, pdir: Path, scan: _Scan, now: float) -> None:
        entries: dict[str, tuple[Path, os.stat_result]] = {}
        used: dict[str, os.stat_result] = {}
        for d in _scandir(pdir):
            st = _lstat(d.path)
            if st is None:
                continue
            if stat.S_ISDIR(st.st_mode):
                # Not ours to have, but it holds bytes; count it so the cap stays honest.
                for dirpath, _, files in os.walk(d.path):
                    for name in files:
                        fst = _lstat(os.path.join(dirpath, name))
                        if fst is not None and stat.S_ISREG(fst.st_mode):
                            scan.total += _disk_bytes(fst)
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            size = _disk_bytes(st)
            scan.total += size
            name = d.name
            if name.startswith("."):
                if name.endswith(TEMP_SUFFIX) and now - st.st_mtime > STALE_TEMP_S:
                    scan.temps.append((st.st_mtime, size, Path(d.path)))
            elif name.endswith(ENTRY_SUFFIX):
                entries[name[: -len(ENTRY_SUFFIX)]] = (Path(d.path), st)
            elif name.endswith(USED_SUFFIX):
                used[name[: -len(USED_SUFFIX)]] = st
        for stem, (path, st) in entries.items():
            u = used.get(stem)
            scan.entries.append(
                _Candidate(
                    partition=pdir.name,
                    path=path,
                    size=_disk_bytes(st) + (_disk_bytes(u) if u else 0),
                    entry_mtime=st.st_mtime,
                    last_used=u.st_mtime if u else st.st_mtime,
                )
            )

    # -- eviction -------------------------------------------------------------

    def _evict(
        self,
        budget: int,
        evicted: list[EntryInfo],
        *,
        replacing: Path | None = None,
        protect: Path | None = None,
    ) -> int:
        """Delete quarantine, stale temps, then LRU entries until the total is <= budget bytes.

        ``replacing`` is about to be overwritten, so its bytes don't count and
        it is not evicted; ``protect`` is just not evicted. Appends to
        ``evicted``; returns the total bytes remaining (as counted). Call under the lock.
        """
        scan = self._scan()
        total = scan.total
        candidates = []
        for c in scan.entries:
            if c.path == replacing:
                total -= c.size
            elif c.path != protect:
                candidates.append(c)
        if total <= budget:
            return total
        # A vanished file is gone either way, so its bytes are subtracted regardless.
        for _, size, path in sorted(scan.quarantined) + sorted(scan.temps):
            _unlink(path)
            total -= size
            if total <= budget:
                return total
        candidates.sort(key=lambda c: (c.last_used, c.entry_mtime))
        for c in candidates:
            info = self._info(c.partition, c.path)
            _unlink(c.path)
            _unlink(self._used_path(c.path))
            total -= c.size
            if info is not None:
                evicted.append(info)
            if total <= budget:
                break
        return total

    def prune(self, max_bytes: int) -> list[EntryInfo]:
        """Evict (quarantine first, then LRU entries) until total_bytes() <= max_bytes.

        Returns the evicted entries. Raises filelock.Timeout (a TimeoutError)
        if the lock isn't free within lock_timeout_s.
        """
        evicted: list[EntryInfo] = []
        if not self.root.is_dir():
            return evicted
        with self._lockfile():
            self._evict(max_bytes, evicted)
        return evicted

    def clear(self, partition: str | None = None) -> int:
        """Remove entries, .used and temp files (and partition.json) of one partition or all;
        with partition=None also the quarantine. Returns the number of entries removed.

        Raises filelock.Timeout if the lock isn't free within lock_timeout_s.
        """
        if not self.root.is_dir():
            return 0
        parts = [validate_partition(partition)] if partition is not None else self.partitions()
        removed = 0
        with self._lockfile():
            for part in parts:
                pdir = self.root / part
                for d in _scandir(pdir):
                    name = d.name
                    if (name.startswith(".") and name.endswith(TEMP_SUFFIX)) or name.endswith(USED_SUFFIX):
                        _unlink(Path(d.path))
                    elif name.endswith(ENTRY_SUFFIX) and not name.startswith("."):
                        removed += _unlink(Path(d.path))
                    elif name == PARTITION_INFO:
                        _unlink(Path(d.path))
                try:
                    os.rmdir(pdir)
                except OSError:
                    pass  # a writer is using it, or foreign files remain
            if partition is None:
                self._clear_quarantine()
        return removed

    def _clear_quarantine(self) -> None:
        qroot = self.root / QUARANTINE
        for dirpath, dirs, files in os.walk(qroot, topdown=False):
            for name in files:
                _unlink(Path(dirpath, name))
            try:
                os.rmdir(dirpath)
            except OSError:
                pass

    def cleanup_temp(self, older_than_s: float = STALE_TEMP_S) -> int:
        """Delete temp files (".*.tmp") older than ``older_than_s`` seconds; returns how many."""
        cutoff = time.time() - older_than_s
        removed = 0
        for part in self.partitions():
            for d in _scandir(self.root / part):
                if not (d.name.startswith(".") and d.name.endswith(TEMP_SUFFIX)):
                    continue
                st = _lstat(d.path)
                if st is not None and stat.S_ISREG(st.st_mode) and st.st_mtime <= cutoff:
                    removed += _unlink(Path(d.path))
        return removed

    def verify(self, partition: str | None = None) -> list[tuple[EntryInfo, str | None]]:
        """Fully open every entry; quarantine bad ones. Returns (info, None or "<kind>: reason")."""
        results = []
        for part, path in sorted(self._entry_files(partition)):
            info = self._info(part, path)
            if info is None:
                continue
            try:
                with open(path, "rb") as f:
                    identity = os.fstat(f.fileno())
                    blob = f.read()
            except FileNotFoundError:
                continue
            except OSError as e:
                results.append((info, _os_reason(e)))
                continue
            problem = None
            try:
                header, _ = open_envelope(blob, self.secret)
                if header.get("partition") != part:
                    problem = f"mismatch: entry belongs to partition {header.get('partition')!r}, not {part!r}"
                elif file_stem(str(header.get("key") or "")) != path.name.removesuffix(ENTRY_SUFFIX):
                    problem = f"corrupt: header names key {header.get('key')!r}"
            except EntryError as e:
                problem = f"{e.kind}: {e.reason}"
            except ValueError:  # empty key in the header
                problem = "corrupt: header has no key"
            except OSError as e:  # SecretUnavailable: nothing can be verified
                results.append((info, _os_reason(e)))
                continue
            if problem is not None:
                now = _lstat(path)
                if now is not None and (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
                    self.quarantine(path, problem)
            results.append((info, problem))
        return results
