"""The jaxlib build fingerprint: a digest of jaxlib's shared libraries (and installed PJRT plugins), memoized.

Two jaxlib installs with the same version string can hold different builds (a source build, a nightly, a patched
wheel); XLA's programs are only valid for the build that compiled them, so :class:`~xlakit._jax.environment.
Environment` records this fingerprint and the partition name includes it. :func:`jaxlib_build_fingerprint` says
how it is computed and how the memo (``jaxlib_fingerprints.json``) and its per-search-path *stamps* keep that to
about 1 ms per process. No JAX import here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from xlakit.store import _fs as store_fs
from xlakit.store import safejson
from xlakit.store.layout import ENV_FINGERPRINT_MEMO_DIR, FINGERPRINT_MEMO, fingerprint_memo_override
from xlakit.store.stamp import SETTLE_NS, stat_stamp, walked_paths

__all__ = ["CACHE_DIR_ENV", "MEMO_DIR_ENV", "MEMO_FILENAME", "MAX_STAMPS", "jaxlib_build_fingerprint",
           "prefetch_build_fingerprint", "use_memo_dir"]

CACHE_DIR_ENV = "XLAKIT_CACHE_DIR"
#: A folder of its own for the memo, for every cache (set, non-empty): processes that each open a new cache folder
#: (a CI job's, a notebook's throwaway one) then share one memo instead of hashing jaxlib again in each.
MEMO_DIR_ENV = ENV_FINGERPRINT_MEMO_DIR
MEMO_FILENAME = FINGERPRINT_MEMO
_MEMO_VERSION = 1

# Shared libraries (foo.so, libfoo.so.12, macOS/Windows); patterns compiled on first use, not on import (0.55 ms).
_LIBRARY_PATTERN = r"\.(so(\.\d+)*|dylib|pyd|dll)$"
# Top-level packages that carry PJRT plugins (their compilers generate the code, so they belong to the build).
_PLUGIN_PACKAGE_PATTERN = r"^(jax_plugins|jax_(cuda|rocm)\d*_(plugin|pjrt)|libtpu)$"
_PLUGIN_PREFIXES = ("jax_", "libtpu")  # every name _PLUGIN_PACKAGE_PATTERN matches starts with one of these


def jaxlib_build_fingerprint() -> str:
    """16 hex digits of SHA-256 over the name and contents of every shared library of jaxlib and of the
    installed PJRT plugin packages (``jax_plugins``, ``jax_cuda*_plugin``, ``jax_cuda*_pjrt``, ``libtpu``).

    Hashing the ~350 MB of libraries costs about 0.5 s per process start (measured with jaxlib 0.10.2 on a 2-core
    AMD EPYC, warm page cache: 0.49 s cold, 3-4 ms memoized), so per-file digests are memoized in
    ``jaxlib_fingerprints.json`` under ``$XLAKIT_CACHE_DIR`` (default ``platformdirs.user_cache_dir("xlakit")``),
    keyed by path, size, mtime, ctime and inode; only files whose stat changed are read again. A cache created with
    an explicit folder calls :func:`use_memo_dir` first, so the memo lives beside the cache actually in use;
    ``$XLAKIT_FINGERPRINT_MEMO_DIR``, when set, is the memo's folder for every cache (a new cache folder in each
    process then costs no hashing: 0.6-0.8 s of CPU per process here).

    Per search path (jaxlib's location and ``sys.path``) the memo also keeps a *stamp*: a SHA-256 over the stat
    (device, inode, size, mtime, ctime) of every folder whose listing decided which libraries exist and of every
    library. While it holds, nothing there was added, removed, replaced or written, and the fingerprint is
    taken without walking (~1 ms instead of ~3 ms, measured). It is recorded only when every stat it covers is
    older than :data:`~xlakit.store.stamp.SETTLE_NS` before the walk began (no change hides within a tick), and
    only in a memo of ``$XLAKIT_FINGERPRINT_MEMO_DIR``, ``$XLAKIT_CACHE_DIR`` or the user cache (not in one beside
    a cache of capped size).

    Raises:
      ImportError: if jaxlib is not installed.
      OSError: if a library cannot be read. Failing to read or write the memo is not an error.
    """
    memo_path = _cache_dir() / MEMO_FILENAME
    beside_a_cache = _memo_dir is not None and fingerprint_memo_override() is None
    key = None if beside_a_cache else _search_path()  # no stamp beside a cache: its bytes count against the cap
    return (key and _stamped_fingerprint(memo_path, key)) or _fingerprint_dirs(None, memo_path, stamp=key)


def _stamped_fingerprint(memo_path: str | os.PathLike, key: str) -> str | None:
    """The fingerprint the memo holds for search path ``key`` while its stamp still holds, else None. A
    ``sys.path`` folder whose stat changed (a script's own folder) is listed again: only its plugin packages count."""
    files, trees = _read_memo(memo_path)
    tree: Any = trees.get(key)
    try:
        if not all(isinstance(p, str) for p in [*tree["walked"], *tree["listed"]]) or \
                tree["stamp"] != stat_stamp(walked_paths(tree["walked"], files))[0]:
            return None
        for folder, (folder_stamp, names) in tree["listed"].items():
            if stat_stamp([folder])[0] != folder_stamp and _plugin_packages(folder) != names:
                return None
        return str(tree["fingerprint"])
    except (KeyError, TypeError, ValueError):  # no stamp, or not the shape written below
        return None


def _search_path() -> str:
    """A digest of where libraries are searched: jaxlib's package folders and ``sys.path``, made absolute."""
    spec = importlib.util.find_spec("jaxlib")  # the module's own spec once imported: no search
    where = [list(spec.submodule_search_locations or []) if spec is not None else [],
             [os.path.abspath(entry or ".") for entry in sys.path]]
    return _sha256(json.dumps(where))[:32]


_prefetch_lock = threading.Lock()
_prefetch: tuple[threading.Thread, list[str]] | None = None  # (worker, [fingerprint] once it is computed)


def prefetch_build_fingerprint() -> None:
    """Start computing :func:`jaxlib_build_fingerprint` on a daemon thread (file reads only: it touches neither
    JAX nor its backend), so that the first :func:`current_environment` — inside the first compile of a process
    that just enabled a cache — takes the value instead of computing it then. That call waits for the thread if
    it is still running; if it failed, computes the value itself (raising as before). Used once."""
    global _prefetch
    with _prefetch_lock:
        if _prefetch is not None:
            return
        result: list[str] = []

        def work() -> None:
            try:
                result.append(jaxlib_build_fingerprint())
            except Exception:  # noqa: BLE001 - the caller computes it again and sees the error itself
                pass

        worker = threading.Thread(target=work, name="xlakit-fingerprint", daemon=True)
        _prefetch = (worker, result)
        worker.start()


def _prefetched_fingerprint() -> str | None:
    """The prefetched fingerprint (waiting for its thread), once; None when there is none."""
    global _prefetch
    with _prefetch_lock:
        taken, _prefetch = _prefetch, None
    if taken is None:
        return None
    worker, result = taken
    worker.join()
    return result[0] if result else None


_memo_dir: Path | None = None


def use_memo_dir(folder: str | os.PathLike | None, *, only_if: str | os.PathLike | None = None) -> None:
    """Keep the jaxlib fingerprint memo in ``folder`` (the cache in use) instead of ``$XLAKIT_CACHE_DIR`` or the
    user cache. ``None`` goes back to the default; with ``only_if``, only while the memo folder is that one (a
    cache that closes resets only its own setting)."""
    global _memo_dir
    if only_if is not None and _memo_dir != Path(only_if):
        return
    _memo_dir = None if folder is None else Path(folder)


def _cache_dir() -> Path:
    """The memo's folder: ``$XLAKIT_FINGERPRINT_MEMO_DIR``, else the cache in use (:func:`use_memo_dir`), else
    ``$XLAKIT_CACHE_DIR``, else the user cache folder."""
    own = fingerprint_memo_override()
    if own is not None:
        return own
    if _memo_dir is not None:
        return _memo_dir
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("xlakit"))


def _library_roots(listed: dict[str, list] | None = None) -> list[Path]:
    """jaxlib's package folder and every PJRT plugin package folder on ``sys.path``; ``listed`` gets ``folder ->
    [its stamp, taken before listing it, or "" when too recent; plugin package names]`` per ``sys.path`` folder."""
    spec = importlib.util.find_spec("jaxlib")  # finds the package without importing (and loading) it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("jaxlib is not installed")
    roots = [Path(p) for p in spec.submodule_search_locations]
    for entry in sys.path:
        # Scanning sys.path ourselves also finds namespace packages such as jax_plugins, which pkgutil skips.
        directory = os.path.abspath(entry or ".")
        stamp = stat_stamp([directory])
        names = _plugin_packages(directory)
        if listed is not None:
            listed[directory] = [stamp[0] if stamp[1] < time.time_ns() - SETTLE_NS else "", names]
        roots += [Path(directory) / n for n in names]
    unique: dict[str, Path] = {}
    for root in roots:
        unique.setdefault(os.path.realpath(root), root)
    return list(unique.values())


def _plugin_packages(directory: str) -> list[str]:
    """Sorted names of the plugin package folders in ``directory`` ([] where it cannot be listed: a zip file,
    missing). Sorted after filtering: site-packages holds hundreds of names, and every plugin name starts so."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(_PLUGIN_PREFIXES) and re.match(_PLUGIN_PACKAGE_PATTERN, n)
                  and os.path.isdir(os.path.join(directory, n)))


def _fingerprint_dirs(roots: Iterable[str | os.PathLike] | None, memo_path: str | os.PathLike | None,
                      stamp: str | None = None) -> str:
    """16 hex digits of SHA-256 over ``relative path, file digest`` of every shared library under ``roots``
    (None: :func:`_library_roots`), sorted by the path relative to the root's parent (``jaxlib/_jax.so``).
    Per-file digests are read from and written to ``memo_path`` (``None``: no memo). ``stamp``: a key to record
    this walk's stamp under (see :func:`jaxlib_build_fingerprint`)."""
    started = time.time_ns()
    files, walked, listed = [], [], {}  # type: ignore[var-annotated]
    roots = _library_roots(listed) if roots is None else roots
    for root in roots:
        root = Path(root).absolute()
        for dirpath, _, filenames in os.walk(root):
            walked.append(dirpath)
            files += [(os.path.relpath(os.path.join(dirpath, n), root.parent), os.path.join(dirpath, n))
                      for n in filenames if re.search(_LIBRARY_PATTERN, n)]
    files.sort()
    memo, trees = _read_memo(memo_path) if memo_path is not None else ({}, {})
    changed = False
    total = hashlib.sha256()
    for relative, path in files:
        stat = os.stat(path)
        # A reinstall creates new files (new inode and mtime), so this stat identifies the contents; ctime also
        # moves on an in-place write whose mtime was put back (which only the ctime shows).
        key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns, "ino": stat.st_ino}
        entry = memo.get(path)
        if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in key.items()) or "sha256" not in entry:
            with open(path, "rb") as f:
                entry = memo[path] = {**key, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
            changed = True
        total.update(f"{relative}\0{entry['sha256']}\n".encode())
    fingerprint = total.hexdigest()[:16]
    if stamp is not None:
        digest, newest = stat_stamp(walked_paths(walked, [path for _, path in files]))
        if newest < started - SETTLE_NS:
            trees = _newest_trees(trees, stamp)
            trees[stamp] = {"walked": walked, "stamp": digest, "listed": listed, "fingerprint": fingerprint,
                            "recorded_ns": started}
            changed = True
    if changed and memo_path is not None:
        _save_memo(Path(memo_path), memo, trees)
    return fingerprint


#: Stamps kept, one per search path (a script's own folder is on ``sys.path``, so each folder scripts run from is one).
#: Every process parses all of them (~0.07 ms each, measured): a search path past the newest 8 walks again (~3 ms).
MAX_STAMPS = 8


def _newest_trees(trees: dict[str, Any], replacing: str) -> dict[str, Any]:
    """The ``MAX_STAMPS - 1`` most recently recorded stamps other than ``replacing``, to make room for it.

    By ``recorded_ns``, not by position: the memo is written with sorted keys, so keeping the last ones read
    dropped the stamps whose keys sort first, and a process whose key sorted first walked jaxlib every time."""
    def recorded(item: tuple[str, Any]) -> int:
        value = item[1].get("recorded_ns") if isinstance(item[1], dict) else None
        return value if isinstance(value, int) else 0

    kept = sorted((item for item in trees.items() if item[0] != replacing), key=recorded)[-(MAX_STAMPS - 1):]
    return dict(kept)


_MAX_MEMO_BYTES = 8 * 1024 * 1024  # a memo of ~200 libraries is ~40 kB; anything near this bound is not ours


def _load_memo(path: str | os.PathLike) -> dict[str, Any]:
    return _read_memo(path)[0]


def _read_memo(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(per-file digests, stamps by search path)``, or {} (recompute, then rewrite) when the memo is absent, a
    link, a FIFO, a device, a folder, over 8 MiB, not bounded JSON (too deep, huge numbers) or not its shape.
    Read with the store's primitives: never follows a link, never blocks, size-bounded before reading."""
    try:
        data = safejson.load_file(path, _MAX_MEMO_BYTES)
    except (OSError, ValueError):  # absent, unreadable, refused or corrupt: recompute and rewrite
        return {}, {}
    if not isinstance(data, dict) or data.get("version") != _MEMO_VERSION or not isinstance(data.get("files"), dict):
        return {}, {}
    trees = data.get("trees")
    return data["files"], trees if isinstance(trees, dict) else {}


def _save_memo(path: Path, files: dict[str, Any], trees: dict[str, Any] | None = None) -> None:
    """Atomically replace the memo; every OSError is ignored so a read-only disk only costs speed.

    Written relative to the folder's descriptor (temp created O_EXCL|O_NOFOLLOW, renamed over the name), so a
    planted link, FIFO or file at the memo's name is replaced, never written through; a folder there is
    left alone (the memo is then recomputed each process)."""
    # Other virtualenvs share the memo; drop only entries whose library is gone.
    files = {p: e for p, e in files.items() if os.path.exists(p)}
    try:
        store_fs.ensure_dir(path.parent)
        with store_fs.dir_fd(os.path.realpath(path.parent)) as fd:
            # readers see the old memo or the new one, never half of one
            data = json.dumps({"version": _MEMO_VERSION, "files": files, "trees": trees or {}}, sort_keys=True,
                              separators=(",", ":"))  # compact: the memo beside a cache counts against its cap
            store_fs.write_at(fd, path.name, data.encode("utf-8"))
    except OSError:
        pass


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
