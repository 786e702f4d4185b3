"""One compile per program across the processes of a ``jax.distributed`` job.

Protocol, per (partition, key), through the distributed runtime's key-value store (the coordination service
JAX already runs for multi-process jobs; nothing of xlakit's own listens on the network):

1. Ask the shared store first (``fetch``): a program some earlier process stored is loaded, no claim.
2. Claim with a create-only insert of ``<ns>/claim/<partition>/<key>`` = this process id
   (``key_value_set(..., allow_overwrite=False)``; the service answers ``ALREADY_EXISTS`` to every later one).
3. The claimant compiles and *synchronously* writes the program to the shared store (``produce``), then
   publishes a small pointer at ``<ns>/done/<partition>/<key>`` (at most ``MAX_POINTER`` characters: never
   executables — the key-value store is for small coordination values).
4. The others wait for the pointer (``blocking_key_value_get`` in slices of ``poll_s``, asking the shared
   store every ``store_poll_s`` too), at most ``wait_s`` seconds, then load it with ``fetch``. On timeout, or when the
   claimant reports a failure (``failed:<reason>`` as the pointer: the program could not be serialized, the
   compile raised), each compiles itself.

Without ``jax.distributed`` there is no coordinator (:func:`Coordinator.from_jax` returns None): each process
may compile, and the first upload wins (the remote tier's writes are create-only).

Claims live as long as the coordination service (one job). A claimant that dies leaves its claim; the others
compile after ``wait_s``. The private names used (``jax._src.distributed.global_state`` and the client's
``key_value_set`` / ``key_value_try_get`` / ``blocking_key_value_get``) are checked to exist with these
signatures on jax 0.10.2 and 0.12; :func:`distributed_client` returns None when they are missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Coordinator", "CoordinationEvent", "distributed_client", "MAX_POINTER"]

T = TypeVar("T")
MAX_POINTER = 1024  # characters; the key-value store carries pointers, never program bytes
_FAILED = "failed:"
_METHODS = ("key_value_set", "key_value_try_get", "blocking_key_value_get")


@dataclass(frozen=True)
class CoordinationEvent:
    """kind: ``claim`` (this process compiles), ``wait`` (it waited and loaded the claimant's program),
    ``wait_timeout`` / ``claim_failed`` (it compiles itself: no pointer in ``wait_s`` s, or the claimant
    failed), ``claim_error`` (the key-value store itself failed: compile, uncoordinated). seconds: wall time
    of the claim+compile or of the wait; pointer: what the claimant published; owner: the claimant's id."""

    kind: str
    partition: str
    key: str
    process_id: int
    seconds: float | None = None
    pointer: str | None = None
    owner: int | None = None
    reason: str | None = None


def distributed_client() -> tuple[Any, int] | None:
    """``(client, process_id)`` of an initialized ``jax.distributed`` runtime whose client has the key-value
    calls this module uses; None when JAX is not initialized for several processes or lacks them."""
    try:
        import jax
        from jax._src import distributed

        from .versions import MAX_JAX_EXCLUSIVE, MIN_JAX, parse_version
    except ImportError:
        return None
    if not (MIN_JAX <= parse_version(jax.__version__) < MAX_JAX_EXCLUSIVE):
        return None
    state = getattr(distributed, "global_state", None)
    client = getattr(state, "client", None)
    if client is None or not all(callable(getattr(client, m, None)) for m in _METHODS):
        return None
    return client, int(getattr(state, "process_id", 0) or 0)


def _status(e: BaseException) -> str:
    """The gRPC status at the head of a JaxRuntimeError's message (``ALREADY_EXISTS``, ``NOT_FOUND``...)."""
    return str(e).split(":", 1)[0].strip()


class Coordinator:
    """Claims and pointers for one compile per program across processes.

    Args:
      client: the distributed runtime client (``key_value_set``, ``key_value_try_get``,
        ``blocking_key_value_get``; tests may pass a double).
      process_id: this process's id in the job.
      namespace: key prefix in the key-value store.
      wait_s: the most seconds a waiter waits for the claimant's pointer before compiling itself.
      poll_s: seconds per blocking get of the pointer.
      store_poll_s: seconds between two looks at the shared store while no pointer has come.
      on_event: called with each :class:`CoordinationEvent` (exceptions in it are swallowed).

    Raises:
      ValueError: a negative wait or a non-positive poll.
    """

    def __init__(self, client, process_id: int, *, namespace: str = "xlakit/v1", wait_s: float = 120.0,
                 poll_s: float = 0.5, store_poll_s: float = 2.0,
                 on_event: Callable[[CoordinationEvent], None] | None = None) -> None:
        if wait_s < 0 or poll_s <= 0 or store_poll_s <= 0:
            raise ValueError(f"wait_s must be >= 0, poll_s and store_poll_s > 0 (got {wait_s}, {poll_s}, "
                             f"{store_poll_s})")
        self.store_poll_s = store_poll_s
        self.client, self.process_id = client, process_id
        self.namespace, self.wait_s, self.poll_s, self.on_event = namespace.rstrip("/"), wait_s, poll_s, on_event

    @classmethod
    def from_jax(cls, **kwargs) -> Coordinator | None:
        """A coordinator over the initialized ``jax.distributed`` runtime, or None without one."""
        found = distributed_client()
        return None if found is None else cls(found[0], found[1], **kwargs)

    def _emit(self, kind: str, partition: str, key: str, **fields) -> None:
        if self.on_event is not None:
            try:
                self.on_event(CoordinationEvent(kind, partition, key, self.process_id, **fields))
            except Exception:
                pass

    def _name(self, what: str, partition: str, key: str) -> str:
        return f"{self.namespace}/{what}/{partition}/{key}"

    def claim(self, partition: str, key: str) -> tuple[bool, int | None]:
        """Try to become the compiler of this program: ``(True, self)`` or ``(False, owner id or None)``.

        Raises RuntimeError (from the runtime) for errors other than "already claimed"."""
        name = self._name("claim", partition, key)
        try:
            self.client.key_value_set(name, str(self.process_id), allow_overwrite=False)
            return True, self.process_id
        except Exception as e:
            if _status(e) != "ALREADY_EXISTS":
                raise
        try:
            return False, int(self.client.key_value_try_get(name))
        except Exception:
            return False, None

    def publish(self, partition: str, key: str, pointer: str) -> None:
        """Tell the waiters where the program is (or ``failed:<reason>``). Raises ValueError over MAX_POINTER."""
        if len(pointer) > MAX_POINTER:
            raise ValueError(f"a pointer is at most {MAX_POINTER} characters (got {len(pointer)}): "
                             "publish where the program is, never the program")
        self.client.key_value_set(self._name("done", partition, key), pointer, allow_overwrite=True)

    def wait(self, partition: str, key: str, fetch: Callable[[], T | None]) -> tuple[T | None, str | None]:
        """Wait (at most ``wait_s``) for the claimant: ``(value, pointer)``; value None means compile yourself.

        The pointer is awaited in the key-value store in slices of ``poll_s``; the shared store is asked when
        it arrives and every ``store_poll_s`` besides (a claimant that uploaded and died before publishing)."""
        name = self._name("done", partition, key)
        deadline = time.monotonic() + self.wait_s
        next_store_poll = time.monotonic() + self.store_poll_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, None
            try:
                pointer = self.client.blocking_key_value_get(name, max(1, int(min(left, self.poll_s) * 1000)))
            except Exception as e:
                if _status(e) not in ("DEADLINE_EXCEEDED", "NOT_FOUND"):
                    raise
                pointer = None
            if pointer is not None and pointer.startswith(_FAILED):
                return None, pointer
            if pointer is None and time.monotonic() < next_store_poll:
                continue
            next_store_poll = time.monotonic() + self.store_poll_s
            value = fetch()
            if value is not None:
                return value, pointer
            if pointer is not None:  # published but not fetchable here (another secret, a failed read)
                return None, pointer

    def run(self, partition: str, key: str, *, fetch: Callable[[], T | None], produce: Callable[[], T | None],
            pointer: Callable[[T], str] | None = None) -> T:
        """The whole protocol for one program; returns what ``fetch`` or ``produce`` returned.

        fetch: the program from the shared store, or None. produce: compile it *and write it to the shared
        store before returning* (None: compiled but not storable — waiters are told to compile themselves).
        pointer: the small string published for waiters (default ``"<partition>/<key>"``).
        Raises whatever ``produce`` raises (after telling the waiters)."""
        found = fetch()
        if found is not None:
            return found
        start = time.perf_counter()
        try:
            mine, owner = self.claim(partition, key)
        except Exception as e:  # the coordination service itself failed: compile uncoordinated
            self._emit("claim_error", partition, key, reason=f"{type(e).__name__}: {e}"[:300])
            return produce()  # type: ignore[return-value]
        if mine or owner == self.process_id:  # a claim of this process's own: compile now, never wait on itself
            try:
                value = produce()
            except BaseException as e:
                self._publish_quietly(partition, key, f"{_FAILED}{type(e).__name__}: {e}"[:MAX_POINTER])
                raise
            published = (f"{_FAILED}not storable" if value is None
                         else (pointer(value) if pointer else f"{partition}/{key}"))
            self._publish_quietly(partition, key, published)
            self._emit("claim", partition, key, seconds=time.perf_counter() - start, pointer=published,
                       owner=self.process_id)
            return value  # type: ignore[return-value]
        value, where = self.wait(partition, key, fetch)
        seconds = time.perf_counter() - start
        if value is not None:
            self._emit("wait", partition, key, seconds=seconds, pointer=where, owner=owner)
            return value
        if where is not None and where.startswith(_FAILED):
            self._emit("claim_failed", partition, key, seconds=seconds, pointer=where, owner=owner,
                       reason=where[len(_FAILED):])
        else:
            self._emit("wait_timeout", partition, key, seconds=seconds, pointer=where, owner=owner,
                       reason=(f"no program from process {owner} within {self.wait_s} s" if where is None
                               else f"process {owner} published {where!r} but it could not be loaded here"))
        return produce()  # type: ignore[return-value]

    def _publish_quietly(self, partition: str, key: str, where: str) -> None:
        try:
            self.publish(partition, key, where)
        except Exception as e:  # waiters then time out and compile: slower, never wrong
            self._emit("claim_error", partition, key, reason=f"pointer not published: {type(e).__name__}: {e}"[:300])
