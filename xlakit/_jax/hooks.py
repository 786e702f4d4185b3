"""xlakit's single attachment point inside JAX's compile path, shared by transparent mode and ExecutableCache.

JAX (0.9–0.12) compiles every program through ``jax._src.compiler.compile_or_get_cached``, which — once the
persistent-cache machinery has computed a key — calls two module-level functions we replace:

* ``_cache_read(module_name, cache_key, compile_options, backend, executable_devices[, host_callbacks])``
* ``_cache_write(cache_key, compile_time_secs, module_name, backend, executable[, host_callbacks])``

Two more wrappers gather context for those calls, on the compiling thread:

* ``jax._src.cache_key.get`` — records the ``ir.Module`` being keyed (for module text in entries and
  explanations). While an xlakit handler will answer the compile, it returns xlakit's placement-free key
  (:mod:`xlakit._jax.keys`: no concrete device ids, so one entry serves every same-kind placement and every
  process of a ``jax.distributed`` job) with its per-part hashes; otherwise JAX's own key, untouched (JAX's
  per-part hashes then come from a logger filter on ``jax._src.cache_key``).
* ``jax._src.pjit._run_python_pjit`` — runs only when a ``jax.jit`` object misses its C++ dispatch cache;
  if the jitted function is one of :func:`mark`'s, the compile is routed to that function's handler. The
  C++ fast path is untouched, so a routed ``jax.jit`` dispatches at ``jax.jit`` speed.

A *handler* (``read(ctx, ...)``, ``write(ctx, ...)``) answers a compile: the innermost :func:`route`, else
the default handler (transparent mode), else JAX's original functions. Hooks are reference-counted:
:func:`release` by the last user restores every JAX function exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from xlakit._jax import cache_signals, keys, versions

__all__ = ["CompileContext", "Handler", "acquire", "release", "route", "set_default", "mark", "handler_of",
           "current_handler", "installed"]

_KEY_LOGGER = "jax._src.cache_key"


@dataclasses.dataclass
class CompileContext:
    """What xlakit knows about the program being compiled on this thread.

    Attributes:
      module_name: HLO module name, e.g. ``jit_train_step``.
      key: the cache key (``<module_name>-<sha256 hex>``): xlakit's placement-free key
        (:func:`xlakit._jax.keys.placement_free_key`: no concrete device ids, so permuted or shifted devices of
        the same kind and count share it, and so do the processes of a ``jax.distributed`` job), or JAX's own
        key on a JAX whose key helpers xlakit does not know.
      key_parts: per-part hashes (``computation``, ``jax_lib version``, ``backend version``,
        ``XLA flags``, ``compile_options``, ``accelerator_config``, ``compression``, ``custom_hook`` and, for
        xlakit's key, ``placement``); empty until :meth:`parts` computes them (a hit never needs them).
      module: the ``ir.Module`` JAX keyed, or None.
      devices: the device array JAX keyed (``numpy.ndarray`` of devices), or None.
    """

    module_name: str
    key: str
    key_parts: dict[str, str]
    module: Any = None
    devices: Any = None
    key_call: tuple | None = None  # (args, kwargs) of JAX's cache_key.get, to recompute the parts on demand
    placement_free: bool = False  # ``key`` is xlakit's placement-free key (its parts come from the same code)

    def parts(self) -> dict[str, str]:
        """The per-part key hashes, computed on first use by the code that computed the key (xlakit's
        :func:`~xlakit._jax.keys.placement_free_key` or JAX's ``cache_key.get``). Only misses and explanations
        need them, so a hit hashes the module once, for its key."""
        if not self.key_parts and self.key_call is not None:
            if self.placement_free:
                try:
                    self.key_parts = keys.placement_free_key(_saved["key_get"], *self.key_call)[1]
                except Exception:  # noqa: BLE001 - parts only explain misses; never fail a compile for them
                    self.key_parts = {}
            else:
                self.key_parts = _compute_parts(*self.key_call)
        return self.key_parts


class Handler(Protocol):
    def read(self, ctx: CompileContext, compile_options: Any, backend: Any, executable_devices: Any,
             host_callbacks: Any) -> tuple[Any, int | None]: ...

    def write(self, ctx: CompileContext, compile_time_secs: float, backend: Any, executable: Any,
              host_callbacks: Any) -> None: ...


class _KeyCapture(logging.Filter):
    """Collects JAX's per-part cache-key hashes for this thread and hides those DEBUG records."""

    def __init__(self, passthrough_level: int) -> None:
        super().__init__()
        self.passthrough_level = passthrough_level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "get_cache_key hash of serialized %s: %s" and len(record.args or ()) == 2:
            part, digest = record.args  # type: ignore[misc]
            if part == "computation":  # every key starts with the computation
                _local.parts = {}
            getattr(_local, "parts", {})[str(part)] = str(digest)
        # Records below the level the user had configured were never meant to be shown.
        return record.levelno >= self.passthrough_level


_local = threading.local()
_lock = threading.RLock()
_users = 0
_saved: dict[str, Any] = {}
_default: Handler | None = None
_MARK = "__xlakit_handler__"


def _routes() -> list[Handler]:
    routes = getattr(_local, "routes", None)
    if routes is None:
        routes = _local.routes = []
    return routes


def current_handler() -> Handler | None:
    """The handler a compile on this thread would go to now: innermost route, else the default, else None."""
    routes = _routes()
    return routes[-1] if routes else _default


_current = current_handler


@contextlib.contextmanager
def route(handler: Handler) -> Iterator[None]:
    """Send every compile on this thread to ``handler`` while the block runs (innermost wins)."""
    routes = _routes()
    routes.append(handler)
    try:
        yield
    finally:
        routes.pop()


def set_default(handler: Handler | None) -> None:
    """The handler for compiles no :func:`route` claims (transparent mode), or None for JAX's own cache."""
    global _default
    _default = handler


def mark(fn: Callable, handler: Handler) -> Callable:
    """A wrapper of ``fn`` (same signature and behaviour) whose jit compiles go to ``handler``.

    Its ``__name__`` / ``__qualname__`` are what ``jax.jit`` would name ``fn`` itself (a
    ``functools.partial`` is named after the function it wraps, a callable object without ``__name__``
    ``<unnamed function>``), so the module name — part of JAX's cache key — and therefore the key are the
    same as ``jax.jit(fn)``'s: an entry written through ``mark`` serves transparent mode and back.
    """

    @functools.wraps(fn)
    def marked(*args, **kwargs):
        return fn(*args, **kwargs)

    marked.__name__, marked.__qualname__ = _jit_names(fn)
    setattr(marked, _MARK, handler)
    return marked


def _jit_names(fn: Callable) -> tuple[str, str]:
    """``(name, qualname)`` as ``jax._src.util.fun_name`` / ``fun_qual_name`` compute them for ``jax.jit``."""
    try:
        from jax._src import util

        return util.fun_name(fn), util.fun_qual_name(fn)
    except (ImportError, AttributeError):  # pragma: no cover - the same rule, written out
        inner = fn
        while isinstance(inner, functools.partial) and not hasattr(inner, "__name__"):
            inner = inner.func
        name = getattr(inner, "__name__", "<unnamed function>")
        return name, getattr(inner, "__qualname__", name)


def handler_of(fn: Callable) -> Handler | None:
    return getattr(fn, _MARK, None)


# -- the wrappers installed into JAX -----------------------------------------------------------------
def _key_get(module, devices, *args, **kwargs):
    """JAX's ``cache_key.get``; while an xlakit handler will answer this compile, xlakit's placement-free key
    (:mod:`xlakit._jax.keys`) instead, with its per-part hashes kept for the handler."""
    _local.module, _local.devices = module, devices
    _local.key_call = ((module, devices, *args), kwargs)
    _local.key_parts = None
    if _current() is None or not keys.supported():
        return _saved["key_get"](module, devices, *args, **kwargs)
    try:
        key, _ = keys.placement_free_key(_saved["key_get"], (module, devices, *args), kwargs, with_parts=False)
    except Exception:  # noqa: BLE001 - a JAX whose helpers changed: its own (placement-bound) key is still right
        return _saved["key_get"](module, devices, *args, **kwargs)
    _local.key_parts = key  # the parts are computed only if a miss or an explanation asks (CompileContext.parts)
    _tell_jax_cache_dir(_current())
    return key


def _tell_jax_cache_dir(handler: Handler | None) -> None:
    """``jax_compilation_cache_dir`` set while a handler that sets JAX's own cache aside is installed (a library or
    a later notebook cell called ``jax.config.update`` after ``enable_cache()``): the handler is told
    (``jax_cache_dir_set(folder)``), after this compile's key, which leaves the folder's paths out
    (:func:`xlakit._jax.keys.placement_free_key`). Never fails a compile."""
    told = getattr(handler, "jax_cache_dir_set", None)
    if told is None:
        return
    try:
        import jax

        folder = getattr(jax.config, "jax_compilation_cache_dir", None)
        if folder:
            told(str(folder))
    except Exception:  # noqa: BLE001 - telling is best effort; the compile goes on
        pass


_level_lock = threading.Lock()


def _compute_parts(args: tuple, kwargs: dict) -> dict[str, str]:
    """Run JAX's ``cache_key.get`` once more with its DEBUG records on, and collect the per-part hashes it
    logs (the filter hides those records from the user's handlers)."""
    key_logger = logging.getLogger(_KEY_LOGGER)
    _local.parts = {}
    try:
        with _level_lock:
            level = key_logger.level
            key_logger.setLevel(logging.DEBUG)
            try:
                _saved["key_get"](*args, **kwargs)
            finally:
                key_logger.setLevel(level)
    except Exception:  # noqa: BLE001 - parts only explain misses; never fail a compile for them
        return {}
    return dict(getattr(_local, "parts", {}) or {})


def _run_python_pjit(p, args_flat, fun, args, kwargs):
    handler = getattr(fun, _MARK, None)
    if handler is None:
        return _saved["run_python_pjit"](p, args_flat, fun, args, kwargs)
    with route(handler):
        return _saved["run_python_pjit"](p, args_flat, fun, args, kwargs)


def _lowered_compile(self, *args, **kwargs):
    """``jax.stages.Lowered.compile``, keeping the Lowered beside its Compiled where XLA's ``memory_analysis()``
    carries no buffer assignment (TPU), so that ``xlakit.memory`` can compile it once more with XLA's dump
    (:func:`xlakit._jax.lowerings.note_lowering`); elsewhere it only calls JAX's."""
    compiled = _saved["lowered_compile"](self, *args, **kwargs)
    from xlakit._jax import lowerings

    lowerings.note_lowering(compiled, self, kwargs.get("compiler_options", args[0] if args else None))
    return compiled


def _context(module_name: str, cache_key: str) -> CompileContext:
    ctx = getattr(_local, "ctx", None)
    # The read's context serves the write of the same compile. Placement-free keys are shared by lowerings on
    # other devices (JAX may even reuse one ir.Module for them), so the context must come from the last key
    # computation itself (else a stale context of another lookup, e.g. one a probe abandoned, would lend its
    # devices and key arguments).
    if ctx is not None and ctx.key == cache_key and ctx.key_call is getattr(_local, "key_call", None):
        return ctx
    ours = getattr(_local, "key_parts", None) == cache_key  # xlakit computed this key on this thread
    return CompileContext(module_name, cache_key, {}, getattr(_local, "module", None),
                          getattr(_local, "devices", None), getattr(_local, "key_call", None), ours)


def _cache_read(module_name, cache_key, compile_options, backend, executable_devices, *rest):
    handler = _current()
    if handler is None:
        return _saved["read"](module_name, cache_key, compile_options, backend, executable_devices, *rest)
    ctx = _local.ctx = _context(module_name, cache_key)
    host_callbacks = rest[0] if rest else ()
    result = handler.read(ctx, compile_options, backend, executable_devices, host_callbacks)
    if result[0] is not None:
        # A hit has no write to follow: let go of the module now, or the next compile pays for freeing it
        # (24 ms for a small transformer's MLIR module, measured) inside its own lookup.
        _local.ctx = _local.module = _local.devices = _local.key_call = _local.key_parts = None
    else:
        _capture_assignment(cache_key, compile_options, backend)
    return result


def _capture_assignment(cache_key: str, compile_options: Any, backend: Any) -> None:
    """A miss is compiled next: where memory_analysis() carries no buffer assignment (TPU), compile it with XLA's
    dump so that ``xlakit.memory`` need not compile it again (:func:`xlakit._jax.dump_memo.begin_capture`)."""
    from xlakit._jax import dump_memo

    left = getattr(_local, "capture", None)
    if left is not None:  # a compile that failed before its write: its folder is still there
        dump_memo.end_capture(left[1], None, None)
    folder = dump_memo.begin_capture(compile_options, getattr(backend, "platform", None))
    _local.capture = (cache_key, folder) if folder is not None else None


def _cache_write(cache_key, compile_time_secs, module_name, backend, executable, *rest):
    handler = _current()
    if handler is None:
        return _saved["write"](cache_key, compile_time_secs, module_name, backend, executable, *rest)
    ctx = _context(module_name, cache_key)
    ctx.parts()  # while the module is still JAX's to hash
    # do not keep a compiled module alive
    _local.ctx = _local.module = _local.devices = _local.key_call = _local.key_parts = None
    host_callbacks = rest[0] if rest else ()
    capture, _local.capture = getattr(_local, "capture", None), None
    if capture is not None:
        from xlakit._jax import dump_memo

        dump_memo.end_capture(capture[1], executable if capture[0] == cache_key else None, module_name)
    return handler.write(ctx, compile_time_secs, backend, executable, host_callbacks)


def _log_miss(module_name, cache_key):
    """JAX's persistent-cache miss record; at WARNING under ``jax_explain_cache_misses`` also when xlakit's store
    answered (JAX gives WARNING only when its own directory cache is configured)."""
    if _current() is None:
        return _saved["log_miss"](module_name, cache_key)
    return cache_signals.log_miss(module_name, cache_key)


def _hide_frames(hide: bool) -> None:
    """Count this file's frames (the :func:`_run_python_pjit` and :func:`mark` wrappers, on the stack of every
    trace) as JAX's own, not the user's, as JAX does for its files.

    Otherwise each traced operation's location names one more "user" frame: a bigger module to lower, a bigger
    executable (~1 kB more debug metadata for the demo transformer) to store and deserialize, and a frame of
    xlakit's in the user's error tracebacks. Locations are not part of the cache key (JAX hashes the module
    without debug info), so keys do not change. Removed again exactly by the last :func:`release`.
    """
    try:
        from jax._src import source_info_util as siu

        paths = siu._exclude_paths
        if hide and __file__ not in paths:
            siu.register_exclusion(__file__)
        elif not hide and __file__ in paths:
            paths.remove(__file__)
            siu._exclude_path_regex.cache_clear()
            siu.is_user_filename.cache_clear()
    except (ImportError, AttributeError):  # pragma: no cover - another JAX: frames stay visible, nothing breaks
        pass


def check_installable() -> None:
    """Raise :class:`UnsupportedJaxVersion` now if :func:`acquire` would (JAX's functions are checked only
    while xlakit's hooks are not in place: installed, they stand in for JAX's)."""
    with _lock:
        if _users == 0:
            versions.check_transparent_hooks()


def acquire() -> None:
    """Install the hooks (first user) or count one more user.

    Raises:
      UnsupportedJaxVersion: this JAX lacks the hooks; the message names the supported versions.
    """
    global _users
    with _lock:
        if _users == 0:
            versions.check_transparent_hooks()
            from jax._src import cache_key, compiler, pjit, stages

            key_logger = logging.getLogger(_KEY_LOGGER)
            capture = _KeyCapture(passthrough_level=key_logger.getEffectiveLevel())
            _saved.update(read=compiler._cache_read, write=compiler._cache_write, key_get=cache_key.get,
                          run_python_pjit=pjit._run_python_pjit, logger_level=key_logger.level, capture=capture,
                          log_miss=getattr(compiler, "log_persistent_cache_miss", None))
            key_logger.addFilter(capture)
            # inspect.signature follows __wrapped__: version checks keep seeing JAX's own signatures.
            _cache_read.__wrapped__ = _saved["read"]  # type: ignore[attr-defined]
            _cache_write.__wrapped__ = _saved["write"]  # type: ignore[attr-defined]
            compiler._cache_read = _cache_read
            compiler._cache_write = _cache_write
            cache_key.get = _key_get
            pjit._run_python_pjit = _run_python_pjit
            _saved["lowered_compile"] = stages.Lowered.compile
            functools.update_wrapper(_lowered_compile, _saved["lowered_compile"])  # JAX's name, doc and signature
            stages.Lowered.compile = _lowered_compile  # type: ignore[method-assign]
            if _saved["log_miss"] is not None:
                compiler.log_persistent_cache_miss = _log_miss
            _hide_frames(True)
        _users += 1


def release() -> None:
    """One user fewer; the last one restores JAX's functions and logger exactly as :func:`acquire` found them."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            from jax._src import cache_key, compiler, pjit, stages

            compiler._cache_read = _saved["read"]
            stages.Lowered.compile = _saved["lowered_compile"]  # type: ignore[method-assign]
            compiler._cache_write = _saved["write"]
            cache_key.get = _saved["key_get"]
            pjit._run_python_pjit = _saved["run_python_pjit"]
            if _saved.get("log_miss") is not None:
                compiler.log_persistent_cache_miss = _saved["log_miss"]
            key_logger = logging.getLogger(_KEY_LOGGER)
            key_logger.removeFilter(_saved["capture"])
            key_logger.setLevel(_saved["logger_level"])
            _hide_frames(False)
            # JAX's own functions stay in _saved: a compile on another thread that entered a wrapper just before
            # this release still forwards to them (clearing them made that jax.jit call fail with KeyError).
            _saved.pop("capture", None)
            _saved.pop("logger_level", None)


def installed() -> bool:
    return _users > 0
