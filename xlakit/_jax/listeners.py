"""JAX's own signals as xlakit events: ``jax.monitoring``, JAX's compiler/cache loggers, tracing-cache misses.

What is listened to (checked on jax 0.10.2; every hook is optional and missing ones only mean fewer events):

* ``jax.monitoring`` durations ``/jax/core/compile/{jaxpr_trace_duration, jaxpr_to_mlir_module_duration,
  backend_compile_duration}`` (they carry ``fun_name``) become ``trace``, ``lower`` and ``compile`` events
  with ``source="jax"``. Names are given the form JAX compiles the module under — ``jit(f)`` and the traced
  ``f`` both become ``jit_f`` — so one function has one name on every layer.
* ``/jax/compilation_cache/cache_hits`` and ``cache_retrieval_time_sec`` become a ``hit`` with
  ``source="jax-persistent"``. The hit event carries no function name; the name and key come from the
  ``jax._src.compiler`` record "Persistent compilation cache hit for '%s' with key %r", which JAX logs just
  before (at DEBUG unless ``jax_log_compiles``).
* The records "PERSISTENT COMPILATION CACHE MISS ...", "'%s' took at least ... (%.2fs)", "Not writing
  persistent cache entry ...", "Writing %s to persistent compilation cache ..." (``jax._src.compiler`` and
  ``jax._src.compilation_cache``) and "Evicting cache entry ..." (``jax._src.lru_cache``) become the
  ``miss``, ``compile``, ``skip``, ``store`` and ``evict`` of JAX's persistent cache — including the
  programs JAX silently declines to store (under ``jax_persistent_cache_min_compile_time_secs``).
* Each trace of a function traced before is also a ``recompile`` (``source="jit"``) with what changed in its
  signature (:mod:`xlakit._jax.retrace`), read from JAX's frames at trace time.
* With ``jax_explain_cache_misses`` on, the WARNING "TRACING CACHE MISS at ..." of
  ``jax._src.interpreters.partial_eval`` becomes a ``miss`` with ``source="jit"`` and JAX's explanation as
  the reason. In-process cache *hits* emit nothing in JAX, so there are none to record.

DEBUG records are captured by a :class:`logging.Filter` on each logger, with the logger's level lowered
only as far as needed. Records below the level the user had effectively configured are suppressed after
being read, so nothing new is printed; :meth:`JaxListeners.uninstall` restores each level.

One event per action, never two (the rules that keep the three layers apart):

* While xlakit's store answers JAX's cache hooks (transparent mode or an ExecutableCache route), JAX still
  logs "cache hit"/"CACHE MISS" and fires ``cache_hits`` for xlakit's lookups. Those belong to the xlakit
  layer, which recorded them itself, so they are ignored. A compile step is on xlakit's layer when the
  current handler of :mod:`xlakit._jax.hooks` is set as the
  step begins, or when xlakit appends a lookup event on the compiling thread during the step.
* ``backend_compile_duration`` spans JAX's whole compile step (cache lookup + compile or load + cache
  write), and JAX reports it even when the step raised. It becomes a ``compile`` event only when the step
  really compiled — no layer served the program (a hit is a load), and on xlakit's layer the lookup
  returned (JAX logged its miss; xlakit's explain probe stops the step by raising instead) — and no one
  recorded that compile already: xlakit's handler records JAX's measured compile seconds itself (seen on
  the log, or trusted when the handler writes to another log); for JAX's own cache the exact seconds
  come from its "took at least" record. A compile through a handler that records nothing (xlakit's
  pass-through) is recorded here. So summing ``compile`` durations over all sources counts each XLA
  compile once.
* JAX's ``compile_time_saved_sec`` is never used as seconds saved (it is negative on CPU). For a JAX
  persistent hit, ``saved_s`` = the entry's recorded compile seconds (JAX stores whole seconds, truncated,
  recovered as ``compile_time_saved_sec + cache_retrieval_time_sec``) minus the measured load seconds,
  floored at 0 — so a program that compiled in under 1 s reports 0 saved.

Listeners never raise into JAX: a signal that cannot be read is recorded in :attr:`JaxListeners.errors`
and warned about once.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, Protocol

from xlakit._jax.jax_signals import (  # noqa: F401 - the names JAX signals are read by
    _BACKEND_COMPILE,
    _CACHE_HITS,
    _CACHE_WRITES,
    _LOGGERS,
    _LOWER,
    _MSG_CALLBACKS,
    _MSG_EVICT,
    _MSG_HIT,
    _MSG_MISS,
    _MSG_NO_CACHE,
    _MSG_NOT_PROCESS_0,
    _MSG_TOO_FAST,
    _MSG_TOO_SMALL,
    _MSG_TOOK,
    _MSG_WRITING,
    _RETRIEVAL,
    _SAVED,
    _TRACE,
    _TRACING_MISS,
    _USE_CACHE,
    _compiled_unrecorded,
    _jax_cache_enabled,
    _miss_reason,
    _name_from_key,
    _registered,
    _Step,
    module_name,
    tracing_miss_name,
)
from xlakit._jax.retrace import TRACKER


class Sink(Protocol):
    """Where the listeners write: an :class:`xlakit.events.EventLog` (or anything with these two methods).
    Given by the caller (:func:`xlakit.events.install_listeners`), so this adapter never imports the events
    package."""

    def emit(self, kind: str, **fields: Any) -> Any: ...

    def subscribe(self, observer: Callable[[Any], None]) -> Callable[[], None]: ...

__all__ = ["JaxListeners", "install", "uninstall", "installed", "acquire"]

_MAX_ERRORS = 100


class _Capture(logging.Filter):
    """Reads JAX's log records for the listeners; lets through only what the user would have seen.

    ``user_level`` is the logger's own level before the listeners lowered it (None if they did not): a
    record below the level the logger would have without the listeners is suppressed after being read.
    The parent's level is read at each record, so a ``logging.basicConfig(level=DEBUG)`` made later is
    still honoured.
    """

    def __init__(self, owner: JaxListeners, user_level: int | None) -> None:
        super().__init__()
        self.owner = owner
        self.user_level = user_level

    def filter(self, record: logging.LogRecord) -> bool:
        self.owner._guard(str(record.msg)[:60], self.owner._on_record, record)
        if self.user_level is None:
            return True  # the level is the user's own: the logger created only what they asked for
        logger = logging.getLogger(record.name)
        wanted = self.user_level or (logger.parent.getEffectiveLevel() if logger.parent else logging.WARNING)
        return record.levelno >= wanted


class JaxListeners:
    """The installed listeners: JAX monitoring callbacks plus logger filters, writing to one :class:`EventLog`.

    Use :func:`install` (or :func:`xlakit.events.install_listeners`); one instance is installed at a time.

    Attributes:
      log: the :class:`~xlakit.events.EventLog` events go to.
      errors: ``"signal: ExcType: message"`` for signals that could not be turned into events (newest 100).
    """

    def __init__(self, log: Sink) -> None:
        self.log = log
        self.errors: collections.deque[str] = collections.deque(maxlen=_MAX_ERRORS)
        self._local = threading.local()
        self._filters: dict[str, tuple[_Capture, int, int | None]] = {}  # logger -> (filter, old, set level)
        self._unsubscribe: Callable[[], None] | None = None
        self._warned = False
        self.installed = False

    # -- install / uninstall ---------------------------------------------------------------------------
    def install(self) -> None:
        """Register the callbacks, filters and the log observer that are not registered yet (idempotent)."""
        from jax._src import monitoring

        if not _registered(monitoring, "get_event_listeners", self._on_event):
            monitoring.register_event_listener(self._on_event)
        if not _registered(monitoring, "get_event_duration_listeners", self._on_duration):
            monitoring.register_event_duration_secs_listener(self._on_duration)  # type: ignore[arg-type]
        for name, needed in _LOGGERS.items():
            logger = logging.getLogger(name)
            if name in self._filters:  # installed before: put back only what someone removed
                capture, _, set_level = self._filters[name]
                if capture not in logger.filters:
                    logger.addFilter(capture)
                if set_level is not None and logger.getEffectiveLevel() > set_level:
                    logger.setLevel(set_level)
                continue
            old = logger.level
            lower = logger.getEffectiveLevel() > needed
            capture = _Capture(self, user_level=old if lower else None)
            logger.addFilter(capture)
            if lower:
                logger.setLevel(needed)
            self._filters[name] = (capture, old, needed if lower else None)
        if self._unsubscribe is None:
            self._unsubscribe = self.log.subscribe(self._observe)
        self.installed = True

    def uninstall(self) -> None:
        """Remove every callback, filter and observer this instance added and restore each logger's level.

        Safe after ``jax.monitoring.clear_event_listeners()`` (which removes some listener kinds and not
        others): a callback already gone is skipped. A logger level the user changed meanwhile is kept.
        """
        from jax._src import monitoring

        for callback, getter, removers in (
                (self._on_event, "get_event_listeners",
                 ("unregister_event_listener", "_unregister_event_listener_by_callback")),
                (self._on_duration, "get_event_duration_listeners",
                 ("unregister_event_duration_listener", "_unregister_event_duration_listener_by_callback"))):
            remove = next((getattr(monitoring, r) for r in removers if hasattr(monitoring, r)), None)
            for _ in range(8):  # registered at most once by install(); the bound guards a broken remover
                if remove is None or not _registered(monitoring, getter, callback):
                    break
                try:
                    remove(callback)
                except (AssertionError, ValueError):  # already gone (e.g. clear_event_listeners)
                    break
        for name, (capture, old, set_level) in self._filters.items():
            logger = logging.getLogger(name)
            logger.removeFilter(capture)
            if set_level is not None and logger.level == set_level:
                logger.setLevel(old)
        self._filters.clear()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.installed = False

    # -- helpers ---------------------------------------------------------------------------------------
    def _guard(self, what: str, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a listener must never break a compile
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            if not self._warned:
                self._warned = True
                warnings.warn(f"xlakit could not read a JAX signal ({what}): {type(exc).__name__}: {exc}. "
                              "Programs are unaffected; see xlakit._jax.listeners.installed().errors.",
                              RuntimeWarning, stacklevel=2)

    def _emit(self, kind: str, source: str, **fields: Any) -> None:
        self.log.emit(kind, source=source, **fields)

    def _step(self) -> _Step:
        step = getattr(self._local, "step", None)
        if step is None:
            step = self._local.step = self._new_step(keyed=False)
        return step

    def _new_step(self, keyed: bool) -> _Step:
        handler = _xlakit_handler()
        if handler is not None:
            log = getattr(handler, "log", None)
            return _Step("xlakit", keyed, xlakit_elsewhere=log is not None and log is not self.log)
        return _Step("jax-persistent" if _jax_cache_enabled() else None, keyed)

    def _flush(self, step: _Step, name: str | None = None) -> None:
        if step.hit_pending is not None:
            fields, step.hit_pending = step.hit_pending, None
            self._emit("hit", "jax-persistent", name=fields.pop("name") or name, **fields)
        for fields in step.pending:
            self._emit(fields.pop("kind"), "jax-persistent", **{"name": name, **fields})
        step.pending = []

    def _observe(self, event: Any) -> None:
        """Log observer: an xlakit event on this thread means xlakit answers the compile in progress."""
        step = getattr(self._local, "step", None)  # only inside a compile step JAX has begun
        if step is not None and event.source == "xlakit":
            if event.kind in ("hit", "miss", "corrupt", "load_error"):
                step.layer = "xlakit"
            elif event.kind == "compile":
                step.xlakit_compiled = True

    # -- jax.monitoring callbacks ----------------------------------------------------------------------
    def _on_event(self, event: str, **kwargs: Any) -> None:
        self._guard(event, self._handle_event, event, **kwargs)

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        self._guard(event, self._handle_duration, event, duration, **kwargs)

    def _handle_event(self, event: str, **kwargs: Any) -> None:
        if event == _USE_CACHE:  # a compile step with a cache key begins
            old = getattr(self._local, "step", None)
            if old is not None:
                self._flush(old)  # the previous step never reached backend_compile_duration
            self._local.step = self._new_step(keyed=True)
        elif event == _CACHE_HITS:
            self._step().served = True
        elif event == _CACHE_WRITES:
            step = self._step()
            if step.layer == "jax-persistent":
                self._emit("store", "jax-persistent", name=step.write_name or _name_from_key(step.write_key),
                           key=step.write_key)

    def _handle_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        fun_name = kwargs.get("fun_name")
        if event == _TRACE:
            name = module_name(fun_name, wrap="jit")
            TRACKER.on_trace(self.log.emit, name, fun_name)  # a retrace of a function seen before: what changed
            self._emit("trace", "jax", name=name, duration_s=float(duration))
        elif event == _LOWER:
            self._emit("lower", "jax", name=module_name(fun_name), duration_s=float(duration))
        elif event == _SAVED:
            self._step().jax_saved_s = float(duration)
        elif event == _RETRIEVAL:
            step = self._step()
            if step.layer == "jax-persistent" and step.served:
                load_s = float(duration)
                fields: dict[str, Any] = {"name": step.hit_name, "key": step.hit_key, "duration_s": load_s}
                if step.jax_saved_s is not None:
                    # JAX computed saved = recorded - retrieval with this same retrieval time; the recorded
                    # compile time is a whole number of seconds.
                    recorded = round(step.jax_saved_s + load_s)
                    fields["saved_s"] = max(0.0, recorded - load_s)
                    fields["reason"] = f"JAX recorded {recorded} s of compile time (whole seconds, truncated)"
                if step.hit_name is None:
                    step.hit_pending = fields  # named at the end of the step, from fun_name
                else:
                    self._emit("hit", "jax-persistent", **fields)
        elif event == _BACKEND_COMPILE:
            # No step: the compile had no cache key, so no cache layer saw it.
            step = getattr(self._local, "step", None) or _Step(None)
            self._local.step = None
            name = module_name(fun_name)
            if _compiled_unrecorded(step):
                self._emit("compile", "jax", name=name, duration_s=float(duration))
            self._flush(step, name)

    # -- logger records --------------------------------------------------------------------------------
    def _on_record(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if not isinstance(msg, str):
            return
        args: tuple[Any, ...] = record.args if isinstance(record.args, tuple) else ()
        if msg.startswith(_TRACING_MISS):
            self._tracing_miss(record.getMessage())
            return
        if msg not in _PERSISTENT_MESSAGES:
            return
        step = self._step()
        if msg == _MSG_MISS:
            step.missed = True  # on every layer: JAX logs the miss after any cache's lookup returned nothing
        if msg == _MSG_NO_CACHE:
            step.layer = None  # JAX's cache is configured but could not be initialised: no lookup happened
            return
        if step.layer != "jax-persistent":
            return  # xlakit's lookups (recorded by xlakit), or no persistent cache in use
        if msg == _MSG_HIT:
            step.hit_name, step.hit_key = str(args[0]), str(args[1])
        elif msg == _MSG_MISS:
            self._emit("miss", "jax-persistent", name=str(args[0]), key=str(args[1]), reason=_miss_reason())
        elif msg == _MSG_TOOK:
            self._emit("compile", "jax", name=str(args[0]), duration_s=float(args[2]))
            step.compile_recorded = True
        elif msg == _MSG_TOO_FAST:
            name, threshold, took = str(args[0]), float(args[1]), float(args[2])
            self._emit("compile", "jax", name=name, duration_s=took)
            step.compile_recorded = True
            self._emit("skip", "jax-persistent", name=name,
                       reason=f"compiled in {took:.3f} s, under jax_persistent_cache_min_compile_time_secs="
                              f"{threshold:g} s")
        elif msg == _MSG_CALLBACKS:
            # No compile seconds here: emit the skip after the step's compile event.
            step.pending.append({"kind": "skip", "name": str(args[0]),
                                 "reason": "the program uses host callbacks (jax.debug.print, io_callback, "
                                           "pure_callback); JAX does not store those"})
        elif msg == _MSG_NOT_PROCESS_0:
            step.pending.append({"kind": "skip", "reason": "only process 0 writes JAX's persistent cache"})
        elif msg == _MSG_WRITING:
            step.write_name, step.write_key = str(args[0]), str(args[1])
        elif msg == _MSG_TOO_SMALL:
            key, size, threshold = str(args[0]), int(args[1]), int(args[2])
            self._emit("skip", "jax-persistent", name=_name_from_key(key), key=key, bytes=size,
                       reason=f"entry of {size} bytes, under jax_persistent_cache_min_entry_size_bytes="
                              f"{threshold}")
        elif msg == _MSG_EVICT:
            key, size, target = str(args[0]), int(args[1]), int(args[2])
            self._emit("evict", "jax-persistent", name=_name_from_key(key), key=key, bytes=size,
                       reason=f"least recently used; JAX's cache trimmed to {target} bytes "
                              "(jax_compilation_cache_max_size)")

    def _tracing_miss(self, text: str) -> None:
        self._emit("miss", "jit", name=module_name(tracing_miss_name(text), wrap="jit"),
                   reason=text[len(_TRACING_MISS):].strip())


_PERSISTENT_MESSAGES = frozenset({_MSG_HIT, _MSG_MISS, _MSG_TOOK, _MSG_TOO_FAST, _MSG_CALLBACKS, _MSG_NOT_PROCESS_0,
                                  _MSG_WRITING, _MSG_TOO_SMALL, _MSG_NO_CACHE, _MSG_EVICT})


def _xlakit_handler() -> Any:
    """The xlakit handler that answers a compile starting now on this thread, or None (JAX's own cache)."""
    hooks = sys.modules.get("xlakit._jax.hooks")  # transparent mode is the hooks' default handler
    if hooks is not None and hooks.installed():
        return hooks.current_handler()
    return None


_lock = threading.RLock()
_installed: JaxListeners | None = None
_explicit = False
_record_users = 0


def installed() -> JaxListeners | None:
    """The installed :class:`JaxListeners`, or None."""
    return _installed


def _ensure(log: Sink) -> JaxListeners:
    global _installed
    if _installed is not None and _installed.log is not log:
        _installed.uninstall()
        _installed = None
    if _installed is None:
        _installed = JaxListeners(log)
    _installed.install()  # idempotent; re-adds anything someone removed
    return _installed


def install(log: Sink) -> JaxListeners:
    """Install the listeners, writing to ``log`` (an event sink such as :func:`xlakit.events.log`).

    See the module docstring.

    Idempotent: a second call adds nothing (and re-adds a callback that ``clear_event_listeners`` removed).
    With another ``log``, the listeners move to it.
    """
    global _explicit
    with _lock:
        if log is None:
            raise TypeError("install() needs the event log to write to, e.g. xlakit.events.log()")
        listeners = _ensure(log)
        _explicit = True
        return listeners


def uninstall() -> bool:
    """Remove everything the listeners added (also ends the JAX capture of open ``record`` blocks).

    Returns:
      True if listeners were installed.
    """
    global _installed, _explicit, _record_users
    with _lock:
        if _installed is None:
            return False
        _installed.uninstall()
        _installed = None
        _explicit = False
        _record_users = 0
        return True


def acquire(log: Sink) -> Callable[[], None]:
    """Install the listeners for a :func:`xlakit.events.record` block; returns the matching release.

    The listeners stay installed while any block holds them or :func:`install` was called explicitly.
    """
    global _record_users
    with _lock:
        # Listeners installed explicitly on another log stay there: a record block never moves them.
        _ensure(_installed.log if _installed is not None else log)
        _record_users += 1
        generation = _installed

    released = False

    def release() -> None:
        global _record_users, _installed
        nonlocal released
        with _lock:
            if released or _installed is not generation:  # already released, or uninstalled meanwhile
                return
            released = True
            _record_users -= 1
            if _record_users == 0 and not _explicit and _installed is not None:
                _installed.uninstall()
                _installed = None

    return release
