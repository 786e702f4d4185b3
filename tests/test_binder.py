"""Binder (repo2docker) builds binder/ the way a user's click on the README's badge does.

The build test makes binder/requirements.txt in a fresh virtual environment of the Python repo2docker would pick
(binder/runtime.txt), runs binder/postBuild and executes notebooks/01_quickstart.ipynb there. It is marked
``binder`` and runs only with XLAKIT_TEST_BINDER=1, which `make test` sets (the environment, postBuild and the
notebook take about a minute of CPU; conftest.LONGEST_FIRST hands this file out among the first under pytest-xdist).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
from test_notebooks import BINDER_NOTEBOOK, ROOT, _kernel_env, check_executed  # noqa: E402 - after importorskip

#: The Python repo2docker (Binder's builder) installs when the binder/ folder has no runtime.txt: its default, not
#: the project's requires-python, which it never reads once a binder/ folder exists.
REPO2DOCKER_DEFAULT_PYTHON = "3.10"


def binder_python_version(binder: Path = ROOT / "binder") -> str:
    """The Python version repo2docker builds ``binder`` with: ``binder/runtime.txt`` (``python-X.Y``; with a
    binder/ folder, files beside it in the repository root are ignored), else repo2docker's default."""
    runtime = binder / "runtime.txt"
    if not runtime.exists():
        return REPO2DOCKER_DEFAULT_PYTHON
    text = runtime.read_text().strip()
    m = re.fullmatch(r"python-(\d+\.\d+)(?:\.\d+)?", text)
    assert m, f"{runtime}: repo2docker reads 'python-X.Y', not {text!r}"
    return m.group(1)


def _python_of_version(version: str) -> str | None:
    """An interpreter of ``version`` on this machine: this one, pythonX.Y on PATH, or a pyenv build."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    for candidate in [shutil.which(f"python{version}"), *sorted(glob.glob(os.path.expanduser(
            f"~/.pyenv/versions/{version}.*/bin/python")))]:
        if candidate and subprocess.run([candidate, "-c", f"import sys; assert '%d.%d' % sys.version_info[:2] == "
                                         f"'{version}'"], capture_output=True).returncode == 0:
            return candidate
    return None


def test_binder_builds_with_a_python_the_project_supports(tmp_path: Path) -> None:
    """Without binder/runtime.txt repo2docker picked its default Python 3.10, where binder/requirements.txt finds
    no jaxlib (the project needs >= 3.11), while the Binder build test used this interpreter and passed."""
    from packaging.specifiers import SpecifierSet

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    version = binder_python_version()
    assert version in SpecifierSet(requires), f"Binder would build with Python {version}; requires {requires}"
    (tmp_path / "runtime.txt").unlink(missing_ok=True)  # the rule itself: no runtime.txt means the default
    assert binder_python_version(tmp_path) == REPO2DOCKER_DEFAULT_PYTHON
    assert REPO2DOCKER_DEFAULT_PYTHON not in SpecifierSet(requires)


@pytest.mark.binder
@pytest.mark.skipif(os.environ.get("XLAKIT_TEST_BINDER") != "1",
                    reason="builds a fresh Binder environment (minutes); set XLAKIT_TEST_BINDER=1")
@pytest.mark.timeout(1800)
def test_binder_environment(tmp_path: Path) -> None:
    """Build binder/ as Binder does (the Python of binder/runtime.txt, requirements.txt, then postBuild, from the
    repository root) and run the notebook it opens there. `make test` (the README's test command, and CI) sets
    XLAKIT_TEST_BINDER=1. The environment (~1 GB) is removed afterwards, also when the test fails."""
    version = binder_python_version()
    python = _python_of_version(version)
    if python is None:
        pytest.skip(f"Binder builds with Python {version} (binder/runtime.txt); this machine has none")
    venv = tmp_path / "venv"
    try:
        _build_and_run_binder(python, venv, tmp_path)
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def _uv() -> Path | None:
    """uv beside this interpreter (`make test` installs it there), or None."""
    uv = Path(sys.executable).parent / "uv"
    return uv if uv.is_file() and os.access(uv, os.X_OK) else None


def _create_venv(python: str, venv: Path) -> None:
    """A virtual environment of ``python``: uv's (no pip in it: what `python -m venv` adds is ensurepip's
    byte-compiled pip, 10 s of CPU and 25 s here, which the build below does not use), else ``python -m venv``."""
    uv = _uv()
    cmd = [str(uv), "venv", "--quiet", "--python", python, str(venv)] if uv else [python, "-m", "venv", str(venv)]
    subprocess.run(cmd, check=True)


def _installer(py: Path) -> list[str]:
    """``pip install`` into the environment of ``py``, as repo2docker runs it; through uv's pip interface when uv
    is beside this interpreter: the same requirements resolved from the same index.

    Without compiling bytecode ahead: what this test proves (the resolution on Binder's Python, postBuild, the
    notebook) does not depend on it, and compiling the ~1 GB environment's every module took 74 s of CPU here,
    where the processes below compile the few hundred modules they import (conftest turns bytecode writing on)."""
    uv = _uv()
    if uv:
        return [str(uv), "pip", "install", "--quiet", "--python", str(py)]
    return [str(py), "-m", "pip", "install", "--quiet", "--no-compile"]


def _build_and_run_binder(python: str, venv: Path, tmp_path: Path) -> None:
    _create_venv(python, venv)
    py = venv / "bin" / "python"
    built = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert built == binder_python_version(), built
    env = _kernel_env()
    env.pop("PYTHONPATH", None)          # xlakit must come from the install, not from this checkout's path
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    subprocess.run([*_installer(py), "-r", "binder/requirements.txt"], cwd=ROOT, env=env, check=True)
    subprocess.run(["bash", "binder/postBuild"], cwd=ROOT, env=env, check=True)
    script = (
        "import sys, nbformat, nbclient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "nbclient.NotebookClient(nb, timeout=180, kernel_name='python3',"
        " resources={'metadata': {'path': sys.argv[2]}}).execute()\n"
        "nbformat.write(nb, sys.argv[3])\n"
    )
    # The notebook Binder opens (its badge's labpath), top to bottom, in the environment Binder would build, with
    # every check tests/test_notebooks.py makes (which then does not run it again). The others run there, against
    # the same extras; one notebook proves this environment works.
    path = ROOT / "notebooks" / f"{BINDER_NOTEBOOK}.ipynb"
    out = tmp_path / f"{path.stem}_executed.ipynb"
    subprocess.run([str(py), "-c", script, str(path), str(tmp_path), str(out)], cwd=tmp_path, env=env,
                   check=True, timeout=600)
    nb = nbformat.read(out, as_version=4)
    where = subprocess.run([str(py), "-c", "import xlakit; print(xlakit.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert str(venv) in where or str(ROOT) in where, where
    check_executed(path, nb, tmp_path)
