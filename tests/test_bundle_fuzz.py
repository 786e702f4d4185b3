"""Hypothesis mutates a valid, warm bundle's files (manifest.json, module_hashes.json, the safetensors header,
module files, .cache itself) by truncation, bit flips, deep nesting, huge and non-finite numbers, wrong types,
dropped and added fields, and other file kinds (FIFO, symlink to /dev/zero, folder, symlinks outside, a 2 GiB
sparse file). Only documented errors escape ``check_bundle`` (none), ``load_bundle`` (``BundleError``) and
``xlakit bundle check`` (exit 0/1/2, no "unexpected error"); no case runs past its time bound; nothing
outside the bundle folder changes. The mutations live in ``benchmarks/fuzz_bundle.py``, which runs 10,000.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_FUZZ = Path(__file__).parent.parent / "benchmarks" / "fuzz_bundle.py"
_spec = importlib.util.spec_from_file_location("fuzz_bundle", _FUZZ)
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    return fuzz.make_pristine(root), fuzz.make_outside(root), root


def _fresh(pristine: Path, root: Path) -> Path:
    work = root / "case"
    if work.exists() or work.is_symlink():
        shutil.rmtree(work)
    shutil.copytree(pristine, work, symlinks=True)
    return work


def _check(setup, target, mutation, seed, load):
    pristine, outside, root = setup
    work = _fresh(pristine, root)
    rng = random.Random(seed)
    try:
        what = fuzz.apply(work, outside, target, mutation, rng, allow_flip_modules=not load)
    except (ValueError, IndexError, KeyError, TypeError):
        return  # the mutation does not apply to this file (e.g. no dict to drop a key from)
    findings = fuzz.run_case(work, outside, load, timeout_s=30)
    assert findings == [], f"{what}: {findings}"


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True)


@settings(max_examples=250, **_SETTINGS)
@given(target=st.sampled_from(("manifest", "record", "weights")),
       mutation=st.sampled_from(fuzz.JSON_MUTATIONS + ("header_len",)), seed=st.integers(0, 2 ** 32))
def test_json_and_header_mutations_check_and_cli(setup, target, mutation, seed):
    if mutation == "header_len" and target != "weights":
        mutation = "truncate"
    _check(setup, target, mutation, seed, load=False)


@settings(max_examples=100, **_SETTINGS)
@given(target=st.sampled_from(("module", "cache")), mutation=st.sampled_from(("truncate", "bitflip", "kind")),
       seed=st.integers(0, 2 ** 32))
def test_module_and_cache_mutations_check_and_cli(setup, target, mutation, seed):
    _check(setup, target, "kind" if target == "cache" else mutation, seed, load=False)


@settings(max_examples=80, **_SETTINGS)
@given(target=st.sampled_from(fuzz.TARGETS), mutation=st.sampled_from(fuzz.JSON_MUTATIONS),
       seed=st.integers(0, 2 ** 32))
def test_mutations_through_load_bundle(setup, target, mutation, seed):
    if target == "module":
        mutation = "kind" if mutation == "kind" else "truncate"
    _check(setup, target, mutation, seed, load=True)


# -- random batch programs: padding and chunking never change a proven program's answer --------------------------

_ROWS = Path(__file__).parent.parent / "benchmarks" / "fuzz_bundle_rows.py"
_rows_spec = importlib.util.spec_from_file_location("fuzz_bundle_rows", _ROWS)
fuzz_rows = importlib.util.module_from_spec(_rows_spec)
_rows_spec.loader.exec_module(fuzz_rows)


def test_random_batch_programs_proven_row_wise_survive_padding_and_chunking():
    """A few of the benchmark's random programs (it runs 1,000): every program proven row-wise gives its direct
    answer when run in chunks, the last padded with random rows; coupled and size-dependent ones are refused."""
    counts = fuzz_rows.run(6, seed=8, out=lambda line: None, sample_refused=0)
    assert counts["findings"] == [] and counts["wrong"] == 0
    assert counts["proven"] >= 3 and counts["checked"] == counts["proven"]
    assert counts["coupled"] >= 1 and counts["size-dependent"] >= 1


# -- random parameter pytrees: a bundle never changes a parameter ----------------------------------------------

_PARAMS = Path(__file__).parent.parent / "benchmarks" / "fuzz_bundle_params.py"
_params_spec = importlib.util.spec_from_file_location("fuzz_bundle_params", _PARAMS)
fuzz_params = importlib.util.module_from_spec(_params_spec)
_params_spec.loader.exec_module(fuzz_params)


@settings(max_examples=12, **_SETTINGS)
@given(seed=st.integers(0, 2 ** 32))
def test_drawn_parameters_round_trip_identical(tmp_path, seed):
    """Parameter pytrees drawn from what users pass (Python and NumPy scalars, 0-d, bool, int, bf16, fp8, int4,
    float64, Fortran-ordered and strided arrays, weakly typed jax.Arrays, typed keys): the stored tensors are
    the leaves as jax.jit sees them, and the loaded bundle's outputs (each leaf, x_bf16 * each scalar, a
    lax.cond on each scalar) are bit-identical to jax.jit's, with the same shapes and dtypes."""
    params, drawn = fuzz_params.draw_params(random.Random(seed))
    findings = fuzz_params.run_case(params, tmp_path / f"b{seed}")
    assert findings == [], f"{drawn}: {findings}"


def test_parameters_on_any_device_and_sharded_round_trip():
    """In a process with 4 CPU devices: jax.Arrays placed on any device or sharded over all four, among the
    other kinds, round-trip identical (the benchmark's runner, 6 cases)."""
    import json

    from conftest import run_python

    code = (f"import sys, json; sys.path.insert(0, {str(_PARAMS.parent)!r}); import fuzz_bundle_params as f; "
            "import jax; assert jax.device_count() == 4; "
            "kinds = ('jax_on_device', 'jax_sharded', 'zero_d', 'py_float', 'int4', 'key'); "
            "c = f.run(6, 3, out=lambda line: None, kinds=kinds); print(json.dumps(c))")
    counts = json.loads(run_python(code, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
                                   timeout=240))
    assert counts["findings"] == []
    assert counts["kinds"].get("jax_on_device", 0) + counts["kinds"].get("jax_sharded", 0) >= 2
