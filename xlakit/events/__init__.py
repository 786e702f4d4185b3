"""Events: one record per cache or compile action, kept in a bounded, thread-safe log.

Every lookup, store, skip, eviction and failure that xlakit performs becomes an :class:`Event`, appended to
the process-wide :func:`log`. :func:`install_listeners` adds JAX's own signals to the same log: its
``jax.monitoring`` durations (trace, lower, compile), its persistent-cache hits, misses, writes and
evictions (with function names, which JAX's monitoring events lack), and in-process tracing-cache misses
when ``jax_explain_cache_misses`` is on. Observers (widgets, metrics) are called on append — push, not poll.

Kinds (``Event.kind``):

=========== ===========================================================================================
hit         an executable was loaded from a cache; ``duration_s`` = lookup + load seconds; ``saved_s`` =
            the entry's recorded compile seconds minus those, floored at 0
miss        no usable entry; ``reason`` says why (absent, other environment, nearest entry, jit explanation)
compile     XLA compiled a program; ``duration_s`` = compile seconds as measured by JAX (one event per
            compile, see :mod:`xlakit.events._stats`)
store       an entry was published; ``bytes`` = its size on disk (None for JAX's cache, which does not say)
skip        a program was compiled but deliberately not stored; ``reason`` names the rule
corrupt     an entry failed its integrity/authenticity check and was quarantined
evict       an entry was removed to stay under the byte cap; ``bytes`` = its size
load_error  an entry passed its checks but XLA refused to load it, or the store could not be read
store_error the store could not be written (read-only folder, full disk, ...)
trace       JAX traced a Python function to a jaxpr; ``duration_s`` from ``jax.monitoring``
lower       JAX lowered a jaxpr to a StableHLO module; ``duration_s`` from ``jax.monitoring``
remote_hit  a program missing locally was read from the shared (remote) store, verified and kept locally;
            ``duration_s`` = the GET's seconds, ``bytes`` = object size, ``folder`` = the remote URL
remote_miss the remote store has no usable object (absent, or ``reason``: "signed with another key")
upload      an entry was uploaded (create-only); ``reason`` says "already existed" when another process won
upload_error an upload failed (or was abandoned at exit); the program is unaffected
claim       under ``jax.distributed``, this process claimed a program and compiled it for all processes;
            ``duration_s`` = claim + compile + upload seconds
wait        this process waited for another's compile; ``duration_s`` = seconds waited; ``reason`` is set
            when the wait ended without a program (timeout, claimant failed) and this process compiled
recompile   JAX retraced a function it had traced before in this process (``source="jit"``); ``changes``
            lists what differs from the closest signature already compiled for it (argument path, shape,
            dtype, weak type, static value, pytree structure, sharding, global config, positional vs keyword;
            the closest = fewest differing attributes; ``seen`` when the new
            value was compiled before in another combination), ``reason`` says it in one line. Recorded
            while the JAX listeners are installed (:func:`record`, :func:`install_listeners`)
set_aside   ``enable_cache`` set aside JAX's own configured persistent cache (``source="jax-persistent"``,
            ``folder`` = its folder, from ``jax_compilation_cache_dir`` / ``JAX_COMPILATION_CACHE_DIR``): not
            read or written while xlakit's cache is enabled; ``disable_cache`` hands it back. ``reason`` says
            what to do
=========== ===========================================================================================

Every event of a program also says whose program it is: ``origin`` ``"user"`` or ``"library"`` (JAX's own
helpers, jitted inside jax/flax/optax), and ``site``, the first user frame (see :mod:`xlakit.events._origin`).

Sources (``Event.source``, a closed set — the three cache layers stay distinguishable):

============== ========================================================================================
xlakit         xlakit's own executable store
jax-persistent JAX's own persistent compilation cache (``jax_compilation_cache_dir``)
jit            JAX's in-process tracing cache (misses, only with ``jax_explain_cache_misses``; its hits
               emit nothing anywhere)
jax            JAX's compile pipeline as measured by ``jax.monitoring``: trace, lower, compile
============== ========================================================================================

Importing this package imports neither JAX nor pandas nor prometheus_client; each loads on first use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from xlakit.events._calls import CallDecision
from xlakit.events._log import EventLog, Observer
from xlakit.events._model import CACHE_SOURCES, FAILURE_KINDS, FLEET_KINDS, KINDS, SOURCES, Event
from xlakit.events._stats import LIBRARY_ROW, CacheStats, Summary, SummaryRow

if TYPE_CHECKING:
    from xlakit._jax.listeners import JaxListeners

__all__ = ["KINDS", "FLEET_KINDS", "SOURCES", "CACHE_SOURCES", "FAILURE_KINDS", "Event", "EventLog", "Observer",
           "CacheStats", "Summary", "SummaryRow", "LIBRARY_ROW", "CallDecision", "RecompileWarning", "log",
           "cache_stats", "record", "load", "last", "recompiles", "warn_recompiles", "install_listeners",
           "uninstall_listeners", "prometheus_collector"]

_LOG = EventLog()
_MAX_AFTER = 10**9  # warn_recompiles(after=...): more recompiles than any program makes


def log() -> EventLog:
    """The process-wide event log that xlakit's cache, bundle and memory code and the JAX listeners write to."""
    return _LOG


