"""The one fetch/publish path of xlakit's store: every lookup and every write returns a :class:`Decision`.

Transparent mode and :class:`~xlakit.cache.ExecutableCache` (through :class:`~xlakit.cache.handler.StoreHandler`)
and bundles call :meth:`CachePath.fetch` and :meth:`CachePath.publish`; nothing else turns store results into
hits, misses, saved seconds or failures. Each call records the matching event(s) in the log it was given
(``source="xlakit"``, with ``folder`` and, for stores and hits, ``memory``) and returns the decision as a value.

Nothing here raises into the user's program: store and load failures become decisions (``load_error``,
``corrupt``, ``store_error``) and the caller compiles. Only the exception types a caller names in ``reraise``
pass through (e.g. a device placement the caller must refuse).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from xlakit._jax.kernels import KernelsNotReady
from xlakit._sources import user_stacklevel
from xlakit.cache import entry as _entry
from xlakit.cache.decision import Decision

__all__ = ["CachePath"]

T = TypeVar("T")


class CachePath:
    """Fetch from and publish to one store, recording each outcome.

    Args:
      store: a :class:`~xlakit.store.LocalStore` (``get``, ``put``, ``remove``, ``write_partition_info``,
        ``root``, ``max_bytes``).
      log: an event sink with ``emit(kind, **fields)`` (an :class:`~xlakit.events.EventLog`).
      attribute: let the log attribute each event to user or library code from the Python stack
        (:mod:`xlakit.events._origin`). False for a caller whose events never come from inside a JAX trace or
        compile, where the walk always finds nothing (a bundle's loading threads): ``origin`` is then None without
        walking the stack (the first walk in a process also costs ~1 ms of ``sysconfig`` lookups).
    """

    def __init__(self, store: Any, log: Any, *, attribute: bool = True) -> None:
        self.store = store
        self.log = log
        self._origin: dict[str, Any] = {} if attribute else {"origin": None}
        self._warned: set[str] = set()
        self._partitions: set[str] = set()

    @property
    def folder(self) -> str:
        return str(self.store.root)

    # -- reading ---------------------------------------------------------------------------------------
    def fetch(self, partition: str, key: str, *, name: str | None, load: Callable[[Mapping, Any], T],
              expect: Mapping[str, Any] | None = None,
              reraise: tuple[type[BaseException], ...] = ()) -> tuple[T | None, Decision]:
        """Look ``key`` up in ``partition`` and turn a verified entry into a program with ``load``.

        Args:
          load: ``(authenticated header, payload) -> program``, the payload as the store returns it (``bytes``, or a
            :class:`~xlakit.store.split.SplitPayload` for an entry with ``payload_split``); called only after the
            envelope's MACs (integrity and authenticity) and ``expect`` checks pass. If it raises (other than
            ``reraise``), the entry is removed and the decision is ``load_error``; ``KernelsNotReady`` (a kernel this
            process cannot make ready without lowering) keeps the entry and is a ``miss`` with that reason.
          expect: header/environment fields the entry must carry (:func:`xlakit._jax.environment.expectations`).

        Returns:
          ``(program, decision)``: the program only on a ``hit``; else None and a ``miss``, ``corrupt`` or
          ``load_error`` decision (``load_s`` = seconds spent).
        """
        start = time.perf_counter()
        try:
            found = self.store.get(partition, key, expect=dict(expect or {}))
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            return None, self._record("load_error", name, key, partition, reason=_describe(exc),
                                      load_s=time.perf_counter() - start)
        if found.status == "hit":
            header = found.header or {}
            name = name or (header.get("name") if isinstance(header.get("name"), str) else None)
            unrunnable = _unrunnable(header)
            if unrunnable is not None:  # known from the header: nothing is loaded, the entry is kept
                return None, self._record("miss", name, key, partition, reason=f"{unrunnable}; compiling instead",
                                          load_s=time.perf_counter() - start)
            try:
                program = load(header, found.payload)
            except reraise:
                raise
            except KernelsNotReady as exc:  # a sound entry this process cannot run unlowered: keep it, compile
                return None, self._record("miss", name, key, partition, reason=f"{exc}; compiling instead",
                                          load_s=time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - integrity held but the program did not load: drop it
                try:
                    self.store.remove(partition, key)
                except Exception:  # noqa: BLE001
                    pass
                decision = self._record("load_error", name, key, partition,
                                        reason=f"could not load the entry: {_describe(exc)}; removed, compiling",
                                        load_s=time.perf_counter() - start)
                self._warn_once("load", f"xlakit could not load the cached program {name or key} from "
                                        f"{self.folder} (partition {partition}): {_describe(exc)}. The entry passed "
                                        "its integrity and authenticity checks, so it was written by another XLA "
                                        "build or is damaged; it was removed and the program compiled and stored "
                                        "again. Each such entry is a 'load_error' event; this is the only warning.")
                return None, decision
            load_s = time.perf_counter() - start
            compile_s = _number(header.get("compile_s"))
            memory = header.get("memory") if isinstance(header.get("memory"), dict) else None
            decision = Decision("hit", None, key, name, partition, self.folder, _int(header.get("payload_bytes")),
                                load_s, compile_s, max(0.0, (compile_s or 0.0) - load_s), memory,
                                _entry.loadable(header), header)
            self._emit(decision, duration_s=load_s, saved_s=decision.saved_s)
            return program, decision

        took = time.perf_counter() - start
        reason = found.reason
        first = None
        if found.status in ("corrupt", "unauthenticated"):
            first = self._record("corrupt", name, key, partition, load_s=took,
                                 reason=f"{found.reason}; {found.disposition}")
            self._warn_once("corrupt", f"xlakit refused a cache entry for {name or key} in {self.folder} "
                                       f"(partition {partition}): {found.reason}; {found.disposition}. Nothing of it "
                                       "reached XLA; the program is compiled and stored again. Each such entry is a "
                                       "'corrupt' event; this is the only warning.")
        elif found.status == "error":
            first = self._record("load_error", name, key, partition, load_s=took, reason=found.reason)
            self._warn_once("read", f"xlakit could not read its cache at {self.folder}: {found.reason}. "
                                    "Programs still run; they are compiled instead.")
        if found.status == "absent":
            self._tell_new_environment(partition)
            remote_reason = getattr(self.store, "remote_reason", None)  # a SharedStore: why the bucket's copy
            reason = (remote_reason(partition, key) if remote_reason is not None else None) \
                or f"no entry for this key in partition {partition}"
        elif found.status not in ("mismatch", "foreign", "stale"):  # those carry their own reason from the store
            reason = f"entry unusable ({found.status}: {found.reason})"
        miss = self._record("miss", name, key, partition, load_s=took, reason=reason)
        return None, first or miss

    # -- writing ---------------------------------------------------------------------------------------
    def publish(self, partition: str, key: str, header: dict[str, Any], payload: bytes, *,
                replace: bool = False, reason: str | None = None, quiet: bool = False) -> Decision:
        """Seal and store one entry; record ``store`` (with evictions) or ``store_error``.

        Args:
          header: the entry header (``name``, ``compile_s``, ``memory`` are read back into the decision).
          replace: remove an existing entry with this key first (an entry upgraded to another payload kind).
          reason: a note for the ``store`` decision and event (e.g. why the entry is not loadable elsewhere).
          quiet: record no ``store`` event (an entry rewritten with more in it after a hit was already recorded);
            failures and evictions are recorded all the same.
        Returns:
          ``store`` (``bytes`` = the entry's size as written, ``header`` = the header given plus ``key`` and
          ``partition``) or ``store_error``.
        """
        name = header.get("name")
        compile_s = _number(header.get("compile_s"))
        memory = header.get("memory") if isinstance(header.get("memory"), dict) else None
        start = time.perf_counter()
        try:
            if replace:
                self.store.remove(partition, key)
            result = self.store.put(partition, key, header, payload)
        except Exception as exc:  # noqa: BLE001 - the cache fails open
            return self._record("store_error", name, key, partition, reason=_describe(exc),
                                compile_s=compile_s)
        took = time.perf_counter() - start
        for gone in result.evicted:
            self.log.emit("evict", name=gone.name, key=gone.key, partition=gone.partition, bytes=gone.size_bytes,
                          reason=f"least recently used; cap {self.store.max_bytes} bytes", source="xlakit",
                          folder=self.folder, **self._origin)
        if not result.stored:
            decision = self._record("store_error", name, key, partition, reason=result.reason,
                                    compile_s=compile_s, duration_s=took)
            self._warn_once("write", f"xlakit could not write to its cache at {self.folder}: {result.reason}. "
                                     "Programs still run; they are compiled each time. Each failure is recorded "
                                     "as a 'store_error' event.")
            return decision
        sealed = dict(header, key=key, partition=partition)
        decision = Decision("store", reason, key, name, partition, self.folder,
                            result.size_bytes, None, compile_s, None, memory, _entry.loadable(header), sealed)
        if not quiet:
            self._emit(decision, duration_s=took)
        return decision

    def skip(self, partition: str | None, key: str | None, name: str | None, reason: str,
             compile_s: float | None = None) -> Decision:
        """Record a program compiled but deliberately not stored."""
        return self._record("skip", name, key, partition, reason=reason, compile_s=compile_s)

    def failed(self, kind: str, partition: str | None, key: str | None, name: str | None, reason: str) -> Decision:
        """Record a ``store_error`` or ``load_error`` that happened outside fetch/publish."""
        return self._record(kind, name, key, partition, reason=reason)

    def compiled(self, partition: str | None, key: str | None, name: str | None, seconds: float) -> None:
        """Record that XLA compiled a program (JAX's measured seconds)."""
        self.log.emit("compile", name=name, key=key, partition=partition, duration_s=seconds, source="xlakit",
                      folder=self.folder, **self._origin)

    def ensure_partition(self, partition: str, info: dict[str, Any]) -> None:
        """Write the partition's ``partition.json`` once per process (failures are the store's to ignore)."""
        if partition not in self._partitions:
            try:
                self.store.write_partition_info(partition, info)
            except Exception:  # noqa: BLE001 - a description file never fails a compile
                return
            self._partitions.add(partition)

    # -- helpers ---------------------------------------------------------------------------------------
    def _record(self, kind: str, name, key, partition, *, reason: str | None = None, load_s: float | None = None,
                compile_s: float | None = None, duration_s: float | None = None) -> Decision:
        decision = Decision(kind, reason, key, name, partition, self.folder, load_s=load_s, compile_s=compile_s)
        self._emit(decision, duration_s=duration_s if duration_s is not None else load_s)
        return decision

    def _emit(self, d: Decision, **fields: Any) -> None:
        memory = dict(d.memory) if d.memory is not None and d.kind in ("hit", "store") else None
        byte_count = d.bytes if d.kind in ("hit", "store") else None
        self.log.emit(d.kind, name=d.name, key=d.key, partition=d.partition, reason=d.reason, bytes=byte_count,
                      source="xlakit", folder=d.folder, memory=memory, **self._origin, **fields)

    def _tell_new_environment(self, partition: str) -> None:
        """Warn once when the folder holds programs of other environments but none of this one: after a
        jax/jaxlib upgrade every program is compiled anew, and the user should know why and how to drop the
        old entries (pytorch/xla#7771 is that report for another cache)."""
        topic = f"environment:{partition}"
        if topic in self._warned:
            return
        self._warned.add(topic)
        partitions = getattr(getattr(self.store, "objects", None), "partitions", None)
        try:
            names = partitions() if partitions is not None else []
            own = self.store.root / partition
            if not names or partition in names and any(own.glob("*.xlk")):
                return
        except Exception:  # noqa: BLE001 - a listing is advice; never fail a lookup for it
            return
        from xlakit.store.layout import is_environment_partition

        others = [n for n in names if n != partition and is_environment_partition(self.store.root, n)]
        if others:
            self._warned.add("environment")
            warnings.warn(f"xlakit's cache at {self.folder} holds programs for {len(others)} other environment(s) "
                          f"({', '.join(others[:3])}{', …' if len(others) > 3 else ''}) but none for this one "
                          f"({partition}): after a jax/jaxlib, device or XLA-flag change every program is compiled "
                          "and stored anew. `xlakit cache clear --partition NAME` removes an old environment's "
                          "entries.", RuntimeWarning, stacklevel=user_stacklevel())

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _unrunnable(header: Mapping[str, Any]) -> str | None:
    """:func:`xlakit.cache.entry.unrunnable_reason` for this process's environment of the entry's platform; None
    when either is unknown (the load itself still checks what it must)."""
    env_field = header.get("environment")
    platform = env_field.get("platform") if isinstance(env_field, Mapping) else None
    if not isinstance(platform, str) or not ("custom_calls" in header or "host_cpu" in header):
        return None
    try:
        from xlakit._jax.environment import current_environment

        return _entry.unrunnable_reason(header, current_environment(platform), callbacks=True)
    except Exception:  # noqa: BLE001 - a prediction that cannot be made leaves the decision to the load
        return None
