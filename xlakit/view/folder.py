"""What the views need from a cache folder, on :class:`xlakit.cache.CacheFolder` (no JAX until explaining).

The CacheBrowser, the dashboard, the memory breakdown of a cache and the report list, verify, prune and
evict entries through a :class:`~xlakit.cache.CacheFolder`: listing a cache never installs JAX hooks or
changes how the process compiles. An :class:`~xlakit.cache.ExecutableCache` is made only to explain (the key
and the current environment need JAX), and closed right after.

This module is an adapter over the folder API for what it does not offer yet (each is a candidate for
``xlakit.cache.folder``):

* :func:`entries_frame` — ``CacheFolder.entries()`` plus a ``signature`` column read from the headers;
* :func:`evict` — remove one entry by hand, recorded as an ``evict`` event;
* :func:`current_environment` — the environment an entry is explained against.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["as_folder", "entries_frame", "evict", "explainer", "current_environment", "NO_SIGNATURE"]

#: What the signature column says for an entry whose header records no argument signature.
NO_SIGNATURE = "arguments not recorded"


def as_folder(cache: Any = None, *, who: str = "this view") -> Any:
    """The :class:`~xlakit.cache.CacheFolder` to show for ``cache``.

    Args:
      cache: an :class:`~xlakit.ExecutableCache` or :class:`~xlakit.TransparentCache` (both are CacheFolders,
        used as they are), a CacheFolder, a cache folder path (str or ``os.PathLike``; opened without JAX), a
        ``LocalStore``, or None for the enabled transparent cache (:func:`xlakit.cache.active`).
      who: the caller's name, for error messages.

    Raises:
      ValueError: ``cache`` is None and no transparent cache is enabled.
      TypeError: ``cache`` is none of the above.
    """
    from xlakit.cache import CacheFolder, active

    if cache is None:
        cache = active()
        if cache is None:
            raise ValueError(f"no cache to browse: pass {who} an ExecutableCache, a cache folder path, or call "
                             "xlakit.enable_cache() first")
        return cache
    if isinstance(cache, CacheFolder):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return CacheFolder(cache)
    if all(hasattr(cache, a) for a in ("entries", "root", "partitions", "remove")):
        return CacheFolder(store=cache)  # a LocalStore
    raise TypeError(f"{who} takes an ExecutableCache, the cache xlakit.enable_cache() returns, a CacheFolder, a "
                    f"cache folder path or a LocalStore; got {type(cache).__name__}")


def signature_of(header: Any) -> str:
    """The argument signature text of an entry header (:func:`xlakit.view.cache.signature_text`), or
    :data:`NO_SIGNATURE` when it records none (an entry written before signatures were recorded)."""
    from xlakit.view.cache import signature_text

    signature = header.get("signature") if isinstance(header, dict) else None
    if not isinstance(signature, list):
        return NO_SIGNATURE
    return signature_text(signature) if signature else "no arguments"


def entries_frame(folder: Any, partition: str | None = None):
    """``folder.entries(partition)`` with a ``signature`` column after ``name`` (text from each header's
    ``signature`` field: ``f32[8,4] {devices=[2,1]<=[2]}, ...``; :data:`NO_SIGNATURE` where none is recorded).

    Returns a ``pandas.DataFrame`` with the columns of :data:`xlakit.cache.folder.ENTRY_COLUMNS` plus
    ``signature`` (also when the folder is empty).
    """
    frame = folder.entries(partition)
    signatures = {(i.partition, i.key): signature_of(i.header) for i in folder.infos(partition)}
    frame.insert(1, "signature", [signatures.get((p, k), NO_SIGNATURE)
                                  for p, k in zip(frame["partition"], frame["key"], strict=True)])
    return frame


def evict(folder: Any, partition: str, key: str, *, name: str | None = None, size_bytes: int | None = None,
          reason: str = "evicted by hand") -> bool:
    """Remove one entry (its payload kinds are one file: nothing else to remove). A removal is an ``evict``
    event in ``folder.log`` with ``reason``; returns whether the entry was there.

    Raises:
      OSError: the folder is read-only or the file cannot be removed (nothing is recorded then).
    """
    if not folder.store.remove(partition, key):
        return False
    folder.log.emit("evict", name=name, key=key, partition=partition, bytes=size_bytes, reason=reason,
                    source="xlakit", folder=str(folder.store.root))
    return True


@contextlib.contextmanager
def explainer(folder: Any) -> Iterator[Any]:
    """An object with ``explain(fn, *args)`` over ``folder``'s store: the folder itself when it is an
    ExecutableCache, the enabled transparent cache when it is that folder, else an
    :class:`~xlakit.ExecutableCache` made for the block (its JAX hooks are released when the block ends).

    Raises:
      xlakit.UnsupportedJaxVersion, RuntimeError: as :class:`~xlakit.ExecutableCache` does.
    """
    from xlakit.cache import ExecutableCache, active

    if isinstance(folder, ExecutableCache):
        yield folder
        return
    enabled = active()
    if enabled is not None and str(enabled.store.root) == str(folder.store.root):
        yield enabled  # closing a second cache on this folder would unset the enabled one's fingerprint memo
        return
    store = folder.store
    cache = ExecutableCache(store.root, store.max_bytes, secret=store.secret, log=folder.log)
    try:
        yield cache
    finally:
        cache.close()


def current_environment() -> Any:
    """The environment of this process (its partition name and recorded fields), to explain an entry against.

    Call it inside :func:`explainer` so the jaxlib fingerprint memo beside the cache is used. The one JAX
    adapter a view reaches: ``xlakit.cache`` offers no public accessor yet (the layer test allows this single
    import, in this module only).
    """
    from xlakit._jax.environment import current_environment as _current

    return _current()
