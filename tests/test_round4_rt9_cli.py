"""Command-line errors name the option to fix, and nothing is done on a value given wrongly (round 4, red team 9; no
JAX).

Faults these tests catch: ``cache ls --remote s3://b/p --remote-options '{"endpoint_url": 5}'`` said "cannot access:
TypeError: 'int' object is not iterable; check the folder's permissions or pass --path DIR" (an unknown option
``'{"a": 1}'``: an AioSession TypeError; ``--remote s3://bucket/../xk``: "cannot access: Bad Request"), naming neither
``--remote-options`` nor ``--remote``; ``report --out DIR`` (a folder) said "cannot access /proc/self/fd/3/...: Is a
directory; ... pass --path DIR"; ``--older-than ３s`` or ``٣s`` (non-ASCII digits) was read as 3 seconds, and a prune
would delete by it; ``prune --max-bytes 100MB --max-bytes 0`` kept the last value silently and evicted every entry
(any option given twice kept its last value: ``--path``, ``--remote``, ``--partition``...).
"""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import run

from xlakit._units import parse_age, parse_int
from xlakit.store import LocalStore
from xlakit.store.remote import RemoteStore, check_url

PART = "cpu-jaxlib0.0.0-x86_64-avx2-aaaaaaaa"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    monkeypatch.delenv("XLAKIT_CACHE_REMOTE_OPTIONS", raising=False)
    store = LocalStore(tmp_path / "cache")
    for i in range(3):
        header = {"name": "jit_f", "compile_s": 1.0, "environment": {}}
        assert store.put(PART, f"jit_f-{i:064x}", header, os.urandom(3000)).stored
    return store


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xlakit: error: "), err
    return lines[0]


# -- 2. errors name the option ------------------------------------------------------------------------------------

def test_a_storage_option_of_the_wrong_type_names_remote_options(folder, capsys):
    code, out, err = run(capsys, "cache", "ls", "--remote", "s3://b/p", "--remote-options", '{"endpoint_url": 5}')
    line = _one_error(err)
    assert code == 2 and out == "" and line.startswith("xlakit: error: --remote-options: storage option "
                                                       "'endpoint_url' must be a string"), line
    assert "not iterable" not in line and "--path" not in line and "permissions" not in line
    code, _, err = run(capsys, "cache", "ls", "--remote", "s3://b/p", "--remote-options", '{"client_kwargs": 1}')
    assert code == 2 and "--remote-options: storage option 'client_kwargs' must be a JSON object" in err, err
    code, _, err = run(capsys, "cache", "ls", "--remote", "s3://b/p", "--remote-options",
                       '{"secret": 98765432}')
    assert code == 2 and "'secret' must be a string" in err and "98765432" not in err, err  # unsaid


def test_an_option_the_filesystem_does_not_take_names_remote_options(folder, capsys):
    pytest.importorskip("s3fs")
    code, out, err = run(capsys, "cache", "ls", "--remote", "s3://b/p", "--remote-options", '{"a": 1}')
    line = _one_error(err)
    assert code == 2 and line.startswith("xlakit: error: --remote-options: the s3:// filesystem did not accept the "
                                         "storage options ("), line
    assert "'a'" in line and "--path" not in line and "permissions" not in line


def test_a_dot_dot_segment_in_a_bucket_url_is_refused_naming_remote(folder, capsys):
    code, _, err = run(capsys, "cache", "ls", "--remote", "s3://bucket/../xk")
    line = _one_error(err)
    assert code == 2 and line.startswith("xlakit: error: --remote='s3://bucket/../xk': a '.' or '..' segment"), line
    for url in ("s3://bucket/./xk", "gs://b/a/../c", "s3://b/.."):
        with pytest.raises(ValueError, match="segment cannot be part of a bucket"):
            check_url(url, "remote")
    assert check_url("s3://bucket/a..b/xk") and check_url("file:///tmp/a/../b")  # a name, and a folder's path


