"""Memory as numbers: compiled programs, devices, live arrays, probes and budgets.

=========================== ==========================================================================
:func:`compiled_memory`     bytes a compiled program needs (arguments, outputs, aliases, temporaries,
                            code, host twins, peak) from ``memory_analysis()`` or a cache entry
:func:`buffer_assignment`   XLA's buffer assignment decoded: allocations, logical buffers, liveness
:func:`allocator_stats`     per-device allocator numbers, each with its source
:func:`reset_peak`          reset the memory peak (native, ``/proc/self/clear_refs``, or a baseline)
:func:`live_arrays`         every live JAX array: device, memory kind, bytes, where it was created
:func:`move`                offload arrays to ``pinned_host`` and back
:func:`probe`               the scratch one run really needs (in-process or in a fresh process)
:func:`weight_budget`       the seed system's weight pool formula
:func:`track`               a ``with`` block's device peak and the programs compiled inside
:func:`attribute`           every logical buffer in the user's terms: line, layer, parameter path, role
:func:`peak`                the program step where live bytes peak and the buffers live there
:func:`sweep`               compile-only memory per batch size (through a cache: a rerun compiles nothing)
:func:`max_batch`           the largest batch whose compiled footprint fits a budget, and what limits it
:func:`compare`             two programs' peaks diffed by role, scope and source, and why the peak moved
:func:`checkpoint_each`     a function with every call of one layer checkpointed (per-block remat)
=========================== ==========================================================================

Importing this package imports neither JAX nor pandas; each function imports what it needs when called.
"""

from __future__ import annotations

# Eager re-exports: the submodules import JAX and pandas only inside functions, so this stays cheap. Eager
# (not lazy) because several functions share their module's name (buffer_assignment, probe, track, peak, sweep,
# compare): binding the functions after the submodules are imported keeps ``xlakit.memory.probe`` the function.
from xlakit.memory.allocator import (
    AllocatorStats,
    AllocatorStatsList,
    ResetResult,
    allocator_stats,
    parse_memory_stats,
    process_memory,
    reset_peak,
)
from xlakit.memory.attribution import Attribution, attribute
from xlakit.memory.budget import Budget, weight_budget
from xlakit.memory.buffer_assignment import (
    Allocation,
    BufferAssignment,
    LogicalBuffer,
    buffer_assignment,
    decode_buffer_assignment,
)
from xlakit.memory.compare import Comparison, compare
from xlakit.memory.compiled import CompiledMemory, compiled_memory
from xlakit.memory.live import MoveResult, live_arrays, live_bytes, move
from xlakit.memory.peak import Peak, peak
from xlakit.memory.probe import ProbeResult, probe
from xlakit.memory.remat import checkpoint_each
from xlakit.memory.sweep import MaxBatch, Sweep, max_batch, sweep
from xlakit.memory.track import TrackedProgram, Tracker, track

__all__ = ["CompiledMemory", "compiled_memory",
           "BufferAssignment", "Allocation", "LogicalBuffer", "buffer_assignment", "decode_buffer_assignment",
           "AllocatorStats", "AllocatorStatsList", "ResetResult", "allocator_stats", "parse_memory_stats",
           "process_memory", "reset_peak",
           "live_arrays", "live_bytes", "move", "MoveResult",
           "ProbeResult", "probe",
           "Budget", "weight_budget",
           "track", "Tracker", "TrackedProgram",
           "Attribution", "attribute", "Peak", "peak", "Sweep", "sweep", "MaxBatch", "max_batch",
           "Comparison", "compare", "checkpoint_each"]