def cache_stats(source: str | None = None) -> CacheStats:
    """Counts, compile/load seconds and seconds saved for this process; see :class:`CacheStats`.

    Args:
      source: one layer (:data:`SOURCES`), or None for all sources together.

    Raises:
      ValueError: an unknown source. TypeError: a source that is not a string.
    """
    return _LOG.stats(source)


def last(fn: Any, since: float | None = None, log: EventLog | None = None) -> CallDecision | None:
    """The latest decision for a jitted function in ``log`` (default: the process-wide :func:`log`).

    ``fn`` is the ``jax.jit`` object, the Python function or its name. The answer is ``hit``, ``miss`` (with
    the reason), ``compiled`` or ``recompiled`` (with what changed); see :meth:`EventLog.last`. To assert that
    a warm call compiled nothing::

        t = time.monotonic()
        step(state, batch)
        decision = xlakit.events.last(step, since=t)
        assert decision is None or not decision.compiled   # None: JAX's in-process cache answered

    Raises:
      TypeError: ``fn`` is neither a name nor a callable.
    """
    return _log_arg(log, "log").last(fn, since=since)


def recompiles(log: EventLog | None = None):
    """Which functions recompiled, and why: a ``pandas.DataFrame``, one row per function name (two functions of
    one name, such as two lambdas, share a row; their events stay apart), most recompiles first.

    Columns: ``function`` (event name, ``jit_step``), ``origin`` / ``site`` (whose program, first user frame),
    ``recompiles`` (retraces after the first trace), ``compile_s`` (seconds XLA spent compiling those
    retraces), ``argument`` and ``what`` (the change seen most often: an argument path such as ``x`` or
    ``batch['image']`` and ``shape`` / ``dtype`` / ``weak_type`` / ``static`` / ``structure`` / ``sharding``
    / ``config`` / ``function``; arguments that changed with it in each of those recompiles are named too,
    ``x, y``), ``values_seen``
    (that argument's successive values, e.g. ``float32[8], float32[16]``; with several arguments, each after
    its name: ``x: float32[3], float32[5]; y: float32[4], float32[6]``) and ``last_change`` (the latest
    recompile's reason).

    Built from the ``recompile`` events of ``log`` (default: the process-wide :func:`log`); those are
    recorded while the JAX listeners are installed (:func:`record`, :func:`install_listeners`). A
    :class:`RecompileWarning` is issued once per function that recompiles more than 5 times within 60 s
    (:func:`warn_recompiles` changes or turns off the threshold).
    """
    return _log_arg(log, "log").recompiles()


def warn_recompiles(after: int | None = 5, window_s: float = 60.0) -> None:
    """Set when a :class:`RecompileWarning` is issued: once per function that recompiles more than ``after``
    times within ``window_s`` seconds (default 5 in 60 s); ``after=None`` turns the warning off.

    Raises:
      TypeError: ``after`` is not an int (1.5, NaN: a count, never compared as a float) nor None, or ``window_s``
        is not a number. ValueError: ``after`` outside 1..10**9, or ``window_s`` not a finite number of seconds
        > 0 and at most 10**9.
    """
    from xlakit._units import check_int, check_seconds

    if isinstance(after, int) and not isinstance(after, bool) and after < 1:
        raise ValueError(f"after must be at least 1 recompile (or None to turn the warning off), got {after}")
    if after is not None:
        # an int: after=nan compared False with every count, so no warning was ever issued; the bound keeps the
        # tracker's deque of after + 1 times within what a deque holds
        check_int(after, "after", minimum=1, maximum=_MAX_AFTER, what="number of recompiles (or None: no warning)")
    window = check_seconds(window_s, "window_s", positive=True)
    from xlakit._jax.retrace import TRACKER

    TRACKER.warn_after, TRACKER.window_s = after, window


