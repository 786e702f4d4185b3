"""The ``xlakit`` command line against a real store folder (no JAX needed)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from cli_helpers import run, run_json

from xlakit.cli import parse_size
from xlakit.store import LocalStore

REPO = Path(__file__).resolve().parent.parent
PA, PB = "cpu-jaxlib0.0.0-x86_64-avx2-aaaaaaaa", "gpu-sm90-jaxlib0.0.0-x86_64-avx512-bbbbbbbb"
ENV_A = {"jax_version": "0.0.0", "jaxlib_version": "0.0.0", "platform": "cpu",
         "device_kinds": ["cpu"], "device_count": 1}
ENTRIES = [  # (partition, key, name, compile_s, payload size)
    (PA, "key-a1", "jit_alpha", 1.5, 3000),
    (PA, "key-a2", "jit_beta", 2.0, 6000),
    (PB, "key-b1", "jit_gamma", 4.25, 9000),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("XLAKIT_CACHE_SECRET", raising=False)
    root = tmp_path / "cache"
    store = LocalStore(root)
    for i, (part, key, name, compile_s, size) in enumerate(ENTRIES):
        header = {"name": name, "compile_s": compile_s, "created": 1_700_000_000.0 + i,
                  "environment": dict(ENV_A), "key_parts": {"module": name},
                  "memory": {"argument_size_in_bytes": 64, "output_size_in_bytes": 32, "temp_size_in_bytes": 0}}
        assert store.put(part, key, header, os.urandom(size)).stored
        t = 1_700_000_100.0 + i  # distinct last-used times: key-a1 is the least recently used
        os.utime(store.entry_path(part, key).with_suffix(".used"), (t, t))
    store.write_partition_info(PA, ENV_A)
    return store


def test_ls_json_lists_every_entry_with_sizes(cache, capsys):
    code, data = run_json(capsys, "cache", "ls", "--path", str(cache.root))
    assert code == 0
    expected = {(i.partition, i.key): i for i in cache.entries()}
    got = {(e["partition"], e["key"]): e for e in data["entries"]}
    size_of = {k: size for _, k, _, _, size in ENTRIES}  # random payloads barely compress
    assert set(got) == {(p, k) for p, k, *_ in ENTRIES} == set(expected)
    for pk, e in got.items():
        assert e["size_bytes"] == expected[pk].size_bytes >= os.stat(e["path"]).st_size > size_of[pk[1]]
        assert e["name"] == expected[pk].name
        assert e["memory"]["argument_size_in_bytes"] == 64
    assert {e["name"]: e["compile_s"] for e in data["entries"]} == {n: c for _, _, n, c, _ in ENTRIES}
    assert data["count"] == 3
    assert data["total_bytes"] == sum(i.size_bytes for i in expected.values())
    # default order: most recently used first
    assert [e["key"] for e in data["entries"]] == ["key-b1", "key-a2", "key-a1"]


def test_ls_partition_filter_and_sort(cache, capsys):
    code, data = run_json(capsys, "cache", "ls", "--path", str(cache.root), "--partition", PA, "--sort", "name")
    assert code == 0
    assert [e["name"] for e in data["entries"]] == ["jit_alpha", "jit_beta"]
    assert {e["partition"] for e in data["entries"]} == {PA}
    code, data = run_json(capsys, "cache", "ls", "--path", str(cache.root), "--sort", "size")
    sizes = [e["size_bytes"] for e in data["entries"]]
    assert sizes == sorted(sizes, reverse=True) and data["entries"][0]["key"] == "key-b1"


def test_ls_table(cache, capsys):
    code, out, _ = run(capsys, "cache", "ls", "--path", str(cache.root))
    assert code == 0
    for _, _, name, _, _ in ENTRIES:
        assert name in out
    assert "3 entries" in out
    assert f"({sum(i.size_bytes for i in cache.entries())} bytes)" in out


def test_a_mistyped_path_is_an_error_not_an_empty_cache(cache, tmp_path, capsys):
    """`clear --path <typo>` once printed "Removed 0 entries" and exited 0, and `stats --path <typo>` printed an
    empty report with exit 0: a typo read as success. Every command that reads or changes the folder names the
    missing folder instead (exit 2), and creates nothing."""
    missing = tmp_path / "nothing-here"
    for argv in (("ls",), ("stats",), ("stats", "--json"), ("verify",), ("prune", "--max-bytes", "1MB"),
                 ("clear", "--yes")):
        code, out, err = run(capsys, "cache", *argv, "--path", str(missing))
        assert code == 2 and f"no cache folder at {missing}" in err and "a typo?" in err, argv
        assert out == "", argv
    assert not missing.exists()
    code, data = run_json(capsys, "cache", "ls", "--path", str(cache.root))  # the real folder still lists
    assert code == 0 and data["count"] == len(ENTRIES)


def test_stats_of_a_default_folder_not_created_yet_is_an_empty_report(tmp_path, monkeypatch, capsys):
    """Without --path, a folder that does not exist yet means nothing was cached: stats describes it (exit 0)."""
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "not-yet"))
    code, data = run_json(capsys, "cache", "stats")
    assert code == 0 and data["exists"] is False and data["entries"] == 0 and data["partitions"] == []
    assert not (tmp_path / "not-yet").exists()


def test_a_tilde_path_means_the_home_folder(cache, tmp_path, monkeypatch, capsys):
    """`--path=~/cache` (no shell expands `~` after `=`) named a folder literally called `~`."""
    monkeypatch.setenv("HOME", str(cache.root.parent))
    monkeypatch.chdir(tmp_path)
    code, data = run_json(capsys, "cache", "ls", f"--path=~/{cache.root.name}")
    assert code == 0 and data["folder"] == str(cache.root) and data["count"] == len(ENTRIES)
    assert not (tmp_path / "~").exists()


def test_unknown_partition_is_a_usage_error(cache, capsys):
    for cmd in (["ls"], ["verify"], ["clear", "--yes"]):
        code, _out, err = run(capsys, "cache", *cmd, "--path", str(cache.root), "--partition", "nope")
        assert code == 2, cmd
        assert "unknown partition 'nope'" in err and PA in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert len(cache.entries()) == 3


def test_stats_json(cache, capsys):
    Path(cache.root, "quarantine", PA).mkdir(parents=True)
    Path(cache.root, "quarantine", PA, "old.123.xlk").write_bytes(b"x" * 10)
    code, data = run_json(capsys, "cache", "stats", "--path", str(cache.root))
    assert code == 0
    assert data["folder"] == str(cache.root)
    assert data["total_bytes"] == cache.total_bytes()
    assert data["entries"] == 3
    assert data["compile_s"] == pytest.approx(1.5 + 2.0 + 4.25)
    assert data["quarantined"] == 1
    parts = {p["name"]: p for p in data["partitions"]}
    assert set(parts) == {PA, PB}
    assert parts[PA]["entries"] == 2 and parts[PB]["entries"] == 1
    assert parts[PA]["bytes"] == sum(i.size_bytes for i in cache.entries(PA))
    assert parts[PA]["environment"]["jaxlib_version"] == "0.0.0"
    assert parts[PA]["environment"]["device_kinds"] == ["cpu"]
    assert parts[PB]["environment"] is None
    code, out, _ = run(capsys, "cache", "stats", "--path", str(cache.root))
    assert code == 0 and PA in out and "jaxlib 0.0.0" in out


def test_verify_clean_then_corrupt(cache, capsys):
    code, out, _ = run(capsys, "cache", "verify", "--path", str(cache.root))
    assert code == 0 and "3 entries verified" in out

    victim = cache.entry_path(PA, "key-a2")
    blob = bytearray(victim.read_bytes())
    blob[-5] ^= 0xFF  # inside the compressed payload
    victim.write_bytes(bytes(blob))

    code, out, _ = run(capsys, "cache", "verify", "--path", str(cache.root))
    assert code == 1
    assert "jit_beta" in out and "quarantine" in out and "SHA-256" in out
    assert not victim.exists()
    moved = list(Path(cache.root, "quarantine", PA).glob("*.xlk"))
    assert len(moved) == 1 and moved[0].name.startswith("key-a2.")
    assert {i.key for i in cache.entries()} == {"key-a1", "key-b1"}

    code, data = run_json(capsys, "cache", "verify", "--path", str(cache.root))
    assert code == 0 and data["verified"] == 2 and data["bad"] == []


def test_verify_json_reports_bad_entry(cache, capsys):
    victim = cache.entry_path(PB, "key-b1")
    blob = bytearray(victim.read_bytes())
    blob[-1] ^= 0x01
    victim.write_bytes(bytes(blob))
    code, data = run_json(capsys, "cache", "verify", "--path", str(cache.root), "--partition", PB)
    assert code == 1
    assert data["verified"] == 1 and data["ok"] == 0
    assert [b["key"] for b in data["bad"]] == ["key-b1"] and data["bad"][0]["quarantined"] is True
    assert data["bad"][0]["reason"].startswith("corrupt:")


def test_prune(cache, capsys):
    before = cache.total_bytes()
    sizes = {i.key: i.size_bytes for i in cache.entries()}
    limit = before - sizes["key-a1"] // 2  # must evict at least the least recently used entry
    code, data = run_json(capsys, "cache", "prune", "--path", str(cache.root), "--max-bytes", str(limit))
    assert code == 0
    assert cache.total_bytes() <= limit
    assert data["bytes_after"] == cache.total_bytes() and data["max_bytes"] == limit
    evicted = [e["key"] for e in data["evicted"]]
    assert evicted and evicted[0] == "key-a1"
    assert {i.key for i in cache.entries()} == {k for k in sizes if k not in evicted}

    # partition.json is not evictable, so 0 bytes cannot be reached: everything else goes, with a warning
    code, out, err = run(capsys, "cache", "prune", "--path", str(cache.root), "--max-bytes", "0")
    assert code == 0 and cache.entries() == []
    assert out.count("evicted ") == 3 - len(evicted) and "Evicted" in out
    assert "still over the limit" in err


@pytest.mark.parametrize("text,expected", [("123", 123), ("10k", 10_000), ("500MB", 500_000_000),
                                           ("2GiB", 2 * 2**30), ("1.5 kib", 1536), ("0", 0)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["abc", "-5", "10 parsecs", "", "9" * 400, "1" * 5000 + ".5GiB"])
def test_prune_bad_max_bytes(cache, capsys, bad):
    code, out, err = run(capsys, "cache", "prune", "--path", str(cache.root), "--max-bytes", bad)
    assert code == 2
    assert out == ""
    assert "--max-bytes" in err and ("e.g. 500MB" in err or "more than the largest xlakit accepts" in err), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and len(err) < 400
    assert len(cache.entries()) == 3


def test_numbers_too_large_name_their_setting_everywhere(bucket, capsys, monkeypatch):
    """Fault: 400 digits gave a bare OverflowError (int(float(...)) of inf), or an infinite age, wait or deadline
    accepted. Each is now a one-line error naming the setting."""
    from xlakit.cache.coordinated import ENV_WAIT_S, CoordinatedCompiles
    from xlakit.store.remote import remote_timeout_s

    url, _ = bucket
    huge = "9" * 400
    for flag, value in (("--max-bytes", huge), ("--older-than", huge + "d"), ("--older-than", "99999999999d")):
        code, out, err = run(capsys, "cache", "prune", "--remote", url, flag, value)
        assert code == 2 and out == "" and err.startswith(f"xlakit: error: {flag}: ") and len(err) < 400, err
    with pytest.raises(ValueError, match="timeout_s must be a finite number of seconds > 0"):
        remote_timeout_s(10**400)
    monkeypatch.setenv(ENV_WAIT_S, "1e999")
    with pytest.raises(ValueError, match=f"{ENV_WAIT_S} must be a finite number of seconds >= 0"):
        CoordinatedCompiles(None, None, None)
    # Finite but past what a clock can wait for: a 1e10 s deadline passed, then every remote read failed inside
    # threading.Event.wait ("OverflowError: timestamp out of range for platform time_t") and the remote went off.
    with pytest.raises(ValueError, match=r"timeout_s must be .* at most 1e\+09"):
        remote_timeout_s(1e10)
    monkeypatch.setenv(ENV_WAIT_S, "1e10")
    with pytest.raises(ValueError, match=f"{ENV_WAIT_S} must be .* at most"):
        CoordinatedCompiles(None, None, None)


def test_clear_one_partition(cache, capsys):
    code, data = run_json(capsys, "cache", "clear", "--path", str(cache.root), "--partition", PA, "--yes")
    assert code == 0 and data["removed"] == 2
    assert [i.key for i in cache.entries()] == ["key-b1"]
    code, out, _ = run(capsys, "cache", "clear", "--path", str(cache.root), "--yes")
    assert code == 0 and "Removed 1 entries" in out
    assert cache.entries() == []


def test_clear_refuses_without_yes_when_stdin_is_a_pipe(cache, capsys, monkeypatch):
    # a script piping "n" (or anything) must not be taken as consent: nothing is asked, nothing removed
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, out, err = run(capsys, "cache", "clear", "--path", str(cache.root))
    assert code == 2 and out == ""
    assert "--yes" in err and "nothing removed" in err
    assert len(cache.entries()) == 3


class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_clear_asks_on_a_tty(cache, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _FakeTTY("n\n"))
    code, out, err = run(capsys, "cache", "clear", "--path", str(cache.root), "--partition", PB)
    assert code == 1 and "Remove 1 entries" in err and "nothing removed" in err
    assert len(cache.entries()) == 3
    monkeypatch.setattr(sys, "stdin", _FakeTTY("y\n"))
    code, out, err = run(capsys, "cache", "clear", "--path", str(cache.root), "--partition", PB)
    assert code == 0 and "Removed 1 entries" in out
    assert {i.partition for i in cache.entries()} == {PA}


def test_ls_shows_unreadable_entries(cache, capsys):
    Path(cache.root, PA, "junk.xlk").write_bytes(b"not an envelope")
    code, data = run_json(capsys, "cache", "ls", "--path", str(cache.root), "--partition", PA)
    assert code == 0 and data["count"] == 3
    [junk] = [e for e in data["entries"] if e["name"] is None]
    assert junk["key"] == "junk" and "magic" in junk["error"]


def test_a_folder_flooded_with_junk_lists_verifies_and_prunes_in_a_few_lines(cache, capsys, tmp_path):
    """Fault: `ls` printed one table row per unreadable file and `prune` one line per evicted one (20,000 junk files:
    40,014 and 19,991 lines), and `verify --json` counted entries it skipped as ok. The authenticated entries are
    listed; the rest are counted with examples, every one in --json."""
    for i in range(30):
        Path(cache.root, PA, f"junk{i}.xlk").write_bytes(b"not an envelope")
    theirs = LocalStore(cache.root, secret=b"another user's secret, 32 bytes")
    assert theirs.put(PB, "theirs", {"name": "jit_theirs"}, b"x").stored
    code, out, _ = run(capsys, "cache", "ls", "--path", str(cache.root))
    lines = out.splitlines()
    assert code == 0 and len(lines) < 20 and all(name in out for _, _, name, _, _ in ENTRIES)
    assert ("unreadable 31 entries not listed (their header does not authenticate with this key): 30 damaged or not "
            "an entry, 1 foreign; --json lists them all") in lines
    assert lines[-1].startswith("34 entries, ") and lines[-1].endswith("; 31 of them unreadable")
    assert run_json(capsys, "cache", "ls", "--path", str(cache.root))[1]["count"] == 34
    code, data = run_json(capsys, "cache", "verify", "--path", str(cache.root), "--partition", PB)
    assert code == 0 and data["verified"] == 2 and data["ok"] == 1 and len(data["skipped"]) == 1
    for i in range(30):
        Path(cache.root, PA, f"junk{i}.xlk").write_bytes(b"not an envelope")  # verify quarantined none of PA
    code, out, err = run(capsys, "cache", "prune", "--path", str(cache.root), "--max-bytes", "1")
    lines = out.splitlines()
    assert code == 0 and len(lines) < 15 and len(err.splitlines()) < 10, (lines, err)
    # files that are not provably the store's (no entry name, no magic, no use mark) are never deleted, even in a
    # partition: a user's notes.xlk is lost otherwise (a red team's finding); they are named, a few, and counted
    assert sum(line.startswith("evicted ") for line in lines) == 3 and "jit_alpha" in lines[0], lines
    assert "30 files named like entries left alone" in err, err
    assert all(Path(cache.root, PA, f"junk{i}.xlk").exists() for i in range(30))


def test_where(cache, capsys, tmp_path):
    code, data = run_json(capsys, "cache", "where", "--path", str(cache.root))
    assert code == 0
    assert data == {"folder": str(cache.root), "exists": True, "from": "--path",
                    "fingerprint_memo": os.path.join(os.environ["XLAKIT_FINGERPRINT_MEMO_DIR"],
                                                     "jaxlib_fingerprints.json"),
                    "secret": str(tmp_path / "config" / "secret")}
    code, out, _ = run(capsys, "cache", "where", "--path", str(tmp_path / "x"))
    assert code == 0 and str(tmp_path / "x") in out and "does not exist" in out


def test_where_says_which_setting_chose_the_folder(capsys, monkeypatch, tmp_path):
    """A newcomer saw a folder and could not tell whether a variable or the default chose it."""
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "from-env"))
    code, out, _ = run(capsys, "cache", "where")
    assert code == 0 and f"{tmp_path / 'from-env'} (does not exist yet; from $XLAKIT_CACHE_DIR)" in out
    monkeypatch.delenv("XLAKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, data = run_json(capsys, "cache", "where")
    assert code == 0 and data["folder"] == str(tmp_path / "xdg" / "xlakit")
    assert data["from"] == "the user cache folder"


def test_where_refuses_a_file_and_names_an_unusable_memo_folder(capsys, monkeypatch, tmp_path):
    """`cache where` called a file a folder that "does not exist yet" and exited 0; a memo folder that is a file
    was ignored in silence (every process then hashes jaxlib)."""
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(tmp_path / "afile"))
    code, _out, err = run(capsys, "cache", "where")
    assert code == 2 and "is a file, not a folder" in err and "from $XLAKIT_CACHE_DIR" in err
    code, _out, err = run(capsys, "cache", "stats")
    assert code == 2 and "from $XLAKIT_CACHE_DIR" in err
    monkeypatch.setenv("XLAKIT_FINGERPRINT_MEMO_DIR", str(tmp_path / "afile"))
    code, out, _ = run(capsys, "cache", "where", "--path", str(tmp_path / "c"))
    assert code == 0 and "from $XLAKIT_FINGERPRINT_MEMO_DIR" in out and "is not a folder: no memo is kept" in out


def test_path_defaults_to_env(cache, capsys, monkeypatch):
    monkeypatch.setenv("XLAKIT_CACHE_DIR", str(cache.root))
    code, data = run_json(capsys, "cache", "ls")
    assert code == 0 and data["folder"] == str(cache.root) and data["count"] == 3


def test_path_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, _out, err = run(capsys, "cache", "ls", "--path", str(f))
    assert code == 2 and "not a folder" in err and len(err.strip().splitlines()) == 1


def test_version_and_usage(capsys):
    from xlakit import __version__

    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out
    code, _, err = run(capsys, "cache", "frobnicate")
    assert code == 2 and "invalid choice" in err and "Traceback" not in err
    code, _, err = run(capsys, "cache", "prune")
    assert code == 2 and "--max-bytes" in err


def _subprocess_env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["XLAKIT_CONFIG_DIR"] = str(tmp_path / "config")
    return env


def test_module_entry_point_and_no_jax(cache, tmp_path):
    env = _subprocess_env(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "xlakit.cli", "cache", "ls", "--path", str(cache.root), "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert {e["key"] for e in json.loads(proc.stdout)["entries"]} == {k for _, k, *_ in ENTRIES}

    proc = subprocess.run([sys.executable, "-m", "xlakit.cli", "cache", "ls", "--path", str(cache.root)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "jit_gamma" in proc.stdout and "3 entries" in proc.stdout

    proc = subprocess.run([sys.executable, "-m", "xlakit", "cache", "ls", "--path", str(cache.root), "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr  # `python -m xlakit` is the CLI too
    assert len(json.loads(proc.stdout)["entries"]) == len(ENTRIES)

    proc = subprocess.run([sys.executable, "-c", "import xlakit.cli, sys; print('jax' in sys.modules)"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"

    proc = subprocess.run([sys.executable, "-m", "xlakit.cli", "cache", "prune", "--max-bytes", "abc",
                           "--path", str(cache.root)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# -- hostile and mistaken folders ----------------------------------------------------------------------


def _strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("field", [b'"created":NaN', b'"created":1e308', b'"compile_s":Infinity',
                                   b'"created":' + b"9" * 400])
def test_listings_survive_any_header_value(cache, capsys, field):
    """Values JSON allows but no table or JSON output can show: every listing exits 0 with valid JSON."""
    import struct

    hdr = b"{" + field + b"}"
    Path(cache.root, PA, "x.xlk").write_bytes(b"XLAKIT\x00\x01" + struct.pack(">I", len(hdr)) + hdr + bytes(32))
    os.utime(Path(cache.root, PA, "key-a1.used"), (1e11, 1e11))  # a last-use time far in the future
    for cmd in (["ls"], ["stats"]):
        code, _, err = run(capsys, "cache", *cmd, "--path", str(cache.root))
        assert code == 0, err
        code, out, err = run(capsys, "cache", *cmd, "--path", str(cache.root), "--json")
        assert code == 0, err
        _strict_json(out)
    code, out, _ = run(capsys, "cache", "ls", "--path", str(cache.root), "--json")
    [x] = [e for e in _strict_json(out)["entries"] if e["key"] == "x"]
    assert x["name"] is None and "older xlakit format" in x["error"] and x["created"] is None


def test_json_output_never_holds_nan(capsys):
    from xlakit.cli import _emit_json

    _emit_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert _strict_json(capsys.readouterr().out) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


@pytest.mark.parametrize("cmd", [["clear", "--yes"], ["prune", "--max-bytes", "1"], ["verify"]])
def test_destructive_commands_refuse_a_folder_that_is_not_a_cache(tmp_path, capsys, cmd, monkeypatch):
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "config"))
    proj = tmp_path / "project"
    (proj / "results").mkdir(parents=True)
    (proj / "README.md").write_text("keep")
    (proj / "results" / "run1.used").write_text("data")
    code, out, err = run(capsys, "cache", *cmd, "--path", str(proj))
    assert code == 2 and out == ""
    assert f"{proj} is not an xlakit cache folder" in err and "nothing was deleted" in err
    assert sorted(p.name for p in proj.rglob("*")) == ["README.md", "results", "run1.used"]


def test_verify_skips_entries_of_another_key(cache, capsys, tmp_path):
    other = LocalStore(cache.root, secret=b"another-user-secret-of-32-bytes!")
    assert other.put(PA, "theirs", {"name": "jit_theirs"}, b"x").stored
    code, data = run_json(capsys, "cache", "verify", "--path", str(cache.root))
    assert code == 0 and data["bad"] == []
    assert [s["key"] for s in data["skipped"]] == ["theirs"] and "another key" in data["skipped"][0]["reason"]
    assert Path(cache.root, PA, "theirs.xlk").exists()
    for i in range(11):  # past ten: a count and three examples, not one line each
        assert other.put(PA, f"theirs{i}", {"name": "jit_theirs"}, b"x").stored
    code, out, _ = run(capsys, "cache", "verify", "--path", str(cache.root))
    assert code == 0 and out.splitlines()[0] == ("SKIPPED 12 entries skipped (left in place): 12 foreign; --json lists "
                                                 "them all") and "... and 9 more foreign" in out
    assert len(out.splitlines()) == 6


# -- the shared bucket (--remote URL), on a file:// remote (the S3 listing itself is tested in test_store_remote)

@pytest.fixture
def bucket(cache, tmp_path):
    """Three good objects, one tampered, one signed with another key, in a file:// remote."""
    from xlakit.cache.remote import SharedStore
    from xlakit.store import seal
    from xlakit.store.remote import RemoteStore

    url = f"file://{tmp_path / 'bucket'}"
    shared = SharedStore(tmp_path / "machine", remote=url)
    with shared.sync_uploads():
        for part, key, name, compile_s, size in ENTRIES:
            assert shared.put(part, key, {"name": name, "compile_s": compile_s}, os.urandom(size)).stored
        assert shared.put(PA, "key-bad", {"name": "jit_bad"}, b"x" * 500).stored
    shared.close()
    remote = RemoteStore(url)
    path = Path(remote.object_name(PA, "key-bad"))
    blob = bytearray(path.read_bytes())
    blob[-3] ^= 0xFF
    path.chmod(0o600)
    path.write_bytes(bytes(blob))
    foreign = seal({"name": "jit_theirs", "key": "key-theirs", "partition": PA}, b"y" * 100, b"another team's secret")
    assert remote.put(PA, "key-theirs", foreign)
    return url, remote


