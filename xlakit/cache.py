"""ExecutableCache: compile and jit through xlakit's store explicitly, explain misses, load onto other devices.

Transparent mode (:func:`xlakit.enable_cache`) serves every ``jax.jit`` in the process. An
:class:`ExecutableCache` serves only what goes through it — an ahead-of-time workflow, a serving loop, a
program moved to another device — on the same store format, keys and events.

How each path works:

* :meth:`ExecutableCache.jit` returns a real ``jax.jit`` object over a marked copy of the function. Only
  when that object misses its in-memory dispatch cache does xlakit's hook route the compile to this cache
  (load on a hit, compile-and-store on a miss); every later call dispatches through ``jax.jit``'s C++ path,
  so there is no hashing per call.
* :meth:`ExecutableCache.compile` lowers (if needed) and compiles under this cache, and also stores the
  JAX-level executable (shardings and pytree structure) so that :meth:`load` can place it on other devices.
* :meth:`ExecutableCache.explain` computes the key a lookup would use — without compiling — and compares
  its parts with the nearest entry of the same function.
"""

from __future__ import annotations

import base64
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xlakit import events as _events
from xlakit._jax import hooks
from xlakit._jax.environment import current_environment
from xlakit._jax.handler import StoreHandler, _expectations
from xlakit._jax.hooks import CompileContext
from xlakit._jax.signature import main_signature, module_text
from xlakit.events import Event
from xlakit.explain import Explanation, compare
from xlakit.store import EntryInfo, LocalStore

__all__ = ["ExecutableCache", "CacheEvent"]

CacheEvent = Event
_AOT_SUFFIX = "-aot"
_MAX_MODULE_TEXT = 4 << 20  # bytes of zstd-compressed module text kept per entry for explanations


class _Probe(Exception):
    """Raised from inside JAX's compile path by :meth:`ExecutableCache.explain` once the key is known."""

    def __init__(self, ctx: CompileContext, backend: Any) -> None:
        super().__init__("xlakit explain probe")
        self.ctx, self.backend = ctx, backend


class _ProbeHandler:
    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        raise _Probe(ctx, backend)

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):  # pragma: no cover
        return None


class _PassThrough:
    """A handler that finds nothing and stores nothing: the compile goes to XLA."""

    def read(self, ctx, compile_options, backend, executable_devices, host_callbacks):
        return None, None

    def write(self, ctx, compile_time_secs, backend, executable, host_callbacks):
        return None


