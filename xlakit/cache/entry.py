"""What one cache entry holds: its payload kinds and the header fields every writer records.

One key, one entry. Its payload is one of two kinds (``header["payload_kind"]``):

=========================  ==================================================================================
``pjrt-executable``        XLA's serialized executable (``LoadedExecutable.serialize()``): what every
                           ``jax.jit`` lookup needs. Written by transparent mode and ``ExecutableCache.jit``.
``jax-compiled-pickle``    the JAX-level executable (:func:`xlakit._jax.serialize.serialize_compiled`: shardings,
                           pytrees and the same XLA bytes after its pickle frame), plus ``header["placement"]``
                           and ``header["payload_split"]`` (where those bytes start). Loadable onto
                           other devices by ``ExecutableCache.load``, and still serves plain lookups: the XLA bytes
                           are taken out of it without unpickling. Written by ``ExecutableCache.compile`` and bundles.
=========================  ==================================================================================

Header fields written for every program, whichever mode stored it (besides the store's own integrity fields):
``name``, ``payload_kind``, ``compile_s`` (seconds), ``created`` (unix seconds), ``environment``, ``key_parts``
(JAX's per-part key hashes), ``memory`` (compiled memory, bytes), ``signature`` (per-argument shape, dtype,
sharding, donation of ``@main``) and ``module_text_zstd`` (base64 of the zstd-compressed module text without
debug locations, at most :data:`MAX_PACKED_TEXT` bytes; read back only from an authenticated header, and
decompressed to at most :data:`MAX_TEXT` bytes). Where the compile captured XLA's dump (TPU: the only source of
the buffer assignment), ``assignment_zstd``: base64 of the zstd-compressed ``HloProto`` (optimized module and
buffer assignment, at most :data:`MAX_PACKED_ASSIGNMENT` bytes), which a process loading the entry hands to
``xlakit.memory`` instead of compiling the program again with the dump (:func:`keep_assignment`).

Entries named ``<key>-aot`` come from xlakit 0.1's separate loadable copies; they are not programs of their own
and :data:`LEGACY_SUFFIX` lets the folder listing leave them out (one place).
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["KIND_XLA", "KIND_JAX", "LEGACY_SUFFIX", "MAX_PACKED_TEXT", "MAX_TEXT", "program_header", "loadable",
           "loadable_fields",
           "pack_text", "unpack_text", "pack_assignment", "unpack_assignment", "assignment_fields",
           "keep_assignment", "xla_payload", "runtime_fields", "unrunnable_reason"]

KIND_XLA = "pjrt-executable"
KIND_JAX = "jax-compiled-pickle"
LEGACY_SUFFIX = "-aot"
MAX_PACKED_TEXT = 4 << 20  # bytes of compressed module text kept per entry
MAX_TEXT = 64 << 20  # bytes a module text may decompress to when read back
# compressed XLA dump kept per entry: every listing reads whole headers (``cache ls --remote`` too), so a bigger
# dump is left out (its program's peak() compiles with the dump once per process, as without the field)
MAX_PACKED_ASSIGNMENT = 1 << 20
MAX_ASSIGNMENT = 256 << 20  # bytes it may decompress to (the in-process memo's own bound)
HEADER_ROOM = 1 << 20  # header bytes left free beside it for fields added later (integrity, key, placement)


def loadable(header: Mapping[str, Any] | None) -> bool:
    """Whether an entry holds the JAX-level executable (placeable on other devices)."""
    if not header:
        return False
    return header.get("payload_kind") == KIND_JAX and isinstance(header.get("placement"), dict)


def loadable_fields(payload: bytes, placement: Any) -> dict[str, Any]:
    """The header fields that make an entry of :func:`xlakit._jax.serialize.serialize_compiled`'s ``payload``
    loadable: ``payload_kind``, ``placement`` (from its :class:`~xlakit._jax.serialize.Placement`) and
    ``payload_split``, where the executable starts after the pickle frame: the store reads it from the file as
    its own ``bytes`` object, which goes to XLA with no copy (:mod:`xlakit.store.split`)."""
    from xlakit._jax import payload_layout

    fields: dict[str, Any] = {"payload_kind": KIND_JAX, "placement": placement.to_dict()}
    split = payload_layout.tail_offset(payload)
    if split is not None:
        fields["payload_split"] = split
    return fields


def xla_payload(header: Mapping[str, Any], payload: Any) -> bytes:
    """The XLA executable bytes of an entry of either kind (``payload``: as the store returned it, ``bytes`` or a
    :class:`~xlakit.store.split.SplitPayload`).

    Raises:
      pickle.UnpicklingError: a ``jax-compiled-pickle`` payload the restricted scanner refuses.
      ValueError: an unknown payload kind.
    """
    kind = header.get("payload_kind", KIND_XLA)
    if kind == KIND_XLA:
        return payload if isinstance(payload, bytes) else bytes(payload)
    if kind == KIND_JAX:
        from xlakit._jax.executables import executable_bytes

        return executable_bytes(payload)
    raise ValueError(f"unknown payload kind {kind!r}")


def pack_text(text: str | None) -> str | None:
    """Module text -> base64 of its zstd compression, or None when absent or over :data:`MAX_PACKED_TEXT`."""
    if text is None:
        return None
    import zstandard

    packed = zstandard.ZstdCompressor(level=9).compress(text.encode())
    return base64.b64encode(packed).decode("ascii") if len(packed) <= MAX_PACKED_TEXT else None


def unpack_text(packed: Any, limit: int = MAX_TEXT) -> str | None:
    """The inverse of :func:`pack_text`, reading at most ``limit`` decompressed bytes (a frame that declares
    or produces more is refused: None). Only call it on an authenticated header."""
    if not isinstance(packed, str) or not packed or len(packed) > 2 * MAX_PACKED_TEXT:
        return None
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(base64.b64decode(packed))) as reader:
            data = reader.read(limit + 1)
        if len(data) > limit:
            return None
        return data.decode()
    except Exception:  # noqa: BLE001 - an unreadable explanation aid is not an error
        return None


def pack_assignment(hlo_proto: bytes | None) -> str | None:
    """XLA's dump of a program (an ``HloProto``: its optimized module and buffer assignment, see
    :mod:`xlakit._jax.compiler_dump`) -> base64 of its zstd compression, or None when absent or over
    :data:`MAX_PACKED_ASSIGNMENT` (a program closing over large weights: its constants are in the dump)."""
    if not hlo_proto:
        return None
    import zstandard

    packed = zstandard.ZstdCompressor(level=3).compress(hlo_proto)
    return base64.b64encode(packed).decode("ascii") if len(packed) <= MAX_PACKED_ASSIGNMENT else None


def unpack_assignment(packed: Any) -> bytes | None:
    """The inverse of :func:`pack_assignment`, at most :data:`MAX_ASSIGNMENT` bytes (more, or an unreadable frame:
    None). Only call it on an authenticated header."""
    if not isinstance(packed, str) or not packed or len(packed) > 2 * MAX_PACKED_ASSIGNMENT:
        return None
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(base64.b64decode(packed))) as reader:
            data = reader.read(MAX_ASSIGNMENT + 1)
    except Exception:  # noqa: BLE001 - without it peak() compiles with the dump, as before it was kept
        return None
    return data if 0 < len(data) <= MAX_ASSIGNMENT else None


def assignment_fields(executable: Any, header: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"assignment_zstd": ...}`` for a new entry's ``header`` where this process captured XLA's dump of
    ``executable`` while compiling it (:func:`xlakit._jax.dump_memo.begin_capture`: TPU, where
    ``memory_analysis()`` carries no buffer assignment), so that a process loading it need not compile it again
    with the dump for ``xlakit.memory.peak``; else ``{}`` (also where it would take the encoded header past the
    envelope's :data:`~xlakit.store.envelope.MAX_HEADER_BYTES`: the entry matters more). Never raises."""
    import json

    from xlakit._jax import dump_memo
    from xlakit.store.envelope import MAX_HEADER_BYTES

    try:
        packed = pack_assignment(dump_memo.of_executable(executable))
        if not packed:
            return {}
        used = len(json.dumps(dict(header or {}), sort_keys=True, separators=(",", ":")).encode())
    except Exception:  # noqa: BLE001 - an entry without it is an entry as before
        return {}
    # room for what is added after this: the store's integrity fields and key, a loadable entry's placement
    return {"assignment_zstd": packed} if used + len(packed) + HEADER_ROOM <= MAX_HEADER_BYTES else {}