def test_remote_ls_and_stats_from_one_listing(bucket, capsys):
    """Fault: --remote is ignored and the local folder is listed instead."""
    url, remote = bucket
    code, data = run_json(capsys, "cache", "ls", "--remote", url)
    assert code == 0 and data["count"] == 5
    assert {o["key"] for o in data["objects"]} == {"key-a1", "key-a2", "key-b1", "key-bad", "key-theirs"}
    assert data["total_bytes"] == sum(o.size_bytes for o in remote.list())
    code, stats = run_json(capsys, "cache", "stats", "--remote", url)
    assert code == 0 and stats["count"] == 5 and stats["partitions"][PB]["count"] == 1


def test_remote_verify_reports_then_fix_deletes_only_bad_objects(bucket, capsys):
    """Fault: a tampered object goes unreported, or --fix deletes another team's object, or deletes in ro mode."""
    url, remote = bucket
    code, data = run_json(capsys, "cache", "verify", "--remote", url)
    assert code == 1 and [b["key"] for b in data["bad"]] == ["key-bad"] and "HMAC mismatch" in data["bad"][0]["reason"]
    assert [s["key"] for s in data["skipped"]] == ["key-theirs"] and data["ok"] == 3
    code, _out, err = run(capsys, "cache", "verify", "--remote", url, "--fix", "--remote-mode", "ro")
    assert code == 2 and "ro" in err and remote.stat(PA, "key-bad") is not None
    code, data = run_json(capsys, "cache", "verify", "--remote", url, "--fix")
    assert code == 1 and data["bad"][0]["deleted"] is True
    assert remote.stat(PA, "key-bad") is None and remote.stat(PA, "key-theirs") is not None
    assert run_json(capsys, "cache", "verify", "--remote", url)[0] == 0


