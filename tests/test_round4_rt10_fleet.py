"""The shared tier and JAX's own cache, told truthfully (red team, round 10).

Faults these tests catch: a bucket that does not exist read as an empty cache (``cache ls/stats/verify/prune
--remote s3://typo/...`` exited 0, "Deleted 0 objects"; so did ``file:///nonexistent/x``); after an object was
refused, the upload that found its name taken said "already existed (another process uploaded it first)" — the
program could never be shared again, and nothing said so — and a bucket refusing every upload warned nobody;
``cache prune --remote`` printed one line per object (300 objects, 301 lines); ``--remote-options null`` was taken
as "not given" and fell back to ``$XLAKIT_CACHE_REMOTE_OPTIONS``; ``jax_compilation_cache_dir`` set *after*
``enable_cache()`` was set aside without a word, and the paths JAX then puts in the compile options entered the
key, so every stored program missed.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
import warnings

import pytest
from cli_helpers import run
from fresh_process import run as run_process
from s3_server import s3_server  # noqa: F401  (fixture)

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlakit  # noqa: E402
from xlakit import events  # noqa: E402

SECRET = "rt10-secret-0123456789abcdef"
PARTITION = "cpu-jaxlib0.10.2-x86_64-avx512-e59573ea"


@pytest.fixture
def team(monkeypatch, tmp_path):
    monkeypatch.setenv("XLAKIT_CACHE_SECRET", SECRET)
    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("XLAKIT_CACHE_REMOTE_OPTIONS", raising=False)
    return tmp_path


@pytest.mark.parametrize("command", [["ls"], ["stats"], ["verify"], ["prune", "--older-than", "30d"]])
def test_a_bucket_that_does_not_exist_is_an_error_naming_remote(capsys, team, s3_server, command):  # noqa: F811
    code, out, err = run(capsys, "cache", *command, "--remote", "s3://no-such-bucket-rt10/cache",
                         "--remote-options", json.dumps(s3_server.storage_options()))
    assert code == 2 and out == ""
    assert "--remote s3://no-such-bucket-rt10/cache: the bucket 'no-such-bucket-rt10' does not exist" in err
    # a prefix not written yet in a bucket that is there: an empty cache, not an error
    code, out, err = run(capsys, "cache", *command, "--remote", s3_server.url(f"fresh-{uuid.uuid4().hex[:8]}"),
                         "--remote-options", json.dumps(s3_server.storage_options()))
    assert code == 0, err


def test_a_file_remote_under_a_missing_folder_is_an_error(capsys, team):
    missing = team / "not-mounted" / "cache"
    code, _out, err = run(capsys, "cache", "ls", "--remote", missing.as_uri())
    assert code == 2 and f"the folder {missing.parent} above the remote prefix does not exist" in err
    (team / "mounted").mkdir()
    code, out, _err = run(capsys, "cache", "ls", "--remote", (team / "mounted" / "cache").as_uri())
    assert code == 0 and "No objects" in out


def test_remote_options_null_is_refused_not_taken_as_absent(capsys, team, monkeypatch):
    monkeypatch.setenv("XLAKIT_CACHE_REMOTE_OPTIONS", '{"auto_mkdir": true}')
    (team / "bucket").mkdir()
    code, _out, err = run(capsys, "cache", "stats", "--remote", (team / "bucket").as_uri(), "--remote-options", "null")
    assert code == 2 and "--remote-options: not a JSON object" in err


def test_remote_prune_prints_counts_and_examples_past_ten_objects(capsys, team):
    from xlakit.store.envelope import seal
    from xlakit.store.remote import RemoteStore

    bucket = (team / "bucket").as_uri()
    store = RemoteStore(bucket)
    for i in range(30):
        key = f"jit_step{i}-{i:064x}"
        assert store.put(PARTITION, key, seal({"partition": PARTITION, "key": key, "name": f"jit_step{i}"},
                                              os.urandom(64), SECRET.encode()))
    for extra, verb in (["--dry-run"], "would delete"), ([], "deleted"):
        code, out, _err = run(capsys, "cache", "prune", "--remote", bucket, "--older-than", "0s", *extra)
        lines = out.splitlines()
        assert code == 0 and len(lines) == 6, out  # the count by partition, three examples, "and 27 more", the total
        assert lines[0] == f"{verb} 30 objects: 30 {PARTITION}; --json lists them all"
        assert lines[-1].startswith(f"{verb.capitalize()} 30 objects")


def test_an_upload_blocked_by_a_refused_object_says_so_and_warns_once(team):
    bucket = (team / "bucket").as_uri()

    def f(x):
        return jnp.sin(x) * 3

    xlakit.enable_cache(team / "machine-a", remote=bucket)
    jax.jit(f)(jnp.ones(4)).block_until_ready()
    xlakit.disable_cache()  # drains the upload
    (obj,) = [p for p in (team / "bucket").rglob("jit_f-*") if p.is_file()]
    blob = bytearray(obj.read_bytes())
    blob[-1] ^= 0xFF  # the attacker flips a payload byte
    obj.chmod(0o644)
    obj.write_bytes(bytes(blob))
    jax.clear_caches()
    with events.record() as rec, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xlakit.enable_cache(team / "machine-b", remote=bucket)
        assert float(jax.jit(f)(jnp.ones(4)).sum()) == pytest.approx(4 * 3 * float(jnp.sin(1.0)))
        xlakit.disable_cache()
    cache_kinds = ("corrupt", "remote_miss", "miss", "compile", "store", "upload", "upload_error")
    kinds = [e.kind for e in rec.events() if e.name == "jit_f" and e.kind in cache_kinds]
    assert kinds[:1] == ["corrupt"] and "upload" not in kinds and kinds[-1] == "upload_error"
    (failed,) = rec.events("upload_error")
    assert failed.reason.startswith("not uploaded: the name is held by an object this process refused "
                                    "(unauthenticated: HMAC mismatch")
    assert f"xlakit cache verify --remote {bucket} --fix" in failed.reason
    told = [str(w.message) for w in caught if "could not upload a program" in str(w.message)]
    assert len(told) == 1 and "this is the only warning" in told[0]


CHILD = r"""
import json, sys, warnings
caught = []
warnings.showwarning = lambda m, *a, **k: caught.append(str(m))
warnings.simplefilter("always")
import jax, jax.numpy as jnp, xlakit
xlakit.enable_cache(sys.argv[1])
if sys.argv[2]:
    jax.config.update("jax_compilation_cache_dir", sys.argv[2])