class ExecutableCache(StoreHandler):
    """A persistent cache of compiled XLA executables that you call explicitly.

    Args:
      path: cache folder; default ``$XLAKIT_CACHE_DIR``, else the platform's user cache folder.
      max_bytes: byte cap for everything under ``path`` (measured on disk), least recently used evicted.
      min_compile_time_s: programs compiled faster than this (seconds) are not stored (recorded as ``skip``).
      secret: HMAC key; default ``$XLAKIT_CACHE_SECRET`` or the secret file in the user config folder.
      log: event log; default the process-wide :func:`xlakit.events.log`.

    Raises:
      xlakit._jax.versions.UnsupportedJaxVersion: the installed JAX lacks the hooks this relies on.
      RuntimeError: ``jax_enable_compilation_cache`` is False (JAX then computes no key to cache by).
    """

    def __init__(self, path: str | Path | None = None, max_bytes: int | None = None, *,
                 min_compile_time_s: float = 0.0, secret: bytes | None = None,
                 log: _events.EventLog | None = None) -> None:
        import jax

        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes or None, got {max_bytes}")
        if not jax.config.jax_enable_compilation_cache:
            raise RuntimeError("ExecutableCache needs JAX to compute cache keys: set "
                               "jax.config.update('jax_enable_compilation_cache', True) first.")
        super().__init__(LocalStore(path, max_bytes=max_bytes, secret=secret), min_compile_time_s, log)
        hooks.acquire()
        self._finalizer = weakref.finalize(self, hooks.release)

    def close(self) -> None:
        """Detach from JAX (also happens when the cache is garbage-collected). Idempotent."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"ExecutableCache({str(self.store.root)!r}, max_bytes={self.store.max_bytes})"

    # -- compile paths ---------------------------------------------------------------------------------
    def jit(self, fn: Callable, **jit_kwargs: Any):
        """``jax.jit(fn, **jit_kwargs)`` whose compiles go through this cache.

        Returns a genuine ``jax.jit`` object (``.lower``, ``.trace``, ``.eval_shape`` work as usual); results
        are bit-identical to ``jax.jit(fn)``'s since the same program runs.
        """
        import jax

        return jax.jit(hooks.mark(fn, self), **jit_kwargs)

    def compile(self, lowered_or_jitted: Any, *args: Any, devices: Sequence[Any] | None = None,
                **kwargs: Any) -> tuple[Any, CacheEvent]:
        """Compile through this cache: load on a hit, compile and store on a miss.

        Args:
          lowered_or_jitted: a ``jax.stages.Lowered``, a ``jax.jit`` object, or a plain function (jitted here).
          *args, **kwargs: example arguments (arrays or ``jax.ShapeDtypeStruct``) unless already lowered.
          devices: place the compiled program on these devices instead (same count and kind as the
            devices it was lowered for; a permutation works). Checked before anything reaches XLA.

        Returns:
          ``(jax.stages.Compiled, event)`` where ``event`` is the decisive :class:`~xlakit.events.Event`:
          ``hit``, or after a miss ``store`` / ``skip`` / ``store_error``.

        Raises:
          xlakit._jax.serialize.DevicePlacementError: ``devices`` do not match the program's placement.
        """
        import jax

        lowered = self._lower(lowered_or_jitted, *args, **kwargs)
        seen: list[Event] = []
        unsubscribe = self.log.subscribe(seen.append)
        try:
            with hooks.route(self):
                compiled = lowered.compile()
        finally:
            unsubscribe()
        decisive = [e for e in seen if e.kind in ("hit", "store", "skip", "store_error", "load_error")]
        if not decisive:  # JAX answered from its in-process compile memo: nothing reached the store
            ctx = self._probe(lowered).ctx
            decisive = [self.log.emit("hit", name=ctx.module_name, key=ctx.key, partition=self._partition(),
                                      reason="JAX's in-process compile cache", source="jit", duration_s=0.0)]
        event = decisive[-1]
        if event.key and not self._has_aot(event.key):
            # Re-serializing an executable that was itself loaded from a cache is unreliable (jax 0.12 CPU
            # loses fused functions), so the loadable copy always comes from a fresh compile.
            start = time.perf_counter()
            fresh = compiled if event.kind != "hit" else self._compile_fresh(lowered)
            compile_s = next((e.duration_s for e in seen if e.kind == "compile"), time.perf_counter() - start)
            self._store_aot(fresh, event.key, event.name, compile_s)
        if devices is not None:
            compiled = self.load(event.key, devices)
        assert isinstance(compiled, jax.stages.Compiled)
        return compiled, event

    def load(self, entry: EntryInfo | str | Any, devices: Sequence[Any] | None = None):
        """Load a program stored by :meth:`compile` as a ``jax.stages.Compiled``, optionally on other devices.

        Args:
          entry: an :class:`~xlakit.store.EntryInfo`, a key, or a row of :meth:`entries`.
          devices: devices to run on (same count and kinds as stored; a permutation or another set of the
            same kind works). Default: the devices it was compiled for.

        Raises:
          KeyError: no loadable entry with that key (entries stored by ``jit`` or transparent mode keep only
            the XLA executable; compile the program with :meth:`compile` to make it loadable).
          xlakit._jax.serialize.DevicePlacementError: ``devices`` do not match; raised before XLA is called.
          xlakit.store.envelope.EntryError: the entry failed its integrity or authenticity check.
        """
        from xlakit._jax import serialize

        key = entry if isinstance(entry, str) else getattr(entry, "key", None) or entry["key"]
        key = key if key.endswith(_AOT_SUFFIX) else key + _AOT_SUFFIX
        env = current_environment()
        partition = env.partition_name()
        found = self.store.get(partition, key, expect=_expectations(env))
        if found.status != "hit":
            raise KeyError(f"no loadable entry {key!r} in partition {partition} ({found.status}: {found.reason}); "
                           "entries stored by cache.jit or transparent mode keep only the XLA executable — use "
                           "cache.compile(...) to store a program that load() can place on other devices")
        placement = serialize.Placement.from_dict(found.header["placement"])
        start = time.perf_counter()
        compiled = serialize.load_compiled(found.payload, placement, devices)
        load_s = time.perf_counter() - start
        compile_s = float(found.header.get("compile_s") or 0.0)
        self._emit("hit", found.header.get("name"), key, partition, duration_s=load_s,
                   bytes=found.header.get("payload_bytes"), saved_s=max(0.0, compile_s - load_s))
        return compiled

    # -- explanations -----------------------------------------------------------------------------------
    def explain(self, fn_or_lowered: Any, *args: Any, **kwargs: Any) -> Explanation:
        """Would this program hit? If not, which parts differ from the nearest entry of the same function.

        Computes the key exactly as a compile would (JAX's own key code) but stops before compiling.
        Compares JAX's per-part key hashes, the environment (versions, XLA flags, devices, CPU), the
        entry signature (shape, dtype, sharding, donation per argument) and the module text.
        """
        lowered = self._lower(fn_or_lowered, *args, **kwargs)
        probe = self._probe(lowered)
        ctx = probe.ctx
        env = current_environment(probe.backend.platform)
        partition = env.partition_name()
        text = module_text(ctx.module)
        now = {"key_parts": ctx.parts(), "environment": env.to_dict(), "signature": main_signature(text),
               "module_text": text}
        expected = _expectations(env)
        best: tuple[float, float, EntryInfo, list, str | None] | None = None
        for info in self.store.entries():  # headers only: explaining never loads or quarantines anything
            if info.name != ctx.module_name or info.key.endswith(_AOT_SUFFIX):
                continue
            header = dict(info.header)
            recorded = header.get("environment") or {}
            if (info.key == ctx.key and info.partition == partition
                    and all(recorded.get(k) == v for k, v in expected.items())):
                return Explanation(ctx.module_name, ctx.key, partition, "hit")
            header["module_text"] = _decode_text(header.get("module_text_zstd"))
            diffs, module_diff = compare(now, header)
            # A changed signature also changes the module text, which then goes unreported: break ties
            # toward entries whose signature matches, so an edited body is reported as "module".
            signature_changed = any(d.kind in ("shape", "dtype", "sharding", "donation") for d in diffs)
            rank = (len(diffs) + 0.5 * signature_changed, -(info.created or 0.0))
            if best is None or rank < best[:2]:
                best = (rank[0], rank[1], info, diffs, module_diff)
        if best is None:
            return Explanation(ctx.module_name, ctx.key, partition, "new")
        _, _, info, diffs, module_diff = best
        return Explanation(ctx.module_name, ctx.key, partition, "miss",
                           nearest={"key": info.key, "partition": info.partition, "created": info.created},
                           differences=tuple(diffs), module_diff=module_diff)

    # -- the store as a table ---------------------------------------------------------------------------
    def entries(self):
        """The entries as a ``pandas.DataFrame``: name, key, partition, size_bytes (on disk), compile_s,
        created, last_used (datetimes), hits (in this process, from the event log), loadable (stored by
        :meth:`compile`), and the compiled memory fields recorded at compile time
        (``LoadedExecutable.get_compiled_memory_stats()``, bytes; missing where the backend reports none)."""
        import pandas as pd

        hits: dict[str, int] = {}
        for e in self.log.events("hit"):
            if e.key:
                hits[e.key] = hits.get(e.key, 0) + 1
        infos = self.store.entries()
        aot = {i.key[: -len(_AOT_SUFFIX)] for i in infos if i.key.endswith(_AOT_SUFFIX)}
        rows = []
        for info in infos:
            if info.key.endswith(_AOT_SUFFIX):
                continue
            rows.append({"name": info.name, "key": info.key, "partition": info.partition,
                         "size_bytes": info.size_bytes, "compile_s": info.compile_s,
                         "created": pd.to_datetime(info.created, unit="s") if info.created else pd.NaT,
                         "last_used": pd.to_datetime(info.last_used, unit="s"),
                         "hits": hits.get(info.key, 0), "loadable": info.key in aot,
                         **(info.header.get("memory") or {})})
        return pd.DataFrame(rows)

    def stats(self) -> dict[str, Any]:
        """On-disk totals: entries, bytes (``LocalStore.total_bytes``), recorded compile seconds, partitions."""
        infos = [i for i in self.store.entries() if not i.key.endswith(_AOT_SUFFIX)]
        return {"folder": str(self.store.root), "entries": len(infos), "bytes": self.store.total_bytes(),
                "compile_s": sum(i.compile_s or 0.0 for i in infos), "partitions": self.store.partitions(),
                "max_bytes": self.store.max_bytes}

    def prune(self, max_bytes: int) -> list[EntryInfo]:
        """Evict least-recently-used entries until the folder holds at most ``max_bytes``; each is an event."""
        evicted = self.store.prune(max_bytes)
        for gone in evicted:
            self._emit("evict", gone.name, gone.key, gone.partition, bytes=gone.size_bytes,
                       reason=f"pruned to {max_bytes} bytes")
        return evicted

    def verify(self) -> list[tuple[EntryInfo, str | None]]:
        """Open every entry; bad ones are quarantined (each a ``corrupt`` event). Returns (entry, reason)."""
        results = self.store.verify()
        for info, reason in results:
            if reason:
                self._emit("corrupt", info.name, info.key, info.partition, reason=reason)
        return results

    def clear(self, partition: str | None = None) -> int:
        """Remove the entries of one partition, or all; returns how many."""
        return self.store.clear(partition)

    # -- internals --------------------------------------------------------------------------------------
    def _extra_header(self, ctx: CompileContext) -> dict[str, Any]:
        text = module_text(ctx.module)
        extra: dict[str, Any] = {"signature": main_signature(text)}
        if text is not None:
            import zstandard

            packed = zstandard.ZstdCompressor(level=9).compress(text.encode())
            if len(packed) <= _MAX_MODULE_TEXT:
                extra["module_text_zstd"] = base64.b64encode(packed).decode("ascii")
        return extra

    def _lower(self, x: Any, *args: Any, **kwargs: Any):
        import jax

        if isinstance(x, jax.stages.Lowered):
            if args or kwargs:
                raise TypeError("a Lowered program takes no example arguments; pass the jitted function instead")
            return x
        if not hasattr(x, "lower"):
            if not callable(x):
                raise TypeError(f"expected a jax.stages.Lowered, a jax.jit object or a function, got {type(x)}")
            x = jax.jit(x)
        return x.lower(*args, **kwargs)

    def _probe(self, lowered: Any) -> _Probe:
        from jax._src.interpreters import pxla

        for _ in range(2):
            try:
                with hooks.route(_ProbeHandler()):
                    # compiler_options={} (same key) skips the executable memoised on the lowering object.
                    lowered._lowering.compile(compiler_options={})
            except _Probe as probe:
                return probe
            # JAX answered from its in-process compile memo without computing a key: forget that memo once.
            pxla._cached_compilation.cache_clear()
        raise RuntimeError("could not compute the cache key of this program (JAX did not reach its cache)")

    def _compile_fresh(self, lowered: Any):
        """Compile with XLA, bypassing every cache (JAX's in-process memo included)."""
        from jax._src.interpreters import pxla

        pxla._cached_compilation.cache_clear()  # it may hold the executable just loaded from the store
        with hooks.route(_PassThrough()):
            return lowered.compile(compiler_options={})  # {}: same key, skips the lowering's own memo

    def _partition(self) -> str:
        return current_environment().partition_name()

    def _has_aot(self, key: str | None) -> bool:
        return bool(key) and self.store.entry_path(self._partition(), key + _AOT_SUFFIX).exists()

    def _store_aot(self, compiled: Any, key: str | None, name: str | None, compile_s: float | None) -> None:
        """Also keep the JAX-level executable so :meth:`load` can place it on other devices."""
        from xlakit._jax import serialize

        if not key:
            return
        partition = self._partition()
        try:
            payload, placement = serialize.serialize_compiled(compiled)
        except serialize.NotSerializable as exc:
            self._emit("skip", name, key + _AOT_SUFFIX, partition,
                       reason=f"not loadable onto other devices: {exc.reason}")
            return
        env = current_environment()
        header = {"name": name, "payload_kind": "jax-compiled-pickle", "placement": placement.to_dict(),
                  "environment": env.to_dict(), "created": time.time(), "compile_s": compile_s}
        result = self.store.put(partition, key + _AOT_SUFFIX, header, payload)
        if not result.stored:
            self._emit("store_error", name, key + _AOT_SUFFIX, partition, reason=result.reason)


def _decode_text(packed: str | None) -> str | None:
    if not packed:
        return None
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompress(base64.b64decode(packed)).decode()
    except Exception:  # noqa: BLE001 - an unreadable explanation aid is not an error
        return None