def test_remote_prune_by_age_then_size(bucket, capsys):
    """Fault: prune ignores creation times or the byte bound."""
    url, remote = bucket
    old = Path(remote.object_name(PA, "key-a1"))
    t = old.stat().st_mtime - 40 * 86400
    os.utime(old, (t, t))
    code, data = run_json(capsys, "cache", "prune", "--remote", url, "--older-than", "30d", "--dry-run")
    assert code == 0 and [d["key"] for d in data["deleted"]] == ["key-a1"] and remote.stat(PA, "key-a1")
    code, data = run_json(capsys, "cache", "prune", "--remote", url, "--older-than", "30d")
    assert [d["key"] for d in data["deleted"]] == ["key-a1"] and remote.stat(PA, "key-a1") is None
    # the bound is over this key's objects: another team's object is neither counted nor deleted
    left = sum(o.size_bytes for o in remote.list() if o.key != "key-theirs")
    code, data = run_json(capsys, "cache", "prune", "--remote", url, "--max-bytes", str(left - 1))
    assert code == 0 and len(data["deleted"]) == 1 and data["other_key"] == 1
    assert sum(o.size_bytes for o in remote.list() if o.key != "key-theirs") <= left - 1
    code, _out, err = run(capsys, "cache", "prune", "--remote", url)
    assert code == 2 and "--older-than" in err
    code, _out, err = run(capsys, "cache", "prune", "--remote", url, "--older-than", "soon")
    assert code == 2 and "30d" in err


