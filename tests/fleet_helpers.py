"""Small doubles shared by the fleet tests: a toy signed blob, stores that fail or stall, an event recorder."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time

from xlakit.store.base import MemoryStore

SECRET = b"fleet-test-secret"


def _mac(secret: bytes, partition: str, key: str, payload: bytes) -> bytes:
    return hmac.new(secret, f"{partition}/{key}\n".encode() + payload, hashlib.sha256).digest()


def sign(payload: bytes, secret: bytes = SECRET, partition: str = "cpu-test", key: str = "k") -> bytes:
    """A toy envelope: HMAC-SHA256 over (partition, key, payload), then the payload (the real envelope lives
    in xlakit.store.envelope). Binding the name means a valid object copied under another key is refused."""
    return _mac(secret, partition, key, payload) + payload


def verifier(secret: bytes = SECRET):
    def verify(blob: bytes, partition: str, key: str) -> str | None:
        mac, payload = blob[:32], blob[32:]
        if not hmac.compare_digest(mac, _mac(secret, partition, key, payload)):
            return "HMAC mismatch: tampered, signed with another key, or filed under another name"
        return None

    return verify


class Recorder:
    """on_event callback keeping every TierEvent; ``kinds()`` lists them in order."""

    def __init__(self) -> None:
        self.events = []
        self._lock = threading.Lock()

    def __call__(self, event) -> None:
        with self._lock:
            self.events.append(event)

    def kinds(self, key: str | None = None) -> list[str]:
        with self._lock:
            return [e.kind for e in self.events if key is None or e.key == key]

    def of(self, kind: str) -> list:
        with self._lock:
            return [e for e in self.events if e.kind == kind]


class BrokenStore(MemoryStore):
    """A remote that is down: every call raises ConnectionError (an OSError); counts the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def get(self, partition, key, max_bytes):
        self.calls += 1
        raise ConnectionError("connection refused")

    def put(self, partition, key, blob):
        self.calls += 1
        raise ConnectionError("connection refused")


class SlowStore(MemoryStore):
    """A remote whose uploads take ``delay_s`` seconds each (a stalled network)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def put(self, partition, key, blob):
        time.sleep(self.delay_s)
        return super().put(partition, key, blob)
