"""Options the cache CLI used to accept and ignore (no JAX).

Faults these tests catch (red team): ``xlakit cache ls --remote ''`` listed the local default folder (an empty
value read as "not given"; ``--remote-options ''`` and ``--max-bytes ''`` on a remote prune likewise) where
``--path ''`` was refused; ``cache verify --fix`` on the local folder, and ``prune --older-than`` or
``--remote-mode ro`` without ``--remote``, were accepted and ignored (a local prune deleted under "ro").
"""

from __future__ import annotations

import os

import pytest
from cli_helpers import run

from xlakit.store import LocalStore

PART = "cpu-jaxlib0.0.0-x86_64-avx2-aaaaaaaa"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "default"))  # the folder an empty --remote fell back to
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    store = LocalStore(tmp_path / "cache")
    header = {"name": "jit_f", "compile_s": 1.0, "created": 1_700_000_000.0, "environment": {},
              "key_parts": {"module": "f"}}
    assert store.put(PART, "key-0", header, os.urandom(2000)).stored
    return store


@pytest.mark.parametrize("argv,option", [
    (["cache", "ls", "--remote", ""], "--remote"),
    (["cache", "stats", "--remote", ""], "--remote"),
    (["cache", "ls", "--path", ""], "--path"),
    (["cache", "ls", "--remote", "file:///nowhere", "--remote-options", ""], "--remote-options"),
    (["cache", "ls", "--partition", ""], "--partition"),
    (["bundle", "check", ""], "PATH"),
])
def test_an_empty_value_is_refused_naming_its_option(capsys, folder, argv, option):
    code, out, err = run(capsys, *argv)
    # before: `ls --remote ''` printed "No entries in <the default folder>" and exited 0
    assert code == 2 and out == "", out
    assert err.startswith(f"xlakit: error: argument {option}: an empty "), err
    assert len(err.strip().splitlines()) == 1


def test_an_empty_max_bytes_on_a_remote_prune_is_a_size_error_not_no_limit(capsys, tmp_path, folder):
    code, out, err = run(capsys, "cache", "prune", "--remote", (tmp_path / "bucket").as_uri(), "--max-bytes", "")
    assert code == 2 and out == "" and err.startswith("xlakit: error: --max-bytes: invalid size ''"), err


@pytest.mark.parametrize("extra,option", [
    (["verify", "--fix"], "--fix"),
    (["prune", "--max-bytes", "0", "--older-than", "30d"], "--older-than"),
    (["prune", "--max-bytes", "0", "--remote-mode", "ro"], "--remote-mode"),
    (["prune", "--max-bytes", "0", "--dry-run"], "--dry-run"),
    (["ls", "--remote-options", "{}"], "--remote-options"),
])
def test_an_option_for_remote_only_is_refused_on_the_local_folder_and_nothing_is_done(capsys, folder, extra, option):
    code, out, err = run(capsys, "cache", extra[0], "--path", str(folder.root), *extra[1:])
    # before: verify --fix printed "1 entries verified" (exit 0); prune evicted the entry whatever the option said
    assert code == 2 and out == "", out
    assert err.startswith(f"xlakit: error: {option} is for --remote URL only; ") and "nothing was" in err, err
    assert len(folder.entries()) == 1


def test_the_local_verify_without_fix_and_a_remote_verify_with_it_still_run(capsys, folder, tmp_path):
    code, out, _ = run(capsys, "cache", "verify", "--path", str(folder.root))
    assert code == 0 and "1 entries verified" in out
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    code, out, err = run(capsys, "cache", "verify", "--remote", bucket.as_uri(), "--fix")
    assert code == 0, err