def test_remote_output_stays_bounded_under_a_hostile_bucket(bucket, capsys):
    """Fault: one `note:` line per junk name (20,000 names gave 20,000 lines), one SKIPPED or BAD line per junk
    object. Now 2,000 junk names, 40 plain files and 40 forged envelopes at object names: each command prints a
    count per kind and a few examples (control characters escaped), and --json still lists every one."""
    from xlakit.store.envelope import MAGIC

    url, remote = bucket
    part = Path(remote.object_name(PA, "key-a1")).parent
    for i in range(2000):
        (part / f"junk {i};\x1b[31m").write_bytes(b"")
    for i in range(40):
        (part / f"key-plain{i}").write_bytes(b"not an envelope")
        (part / f"key-forged{i}").write_bytes(MAGIC + b"\0" * 200)
    for cmd in (["ls"], ["stats"], ["verify"], ["prune", "--older-than", "999d", "--dry-run"]):
        code, out, err = run(capsys, "cache", *cmd, "--remote", url)
        lines = (out + err).splitlines()
        assert len(lines) < 40 or cmd == ["ls"], (cmd, len(lines), lines[:50])
        assert [line for line in err.splitlines() if line.startswith("note: ")][:1] == [
            "note: 2000 names left alone: 2000 not an xlakit object name (left alone); --json lists them all "
            "(left_alone)"], cmd
        assert "\x1b" not in out + err and "\\x1b" in err  # the escape character is shown, never sent
        code, data = run_json(capsys, "cache", *cmd, "--remote", url)
        assert len(data["left_alone"]) == 2000 and data["left_alone"][0]["why"].startswith("not an xlakit object")
    code, out, _ = run(capsys, "cache", "verify", "--remote", url)
    assert code == 1 and "SKIPPED 81 objects skipped (left in place): 41 foreign, 40 not-xlakit; --json lists them " \
        "all" in out and "... and 38 more foreign" in out and "... and 37 more not-xlakit" in out
    assert "BAD cpu-jaxlib0.0.0-x86_64-avx2-aaaaaaaa [key-bad]" in out  # one bad object: shown as it is
    code, data = run_json(capsys, "cache", "verify", "--remote", url)
    assert len(data["bad"]) == 1 and len(data["skipped"]) == 81


