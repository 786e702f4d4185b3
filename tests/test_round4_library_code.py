"""Library code is what is provably installed, never a folder's name nor what ``import`` finds under a name.

Faults: a user's module in a folder of their own called ``site-packages`` / ``dist-packages`` was library code by
the folder's name, and a user's folder named after a library that is not installed here (``equinox/`` beside the
script) was library code because ``importlib.util.find_spec("equinox")`` found that very folder (as a namespace
package, or a regular one on ``sys.path``). Either way every byte the user's function allocates was charged to
the line that called ``peak()``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xlakit._sources import Frame, display_file, first_user_frame, library_package

ROOT = Path(__file__).resolve().parents[1]
N = 1000
MODEL = "import jax.numpy as jnp\ndef model(x):\n    big = jnp.outer(x, x) * 2.0\n    return jnp.sort(big, axis=0)[0]\n"
# Folders a user's code can sit in that only *look* like installs or libraries. None is installed anywhere.
FOLDERS = ["site-packages", "dist-packages", "lib/python3.11/site-packages", ".venv/lib/python3.11/site-packages",
           "equinox", "haiku", "chex", "penzai", "jaxtyping", "typeguard", "jax", "vendor"]
RUN = textwrap.dedent(f"""
    import importlib.util, json, os, sys, warnings
    warnings.simplefilter("ignore")
    import jax, jax.numpy as jnp
    from xlakit import memory as xm
    from xlakit._sources import library_package
    for folder in {FOLDERS!r}:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), folder, "usermodel.py")
        spec = importlib.util.spec_from_file_location("usermodel", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        raw = xm.peak(jax.jit(mod.model), jnp.ones({N})).by("source").raw
        top = folder.split("/")[0]
        found = importlib.util.find_spec(top) if "-" not in top and "." not in top else None
        print(json.dumps({{"folder": folder, "rows": dict(zip(raw["group"], map(int, raw["bytes"]))),
                          "package": library_package(path),
                          "find_spec": list(found.submodule_search_locations or ()) if found else None}}))
""")


def test_user_code_in_folders_named_like_installs_or_libraries_is_the_source_of_its_bytes(tmp_path):
    # A fresh process: the script's folder is sys.path[0], so find_spec() sees the user's folders as packages.
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "usermodel.py").write_text(MODEL)
    (tmp_path / "haiku" / "__init__.py").write_text("")  # a regular package too, not only a namespace one
    # A folder that does hold an installed distribution: only the files its RECORD lists are that library's.
    (tmp_path / "vendor" / "somelib-1.0.dist-info").mkdir()
    (tmp_path / "vendor" / "somelib-1.0.dist-info" / "RECORD").write_text("somelib/__init__.py,,\n")
    (tmp_path / "run.py").write_text(RUN)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = {r["folder"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert list(seen) == FOLDERS
    if seen["equinox"]["find_spec"] is not None:  # not installed here: importlib finds the user's own folder
        assert seen["equinox"]["find_spec"] == [str(tmp_path / "equinox")]
    for folder, r in seen.items():
        assert r["package"] is None, folder
        # the sorted copy (N x N f32) and the result row, on the user's line 4; nothing on run.py's peak() line
        assert r["rows"][f"{folder}/usermodel.py:4 (model)"] == N * N * 4 + N * 4, (folder, r["rows"])
        assert set(r["rows"]) - {"unknown"} == {f"{folder}/usermodel.py:4 (model)", "argument x"}, folder


def test_a_checkout_put_on_sys_path_is_user_code_even_under_a_library_name(tmp_path, monkeypatch):
    # importlib imports it as "haiku", but nothing installed it: this is the code its owner is working on.
    (tmp_path / "checkout" / "haiku").mkdir(parents=True)
    (tmp_path / "checkout" / "haiku" / "__init__.py").write_text("")
    (tmp_path / "checkout" / "haiku" / "basic.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "checkout"))
    spec = importlib.util.find_spec("haiku")
    assert spec is not None and spec.origin is not None
    assert library_package(spec.origin) is None
    assert library_package(str(tmp_path / "checkout" / "haiku" / "basic.py")) is None


def test_a_distribution_installed_into_a_folder_owns_exactly_the_files_its_record_lists(tmp_path):
    # pip install --target vendor libx: RECORD paths are relative to the folder holding the .dist-info
    vendor = tmp_path / "vendor"
    (vendor / "libx").mkdir(parents=True)
    (vendor / "libx-1.0.dist-info").mkdir()
    (vendor / "libx-1.0.dist-info" / "RECORD").write_text(
        "libx/__init__.py,sha256=x,0\nlibx/core.py,sha256=y,10\n\"libx/a,b.py\",,\nlibx-1.0.dist-info/RECORD,,\n")
    for name in ("__init__.py", "core.py", "a,b.py", "mine.py"):
        (vendor / "libx" / name).write_text("")
    (vendor / "usermodel.py").write_text("")
    assert library_package(str(vendor / "libx" / "core.py")) == "libx"
    assert library_package(str(vendor / "libx" / "a,b.py")) == "libx"  # a quoted CSV field
    assert display_file(str(vendor / "libx" / "core.py")) == "libx/core.py"
    assert library_package(str(vendor / "libx" / "mine.py")) is None  # dropped in by hand: no installer wrote it
    assert library_package(str(vendor / "usermodel.py")) is None
    # a legacy egg lists its files relative to the .egg-info; a checkout's SOURCES.txt proves nothing
    (tmp_path / "egg" / "liby").mkdir(parents=True)
    (tmp_path / "egg" / "liby" / "core.py").write_text("")
    (tmp_path / "egg" / "liby" / "mine.py").write_text("")
    (tmp_path / "egg" / "liby-1.0.egg-info").mkdir()
    (tmp_path / "egg" / "liby-1.0.egg-info" / "installed-files.txt").write_text("../liby/core.py\n")
    (tmp_path / "egg" / "liby-1.0.egg-info" / "SOURCES.txt").write_text("liby/mine.py\n")
    assert library_package(str(tmp_path / "egg" / "liby" / "core.py")) == "liby"
    assert library_package(str(tmp_path / "egg" / "liby" / "mine.py")) is None


def test_an_editable_install_is_user_code_and_an_installed_file_is_library_through_any_link(tmp_path):
    # flit install --symlink: site-packages/libe -> the user's source folder, listed in RECORD by its link path.
    # The file really is the user's source: user code, like every editable install's sources.
    site = tmp_path / "env" / "site-packages"
    (tmp_path / "src" / "libe").mkdir(parents=True)
    (tmp_path / "src" / "libe" / "core.py").write_text("")
    site.mkdir(parents=True)
    (site / "libe").symlink_to(tmp_path / "src" / "libe")
    (site / "libe-1.0.dist-info").mkdir()
    (site / "libe-1.0.dist-info" / "RECORD").write_text("libe/core.py,,\n")
    assert library_package(str(site / "libe" / "core.py")) is None
    assert library_package(str(tmp_path / "src" / "libe" / "core.py")) is None
    # the other way round: this interpreter's site-packages reached through a link is still its site-packages
    json_init = Path(json.__file__)
    numpy_spec = importlib.util.find_spec("numpy")
    assert numpy_spec is not None and numpy_spec.origin is not None
    numpy_init = Path(numpy_spec.origin).resolve()
    (tmp_path / "linked").symlink_to(numpy_init.parent.parent)
    assert library_package(str(tmp_path / "linked" / "numpy" / "__init__.py")) == "numpy"
    assert display_file(str(tmp_path / "linked" / "numpy" / "__init__.py")) == "numpy/__init__.py"
    assert library_package(str(json_init)) == "python"
    assert library_package("<frozen importlib._bootstrap>") == "python"
    assert library_package("<stdin>") is None


def test_a_path_recorded_elsewhere_is_library_only_when_the_same_file_is_installed_here():
    # a program compiled in another environment carries its paths; none of these exist on this machine
    gone = "/nonexistent-xlakit-env/lib/python3.10/site-packages"
    assert not os.path.exists(gone)
    assert library_package(f"{gone}/numpy/__init__.py") == "numpy"
    assert display_file(f"{gone}/numpy/__init__.py") == "numpy/__init__.py"
    assert library_package(f"{gone}/usermodel.py") is None
    assert library_package(f"{gone}/numpy/usermodel_not_in_numpy.py") is None
    assert library_package("/nonexistent-xlakit-env/numpy/__init__.py") is None  # no installer folder at all
    assert library_package("C:\\env\\Lib\\site-packages\\numpy\\__init__.py") == "numpy"  # compiled on Windows
    frames = [Frame(f"{gone}/numpy/__init__.py", 3), Frame(f"{gone}/usermodel.py", 4, "model")]
    assert first_user_frame(frames) == frames[1]


def test_an_installers_console_script_is_its_distributions_code():
    # pip writes bin/pytest and lists it in pytest's RECORD as ../../../bin/pytest
    try:
        files = importlib.metadata.distribution("pytest").files or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("pytest is not installed as a distribution")
    scripts = [f for f in files if str(f).startswith("..") and Path(f.locate()).is_file()]
    if not scripts:
        pytest.skip("pytest's RECORD lists no script here")
    assert library_package(os.path.normpath(str(scripts[0].locate()))) == "pytest"


def test_code_run_under_a_made_up_name_inside_site_packages_is_the_users():
    """Code exec'd with a file name inside this interpreter's site-packages that no file has (a generated model)
    was taken for library code by its folder alone; only a file that is there (or inside an archive that is) is
    installed code."""
    import sysconfig

    made_up = os.path.join(sysconfig.get_paths()["purelib"], "generated_user_model_xlakit_test.py")
    assert not os.path.exists(made_up)
    assert library_package(made_up) is None
    assert library_package(importlib.util.find_spec("numpy").origin) == "numpy"
