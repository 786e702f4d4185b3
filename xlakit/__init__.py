"""xlakit: reusable compiled XLA programs and visible memory for JAX users.

Two lines in a notebook::

    import xlakit
    xlakit.enable_cache()          # every jax.jit in this process is now served from xlakit's store

Importing xlakit imports neither JAX nor any widget or plotting library and changes no JAX setting;
everything heavy loads on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xlakit import events
from xlakit._version import __version__
from xlakit.events import CacheStats, Event, EventLog, cache_stats

if TYPE_CHECKING:
    from xlakit import widgets as widgets  # reached lazily by __getattr__ (imports ipywidgets)
    from xlakit._jax.platforms import platform_rules
    from xlakit._jax.serialize import DevicePlacementError
    from xlakit._jax.versions import UnsupportedJaxVersion
    from xlakit.bundle import BundleWatcher, export_bundle, load_bundle
    from xlakit.cache import Decision, ExecutableCache, TransparentCache
    from xlakit.explain import Explanation

__all__ = ["__version__", "enable_cache", "disable_cache", "cache_stats", "CacheStats", "Event", "EventLog",
           "events", "ExecutableCache", "TransparentCache", "Decision", "Explanation", "UnsupportedJaxVersion",
           "DevicePlacementError", "export_bundle", "load_bundle", "BundleWatcher", "platform_rules"]

# Public name -> (module, attribute), imported on first use so that `import xlakit` stays light.
_LAZY = {
    "ExecutableCache": ("xlakit.cache.executable", "ExecutableCache"),
    "TransparentCache": ("xlakit.cache.transparent", "TransparentCache"),
    "Decision": ("xlakit.cache.decision", "Decision"),
    "Explanation": ("xlakit.explain", "Explanation"),
    "UnsupportedJaxVersion": ("xlakit._jax.versions", "UnsupportedJaxVersion"),
    "DevicePlacementError": ("xlakit._jax.serialize", "DevicePlacementError"),
    "export_bundle": ("xlakit.bundle", "export_bundle"),
    "load_bundle": ("xlakit.bundle", "load_bundle"),
    "BundleWatcher": ("xlakit.bundle", "BundleWatcher"),
    "platform_rules": ("xlakit._jax.platforms", "platform_rules"),
}


def enable_cache(path: str | Path | None = None, max_bytes: int | str | None = None,
                 min_compile_time_s: float = 0.0, *, remote: str | None = None, remote_mode: str | None = None,
                 remote_options: dict | None = None) -> TransparentCache:
    """Serve every ``jax.jit`` compile in this process from xlakit's persistent executable store.

    The store becomes the backend of JAX's own persistent compilation cache: before each XLA compile JAX
    looks the program up by its cache key (module, jaxlib version, backend, XLA flags, compile options,
    devices); a hit loads the executable in milliseconds, a miss compiles and stores it. Unlike JAX's own
    directory cache, entries are integrity-checked and authenticated (HMAC-SHA256; SHA-256 to name damage) before
    loading, partitioned by environment (jaxlib build, platform, devices, CPU features, XLA flags), capped
    by size with least-recently-used eviction, published atomically, and every hit, miss, store, skip,
    eviction and failure is recorded in :func:`xlakit.events.log`.

    Args:
      path: cache folder; a leading ``~`` is expanded, and a missing folder is created now. Default:
        ``$XLAKIT_CACHE_DIR``, else the platform's user cache folder (``platformdirs.user_cache_dir("xlakit")``).
        The folder's path never enters a key, so a copied or remounted cache still hits.
      max_bytes: byte cap for everything under ``path`` (measured on disk): an int number of bytes, or a size
        string read like the CLI's ``--max-bytes`` (``"2GB"`` = 2*10**9 bytes, ``"500MiB"`` = 500*2**20 bytes;
        k/M/G/T powers of 1000, KiB/MiB/GiB/TiB powers of 1024); None for no cap.
      min_compile_time_s: programs that compiled in fewer seconds (a finite number >= 0) are not stored; each
        is recorded as a ``skip`` event naming this threshold. Default 0.0 stores everything (JAX's default
        drops programs under 1 s without a word). The same threshold decides which programs are uploaded to ``remote``.
      remote: share the cache through object storage: ``"s3://bucket/prefix"`` (``pip install 'xlakit[s3]'``),
        ``"gs://bucket/prefix"`` (``[gcs]``), ``"file:///shared/folder"``, ``"memory://name"``. Default
        ``$XLAKIT_CACHE_REMOTE`` (unset or empty: no remote). A local miss is read from
        ``<prefix>/v1/<partition>/<key>`` (one GET; verified — key id, HMAC, partition, key — before any byte
        is decompressed or reaches XLA; then kept in ``path``); a program stored locally is uploaded in the
        background, create-only (the first upload wins; pending uploads get up to 10 s at exit). A failing
        remote never fails a program: errors are events, and after 3 in a row the remote is off for the
        process (one warning). The HMAC secret never leaves the machine: every machine sharing the bucket
        needs the same ``XLAKIT_CACHE_SECRET``; objects signed with another are a ``remote_miss`` "signed with
        another key" and are left alone. Under ``jax.distributed`` one process compiles each program and the
        others wait for it (README, *Sharing a cache*); without it, each process may compile a program and the
        first upload wins.
      remote_mode: ``"rw"`` (default; ``$XLAKIT_CACHE_REMOTE_MODE``) or ``"ro"``: read only, no write request
        is ever sent (untrusted workers, e.g. students on a JupyterHub).
      remote_options: fsspec storage options such as ``{"endpoint_url": "http://minio:9000"}``; default
        ``$XLAKIT_CACHE_REMOTE_OPTIONS`` (a JSON object).

    Returns:
      The installed :class:`xlakit.TransparentCache` (``.path``, ``.store``, ``.entries()``, ``.stats()``).

    Raises:
      xlakit.UnsupportedJaxVersion: this JAX lacks the private hooks used here; the message names the
        supported versions.
      TypeError: ``path`` is not a str/``os.PathLike``/None, ``max_bytes`` is not an int/size string/None (a
        bool or float included), or ``min_compile_time_s`` is not a number; the message says what to pass.
      ValueError: ``max_bytes`` <= 0, over 2**63 - 1 or an unreadable size string, ``min_compile_time_s`` < 0 or
        not finite, or a bad ``remote``/``remote_mode``/``remote_options`` (or environment variable; the message
        names it).
      ImportError: the package for the remote's protocol is missing (the message names the extra).
      xlakit.store.CacheFolderError: ``path`` is a file or cannot be created (an ``OSError``; the message names
        the path and what to do). An existing folder that cannot be written is used as it is: its entries are
        served, and failed writes are ``store_error`` events with one warning.

    Calling it again replaces the previous configuration. :func:`disable_cache` restores JAX's settings.
    Programs already compiled in this process stay in JAX's in-memory cache and are not re-read.
    """
    from xlakit.cache import transparent

    return transparent.enable(path, max_bytes=max_bytes, min_compile_time_s=min_compile_time_s, remote=remote,
                              remote_mode=remote_mode, remote_options=remote_options)


def disable_cache() -> bool:
    """Unhook xlakit from JAX and restore the JAX settings :func:`enable_cache` changed.

    Returns:
      True if a cache was enabled, False if there was nothing to disable.
    """
    import sys

    transparent = sys.modules.get("xlakit.cache.transparent")
    return bool(transparent and transparent.disable())


def load_ipython_extension(ipython) -> None:
    """``%load_ext xlakit``: registers the ``%xlakit`` and ``%%xlakit`` magics (see :mod:`xlakit.ipython`)."""
    from xlakit.ipython import load_ipython_extension as load

    load(ipython)


# Subpackages reachable as attributes after a bare ``import xlakit``, each imported on first use.
_SUBPACKAGES = frozenset({"bundle", "cache", "cli", "demo", "explain", "ipython", "memory", "report", "store",
                          "view", "widgets"})


def __getattr__(name: str):
    # Loaded on first use so that `import xlakit` stays light.
    if name in _SUBPACKAGES:  # ``xlakit.memory.peak(...)``, ``xlakit.widgets.dashboard()`` after ``import xlakit``
        import importlib

        return importlib.import_module(f"xlakit.{name}")
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'xlakit' has no attribute {name!r}")
