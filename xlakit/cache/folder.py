"""A cache folder as data, without JAX: list, total, verify, prune and clear its entries.

For the CLI, the report and the widgets: nothing here imports JAX or installs hooks, so listing a cache never
changes how the process compiles. :class:`~xlakit.cache.ExecutableCache` and
:class:`~xlakit.cache.TransparentCache` are CacheFolders too (same methods over their own store).

    from xlakit.cache import folder
    folder.entries("/path/to/cache")          # pandas.DataFrame, one row per program
    folder.stats("/path/to/cache")            # totals as a dict
"""

from __future__ import annotations

import os
from typing import Any

from xlakit.cache import entry as _entry

__all__ = ["CacheFolder", "ENTRY_COLUMNS", "MEMORY_COLUMNS", "entries", "stats", "verify", "prune", "clear"]

#: ``get_compiled_memory_stats()`` fields recorded per entry (bytes; <NA> where the backend reports none).
MEMORY_COLUMNS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                  "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
                  "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes",
                  "peak_memory_in_bytes")
#: The columns of :meth:`CacheFolder.entries`, in order (also when the cache is empty).
ENTRY_COLUMNS = ("name", "key", "partition", "size_bytes", "compile_s", "created", "last_used", "hits", "loadable",
                 "signature", *MEMORY_COLUMNS)


