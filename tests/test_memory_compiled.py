"""compiled_memory: exact bytes of known programs, every accepted input, and the not-reported rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.memory import CompiledMemory, compiled_memory

F32_8x4 = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def _matmul(a, b):
    return a @ b.T  # f32[8,4] x f32[8,4]^T -> f32[8,8]


@pytest.fixture(scope="module")
def compiled():
    return jax.jit(_matmul).lower(F32_8x4, F32_8x4).compile()


def test_two_f32_8x4_inputs_are_256_argument_bytes_and_the_8x8_output_256(compiled):
    m = compiled_memory(compiled)
    assert (m.argument_bytes, m.output_bytes, m.alias_bytes, m.temp_bytes) == (256, 256, 0, 0)
    assert m.footprint_bytes == 512
    assert m.name == "jit__matmul" and m.platform == "cpu"
    assert m.source == "jax.stages.Compiled.memory_analysis()"
    assert m.serialized_buffer_assignment  # kept for buffer_assignment()


def test_cpu_fields_that_are_not_reported_are_none_never_zero(compiled):
    m = compiled_memory(compiled)
    raw = compiled.memory_analysis()
    assert raw.generated_code_size_in_bytes == 0 and m.generated_code_bytes is None
    assert all(getattr(m, f"host_{c}_bytes") is None for c in ("argument", "output", "alias", "temp",
                                                                 "generated_code"))
    assert any("generated code" in n for n in m.notes) and any("one memory space" in n for n in m.notes)
    assert m.peak_bytes == raw.peak_memory_in_bytes == 512


def test_every_input_form_gives_the_same_numbers(compiled):
    a = np.ones((8, 4), np.float32)
    expected = compiled_memory(compiled)
    forms = [compiled_memory(jax.jit(_matmul), a, a),
             compiled_memory(_matmul, F32_8x4, F32_8x4),  # a plain function is jitted
             compiled_memory(jax.jit(_matmul).lower(a, a)),
             compiled_memory(expected),
             compiled_memory(compiled.runtime_executable())]
    for m in forms:
        assert (m.argument_bytes, m.output_bytes, m.temp_bytes, m.peak_bytes) == (256, 256, 0, 512)
    assert forms[3] is expected


def test_donation_shows_as_alias_bytes():
    f = jax.jit(lambda a, b: (a * 2 + b, b.sum()), donate_argnums=0)
    m = compiled_memory(f, F32_8x4, F32_8x4)
    # the donated f32[8,4] (128 B) is both an argument and an output; outputs: 128 + 4 + 16 (tuple table)
    assert (m.argument_bytes, m.alias_bytes, m.output_bytes) == (256, 128, 148)
    assert m.constant_bytes == 4  # the reduction's f32 0.0, a buffer of its own
    assert m.footprint_bytes == 256 + 148 - 128 + 4 == m.peak_bytes


def test_a_400_mb_temporary_is_counted_and_the_cpu_peak_caveat_is_noted():
    v = jax.ShapeDtypeStruct((10_000,), jnp.float32)
    m = compiled_memory(jax.jit(lambda a, b: (jnp.outer(a, a) @ b).sum()), v, v)
    assert m.temp_bytes == 400_040_000  # the f32[10000,10000] outer product + the f32[10000] product
    assert m.peak_bytes < m.temp_bytes  # XLA:CPU's peak leaves temporaries out ...
    assert any("not temporaries" in n for n in m.notes)  # ... and says so
    assert m.footprint_bytes == 80_000 + 4 + 400_040_000


def _header(compiled) -> dict:
    stats = compiled.runtime_executable().get_compiled_memory_stats()
    names = [n for n in dir(stats) if n.endswith("_in_bytes")]
    return {"name": "jit__matmul", "environment": {"platform": "cpu"},
            "memory": {n: int(getattr(stats, n)) for n in names}}


def test_a_cache_entry_header_gives_the_stats_recorded_at_compile_time(compiled):
    m = compiled_memory(_header(compiled))
    assert (m.argument_bytes, m.output_bytes, m.peak_bytes) == (256, 256, 512)
    assert m.generated_code_bytes is None and m.host_temp_bytes is None
    assert m.source.startswith("cache entry header")
    assert m.serialized_buffer_assignment is None


def test_missing_negative_and_absent_stats_are_none_with_a_note():
    m = compiled_memory({"argument_size_in_bytes": 64, "output_size_in_bytes": -1})
    assert m.argument_bytes == 64 and m.output_bytes is None and m.temp_bytes is None
    assert m.footprint_bytes is None
    assert any("absent from the source" in n for n in m.notes) and m.platform is None
    empty = compiled_memory({"name": "jit_x", "environment": {"platform": "cpu"}, "memory": None})
    assert not empty.reported and empty.name == "jit_x" and "no memory stats" in empty.notes[0]
    zeros = compiled_memory({"memory": dict.fromkeys(("argument_size_in_bytes", "output_size_in_bytes"), 0)})
    assert not zeros.reported and "reported no memory analysis" in zeros.notes[0]


def test_bad_input_raises_a_clear_error(compiled):
    with pytest.raises(TypeError, match="expected a jax.stages.Compiled"):
        compiled_memory(42)
    with pytest.raises(TypeError, match="only with a function"):
        compiled_memory(compiled, np.ones(3))
    with pytest.raises(ValueError, match="unreadable"):
        compiled_memory({"error": "bad magic"})
    with pytest.raises(ValueError, match="neither a cache entry header"):
        compiled_memory({"foo": 1})


def test_display_forms(compiled):
    m = compiled_memory(compiled)
    frame = m.to_frame()
    assert frame.loc["argument", "device_bytes"] == 256 and frame.loc["temp", "device_bytes"] == 0
    assert frame["host_bytes"].isna().all()
    # every <NA> says why, in the frame itself (issue 35: "to_frame() shows <NA> rows the text never explains")
    assert frame.loc["generated_code", "note"].startswith("device <NA>: XLA does not count its code")
    assert all("host <NA>: " in n for n in frame["note"]) and frame.loc["argument", "note"].count("<NA>") == 1
    assert "footprint_bytes (512 B) includes them" in frame.loc["peak", "note"]
    assert "argument=256 B" in repr(m) and "not reported" in m._repr_html_()
    assert m.to_dict()["footprint_bytes"] == 512
    assert isinstance(m, CompiledMemory)


def test_temporaries_name_the_code_that_allocates_outside_the_buffer_assignment():
    # XLA:CPU hands jnp.outer(v, v).sum(0) to YNNPACK: 0 B of temporaries, yet the run allocates the product
    # (127 MiB for v of 10,000; see xlakit.memory.probe). The breakdown must not pass that off as all there is.
    v = jax.ShapeDtypeStruct((256,), jnp.float32)
    fused = jax.jit(lambda v: jnp.outer(v, v).sum(0)).lower(v).compile()
    m = compiled_memory(fused)
    if "__ynn_fusion" not in fused.as_text():
        pytest.skip("this jaxlib does not hand the fusion to YNNPACK")
    assert m.temp_bytes == 0
    assert any("1 fused operation run by YNNPACK (__ynn_fusion)" in n and "probe()" in n for n in m.notes), m.notes
    plain = compiled_memory(jax.jit(lambda v: v + 1), v)
    assert not any("outside XLA's buffer assignment" in n for n in plain.notes), plain.notes


def test_the_note_on_code_xla_does_not_count_is_found_when_the_notes_are_read(monkeypatch):
    """Printing the optimized HLO costs ~2 % of a compile: peak() never prints it, and the note it gives appears
    the same when a CompiledMemory's notes are first read — and in a copy, a pickle, a replace or a comparison."""
    import copy
    import dataclasses
    import pickle

    from xlakit.memory import peak
    from xlakit.memory.compiled import _runtime_calls_notes

    v = jax.ShapeDtypeStruct((256,), jnp.float32)
    fused = jax.jit(lambda v: jnp.outer(v, v).sum(0)).lower(v).compile()
    expected = _runtime_calls_notes("cpu", fused.as_text())
    if not expected:
        pytest.skip("this jaxlib hands no fusion to a library here")
    printed = []
    original = jax.stages.Compiled.as_text
    monkeypatch.setattr(jax.stages.Compiled, "as_text", lambda self: printed.append(1) or original(self))
    peak(fused)
    assert printed == []  # the peak path prints no HLO
    m = compiled_memory(fused)
    for same in (pickle.loads(pickle.dumps(compiled_memory(fused))), copy.deepcopy(compiled_memory(fused)),
                 dataclasses.replace(compiled_memory(fused), name="other")):
        assert same.notes == m.notes and same.notes[-1:] == expected
    assert compiled_memory(fused) == m and m.notes[-1:] == expected and printed == []


