"""The floor the bundle benchmarks compare against: XLA's own load of a bundle's compiled programs from bytes
already in memory, and its weights placed from host arrays already in memory — no files, no hashing, no checks.

Per program this is what ``jax.experimental.serialize_executable.deserialize_and_load`` does: JAX's own unpickler,
whose persistent ``('exec', bytes)`` id calls ``Client.deserialize_executable``, then ``unloaded.load()`` and
``jax.stages.Compiled``. The payloads are read from the bundle's ``.cache`` (verified by xlakit's store) and put
in JAX's own format (the executable inside the pickle; xlakit stores it after the pickle) before a timed span
starts. Used by ``bundle_warm_start.py``, ``first_result.py`` and ``accelerator.py``. :func:`handover` times, side by
side, what xlakit and the floor do before XLA's deserializer gets the executable's bytes.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any


def read_programs(bundle: str | Path, batch_sizes: tuple[int, ...] | None = None) -> dict[int, bytes]:
    """``batch size -> payload`` (the serialized executable in JAX's own format, :func:`jax_format`) of a bundle's
    default-variant modules, read from its ``.cache`` for the default device's environment. ``batch_sizes``: only
    these (default all). Raises AssertionError when a program is not in ``.cache`` (fill it with a ``load_bundle``
    first)."""
    import jax

    import xlakit.bundle  # noqa: F401 - the package, before its modules
    from xlakit._jax.environment import current_environment
    from xlakit.bundle.hashes import program_key, sha256_hex
    from xlakit.bundle.manifest import CACHE_DIR, Manifest
    from xlakit.store import LocalStore

    path = Path(bundle)
    manifest = Manifest.read(path)
    partition = current_environment(jax.devices()[0].platform).partition_name()
    store = LocalStore(path / CACHE_DIR)
    payloads = {}
    for spec in manifest.modules:
        if batch_sizes is not None and spec.batch_size not in batch_sizes:
            continue
        key = program_key(spec.file, sha256_hex((path / spec.file).read_bytes()))
        found = store.get(partition, key)
        assert found.status == "hit", (str(path), spec.file, found.status, found.reason)
        payloads[spec.batch_size] = jax_format(found.payload)
    return payloads


def jax_format(payload: bytes) -> bytes:
    """An xlakit payload (:mod:`xlakit._jax.payload_layout`: the pickle frame, then the executable) in JAX's own
    format, the executable inside the pickle as ``jax.experimental.serialize_executable.serialize`` writes it: the
    frame is unpickled by JAX's unpickler with the executable left as bytes (nothing is loaded) and pickled again by
    JAX's pickler. A payload already in JAX's format is returned as it is."""
    import jax
    from jax.experimental.serialize_executable import _JaxPjrtPickler, _JaxPjrtUnpickler

    from xlakit._jax import payload_layout

    frame, tail = payload_layout.split(payload)
    if tail is None:
        return payload
    executable, stand_in = bytes(tail), object()

    class Unpickler(_JaxPjrtUnpickler):
        def persistent_load(self, pid):
            return stand_in if pid[0] == "exec" else super().persistent_load(pid)

    class Pickler(_JaxPjrtPickler):
        def persistent_id(self, obj):
            return ("exec", executable) if obj is stand_in else super().persistent_id(obj)

    objects = Unpickler(io.BytesIO(frame), jax.devices()[0].client).load()
    with io.BytesIO() as f:
        Pickler(f).dump(objects)
        return f.getvalue()


def handover(bundle: str | Path, batch_size: int | None = None, repeats: int = 5) -> dict[str, Any]:
    """What comes before XLA's ``deserialize_executable`` on a warm load of one of a bundle's programs (the first
    default-variant module, or the one at ``batch_size``), side by side, in this process: median seconds over
    ``repeats``, the entry file in the page cache as on a second start.

    * ``xlakit_s``: ``LocalStore.get`` of its ``.cache`` entry (open, read, the one pass of the full MAC over the
      payload, decompression if stored zstd), then the policy scan of the pickle frame and the executable as the
      ``bytes`` XLA takes (the payload's own tail for an entry with ``payload_split``, else a copy);
    * ``floor_s``: JAX's own unpickler over the same payload in JAX's format, up to its ``('exec', bytes)``
      persistent id: the copy of the executable out of the pickle that ``deserialize_and_load`` makes.

    Also ``executable_bytes`` and ``how``: the steps of xlakit's side, in words (decompression when stored zstd; a
    copy of the executable unless it is stored as it is with a ``payload_split``)."""
    import statistics

    import jax
    from jax.experimental.serialize_executable import _JaxPjrtUnpickler

    import xlakit.bundle  # noqa: F401 - the package, before its modules
    from xlakit._jax.environment import current_environment
    from xlakit._jax.unpickle_policy import _scan_payload
    from xlakit.bundle.hashes import program_key, sha256_hex
    from xlakit.bundle.manifest import CACHE_DIR, Manifest
    from xlakit.store import LocalStore

    path = Path(bundle)
    spec = next(s for s in Manifest.read(path).modules if batch_size in (None, s.batch_size))
    client = jax.devices()[0].client
    partition = current_environment(jax.devices()[0].platform).partition_name()
    store = LocalStore(path / CACHE_DIR)
    key = program_key(spec.file, sha256_hex((path / spec.file).read_bytes()))

    def xlakit_handover() -> bytes:
        found = store.get(partition, key)
        assert found.status == "hit", (str(path), found.status, found.reason)
        return _scan_payload(found.payload).executable()

    class Unpickler(_JaxPjrtUnpickler):  # JAX's own, stopping where XLA would be called
        def persistent_load(self, pid):
            return None if pid[0] == "exec" else super().persistent_load(pid)

    found = store.get(partition, key)
    jax_payload = jax_format(found.payload)

    def timed(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    packed = found.header.get("compression") != "none"
    how = "read, MAC" + (", zstd decompression" if packed else "") + (
        ", no copy" if "payload_split" in found.header and not packed else ", a copy of the executable")
    return {"xlakit_s": timed(xlakit_handover),
            "floor_s": timed(lambda: Unpickler(io.BytesIO(jax_payload), client).load()),
            "executable_bytes": len(xlakit_handover()), "how": how}


def read_host_weights(bundle: str | Path) -> dict[str, Any]:
    """The bundle's weights as host NumPy arrays, ``name -> array``: the dict ``load_bundle`` places, read by the
    same reader (``safetensors.numpy`` cannot make bfloat16 arrays)."""
    from xlakit.bundle.manifest import Manifest
    from xlakit.bundle.weights import read_weights

    path = Path(bundle)
    return read_weights(path / Manifest.read(path).weights_file)


class XlaLoader:
    """Loads serialized executables the way ``deserialize_and_load`` does, onto ``device`` (default JAX's first).

    ``exec_s`` sums the seconds spent in ``Client.deserialize_executable`` alone (thread-seconds when called from
    several threads)."""

    def __init__(self, device: Any = None) -> None:
        import jax
        from jax.experimental.serialize_executable import _JaxPjrtUnpickler

        from xlakit._jax import serialize

        self.device = device if device is not None else jax.devices()[0]
        self.exec_s = 0.0
        self._make_compiled = serialize._make_compiled
        timings = self

        class Unpickler(_JaxPjrtUnpickler):  # JAX's own, timing its deserialize_executable call
            def persistent_load(self, pid):
                start = time.perf_counter()
                try:
                    return super().persistent_load(pid)
                finally:
                    timings.exec_s += time.perf_counter() - start

        self._unpickler = Unpickler

    def load(self, payload: bytes) -> Any:
        """A ``jax.stages.Compiled`` from one payload of :func:`read_programs`."""
        unloaded, args_info_flat, no_kwargs, in_tree, out_tree = self._unpickler(
            io.BytesIO(payload), self.device.client, [self.device]).load()
        return self._make_compiled(unloaded.load(), in_tree.unflatten(args_info_flat), out_tree, no_kwargs)
