"""XLA's buffer assignment from the compiler's own dump, where ``memory_analysis()`` carries none (TPU).

``Compiled.memory_analysis().serialized_buffer_assignment_proto`` is XLA's ``BufferAssignmentProto`` on XLA:CPU
and empty on TPU. Every XLA compiler can also dump, after its optimizations, an ``HloProto`` holding the optimized
module (field 1) *and* its buffer assignment (field 3): compiling with ``compiler_options={"xla_dump_to": DIR,
"xla_dump_hlo_as_proto": True}`` writes it as ``<module>.after_optimizations.hlo.pb`` (XLA:CPU:
``<module>.cpu_after_optimizations.hlo.pb``) beside a dozen other files.
Measured on a TPU v5e (jax 0.10.2, libtpu cl/933746096, 2026-12-05): a 6-layer transformer train step compiled in
13.5 s plainly and in 14.0 s with the dump; the executable's fingerprint was the same for both (the dump changes
nothing in the program); the HloProto (1.7 MB) decoded with the same reader as XLA:CPU's proto, heap-simulator
traces included, and its device-memory temporary allocation (1,077,330,432 B) rounded up to 64 KiB is exactly what
the allocator reserved when the program ran (``bytes_reserved`` 1,077,346,304). XLA:CPU writes the same file.

Cost: one extra compile per program (a dump needs a compile that no cache answers: JAX leaves dump options out of
its cache key), none on a rerun: the HloProto is kept per executable fingerprint and per lowered module
(:func:`remembered`), in this process, bounded to the last :data:`MEMO_SIZE` programs. While an xlakit cache is
enabled on such a platform, the compile of a cache miss is itself made with the dump (:func:`begin_capture`,
:func:`end_capture`, called by the hooks), so that ``peak()`` of a program compiled in this process only decodes.
Measured on the TPU v5e (2026-12-06, ``benchmarks/memory_attribution.py``): the dump adds +0.7 % and +5.4 % to the
compile of a 500- and a 150-layer step (one run each; the transformer's was within noise), and ``peak()`` after it
took 5.8 % / 6.5 % / 2.0 % of the compile's CPU (500 / 150 layers / transformer), against 0.93x the compile for a
dump compile of its own. ``XLAKIT_CAPTURE_ASSIGNMENT=0`` turns the capture off.

The folder is private (``tempfile.mkdtemp``: mode 0700) and removed after reading.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from xlakit._jax.lowerings import platform_of  # noqa: F401 - where callers have found it

__all__ = ["DumpedAssignment", "compile_with_assignment", "remembered", "remember", "read_dump", "platform_of",
           "split_hlo_proto", "begin_capture", "end_capture", "MEMO_SIZE", "DUMP_SUFFIX"]

DUMP_SUFFIX = "after_optimizations.hlo.pb"  # TPU: <module>.after_..., XLA:CPU: <module>.cpu_after_...
MEMO_SIZE = 16
_memo: collections.OrderedDict[bytes | str, bytes] = collections.OrderedDict()
_lock = threading.Lock()


class DumpedAssignment(tuple):
    """``(compiled, hlo_proto)``: the ``jax.stages.Compiled`` of the dump compile (the same executable as a plain
    compile) and the ``HloProto`` bytes (optimized module + buffer assignment)."""

    __slots__ = ()

    def __new__(cls, compiled: Any, hlo_proto: bytes):
        return super().__new__(cls, (compiled, hlo_proto))


def _fingerprint(compiled: Any) -> bytes | None:
    try:
        fp = compiled.runtime_executable().fingerprint
    except Exception:  # noqa: BLE001 - a backend without fingerprints: only the module key remembers
        return None
    return fp if isinstance(fp, bytes) and fp else None


def module_key(lowered: Any) -> str | None:
    """SHA-256 of a lowered module's text without debug info plus its compile args (platform, devices), the
    in-process memo's key for a program not compiled yet; None when the text cannot be had."""
    try:
        text = lowered.as_text(debug_info=False)
    except TypeError:  # older JAX: as_text() without the keyword
        text = lowered.as_text()
    except Exception:  # noqa: BLE001
        return None
    digest = hashlib.sha256(text.encode())
    try:
        devices = lowered._lowering.compile_args.get("device_assignment")  # noqa: SLF001 - the devices it targets
        digest.update(repr([(d.platform, d.id) for d in devices or ()]).encode())
    except Exception:  # noqa: BLE001 - the platform is in the module's text where it matters
        pass
    return "module:" + digest.hexdigest()


def remember(hlo_proto: bytes, *keys: Any) -> None:
    """Keep ``hlo_proto`` under each non-None key (an executable fingerprint, a :func:`module_key`)."""
    with _lock:
        for key in keys:
            if key is None:
                continue
            _memo[key] = hlo_proto
            _memo.move_to_end(key)
        while len(_memo) > MEMO_SIZE * 2:  # two keys per program
            _memo.popitem(last=False)


def remembered(compiled: Any = None, lowered: Any = None) -> bytes | None:
    """The HloProto kept for this executable (by fingerprint) or lowered module, else None."""
    keys: list[bytes | str | None] = []
    if compiled is not None:
        keys.append(_fingerprint(compiled))
    if lowered is not None:
        keys.append(module_key(lowered))
    with _lock:
        for key in keys:
            if key is not None and key in _memo:
                _memo.move_to_end(key)
                return _memo[key]
    return None


