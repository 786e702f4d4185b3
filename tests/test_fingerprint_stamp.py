"""The jaxlib build fingerprint is taken from its memo without walking jaxlib only while a stat stamp of every
folder and library that decided it still holds: each change that can alter the set or the contents of the
libraries must break the stamp (and the walk then gives the new fingerprint), and a stamp of stats too recent
to trust (one file-system timestamp tick) is never recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xlakit._jax import environment as envmod


def _package(root: Path) -> Path:
    pkg = root / "jaxlib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "_core.so").write_bytes(b"\x7fELF core" * 100)
    (pkg / "sub" / "libplugin.so.12").write_bytes(b"\x7fELF plugin")
    return pkg


def test_a_stamp_of_just_written_files_is_not_recorded(tmp_path):
    memo, pkg = tmp_path / "memo.json", _package(tmp_path / "site")
    fingerprint = envmod._fingerprint_dirs([pkg], memo, stamp=("key", [str(tmp_path / "site")]))
    assert fingerprint == envmod._fingerprint_dirs([pkg], None)
    assert envmod._stamped_fingerprint(memo, "key") is None  # within SETTLE_NS of the walk: walk again next time


@pytest.mark.parametrize("change", ["library added in a subfolder", "library rewritten, mtime put back",
                                    "library removed", "plugin package added", "listed folder appears"])
def test_every_change_to_the_libraries_breaks_the_stamp(tmp_path, monkeypatch, change):
    monkeypatch.setattr(envmod, "SETTLE_NS", -10**15)  # the files were just written: let them count as settled
    memo, site, pkg = tmp_path / "memo.json", tmp_path / "site", _package(tmp_path / "site")
    later = tmp_path / "later"  # a sys.path entry that does not exist yet
    stamp = ("key", [str(site), str(later)])
    before = envmod._fingerprint_dirs([pkg], memo, stamp=stamp)
    assert envmod._stamped_fingerprint(memo, "key") == before

    core = pkg / "_core.so"
    if change == "library added in a subfolder":
        (pkg / "sub" / "libnew.so").write_bytes(b"\x7fELF new")
    elif change == "library rewritten, mtime put back":
        st = core.stat()
        core.write_bytes(b"\x7fELF edit" * 100)  # same size
        os.utime(core, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime tells
    elif change == "library removed":
        (pkg / "sub" / "libplugin.so.12").unlink()
    elif change == "plugin package added":
        (site / "jax_plugins").mkdir()
    else:
        later.mkdir()
    assert envmod._stamped_fingerprint(memo, "key") is None

    roots = [pkg, site / "jax_plugins"] if change == "plugin package added" else [pkg]
    after = envmod._fingerprint_dirs(roots, memo, stamp=stamp)
    assert envmod._stamped_fingerprint(memo, "key") == after
    if change not in ("plugin package added", "listed folder appears"):  # (an empty package adds no library)
        assert after != before


def test_jaxlib_fingerprint_skips_the_walk_while_the_stamp_holds(monkeypatch):
    monkeypatch.setattr(envmod, "SETTLE_NS", -10**15)  # this tree's folders may have changed moments ago
    first = envmod.jaxlib_build_fingerprint()  # walks and records the stamp

    def no_walk():
        raise AssertionError("walked jaxlib although nothing changed")

    monkeypatch.setattr(envmod, "_library_roots", no_walk)
    assert envmod.jaxlib_build_fingerprint() == first
