"""XLA executables to bytes and back, as JAX's cache hooks hand them to xlakit (adapters, no policy).

* :func:`serialize` — ``LoadedExecutable.serialize()``: XLA's own bytes (not a pickle).
* :func:`deserialize` — ``backend.deserialize_executable`` with the arguments JAX's hook passed (JAX >= 0.11
  also passes host callbacks, which the loaded program is rebound to).
* :func:`executable_bytes` — the XLA bytes inside a JAX-level payload (:func:`xlakit._jax.serialize.
  serialize_compiled`), found by the restricted scanner without building any object, so one entry whose
  payload is loadable onto other devices also serves every plain ``jax.jit`` lookup of the same key.
* :func:`memory_stats` — ``get_compiled_memory_stats()`` as a dict of byte counts.
* :func:`process_index` — which process of a ``jax.distributed`` job this is (only process 0 writes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["serialize", "deserialize", "executable_bytes", "memory_stats", "process_index", "MEMORY_FIELDS"]

MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                 "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
                 "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes",
                 "peak_memory_in_bytes")


def serialize(executable: Any) -> bytes:
    """XLA's serialized form of a ``LoadedExecutable``. Raises whatever XLA raises (e.g. unserializable ops)."""
    return executable.serialize()


def deserialize(backend: Any, payload: bytes, executable_devices: Any, compile_options: Any,
                host_callbacks: Any = ()) -> Any:
    """``backend.deserialize_executable`` as JAX's own cache calls it, then the kernels its custom calls need
    made ready (:func:`xlakit._jax.kernels.make_ready`: the program was not lowered in this process).

    Raises XLA's errors unchanged, and ``KernelsNotReady`` for a kernel that cannot be made ready (the
    executable is dropped unrun; compile instead).
    """
    from xlakit._jax.kernels import make_ready

    if host_callbacks:  # JAX >= 0.11 rebinds this process's callbacks to the loaded program
        loaded = backend.deserialize_executable(payload, executable_devices, compile_options, host_callbacks)
    else:
        loaded = backend.deserialize_executable(payload, executable_devices, compile_options)
    make_ready(loaded, backend.platform, serialized=payload, callbacks=bool(host_callbacks))
    return loaded


def executable_bytes(jax_payload: bytes) -> bytes:
    """The XLA executable bytes inside a :func:`xlakit._jax.serialize.serialize_compiled` payload.

    Raises:
      pickle.UnpicklingError: the payload is not one xlakit accepts (a global outside the allow-list, not one
        executable, malformed).
    """
    import pickle

    from xlakit._jax.unpickle_policy import _scan_payload

    scan = _scan_payload(jax_payload)
    if scan.exec_count != 1:
        raise pickle.UnpicklingError(f"expected one XLA executable in the payload, found {scan.exec_count}")
    return scan.executable()


def memory_stats(executable: Any) -> dict[str, int] | None:
    """``LoadedExecutable.get_compiled_memory_stats()`` as ``{xla field: bytes}``, or None if unavailable."""
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        return None
    return {f: int(getattr(stats, f)) for f in MEMORY_FIELDS if isinstance(getattr(stats, f, None), int)}


def process_index() -> int:
    """``jax._src.distributed.global_state.process_id`` (0 outside a ``jax.distributed`` job)."""
    try:
        from jax._src import distributed

        return int(distributed.global_state.process_id or 0)
    except Exception:  # noqa: BLE001 - no distributed state: a single process
        return 0