def test_report_into_a_missing_folder_says_to_create_it(cache, tmp_path, capsys):
    """The report's output folder, not the cache folder, is what is missing: the message says so."""
    out = tmp_path / "no-such-dir" / "r.html"
    code, _out, err = run(capsys, "report", "--out", str(out), "--path", str(cache.root))
    assert code == 2 and "does not exist; create it first" in err and "--path" not in err
    assert not out.parent.exists()


def test_a_users_own_folder_beside_the_partitions_is_neither_cleared_nor_another_environment(cache, capsys):
    """Fault: `cache clear --partition mystuff` deleted a user's mystuff/x.xlk (a name ending like an entry's,
    not an xlakit entry) in a cache folder, and the folder's own logs/ were called "another environment"."""
    from xlakit.cache.path import CachePath
    from xlakit.events import EventLog

    own = cache.root / "mystuff"
    own.mkdir()
    (own / "x.xlk").write_text("p2")
    (own / "data.txt").write_text("keep")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        CachePath(cache, EventLog())._tell_new_environment("cpu-jaxlib9.9.9-x86_64-avx2-cccccccc")
    told = [str(w.message) for w in seen if "other environment" in str(w.message)]
    assert len(told) == 1 and "2 other environment(s)" in told[0] and "mystuff" not in told[0], told
    code, _, err = run(capsys, "cache", "clear", "--path", str(cache.root), "--partition", "mystuff", "--yes")
    assert code == 2 and "unknown partition 'mystuff'" in err
    code, out, _ = run(capsys, "cache", "clear", "--path", str(cache.root), "--yes")
    assert code == 0 and "Removed 3 entries" in out and {i.partition for i in cache.entries()} == {"mystuff"}
    assert (own / "x.xlk").read_text() == "p2" and (own / "data.txt").read_text() == "keep"