# -- what one run occupies: constants, and code where it lives in device memory ---------------------------------

W_1MIB = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)  # closed over: 1 MiB constant


def test_closed_over_weights_are_constants_in_the_footprint_whatever_the_source():
    """Fault: a model closing over its weights (numpy or jax.Array) has them in the program as constants, in
    no footprint term, so max_batch answered a batch whose peak was 40 MiB for a 24 MiB budget."""
    from xlakit.memory import peak
    from xlakit.memory._footprint import constant_bytes_of_assignment, constant_bytes_of_hlo_text

    x = jax.ShapeDtypeStruct((64, 512), jnp.float32)
    for weights in (W_1MIB, jnp.asarray(W_1MIB)):
        compiled = jax.jit(lambda v, w=weights: jnp.tanh(v @ w)).lower(x).compile()
        m = compiled_memory(compiled)
        assert m.constant_bytes == 2**20  # the three sources agree on XLA:CPU
        assert constant_bytes_of_assignment(m.serialized_buffer_assignment) == 2**20
        assert constant_bytes_of_hlo_text(compiled.as_text()) == 2**20
        assert compiled_memory(_header(compiled)).constant_bytes == 2**20  # a cache header: peak - arg - out
        assert m.footprint_bytes == 2 * 64 * 512 * 4 + 2**20 == m.peak_bytes + m.temp_bytes
        assert peak(compiled).total_bytes <= m.footprint_bytes
        assert m.to_frame().loc["constant", "device_bytes"] == 2**20 and m.to_dict()["constant_bytes"] == 2**20


