"""Why an entry must not be used: the exceptions :mod:`xlakit.store.envelope` raises, each with its ``kind``
(what a store does with the entry: quarantine it, leave it alone, replace it)."""

from __future__ import annotations

__all__ = ["EntryError", "CorruptEntry", "UnauthenticatedEntry", "ForeignKeyEntry", "StaleEntry"]


class EntryError(Exception):
    """An entry that must not be used.

    Attributes:
        reason: short human-readable explanation.
        kind: machine-readable category ("corrupt", "unauthenticated", "foreign" or "stale").
    """

    kind = "error"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CorruptEntry(EntryError):
    """Damaged entry: bad magic, truncated, bad header, SHA or length mismatch. Quarantined by the store."""

    kind = "corrupt"


class UnauthenticatedEntry(EntryError):
    """A MAC mismatch under this process's key id: the entry was modified. Quarantined by the store."""

    kind = "unauthenticated"


class ForeignKeyEntry(EntryError):
    """Signed with another key (another user or fleet sharing the folder): a miss; the entry is left alone."""

    kind = "foreign"


class StaleEntry(EntryError):
    """Written by another xlakit format version: a miss, never an error; replaced by the next write."""

    kind = "stale"

    def __init__(self, reason: str, version: int):
        super().__init__(reason)
        self.version = version