def keep_assignment(header: Mapping[str, Any], executable: Any) -> None:
    """Where an (authenticated) entry's header carries ``assignment_zstd``, let ``xlakit.memory`` find it for the
    executable just loaded from it (by that executable's fingerprint; decompressed when first asked). ``executable``:
    the ``LoadedExecutable``, or a ``jax.stages.Compiled`` of it. Never raises."""
    packed = header.get("assignment_zstd") if isinstance(header, Mapping) else None
    if not isinstance(packed, str):
        return
    from xlakit._jax import dump_memo

    try:
        loaded = executable.runtime_executable() if hasattr(executable, "runtime_executable") else executable
        dump_memo.remember_later(loaded.fingerprint, lambda: unpack_assignment(packed), len(packed))
    except Exception:  # noqa: BLE001 - no fingerprint: peak() compiles with the dump when asked
        return


def program_header(*, name: str | None, compile_s: float, environment: dict, key_parts: dict | None,
                   memory: dict | None, module_text: str | None, kind: str = KIND_XLA,
                   runtime: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The header of a program entry (see the module docstring for each field); ``runtime``: the fields of
    :func:`runtime_fields`."""
    from xlakit._jax.signature import main_signature

    header: dict[str, Any] = {"name": name, "payload_kind": kind, "compile_s": float(compile_s),
                              "created": time.time(), "environment": environment, "key_parts": key_parts or {},
                              "memory": memory, "signature": main_signature(module_text), **(runtime or {})}
    packed = pack_text(module_text)
    if packed is not None:
        header["module_text_zstd"] = packed
    return header


def runtime_fields(executable: Any, environment: Any, serialized: bytes | None = None) -> dict[str, Any]:
    """``custom_calls`` and, where the executable embeds host machine code that the partition does not cover,
    ``host_cpu`` for a new entry's header. ``executable``: the ``LoadedExecutable``; ``environment``: the
    :class:`~xlakit._jax.environment.Environment` it was compiled in; ``serialized``: its bytes, read instead of
    the HLO where their layout is known. Never raises (an unreadable HLO records nothing)."""
    from xlakit._jax import kernels, platforms

    try:
        targets = kernels.recorded_targets(executable, serialized)
    except Exception:  # noqa: BLE001 - a record that cannot be made is left out; the load still checks
        return {}
    if targets is None:
        return {}
    fields: dict[str, Any] = {"custom_calls": list(targets)}
    platform = environment.platform
    if kernels.host_code(targets, platform) and not platforms.rules(platform).host_cpu_partitions:
        fields["host_cpu"] = environment.cpu_flags_hash
    return fields


def _shown(value: Any, limit: int = 40) -> str:
    """A header value in a message: its repr cut to ``limit`` characters (a signed header may hold 16 MiB)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def unrunnable_reason(header: Mapping[str, Any], environment: Any, *, callbacks: bool = False) -> str | None:
    """Why this process could not run an authenticated entry's executable without lowering it, from its header
    alone (nothing is loaded), or None. ``environment``: this process's
    :class:`~xlakit._jax.environment.Environment`. Entries without the fields are not judged here (their load
    checks); a ``host_cpu`` that is not a string is refused (the executable holds host code for a CPU nobody can
    tell). Reasons are bounded: a header signed by any holder of the secret may carry megabytes in either field."""
    from xlakit._jax import kernels

    if "host_cpu" in header:  # the executable embeds host machine code: run it only on the CPU it names
        host_cpu = header["host_cpu"]
        if not isinstance(host_cpu, str):  # only a writer holding the secret could put it there: never guess
            return (f"the executable embeds host machine code, and its entry names the CPU as {_shown(host_cpu)}, "
                    "not a CPU feature hash")
        if host_cpu != environment.cpu_flags_hash:
            return (f"the executable embeds host machine code compiled for other CPU features (host_cpu "
                    f"{_shown(host_cpu)}, this host {environment.cpu_flags_hash})")
    targets = header.get("custom_calls")
    if isinstance(targets, list) and (len(targets) > kernels.MAX_TARGETS or all(isinstance(t, str) for t in targets)):
        return kernels.unready_reason(targets, environment.platform, callbacks=callbacks)
    return None