class CacheFolder:
    """The entries of one cache folder.

    Args:
      path: cache folder; default ``$XLAKIT_CACHE_DIR``, else the platform's user cache folder.
      max_bytes: byte cap used by :meth:`stats` (reporting only here).
      secret: HMAC key (only :meth:`verify` needs it).
      log: event log for ``evict`` / ``corrupt`` events; default the process-wide :func:`xlakit.events.log`.
      store: an existing :class:`~xlakit.store.LocalStore` instead of ``path``/``max_bytes``/``secret``.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, max_bytes: int | None = None,
                 secret: bytes | None = None, log: Any = None, store: Any = None) -> None:
        if store is None:
            from xlakit.store import LocalStore

            store = LocalStore(path, max_bytes=max_bytes, secret=secret)
        if log is None:
            from xlakit import events

            log = events.log()
        self.store = store
        self.log = log

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.store.root)!r}, max_bytes={self.store.max_bytes})"

    def infos(self, partition: str | None = None) -> list:
        """The entries' :class:`~xlakit.store.EntryInfo` (headers only, not verified), one per program."""
        return [i for i in self.store.entries(partition) if not i.key.endswith(_entry.LEGACY_SUFFIX)]

    def entries(self, partition: str | None = None):
        """The entries as a ``pandas.DataFrame`` with :data:`ENTRY_COLUMNS`: name, key, partition, size_bytes
        (on disk), compile_s (seconds, recorded at compile time), created, last_used (datetimes), hits (in
        this process, from the event log), loadable (holds the JAX-level executable that
        :meth:`ExecutableCache.load` needs; False for what transparent mode and ``cache.jit`` store, which hold
        only the XLA executable: those still hit at the next compile of the program, and ``cache.compile`` of it
        makes them loadable), signature (the argument signature the entry's header records: a list of
        ``{"shape", "dtype", "sharding", "donation"}`` dicts, one per argument; None when it records none, as
        entries written before signatures were), and the compiled memory fields :data:`MEMORY_COLUMNS` (bytes, recorded
        at compile time). The columns are there when the cache is empty too."""
        import pandas as pd

        hits: dict[str, int] = {}
        for e in self.log.events("hit"):
            if e.key:
                hits[e.key] = hits.get(e.key, 0) + 1
        rows = []
        for info in self.infos(partition):
            memory = info.header.get("memory")
            memory = memory if isinstance(memory, dict) else {}
            signature = info.header.get("signature")
            rows.append({"name": info.name, "key": info.key, "partition": info.partition,
                         "size_bytes": info.size_bytes, "compile_s": info.compile_s,
                         "created": pd.to_datetime(info.created, unit="s") if info.created else pd.NaT,
                         "last_used": pd.to_datetime(info.last_used, unit="s"),
                         "hits": hits.get(info.key, 0), "loadable": _entry.loadable(info.header),
                         "signature": signature if isinstance(signature, list) else None,
                         **{c: memory.get(c) for c in MEMORY_COLUMNS}})
        return pd.DataFrame(rows, columns=list(ENTRY_COLUMNS))

    def stats(self) -> dict[str, Any]:
        """Totals on disk: folder, entries (programs), bytes (``LocalStore.total_bytes``: every file under the
        folder), compile_s (recorded compile seconds, summed), partitions, max_bytes."""
        infos = self.infos()
        return {"folder": str(self.store.root), "entries": len(infos), "bytes": self.store.total_bytes(),
                "compile_s": sum(i.compile_s or 0.0 for i in infos), "partitions": self.store.partitions(),
                "max_bytes": self.store.max_bytes}

    def prune(self, max_bytes: int | str) -> list:
        """Evict least-recently-used entries until the folder holds at most ``max_bytes`` (an int number of bytes
        or a size string such as ``"2GB"``); each is an event.

        Raises:
          TypeError / ValueError: ``max_bytes`` is not a positive number of bytes (``-1`` and ``True`` evicted every
            entry; a string reached a bare comparison error); nothing is evicted.
        """
        from xlakit._units import check_max_bytes

        limit = check_max_bytes(max_bytes)
        if limit is None:
            raise TypeError("prune(max_bytes): give the number of bytes the folder may keep (e.g. '2GB'), not None")
        max_bytes = limit
        evicted = self.store.prune(max_bytes)
        for gone in evicted:
            self.log.emit("evict", name=gone.name, key=gone.key, partition=gone.partition, bytes=gone.size_bytes,
                          reason=f"pruned to {max_bytes} bytes", source="xlakit", folder=str(self.store.root))
        return evicted

    def verify(self) -> list:
        """Open every entry; bad ones are quarantined (each a ``corrupt`` event). Returns ``(EntryInfo, reason)``
        pairs, reason None for a good entry."""
        results = self.store.verify()
        for info, reason in results:
            if reason:
                self.log.emit("corrupt", name=info.name, key=info.key, partition=info.partition, reason=reason,
                              source="xlakit", folder=str(self.store.root))
        return results

    def remove(self, partition: str, key: str, reason: str = "removed by hand", *, name: str | None = None,
               size_bytes: int | None = None) -> bool:
        """Remove one entry (all its payload kinds are one file) and record an ``evict`` event with ``reason``
        in :attr:`log`. ``name`` / ``size_bytes`` (bytes on disk) go into the event; read from the entry's
        header when not given. Returns whether the entry was there (nothing is recorded when it was not).

        Raises:
          OSError: the folder is read-only or the file cannot be removed (nothing is recorded then).
        """
        if name is None or size_bytes is None:
            info = next((i for i in self.infos(partition) if i.key == key), None)
            if info is not None:
                name = info.name if name is None else name
                size_bytes = info.size_bytes if size_bytes is None else size_bytes
        if not self.store.remove(partition, key):
            return False
        self.log.emit("evict", name=name, key=key, partition=partition, bytes=size_bytes, reason=reason,
                      source="xlakit", folder=str(self.store.root))
        return True

    def clear(self, partition: str | None = None) -> int:
        """Remove the entries of one partition, or all; returns how many."""
        return self.store.clear(partition)


def entries(path: str | os.PathLike | None = None, **kwargs: Any):
    """:meth:`CacheFolder.entries` of the folder at ``path``."""
    return CacheFolder(path, **kwargs).entries()


def stats(path: str | os.PathLike | None = None, **kwargs: Any) -> dict[str, Any]:
    """:meth:`CacheFolder.stats` of the folder at ``path``."""
    return CacheFolder(path, **kwargs).stats()


def verify(path: str | os.PathLike | None = None, **kwargs: Any) -> list:
    """:meth:`CacheFolder.verify` of the folder at ``path``."""
    return CacheFolder(path, **kwargs).verify()


def prune(path: str | os.PathLike | None, max_bytes: int, **kwargs: Any) -> list:
    """:meth:`CacheFolder.prune` of the folder at ``path``."""
    return CacheFolder(path, **kwargs).prune(max_bytes)


def clear(path: str | os.PathLike | None = None, partition: str | None = None, **kwargs: Any) -> int:
    """:meth:`CacheFolder.clear` of the folder at ``path``."""
    return CacheFolder(path, **kwargs).clear(partition)