def test_constants_inside_a_fusion_or_a_loop_body_count_as_xla_keeps_them():
    from xlakit.memory._footprint import constant_bytes_of_assignment, constant_bytes_of_hlo_text

    def loop(v):  # W in a while body (its own buffer), a row of W in the entry, arange inside a fusion
        return jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ W_1MIB) + jnp.arange(512.0), v) + W_1MIB[3]

    compiled = jax.jit(loop).lower(jax.ShapeDtypeStruct((4, 512), jnp.float32)).compile()
    proto = compiled.memory_analysis().serialized_buffer_assignment_proto
    assert constant_bytes_of_hlo_text(compiled.as_text()) == constant_bytes_of_assignment(proto) > 2**20
    assert compiled_memory(compiled).constant_bytes == constant_bytes_of_assignment(proto)  # XLA:CPU's peak - ...
    assert constant_bytes_of_hlo_text("%fused (p: f32[2]) -> f32[2] {\n  %c = f32[9]{0} constant({...})\n}\n"
                                      "ENTRY %main () -> f32[2] {\n  %k = bf16[3,5]{1,0:T(8,128)} constant({...})\n"
                                      "  %s = s4[3]{0} constant({1, 2, 3})\n  ROOT %f = f32[2]{0} fusion(%k), "
                                      "kind=kLoop, calls=%fused\n}\n") == 3 * 5 * 2 + 2


def _recorded(platform):
    import json
    from pathlib import Path

    facts = json.loads((Path(__file__).parent / "data" / "tpu_mlp_facts.json").read_text())
    return facts, compiled_memory({"name": "jit_step", "environment": {"platform": platform},
                                   "memory": facts["ma"]})


def test_on_a_tpu_the_loaded_code_is_in_the_footprint_and_on_cpu_it_is_not():
    """Recorded on a TPU v5e (jax 0.10.2; tests/data/tpu_mlp_facts.json): one run of a small MLP step raised
    the chip's peak_bytes_in_use by its outputs + its generated code, to the byte, over the arguments already
    there. The footprint must hold the code there; on CPU XLA reports none and the code is in no device."""
    from xlakit.memory._footprint import code_in_device_memory

    facts, tpu = _recorded("tpu")
    stats = facts["stats"]
    run_rise = stats["after1"]["peak_bytes_in_use"] - stats["before"]["bytes_in_use"]
    assert (tpu.argument_bytes, tpu.output_bytes, tpu.temp_bytes, tpu.generated_code_bytes) == (
        7_086_080, 6_300_672, 0, 661_504)
    assert run_rise == tpu.output_bytes + tpu.generated_code_bytes == 6_962_176
    assert tpu.footprint_bytes == tpu.argument_bytes + run_rise == 14_048_256
    assert tpu.constant_bytes is None and any("constants: not known" in n for n in tpu.notes)
    _, cpu = _recorded("cpu")
    assert cpu.footprint_bytes == 7_086_080 + 6_300_672 + cpu.constant_bytes  # no code term on CPU
    assert (code_in_device_memory("cpu"), code_in_device_memory("tpu"), code_in_device_memory("gpu")) == (
        False, True, True)


def test_a_program_without_arguments_is_accepted_by_peak_as_by_compiled_memory():
    from xlakit.memory import peak

    init = jax.jit(lambda: jnp.ones((64, 64)) * jnp.arange(64.0))  # e.g. jax.jit(lambda: model.init(key, x))
    assert peak(init).total_bytes == compiled_memory(init).footprint_bytes == 64 * 64 * 4
    with pytest.raises(TypeError, match="without example arguments"):
        peak(jax.jit(lambda v: v))
