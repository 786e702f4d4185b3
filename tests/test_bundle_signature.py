"""A loaded program's signature is checked against the manifest with one comparison of precomputed tuples;
only a mismatch runs the per-tensor check, which must still name the tensor that differs. And the report's
compiled-memory columns, now computed from the entry's raw ``memory`` field when first read, must equal
:func:`xlakit.memory.compiled_memory` of the loaded program. A verified entry holding another module's program
must be dropped and recompiled, not blamed on a healthy module (which then failed in every later process).

One tiny affine bundle (two weights, one input, one output, batch 2), exported and loaded once per module.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from xlakit.bundle import ModuleError, export_bundle, load_bundle
from xlakit.bundle.manifest import TensorSpec
from xlakit.bundle.programs import Context
from xlakit.memory import compiled_memory


def affine(params, x):
    return x @ params["w"] + params["b"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """``(path, loaded)``: the bundle after a second (warm) load, every program a hit."""
    path = tmp_path_factory.mktemp("sig") / "affine"
    params = {"w": jnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3)), "b": jnp.ones(3, jnp.float32)}
    export_bundle(affine, params, np.zeros((2, 4), np.float32), path, batch_sizes=[2])
    load_bundle(path, progress=False).wait()  # compile and store
    loaded = load_bundle(path, progress=False)
    assert [r.status for r in loaded.reports] == ["hit"]
    return path, loaded


def _context(loaded, **changes) -> Context:
    c = loaded._context
    manifest = c.manifest._replace(**changes)
    return Context(c.path, manifest, c.device, c.env, c.partition, c.store, c.log)


def _spec_and_program(loaded):
    spec = loaded.manifest.modules[0]
    return spec, loaded.programs[(spec.variant, spec.batch_size)]


def test_matching_signature_passes_without_the_per_tensor_check(warm, monkeypatch):
    """The one-comparison path accepts the program the manifest describes: the per-tensor comparison is
    not run at all (a precomputed tuple that differed from the program's, e.g. unsorted weight names or a
    symbolic batch axis, would silently send every hit down the slow path)."""
    _, loaded = warm
    spec, program = _spec_and_program(loaded)
    ctx = _context(loaded)

    def slow(*args):
        raise AssertionError("the per-tensor comparison ran for a matching program")

    from xlakit.bundle import compiling

    monkeypatch.setattr(compiling, "compare", slow)
    monkeypatch.setattr(compiling, "compare_outputs", slow)
    ctx._check_signature(spec, program)  # no error


def test_weight_dtype_mismatch_names_the_weight(warm):
    """Fault proved: a fast check that only said "signature differs" (or accepted it) would lose which
    tensor is wrong; the message must name ``weights.b`` and both dtypes."""
    _, loaded = warm
    spec, program = _spec_and_program(loaded)
    weights = tuple(TensorSpec(s.name, s.shape, "bfloat16") if s.name == "b" else s for s in loaded.manifest.weights)
    with pytest.raises(ModuleError) as info:
        _context(loaded, weights=weights)._check_signature(spec, program)
    assert info.value.field == "weights.b"
    assert "the module has float32[3], manifest.json says bfloat16[3]" in info.value.problem


def test_output_dtype_mismatch_names_the_output(warm):
    _, loaded = warm
    spec, program = _spec_and_program(loaded)
    outs = {v: tuple(TensorSpec(s.name, s.shape, "float16") for s in specs)
            for v, specs in loaded.manifest.outputs.items()}
    with pytest.raises(ModuleError) as info:
        _context(loaded, outputs=outs)._check_signature(spec, program)
    assert info.value.field.startswith("outputs.default[0]")
    assert "the module has float32[2,3], manifest.json says float16[2,3]" in info.value.problem


def test_input_shape_mismatch_on_a_hit_fails_that_module_naming_the_input(warm, tmp_path):
    """End to end on the warm path: manifest.json edited to say the input has 5 features (the modules, so
    their program keys, unchanged): the stored program loads, its signature disagrees, and the module fails
    with the message naming ``inputs[0]`` (the entry itself is sound and stays)."""
    import shutil

    path, _ = warm
    copy = tmp_path / "affine"
    shutil.copytree(path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["inputs"][0]["shape"] = ["batch", 5]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(RuntimeWarning):
        loaded = load_bundle(copy, progress=False).wait()
    (report,) = loaded.reports
    assert report.status == "error"
    err = loaded.errors["model.b2.jaxexp"]
    assert isinstance(err, ModuleError) and err.field == "inputs[0] (x)"
    assert "the module has float32[2,4], manifest.json says float32[2,5]" in err.problem


def test_report_memory_columns_equal_compiled_memory_of_the_program(warm):
    """The memory columns are computed lazily from the entry header's raw ``memory``; they must be the
    numbers of the program itself (XLA's CompiledMemoryStats of the loaded executable)."""
    _, loaded = warm
    (report,) = loaded.reports
    spec, program = _spec_and_program(loaded)
    m = compiled_memory(program)
    assert report.memory is not None and "memory" not in report.to_dict()
    got = (report.argument_bytes, report.output_bytes, report.temp_bytes, report.footprint_bytes)
    assert got == (m.argument_bytes, m.output_bytes, m.temp_bytes, m.footprint_bytes)
    assert report.argument_bytes == (12 + 3 + 8) * 4  # w, b and x (float32), a real value not a default
    row = loaded.report().iloc[0]
    assert int(row["footprint_bytes"]) == m.footprint_bytes


def test_entry_holding_another_programs_signature_is_dropped_and_recompiled(tmp_path):
    """A validly signed entry under batch 1's key holding the batch-2 program (a writer with the secret that
    mixed them up): the module file agrees with manifest.json, so the entry is wrong. It must be removed
    (``load_error``) and batch 1 compiled and stored again; the next process hits."""
    from xlakit import events
    from xlakit.bundle.hashes import program_key, sha256_hex

    path = tmp_path / "affine"
    params = {"w": np.arange(12, dtype=np.float32).reshape(4, 3), "b": np.ones(3, np.float32)}
    export_bundle(affine, params, np.zeros((2, 4), np.float32), path, batch_sizes=[1, 2])
    cold = load_bundle(path, progress=False).wait()
    ctx = cold._context
    key = {b: program_key(f"model.b{b}.jaxexp", sha256_hex((path / f"model.b{b}.jaxexp").read_bytes()))
           for b in (1, 2)}
    two = ctx.store.get(ctx.partition, key[2])
    assert two.status == "hit"
    ctx.store.remove(ctx.partition, key[1])
    assert ctx.store.put(ctx.partition, key[1], dict(two.header), two.payload).stored

    with events.record(jax_signals=False) as log:
        mixed = load_bundle(path, progress=False).wait()
    assert mixed.errors == {} and mixed.counts() == {"hit": 1, "miss": 1, "error": 0}
    (dropped,) = [e for e in log if e.kind == "load_error"]
    assert "not this module's" in dropped.reason and "float32[2,4]" in dropped.reason
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.testing.assert_allclose(np.asarray(mixed(x)), x @ params["w"] + params["b"])
    assert load_bundle(path, progress=False).wait().counts() == {"hit": 2, "miss": 0, "error": 0}