@pytest.mark.parametrize("cause,option", [(TypeError("AioSession got an unexpected keyword"), "--remote-options"),
                                          (ValueError("Invalid endpoint: x"), "--remote-options"),
                                          (RuntimeError("ClientError: Bad Request"), "--remote")])
def test_a_failing_medium_names_remote_or_remote_options_never_path(folder, capsys, monkeypatch, tmp_path, cause,
                                                                    option):
    def failing(self, partition=None):
        raise OSError(f"{type(cause).__name__}: {cause}") from cause

    monkeypatch.setattr(RemoteStore, "scan", failing)
    url = (tmp_path / "bucket").as_uri()
    code, _, err = run(capsys, "cache", "ls", "--remote", url)
    line = _one_error(err)
    assert code == 2 and line.startswith(f"xlakit: error: {option}"), line
    assert "--path" not in line and "permissions" not in line and str(cause) in line and "--remote-options" in line
    code, _, err = run(capsys, "cache", "prune", "--remote", url, "--remote-options", "{}", "--max-bytes", "1")
    line = _one_error(err)
    assert code == 2 and line.endswith("nothing was deleted after the failing request") and "--remote-options" in line
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_OPTIONS", "{}")  # the options came from the variable: it is named
    code, _, err = run(capsys, "cache", "verify", "--remote", url)
    line = _one_error(err)
    assert code == 2 and "$XLAKIT_CACHE_REMOTE_OPTIONS" in line and "--remote-options" not in line, line


def test_a_missed_deadline_is_still_said_as_one(folder, capsys, monkeypatch, tmp_path):
    from xlakit.store.remote import DeadlineExceeded

    def slow(self, partition=None):
        raise DeadlineExceeded("no answer in 30 s")

    monkeypatch.setattr(RemoteStore, "scan", slow)
    code, _, err = run(capsys, "cache", "stats", "--remote", (tmp_path / "bucket").as_uri())
    assert code == 2 and "the remote store did not answer" in err, err


def test_report_out_a_folder_names_out(folder, capsys, tmp_path):
    out_dir = tmp_path / "somedir"
    out_dir.mkdir()
    code, out, err = run(capsys, "report", "--out", str(out_dir), "--path", str(folder.root))
    line = _one_error(err)
    assert code == 2 and out == "" and line == (f"xlakit: error: --out {out_dir} is a folder; give the file to write, "
                                                f"e.g. --out {out_dir / 'report.html'}")
    assert list(out_dir.iterdir()) == []  # no temp left behind


def test_report_trace_and_events_name_their_option(folder, capsys, tmp_path):
    from xlakit.events import EventLog

    events = tmp_path / "events.jsonl"
    EventLog().save(events)
    code, _, err = run(capsys, "report", "--events", str(events), "--trace", str(tmp_path))
    assert code == 2 and _one_error(err).startswith(f"xlakit: error: --trace {tmp_path} is a folder"), err
    code, _, err = run(capsys, "report", "--events", str(tmp_path), "--trace", str(tmp_path / "t.json"))
    assert code == 2 and _one_error(err) == f"xlakit: error: --events {tmp_path}: Is a directory", err


# -- 3. ASCII digits only -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("age", ["３s", "٣s", "3\u0663", "１d", "٣"])
def test_an_age_in_non_ascii_digits_is_refused(folder, capsys, tmp_path, age):
    url = (tmp_path / "bucket").as_uri()
    code, out, err = run(capsys, "cache", "prune", "--remote", url, "--older-than", age, "--dry-run")
    assert code == 2 and out == "", out  # before: "Would delete 0 objects" (a prune without --dry-run deleted)
    assert _one_error(err) == (f"xlakit: error: --older-than: invalid age {age!r}: use a number in ASCII digits with "
                               "s, m, h, d or w, e.g. 30d or 12h")