def f(x):
    return jnp.sin(x) @ x.T + 1
r = float(jax.jit(f)(jnp.ones((8, 8))).sum())
xlakit.disable_cache()
frame = xlakit.events.log().to_frame()
print(json.dumps({"kinds": [k for k, n in zip(frame["kind"], frame["name"]) if n == "jit_f"],
                  "set_aside": [str(f) for k, f in zip(frame["kind"], frame["folder"]) if k == "set_aside"],
                  "warned": [w for w in caught if sys.argv[2] and sys.argv[2] in w],
                  "after_disable": jax.config.jax_compilation_cache_dir, "result": r}))
"""


def test_jax_cache_folder_set_after_enable_cache_is_told_and_keeps_keys(team):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)

    def child(jax_dir: str) -> dict:
        done = run_process([sys.executable, "-c", CHILD, str(team / "xlakit"), jax_dir], env=env,
                           capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = child("")
    folder = str(team / "jax-own")
    second = child(folder)
    assert first["kinds"] == ["miss", "compile", "store"] and second["kinds"] == ["hit"]
    assert second["result"] == first["result"]
    assert second["set_aside"] == [folder] and len(second["warned"]) == 1
    assert second["after_disable"] == folder  # disable_cache() hands the user's later setting back
    assert not os.path.exists(folder)  # nothing was written there


def test_report_out_below_a_file_and_an_events_file_of_one_bad_line_are_refused(capsys, team):
    (team / "notes.txt").write_text("mine")
    code, _out, err = run(capsys, "report", "--out", str(team / "notes.txt" / "x.html"))
    assert code == 2 and f"{team / 'notes.txt'} is a file, not a folder" in err
    assert (team / "notes.txt").read_text() == "mine"
    (team / "events.jsonl").write_text("not json\n")
    code, _out, err = run(capsys, "report", "--out", str(team / "r.html"), "--events", str(team / "events.jsonl"))
    assert code == 2 and "events.jsonl:1: not an xlakit event" in err
    assert not (team / "r.html").exists()


def test_enable_cache_on_jaxs_own_folder_does_not_claim_nothing_is_written_there(team):
    folder = team / "shared-folder"
    jax.config.update("jax_compilation_cache_dir", str(folder))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            xlakit.enable_cache(folder)
            xlakit.disable_cache()
        (told,) = [str(w.message) for w in caught if "set aside" in str(w.message)]
        assert "xlakit keeps its own entries in this folder too" in told and "nothing is written there" not in told
        assert jax.config.jax_compilation_cache_dir == str(folder)  # handed back
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
