"""``buffer_assignment`` / ``peak`` on a platform whose ``memory_analysis()`` carries no buffer assignment (TPU):
the module's name and the constants come from the assignment in XLA's dump, not from XLA's module and HLO text,
which cost 0.36 s and 0.30 s (+0.11 s reading it) of the 1.14 s ``peak()`` took on a 150-layer train step — measured
on a TPU v5e, jax 0.10.2, libtpu cl/933746096, 2026-12-06 (``docs/tpu/round8-2026-12-06.log``). Tested on CPU with the
train step's dump and ``memory_analysis()`` fields recorded on that chip (2026-12-05, ``tests/data/tpu``)."""

from __future__ import annotations

import gc
import json
import types
from pathlib import Path

import zstandard

DATA = Path(__file__).parent / "data" / "tpu"
TRAIN = json.loads((DATA / "facts.json").read_text())["programs"]["train_step"]


class _TpuProgram:
    """A ``jax.stages.Compiled`` as the TPU answers: the recorded fields and no assignment in
    ``memory_analysis()``; counts what would cost seconds there."""

    def __init__(self) -> None:
        self.calls = {"as_text": 0, "hlo_modules": 0}
        stats = dict(TRAIN["memory_analysis"], serialized_buffer_assignment_proto=b"")
        self._stats = types.SimpleNamespace(**stats)
        client = types.SimpleNamespace(platform="tpu")
        self._runtime = types.SimpleNamespace(client=client, hlo_modules=self._modules)

    def memory_analysis(self):
        return self._stats

    def runtime_executable(self):
        return self._runtime

    def _modules(self):
        self.calls["hlo_modules"] += 1
        raise AssertionError("the module is not asked for")

    def as_text(self):
        self.calls["as_text"] += 1
        return "HloModule jit_train_step\nENTRY main { ROOT c = f32[] custom-call(), custom_call_target=\"x\" }"


def _dump() -> tuple[bytes, bytes]:
    from xlakit._jax.compiler_dump import split_hlo_proto

    raw = zstandard.ZstdDecompressor().decompress((DATA / "train_step.after_optimizations.hlo.pb.zst").read_bytes())
    return split_hlo_proto(raw)


def test_the_memory_beside_a_dumped_assignment_needs_neither_the_module_nor_the_text():
    from xlakit.memory._assignment_memory import memory_for_assignment, with_assignment_facts
    from xlakit.memory._footprint import constant_bytes_of_assignment
    from xlakit.memory.buffer_assignment import decode_buffer_assignment

    program = _TpuProgram()
    memory = memory_for_assignment(program)
    assert (memory.platform, memory.name, memory.constant_bytes) == ("tpu", None, None)
    assert memory.peak_bytes == TRAIN["memory_analysis"]["peak_memory_in_bytes"] == 1_393_124_864
    assignment, module = _dump()
    decoded = decode_buffer_assignment(assignment, module, reported=memory)
    filled = with_assignment_facts(memory, assignment, decoded.name)
    assert program.calls == {"as_text": 0, "hlo_modules": 0}  # nothing printed, no module asked for
    assert filled.name == decoded.name == "jit_train_step"
    assert filled.constant_bytes == constant_bytes_of_assignment(assignment)
    assert filled.footprint_bytes is not None and filled.temp_bytes == memory.temp_bytes
    # the notes are found when first read, from the text, once; the constants' note replaces "not known"
    notes = filled.notes
    assert program.calls["as_text"] == 1 and filled.notes == notes
    assert any("XLA's dump" in n for n in notes) and not any("not known from this source" in n for n in notes)


def test_the_deferred_note_keeps_no_executable_alive():
    from xlakit.memory._assignment_memory import memory_for_assignment

    program = _TpuProgram()
    memory = memory_for_assignment(program)
    del program
    gc.collect()
    assert isinstance(memory.notes, tuple)  # the program is gone: no note, no error


def test_a_platform_whose_analysis_carries_the_assignment_gets_compiled_memory_itself():
    import jax
    import jax.numpy as jnp

    from xlakit.memory import compiled_memory
    from xlakit.memory._assignment_memory import memory_for_assignment

    compiled = jax.jit(lambda x: jnp.sin(x) @ x).lower(jnp.ones((8, 8))).compile()
    assert memory_for_assignment(compiled) == compiled_memory(compiled)
    assert memory_for_assignment(compiled).name == "jit__lambda"
