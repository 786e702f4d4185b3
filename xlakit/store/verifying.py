"""``LocalStore.verify``: open every entry of the partitions fully, quarantine the bad ones.

Only the store's entries in partitions are opened (:mod:`.owned`): a user's ``logs/notes.xlk`` beside the partitions
is neither verified nor quarantined.
"""

from __future__ import annotations

from typing import Any

from . import _fs
from .entries import EntryInfo
from .envelope import EntryError, open_envelope
from .layout import ENTRY_SUFFIX, file_stem, require_cache_folder, validate_partition
from .owned import store_entries
from .quarantine import quarantine_reported

__all__ = ["verify_entries"]


def _os_reason(e: BaseException) -> str:
    return f"OSError: {e}" if isinstance(e, OSError) else f"{type(e).__name__}: {e}"


def verify_entries(store: Any, partition: str | None = None) -> list[tuple[EntryInfo, str | None]]:
    """:meth:`xlakit.store.LocalStore.verify` of ``store`` (its docstring says what is returned and raised)."""
    if not require_cache_folder(store.root):
        return []
    store.cleanup_temp()
    results: list[tuple[EntryInfo, str | None]] = []
    parts = [validate_partition(partition)] if partition is not None else store.partitions()
    files = [(part, store.root / part / name) for part in parts if store.is_partition(part)
             for name in store_entries(store.root, part)]
    for part, path in sorted(files):
        info = store._info(part, path)
        if info is None:
            continue
        stem = path.name.removesuffix(ENTRY_SUFFIX)
        problem, st = None, None
        try:
            blob, st = _fs.read_bounded(path, store.layer.max_entry_bytes)
            header, _ = open_envelope(blob, store.secret)
            key = header.get("key")
            if header.get("partition") != part:
                problem = f"mismatch: entry belongs to partition {header.get('partition')!r}, not {part!r}"
            elif not isinstance(key, str) or not key or file_stem(key) != stem:
                problem = f"corrupt: header names key {key!r}"
        except FileNotFoundError:
            continue
        except EntryError as e:
            problem = f"{e.kind}: {e.reason}"
        except (OSError, MemoryError) as e:
            reason = getattr(e, "reason", None)
            if reason is None:  # SecretUnavailable or a read error: nothing can be decided
                results.append((info, _os_reason(e)))
                continue
            problem, st = f"corrupt: {reason}", None  # ObjectRefused: a link, FIFO or oversized file
        if problem is not None and not problem.startswith(("foreign:", "stale:")):
            identity = (st.st_dev, st.st_ino) if st is not None else None
            problem = quarantine_reported(store.root, part, path.name, problem, identity)
        results.append((info, problem))
    return results
