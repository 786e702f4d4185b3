"""XLA's buffer assignment from the compiler's own dump, where ``memory_analysis()`` carries none (TPU).

``Compiled.memory_analysis().serialized_buffer_assignment_proto`` is XLA's ``BufferAssignmentProto`` on XLA:CPU
and empty on TPU. Every XLA compiler can also dump, after its optimizations, an ``HloProto`` holding the optimized
module (field 1) *and* its buffer assignment (field 3): compiling with ``compiler_options={"xla_dump_to": DIR,
"xla_dump_hlo_as_proto": True}`` writes it as ``<module>.after_optimizations.hlo.pb`` (XLA:CPU:
``<module>.cpu_after_optimizations.hlo.pb``) beside a dozen other files.
Measured on a TPU v5e (jax 0.10.2, libtpu cl/933746096, 2026-12-05): a 6-layer transformer train step compiled in
13.5 s plainly and in 14.0 s with the dump; the executable's fingerprint was the same for both (the dump changes
nothing in the program); the HloProto (1.7 MB) decoded with the same reader as XLA:CPU's proto, heap-simulator
traces included, and its device-memory temporary allocation (1,077,330,432 B) rounded up to 16 KiB is exactly what
the allocator reserved when the program ran (``bytes_reserved`` 1,077,346,304). XLA:CPU writes the same file.

Cost: one extra compile per program (a dump needs a compile that no cache answers: JAX leaves dump options out of
its cache key), none on a rerun: the HloProto is kept per executable fingerprint and per lowered module
(:func:`remembered`), in this process, bounded to the last :data:`MEMO_SIZE` programs and 256 MiB. While an xlakit
cache is enabled, the compile of a cache miss is itself made with the dump where the platform table says so
(:attr:`~xlakit._jax.platforms.Platform.capture_assignment_on_miss`: TPU; ``XLAKIT_CAPTURE_ASSIGNMENT=0``/``1``
overrides it; :mod:`xlakit._jax.dump_memo`, called by the hooks), so that ``peak()`` of a program compiled in this
process only decodes. A process that loads the program from the cache has no dump of it: its first ``peak()``
compiles once with the dump (measured on the TPU v5e: 3.2 s for a step whose load took 0.44 s).
Measured on the TPU v5e (2026-12-06, ``benchmarks/memory_attribution.py``, ``dump_cost.py``, ``capture_reload.py``):
the dump adds -3.0 % (150-layer adam step, medians of 3 compiles taking turns with plain ones) and +2.2 % (24-layer
1024-wide step) to the compile's CPU, within noise; ``peak()`` after it took 5.8 % / 6.5 % / 2.0 % / 3.1 % of the
compile's CPU (500 / 150 layers / transformer / 24x1024), against 0.93x the compile for a dump compile of its own.
The executable stored from such a compile names the (removed) dump folder in its compile options; loaded in fresh
processes it compiled nothing, answered the same, wrote no file and took 0.95x-1.02x the load of one compiled
without the dump. XLA_FLAGS' own ``--xla_dump_to`` turns the capture off (the user's dump is never taken over).

The folder is private (``tempfile.mkdtemp``: mode 0700) and removed after reading.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from xlakit._jax.dump_memo import (  # noqa: F401 - where callers have found them
    DUMP_SUFFIX,
    MEMO_SIZE,
    _fingerprint,
    begin_capture,
    end_capture,
    module_key,
    read_dump,
    remember,
    remembered,
    split_hlo_proto,
)
from xlakit._jax.lowerings import platform_of  # noqa: F401 - where callers have found it

__all__ = ["DumpedAssignment", "compile_with_assignment", "remembered", "remember", "read_dump", "platform_of",
           "split_hlo_proto", "begin_capture", "end_capture", "MEMO_SIZE", "DUMP_SUFFIX"]

class DumpedAssignment(tuple):
    """``(compiled, hlo_proto)``: the ``jax.stages.Compiled`` of the dump compile (the same executable as a plain
    compile) and the ``HloProto`` bytes (optimized module + buffer assignment)."""

    __slots__ = ()

    def __new__(cls, compiled: Any, hlo_proto: bytes):
        return super().__new__(cls, (compiled, hlo_proto))


def compile_with_assignment(lowered: Any, module_name: str | None = None, options: Any = None) -> DumpedAssignment:
    """Compile ``lowered`` (a ``jax.stages.Lowered``) with XLA's dump of the optimized module and its buffer
    assignment, bypassing every cache (:func:`xlakit._jax.fresh.compile_fresh`); remember the HloProto.
    ``options``: the ``compiler_options`` the program was compiled with (they change the program), kept.

    Returns:
      :class:`DumpedAssignment` ``(compiled, hlo_proto)``.

    Raises:
      FileNotFoundError: the compiler wrote no such dump. Errors of the compile itself pass through.
    """
    from xlakit._jax.fresh import compile_fresh

    folder = tempfile.mkdtemp(prefix="xlakit-xla-dump-")
    try:
        compiled = compile_fresh(lowered, compiler_options={**dict(options or {}), "xla_dump_to": folder,
                                                            "xla_dump_hlo_as_proto": True})
        hlo_proto = read_dump(folder, module_name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    remember(hlo_proto, _fingerprint(compiled), module_key(lowered, options))
    return DumpedAssignment(compiled, hlo_proto)