def split_hlo_proto(hlo_proto: bytes) -> tuple[bytes, bytes | None]:
    """``(BufferAssignmentProto, HloModuleProto or None)`` of an ``HloProto`` (fields 3 and 1).

    Raises:
      ValueError: the bytes hold no buffer assignment (or are not an HloProto).
    """
    module = assignment = None
    pos, end = 0, len(hlo_proto)
    try:
        while pos < end:
            key, pos = _varint(hlo_proto, pos)
            field, wire = key >> 3, key & 7
            if wire != 2:
                raise ValueError(f"unexpected wire type {wire} in an HloProto")
            size, pos = _varint(hlo_proto, pos)
            if field == 1:
                module = hlo_proto[pos:pos + size]
            elif field == 3:
                assignment = hlo_proto[pos:pos + size]
            pos += size
    except IndexError as exc:
        raise ValueError("truncated HloProto") from exc
    if not assignment:
        raise ValueError("the HloProto carries no buffer assignment")
    return assignment, module


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def read_dump(folder: str | os.PathLike, module_name: str | None = None) -> bytes:
    """The ``*after_optimizations.hlo.pb`` HloProto of ``module_name`` (its HLO module name, e.g. ``jit_step``)
    in a dump folder; with several candidates the largest.

    Raises:
      FileNotFoundError: the folder holds no such file (the compiler wrote no dump: an XLA without the option).
    """
    files = [p for p in Path(folder).glob(f"*{DUMP_SUFFIX}") if p.is_file()]
    if module_name:
        named = [p for p in files if f".{module_name}." in p.name]
        files = named or files
    if not files:
        listing = sorted(p.name for p in Path(folder).iterdir())[:8]
        raise FileNotFoundError(f"XLA wrote no *{DUMP_SUFFIX} into its dump folder (it holds {listing}); this XLA "
                                "does not dump its buffer assignment")
    return max(files, key=lambda p: p.stat().st_size).read_bytes()


def compile_with_assignment(lowered: Any, module_name: str | None = None) -> DumpedAssignment:
    """Compile ``lowered`` (a ``jax.stages.Lowered``) with XLA's dump of the optimized module and its buffer
    assignment, bypassing every cache (:func:`xlakit._jax.fresh.compile_fresh`); remember the HloProto.

    Returns:
      :class:`DumpedAssignment` ``(compiled, hlo_proto)``.

    Raises:
      FileNotFoundError: the compiler wrote no such dump. Errors of the compile itself pass through.
    """
    from xlakit._jax.fresh import compile_fresh

    folder = tempfile.mkdtemp(prefix="xlakit-xla-dump-")
    try:
        compiled = compile_fresh(lowered, compiler_options={"xla_dump_to": folder, "xla_dump_hlo_as_proto": True})
        hlo_proto = read_dump(folder, module_name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    remember(hlo_proto, _fingerprint(compiled), module_key(lowered))
    return DumpedAssignment(compiled, hlo_proto)


def begin_capture(compile_options: Any, platform: str | None) -> str | None:
    """Add XLA's dump (a private temporary folder) to ``compile_options`` (an ``xla_client.CompileOptions``, after
    the cache key was computed from it: JAX leaves dump options out of its key, and the executable is the same)
    where ``platform``'s ``memory_analysis()`` carries no buffer assignment; returns the folder for
    :func:`end_capture`, or None where nothing was added (the assignment is at hand anyway, the capture is turned
    off with ``XLAKIT_CAPTURE_ASSIGNMENT=0``, or the options cannot take it). Never raises."""
    from xlakit._jax import platforms

    if os.environ.get("XLAKIT_CAPTURE_ASSIGNMENT", "1") == "0":
        return None
    if platforms.rules(platform).assignment_in_memory_analysis:
        return None
    folder = None
    try:
        overrides = list(compile_options.env_option_overrides)
        if any(name == "xla_dump_to" for name, _value in overrides):
            return None  # a dump asked for already (compile_with_assignment, the user's own): leave it be
        folder = tempfile.mkdtemp(prefix="xlakit-xla-dump-")
        compile_options.env_option_overrides = overrides + [
            ("xla_dump_to", folder), ("xla_dump_hlo_as_proto", True)]
    except Exception:  # noqa: BLE001 - no folder, or options without overrides: compile as asked
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        return None
    return folder


def end_capture(folder: str | None, executable: Any, module_name: str | None) -> bool:
    """Read the HloProto :func:`begin_capture`'s compile wrote into ``folder``, remember it by ``executable``'s
    fingerprint (an ``xla_client.LoadedExecutable``, the one a ``Compiled`` of it returns from
    ``runtime_executable()``) and remove the folder. Returns whether one was remembered; never raises."""
    if folder is None:
        return False
    try:
        fingerprint = getattr(executable, "fingerprint", None)
        if not isinstance(fingerprint, bytes) or not fingerprint:
            return False
        remember(read_dump(folder, module_name), fingerprint)
        return True
    except Exception:  # noqa: BLE001 - no dump: peak() compiles with one when asked, as without the capture
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)