def test_stats_of_a_folder_and_a_bucket_flooded_with_partitions_stay_short(cache, bucket, capsys):
    """Fault: one line per partition, so 20,000 junk partition folders (or bucket prefixes) printed 20,000 lines,
    and the local count scanned every entry once per partition (118 s for 20,000). The largest 20 are shown,
    the real ones first, and --json lists them all."""
    url, remote = bucket
    bucket_root = Path(remote.object_name(PA, "key-a1")).parent.parent
    for i in range(30):
        junk = f"cpu-jaxlib0.0.0-x86_64-junk{i:03d}-0000000{i % 10}"
        Path(cache.root, junk).mkdir()
        Path(cache.root, junk, f"k{i}.xlk").write_bytes(b"x")
        Path(bucket_root, junk).mkdir()
        Path(bucket_root, junk, f"k{i}").write_bytes(b"x")
    code, out, _ = run(capsys, "cache", "stats", "--path", str(cache.root))
    assert code == 0 and "Partitions (the 20 largest of 32; --json lists them all)" in out
    rows = out.split("Partitions")[1].splitlines()[3:]
    assert len(rows) == 20 and {rows[0].split()[0], rows[1].split()[0]} == {PA, PB}
    code, data = run_json(capsys, "cache", "stats", "--path", str(cache.root))
    assert len(data["partitions"]) == 32
    code, out, _ = run(capsys, "cache", "stats", "--remote", url)
    lines = [line for line in out.splitlines() if line.startswith("partition")]
    assert code == 0 and len(lines) == 21
    assert lines[-1] == "partition   ... and 12 more, smaller (--json lists them all)"
    assert {lines[0].split()[1], lines[1].split()[1]} == {f"{PA}:", f"{PB}:"}
    code, data = run_json(capsys, "cache", "stats", "--remote", url)
    assert len(data["partitions"]) == 32
