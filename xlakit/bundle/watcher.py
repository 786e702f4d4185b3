"""``BundleWatcher``: notice bundles that are added, changed, removed or renamed in a folder of bundles.

Each poll fingerprints only bundle files — ``manifest.json``, ``*.jaxexp`` modules and ``*.safetensors``
weights at the top of each bundle folder — as (name, size, mtime in ns). Anything under ``.cache/`` (the
loader's own writes) and hidden or temporary files (``.x.tmp``, editors' swap files) are never looked at, so
loading a bundle never triggers a reload of it. A folder is a bundle once it holds ``manifest.json``
(``export_bundle`` writes it last).

Debounce: a change is applied only when two consecutive polls agree on it. A bundle being copied in, or a
module being rewritten, looks different at every poll until the writer is done, and is reported once, after.

Rename: a bundle folder that disappears while a folder with the identical fingerprint appears (``mv`` keeps
names, sizes and mtimes) is reported as ``renamed`` — the caller can rename it in place instead of
reloading. A copy (new mtimes) is an ``added``.

No JAX here; the watcher reports, the caller decides (e.g. ``load_bundle`` on ``added``/``changed``).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xlakit._units import finite_seconds, wait_timeout
from xlakit.bundle.manifest import MANIFEST, MODULE_SUFFIX

__all__ = ["BundleWatcher", "BundleChange", "fingerprint"]

_WEIGHTS_SUFFIX = ".safetensors"
Fingerprint = frozenset  # of (file name, size in bytes, mtime in ns)


@dataclass(frozen=True)
class BundleChange:
    """One applied change.

    Attributes:
      kind: ``"added"``, ``"removed"``, ``"changed"`` or ``"renamed"``.
      name: the bundle folder's name (for ``removed``, the name it had).
      path: the bundle folder's path (for ``removed``, where it was).
      old_name: for ``renamed``, the previous folder name; else None.
      files: for ``changed``, the bundle files that were added, removed or modified (sorted); else ().
    """

    kind: str
    name: str
    path: Path
    old_name: str | None = None
    files: tuple[str, ...] = ()

    @property
    def weights_only(self) -> bool:
        """True for a ``changed`` bundle whose only changed files are weights (its programs stay valid)."""
        return self.kind == "changed" and bool(self.files) and all(f.endswith(_WEIGHTS_SUFFIX) for f in self.files)

    def __repr__(self) -> str:
        if self.kind == "renamed":
            return f"BundleChange(renamed {self.old_name!r} -> {self.name!r})"
        files = f", files={list(self.files)}" if self.files else ""
        return f"BundleChange({self.kind} {self.name!r}{files})"


def _is_bundle_file(name: str) -> bool:
    if name.startswith(".") or name.endswith((".tmp", "~", ".swp", ".part")):
        return False
    return name == MANIFEST or name.endswith(MODULE_SUFFIX) or name.endswith(_WEIGHTS_SUFFIX)


def fingerprint(bundle_dir: str | os.PathLike[str]) -> Fingerprint | None:
    """The (name, size, mtime_ns) set of a folder's bundle files, or None if it is not a bundle (no
    ``manifest.json``) or cannot be read. Only the folder's top level is read; ``.cache/`` never is."""
    items = []
    try:
        with os.scandir(bundle_dir) as it:
            for entry in it:
                if not _is_bundle_file(entry.name):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=True):
                        continue
                    st = entry.stat(follow_symlinks=True)
                except OSError:  # vanished between listing and stat: it is being replaced
                    continue
                items.append((entry.name, st.st_size, st.st_mtime_ns))
    except OSError:
        return None
    if not any(name == MANIFEST for name, _, _ in items):
        return None
    return frozenset(items)


def snapshot(repo_dir: str | os.PathLike[str]) -> dict[str, Fingerprint]:
    """Bundle folder name -> fingerprint, for every bundle folder directly under ``repo_dir``."""
    out: dict[str, Fingerprint] = {}
    try:
        with os.scandir(repo_dir) as it:
            entries = [e for e in it if not e.name.startswith(".")]
    except OSError:
        return out
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=True):
                continue
        except OSError:
            continue
        fp = fingerprint(entry.path)
        if fp is not None:
            out[entry.name] = fp
    return out


