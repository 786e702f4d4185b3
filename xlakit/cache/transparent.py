"""Transparent mode: xlakit's store becomes the persistent compilation cache of every ``jax.jit``.

:class:`TransparentCache` is a :class:`~xlakit.cache.handler.StoreHandler` installed as the default handler of
xlakit's hooks (:mod:`xlakit._jax.hooks`), with the JAX settings of :mod:`xlakit._jax.persistent` applied while
it is enabled (restored by :meth:`TransparentCache.uninstall`). Being a
:class:`~xlakit.cache.folder.CacheFolder`, it lists its own entries (``entries()``, ``stats()``, ...).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from xlakit._sources import user_stacklevel
from xlakit.cache.decision import Decision
from xlakit.cache.handler import StoreHandler

__all__ = ["TransparentCache", "enable", "disable", "active"]


class TransparentCache(StoreHandler):
    """The installed transparent cache: answers every compile no explicit cache claims.

    Use :func:`xlakit.enable_cache` to create one. Attributes ``store``, ``min_compile_time_s``, ``log``, ``path``
    and the folder methods ``entries()`` / ``stats()`` / ``verify()`` / ``prune()`` / ``clear()`` are those of
    :class:`~xlakit.cache.handler.StoreHandler`.
    """

    _saved_config: dict[str, Any] | None = None
    _unwatch: Any = None

    def install(self) -> None:
        """Hook into JAX. Raises :class:`xlakit.UnsupportedJaxVersion` on an unsupported JAX.

        While enabled, each retrace of a function traced before is a ``recompile`` event in :attr:`log`
        (:mod:`xlakit._jax.retrace`; read at trace time, nothing on a call JAX's caches answer)."""
        from xlakit._jax import hooks, persistent, retrace

        hooks.acquire()
        self._saved_config = persistent.apply_config()
        hooks.set_default(self)
        self._unwatch = retrace.watch(self.log.emit)

    def jax_cache_dir_set(self, folder: str) -> None:
        """``jax_compilation_cache_dir`` was set after :func:`enable` (called by :mod:`xlakit._jax.hooks` after a
        compile's key): set aside like one set before — back to None, a ``set_aside`` event, one warning per folder
        — and handed back by :func:`disable`."""
        from xlakit._jax.persistent import set_aside_cache_dir

        set_aside_cache_dir()
        if self._saved_config is not None:
            self._saved_config["jax_compilation_cache_dir"] = folder
        _tell_set_aside(self)

    def compile(self, lowered_or_jitted: Any, /, *args: Any, **kwargs: Any) -> tuple[Any, Decision]:
        """Compile a program as JAX would with this cache enabled (a hit loads, a miss compiles and stores), and
        say what the cache did: the same ``(jax.stages.Compiled, decision)`` as
        :meth:`xlakit.ExecutableCache.compile`, so ``memory.sweep``, ``memory.max_batch`` and ``MemoryExplorer``
        take the cache :func:`xlakit.enable_cache` returned as their ``cache=``.

        Args:
          lowered_or_jitted: a ``jax.stages.Lowered``, a ``jax.jit`` object or a plain function (jitted here).
            Positional only.
          *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``) unless already lowered, passed
            as ``jax.jit(f)(*args, **kwargs)`` would pass them (every keyword is the function's).

        Returns:
          ``(compiled, decision)``: ``decision`` is the last one this cache made for the program on this thread
          (``hit``, ``store``, ``skip``, ``store_error``...); when JAX answered from its in-process memory (the
          program was compiled earlier in this process) nothing reached the store, and the decision is a ``hit``
          whose ``reason`` says so.

        Raises:
          RuntimeError: the cache is not enabled (its hooks do the work).
          TypeError: ``lowered_or_jitted`` is already a ``jax.stages.Compiled``.
        """
        from xlakit.cache.explaining import lower_program

        if self._saved_config is None:
            raise RuntimeError("this transparent cache is not enabled; call xlakit.enable_cache() first")
        lowered = lower_program(lowered_or_jitted, *args, **kwargs)
        with self.capture() as capture:
            compiled = lowered.compile()
        if capture.decisions:
            return compiled, capture.decisions[-1]
        return compiled, Decision("hit", reason="answered by JAX's in-process cache: this program was compiled "
                                  "earlier in this process, so nothing reached the store", folder=str(self.path))

    def explain(self, fn_or_lowered: Any, /, *args: Any, **kwargs: Any):
        """Would this program hit this cache? :meth:`xlakit.ExecutableCache.explain`, for transparent mode.

        Raises:
          RuntimeError: the cache is not installed (its hooks compute the key).
        """
        from xlakit.cache.explaining import explain_lowered, lower_program

        if self._saved_config is None:
            raise RuntimeError("this transparent cache is not enabled; call xlakit.enable_cache() first")
        return explain_lowered(self.store, lower_program(fn_or_lowered, *args, **kwargs), fn_or_lowered)

    def uninstall(self) -> None:
        """Restore JAX's functions, settings and logger exactly as :meth:`install` found them."""
        if self._saved_config is None:
            return
        from xlakit._jax import hooks, persistent
        from xlakit._jax.fingerprint import use_memo_dir

        use_memo_dir(None, only_if=self.store.root)
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        hooks.set_default(None)
        close = getattr(self.store, "close", None)  # a SharedStore: finish (bounded) pending uploads
        if close is not None:
            close()
        persistent.restore_config(self._saved_config)
        self._saved_config = None
        hooks.release()


_lock = threading.Lock()
_active: TransparentCache | None = None
_warned_late = False
_warned_set_aside: set[str] = set()  # JAX cache folders already named in a warning (one warning per folder)
# JAX's compile count (compiles_so_far) split by whether an xlakit cache was installed: compiles made under one
# were offered to it (stored in that folder), so enabling another cache must not call them "not stored".
_covered_compiles = 0
_enabled_at: int | None = None  # the count when the cache now installed was enabled


def _uncovered_compiles(now: int | None) -> int:
    """Compiles JAX made in this process while no xlakit cache was installed, given the count ``now``."""
    if now is None:
        return 0
    covered = _covered_compiles + (now - _enabled_at if _enabled_at is not None else 0)
    return max(0, now - covered)


def _note_cache_change(installed: bool) -> None:
    """Called under ``_lock`` when a cache is installed (``installed``) or the installed one is removed."""
    global _covered_compiles, _enabled_at
    from xlakit._jax.persistent import compiles_so_far

    now = compiles_so_far()
    if now is None:
        return
    if _enabled_at is not None:
        _covered_compiles += now - _enabled_at
    _enabled_at = now if installed else None


def _warn_if_late() -> None:
    """Warn once per process when JAX compiled programs while no xlakit cache was enabled (before the first
    ``enable_cache`` or after a ``disable_cache``): those stay in JAX's in-memory cache, so their calls are never
    served from (or stored in) the persistent cache. Programs compiled under an earlier ``enable_cache`` were
    offered to that cache and are not counted. A ``jax.jit`` object created earlier but compiled later is
    served: JAX consults the persistent cache at each compile."""
    global _warned_late
    from xlakit._jax.persistent import compiles_so_far

    n = _uncovered_compiles(compiles_so_far())
    if _warned_late or not n:
        return
    _warned_late = True
    warnings.warn(f"xlakit.enable_cache(): JAX already compiled {n} program(s) in this process while no xlakit "
                  "cache was enabled (jit programs and JAX's own operations); they keep running from JAX's "
                  "in-memory cache and are not stored, so a restart compiles them again. New compiles from now "
                  "on, of any jax.jit (also one created earlier), use the cache. Call enable_cache() before the "
                  "first jax.jit call, and keep one enabled, to store them all.", RuntimeWarning,
                  stacklevel=user_stacklevel())


def _tell_set_aside(cache: TransparentCache) -> None:
    """JAX's own persistent cache was configured (``jax_compilation_cache_dir``, e.g. from
    ``JAX_COMPILATION_CACHE_DIR``) and :func:`~xlakit._jax.persistent.apply_config` has just set it to None, as
    transparent mode needs (the folder's path would otherwise enter every key): say so — a ``set_aside`` event
    every time, one ``RuntimeWarning`` per folder and process — so a warm JAX cache is never lost without a
    word. :func:`disable` hands the folder back."""
    folder = (cache._saved_config or {}).get("jax_compilation_cache_dir")
    if not folder:
        return
    folder = str(folder)
    try:
        same = Path(folder).expanduser().resolve() == Path(cache.path).resolve()
    except (OSError, RuntimeError):
        same = False
    written = ("xlakit keeps its own entries in this folder too, in partition subfolders beside JAX's files (which "
               "it never reads, changes or deletes); xlakit's maintenance commands refuse a folder holding other "
               "files, so give enable_cache() a folder of its own" if same else "nothing is written there")
    reason = (f"JAX's own compilation cache at {folder} (jax_compilation_cache_dir / JAX_COMPILATION_CACHE_DIR) "
              f"is set aside while xlakit's cache at {cache.path} is enabled: its entries are not read and {written}, "
              "so programs it held compile once more and are then stored by xlakit. "
              "xlakit.disable_cache() hands the folder back to JAX; to stop this warning, unset "
              "JAX_COMPILATION_CACHE_DIR in processes that enable xlakit's cache (README: 'JAX's own cache')")
    cache.log.emit("set_aside", source="jax-persistent", folder=folder, reason=reason)
    if folder not in _warned_set_aside:
        _warned_set_aside.add(folder)
        warnings.warn(f"xlakit.enable_cache(): {reason}", RuntimeWarning, stacklevel=user_stacklevel())


def active() -> TransparentCache | None:
    """The installed :class:`TransparentCache`, or None."""
    return _active


def enable(path: str | Path | None = None, max_bytes: int | str | None = None, min_compile_time_s: float = 0.0,
           *, secret: bytes | None = None, remote: str | None = None, remote_mode: str | None = None,
           remote_options: dict | None = None) -> TransparentCache:
    """See :func:`xlakit.enable_cache`."""
    global _active
    from xlakit._jax import hooks
    from xlakit._jax.environment import current_environment
    from xlakit._jax.fingerprint import prefetch_build_fingerprint, use_memo_dir
    from xlakit._units import check_max_bytes, check_path, check_seconds
    from xlakit.cache import open_store
    from xlakit.store import prepare_root, resolve_root

    # Checked here, before the store is opened, so bad input names the argument instead of failing deep inside.
    check_path(path)
    max_bytes = check_max_bytes(max_bytes)
    min_compile_time_s = check_seconds(min_compile_time_s)
    hooks.check_installable()  # an unsupported JAX is refused before any folder is created
    root = prepare_root(resolve_root(path))  # "~" expanded; a file or an uncreatable folder raises here
    store = open_store(root, max_bytes=max_bytes, secret=secret, remote=remote, remote_mode=remote_mode,
                       remote_options=remote_options, min_upload_compile_s=min_compile_time_s)
    cache = TransparentCache(store, min_compile_time_s=min_compile_time_s)
    with _lock:
        _warn_if_late()
        if _active is not None:
            _active.uninstall()
            _active = None
        cache.install()
        _tell_set_aside(cache)
        _note_cache_change(installed=True)
        use_memo_dir(store.root)  # the jaxlib fingerprint memo lives beside the cache in use
        if current_environment.cache_info().currsize == 0:  # hash jaxlib meanwhile, off the first compile's path
            prefetch_build_fingerprint()
        _active = cache
    return cache


def disable() -> bool:
    """See :func:`xlakit.disable_cache`. Returns True if a cache was enabled."""
    global _active
    with _lock:
        if _active is None:
            return False
        _active.uninstall()
        _active = None
        _note_cache_change(installed=False)
        return True
