"""ExecutableCache: compile and jit through xlakit's store explicitly, explain misses, load onto other devices.

Transparent mode (:func:`xlakit.enable_cache`) serves every ``jax.jit`` in the process. An
:class:`ExecutableCache` serves only what goes through it — an ahead-of-time workflow, a serving loop, a
program moved to another device — on the same store format, keys and events.

How each path works:

* :meth:`ExecutableCache.jit` returns a real ``jax.jit`` object over a marked copy of the function (named as
  ``jax.jit`` names the function, so keys equal transparent mode's). Only when that object misses its
  in-memory dispatch cache does xlakit's hook route the compile to this cache (load on a hit, compile-and-store
  on a miss); every later call dispatches through ``jax.jit``'s C++ path, so there is no hashing per call.
* :meth:`ExecutableCache.compile` lowers (if needed) and compiles under this cache and gets the
  :class:`~xlakit.cache.decision.Decision` back as a value. A program it stores is one entry whose payload is
  the JAX-level executable (shardings and pytrees, XLA bytes inside), so :meth:`load` can place it on other
  devices and plain ``jax.jit`` lookups of the same key still hit it. A program JAX already holds in memory
  (it ran in this process) is compiled again past JAX's in-process memo, so it is stored from an executable
  that never ran, and the decision says ``store`` — never a hit that did not come from the store.
* :meth:`ExecutableCache.explain` computes the key a lookup would use — without compiling — and compares
  its parts with the nearest entry of the same function (:mod:`xlakit.cache.explaining`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xlakit._jax.call_options import DEFAULT, Default
from xlakit.cache import entry as _entry
from xlakit.cache.decision import Decision
from xlakit.cache.handler import StoreHandler, _Capture

__all__ = ["ExecutableCache", "CacheEvent"]

CacheEvent = Decision  # what compile() returns; kept under its old name


class _NotLoadable(KeyError):
    pass


class ExecutableCache(StoreHandler):
    """A persistent cache of compiled XLA executables that you call explicitly.

    Args:
      path: cache folder (a leading ``~`` is expanded; created now if missing); default ``$XLAKIT_CACHE_DIR``,
        else the platform's user cache folder.
      max_bytes: byte cap for everything under ``path`` (measured on disk), least recently used evicted: an
        int number of bytes, or a size string read like the CLI's ``--max-bytes`` (``"2GB"`` = 2*10**9 bytes,
        ``"500MiB"`` = 500*2**20 bytes); None for no cap.
      min_compile_time_s: programs compiled faster than this (seconds, a finite number >= 0) are not stored
        (recorded as ``skip``).
      secret: HMAC key; default ``$XLAKIT_CACHE_SECRET`` or the secret file in the user config folder.
      log: event log; default the process-wide :func:`xlakit.events.log`.
      remote: a shared store in front of which ``path`` sits (``s3://bucket/prefix``, ``gs://...``,
        ``file:///...``); default ``$XLAKIT_CACHE_REMOTE``. See :func:`xlakit.enable_cache`.
      remote_mode: ``"rw"`` (default, ``$XLAKIT_CACHE_REMOTE_MODE``) or ``"ro"`` (never writes to the remote).
      remote_options: fsspec storage options (default ``$XLAKIT_CACHE_REMOTE_OPTIONS``, a JSON object).

    Raises:
      TypeError: ``path`` is not a str/``os.PathLike``/None, ``max_bytes`` is not an int/size string/None
        (a bool or float included), or ``min_compile_time_s`` is not a number.
      ValueError: ``max_bytes`` <= 0, over 2**63 - 1 or an unreadable size string; ``min_compile_time_s`` negative
        or not finite (an int too large for a float included). Each message names the argument.
      xlakit.UnsupportedJaxVersion: the installed JAX lacks the hooks this relies on.
      RuntimeError: ``jax_enable_compilation_cache`` is False (JAX then computes no key to cache by).
      xlakit.store.CacheFolderError: ``path`` is a file or cannot be created (an ``OSError``; names the path).
    """

    def __init__(self, path: str | Path | None = None, max_bytes: int | str | None = None, *,
                 min_compile_time_s: float = 0.0, secret: bytes | None = None, log: Any = None,
                 remote: str | None = None, remote_mode: str | None = None,
                 remote_options: dict | None = None) -> None:
        import jax

        from xlakit._jax import hooks
        from xlakit._jax.fingerprint import use_memo_dir
        from xlakit._units import check_max_bytes, check_path, check_seconds
        from xlakit.cache import open_store
        from xlakit.store import prepare_root, resolve_root

        # Checked before the store is opened, so bad input names the argument instead of failing deep inside.
        check_path(path)
        max_bytes = check_max_bytes(max_bytes)
        min_compile_time_s = check_seconds(min_compile_time_s)
        if log is not None and not callable(getattr(log, "emit", None)):  # "x" failed at the first compile
            raise TypeError(f"log must be an xlakit.events.EventLog (or None: the process-wide log), got "
                            f"{type(log).__name__}")
        if not jax.config.jax_enable_compilation_cache:  # type: ignore[attr-defined]
            raise RuntimeError("ExecutableCache needs JAX to compute cache keys: set "
                               "jax.config.update('jax_enable_compilation_cache', True) first.")
        root = prepare_root(resolve_root(path))  # "~" expanded; a file or an uncreatable folder raises here
        store = open_store(root, max_bytes=max_bytes, secret=secret, remote=remote, remote_mode=remote_mode,
                           remote_options=remote_options, log=log, min_upload_compile_s=min_compile_time_s)
        super().__init__(store, min_compile_time_s, log)
        hooks.acquire()
        use_memo_dir(self.store.root)  # the jaxlib fingerprint memo lives beside the cache in use
        self._finalizer = weakref.finalize(self, _detach, self.store.root, getattr(self.store, "close", None))

    def close(self) -> None:
        """Detach from JAX (also happens when the cache is garbage-collected). Idempotent."""
        self._finalizer()

    # -- compile paths ---------------------------------------------------------------------------------
    def jit(self, fn: Callable, **jit_kwargs: Any):
        """``jax.jit(fn, **jit_kwargs)`` whose compiles go through this cache.

        Returns a genuine ``jax.jit`` object (``.lower``, ``.trace``, ``.eval_shape`` work as usual); results
        are bit-identical to ``jax.jit(fn)``'s since the same program runs, and the program's name and key are
        ``jax.jit(fn)``'s (also for a ``functools.partial`` or a callable object).

        Raises:
          TypeError: ``fn`` is not callable, or is a ``jax.stages.Lowered``/``Compiled`` (pass the function or
            its ``jax.jit``; for a Lowered use :meth:`compile`) — refused here, not at the first call.
        """
        import jax

        from xlakit._jax import hooks

        if isinstance(fn, (jax.stages.Lowered, jax.stages.Compiled)):
            stage = "lowered" if isinstance(fn, jax.stages.Lowered) else "compiled"
            raise TypeError(f"cache.jit() got a {stage} program ({type(fn).__name__}); pass the function (or its "
                            "jax.jit), not a lowered/compiled program; for a Lowered use cache.compile(lowered)")
        if not callable(fn):
            raise TypeError(f"cache.jit() needs a function to jit, got {type(fn).__name__} {fn!r}")
        return jax.jit(hooks.mark(fn, self), **jit_kwargs)

    def compile(self, lowered_or_jitted: Any, /, *args: Any, devices: Sequence[Any] | None | Default = DEFAULT,
                **kwargs: Any) -> tuple[Any, Decision]:
        """Compile through this cache: load on a hit, compile and store on a miss.

        Args:
          lowered_or_jitted: a ``jax.stages.Lowered``, a ``jax.jit`` object, or a plain function (jitted here).
            Positional only.
          *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``) unless already lowered, passed
            as ``jax.jit(f)(*args, **kwargs)`` would pass them: every keyword but ``devices`` is the function's.
          devices: keyword only; place the compiled program on these devices instead (same count and kind as the
            devices it was lowered for; a permutation works). Checked before anything reaches XLA. Not passed
            (or None): where it was lowered for.

        Returns:
          ``(jax.stages.Compiled, decision)``; ``decision`` (:class:`~xlakit.cache.decision.Decision`) is
          ``hit`` (loaded from this store), ``store``, ``skip`` or ``store_error``; ``decision.loadable`` says
          whether :meth:`load` can place the entry on other devices.

        Raises:
          TypeError: ``lowered_or_jitted`` is a ``jax.stages.Compiled`` (already compiled: pass the function,
            its ``jax.jit`` with the example arguments, or ``jax.jit(f).lower(x)``), or is not callable; or
            ``devices=`` passed for a function that takes an argument named ``devices`` itself (ambiguous: pass
            the function's positionally, or wrap the function; :mod:`xlakit._jax.call_options`).
          xlakit.DevicePlacementError: ``devices`` do not match the program's placement.
        """
        import jax

        from xlakit._jax import fresh, hooks
        from xlakit._jax.call_options import refuse_clashes

        refuse_clashes("compile", lowered_or_jitted, args, {"devices": (devices, "the devices to place it on")})
        devices = None if devices is DEFAULT else devices
        _check_devices(devices)
        lowered = self._lower(lowered_or_jitted, *args, **kwargs)
        with self.capture(defer=True) as capture, hooks.route(self):
            compiled = lowered.compile()
        if not capture.decisions:
            # JAX answered from its in-process memo (the program ran here before): nothing reached the store.
            with self.capture(defer=True) as capture:
                compiled = fresh.compile_fresh(lowered, handler=self)
        decision = self._settle(lowered, compiled, capture)
        if devices is not None and decision.key:
            compiled = self.load(decision.key, devices)
        assert isinstance(compiled, jax.stages.Compiled)
        return compiled, decision

    def _settle(self, lowered: Any, compiled: Any, capture: _Capture) -> Decision:
        """Publish what the compile left pending as one loadable entry, or make a hit's entry loadable."""
        from xlakit._jax import fresh, serialize

        decisions = capture.decisions
        final = next((d for d in reversed(decisions) if d.kind in ("hit", "store", "skip", "store_error")),
                     decisions[-1] if decisions else None)
        if capture.pending is not None:
            partition, key, header, xla_payload = capture.pending
            try:  # ``compiled`` was just compiled by XLA here and has never run
                payload, placement = serialize.serialize_compiled(compiled)
            except serialize.NotSerializable as exc:
                return self.io.publish(partition, key, header, xla_payload,
                                       reason=f"stored for these devices only; not loadable onto other devices: "
                                              f"{exc.reason}")
            header = dict(header, **_entry.loadable_fields(payload, placement))
            return self.io.publish(partition, key, header, payload)
        if final is None:
            raise RuntimeError("the compile reached neither JAX's cache hooks nor its in-process memo")
        if (final.kind == "hit" and not final.loadable and final.header is not None and final.key
                and final.partition):
            # Stored by jit or transparent mode: add the JAX-level executable, from a compile that never ran
            # (re-serializing an executable loaded from a cache is unreliable).
            try:
                payload, placement = serialize.serialize_compiled(fresh.compile_fresh(lowered))
            except serialize.NotSerializable as exc:
                return final.replace(reason=f"not loadable onto other devices: {exc.reason}")
            header = {k: v for k, v in final.header.items() if k not in _SEALED_FIELDS}
            header.update(_entry.loadable_fields(payload, placement))
            stored = self.io.publish(final.partition, final.key, header, payload, replace=True,
                                     reason="made loadable onto other devices", quiet=True)
            if stored.kind == "store":
                return final.replace(loadable=True, reason="made loadable onto other devices")
        return final

    def load(self, entry: Any, devices: Sequence[Any] | None = None):
        """Load a program stored by :meth:`compile` as a ``jax.stages.Compiled``, optionally on other devices.

        Args:
          entry: an :class:`~xlakit.store.EntryInfo`, a key string, or a row of :meth:`entries` (a mapping
            with ``"key"``).
          devices: devices to run on (same count and kinds as stored; a permutation or another set of the
            same kind works). Default: the devices it was compiled for.

        Raises:
          TypeError: ``entry`` is none of an EntryInfo, a key string or a row with ``"key"``; ``devices`` is not a
            list of ``jax.Device`` (nothing is read or removed).
          KeyError: no loadable entry with that key (entries stored by ``jit`` or transparent mode keep only
            the XLA executable until :meth:`compile` of the same program makes them loadable).
          xlakit.DevicePlacementError: ``devices`` do not match; raised before XLA is called.
        """
        from xlakit._jax import serialize
        from xlakit._jax.environment import current_environment, expectations

        key = _entry_key(entry)
        key = key.removesuffix(_entry.LEGACY_SUFFIX)
        _check_devices(devices)  # before the entry is read: a wrong argument once removed a good entry as unloadable
        env = current_environment()
        partition = env.partition_name()

        def place(header, payload):
            if not _entry.loadable(header):
                raise _NotLoadable(key)
            compiled = serialize.load_compiled(payload, serialize.Placement.from_dict(header["placement"]), devices)
            _entry.keep_assignment(header, compiled)  # XLA's dump kept with the entry (TPU): peak() decodes it
            return compiled

        try:
            compiled, decision = self.io.fetch(partition, key, name=None, load=place, expect=expectations(env),
                                               reraise=(serialize.DevicePlacementError, _NotLoadable))
        except _NotLoadable:
            decision = None
            compiled = None
        if compiled is None:
            why = f"{decision.kind}: {decision.reason}" if decision is not None else "it holds no JAX-level executable"
            raise KeyError(f"no loadable entry {key!r} in partition {partition} ({why}); entries stored by cache.jit "
                           "or transparent mode keep only the XLA executable — use cache.compile(...) to store a "
                           "program that load() can place on other devices")
        return compiled

    # -- explanations -----------------------------------------------------------------------------------
    def explain(self, fn_or_lowered: Any, /, *args: Any, **kwargs: Any):
        """Would this program hit? If not, which parts differ from the nearest entry of the same function.

        Computes the key exactly as a compile would (JAX's own key code) but stops before compiling.
        Compares JAX's per-part key hashes, the environment (versions, XLA flags, devices, CPU), the
        entry signature (shape, dtype, sharding, donation per argument) and the module text. Returns an
        :class:`xlakit.Explanation`. ``fn_or_lowered`` is positional only: every keyword is the function's.
        """
        from xlakit.cache.explaining import explain_lowered

        return explain_lowered(self.store, self._lower(fn_or_lowered, *args, **kwargs), fn_or_lowered)

    # -- internals --------------------------------------------------------------------------------------
    def _lower(self, x: Any, /, *args: Any, **kwargs: Any):
        from xlakit.cache.explaining import lower_program

        return lower_program(x, *args, **kwargs)


def _entry_key(entry: Any) -> str:
    """The key of an EntryInfo (or a Decision), a key string, or a row (a mapping or a ``pandas`` row of
    :meth:`ExecutableCache.entries` with ``"key"``); TypeError for anything else (an int, None, ...)."""
    from collections.abc import Mapping

    key: Any = None
    if isinstance(entry, str):
        key = entry
    elif isinstance(entry, Mapping):
        key = entry.get("key")
    elif not isinstance(entry, (int, float, bytes, list, tuple)):
        key = getattr(entry, "key", None)  # EntryInfo, Decision, a pandas row of entries()
    if not isinstance(key, str) or not key:
        raise TypeError("cache.load() needs an EntryInfo (from cache.store.entries()), a key string (e.g. "
                        "decision.key from cache.compile), or a row of cache.entries() with a 'key'; "
                        f"got {type(entry).__name__} {entry!r}")
    return key


def _detach(folder: Path, close: Callable[[], Any] | None = None) -> None:
    from xlakit._jax import hooks
    from xlakit._jax.fingerprint import use_memo_dir

    if close is not None:  # a SharedStore: finish (bounded) pending uploads
        close()
    use_memo_dir(None, only_if=folder)
    hooks.release()


# Fields the store and the envelope set when sealing; an upgraded entry gets fresh ones.
_SEALED_FIELDS = frozenset({"key", "partition", "format_version", "payload_sha256", "payload_bytes", "raw_bytes"})


def _check_devices(devices: Any) -> None:
    """``devices`` is None or a non-empty list/tuple of ``jax.Device``; else TypeError naming it ("cpu", 5, one
    Device alone or ``[None]`` failed inside the load, which removed the good entry as unloadable)."""
    if devices is None:
        return
    if not isinstance(devices, (list, tuple)) or not devices or not all(
            hasattr(d, "platform") and hasattr(d, "id") for d in devices):
        raise TypeError(f"devices must be a list of jax.Device (e.g. jax.devices()[::-1]) or None, got "
                        f"{type(devices).__name__} {devices!r:.60}")
