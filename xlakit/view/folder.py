"""What the views need from a cache folder, on :class:`xlakit.cache.CacheFolder` (no JAX until explaining).

The CacheBrowser, the dashboard, the memory breakdown of a cache and the report list, verify, prune and
evict entries through a :class:`~xlakit.cache.CacheFolder`: listing a cache never installs JAX hooks or
changes how the process compiles. An :class:`~xlakit.cache.ExecutableCache` is made only to explain (the key
and the current environment need JAX), and closed right after.

What the views add to the folder API:

* :func:`entries_frame` — ``CacheFolder.entries()`` with its ``signature`` column as text;
* :func:`evict` — ``CacheFolder.remove``: one entry removed by hand, recorded as an ``evict`` event;
* :func:`current_environment` — ``xlakit.cache.current_environment``: what an entry is explained against.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
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
      ValueError: ``cache`` is None and no transparent cache is enabled, or a path that is missing or a file.
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
        folder = Path(os.path.expanduser(os.fspath(cache)))
        if not folder.exists():  # a typo showed "0 entries, 0 B" as if the cache were empty
            raise ValueError(f"{who}: no cache folder at {folder} (a typo?); 'xlakit cache where' prints the "
                             "default one")
        if not folder.is_dir():
            raise ValueError(f"{who}: {folder} is a file, not a cache folder")
        return CacheFolder(cache)
    if all(hasattr(cache, a) for a in ("entries", "root", "partitions", "remove")):
        return CacheFolder(store=cache)  # a LocalStore
    raise TypeError(f"{who} takes an ExecutableCache, the cache xlakit.enable_cache() returns, a CacheFolder, a "
                    f"cache folder path or a LocalStore; got {type(cache).__name__}")


def signature_of(header: Any) -> str:
    """The whole argument signature text of an entry header (:func:`xlakit.view.signatures.signature_text`),
    or :data:`NO_SIGNATURE` when it records none (an entry written before signatures were recorded)."""
    from xlakit.view.signatures import signature_text

    signature = header.get("signature") if isinstance(header, dict) else None
    if not isinstance(signature, list):
        return NO_SIGNATURE
    return signature_text(signature) if signature else "no arguments"


def entries_frame(folder: Any, partition: str | None = None):
    """``folder.entries(partition)`` with its ``signature`` column (after ``name``) as text that tells the
    entries of one function apart: ``f32[8,4] {devices=[2,1]<=[2]}, …(38 same), f32[16,4]``
    (:func:`xlakit.view.signatures.distinguishing_texts` over the entries of each name, at most about
    :data:`~xlakit.view.signatures.LIMIT` characters besides the leaves that differ), and ``signature_full``
    (last) the whole signature; :data:`NO_SIGNATURE` in both where none is recorded.

    Returns a ``pandas.DataFrame`` with the columns of :data:`xlakit.cache.folder.ENTRY_COLUMNS`, signature
    moved second, and ``signature_full`` (also when the folder is empty).
    """
    from xlakit.view.signatures import distinguishing_texts, leaf_texts

    frame = folder.entries(partition)
    raw = list(frame.pop("signature"))
    full = [signature_of({"signature": s}) for s in raw]
    shown = list(full)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(frame["name"].fillna("").astype(str)):
        groups.setdefault(name, []).append(i)
    for rows in groups.values():
        leaves = [leaf_texts(raw[i]) if isinstance(raw[i], list) and raw[i] else None for i in rows]
        for i, text in zip(rows, distinguishing_texts(leaves), strict=True):
            if text is not None:
                shown[i] = text
    frame.insert(1, "signature", shown)
    frame["signature_full"] = full
    return frame


def evict(folder: Any, partition: str, key: str, *, name: str | None = None, size_bytes: int | None = None,
          reason: str = "evicted by hand") -> bool:
    """Remove one entry: :meth:`xlakit.cache.CacheFolder.remove` (an ``evict`` event in ``folder.log`` with
    ``reason``); returns whether the entry was there.

    Raises:
      OSError: the folder is read-only or the file cannot be removed (nothing is recorded then).
    """
    return bool(folder.remove(partition, key, reason, name=name, size_bytes=size_bytes))


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

    Call it inside :func:`explainer` so the jaxlib fingerprint memo beside the cache is used
    (:func:`xlakit.cache.current_environment`).
    """
    from xlakit.cache import current_environment as _current

    return _current()
