"""LocalStore: sealed entries in a local folder, safe for many processes at once (layout in :mod:`.layout`).

It composes the pieces: :class:`~xlakit.store.folder.FolderStore` moves bytes without following links,
:class:`~xlakit.store.entries.EntryLayer` seals and opens envelopes, :mod:`.quarantine` keeps rejected
entries, :mod:`.evict` keeps the byte cap. Writers publish with an atomic rename, so readers see a whole
entry or none. Folders are created 0700, files 0600, and the folder gets a ``CACHEDIR.TAG``. IO problems
never raise from :meth:`LocalStore.get` or :meth:`LocalStore.put`; they are reported in the result.
Destructive operations (:meth:`~LocalStore.clear`, :meth:`~LocalStore.prune`, :meth:`~LocalStore.verify`)
raise :class:`~xlakit.store.layout.NotACacheFolder` in a folder that is not an xlakit cache.
"""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import filelock

from . import _fs, evict
from .entries import MAX_ENTRY_BYTES, EntryInfo, EntryLayer, GetResult, PutResult, entry_info
from .envelope import (
    FORMAT_VERSION,
    MAGIC,
    READ_VERSIONS,
    EntryError,
    key_id,
    read_header_file,
)
from .folder import FolderStore
from .layout import (
    ENTRY_SUFFIX,
    ENV_CACHE_DIR,
    LOCK_NAME,
    PARTITION_INFO,
    STALE_TEMP_S,
    USED_SUFFIX,
    NotACacheFolder,
    file_stem,
    require_cache_folder,
    resolve_root,
    validate_partition,
)
from .quarantine import Quarantined, move_to_quarantine, quarantine_file
from .safejson import UnsafeJson
from .safejson import loads as safe_loads
from .secret import check_secret, check_secret_outside, load_secret

__all__ = [
    "ENV_CACHE_DIR",
    "EntryInfo",
    "GetResult",
    "LocalStore",
    "NotACacheFolder",
    "PutResult",
    "file_stem",
    "resolve_root",
    "validate_partition",
]

# Entries occupy whole filesystem blocks; budgeting by this keeps total_bytes() under the cap.
_BLOCK = 4096
_MAX_PARTITION_INFO = 1024 * 1024


