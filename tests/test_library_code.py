"""Library code is decided by where packages are installed, never by what a folder is called.

Fault: a user's package with a folder named ``jax/`` (or ``flax/``, ``numpy/``) was taken for library code,
because any path component named like a library counted: every byte its functions allocate was charged to the
line that called ``peak()``, and the timeline called the user's own program JAX's."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import xlakit  # noqa: E402
from xlakit import events  # noqa: E402
from xlakit._sources import library_package  # noqa: E402
from xlakit.memory import attribute  # noqa: E402

LAYERS = "import jax.numpy as jnp\n\n\ndef block(x):\n    h = jnp.sin(x) * 2\n    return jnp.cumsum(h, axis=0) + h\n"


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """``userpkg`` with subpackages named ``jax``, ``flax`` and ``numpy``, importable from ``tmp_path``."""
    for sub in ("jax", "flax", "numpy"):
        folder = tmp_path / "userpkg" / sub
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "layers.py").write_text(LAYERS)
    (tmp_path / "userpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]


def test_a_users_folders_named_like_libraries_are_user_code_and_the_libraries_stay_library(user_package):
    for sub in ("jax", "flax", "numpy"):
        assert library_package(str(user_package / "userpkg" / sub / "layers.py")) is None, sub
    assert library_package(jax.__file__) == "jax" and library_package(jnp.__file__) == "jax"
    assert library_package(np.__file__) == "numpy"
    assert library_package(xlakit.__file__) == "xlakit"
    assert library_package(importlib.__file__) == "python"


def test_attribution_and_the_timeline_name_the_users_line_inside_a_folder_named_jax(user_package):
    from userpkg.jax.layers import block

    a = attribute(jax.jit(block), jax.ShapeDtypeStruct((256, 64), jnp.float32))
    made = a.buffers[a.buffers["role"] != "parameter"]
    sources = set(made["source"])
    # h and the result are the user's lines 5 and 6, not this test's call of attribute()
    known = {s.split("userpkg/")[-1] for s in sources - {"unknown"}}
    assert known and known <= {"jax/layers.py:5 (block)", "jax/layers.py:6 (block)"}, sources
    by_line = {k.split("userpkg/")[-1]: int(v) for k, v in made.groupby("source")["bytes"].sum().items()}
    assert by_line["jax/layers.py:5 (block)"] == 256 * 64 * 4  # h
    assert by_line["jax/layers.py:6 (block)"] >= 256 * 64 * 4  # the result (and a step of the scan)

    with events.record() as rec:
        jax.jit(block)(jnp.ones((8, 4)))
    mine = [e for e in rec.events() if e.name == "jit_block" and e.kind in ("trace", "compile")]
    assert mine and {e.origin for e in mine} == {"user"}, [(e.kind, e.origin, e.site) for e in mine]


def test_the_demos_example_models_are_charged_like_a_users_model():
    """A teacher's trial (2026-12-07): notebook 01's memory view charged 6.2 of the CNN step's 8.7 MiB peak to "no
    line of your code: made by XLA or inside a library" — the example models live inside xlakit, which is library
    code. ``xlakit/demo/workloads.py`` stands for the user's model: its lines are named; the rest of xlakit (the
    runner that calls peak()) stays library code."""
    import xlakit.demo.runner as runner
    import xlakit.demo.workloads as workloads

    assert library_package(workloads.__file__) is None
    assert library_package(runner.__file__) == "xlakit"
    from xlakit.memory import peak

    cnn = {w.name: w for w in workloads.workloads()}["cnn_train_step"]
    step, args = cnn.build()
    by_source = peak(step.lower(*args) if hasattr(step, "lower") else jax.jit(step).lower(*args)).by("source")
    named = by_source[by_source["group"].str.contains("workloads.py:", regex=False)]
    assert named["bytes"].sum() > 0.6 * by_source["bytes"].sum(), by_source
