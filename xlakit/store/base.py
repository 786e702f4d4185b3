"""The store contract: sealed envelopes as bytes, addressed by (partition, key). No JAX, no envelope logic.

Every tier — the local folder, the in-memory double used by tests, object storage through fsspec —
implements :class:`Store`. What an envelope means (integrity, authenticity, environment checks, quarantine,
events) lives above this contract, in one place, so each tier only moves bytes.

Rules every implementation keeps:

- ``put`` is create-only: it never replaces an object that exists ("already exists" is success for the
  caller, reported as ``False``). Writes are atomic: a reader sees a whole object or none.
- ``get`` never writes (no access-time touches on shared tiers) and never reads more than ``max_bytes``;
  an object larger than that, or one that is not a regular file, is reported as :class:`ObjectRefused`.
- ``delete`` removes only the object it names, never follows a link out of the store.
- Errors of the medium (IO, network) raise :class:`OSError`; callers turn them into events.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ObjectRefused", "DeadlineExceeded", "ObjectStat", "Store", "MemoryStore"]


class DeadlineExceeded(TimeoutError):
    """A remote operation (connect, request and whole body, or an upload) did not finish within its deadline."""


class ObjectRefused(OSError):
    """An object exists but is not safe to read: too large, not a regular file, a link. ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ObjectStat:
    """One stored object. size_bytes: bytes of the sealed envelope; mtime: unix seconds of its creation."""

    partition: str
    key: str
    size_bytes: int
    mtime: float


@runtime_checkable
class Store(Protocol):
    """Bytes in, bytes out, by (partition, key)."""

    def get(self, partition: str, key: str, max_bytes: int) -> bytes | None:
        """The object's bytes, or None when absent. Raises ObjectRefused, OSError."""

    def put(self, partition: str, key: str, blob: bytes) -> bool:
        """Create the object; True if this call created it, False if it already existed. Raises OSError."""

    def delete(self, partition: str, key: str) -> bool:
        """Remove the object; True if it existed. Raises OSError."""

    def stat(self, partition: str, key: str) -> ObjectStat | None:
        """The object's size and time, or None when absent. Raises OSError."""

    def list(self, partition: str | None = None) -> Iterator[ObjectStat]:
        """Every object (of one partition, or all). Raises OSError."""


class MemoryStore:
    """A :class:`Store` in a dict, for tests and as the model of the contract's semantics."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], tuple[bytes, float]] = {}
        self.puts = 0  # write requests seen, created or not (tests count them)

    def get(self, partition: str, key: str, max_bytes: int) -> bytes | None:
        found = self.objects.get((partition, key))
        if found is None:
            return None
        if len(found[0]) > max_bytes:
            raise ObjectRefused(f"object is {len(found[0])} bytes, over the {max_bytes}-byte bound")
        return found[0]

    def put(self, partition: str, key: str, blob: bytes) -> bool:
        import time

        self.puts += 1
        if (partition, key) in self.objects:
            return False
        self.objects[(partition, key)] = (bytes(blob), time.time())
        return True

    def delete(self, partition: str, key: str) -> bool:
        return self.objects.pop((partition, key), None) is not None

    def stat(self, partition: str, key: str) -> ObjectStat | None:
        found = self.objects.get((partition, key))
        return None if found is None else ObjectStat(partition, key, len(found[0]), found[1])

    def list(self, partition: str | None = None) -> Iterator[ObjectStat]:
        for (p, k), (blob, mtime) in list(self.objects.items()):
            if partition is None or p == partition:
                yield ObjectStat(p, k, len(blob), mtime)