def _fmt_bytes(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    if n >= 1_000:
        return f"{n / 1e3:.1f} kB"
    return f"{n} B"


def _os_reason(e: BaseException) -> str:
    return f"OSError: {e}" if isinstance(e, OSError) else f"{type(e).__name__}: {e}"


class _LocalObjects(FolderStore):
    """The folder tier plus quarantine of the exact file last read (the entry layer's reject hook)."""

    def quarantine_object(self, partition: str, key: str, reason: str) -> Quarantined | None:
        """:func:`~xlakit.store.quarantine.move_to_quarantine` of the entry just read (raises QuarantineError)."""
        return move_to_quarantine(self.root, partition, file_stem(key) + ENTRY_SUFFIX, reason,
                                  self.last_read_identity(partition, key))


class LocalStore:
    """Entries in a local (or shared network) folder.

    Args:
        root: cache folder; see :func:`resolve_root`.
        max_bytes: cap on total_bytes(); None means unbounded.
        secret: HMAC secret; loaded lazily with load_secret(config_dir) if None.
        config_dir: where the secret file lives (see secret.py); refused inside the cache folder.
        lock_timeout_s: seconds put() waits for the eviction lock.
        max_entry_bytes: a read refuses a larger entry file unread (default 2 GiB).

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
        max_entry_bytes: int = MAX_ENTRY_BYTES,
    ):
        self.root = resolve_root(root)
        self.max_bytes = max_bytes
        self.lock_timeout_s = lock_timeout_s
        self._secret = check_secret(secret)
        self._config_dir = config_dir
        self._lock: filelock.FileLock | None = None
        self.objects = _LocalObjects(self.root)
        self._partition_dirs: dict[str, Path] = {}
        bound = max_entry_bytes if max_bytes is None else min(max_entry_bytes, max_bytes)
        self.layer = EntryLayer(self.objects, lambda: self.secret, max_entry_bytes=bound, path_of=self.entry_path)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r}, max_bytes={self.max_bytes})"

    @property
    def displaced(self) -> list[str]:
        """Sentences about folders found where the store keeps a file (``.lock``, an entry, a ``.used``) and
        what was done: removed if empty, else renamed to ``.<name>.<unix_ms>.<rand>.in-the-way`` beside it,
        never entered. Oldest first, the last 100. Callers report them (an event, a CLI message)."""
        return self.objects.displaced

    @property
    def secret(self) -> bytes:
        """The HMAC secret. Raises SecretUnavailable (OSError) on first use if none can be had, or if the
        secret file would live inside this cache folder (or the cache inside the config folder)."""
        if self._secret is None:
            check_secret_outside(self.root, self._config_dir)
            self._secret = load_secret(self._config_dir)
        return self._secret

    # -- paths --------------------------------------------------------------

    def partition_dir(self, partition: str) -> Path:
        """``<root>/<partition>``. Raises ValueError for an invalid partition name."""
        found = self._partition_dirs.get(partition)
        if found is None:  # validated and joined once per name (every lookup needs it)
            if len(self._partition_dirs) > 64:
                self._partition_dirs.clear()
            found = self._partition_dirs[partition] = self.root / validate_partition(partition)
        return found

    def entry_path(self, partition: str, key: str) -> Path:
        return self.partition_dir(partition) / (file_stem(key) + ENTRY_SUFFIX)

    @staticmethod
    def _used_path(entry: Path) -> Path:
        return entry.with_suffix(USED_SUFFIX)

    def _lockfile(self) -> filelock.FileLock:
        # filelock opens with O_TRUNC: a planted link at .lock would truncate its target, so drop it first.
        st = _fs.lstat(self.root / LOCK_NAME)
        if st is not None and stat.S_ISDIR(st.st_mode):
            # A folder at .lock would fail every capped put, clear and prune: out of the way, never entered.
            try:
                with _fs.dir_fd(os.path.realpath(self.root)) as rfd:
                    self.objects.note_displaced(str(self.root), _fs.clear_way(LOCK_NAME, rfd))
            except OSError:
                pass
        elif st is not None and not stat.S_ISREG(st.st_mode):
            _fs.unlink_at(str(self.root / LOCK_NAME))
        if self._lock is None:
            self._lock = filelock.FileLock(self.root / LOCK_NAME, timeout=self.lock_timeout_s, mode=0o600)
        return self._lock

    # -- reading ------------------------------------------------------------

    def get(self, partition: str, key: str, *, expect: dict | None = None) -> GetResult:
        """Read and fully verify one entry (statuses in :mod:`xlakit.store.entries`).

        ``expect`` maps header field -> required value, looked up in header["environment"] first, then
        the header itself. Corrupt, modified, refused (link, FIFO, over the size bound) and mismatched
        entries are quarantined; entries signed with another key or written by another format are a miss
        and left in place. Raises only ValueError for an invalid partition name or empty key.
        """
        found = self.layer.get(partition, key, expect=expect)
        if found.status == "hit":
            note = evict.touch_used(self.root, found.path or self.entry_path(partition, key))
            if note is not None:
                self.objects.note_displaced(str(self.root / partition), note)
        return found

    def touch(self, partition: str, key: str) -> None:
        """Mark an existing entry as just used (no-op if absent)."""
        if self.objects.stat(partition, key) is not None:
            evict.touch_used(self.root, self.entry_path(partition, key))

    # -- writing ------------------------------------------------------------

    def _keeps(self, path: Path) -> str | None:
        """Why the existing file at ``path`` must not be replaced (another key's or a newer format's
        entry), or None. Reads 16 bytes, never through a link."""
        try:
            with _fs.open_regular(path) as f:
                prefix = f.read(16)
        except OSError:
            return None
        if len(prefix) < 16 or prefix[:7] != MAGIC[:7]:
            return None
        if prefix[7] > FORMAT_VERSION:
            return f"an entry written by a newer xlakit format (version {prefix[7]}) holds this name"
        if prefix[7] in READ_VERSIONS and prefix[8:16] != key_id(self.secret):
            return (f"an entry signed with another key (key id {prefix[8:16].hex()}, this process "
                    f"{key_id(self.secret).hex()}) holds this name; it is left in place")
        return None

    def _publish(self, partition: str, key: str, path: Path, blob: bytes) -> str | None:
        keep = self._keeps(path)
        if keep is not None:
            return keep
        self.objects.replace(partition, key, blob)
        self.objects.note_displaced(str(self.root / partition), evict.touch_used(self.root, path))
        return None

    def put(self, partition: str, key: str, header: dict, raw_payload: bytes) -> PutResult:
        """Seal and publish one entry, evicting LRU entries first if max_bytes is set.

        ``header`` is copied; put sets "key" and "partition" (and "created", unix seconds, if absent).
        An existing entry of this process's key (or an older format) is replaced; one signed with another
        key is left in place and the put reports stored=False. Raises only ValueError/TypeError for an
        invalid partition/key or a header that is not JSON-serializable.
        """
        path = self.entry_path(partition, key)
        try:
            blob, sealed = self.layer.seal(partition, key, header, raw_payload)
        except OSError as e:  # SecretUnavailable
            return PutResult(False, None, 0, (), _os_reason(e))
        size = len(blob)

        if self.max_bytes is None:
            try:
                keep = self._publish(partition, key, path, blob)
            except OSError as e:
                return PutResult(False, None, size, (), _os_reason(e), sealed)
            if keep is not None:
                return PutResult(False, None, size, (), keep, sealed)
            evict.remove_stale_temps(self.root, [partition])  # a killed writer's leftovers go with the next write
            return PutResult(True, path, size, (), None, sealed)

        need = -(-size // _BLOCK) * _BLOCK
        if need > self.max_bytes:
            reason = f"entry of {_fmt_bytes(need)} exceeds the cache cap of {_fmt_bytes(self.max_bytes)}"
            return PutResult(False, None, size, (), reason, sealed)
        evicted: list[EntryInfo] = []
        try:
            self.objects.ensure_root()
            with self._lockfile():
                freed_to = self._evict(self.max_bytes - need, evicted, replacing=path)
                if freed_to > self.max_bytes - need:
                    reason = (
                        f"cannot free room for {_fmt_bytes(need)} under the cap of {_fmt_bytes(self.max_bytes)}: "
                        f"{_fmt_bytes(freed_to)} is held by files that are not evictable entries"
                    )
                    return PutResult(False, None, size, tuple(evicted), reason, sealed)
                keep = self._publish(partition, key, path, blob)
                if keep is not None:
                    return PutResult(False, None, size, tuple(evicted), keep, sealed)
                st = _fs.lstat(path)
                if st is not None and _fs.disk_bytes(st) > need:  # filesystem with larger blocks
                    self._evict(self.max_bytes, evicted, protect=path)
        except filelock.Timeout:  # before OSError: Timeout subclasses it
            reason = f"could not take the eviction lock within {self.lock_timeout_s:g} s"
            return PutResult(False, None, size, tuple(evicted), reason, sealed)
        except OSError as e:
            return PutResult(False, None, size, tuple(evicted), _os_reason(e), sealed)
        return PutResult(True, path, size, tuple(evicted), None, sealed)

    def write_partition_info(self, partition: str, info: dict) -> bool:
        """Atomically write ``<partition>/partition.json`` unless identical content is there.

        Returns True if the file holds ``info`` afterwards, False on OSError.
        """
        path = self.partition_dir(partition) / PARTITION_INFO
        data = (json.dumps(info, sort_keys=True, indent=2) + "\n").encode("utf-8")
        try:
            if _fs.read_bounded(path, len(data))[0] == data:
                return True
        except OSError:
            pass
        try:
            self.objects.write_file(partition, PARTITION_INFO, data)
        except OSError:
            return False
        return True

    def read_partition_info(self, partition: str) -> dict | None:
        """The partition's environment description, or None if missing, unreadable, a link, over 1 MiB
        or not acceptable JSON (see :mod:`.safejson`)."""
        try:
            raw, _ = _fs.read_bounded(self.partition_dir(partition) / PARTITION_INFO, _MAX_PARTITION_INFO)
            info = safe_loads(raw)
        except (OSError, UnsafeJson):
            return None
        return info if isinstance(info, dict) else None

    def remove(self, partition: str, key: str) -> bool:
        """Delete one entry and its .used file (links removed, never followed); True if the entry existed."""
        removed = self.objects.delete(partition, key)
        evict.remove_file(self.root, partition, file_stem(key) + USED_SUFFIX)
        return removed

    def quarantine(self, path: Path, reason: str) -> Path | None:
        """Move an entry to quarantine/<partition>/<stem>.<unix_ms>.xlk with a .reason.txt beside it.

        Returns the new path, or None if the file was gone or could not be moved. A note that could not be written
        (a full quarantine) is said with a RuntimeWarning; the entry is moved all the same.
        """
        path = Path(path)
        moved = quarantine_file(self.root, path.parent.name, path.name, reason)
        if moved is not None and moved.note_problem:
            warnings.warn(f"{path} moved to {moved.path} without its reason note, which could not be written "
                          f"({moved.note_problem}); the reason: {reason}", RuntimeWarning, stacklevel=2)
        return None if moved is None else moved.path

    # -- listing --------------------------------------------------------------

    def partitions(self) -> list[str]:
        """Names of the partition folders (real folders, not links), sorted."""
        return self.objects.partitions()

    def _info(self, partition: str, path: Path, st: os.stat_result | None = None) -> EntryInfo | None:
        """EntryInfo from the authenticated header; None if the file vanished."""
        st = st or _fs.lstat(path)
        if st is None:
            return None
        used = _fs.lstat(self._used_path(path))
        last_used = used.st_mtime if used is not None else st.st_mtime
        try:
            header = read_header_file(path, self.secret)
        except FileNotFoundError:
            return None
        except EntryError as e:
            header = {"error": f"{e.kind}: {e.reason}" if e.kind in ("foreign", "stale") else e.reason}
        except (OSError, MemoryError) as e:
            header = {"error": _os_reason(e)}
        return entry_info(partition, path.name.removesuffix(ENTRY_SUFFIX), path, _fs.disk_bytes(st), last_used,
                          header)

    def _entry_files(self, partition: str | None) -> list[tuple[str, Path]]:
        return [(o.partition, self.root / o.partition / (o.key + ENTRY_SUFFIX))
                for o in self.objects.list(partition)]

    def entries(self, partition: str | None = None) -> list[EntryInfo]:
        """Entries of one or all partitions, from authenticated headers only, sorted by (partition, key).

        An entry whose header fails (modified, another key, older format, a FIFO or link) is listed with
        name None and header {"error": reason}.
        """
        infos = [self._info(part, path) for part, path in self._entry_files(partition)]
        return sorted((i for i in infos if i is not None), key=lambda i: (i.partition, i.key))

    def total_bytes(self) -> int:
        """Disk bytes (max of size and allocated blocks) of every regular file under root counted against the
        cap: all but .lock and temp files."""
        return evict.scan(self.root).total

    # -- which folders and files are the store's --------------------------------

    def is_partition(self, name: str) -> bool:
        """Whether folder ``name`` is a partition, where eviction, verify and clear act on the store's entries
        (:func:`xlakit.store.evict.is_partition`: made for an environment, or holding an entry that authenticates
        with this key as the entry at its name). A user's own folder beside the partitions is not."""
        return evict.is_partition(self.root, name, lambda: self.secret)

    def store_partitions(self) -> list[str]:
        """The partition folders (:meth:`is_partition`), sorted; a user's own folders beside them left out."""
        return [p for p in self.partitions() if self.is_partition(p)]

    def left_alone(self) -> list[str]:
        """Files named like entries (``*.xlk``) that eviction, verify and clear leave alone, relative to the root:
        in a folder that is not a partition (``logs/notes.xlk``), or in a partition but not the store's entries
        (:func:`xlakit.store.evict.is_store_entry`). For saying so; nothing is done to them."""
        return evict.left_alone(self.root, self.is_partition)

    def counted_files(self) -> list[tuple[str, str, int]]:
        """:func:`xlakit.store.evict.counted_files` with this store's partitions (:meth:`is_partition`)."""
        return evict.counted_files(self.root, self.is_partition)

    # -- eviction -------------------------------------------------------------

    def _evict(self, budget: int, evicted: list[EntryInfo], *, replacing: Path | None = None,
               protect: Path | None = None) -> int:
        """See :func:`xlakit.store.evict.evict_to`; call under the lock."""
        return evict.evict_to(self.root, budget, evicted, self._info, replacing=replacing, protect=protect,
                              owned=self._owned, is_partition=self.is_partition)

    def _owned(self, path: Path) -> bool:
        try:
            secret = self.secret
        except OSError:  # no secret: another key's entries cannot be told apart, so nothing is removed
            return False
        return evict.removable(path, secret)

    def prune(self, max_bytes: int) -> list[EntryInfo]:
        """Remove stale temps, then evict (quarantine first, then LRU entries) until total_bytes() <= max_bytes.
        Only the store's entries in partitions are evicted (:meth:`is_partition`); a user's files elsewhere in the
        folder count against ``max_bytes`` and stay (:meth:`left_alone`).

        Returns the evicted entries. Raises NotACacheFolder (a ValueError) for a folder that is not an
        xlakit cache, filelock.Timeout (a TimeoutError) if the lock isn't free within lock_timeout_s.
        """
        evicted: list[EntryInfo] = []
        if not require_cache_folder(self.root):
            return evicted
        with self._lockfile():
            self._evict(max_bytes, evicted)
        return evicted

    def clear(self, partition: str | None = None) -> int:
        """Remove entries, .used and temp files (and partition.json) of one partition or all; with
        partition=None also the quarantine. Returns the number of entries removed. Only names the store
        produces are removed, and no link is followed.

        A folder at a store name (an entry, ``.used``, ``partition.json``) is removed if empty, else renamed
        out of the way (never entered) and named in :attr:`displaced`. Only partitions are cleared
        (:meth:`is_partition`): a ``partition`` that names a user's own folder (``logs``) removes nothing, and
        within a partition only the store's entries go (:func:`xlakit.store.evict.is_store_entry`). Raises
        NotACacheFolder (a ValueError) for a folder that is not an xlakit cache, filelock.Timeout if the lock
        isn't free within lock_timeout_s.
        """
        parts = [validate_partition(partition)] if partition is not None else None
        if not require_cache_folder(self.root):
            return 0
        # the partitions, never a user's own folder beside them (evict.is_partition)
        parts = [p for p in parts if self.is_partition(p)] if parts is not None else self.store_partitions()
        removed = 0
        with self._lockfile():
            notes: list[str] = []
            for part in parts:
                removed += evict.clear_partition(self.root, part, notes, owned=self._owned)
            for note in notes:
                self.objects.note_displaced(str(self.root), note)
            evict.remove_stale_temps(self.root, [], older_than_s=STALE_TEMP_S)
            if partition is None:
                from .quarantine import clear_quarantine

                clear_quarantine(self.root)
        return removed

    def cleanup_temp(self, older_than_s: float = STALE_TEMP_S) -> int:
        """Delete temp files (".*.tmp") whose writer is gone (its pid, from the name, no longer runs) or
        older than ``older_than_s`` seconds, in the root and the partitions (:meth:`is_partition`); returns how
        many."""
        return evict.remove_stale_temps(self.root, self.store_partitions(), older_than_s)

    def verify(self, partition: str | None = None) -> list[tuple[EntryInfo, str | None]]:
        """Fully open every entry; quarantine bad ones; remove dead writers' temps.

        Returns (info, None or "<kind>: reason"). Entries signed with another key ("foreign") or written by
        another format ("stale") are reported and left in place; a bad entry that could not be moved stays,
        its reason ending ``" [not quarantined: <why>]"``. Only the store's entries in partitions are opened
        (:meth:`is_partition`, :func:`xlakit.store.evict.is_store_entry`): a user's ``logs/notes.xlk`` is neither
        verified nor quarantined (:meth:`left_alone` lists such files). Raises NotACacheFolder (a ValueError)
        for a folder that is not an xlakit cache.
        """
        from .verifying import verify_entries

        return verify_entries(self, partition)
