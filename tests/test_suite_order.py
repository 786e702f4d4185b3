"""The suite's own scheduling: under ``--dist loadfile`` the files go to the workers in collection order.

`make test` ranks the longest files first (``conftest.LONGEST_FIRST``) so that no worker starts a two-minute file
while the others have run out of work. pytest-xdist >= 3.7 re-sorts the files by their number of tests instead,
unless ``--no-loadscope-reorder`` is given: the Binder build (2 tests, ~110 s) ran last but one, and the ranking
did nothing. ``conftest.pytest_configure`` turns that re-sorting off.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytest.importorskip("xdist")


def test_files_go_out_in_collection_order_not_by_number_of_tests(tmp_path: Path) -> None:
    # A suite with this conftest's pytest_configure and a ranking that puts the one-test file first.
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(HERE)!r})
        spec = importlib.util.spec_from_file_location("suite_conftest", {str(HERE / "conftest.py")!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
        pytest_configure = suite.pytest_configure

        def pytest_collection_modifyitems(items):
            items.sort(key=lambda item: item.path.name != "test_one_long.py")
    """))
    (tmp_path / "test_many_short.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(5)))
    (tmp_path / "test_one_long.py").write_text("def test_long(): pass\n")
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile",
                          "-v", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    order = [line.split("::")[0].split()[-1] for line in ran.stdout.splitlines() if " PASSED " in line]
    assert order[0] == "test_one_long.py", order
    assert order[1:] == ["test_many_short.py"] * 5, order
