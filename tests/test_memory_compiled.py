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
    assert m.footprint_bytes == 256 + 148 - 128


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
    assert any("YNNPACK fusion (__ynn_fusion) x1" in n and "probe()" in n for n in m.notes), m.notes
    plain = compiled_memory(jax.jit(lambda v: v + 1), v)
    assert not any("outside XLA's buffer assignment" in n for n in plain.notes), plain.notes
