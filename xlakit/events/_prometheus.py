"""Prometheus counters over an :class:`~xlakit.events.EventLog`'s running totals (extra ``[metrics]``).

A custom collector reads the totals at scrape time, so no ``Counter`` object is created or registered
anywhere: registering the collector once is the only registration, and scraping twice never double counts.
Counters reset to 0 if the log is cleared (Prometheus treats that as a counter reset).

Exposed series (every one labelled ``source`` = the layer, see :data:`~xlakit.events.SOURCES`):

======================================================= ===============================================
``xlakit_executable_cache_hits_total``                  hits (xlakit, jax-persistent)
``xlakit_executable_cache_misses_total``                misses (xlakit, jax-persistent, jit)
``xlakit_executable_cache_stores_total``                entries written (xlakit, jax-persistent)
``xlakit_executable_cache_skips_total``                 compiled but deliberately not stored
``xlakit_executable_cache_evictions_total``             entries removed to stay under a byte cap
``xlakit_executable_cache_failures_total``              + label ``kind``: corrupt, load_error, store_error
``xlakit_executable_cache_load_seconds_total``          seconds looking up and loading on hits
``xlakit_executable_cache_saved_seconds_total``         recorded compile seconds minus load seconds, >= 0
``xlakit_executable_cache_stored_bytes_total``          bytes written (xlakit only; JAX reports no sizes)
``xlakit_compiles_total``                               XLA compiles (xlakit, jax), each counted once
``xlakit_compile_seconds_total``                        seconds of those compiles
``xlakit_fleet_events_total``                           + label ``kind``: remote_hit, remote_miss, upload,
                                                        upload_error, claim, wait (shared tier, coordination)
``xlakit_fleet_seconds_total``                          + label ``kind``: seconds of those (GETs, uploads,
                                                        claim+compile, waits)
``xlakit_fleet_bytes_total``                            + label ``kind``: bytes read or uploaded
======================================================= ===============================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from xlakit.events._log import EventLog
from xlakit.events._model import FLEET_KINDS

__all__ = ["collector"]

_HIT_LAYERS = ("xlakit", "jax-persistent")
_MISS_LAYERS = ("xlakit", "jax-persistent", "jit")
_STORE_LAYERS = ("xlakit", "jax-persistent")
_COMPILE_SOURCES = ("xlakit", "jax")

_INSTALL_HINT = ("xlakit.events.prometheus_collector() needs the prometheus_client package: "
                 "pip install 'xlakit[metrics]'")


def _import():
    try:
        from prometheus_client.core import CounterMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return CounterMetricFamily, Collector


def collector(log: EventLog):
    """A ``prometheus_client`` collector over ``log``'s totals; register it once, e.g. with
    ``prometheus_client.REGISTRY.register(...)``.

    Raises:
      ImportError: ``prometheus_client`` is not installed (the message says ``pip install 'xlakit[metrics]'``).
    """
    counter_family, base = _import()

    class XlakitCollector(base):  # type: ignore[misc, valid-type]
        """Counters over an xlakit event log (see :mod:`xlakit.events._prometheus`)."""

        def __init__(self) -> None:
            self.log = log

        def collect(self) -> Iterator[Any]:
            stats = self.log.stats_by_source()

            def family(name: str, doc: str, layers: tuple[str, ...], value, unit: str = ""):
                metric = counter_family(name, doc, labels=["source"], unit=unit)
                for layer in layers:
                    metric.add_metric([layer], value(stats[layer]))
                return metric

            yield family("xlakit_executable_cache_hits", "Executables loaded from a cache instead of compiled.",
                         _HIT_LAYERS, lambda s: s.counts["hit"])
            yield family("xlakit_executable_cache_misses", "Cache lookups that found no usable executable.",
                         _MISS_LAYERS, lambda s: s.counts["miss"])
            yield family("xlakit_executable_cache_stores", "Executables written to a cache.",
                         _STORE_LAYERS, lambda s: s.counts["store"])
            yield family("xlakit_executable_cache_skips", "Programs compiled but deliberately not stored.",
                         _STORE_LAYERS, lambda s: s.counts["skip"])
            yield family("xlakit_executable_cache_evictions", "Entries removed to stay under a byte cap.",
                         _STORE_LAYERS, lambda s: s.counts["evict"])
            failures = counter_family("xlakit_executable_cache_failures",
                                      "Cache entries found corrupt, unloadable, or not writable.",
                                      labels=["source", "kind"])
            for kind in ("corrupt", "load_error", "store_error"):
                failures.add_metric(["xlakit", kind], stats["xlakit"].counts[kind])
            yield failures
            yield family("xlakit_executable_cache_load_seconds", "Seconds spent looking up and loading on hits.",
                         _HIT_LAYERS, lambda s: s.load_s)
            yield family("xlakit_executable_cache_saved_seconds",
                         "Recorded compile seconds minus load seconds over hits, each floored at 0.",
                         _HIT_LAYERS, lambda s: s.saved_s)
            yield family("xlakit_executable_cache_stored_bytes", "Bytes written to the xlakit store.",
                         ("xlakit",), lambda s: s.stored_bytes)
            yield family("xlakit_compiles", "XLA compiles, each counted once.", _COMPILE_SOURCES,
                         lambda s: s.counts["compile"])
            yield family("xlakit_compile_seconds", "Seconds XLA spent compiling.", _COMPILE_SOURCES,
                         lambda s: s.compile_s)
            fleet = stats["xlakit"]
            for name, doc, values in (
                    ("xlakit_fleet_events", "Shared-store reads and uploads, coordination claims and waits.",
                     fleet.counts),
                    ("xlakit_fleet_seconds", "Seconds of shared-store reads and uploads, claims and waits.",
                     fleet.fleet_s),
                    ("xlakit_fleet_bytes", "Bytes read from or uploaded to the shared store.", fleet.fleet_bytes)):
                metric = counter_family(name, doc, labels=["source", "kind"])
                for kind in FLEET_KINDS:
                    metric.add_metric(["xlakit", kind], values[kind])
                yield metric

        def __repr__(self) -> str:
            return f"XlakitCollector({self.log!r})"

    return XlakitCollector()
