"""What differs between CPU, GPU and TPU, as data: one table the features ask, each rule with its evidence.

The features (cache, bundles, memory) never branch on a platform name; they ask :func:`rules` for the
:class:`Platform` of the backend at hand. Every field says what was measured, where and when (the ``evidence``
strings); tests feed the same facts from recordings (``tests/data/tpu/``), so CI without an accelerator checks
the code paths an accelerator takes.

A platform this table does not know (a new accelerator plugin) gets :data:`UNKNOWN`: nothing is refused because
it is unknown. Loaded programs are checked against this process's custom-call registry (the place XLA itself
looks), buffer assignments are read from ``memory_analysis()`` or else from the compiler's dump, allocator numbers
are shown as the plugin reports them, and the peak reset uses the PJRT C API where the plugin offers it.

Fields (see :class:`Platform`): how custom calls of a loaded executable are resolved; which XLA memory colours
are which memory space; whether generated code and scratch occupy device memory and how the allocator reports
them; how the peak can be reset; whether a second process can open the device while this one holds it; which
environment fields partition cache entries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Platform", "MemorySpace", "rules", "memory_space", "CPU", "GPU", "TPU", "UNKNOWN", "TPU_EVIDENCE",
           "HOST_COLOR"]

#: XLA's ``Layout::kHostMemorySpace``: buffers of this colour live in host memory, on every platform.
HOST_COLOR = 5

#: Where and when the TPU facts below were measured (``benchmarks/accelerator.py`` and ``.tpu-kit`` runs).
TPU_EVIDENCE = "TPU v5e (1 chip, 15.7 GiB HBM), jax/jaxlib 0.10.2, libtpu cl/933746096, 2026-12-05"


@dataclasses.dataclass(frozen=True)
class MemorySpace:
    """One XLA memory colour of a platform.

    color: XLA's memory colour (``LogicalBuffer.color`` / ``BufferAllocation.color``). name: the platform's own
    name (``"vmem"``). label: what a user reads (``"VMEM (on-chip)"``). kind: ``"device"`` (the device's main
    memory, what ``bytes_limit`` bounds), ``"on-chip"`` (memory inside the chip, not counted in device memory),
    or ``"host"`` (host RAM: pinned or unpinned host memory kinds).
    """

    color: int
    name: str
    label: str
    kind: str


_DEVICE = MemorySpace(0, "default", "device memory", "device")
_HOST = MemorySpace(HOST_COLOR, "host", "host memory (pinned)", "host")


@dataclasses.dataclass(frozen=True)
class Platform:
    """The rules of one platform (see the module docstring).

    Attributes:
      name: ``backend.platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``), or ``"unknown"``.
      custom_calls_compiled_in: True where the platform's compiler turns every custom call into code inside the
        executable, so a loaded executable needs nothing registered in this process (TPU: compiler-internal
        targets and Pallas/Mosaic ``tpu_custom_call``); False where XLA looks each target up in this process's
        registry at load or run time (CPU, GPU). Python callbacks are never compiled in.
      host_code_targets: custom-call targets whose presence means the executable embeds machine code for the
        host CPU (TPU ``HostExecute``: ``compute_on("device_host")``); such an entry records the host CPU's
        features and loads only where they match.
      memory_spaces: colour -> :class:`MemorySpace`; colours not listed are device memory (XLA's default).
      assignment_in_memory_analysis: ``memory_analysis().serialized_buffer_assignment_proto`` carries XLA's buffer
        assignment; where it does not (TPU: empty), it comes from a compile with XLA's dump
        (:mod:`xlakit._jax.compiler_dump`). A platform that says True but returns nothing falls back the same way.
      capture_assignment_on_miss: where the assignment is not in ``memory_analysis()``, an enabled xlakit cache
        compiles each miss with XLA's dump by default (:mod:`xlakit._jax.dump_memo`), so that ``peak()`` of a
        program compiled in this process decodes instead of compiling again. True only where measured harmless
        and cheap: the executable compiled with the dump must load in a fresh process as fast as one without it,
        with the same answers and no file written (its stored compile options name the removed dump folder).
        ``XLAKIT_CAPTURE_ASSIGNMENT=0`` / ``1`` turns it off / on whatever the table says.
      code_in_device_memory: the loaded program's generated code occupies device memory, so a budget of device
        memory must hold ``memory_analysis().generated_code_size_in_bytes``.
      constants_in_code: ``generated_code_size_in_bytes`` includes the program's constants (literals compiled in,
        a closed-over array), so a budget counts them once, in the code term.
      code_in_allocator: that code is allocated by the device allocator at the program's first run, so
        ``bytes_in_use`` rises by it (TPU: measured; GPU: its modules are loaded by the driver, outside the
        allocator).
      scratch_in_reserved_region: temporaries are not allocated per run from ``bytes_in_use`` but held in a
        region the allocator reports as ``bytes_reserved`` / ``peak_bytes_reserved``.
      reservation_granule: bytes the reserved region is rounded up to (0 where none).
      exclusive_device: only one process at a time can open the device; a child process cannot use it while
        this process holds it.
      host_cpu_partitions: the host CPU's features partition cache entries (XLA:CPU generates host code for
        every program); False where programs run on the device and only ``host_code_targets`` embed host code.
      evidence: where the rules come from.
    """

    name: str
    custom_calls_compiled_in: bool
    host_code_targets: frozenset[str]
    memory_spaces: Mapping[int, MemorySpace]
    assignment_in_memory_analysis: bool
    capture_assignment_on_miss: bool
    code_in_device_memory: bool
    constants_in_code: bool
    code_in_allocator: bool
    scratch_in_reserved_region: bool
    reservation_granule: int
    exclusive_device: bool
    host_cpu_partitions: bool
    evidence: str

    def space(self, color: int) -> MemorySpace:
        """The memory space of an XLA colour (an unlisted colour: device memory, named by its number)."""
        found = self.memory_spaces.get(int(color))
        if found is not None:
            return found
        return MemorySpace(int(color), f"color_{color}", f"memory space {color}", "device")

    def reserved_bytes(self, temp_bytes: int) -> int:
        """Bytes the allocator reserves for ``temp_bytes`` of device temporaries (rounded up to the granule)."""
        granule = self.reservation_granule
        return -(-int(temp_bytes) // granule) * granule if granule else int(temp_bytes)


CPU = Platform(
    name="cpu", custom_calls_compiled_in=False, host_code_targets=frozenset(),
    memory_spaces={0: MemorySpace(0, "default", "host memory (device)", "device"), HOST_COLOR: _HOST},
    assignment_in_memory_analysis=True, capture_assignment_on_miss=False, code_in_device_memory=False,
    constants_in_code=False,
    code_in_allocator=False, scratch_in_reserved_region=False, reservation_granule=0, exclusive_device=False,
    host_cpu_partitions=True,
    evidence=("XLA:CPU, jaxlib 0.10.2: LAPACK targets are null until a linalg lowering initialises them "
              "(jax-ml/jax#28908); memory_analysis() carries the buffer assignment; generated code is host code"),
)

GPU = Platform(
    name="gpu", custom_calls_compiled_in=False, host_code_targets=frozenset(),
    memory_spaces={0: _DEVICE, 1: MemorySpace(1, "collective", "collective memory", "device"), HOST_COLOR: _HOST},
    assignment_in_memory_analysis=True, capture_assignment_on_miss=False, code_in_device_memory=True,
    constants_in_code=True,
    code_in_allocator=False, scratch_in_reserved_region=False, reservation_granule=0, exclusive_device=False,
    host_cpu_partitions=True,
    evidence=("XLA:GPU's GpuExecutable::SizeOfGeneratedCodeInBytes adds the constant allocations to the binary's "
              "size (XLA source; constants are counted in the code term); "
              "not measured here (no GPU lent): XLA:GPU looks custom-call targets up in the registry the CUDA "
              "plugin fills at start; allocator keys from recorded memory_stats() dictionaries "
              "(shared/cases/gpu_memory_stats.json); several processes may share a GPU; the host CPU still "
              "partitions (nothing measured says GPU executables carry no host code); code is counted in a budget "
              "(a loaded module's kernels are in device memory; counting them errs on the side of fitting)"),
)

TPU = Platform(
    name="tpu", custom_calls_compiled_in=True, host_code_targets=frozenset({"HostExecute"}),
    memory_spaces={0: MemorySpace(0, "default", "HBM", "device"),
                   1: MemorySpace(1, "vmem", "VMEM (on-chip vector memory)", "on-chip"),
                   2: MemorySpace(2, "smem", "SMEM (on-chip scalar memory)", "on-chip"),
                   HOST_COLOR: _HOST,
                   6: MemorySpace(6, "sflag", "sync flags (on-chip)", "on-chip")},
    assignment_in_memory_analysis=False, capture_assignment_on_miss=True, code_in_device_memory=True,
    constants_in_code=True, code_in_allocator=True,
    scratch_in_reserved_region=True, reservation_granule=16 << 10, exclusive_device=True, host_cpu_partitions=False,
    evidence=(f"{TPU_EVIDENCE}: executables calling AssumeGatherIndicesInBound, ConcatBitcast, "
              "GatherScatterIndicesBitpacked, tpu_custom_call (Pallas) and HostExecute loaded with "
              "deserialize_and_load in a fresh process that lowered nothing and returned the reference answers; "
              "only HostExecute executables embed x86-64 code (an ELF with AVX); bytes_in_use rose by outputs + "
              "generated code at the first run (231,565,824 B = 167,799,808 + 63,766,528 for a transformer step); "
              "bytes_reserved = the HBM temporary allocation rounded up to 16 KiB (1,077,346,304 for "
              "1,077,330,432; 2026-12-06: 2,736,128 for 2,720,256 and 808,992,768 for 808,976,896, which 64 KiB "
              "would miss), kept until the executables are freed; none for a program whose temp_size_in_bytes is 0 "
              "(4 of 5 such programs; a narrow 150-layer step reserved 115,712 B); a child process cannot open "
              "the chip (libtpu lockfile); memory colours 0 default, 1 vmem, 2 smem, 5 host, 6 sync flags "
              "(the compiler's memory-usage report); memory_analysis() carries no buffer assignment, the dump's "
              "after_optimizations HloProto does; 2026-12-06: an executable compiled with the dump, stored, loaded "
              "in fresh processes with and without the capture: 0 compiles, the same loss, no file written, first "
              "call 1.00x / 1.02x (24x1024 step) and 0.97x / 0.98x (150-layer step) of one compiled without it "
              "(benchmarks/capture_reload.py); the dump added -3.0 % (150-layer adam step, medians of 3 taking "
              "turns, benchmarks/dump_cost.py) and +2.2 % (24x1024 step) to the compile's CPU; 2026-12-06: a "
              "closed-over f32[4096,4096] (a bf16[4096,4096] constant, 33,554,432 B) gave "
              "generated_code_size_in_bytes 33,665,024 B, and bytes_in_use rose by 33,795,584 B over the compile and "
              "one run: the constant is inside the code term"),
)

UNKNOWN = Platform(
    name="unknown", custom_calls_compiled_in=False, host_code_targets=frozenset(),
    memory_spaces={0: _DEVICE, HOST_COLOR: _HOST}, assignment_in_memory_analysis=True,
    capture_assignment_on_miss=False, code_in_device_memory=True, constants_in_code=False,
    code_in_allocator=False, scratch_in_reserved_region=False, reservation_granule=0, exclusive_device=False,
    host_cpu_partitions=True,
    evidence=("no measurement: the same checks XLA makes (this process's registry), the host CPU partitions, "
              "code counts in a budget (errs on the side of fitting)"),
)

_TABLE = {p.name: p for p in (CPU, GPU, TPU)}
# Names JAX's backends report for the same platforms.
_ALIASES = {"cuda": "gpu", "rocm": "gpu", "host": "cpu"}


def rules(platform: str | None) -> Platform:
    """The :class:`Platform` of ``platform`` (``backend.platform``/``device.platform``, any case; ``"cuda"`` and
    ``"rocm"`` are GPU). An unknown name gets :data:`UNKNOWN` with its name, never an error."""
    name = (platform or "").lower()
    name = _ALIASES.get(name, name)
    found = _TABLE.get(name)
    return found if found is not None else dataclasses.replace(UNKNOWN, name=name or "unknown")


def platform_rules(device: Any = None) -> Platform:
    """The rules xlakit applies on a platform (:class:`Platform`: how loaded programs resolve custom calls, memory
    spaces, where scratch and code live, whether one process at a time may open the device...), each with the
    measurement behind it.

    Args:
      device: a ``jax.Device``, a platform name (``"tpu"``, ``"cuda"``...) or None for the device JAX uses by
        default (``jax.devices()[0]``; this starts JAX's backend).

    Example: ``xlakit.platform_rules().exclusive_device`` is True on a TPU, where a fresh Python process cannot
    open the chip while this one holds it.
    """
    if device is None:
        import jax

        device = jax.devices()[0]
    return rules(device if isinstance(device, str) else getattr(device, "platform", None))


def memory_space(platform: str | None, color: int) -> MemorySpace:
    """Shorthand for ``rules(platform).space(color)``."""
    return rules(platform).space(color)
