"""The cache feature: xlakit's store as JAX's compilation cache, explicitly or transparently.

Modules, one concept each:

* :mod:`.decision` — :class:`Decision`, the outcome of one lookup or publish, as a value.
* :mod:`.path` — :class:`CachePath`, the one fetch/publish path (transparent mode, ExecutableCache, bundles).
* :mod:`.entry` — what an entry holds: payload kinds, header fields, module text packing.
* :mod:`.handler` — :class:`StoreHandler`, the answers to JAX's compile hooks.
* :mod:`.transparent` — :class:`TransparentCache` and :func:`enable` / :func:`disable` / :func:`active`.
* :mod:`.executable` — :class:`ExecutableCache` (jit, compile, load, explain).
* :mod:`.explaining` — explanations of a lookup against a store.
* :mod:`.folder` — :class:`CacheFolder`: a cache folder as data, without JAX (CLI, report, widgets).
* :mod:`.environment` — :func:`current_environment` / :func:`current_partition` of this process (JAX).
* :mod:`.remote` — :class:`~xlakit.cache.remote.SharedStore`, a cache folder in front of a shared bucket.

:func:`open_store`, which picks a plain local store or a shared one, is defined here: a cache without a remote
(the common case, and every bundle load) never imports :mod:`.remote`.

Importing this package imports neither JAX nor pandas, nor any of its modules: each name loads its own module
on first use (a bundle load needs :mod:`.path` and :mod:`.entry`, not transparent mode or the folder view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xlakit.cache.decision import DECISION_KINDS, Decision
    from xlakit.cache.environment import current_environment, current_partition
    from xlakit.cache.executable import CacheEvent, ExecutableCache
    from xlakit.cache.folder import CacheFolder
    from xlakit.cache.path import CachePath
    from xlakit.cache.transparent import TransparentCache, active, disable, enable
    from xlakit.store import LocalStore

__all__ = ["Decision", "DECISION_KINDS", "CachePath", "CacheFolder", "ExecutableCache", "CacheEvent",
           "TransparentCache", "enable", "disable", "active", "current_environment", "current_partition", "open_store"]

from xlakit._lazy import lazy_exports  # noqa: E402 - placed by the names it serves

#: Public name -> the module that defines it.
_HOME = {
    **dict.fromkeys(("DECISION_KINDS", "Decision"), "decision"),
    **dict.fromkeys(("current_environment", "current_partition"), "environment"),
    **dict.fromkeys(("CacheEvent", "ExecutableCache"), "executable"),
    "CacheFolder": "folder",
    "CachePath": "path",
    **dict.fromkeys(("TransparentCache", "active", "disable", "enable"), "transparent"),
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals(), __all__)


def open_store(path: Any = None, *, max_bytes: int | None = None, secret: bytes | None = None,
               remote: str | None = None, remote_mode: str | None = None, remote_options: dict | None = None,
               log: Any = None, min_upload_compile_s: float = 0.0) -> LocalStore:
    """The store a cache uses: a :class:`~xlakit.cache.remote.SharedStore` when a remote is given (argument or
    ``XLAKIT_CACHE_REMOTE``, with ``XLAKIT_CACHE_REMOTE_MODE`` and ``XLAKIT_CACHE_REMOTE_OPTIONS``; see
    :func:`xlakit.store.remote.remote_settings`), else a plain :class:`~xlakit.store.LocalStore`.

    Raises:
      ValueError: a bad mode, URL (an unsupported scheme: s3, gs, file and memory are) or options (the message
        names the setting). TypeError: ``remote`` not a string or ``remote_options`` not a mapping with string
        keys. ImportError: a missing fsspec
        package for the URL (the message names the extra, e.g. ``pip install 'xlakit[s3]'``).
    """
    from xlakit.store import LocalStore
    from xlakit.store.remote import remote_settings

    found = remote_settings(remote, remote_mode, remote_options)
    if found is None:
        if remote_mode is not None and remote_mode not in ("rw", "ro"):
            raise ValueError(f"remote_mode={remote_mode!r}: use 'rw' or 'ro'")
        return LocalStore(path, max_bytes=max_bytes, secret=secret)
    from xlakit.cache.remote import SharedStore

    url, mode, options = found
    return SharedStore(path, remote=url, mode=mode, storage_options=options, max_bytes=max_bytes, secret=secret,
                       log=log, min_upload_compile_s=min_upload_compile_s)
