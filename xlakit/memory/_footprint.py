"""What one run of a compiled program occupies in device memory: the terms of
:attr:`~xlakit.memory.CompiledMemory.footprint_bytes` (what :func:`~xlakit.memory.max_batch` budgets with),
and which of them count on which platform.

========= ============================================================== =========================================
term      bytes (per device)                                              counted
========= ============================================================== =========================================
argument  entry parameters in device memory [argument_size_in_bytes]      every platform
output    results not written into a donated argument [output - alias]    every platform
temp      the scratch XLA preallocates for one run [temp_size_in_bytes]   every platform
constant  literals compiled into the program: a closed-over numpy array   every platform (CPU: measured, a 16 MiB
          or ``jax.Array`` becomes one (no XLA field; see below)          closed-over matrix is in XLA:CPU's peak)
code      the loaded program's generated code                             where code lives in device memory
          [generated_code_size_in_bytes, less the constants where XLA     (:func:`code_in_device_memory`)
          counts them in it: GPU (XLA's source), TPU (measured on a v5e:
          a 32 MiB closed-over matrix is in its code figure)]
========= ============================================================== =========================================

Not counted: the ``host_*`` fields (``pinned_host`` memory space: host RAM, not the device's; XLA:CPU has one
memory space and counts such bytes in the device fields already) and thread-local values (stack, not heap).

Where the constant bytes come from, best first: the constant allocations of XLA's buffer assignment
(``serialized_buffer_assignment_proto``, shipped on CPU); on CPU without the proto (a cache entry header), XLA's
``peak_memory_in_bytes - (argument + output - alias)`` — XLA:CPU's peak is exactly arguments, outputs and
constants (checked against the buffer assignment on jaxlib 0.10.2); otherwise (TPU ships no buffer assignment)
the ``constant`` instructions of the optimized HLO outside fusions, shape x element size, layout padding not
included (declared, not measured on a TPU).
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["code_in_device_memory", "footprint_terms", "constant_bytes_of_assignment",
           "constant_bytes_of_hlo_text"]


def code_in_device_memory(platform: str | None) -> bool:
    """Whether a loaded program's generated code occupies the device's memory on ``platform`` (so a budget
    must hold it): the platform table's answer (:attr:`xlakit._jax.platforms.Platform.code_in_device_memory`).
    CPU: no (its code is in the process's own pages, and XLA:CPU reports 0 for it); TPU: yes (measured on a
    v5e: one run raised ``peak_bytes_in_use`` by outputs + ``generated_code_size_in_bytes`` to the byte); GPU
    and any other or unknown platform: yes (a loaded module's kernels are in device memory; counting them errs
    on the side of fitting)."""
    from xlakit._jax.platforms import rules

    return rules(platform).code_in_device_memory


def footprint_terms(m: Any) -> dict[str, int] | None:
    """The terms of one run's device footprint (see the module docstring) for a
    :class:`~xlakit.memory.CompiledMemory`: ``{"argument_bytes", "output_bytes" (net of donated aliases),
    "temp_bytes", "constant_bytes", "code_bytes"}``, bytes; None when argument, output, alias or temp is not
    reported. A constant or code term that is not reported counts 0 (``m.notes`` says why)."""
    parts = (m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes)
    if any(p is None for p in parts):
        return None
    from xlakit._jax.platforms import rules

    code = m.generated_code_bytes if code_in_device_memory(m.platform) else None
    constants = m.constant_bytes or 0
    if code and rules(m.platform).constants_in_code:  # XLA's code figure holds the constants: counted once
        code = max(code - constants, 0)
    return {"argument_bytes": m.argument_bytes, "output_bytes": m.output_bytes - m.alias_bytes,
            "temp_bytes": m.temp_bytes, "constant_bytes": constants, "code_bytes": code or 0}


def constant_bytes_of_assignment(proto: bytes) -> int:
    """Bytes of the constant allocations in device memory of a serialized ``BufferAssignmentProto``
    (``BufferAllocationProto.is_constant``; host-colored ones left out). Reads only the allocation records.

    Raises:
      ValueError (``ProtoDecodeError``): malformed bytes.
    """
    from xlakit.memory._assignment_decode import _F
    from xlakit.memory._assignment_types import HOST_MEMORY_COLOR
    from xlakit.memory._proto import parse

    return sum(al.int(_F.AL_SIZE) for al in parse(proto).messages(_F.BA_ALLOCATIONS)
               if al.bool(_F.AL_CONSTANT) and al.int(_F.AL_COLOR) != HOST_MEMORY_COLOR)


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(")
_CONSTANT = re.compile(r"^\s+(?:ROOT )?%?[\w.\-]+ = (pred|[a-z]+?(\d+)[a-z0-9]*)\[([\d,]*)\]\S* constant\(")
_CALLS = re.compile(r"\b(?:calls|to_apply|condition|body|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")
_NAME = re.compile(r"[\w.\-]+")


def constant_bytes_of_hlo_text(text: str) -> int:
    """Bytes of the ``constant`` instructions of an optimized HLO module's text (``Compiled.as_text()``) that
    XLA keeps as buffers: those outside fusions (a constant inside a fused computation is part of its
    kernel). Shape x element size (sub-byte types rounded up per array); layout tiling and tuple-shaped
    constants are not counted."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m and line.rstrip().endswith("{"):
            lines = blocks.setdefault(m.group(1), [])
        elif line.startswith(" "):
            lines.append(line)
    fused = {name for body in blocks.values() for line in body if " fusion(" in line
             for m in _CALLS.finditer(line) for name in _NAME.findall(m.group(1))}
    pending = list(fused)
    while pending:  # what a fused computation calls (a reduction's to_apply) is inside the kernel too
        for line in blocks.get(pending.pop(), ()):
            for m in _CALLS.finditer(line):
                for name in _NAME.findall(m.group(1)):
                    if name not in fused:
                        fused.add(name)
                        pending.append(name)
    total = 0
    for name, body in blocks.items():
        if name in fused:
            continue
        for line in body:
            m = _CONSTANT.match(line)
            if m:
                bits = 8 if m.group(1) == "pred" else int(m.group(2))
                count = math.prod(int(d) for d in m.group(3).split(",") if d)
                total += (count * bits + 7) // 8
    return total