def diff(old: dict[str, Fingerprint], new: dict[str, Fingerprint], root: Path) -> list[BundleChange]:
    """The changes from ``old`` to ``new`` (snapshots), renames matched by identical fingerprints."""
    changes: list[BundleChange] = []
    removed = sorted(set(old) - set(new))
    added = sorted(set(new) - set(old))
    for name in sorted(set(old) & set(new)):
        if old[name] != new[name]:
            files = sorted({f for f, _, _ in old[name] ^ new[name]})
            changes.append(BundleChange("changed", name, root / name, files=tuple(files)))
    for name in added:
        twin = next((r for r in removed if old[r] == new[name]), None)
        if twin is not None:
            removed.remove(twin)
            changes.append(BundleChange("renamed", name, root / name, old_name=twin))
        else:
            changes.append(BundleChange("added", name, root / name))
    changes.extend(BundleChange("removed", name, root / name) for name in removed)
    return changes


class BundleWatcher:
    """Watch ``repo_dir`` (a folder of bundle folders) in a background thread.

    Args:
      repo_dir: the folder whose sub-folders are bundles.
      on_change: called with each :class:`BundleChange`, on the watcher's thread, in the order
        changed, renamed, added, removed. An exception it raises is kept in :attr:`errors` and warned about
        once per type; watching goes on.
      poll_s: seconds between polls (> 0). A change is reported between 2 and 3 polls after it settles.
      start: start the thread now (default). Otherwise call :meth:`start`, or drive it with :meth:`poll`.

    The bundles present when the watcher starts are its baseline and are not reported. Use it as a context
    manager, or call :meth:`stop`; the thread is a daemon, so a forgotten watcher never blocks exit.

    Raises:
      ValueError: ``poll_s`` not a finite number of seconds > 0 (at most 10**9), or a ``stop`` timeout that
        is NaN or negative. NotADirectoryError: ``repo_dir`` is not a folder.
    """

    def __init__(self, repo_dir: str | os.PathLike, on_change: Callable[[BundleChange], object],
                 poll_s: float = 1.0, *, start: bool = True) -> None:
        # inf or 1e10 passed "> 0", then the polling thread died on its first wait ("OverflowError: timestamp out
        # of range for platform time_t") and nothing was watched; "1" raised a bare TypeError
        poll_s = finite_seconds(poll_s, "poll_s")
        self.repo_dir = Path(repo_dir)
        if not self.repo_dir.is_dir():
            raise NotADirectoryError(f"{self.repo_dir} is not a folder of bundles")
        self.on_change = on_change
        self.poll_s = float(poll_s)
        self.errors: list[BaseException] = []
        self._applied = snapshot(self.repo_dir)
        self._pending: dict[str, Fingerprint] | None = None
        self._stop = threading.Event()
        self._poll_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._warned: set[type] = set()
        if start:
            self.start()

    @property
    def bundles(self) -> list[str]:
        """Names of the bundle folders as last applied."""
        return sorted(self._applied)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> BundleWatcher:
        """Start the polling thread (no-op if running)."""
        if not self.running:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="xlakit-bundle-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop polling and wait up to ``timeout`` seconds for the thread (a running ``on_change`` finishes
        first). Idempotent. Returns True when the thread has ended."""
        timeout = wait_timeout(timeout)
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def __enter__(self) -> BundleWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def poll(self) -> list[BundleChange]:
        """One poll: apply and report what two consecutive polls agree on. Returns the applied changes
        (after calling ``on_change`` for each)."""
        with self._poll_lock:
            now = snapshot(self.repo_dir)
            if now == self._applied:
                self._pending = None
                return []
            if now != self._pending:
                self._pending = now  # something moved since the last poll: wait for it to settle
                return []
            changes = diff(self._applied, now, self.repo_dir)
            self._applied, self._pending = now, None
        for change in changes:
            try:
                self.on_change(change)
            except Exception as e:  # noqa: BLE001 - a failing callback must not kill the watcher
                self.errors.append(e)
                if type(e) not in self._warned:
                    self._warned.add(type(e))
                    warnings.warn(f"BundleWatcher on_change raised {type(e).__name__}: {e} (for {change!r}); "
                                  "watching continues; see watcher.errors", RuntimeWarning, stacklevel=2)
        return changes

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - e.g. the folder vanished; keep polling
                self.errors.append(e)
                time.sleep(0)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (f"BundleWatcher({str(self.repo_dir)!r}, poll_s={self.poll_s}, {state}, "
                f"{len(self._applied)} bundles)")
