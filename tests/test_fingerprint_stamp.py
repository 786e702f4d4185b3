"""The jaxlib build fingerprint is taken from its memo without walking jaxlib only while a stat stamp of every
folder and library that decided it still holds: each change that can alter the set or the contents of the
libraries must break the stamp (and the walk then gives the new fingerprint), and a stamp of stats too recent
to trust (one file-system timestamp tick) is never recorded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from xlakit._jax import fingerprint as fpmod


def _package(root: Path) -> Path:
    pkg = root / "jaxlib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "_core.so").write_bytes(b"\x7fELF core" * 100)
    (pkg / "sub" / "libplugin.so.12").write_bytes(b"\x7fELF plugin")
    return pkg


def _search(monkeypatch, tmp_path: Path, *folders: Path) -> Path:
    """A fake jaxlib under ``tmp_path/site``, found there, with ``sys.path`` = ``site`` and ``folders``."""
    site = tmp_path / "site"
    pkg = _package(site)
    spec = SimpleNamespace(submodule_search_locations=[str(pkg)])
    monkeypatch.setattr(fpmod.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(sys, "path", [str(site), *map(str, folders)])
    return pkg


def test_a_stamp_of_just_written_files_is_not_recorded(tmp_path, monkeypatch):
    pkg = _search(monkeypatch, tmp_path)
    memo = tmp_path / "memo.json"
    fingerprint = fpmod._fingerprint_dirs(None, memo, stamp="key")
    assert fingerprint == fpmod._fingerprint_dirs([pkg], None)
    assert fpmod._stamped_fingerprint(memo, "key") is None  # within SETTLE_NS of the walk: walk again next time


@pytest.mark.parametrize("change", ["library added in a subfolder", "library rewritten, mtime put back",
                                    "library removed", "plugin package added", "plugin package in a new folder",
                                    "script's own folder changed"])
def test_every_change_to_the_libraries_breaks_the_stamp(tmp_path, monkeypatch, change):
    later, script = tmp_path / "later", tmp_path / "script"  # later: a sys.path entry that does not exist yet
    script.mkdir()
    pkg = _search(monkeypatch, tmp_path, later, script)
    monkeypatch.setattr(fpmod, "SETTLE_NS", -10**15)  # the files were just written: let them count as settled
    memo, site = tmp_path / "memo.json", tmp_path / "site"
    before = fpmod._fingerprint_dirs(None, memo, stamp="key")
    assert fpmod._stamped_fingerprint(memo, "key") == before

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
        (site / "jax_plugins" / "libpjrt.so").write_bytes(b"\x7fELF pjrt")
    elif change == "plugin package in a new folder":
        (later / "jax_plugins").mkdir(parents=True)
        (later / "jax_plugins" / "libpjrt.so").write_bytes(b"\x7fELF pjrt")
    else:  # a new file beside the script, no plugin: listed again, the stamp still holds
        (script / "results.csv").write_text("1,2\n")
        assert fpmod._stamped_fingerprint(memo, "key") == before
        return
    assert fpmod._stamped_fingerprint(memo, "key") is None

    after = fpmod._fingerprint_dirs(None, memo, stamp="key")
    assert after != before and fpmod._stamped_fingerprint(memo, "key") == after


def test_jaxlib_fingerprint_skips_the_walk_while_the_stamp_holds(monkeypatch):
    monkeypatch.setattr(fpmod, "SETTLE_NS", -10**15)  # this tree's folders may have changed moments ago
    first = fpmod.jaxlib_build_fingerprint()  # walks and records the stamp

    def no_walk(*_args):  # the walk passes its listing dict: fail with this message, not a TypeError
        raise AssertionError("walked jaxlib although nothing changed")

    monkeypatch.setattr(fpmod, "_library_roots", no_walk)
    assert fpmod.jaxlib_build_fingerprint() == first


def test_the_newest_stamps_are_kept_whatever_their_keys_sort_as(tmp_path, monkeypatch):
    """Fault proved: the memo is written with sorted keys and the oldest stamps were taken to be the first ones
    read, so once MAX_STAMPS search paths were stamped, the one just recorded (a key sorting first) was dropped
    at the next record, and a process started from that folder walked jaxlib every time."""
    _search(monkeypatch, tmp_path)
    monkeypatch.setattr(fpmod, "SETTLE_NS", -10**15)
    memo = tmp_path / "memo.json"
    keys = [f"{n:02d}" for n in range(fpmod.MAX_STAMPS + 4, 0, -1)]  # each new key sorts before all earlier ones
    for key in keys:
        fpmod._fingerprint_dirs(None, memo, stamp=key)
    kept = {key for key in keys if fpmod._stamped_fingerprint(memo, key) is not None}
    assert kept == set(keys[-fpmod.MAX_STAMPS:])  # the MAX_STAMPS most recently recorded, the last one among them


def test_a_memo_folder_of_its_own_serves_every_new_cache_folder(tmp_path, monkeypatch):
    """Each process that opened a new cache folder (a CI job's, a notebook's throwaway one) hashed jaxlib's
    ~350 MB again, the memo living beside that cache; with $XLAKIT_FINGERPRINT_MEMO_DIR the second cache folder is
    served by the first one's memo, walking nothing, and neither cache folder holds a memo."""
    monkeypatch.setattr(fpmod, "SETTLE_NS", -10**15)  # this tree's folders may have changed moments ago
    monkeypatch.setenv(fpmod.MEMO_DIR_ENV, str(tmp_path / "memo"))
    monkeypatch.setattr(fpmod, "_memo_dir", tmp_path / "cache-a")
    first = fpmod.jaxlib_build_fingerprint()
    assert (tmp_path / "memo" / fpmod.MEMO_FILENAME).is_file() and not (tmp_path / "cache-a").exists()

    def no_walk(*_args):
        raise AssertionError("walked jaxlib for a new cache folder although the memo holds it")

    monkeypatch.setattr(fpmod, "_library_roots", no_walk)
    monkeypatch.setattr(fpmod, "_memo_dir", tmp_path / "cache-b")
    assert fpmod.jaxlib_build_fingerprint() == first and not (tmp_path / "cache-b").exists()
    monkeypatch.setenv(fpmod.MEMO_DIR_ENV, "")  # empty: unset, the memo beside the cache again (and a walk)
    with pytest.raises(AssertionError, match="walked jaxlib"):
        fpmod.jaxlib_build_fingerprint()