def __getattr__(name: str) -> Any:
    if name == "RecompileWarning":  # defined beside the tracker that issues it; imports no JAX
        from xlakit._jax.retrace import RecompileWarning

        return RecompileWarning
    raise AttributeError(f"module 'xlakit.events' has no attribute {name!r}")


def _log_arg(log: Any, name: str) -> EventLog:
    """``log``, or the process-wide log for None; anything but an :class:`EventLog` is a TypeError naming ``name``
    (an int raised a bare AttributeError, or failed only when a Prometheus server scraped it)."""
    if log is None:
        return _LOG
    if not isinstance(log, EventLog):
        raise TypeError(f"{name} must be an xlakit.events.EventLog (or None: the process-wide log), got "
                        f"{type(log).__name__}")
    return log


def load(path: str | os.PathLike, maxlen: int | None = None) -> EventLog:
    """:meth:`EventLog.load`: a new log from a JSON-lines file written by :meth:`EventLog.save` (``maxlen``: an
    int >= 1, or None for every event in the file)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be the events file (a str or pathlib.Path) written by EventLog.save, got "
                        f"{type(path).__name__}")
    return EventLog.load(path, maxlen=maxlen)


@contextlib.contextmanager
def record(*, jax_signals: bool = True, maxlen: int = 100_000) -> Iterator[EventLog]:
    """Collect what happens inside a ``with`` block into a fresh :class:`EventLog`::

        with xlakit.events.record() as rec:
            train_step(state, batch)
        rec.summary()

    The returned log receives every event appended to the process-wide :func:`log` while the block runs
    (from any thread), and nothing from before or after; its totals cover only those events. A bundle keeps
    loading in the background after ``load_bundle`` returns: to record all of its events, call
    ``load_bundle(path).wait()`` inside the block.

    Args:
      jax_signals: also capture JAX's own signals, by installing the JAX listeners for the block if they are
        not installed already (this imports JAX). They are removed at the end unless they were installed
        before or another ``record`` block still uses them.
      maxlen: bound of the returned log (an int from 1 to 2**63-1; else TypeError / ValueError naming it, before
        anything is installed).
    """
    from xlakit._units import check_flag

    check_flag(jax_signals, "jax_signals")  # "no" is truthy
    captured = EventLog(maxlen=maxlen)
    release = None
    if jax_signals:
        from xlakit._jax import listeners

        release = listeners.acquire(_LOG)
    unsubscribe = _LOG.subscribe(captured.append)  # type: ignore[arg-type]
    try:
        yield captured
    finally:
        unsubscribe()
        if release is not None:
            release()


def install_listeners(target: EventLog | None = None) -> JaxListeners:
    """Turn JAX's own signals into events in ``target`` (default: the process-wide :func:`log`).

    Idempotent: installing again changes nothing (it re-adds a listener that someone removed with
    ``jax.monitoring.clear_event_listeners``); installing with another log moves the listeners there.
    Imports JAX. See :mod:`xlakit._jax.listeners` for what is captured and how duplicates are avoided.

    Returns:
      The installed :class:`~xlakit._jax.listeners.JaxListeners` (``.errors`` lists signals it could not read).
    """
    from xlakit._jax import listeners

    return listeners.install(_log_arg(target, "target"))


def uninstall_listeners() -> bool:
    """Remove every JAX listener, logger filter and logger level :func:`install_listeners` added.

    Returns:
      True if listeners were installed.
    """
    import sys

    listeners = sys.modules.get("xlakit._jax.listeners")
    return bool(listeners and listeners.uninstall())


def prometheus_collector(target: EventLog | None = None):
    """A Prometheus collector with counters over ``target``'s totals (default: the process-wide :func:`log`).

    Register it once: ``prometheus_client.REGISTRY.register(xlakit.events.prometheus_collector())``.
    Series: ``xlakit_executable_cache_{hits,misses,stores,skips,evictions,failures}_total``,
    ``xlakit_executable_cache_{load,saved}_seconds_total``, ``xlakit_executable_cache_stored_bytes_total``,
    ``xlakit_compiles_total`` and ``xlakit_compile_seconds_total``, each labelled ``source``.

    Raises:
      ImportError: ``prometheus_client`` is missing; install the extra: ``pip install 'xlakit[metrics]'``.
    """
    from xlakit.events import _prometheus

    return _prometheus.collector(_log_arg(target, "target"))