def test_ages_and_counts_in_ascii_digits_still_read():
    assert parse_age("30d") == 30 * 86400 and parse_age(" 1.5h ") == 5400 and parse_age("3600") == 3600
    assert parse_age("2W") == 14 * 86400
    with pytest.raises(ValueError, match="too large"):
        parse_age("9" * 400)
    assert parse_int("4", "--workers") == 4 and parse_int(" -1 ", "--workers") == -1
    for text in ("３", "٣", "4.0", ""):
        with pytest.raises(ValueError, match="--workers: .* is not a whole number in ASCII digits"):
            parse_int(text, "--workers")
    with pytest.raises(ValueError, match="--workers: .* is too large \\(at most 18 digits\\)"):
        parse_int("1" * 19, "--workers")


def test_workers_in_non_ascii_digits_is_refused(folder, capsys, tmp_path):
    code, _, err = run(capsys, "bundle", "warm", str(tmp_path / "b"), "--workers", "３")
    assert code == 2 and "argument --workers: '３' is not a whole number in ASCII digits" in err, err


def test_an_age_in_ascii_digits_is_still_a_dry_run(folder, capsys, tmp_path):
    code, out, _ = run(capsys, "cache", "prune", "--remote", (tmp_path / "bucket").as_uri(), "--older-than", "3s",
                       "--dry-run")
    assert code == 0 and out.startswith("Would delete 0 objects"), out


# -- 4. an option given twice --------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,option", [
    (["cache", "prune", "--max-bytes", "100MB", "--max-bytes", "0"], "--max-bytes"),
    (["cache", "prune", "--max-bytes", "100MB", "--max-b", "0"], "--max-bytes"),  # an abbreviation is the same option
    (["cache", "prune", "--max-bytes=0", "--max-bytes=0"], "--max-bytes"),  # the same value twice too
    (["cache", "prune", "--remote", "file:///b", "--older-than", "30d", "--older-than", "0s"], "--older-than"),
    (["cache", "ls", "--path", "/elsewhere"], "--path"),
    (["cache", "ls", "--remote", "file:///a", "--remote", "file:///b"], "--remote"),
    (["cache", "ls", "--partition", PART, "--partition", "other"], "--partition"),
    (["cache", "verify", "--partition", PART, "--partition", "other"], "--partition"),
    (["cache", "clear", "--yes", "--partition", PART, "--partition", "other"], "--partition"),
    (["cache", "ls", "--sort", "size", "--sort", "name"], "--sort"),
    (["cache", "ls", "--remote", "file:///a", "--remote-mode", "rw", "--remote-mode", "ro"], "--remote-mode"),
    (["report", "--out", "a.html", "--out", "b.html"], "--out"),
])
def test_an_option_given_twice_is_refused_and_nothing_is_done(folder, capsys, argv, option):
    before = sorted(p.name for p in (folder.root / PART).iterdir())
    if argv[:2] == ["cache", "prune"] or argv[1] in ("ls", "verify", "clear"):
        argv = [*argv[:2], "--path", str(folder.root), *argv[2:]]
    code, out, err = run(capsys, *argv)
    line = _one_error(err)
    assert code == 2 and out == "", out
    assert line.startswith(f"xlakit: error: argument {option}: given more than once"), line
    assert "give it once; nothing was done" in line
    assert sorted(p.name for p in (folder.root / PART).iterdir()) == before  # before: prune evicted every entry


def test_storage_options_given_twice_are_refused_without_echoing_them(folder, capsys):
    code, _, err = run(capsys, "cache", "ls", "--remote", "file:///a", "--remote-options", '{"secret": "s3cr3t"}',
                       "--remote-options", "{}")
    line = _one_error(err)
    assert code == 2 and line.startswith("xlakit: error: argument --remote-options: given more than once; give it "
                                         "once"), line
    assert "s3cr3t" not in line


def test_a_flag_given_twice_is_harmless_and_the_namespace_has_no_bookkeeping(folder, capsys):
    code, out, _ = run(capsys, "cache", "ls", "--path", str(folder.root), "--json", "--json")
    assert code == 0 and json.loads(out)["count"] == 3
    from xlakit.cli import _build_parser

    args = _build_parser().parse_args(["cache", "prune", "--max-bytes", "1"])
    assert not any(name.startswith("_options") for name in vars(args))
